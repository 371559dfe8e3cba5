//! The rollout engine, on one replica at a time: every running rollout is driven in steps, each
//! step reading the rollout from the store, deciding one move (resume a host caught mid-apply,
//! apply the current batch, wait out its watch, check and confirm it, or roll back), and writing
//! each host's new state before acting on it. A restart, or another replica taking the lead,
//! carries on from what the store says.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use tokio::task::JoinSet;

use super::checks::{self, Watch};
use super::{RolloutError, Rollouts};
use crate::config_changes::ChangeError;
use crate::domain::auth::{AuditRecord, Outcome};
use crate::domain::config_changes::ChangeState;
use crate::domain::profiles::ProfileVersion;
use crate::domain::rollouts::{
    Check, HostState, Rollout, RolloutHost, RolloutState, enabled_jails, set_for,
};
use crate::fleet::{AgentErrorKind, FleetError};
use crate::profiles::Recheck;
use crate::store::StoreError;
use crate::store::rollouts::HostUpdate;

/// How often the engine looks for running rollouts (a start here wakes it at once).
const SCAN: Duration = Duration::from_secs(2);
/// How often a watch reads the rollout again for an operator's stop.
const STOP_CHECK: Duration = Duration::from_secs(1);
/// How long a step that could not reach a host waits before it tries again.
const RETRY: Duration = Duration::from_secs(5);
/// Attempts at reaching a host to roll it back before the rollout is recorded as failed.
const ROLLBACK_ATTEMPTS: u32 = 12;
/// How long past a host's confirmation window the engine waits for its agent to say what became
/// of a change caught mid-apply.
const APPLY_GRACE: Duration = Duration::from_secs(60);

/// What a step leaves to do.
enum Step {
    /// Read the rollout again and take the next step.
    Next,
    /// A host could not be reached: try again after [`RETRY`].
    Retry,
    /// The rollout ended (or is not this engine's to drive).
    Done,
}

/// What undoing one host's change came to.
enum Undo {
    /// Its files are what they were before the rollout.
    Done,
    /// Its agent could not be reached; try again.
    Later(String),
    /// It cannot be undone.
    Failed(String),
}

impl Rollouts {
    /// Drives every running rollout until the hub shuts down (or this replica loses the lead,
    /// which drops the tasks; the next leader resumes from the store).
    pub async fn run(self) {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut active: HashMap<tokio::task::Id, String> = HashMap::new();
        loop {
            match self.0.store.running_rollouts().await {
                Ok(ids) => {
                    for id in ids {
                        if active.values().any(|a| *a == id) {
                            continue;
                        }
                        let this = self.clone();
                        let driven = id.clone();
                        let task = tasks.spawn(async move { this.drive(&driven).await });
                        active.insert(task.id(), id);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the running rollouts"),
            }
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                () = self.0.wake.notified() => {}
                () = tokio::time::sleep(SCAN) => {}
                Some(ended) = tasks.join_next_with_id() => {
                    let id = match ended {
                        Ok((id, ())) => id,
                        Err(e) => {
                            tracing::error!(error = %e, "a rollout's task ended abnormally");
                            e.id()
                        }
                    };
                    active.remove(&id);
                }
            }
        }
    }

    /// Takes steps of rollout `id` until it ends.
    #[tracing::instrument(skip(self))]
    async fn drive(&self, id: &str) {
        let mut attempts = 0;
        loop {
            let wait = match self.step(id, &mut attempts).await {
                Ok(Step::Next) => continue,
                Ok(Step::Done) => return,
                Ok(Step::Retry) => RETRY,
                Err(e) => {
                    tracing::warn!(error = %e, "rollout step failed; trying again");
                    RETRY
                }
            };
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn step(&self, id: &str, attempts: &mut u32) -> Result<Step, RolloutError> {
        let Some(rollout) = self.0.store.rollout(id).await? else {
            return Ok(Step::Done);
        };
        if rollout.state != RolloutState::Running {
            return Ok(Step::Done);
        }
        let by = format!("hub (rollout {id})");
        let failing = rollout
            .hosts
            .iter()
            .any(|h| matches!(h.state, HostState::Failed | HostState::RollingBack));
        if rollout.stop_requested_by.is_some() || failing {
            return self.roll_back(&rollout, attempts, &by).await;
        }
        // Hosts caught mid-apply (a restart, a lost answer): ask their agents how it went.
        let applying: Vec<&RolloutHost> = rollout
            .hosts
            .iter()
            .filter(|h| h.state == HostState::Applying)
            .collect();
        if !applying.is_empty() {
            let mut moved = false;
            for host in applying {
                moved |= self.resume_apply(&rollout, host, &by).await?;
            }
            return Ok(if moved { Step::Next } else { Step::Retry });
        }
        let Some(batch) = rollout
            .hosts
            .iter()
            .filter(|h| matches!(h.state, HostState::Pending | HostState::Watching))
            .map(|h| h.batch)
            .min()
        else {
            self.finish(&rollout, RolloutState::Succeeded, None).await?;
            return Ok(Step::Done);
        };
        let hosts: Vec<&RolloutHost> = rollout.hosts.iter().filter(|h| h.batch == batch).collect();
        let version = self
            .0
            .profiles
            .version(&rollout.profile, rollout.version)
            .await?;
        let pending: Vec<&RolloutHost> = hosts
            .iter()
            .copied()
            .filter(|h| h.state == HostState::Pending)
            .collect();
        if !pending.is_empty() {
            tracing::info!(batch, hosts = pending.len(), "applying a batch");
            let applies = pending
                .iter()
                .map(|h| self.apply_host(&rollout, h, &version, &by));
            for applied in join_all(applies).await {
                applied?;
            }
            return Ok(Step::Next);
        }
        let watching: Vec<&RolloutHost> = hosts
            .iter()
            .copied()
            .filter(|h| h.state == HostState::Watching)
            .collect();
        let watch = chrono::Duration::seconds(i64::from(rollout.plan.watch_secs));
        let now = Utc::now();
        let ends = watching
            .iter()
            .map(|h| h.watch_started_at.unwrap_or(now) + watch)
            .max()
            .unwrap_or(now);
        if now < ends {
            self.wait_watch(id, ends).await?;
            return Ok(Step::Next);
        }
        self.check_and_confirm(&rollout, &watching, &version, &by)
            .await?;
        Ok(Step::Next)
    }

    /// Applies the version on one host: its current files read, the differing ones sent as a
    /// change recorded on the host first.
    async fn apply_host(
        &self,
        rollout: &Rollout,
        host: &RolloutHost,
        version: &ProfileVersion,
        by: &str,
    ) -> Result<(), RolloutError> {
        let server = host.server;
        let current = match self.0.fleet.config_files(server, by).await {
            Ok(current) => current,
            Err(e) => {
                let why = format!("the host's files could not be read: {e}");
                return self.fail_host(rollout, host, &why, None).await;
            }
        };
        let files = set_for(&version.files, &current.files);
        if files.is_empty() {
            let update = HostUpdate {
                state: Some(HostState::Confirmed),
                ..HostUpdate::default()
            };
            self.update_host(rollout, host, update).await?;
            return Ok(());
        }
        let change_id = uuid::Uuid::now_v7().to_string();
        let update = HostUpdate {
            state: Some(HostState::Applying),
            change_id: Some(&change_id),
            ..HostUpdate::default()
        };
        self.update_host(rollout, host, update).await?;
        let applied = self
            .0
            .changes
            .apply_as(&change_id, server, files, rollout.plan.confirm_secs, by)
            .await;
        match applied {
            Ok(change) if change.state == ChangeState::AwaitingConfirm => {
                self.watch_host(rollout, host).await
            }
            Ok(change) => {
                let why = format!(
                    "the change is {} after the apply: {}",
                    change.state.as_str(),
                    change.reason
                );
                self.fail_host(rollout, host, &why, None).await
            }
            Err(e) => {
                // A change the agent may still be applying stays `applying`, resumed later.
                let open = matches!(
                    self.0.changes.get(server, &change_id).await,
                    Ok(c) if c.state == ChangeState::Applying
                );
                if open {
                    tracing::info!(%server, error = %e, "apply not answered; asking the agent again later");
                    return Ok(());
                }
                self.fail_host(rollout, host, &format!("the apply failed: {e}"), None)
                    .await
            }
        }
    }

    /// Carries on with a host caught `applying`: `true` once it moved on.
    async fn resume_apply(
        &self,
        rollout: &Rollout,
        host: &RolloutHost,
        by: &str,
    ) -> Result<bool, RolloutError> {
        let Some(change_id) = host.change_id.as_deref() else {
            self.reset_host(rollout, host).await?;
            return Ok(true);
        };
        let change = match self.0.changes.get(host.server, change_id).await {
            Ok(change) if change.state == ChangeState::Applying => {
                match self.0.changes.refresh(host.server, change_id, by).await {
                    Ok(change) => change,
                    Err(ChangeError::Fleet(e @ FleetError::Agent { .. })) => {
                        let why = format!("the agent cannot say what became of the change: {e}");
                        self.fail_host(rollout, host, &why, None).await?;
                        return Ok(true);
                    }
                    Err(e) => {
                        let grace = chrono::Duration::from_std(
                            Duration::from_secs(u64::from(rollout.plan.confirm_secs)) + APPLY_GRACE,
                        )
                        .unwrap_or_default();
                        if Utc::now() > host.updated_at + grace {
                            let why =
                                format!("the agent did not say what became of the change: {e}");
                            self.fail_host(rollout, host, &why, None).await?;
                            return Ok(true);
                        }
                        return Ok(false);
                    }
                }
            }
            Ok(change) => change,
            // The change was never recorded, so never sent: the host is as it was.
            Err(ChangeError::NotFound(_)) => {
                self.reset_host(rollout, host).await?;
                return Ok(true);
            }
            Err(e) => return Err(e.into()),
        };
        match change.state {
            ChangeState::AwaitingConfirm | ChangeState::Confirmed => {
                self.watch_host(rollout, host).await?;
            }
            ChangeState::Applying => return Ok(false),
            ChangeState::Reverted | ChangeState::Failed => {
                let why = format!("the change is {}: {}", change.state.as_str(), change.reason);
                self.fail_host(rollout, host, &why, None).await?;
            }
        }
        Ok(true)
    }

    /// Waits until `ends`, reading the rollout every [`STOP_CHECK`] for an operator's stop.
    async fn wait_watch(&self, id: &str, ends: chrono::DateTime<Utc>) -> Result<(), RolloutError> {
        loop {
            let left = (ends - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Ok(());
            }
            tokio::select! {
                () = self.0.shutdown.cancelled() => return Ok(()),
                () = self.0.wake.notified() => {}
                () = tokio::time::sleep(left.min(STOP_CHECK)) => {}
            }
            let stopped =
                self.0.store.rollout(id).await?.is_none_or(|r| {
                    r.stop_requested_by.is_some() || r.state != RolloutState::Running
                });
            if stopped {
                return Ok(());
            }
        }
    }

    /// Checks each watched host of a batch; confirms the changes of those that pass, records
    /// the failures (which roll the rollout back at the next step).
    async fn check_and_confirm(
        &self,
        rollout: &Rollout,
        hosts: &[&RolloutHost],
        version: &ProfileVersion,
        by: &str,
    ) -> Result<(), RolloutError> {
        let jails = enabled_jails(&version.files);
        let ended = Utc::now();
        let watches: Vec<Watch<'_>> = hosts
            .iter()
            .map(|h| Watch {
                server: h.server,
                jails: &jails,
                started: h.watch_started_at.unwrap_or(ended),
                ended,
                max_ban_rate_factor: rollout.plan.max_ban_rate_factor,
                by,
            })
            .collect();
        let results = join_all(
            watches
                .iter()
                .map(|w| checks::run(&self.0.fleet, &self.0.store, w)),
        )
        .await;
        let mut all_ok = true;
        for (host, checks) in hosts.iter().zip(&results) {
            let failed: Vec<String> = checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| format!("{:?}: {}", c.name, c.detail))
                .collect();
            if failed.is_empty() {
                let update = HostUpdate {
                    checks: Some(checks),
                    ..HostUpdate::default()
                };
                self.update_host(rollout, host, update).await?;
            } else {
                all_ok = false;
                let why = format!(
                    "a check failed on {}: {}",
                    host.server_name,
                    failed.join("; ")
                );
                self.fail_host(rollout, host, &why, Some(checks)).await?;
            }
        }
        if !all_ok {
            return Ok(());
        }
        for host in hosts {
            let Some(change_id) = host.change_id.as_deref() else {
                continue;
            };
            match self
                .0
                .changes
                .settle(host.server, change_id, true, by)
                .await
            {
                Ok(change) if change.state == ChangeState::Confirmed => {
                    let update = HostUpdate {
                        state: Some(HostState::Confirmed),
                        ..HostUpdate::default()
                    };
                    self.update_host(rollout, host, update).await?;
                }
                Ok(change) => {
                    let why = format!(
                        "the confirmation found the change {}: {}",
                        change.state.as_str(),
                        change.reason
                    );
                    self.fail_host(rollout, host, &why, None).await?;
                }
                Err(e) => {
                    let why = format!("the change could not be confirmed: {e}");
                    self.fail_host(rollout, host, &why, None).await?;
                }
            }
        }
        Ok(())
    }

    /// Rolls back every host the rollout changed, skips those it never reached, and ends it:
    /// `stopped` (an operator's stop) or `rolledBack`, `failed` when a host cannot be undone.
    async fn roll_back(
        &self,
        rollout: &Rollout,
        attempts: &mut u32,
        by: &str,
    ) -> Result<Step, RolloutError> {
        let mut later = Vec::new();
        let mut failed = false;
        for host in &rollout.hosts {
            match host.state {
                HostState::Pending => {
                    let update = HostUpdate {
                        state: Some(HostState::Skipped),
                        ..HostUpdate::default()
                    };
                    self.update_host(rollout, host, update).await?;
                    continue;
                }
                HostState::Skipped | HostState::RolledBack => continue,
                _ => {}
            }
            let Some(change_id) = host.change_id.as_deref() else {
                // Nothing was written there by this rollout.
                if host.state != HostState::Failed {
                    self.set_state(rollout, host, HostState::RolledBack).await?;
                }
                continue;
            };
            if host.state != HostState::Failed || self.applied(host, change_id).await {
                self.set_state(rollout, host, HostState::RollingBack)
                    .await?;
            } else {
                continue;
            }
            match self.undo(host, change_id, by).await {
                Undo::Done => self.set_state(rollout, host, HostState::RolledBack).await?,
                Undo::Later(why) => later.push((host, why)),
                Undo::Failed(why) => {
                    failed = true;
                    let error = format!("could not be rolled back: {why}");
                    let update = HostUpdate {
                        state: Some(HostState::Failed),
                        error: Some(Some(&error)),
                        ..HostUpdate::default()
                    };
                    self.update_host(rollout, host, update).await?;
                }
            }
        }
        if !later.is_empty() {
            *attempts += 1;
            if *attempts < ROLLBACK_ATTEMPTS {
                tracing::info!(
                    hosts = later.len(),
                    "rollback waits for hosts to be reachable"
                );
                return Ok(Step::Retry);
            }
            for (host, why) in later {
                failed = true;
                let error = format!("could not be rolled back: {why}");
                let update = HostUpdate {
                    state: Some(HostState::Failed),
                    error: Some(Some(&error)),
                    ..HostUpdate::default()
                };
                self.update_host(rollout, host, update).await?;
            }
        }
        let (state, reason) = match (&rollout.stop_requested_by, failed) {
            (_, true) => (
                RolloutState::Failed,
                rollout
                    .reason
                    .clone()
                    .unwrap_or_else(|| "a host could not be rolled back".to_owned()),
            ),
            (Some(by), false) => (RolloutState::Stopped, format!("stopped by {by}")),
            (None, false) => (
                RolloutState::RolledBack,
                rollout
                    .reason
                    .clone()
                    .unwrap_or_else(|| "a host failed".to_owned()),
            ),
        };
        self.finish(rollout, state, Some(&reason)).await?;
        Ok(Step::Done)
    }

    /// Whether a failed host's change reached its files (an apply refused by fail2ban did not).
    async fn applied(&self, host: &RolloutHost, change_id: &str) -> bool {
        !matches!(
            self.0.changes.get(host.server, change_id).await,
            Ok(c) if c.state == ChangeState::Failed || c.state == ChangeState::Reverted
        ) && !matches!(
            self.0.changes.get(host.server, change_id).await,
            Err(ChangeError::NotFound(_))
        )
    }

    /// Has the agent put back the files a change replaced (pending or confirmed).
    async fn undo(&self, host: &RolloutHost, change_id: &str, by: &str) -> Undo {
        match self.0.changes.get(host.server, change_id).await {
            Ok(c) if matches!(c.state, ChangeState::Reverted | ChangeState::Failed) => {
                return Undo::Done;
            }
            Err(ChangeError::NotFound(_)) => return Undo::Done,
            _ => {}
        }
        match self
            .0
            .changes
            .settle(host.server, change_id, false, by)
            .await
        {
            Ok(c) if c.state == ChangeState::Reverted => Undo::Done,
            Ok(c) => Undo::Failed(format!("the change is {}: {}", c.state.as_str(), c.reason)),
            // The agent holds no record of it: it never reached the host's files.
            Err(ChangeError::Fleet(FleetError::Agent {
                kind: AgentErrorKind::NotFound,
                ..
            })) => Undo::Done,
            Err(ChangeError::Fleet(e @ FleetError::Agent { .. })) => Undo::Failed(e.to_string()),
            Err(e) => Undo::Later(e.to_string()),
        }
    }

    /// Records the end of a rollout, audits a rollback, and has the drift loop compare its hosts.
    async fn finish(
        &self,
        rollout: &Rollout,
        state: RolloutState,
        reason: Option<&str>,
    ) -> Result<(), RolloutError> {
        // The audit entry is written first, so a reader who sees the end also finds it.
        if state != RolloutState::Succeeded {
            self.audit(rollout, state, reason.unwrap_or_default()).await;
        }
        self.0
            .store
            .set_rollout_state(&rollout.id, state, reason, Utc::now())
            .await?;
        tracing::info!(rollout = %rollout.id, state = state.as_str(), reason, "rollout ended");
        for host in &rollout.hosts {
            self.0.profiles.recheck(Recheck::Server(host.server));
        }
        Ok(())
    }

    async fn audit(&self, rollout: &Rollout, state: RolloutState, reason: &str) {
        let mut detail = serde_json::Map::new();
        detail.insert("rollout".into(), rollout.id.clone().into());
        detail.insert("profile".into(), rollout.profile.to_string().into());
        detail.insert("version".into(), rollout.version.into());
        detail.insert("state".into(), state.as_str().into());
        detail.insert("reason".into(), reason.into());
        let record = AuditRecord {
            id: 0,
            at: Utc::now(),
            actor: "hub".to_owned(),
            actor_name: "rollout engine".to_owned(),
            actor_kind: "hub".to_owned(),
            action: "rollout rollback".to_owned(),
            path: format!("/api/rollouts/{}", rollout.id),
            server_id: None,
            status: 200,
            outcome: if state == RolloutState::Failed {
                Outcome::Failed
            } else {
                Outcome::Ok
            },
            detail,
            client_addr: None,
        };
        if let Err(e) = self.0.store.insert_audit(&record).await {
            tracing::error!(error = %e, "could not write the rollout's audit entry");
        }
    }

    async fn watch_host(&self, rollout: &Rollout, host: &RolloutHost) -> Result<(), RolloutError> {
        let update = HostUpdate {
            state: Some(HostState::Watching),
            watch_started_at: Some(host.watch_started_at.unwrap_or_else(Utc::now)),
            ..HostUpdate::default()
        };
        self.update_host(rollout, host, update).await
    }

    async fn reset_host(&self, rollout: &Rollout, host: &RolloutHost) -> Result<(), RolloutError> {
        self.set_state(rollout, host, HostState::Pending).await
    }

    async fn set_state(
        &self,
        rollout: &Rollout,
        host: &RolloutHost,
        state: HostState,
    ) -> Result<(), RolloutError> {
        let update = HostUpdate {
            state: Some(state),
            ..HostUpdate::default()
        };
        self.update_host(rollout, host, update).await
    }

    /// Records a host's failure and, as the rollout's reason, the first failure.
    async fn fail_host(
        &self,
        rollout: &Rollout,
        host: &RolloutHost,
        why: &str,
        checks: Option<&[Check]>,
    ) -> Result<(), RolloutError> {
        tracing::warn!(rollout = %rollout.id, server = %host.server, why, "rollout host failed");
        let update = HostUpdate {
            state: Some(HostState::Failed),
            checks,
            error: Some(Some(why)),
            ..HostUpdate::default()
        };
        self.update_host(rollout, host, update).await?;
        let current = self.0.store.rollout(&rollout.id).await?;
        if current.is_some_and(|r| r.reason.is_none()) {
            let reason = format!("{}: {why}", host.server_name);
            self.0
                .store
                .set_rollout_state(
                    &rollout.id,
                    RolloutState::Running,
                    Some(&reason),
                    Utc::now(),
                )
                .await?;
        }
        Ok(())
    }

    async fn update_host(
        &self,
        rollout: &Rollout,
        host: &RolloutHost,
        update: HostUpdate<'_>,
    ) -> Result<(), RolloutError> {
        self.0
            .store
            .update_rollout_host(&rollout.id, host.server, update, Utc::now())
            .await
            .map_err(|e: StoreError| e.into())
    }
}
