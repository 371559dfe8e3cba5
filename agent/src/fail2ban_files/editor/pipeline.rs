//! The one pipeline every write of fail2ban's files runs, the hub's edits and the agent's own files
//! alike: stage the new files beside their targets → build a shadow of the config dir → check it
//! (host policy, `fail2ban-client -t`, what `-t` misses) → back up → commit (atomic renames) →
//! reload → restart what must run the change → health check → settle; a failure after the commit
//! puts the old bytes back, reloads and says so ([`ConfigEditor::rollback`]).
//!
//! What differs between the writers is data: the files and the scope of the checks are an
//! [`Edit`], and its [`Writer`] names what only one of them does.

use std::collections::BTreeSet;
use std::time::Instant;

use super::{
    ConfigEditor, EditError, EditLock, EditTimings, FileChange, ReloadScope, RollbackReport, Stage,
    blocking,
};
use crate::fail2ban_files::names::FilterName;
use crate::fail2ban_files::reader::EffectiveConfig;
use crate::fail2ban_files::staging::{self, Change, Staged};
use crate::fail2ban_files::version::Version;

/// One change of fail2ban's files, as [`ConfigEditor::run`] applies it.
#[derive(Debug)]
pub(super) struct Edit {
    /// Each file's old and new bytes (a file already holding what is asked is left alone).
    pub files: Vec<Change>,
    pub scope: Scope,
    pub writer: Writer,
}

/// What an edit is about: the jails (or the filter) its checks look at and that must run after it.
#[derive(Debug, Clone)]
pub(super) enum Scope {
    /// These jails (none: a `[DEFAULT]` edit, which reaches every jail).
    Jails(BTreeSet<String>),
    Filter(FilterName),
}

impl Scope {
    /// The jails the edit targets (none for a filter).
    pub(super) fn jails(&self) -> BTreeSet<String> {
        match self {
            Self::Jails(jails) => jails.clone(),
            Self::Filter(_) => BTreeSet::new(),
        }
    }
}

/// Who writes, which decides the steps that only one writer takes.
#[derive(Debug)]
pub(super) enum Writer {
    /// The hub, through a command: the host policy checks what the edit introduces, fail2ban
    /// must answer, an edit that changes nothing does nothing, a single running jail reloads
    /// alone (`reload <jail>`), and the jails the edit reaches are settled afterwards.
    Hub,
    /// The agent's own files (`install-action`): no host policy (the files are the agent's),
    /// a plain `reload`, then `reload --restart` for each running jail of `restart`; the health
    /// check runs even when no file changed.
    Agent {
        restart: BTreeSet<String>,
        /// When fail2ban does not answer: write the files anyway and skip the reload.
        allow_offline: bool,
    },
}

impl Writer {
    fn is_hub(&self) -> bool {
        matches!(self, Self::Hub)
    }

    fn allows_offline(&self) -> bool {
        matches!(
            self,
            Self::Agent {
                allow_offline: true,
                ..
            }
        )
    }

    /// How fail2ban is told about committed files.
    fn reload_scope(
        &self,
        targets: &BTreeSet<String>,
        running_before: &BTreeSet<String>,
        new: &NewConfig,
    ) -> ReloadScope {
        match (self, targets.iter().next()) {
            // `reload <jail>` fails for a jail the config no longer defines.
            (Self::Hub, Some(jail))
                if targets.len() == 1
                    && running_before.contains(jail)
                    && new.defined.contains(jail) =>
            {
                ReloadScope::Jail(jail.clone())
            }
            _ => ReloadScope::All,
        }
    }
}

/// What the checks learned about the new configuration.
#[derive(Debug)]
pub(super) struct NewConfig {
    /// Jails fail2ban will start.
    pub enabled: BTreeSet<String>,
    /// Jails the configuration defines, enabled or not.
    pub defined: BTreeSet<String>,
    /// fail2ban's warnings that did not stop the edit.
    pub warnings: Vec<String>,
}

impl NewConfig {
    /// The live configuration, when no file changes.
    fn unchanged(live: &EffectiveConfig) -> Self {
        Self {
            enabled: live.enabled_jails(),
            defined: live.jail_names().into_iter().map(str::to_owned).collect(),
            warnings: Vec::new(),
        }
    }
}

/// What an applied edit did.
#[derive(Debug)]
pub(super) struct Applied {
    /// Files written or removed (empty: they already held what was asked).
    pub changes: Vec<FileChange>,
    /// Jails running afterwards; `None` when fail2ban did not answer (then nothing was reloaded).
    pub running: Option<BTreeSet<String>>,
    pub reload: ReloadScope,
    /// Jails restarted (`reload --restart`): those the writer asked for, or those a reload left
    /// running something else than their files say.
    pub restarted: Vec<String>,
    /// fail2ban's messages that did not stop the edit.
    pub warnings: Vec<String>,
    pub timings: EditTimings,
}

impl ConfigEditor {
    /// Applies `edit` (the caller holds the lock); see the module documentation.
    pub(super) async fn run(&self, _lock: &EditLock<'_>, edit: Edit) -> Result<Applied, EditError> {
        let started = Instant::now();
        let Edit {
            files,
            scope,
            writer,
        } = edit;
        let running_before = match self.running_jails().await {
            Ok(running) => Some(running),
            Err(e) if writer.allows_offline() => {
                tracing::info!(error = %e, "fail2ban is not answering; the files are written without a reload");
                None
            }
            Err(e) => return Err(EditError::Unavailable(e)),
        };
        let changes: Vec<Change> = files.into_iter().filter(|c| c.old != c.new).collect();
        if changes.is_empty() && writer.is_hub() {
            return Ok(Applied {
                changes: Vec::new(),
                running: running_before,
                reload: ReloadScope::NotNeeded,
                restarted: Vec::new(),
                warnings: Vec::new(),
                timings: EditTimings {
                    total: started.elapsed(),
                    ..EditTimings::default()
                },
            });
        }
        for change in &changes {
            self.live_path(&change.file)?;
        }
        let file_changes: Vec<FileChange> = changes
            .iter()
            .map(|c| FileChange {
                file: c.file.clone(),
                previous: Version::of(c.old.as_deref()),
                current: Version::of(c.new.as_deref()),
            })
            .collect();

        let validate_started = Instant::now();
        let (staged, new) = if changes.is_empty() {
            let reader = self.inner.reader.clone();
            let live = blocking(move || reader.load().map_err(EditError::from)).await?;
            (None, NewConfig::unchanged(&live))
        } else {
            let (staged, new) = self
                .check(&changes, &scope, &writer, running_before.as_ref())
                .await?;
            (Some(staged), new)
        };
        let validate = validate_started.elapsed();
        let reload_started = Instant::now();
        if let Some(staged) = staged {
            self.commit(staged, &changes, running_before.as_ref())
                .await?;
        }

        let Some(running_before) = running_before else {
            return Ok(Applied {
                changes: file_changes,
                running: None,
                reload: ReloadScope::NotNeeded,
                restarted: Vec::new(),
                warnings: new.warnings,
                timings: EditTimings {
                    validate,
                    total: started.elapsed(),
                    ..EditTimings::default()
                },
            });
        };
        let targets = scope.jails();
        let reload = if changes.is_empty() {
            ReloadScope::NotNeeded
        } else {
            writer.reload_scope(&targets, &running_before, &new)
        };
        let mut messages = Vec::new();
        if reload != ReloadScope::NotNeeded {
            match self.reload(&reload).await {
                Ok(reloaded) => messages = reloaded,
                Err(messages) => {
                    return Err(self
                        .rollback(&changes, Stage::Reload, messages, &running_before)
                        .await);
                }
            }
        }
        let (mut restarted, restart_messages) = match &writer {
            Writer::Agent { restart, .. } => {
                self.restart(restart, &changes, &running_before, &messages)
                    .await?
            }
            Writer::Hub => (Vec::new(), Vec::new()),
        };

        let running = self
            .health_check(
                &changes,
                &targets,
                &writer,
                &new,
                &running_before,
                &messages,
            )
            .await?;
        if writer.is_hub() {
            restarted = match self.settle(&changes, &running).await {
                Ok(restarted) => restarted,
                Err(problems) => {
                    let failure = messages.iter().cloned().chain(problems).collect();
                    return Err(self
                        .rollback(&changes, Stage::Verify, failure, &running_before)
                        .await);
                }
            };
        }
        Ok(Applied {
            changes: file_changes,
            running: Some(running),
            reload,
            restarted,
            warnings: new
                .warnings
                .into_iter()
                .chain(messages)
                .chain(restart_messages)
                .collect(),
            timings: EditTimings {
                validate,
                reload: reload_started.elapsed(),
                total: started.elapsed(),
            },
        })
    }

    /// Stages `changes` beside their targets, checks the shadow directory that holds them and
    /// backs up the files they replace; nothing live is touched yet. The staged files are removed
    /// when the returned [`Staged`] is dropped, unless committed first.
    async fn check(
        &self,
        changes: &[Change],
        scope: &Scope,
        writer: &Writer,
        running_before: Option<&BTreeSet<String>>,
    ) -> Result<(Staged, NewConfig), EditError> {
        let s = self.inner.settings.clone();
        let staged = {
            let (dir, changes) = (s.config_dir.clone(), changes.to_vec());
            blocking(move || staging::stage(&dir, &changes)).await?
        };
        let shadow = {
            let (dir, parent, entries) = (
                s.config_dir.clone(),
                s.backup_dir.clone(),
                staged.entries.clone(),
            );
            blocking(move || staging::build_shadow(&dir, &parent, &entries)).await?
        };
        if writer.is_hub() {
            self.check_policy(shadow.path(), changes).await?;
        }
        let running_before = running_before.cloned().unwrap_or_default();
        let new = self.validate(shadow.path(), scope, &running_before).await?;
        drop(shadow);
        {
            let (root, changes, keep) = (s.backup_dir.clone(), changes.to_vec(), s.keep_backups);
            blocking(move || staging::save_backups(&root, &changes, keep)).await?;
        }
        Ok((staged, new))
    }

    /// Renames the staged files into place. When that fails the old bytes go back, with a
    /// rollback when fail2ban runs, by themselves when it does not.
    async fn commit(
        &self,
        staged: Staged,
        changes: &[Change],
        running_before: Option<&BTreeSet<String>>,
    ) -> Result<(), EditError> {
        let committed = {
            let entries = staged.entries.clone();
            blocking(move || staging::commit(&entries)).await
        };
        drop(staged);
        let Err(e) = committed else {
            return Ok(());
        };
        Err(match running_before {
            Some(running) => {
                self.rollback(changes, Stage::Commit, vec![e.to_string()], running)
                    .await
            }
            None => {
                let (dir, undo) = (self.inner.settings.config_dir.clone(), changes.to_vec());
                blocking(move || staging::restore(&dir, &undo)).await?;
                e
            }
        })
    }

    /// The running jails after the reload; when fail2ban does not answer, the edit is rolled back
    /// with `messages` (the reload's) and that failure.
    async fn running_after_reload(
        &self,
        changes: &[Change],
        running_before: &BTreeSet<String>,
        messages: &[String],
    ) -> Result<BTreeSet<String>, EditError> {
        match self.running_jails().await {
            Ok(running) => Ok(running),
            Err(e) => {
                let failure = messages
                    .iter()
                    .cloned()
                    .chain([format!("fail2ban does not answer after the reload: {e}")])
                    .collect();
                Err(self
                    .rollback(changes, Stage::HealthCheck, failure, running_before)
                    .await)
            }
        }
    }

    /// `reload --restart` for each jail of `restart` that runs: the jails, and fail2ban's messages.
    /// A failure rolls back.
    async fn restart(
        &self,
        restart: &BTreeSet<String>,
        changes: &[Change],
        running_before: &BTreeSet<String>,
        messages: &[String],
    ) -> Result<(Vec<String>, Vec<String>), EditError> {
        let (mut restarted, mut restart_messages) = (Vec::new(), Vec::new());
        if restart.is_empty() {
            return Ok((restarted, restart_messages));
        }
        let running_now = self
            .running_after_reload(changes, running_before, messages)
            .await?;
        for jail in restart.iter().filter(|j| running_now.contains(*j)) {
            match self.restart_jail(jail).await {
                Ok(messages) => restart_messages.extend(messages),
                Err(messages) => {
                    return Err(self
                        .rollback(changes, Stage::Reload, messages, running_before)
                        .await);
                }
            }
            restarted.push(jail.clone());
        }
        Ok((restarted, restart_messages))
    }

    /// fail2ban answers and runs what it must: every jail that ran before or that the edit
    /// targets, if enabled afterwards; a disabled target of a hub edit runs no more. Any failure
    /// rolls back, with `messages` (the reload's) ahead of the problems.
    async fn health_check(
        &self,
        changes: &[Change],
        targets: &BTreeSet<String>,
        writer: &Writer,
        new: &NewConfig,
        running_before: &BTreeSet<String>,
        messages: &[String],
    ) -> Result<BTreeSet<String>, EditError> {
        let must_run: BTreeSet<String> = running_before
            .union(targets)
            .filter(|j| new.enabled.contains(*j))
            .cloned()
            .collect();
        let running = self
            .running_after_reload(changes, running_before, messages)
            .await?;
        let mut problems: Vec<String> = must_run
            .difference(&running)
            .map(|j| format!("jail {j} is not running after the reload; fail2ban's log says why"))
            .collect();
        if writer.is_hub() {
            problems.extend(
                targets
                    .iter()
                    .filter(|j| !new.enabled.contains(*j) && running.contains(*j))
                    .map(|j| format!("jail {j} is still running although it is disabled")),
            );
        }
        if problems.is_empty() {
            return Ok(running);
        }
        let failure = messages.iter().cloned().chain(problems).collect();
        Err(self
            .rollback(changes, Stage::HealthCheck, failure, running_before)
            .await)
    }

    /// Puts the old bytes back, reloads everything and reports; the returned error says
    /// whether that worked.
    async fn rollback(
        &self,
        changes: &[Change],
        stage: Stage,
        messages: Vec<String>,
        running_before: &BTreeSet<String>,
    ) -> EditError {
        tracing::warn!(%stage, ?messages, "config edit failed; restoring the previous files");
        let restored = {
            let (dir, changes) = (self.inner.settings.config_dir.clone(), changes.to_vec());
            blocking(move || staging::restore(&dir, &changes)).await
        };
        if let Err(e) = restored {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages: vec![e.to_string()],
            };
        }
        if let Err(rollback_messages) = self.reload(&ReloadScope::All).await {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages,
            };
        }
        let running = match self.running_jails().await {
            Ok(running) => running,
            Err(e) => {
                return EditError::RollbackFailed {
                    stage,
                    messages,
                    rollback_messages: vec![format!(
                        "fail2ban does not answer after reloading the previous files: {e}"
                    )],
                };
            }
        };
        // The reload back has the same blind spots as the one forward.
        if let Err(rollback_messages) = self.settle(changes, &running).await {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages,
            };
        }
        EditError::RolledBack {
            stage,
            messages,
            rollback: RollbackReport {
                restored: changes.iter().map(|c| c.file.clone()).collect(),
                missing_jails: running_before.difference(&running).cloned().collect(),
            },
        }
    }
}
