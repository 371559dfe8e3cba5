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
use std::time::Instant;

use super::{ConfigEditor, EditError, FileChange, NewConfig, ReloadScope, Scope, Stage, blocking};
use crate::fail2ban_files::files::{AgentFile, EditableFile};
use crate::fail2ban_files::reader::ConfigReader;
use crate::fail2ban_files::staging::{Change, build_shadow, commit, restore, save_backups, stage};
use crate::fail2ban_files::version::Version;

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
        let started = Instant::now();
        let _lock = self.lock().await?;
        let s = self.inner.settings.clone();
        let mut changes = Vec::new();
        for write in &edit.writes {
            let file = EditableFile::Agent(write.file);
            self.live_path(&file)?;
            let (old, _) = self.current(&file).await?;
            changes.push(Change {
                file,
                old,
                mode: write.mode,
                new: write.content.clone(),
            });
        }
        let changes: Vec<Change> = changes.into_iter().filter(|c| c.old != c.new).collect();
        let running_before = match self.running_jails().await {
            Ok(running) => Some(running),
            Err(e) if edit.allow_offline => {
                tracing::info!(error = %e, "fail2ban is not answering; the files are written without a reload");
                None
            }
            Err(e) => return Err(EditError::Unavailable(e)),
        };
        let mut report = AgentEditReport {
            changes: changes
                .iter()
                .map(|c| FileChange {
                    file: c.file.clone(),
                    previous: Version::of(c.old.as_deref()),
                    current: Version::of(c.new.as_deref()),
                })
                .collect(),
            fail2ban_running: running_before.is_some(),
            reloaded: false,
            restarted: Vec::new(),
            running: running_before.iter().flatten().cloned().collect::<Vec<_>>(),
            warnings: Vec::new(),
        };

        let enabled_after = if changes.is_empty() {
            let reader = self.inner.reader.clone();
            blocking(move || reader.load().map_err(EditError::from))
                .await?
                .enabled_jails()
        } else {
            let staged = {
                let (dir, changes) = (s.config_dir.clone(), changes.clone());
                blocking(move || stage(&dir, &changes)).await?
            };
            let shadow = {
                let (dir, parent, entries) = (
                    s.config_dir.clone(),
                    s.backup_dir.clone(),
                    staged.entries.clone(),
                );
                blocking(move || build_shadow(&dir, &parent, &entries)).await?
            };
            let NewConfig {
                enabled, warnings, ..
            } = self
                .validate(
                    shadow.path(),
                    &Scope::Jails(edit.check_jails.clone()),
                    &running_before.clone().unwrap_or_default(),
                )
                .await?;
            drop(shadow);
            report.warnings.extend(warnings);
            {
                let (root, changes, keep) = (s.backup_dir.clone(), changes.clone(), s.keep_backups);
                blocking(move || save_backups(&root, &changes, keep)).await?;
            }
            let committed = {
                let entries = staged.entries.clone();
                blocking(move || commit(&entries)).await
            };
            drop(staged);
            if let Err(e) = committed {
                return Err(match &running_before {
                    Some(running) => {
                        self.rollback(&changes, Stage::Commit, vec![e.to_string()], running)
                            .await
                    }
                    None => {
                        let (dir, undo) = (s.config_dir.clone(), changes.clone());
                        blocking(move || restore(&dir, &undo)).await?;
                        e
                    }
                });
            }
            enabled
        };

        let Some(running_before) = running_before else {
            tracing::info!(
                files = report.changes.len(),
                "banhub's fail2ban files written; fail2ban is not running and reads them at start"
            );
            return Ok(report);
        };
        if !changes.is_empty() {
            match self.reload(&ReloadScope::All).await {
                Ok(messages) => report.warnings.extend(messages),
                Err(messages) => {
                    return Err(self
                        .rollback(&changes, Stage::Reload, messages, &running_before)
                        .await);
                }
            }
            report.reloaded = true;
        }
        let running_now = match self.running_jails().await {
            Ok(running) => running,
            Err(e) => {
                let messages = vec![format!("fail2ban does not answer after the reload: {e}")];
                return Err(self
                    .rollback(&changes, Stage::HealthCheck, messages, &running_before)
                    .await);
            }
        };
        for jail in edit.restart.iter().filter(|j| running_now.contains(*j)) {
            match self.restart_jail(jail).await {
                Ok(messages) => report.warnings.extend(messages),
                Err(messages) => {
                    return Err(self
                        .rollback(&changes, Stage::Reload, messages, &running_before)
                        .await);
                }
            }
            report.restarted.push(jail.clone());
        }

        let must_run: BTreeSet<String> = running_before
            .union(&edit.check_jails)
            .filter(|j| enabled_after.contains(*j))
            .cloned()
            .collect();
        let running = match self.running_jails().await {
            Ok(running) => running,
            Err(e) => {
                let messages = vec![format!("fail2ban does not answer after the reload: {e}")];
                return Err(self
                    .rollback(&changes, Stage::HealthCheck, messages, &running_before)
                    .await);
            }
        };
        let problems: Vec<String> = must_run
            .difference(&running)
            .map(|j| format!("jail {j} is not running after the reload; fail2ban's log says why"))
            .collect();
        if !problems.is_empty() {
            return Err(self
                .rollback(&changes, Stage::HealthCheck, problems, &running_before)
                .await);
        }
        report.running = running.into_iter().collect();
        tracing::info!(
            files = ?report.changes.iter().map(|c| c.file.to_string()).collect::<Vec<_>>(),
            restarted = ?report.restarted,
            total_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "banhub's fail2ban files applied"
        );
        Ok(report)
    }

    /// The effective configuration as it would be without [`AgentFile::Attach`]: what each
    /// jail's `action` is before banhub is appended to it. Reads a shadow of the config dir
    /// (symlinks) in the backup directory.
    pub async fn load_without_attach(
        &self,
    ) -> Result<crate::fail2ban_files::EffectiveConfig, EditError> {
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
