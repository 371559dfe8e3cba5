//! The drift loop: every host with a profile is compared with its profile's version when its
//! agent's session starts here, after banhub wrote its files through this replica's fleet
//! ([`Fleet::files_written`](crate::fleet::Fleet::files_written)), every
//! `profiles.drift_interval_secs`, and when asked ([`Recheck`], after a profile changed). Each replica compares
//! the hosts whose sessions it holds; a result is stored only when it changed, and a new drift
//! raises one `config-drift` alert notice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::{ProfileError, Profiles, Recheck};
use crate::alerts::notice::Notice;
use crate::domain::profiles::drift::{
    DriftRecord, DriftState, FileDriftKind, compare, fingerprint, outside_files,
};
use crate::domain::profiles::{Profile, ProfileVersion, profile_of};
use crate::domain::{Server, ServerId, ServerStatus};
use crate::fleet::{CONFIG_FILES_CAPABILITY, FleetError, ServerView};
use crate::store::StoreError;

/// Hosts compared at once in a full pass.
const PARALLEL_CHECKS: usize = 64;
/// Who the drift check's commands are from, in the agents' logs.
const REQUESTED_BY: &str = "banhub:drift";
/// The alert kind of a drift (the `rule.id` of its deliveries).
pub const DRIFT_ALERT: &str = "config-drift";

/// A server with its last drift comparison.
#[derive(Debug, Clone)]
pub struct ServerDrift {
    pub server: Server,
    pub record: DriftRecord,
}

/// Every server's drift, and how many are in each state.
#[derive(Debug, Clone)]
pub struct DriftSummary {
    pub counts: BTreeMap<&'static str, u64>,
    pub servers: Vec<ServerDrift>,
}

/// What a pass knows beside each server: the profiles and their desired versions.
struct PassContext {
    profiles: Vec<Profile>,
    versions: HashMap<String, Arc<ProfileVersion>>,
}

fn unknown(server: ServerId, reason: impl Into<String>, now: DateTime<Utc>) -> DriftRecord {
    DriftRecord {
        server,
        state: DriftState::Unknown,
        profile: None,
        version: None,
        reason: reason.into(),
        files: Vec::new(),
        fingerprint: fingerprint(&[]),
        alerted: None,
        baseline: None,
        checked_at: now,
        since: now,
    }
}

impl Profiles {
    /// The last comparison of `server` (an `unknown` one when it was never compared).
    pub async fn server_drift(&self, server: ServerId) -> Result<DriftRecord, ProfileError> {
        Ok(self
            .store()
            .drift_record(server)
            .await?
            .unwrap_or_else(|| unknown(server, "not compared yet", Utc::now())))
    }

    /// Each server's drift state (`unknown` for those never compared).
    pub async fn drift_states(&self) -> Result<HashMap<ServerId, DriftState>, ProfileError> {
        Ok(self
            .store()
            .drift_records()
            .await?
            .into_iter()
            .map(|r| (r.server, r.state))
            .collect())
    }

    /// Every server with its last comparison, and the counts per state.
    pub async fn drift_summary(&self) -> Result<DriftSummary, ProfileError> {
        let mut records: HashMap<ServerId, DriftRecord> = self
            .store()
            .drift_records()
            .await?
            .into_iter()
            .map(|r| (r.server, r))
            .collect();
        let now = Utc::now();
        let mut counts: BTreeMap<&'static str, u64> =
            [DriftState::InSync, DriftState::Drifted, DriftState::Unknown]
                .into_iter()
                .map(|s| (s.as_str(), 0))
                .collect();
        let servers: Vec<ServerDrift> = self
            .store()
            .list_servers()
            .await?
            .into_iter()
            .map(|server| {
                let record = records
                    .remove(&server.id)
                    .unwrap_or_else(|| unknown(server.id, "not compared yet", now));
                *counts.entry(record.state.as_str()).or_default() += 1;
                ServerDrift { server, record }
            })
            .collect();
        Ok(DriftSummary { counts, servers })
    }

    /// Compares hosts with their profiles until `shutdown`: on session starts here, after every
    /// write of a host's files through this replica's fleet, on the schedule, and when asked.
    pub async fn run(self, shutdown: CancellationToken) {
        let Some(mut rechecks) = self.0.rechecks.lock().ok().and_then(|mut r| r.take()) else {
            tracing::error!("the drift loop runs once per hub; a second one is not started");
            return;
        };
        let mut starts = self.0.fleet.session_starts();
        let mut written = self.0.fleet.files_written();
        let mut schedule = tokio::time::interval(self.0.interval);
        schedule.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let outcome = tokio::select! {
                () = shutdown.cancelled() => return,
                _ = schedule.tick() => self.check_all().await.map(drop),
                start = starts.recv() => match start {
                    Ok(server) => self.check_one(server).await,
                    Err(RecvError::Lagged(_)) => self.check_all().await.map(drop),
                    Err(RecvError::Closed) => return,
                },
                wrote = written.recv() => match wrote {
                    Ok(server) => self.check_one(server).await,
                    Err(RecvError::Lagged(_)) => self.check_all().await.map(drop),
                    Err(RecvError::Closed) => return,
                },
                asked = rechecks.recv() => match asked {
                    Some(Recheck::Server(server)) => self.check_one(server).await,
                    Some(Recheck::All) => self.check_all().await.map(drop),
                    None => return,
                },
            };
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "a drift check failed; the next one tries again");
            }
        }
    }

    /// Compares every host whose session is held here (and marks offline ones `unknown`);
    /// returns how many hosts were compared with their files.
    pub async fn check_all(&self) -> Result<usize, FleetError> {
        let views = self.0.fleet.list().await?;
        let context = self.pass_context().await?;
        let previous: HashMap<ServerId, DriftRecord> = self
            .store()
            .drift_records()
            .await?
            .into_iter()
            .map(|r| (r.server, r))
            .collect();
        let context = &context;
        let previous = &previous;
        let results: Vec<Result<bool, StoreError>> = futures::stream::iter(views)
            .map(|view| async move {
                let before = previous.get(&view.server.id).cloned();
                self.check(&view, context, before).await
            })
            .buffer_unordered(PARALLEL_CHECKS)
            .collect()
            .await;
        let mut compared = 0;
        for result in results {
            compared += usize::from(result?);
        }
        Ok(compared)
    }

    /// Compares one host with its profile.
    pub async fn check_one(&self, server: ServerId) -> Result<(), FleetError> {
        let view = match self.0.fleet.get(server).await {
            Ok(view) => view,
            Err(FleetError::UnknownServer(_)) => {
                self.store().delete_drift(server).await?;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let context = self.pass_context().await?;
        let before = self.store().drift_record(server).await?;
        self.check(&view, &context, before).await?;
        Ok(())
    }

    async fn pass_context(&self) -> Result<PassContext, StoreError> {
        let profiles = self.store().profiles().await?;
        let mut versions = HashMap::new();
        for profile in &profiles {
            if let Some(v) = profile.desired_version()
                && let Some(version) = self.store().profile_version(&profile.name, v).await?
            {
                versions.insert(profile.name.to_string(), Arc::new(version));
            }
        }
        Ok(PassContext { profiles, versions })
    }

    /// Compares `view`'s host, stores what changed and alerts on a new drift; `true` when the
    /// host's files were read.
    async fn check(
        &self,
        view: &ServerView,
        context: &PassContext,
        before: Option<DriftRecord>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let id = view.server.id;
        let profile = match profile_of(&view.server, &context.profiles) {
            Err((a, b)) => {
                let why = format!("two profiles select this server, {a} and {b}; change one");
                return self
                    .settle(unknown(id, why, now), before, view)
                    .await
                    .map(|()| false);
            }
            Ok(None) => {
                let why = "no profile is assigned to this server";
                return self
                    .settle(unknown(id, why, now), before, view)
                    .await
                    .map(|()| false);
            }
            Ok(Some(profile)) => profile,
        };
        let mut record = unknown(id, "", now);
        record.profile = Some(profile.name.clone());
        record.version = profile.desired_version();
        let Some(version) = context.versions.get(profile.name.as_str()) else {
            record.reason = format!("profile {} has no version to compare with", profile.name);
            return self.settle(record, before, view).await.map(|()| false);
        };
        if view.status != ServerStatus::Online {
            record.reason = "the server's agent is not online".to_owned();
            return self.settle(record, before, view).await.map(|()| false);
        }
        if !self.0.fleet.holds_session(id) {
            // The replica holding the session compares it.
            return Ok(false);
        }
        if self.0.fleet.agent_supports(id, CONFIG_FILES_CAPABILITY) == Some(false) {
            record.reason = "the agent is too old to report its files; upgrade it".to_owned();
            return self.settle(record, before, view).await.map(|()| false);
        }
        let host = match self.0.fleet.config_files(id, REQUESTED_BY).await {
            Ok(host) => host,
            Err(e) => {
                record.reason = format!("the agent could not report its files: {e}");
                return self.settle(record, before, view).await.map(|()| false);
            }
        };
        let same_version = before
            .as_ref()
            .is_some_and(|b| b.profile == record.profile && b.version == record.version);
        let baseline = before
            .as_ref()
            .filter(|_| same_version)
            .and_then(|b| b.baseline.clone());
        let files = compare(&version.files, &host.files, baseline.as_ref());
        record.state = if files.is_empty() {
            DriftState::InSync
        } else {
            DriftState::Drifted
        };
        record.baseline = match (record.state, baseline) {
            (_, Some(baseline)) => Some(baseline),
            (DriftState::InSync, None) => Some(outside_files(&version.files, &host.files)),
            _ => None,
        };
        record.reason = if host.truncated {
            "the host has more files than the agent reports; only the first were compared"
                .to_owned()
        } else {
            String::new()
        };
        record.fingerprint = fingerprint(&files);
        record.files = files;
        self.settle(record, before, view).await.map(|()| true)
    }

    /// Carries over what `before` knew (since when, the alerted drift, the baseline of an
    /// `unknown` check), stores the record when it changed and alerts on a new drift.
    async fn settle(
        &self,
        mut record: DriftRecord,
        before: Option<DriftRecord>,
        view: &ServerView,
    ) -> Result<(), StoreError> {
        if let Some(before) = &before {
            let same_version = before.profile == record.profile && before.version == record.version;
            if before.state == record.state {
                record.since = before.since;
            }
            if same_version && record.state != DriftState::InSync {
                record.alerted.clone_from(&before.alerted);
                if record.baseline.is_none() {
                    record.baseline.clone_from(&before.baseline);
                }
            }
        }
        if record.needs_alert() {
            self.alert(&view.server, &record).await;
            record.alerted = Some(record.fingerprint.clone());
        }
        let changed = before.as_ref().is_none_or(|b| {
            let mut b = b.clone();
            b.checked_at = record.checked_at;
            b != record
        });
        if changed {
            self.store().save_drift(&record).await?;
            if before.as_ref().map(|b| b.state) != Some(record.state) {
                tracing::info!(server = %view.server.name, state = record.state.as_str(), reason = %record.reason, "drift state changed");
            }
        }
        Ok(())
    }

    /// Sends the `config-drift` notice of `record`; a failure to store it is logged (the next
    /// change of the drift tries again).
    async fn alert(&self, server: &Server, record: &DriftRecord) {
        let profile = record
            .profile
            .as_ref()
            .map_or_else(String::new, ToString::to_string);
        let lines: Vec<String> = record
            .files
            .iter()
            .map(|f| {
                let how = match f.kind {
                    FileDriftKind::Missing => "missing on the host",
                    FileDriftKind::Different => "differs from the profile",
                    FileDriftKind::Unexpected => "present though the profile removes it",
                    FileDriftKind::ChangedOutsideProfile => "changed outside the profile",
                };
                format!("{}: {how}", f.path)
            })
            .collect();
        let notice = Notice {
            kind: DRIFT_ALERT,
            title: format!("Configuration drift on {}", server.name),
            text: format!(
                "{} no longer matches profile {profile} version {}:\n{}\nSee the server's drift \
                 in banhub for the diff.",
                server.name,
                record.version.unwrap_or_default(),
                lines.join("\n")
            ),
        };
        if let Err(e) = self.0.alerts.notify(notice).await {
            tracing::warn!(server = %server.name, error = %e, "the drift alert could not be stored");
        }
    }
}
