//! Edits of the agent's own files ([`AgentFile`]: the banhub action, its notifier, the probe
//! jail and the attachment of the action to every jail), for `banhub-agent install-action` and
//! `uninstall-action`.
//!
//! Same guarantees as every other edit (the lock, `fail2ban-client -t` on a shadow, atomic
//! rename, health check, rollback), with two differences:
//! * fail2ban may be stopped: the files are then validated and written, and fail2ban reads them
//!   when it starts ([`AgentEditReport::fail2ban_running`] says so);
//! * the reload is a plain `reload` (starts new jails, stops removed ones, drops removed
//!   actions) followed by `reload --restart <jail>` for each running jail in
//!   [`AgentEdit::restart`]: fail2ban 1.0.2 keeps running a jail without an action that a plain
//!   reload added to it, and `reload --restart` takes one jail per call.

use std::collections::BTreeSet;

use super::pipeline::{Edit, Scope, Writer};
use super::{ConfigEditor, EditError, FileChange, ReloadScope, blocking};
use crate::fail2ban_files::files::{AgentFile, EditableFile};
use crate::fail2ban_files::reader::{ConfigReader, EffectiveConfig};
use crate::fail2ban_files::staging::{Change, build_shadow, stage};

/// The new state of one of the agent's files.
#[derive(Debug, Clone)]
pub struct AgentWrite {
    pub file: AgentFile,
    /// `None` removes the file.
    pub content: Option<Vec<u8>>,
    /// Permission bits when the file is (re)written.
    pub mode: u32,
}

/// One validated change of the agent's files.
#[derive(Debug, Clone, Default)]
pub struct AgentEdit {
    pub writes: Vec<AgentWrite>,
    /// Jails checked like the target of a jail edit (filter compiled, references checked):
    /// the jails the change adds.
    pub check_jails: BTreeSet<String>,
    /// Jails to restart after the reload when they run, so that they run the actions the
    /// change attached (or that a plain reload left out earlier).
    pub restart: BTreeSet<String>,
    /// When fail2ban does not answer: write the files anyway and skip the reload.
    pub allow_offline: bool,
}

/// What an agent-file edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEditReport {
    /// Files written or removed (empty: they already held what was asked).
    pub changes: Vec<FileChange>,
    /// False: fail2ban did not answer, so nothing was reloaded; it reads the files at start.
    pub fail2ban_running: bool,
    /// Whether a plain `reload` ran.
    pub reloaded: bool,
    /// Jails restarted with `reload --restart <jail>`.
    pub restarted: Vec<String>,
    /// Jails running afterwards (empty when fail2ban is not running).
    pub running: Vec<String>,
    /// fail2ban's messages that did not stop the change.
    pub warnings: Vec<String>,
}

impl ConfigEditor {
    /// Applies `edit`; see the module documentation.
    pub async fn apply_agent_files(&self, edit: AgentEdit) -> Result<AgentEditReport, EditError> {
        let lock = self.lock().await?;
        let mut files = Vec::new();
        for write in &edit.writes {
            let file = EditableFile::Agent(write.file);
            self.live_path(&file)?;
            let (old, _) = self.current(&file).await?;
            files.push(Change {
                file,
                old,
                mode: write.mode,
                new: write.content.clone(),
            });
        }
        let edit = Edit {
            files,
            scope: Scope::Jails(edit.check_jails),
            writer: Writer::Agent {
                restart: edit.restart,
                allow_offline: edit.allow_offline,
            },
        };
        let applied = self.run(&lock, edit).await?;
        let report = AgentEditReport {
            changes: applied.changes,
            fail2ban_running: applied.running.is_some(),
            reloaded: applied.reload != ReloadScope::NotNeeded,
            restarted: applied.restarted,
            running: applied.running.into_iter().flatten().collect(),
            warnings: applied.warnings,
        };
        if report.fail2ban_running {
            tracing::info!(
                files = ?report.changes.iter().map(|c| c.file.to_string()).collect::<Vec<_>>(),
                restarted = ?report.restarted,
                total_ms = u64::try_from(applied.timings.total.as_millis()).unwrap_or(u64::MAX),
                "banhub's fail2ban files applied"
            );
        } else {
            tracing::info!(
                files = report.changes.len(),
                "banhub's fail2ban files written; fail2ban is not running and reads them at start"
            );
        }
        Ok(report)
    }

    /// The effective configuration as it would be without [`AgentFile::Attach`]: what each
    /// jail's `action` is before banhub is appended to it. Reads a shadow of the config dir
    /// (symlinks) in the backup directory.
    pub async fn load_without_attach(&self) -> Result<EffectiveConfig, EditError> {
        let s = self.inner.settings.clone();
        let change = Change {
            file: EditableFile::Agent(AgentFile::Attach),
            old: None,
            mode: 0o644,
            new: None,
        };
        blocking(move || {
            let staged = stage(&s.config_dir, std::slice::from_ref(&change))?;
            let shadow = build_shadow(&s.config_dir, &s.backup_dir, &staged.entries)?;
            ConfigReader::new(shadow.path())
                .load()
                .map_err(EditError::from)
        })
        .await
    }
}
