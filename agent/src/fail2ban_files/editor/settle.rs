//! After a reload: make fail2ban run what the files say. A plain reload of fail2ban 1.0.2 does
//! not start actions that come back into a jail, nor clears a removed `ignorecommand`, so the
//! editor compares each jail an edit reaches with its files, restarts the jails that differ
//! (`reload --restart <jail>`) and compares again; a difference that remains fails the edit.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use super::{ConfigEditor, EditError, blocking};
use crate::fail2ban::{Fail2banError, Fail2banSocket};
use crate::fail2ban_files::dump;
use crate::fail2ban_files::files::EditableFile;
use crate::fail2ban_files::reader::EffectiveConfig;
use crate::fail2ban_files::running::{self, Drift, FileJail, JailState};
use crate::fail2ban_files::staging::Change;
use crate::fail2ban_files::tools;

impl ConfigEditor {
    /// Each of `jails` that fail2ban runs, beside what the live files say for it. Jails fail2ban
    /// does not run are left out.
    pub async fn jail_states(&self, jails: &BTreeSet<String>) -> Result<Vec<JailState>, EditError> {
        if jails.is_empty() {
            return Ok(Vec::new());
        }
        let reader = self.inner.reader.clone();
        let config = blocking(move || reader.load().map_err(EditError::from)).await?;
        let files = self.files(config).await;
        self.states(&files, jails)
            .await
            .map_err(EditError::Unavailable)
    }

    /// Makes the running jails that `changes` reach run what the live files say, restarting
    /// those that differ; the jails restarted, or the differences that remain (and why).
    pub(super) async fn settle(
        &self,
        changes: &[Change],
        running: &BTreeSet<String>,
    ) -> Result<Vec<String>, Vec<String>> {
        let reader = self.inner.reader.clone();
        let config = blocking(move || reader.load().map_err(EditError::from))
            .await
            .map_err(|e| vec![format!("reading the configuration back failed: {e}")])?;
        let jails = affected_jails(changes, &config, running);
        if jails.is_empty() {
            return Ok(Vec::new());
        }
        let files = self.files(config).await;
        let unavailable = |e: Fail2banError| vec![format!("fail2ban does not answer: {e}")];
        let drifting: BTreeSet<String> = self
            .states(&files, &jails)
            .await
            .map_err(unavailable)?
            .into_iter()
            .filter(|s| !s.drift.is_empty())
            .map(|s| s.jail)
            .collect();
        if drifting.is_empty() {
            return Ok(Vec::new());
        }
        for jail in &drifting {
            self.restart_jail(jail).await?;
        }
        let remaining: Vec<Drift> = self
            .states(&files, &drifting)
            .await
            .map_err(unavailable)?
            .into_iter()
            .flat_map(|s| s.drift)
            .collect();
        let missing: Vec<String> = {
            let now = self.running_jails().await.map_err(unavailable)?;
            drifting
                .difference(&now)
                .map(|j| {
                    format!("jail {j} is not running after its restart; fail2ban's log says why")
                })
                .collect()
        };
        if remaining.is_empty() && missing.is_empty() {
            tracing::info!(restarted = ?drifting, "jails restarted to run what their files say");
            return Ok(drifting.into_iter().collect());
        }
        Err(missing
            .into_iter()
            .chain(
                remaining
                    .iter()
                    .map(|d| format!("{d} (after restarting the jail)")),
            )
            .collect())
    }

    /// The live files as the comparison needs them: the effective configuration, and fail2ban's
    /// own reading of the filters (not compared when fail2ban cannot read them).
    async fn files(&self, config: EffectiveConfig) -> Files {
        let s = &self.inner.settings;
        let fail_regexes = match dump::fail_regexes(&s.tools, &s.config_dir).await {
            Ok(regexes) => Some(regexes),
            Err(e) => {
                tracing::warn!(error = %e, "fail2ban could not read its filters; they are not compared");
                None
            }
        };
        Files {
            config,
            fail_regexes,
        }
    }

    /// Reads each running jail of `jails` from fail2ban and compares it with `files`.
    async fn states(
        &self,
        files: &Files,
        jails: &BTreeSet<String>,
    ) -> Result<Vec<JailState>, Fail2banError> {
        let s = &self.inner.settings;
        let mut socket = Fail2banSocket::connect(&s.socket, s.socket_timeout).await?;
        let running: BTreeSet<String> = socket.jail_names().await?.into_iter().collect();
        let mut states = Vec::new();
        for jail in jails.intersection(&running) {
            let state = socket.running_jail(jail).await?;
            let drift = FileJail::from_config(&files.config, jail)
                .map(|mut expected| {
                    expected.fail_regex = files
                        .fail_regexes
                        .as_ref()
                        .map(|all| all.get(jail).cloned().unwrap_or_default());
                    running::compare(jail, &expected, &state)
                })
                .unwrap_or_default();
            states.push(JailState {
                jail: jail.clone(),
                running: state,
                drift,
            });
        }
        // The answers are in; a failed goodbye changes nothing.
        let _ = socket.close().await;
        Ok(states)
    }

    /// `fail2ban-client -c <dir> -s <socket> reload --restart <jail>`; `Err` carries its messages.
    pub(super) async fn restart_jail(&self, jail: &str) -> Result<Vec<String>, Vec<String>> {
        let s = &self.inner.settings;
        let args: Vec<OsString> = vec![
            "-c".into(),
            s.config_dir.clone().into(),
            "-s".into(),
            s.socket.clone().into(),
            "reload".into(),
            "--restart".into(),
            jail.into(),
        ];
        match s.tools.client(&args, s.tools.reload_timeout).await {
            Err(e) => Err(vec![e.to_string()]),
            Ok(output) if output.success() => Ok(tools::client_messages(&output, None)),
            Ok(output) => Err(tools::client_messages(&output, None)),
        }
    }
}

/// What the files say, read once for the comparisons of one check.
struct Files {
    config: EffectiveConfig,
    /// Failure expressions by jail; `None` when fail2ban could not read the configuration.
    fail_regexes: Option<BTreeMap<String, Vec<String>>>,
}

/// The running jails an edit of `changes` reaches: a jail's override reaches that jail, a
/// filter reaches the jails that use it, the defaults reach every jail.
fn affected_jails(
    changes: &[Change],
    config: &EffectiveConfig,
    running: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut jails = BTreeSet::new();
    for change in changes {
        match &change.file {
            EditableFile::JailOverride(jail) => {
                jails.insert(jail.to_string());
            }
            EditableFile::FilterLocal(filter) => jails.extend(
                config
                    .jails()
                    .into_iter()
                    .filter(|j| j.filter.as_ref().is_some_and(|f| f.name == filter.as_str()))
                    .map(|j| j.name),
            ),
            EditableFile::Defaults | EditableFile::Agent(_) => {
                jails.extend(running.iter().cloned());
            }
        }
    }
    jails.retain(|j| running.contains(j));
    jails
}
