//! Config changes: a set of fail2ban files applied to one server with commit-confirm. The change
//! is stored before it is sent; the agent applies it and reverts by itself unless confirmed before
//! its deadline; the hub confirms only once it hears from the agent after the reload (a round trip
//! on the session after a short hold, or the agent's next session within the window), and records
//! what the agent answers. Open changes are followed again at start and whenever an agent's
//! session starts here, so a hub restart resumes confirming them or records how they ended.
//!
//! Entry points: [`ConfigChanges::apply`], [`ConfigChanges::revert`], the listings, and
//! [`ConfigChanges::run`].

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::domain::ServerId;
use crate::domain::config_changes::{ChangeState, ConfigChange, SetError, SetFile, check_set};
use crate::fleet::{AgentChange, AgentPhase, Fleet, FleetError};
use crate::store::config_changes::ChangeUpdate;
use crate::store::{Store, StoreError};

/// Most changes a listing returns.
pub const LIST_LIMIT: u64 = 200;
/// The longest the hub waits after the reload before it confirms: a change that cuts the host off
/// within this time is never confirmed.
const MAX_HOLD: Duration = Duration::from_secs(30);
/// How often open changes of agents connected here are followed again.
const SWEEP: Duration = Duration::from_secs(30);
/// Who the hub's own confirmations are sent as.
const HUB: &str = "hub (config change)";

/// Why a change was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error(transparent)]
    Invalid(#[from] SetError),
    #[error("no config change {0} on this server")]
    NotFound(String),
    #[error(
        "config change {id} of this server is still {state}; wait until it is confirmed or reverted"
    )]
    Open { id: String, state: &'static str },
    #[error("config change {id} is {state}, so there is nothing to revert")]
    NotRevertible { id: String, state: &'static str },
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The config-change service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConfigChanges {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    fleet: Fleet,
    shutdown: CancellationToken,
}

/// How long the hub holds off its confirmation after the reload: a third of the window, at most
/// [`MAX_HOLD`].
fn hold(window_secs: u32) -> Duration {
    (Duration::from_secs(u64::from(window_secs)) / 3).min(MAX_HOLD)
}

impl ConfigChanges {
    pub fn new(store: Store, fleet: Fleet, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                fleet,
                shutdown,
            }),
        }
    }

    /// Applies `files` on `server`: stored first, then sent; answers once the agent has applied
    /// (or refused) it. With a window, the confirmation follows in the background.
    pub async fn apply(
        &self,
        server: ServerId,
        files: Vec<SetFile>,
        confirm_within_secs: u32,
        by: &str,
    ) -> Result<ConfigChange, ChangeError> {
        let id = uuid::Uuid::now_v7().to_string();
        self.apply_as(&id, server, files, confirm_within_secs, by)
            .await
    }

    /// [`Self::apply`] as change `id`, chosen by the caller (a rollout records it first). A
    /// change a running rollout holds is confirmed by the rollout, not in the background.
    #[tracing::instrument(skip_all, fields(server_id = %server, change = id), err)]
    pub async fn apply_as(
        &self,
        id: &str,
        server: ServerId,
        files: Vec<SetFile>,
        confirm_within_secs: u32,
        by: &str,
    ) -> Result<ConfigChange, ChangeError> {
        check_set(&files, confirm_within_secs)?;
        self.inner.fleet.get(server).await?;
        if let Some(open) = self
            .inner
            .store
            .open_config_changes(Some(server))
            .await?
            .into_iter()
            .next()
        {
            return Err(ChangeError::Open {
                id: open.id,
                state: open.state.as_str(),
            });
        }
        let now = Utc::now();
        let change = ConfigChange {
            id: id.to_owned(),
            server,
            files,
            confirm_within_secs,
            state: ChangeState::Applying,
            reason: "sent to the agent".to_owned(),
            deadline: None,
            applied: Vec::new(),
            created_by: by.to_owned(),
            created_at: now,
            updated_at: now,
        };
        self.inner.store.insert_config_change(&change).await?;
        let answer = self
            .inner
            .fleet
            .apply_config_set(server, &change.id, &change.files, confirm_within_secs, by)
            .await;
        match answer {
            Ok(answer) => {
                let recorded = self.record(&change.id, &answer).await?;
                if recorded.state == ChangeState::AwaitingConfirm {
                    let this = self.clone();
                    let wait = hold(confirm_within_secs);
                    tokio::spawn(async move {
                        tokio::select! {
                            () = this.inner.shutdown.cancelled() => {}
                            () = tokio::time::sleep(wait) => this.follow(server).await,
                        }
                    });
                }
                Ok(recorded)
            }
            Err(e) => {
                // Refused by the agent, or never sent: nothing changed on the host. A timeout or
                // a lost session leaves it `applying`, to be asked again when the agent is back.
                if matches!(e, FleetError::Agent { .. } | FleetError::Offline) {
                    self.update(&change.id, ChangeState::Failed, &e.to_string(), None)
                        .await?;
                }
                Err(e.into())
            }
        }
    }

    /// Has the agent put back the files the change replaced, now.
    #[tracing::instrument(skip_all, fields(server_id = %server, change = id), err)]
    pub async fn revert(
        &self,
        server: ServerId,
        id: &str,
        by: &str,
    ) -> Result<ConfigChange, ChangeError> {
        let change = self.get(server, id).await?;
        if !matches!(
            change.state,
            ChangeState::AwaitingConfirm | ChangeState::Confirmed
        ) {
            return Err(ChangeError::NotRevertible {
                id: change.id,
                state: change.state.as_str(),
            });
        }
        let answer = self
            .inner
            .fleet
            .settle_config_set(server, id, false, by)
            .await?;
        self.record(id, &answer).await
    }

    /// Confirms a change (`confirm`) or has the agent put its files back now, and records the
    /// answer: how a rollout settles the changes it holds.
    #[tracing::instrument(skip_all, fields(server_id = %server, change = id), err)]
    pub async fn settle(
        &self,
        server: ServerId,
        id: &str,
        confirm: bool,
        by: &str,
    ) -> Result<ConfigChange, ChangeError> {
        let answer = self
            .inner
            .fleet
            .settle_config_set(server, id, confirm, by)
            .await?;
        self.record(id, &answer).await
    }

    /// Asks the agent what became of a change and records the answer.
    pub async fn refresh(
        &self,
        server: ServerId,
        id: &str,
        by: &str,
    ) -> Result<ConfigChange, ChangeError> {
        let answer = self.inner.fleet.config_set_status(server, id, by).await?;
        self.record(id, &answer).await
    }

    /// One change of a server.
    pub async fn get(&self, server: ServerId, id: &str) -> Result<ConfigChange, ChangeError> {
        self.inner
            .store
            .config_change(server, id)
            .await?
            .ok_or_else(|| ChangeError::NotFound(id.to_owned()))
    }

    /// A server's changes, newest first.
    pub async fn list(&self, server: ServerId) -> Result<Vec<ConfigChange>, ChangeError> {
        self.inner.fleet.get(server).await?;
        Ok(self.inner.store.config_changes(server, LIST_LIMIT).await?)
    }

    /// Follows the open changes at start, whenever an agent's session starts here, and every
    /// [`SWEEP`], until the hub shuts down.
    pub async fn run(self) {
        let mut starts = self.inner.fleet.session_starts();
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.inner.shutdown.cancelled() => return,
                started = starts.recv() => match started {
                    Ok(server) => self.follow(server).await,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.sweep().await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = sweep.tick() => self.sweep().await,
            }
        }
    }

    /// Follows the open changes of every agent connected here.
    async fn sweep(&self) {
        let open = match self.inner.store.open_config_changes(None).await {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the open config changes");
                return;
            }
        };
        let live = self.inner.fleet.local_servers();
        let mut servers: Vec<ServerId> = open
            .into_iter()
            .map(|c| c.server)
            .filter(|s| live.contains(s))
            .collect();
        servers.dedup();
        for server in servers {
            self.follow(server).await;
        }
    }

    /// Hearing from the agent after the reload: confirms the server's open changes, or records
    /// what the agent did with them (reverted at its deadline, never applied).
    async fn follow(&self, server: ServerId) {
        let open = match self.inner.store.open_config_changes(Some(server)).await {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(%server, error = %e, "cannot read the server's open config changes");
                return;
            }
        };
        // A running rollout confirms or reverts its hosts' changes itself, after its checks.
        let held = match self.inner.store.rollout_held_changes().await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(%server, error = %e, "cannot read the changes rollouts hold");
                return;
            }
        };
        let now = Utc::now();
        for change in open.into_iter().filter(|c| !held.contains(&c.id)) {
            // The confirmation waits for its hold after the reload, whatever wakes it earlier.
            let held =
                chrono::Duration::from_std(hold(change.confirm_within_secs)).unwrap_or_default();
            if change.state == ChangeState::AwaitingConfirm && now < change.updated_at + held {
                continue;
            }
            let fleet = &self.inner.fleet;
            let answer = match change.state {
                ChangeState::Applying => fleet.config_set_status(server, &change.id, HUB).await,
                _ => fleet.settle_config_set(server, &change.id, true, HUB).await,
            };
            let answer = match answer {
                // A change the agent says is pending is confirmed now: the hub hears from it.
                Ok(a)
                    if a.phase == AgentPhase::Pending && change.state == ChangeState::Applying =>
                {
                    fleet.settle_config_set(server, &change.id, true, HUB).await
                }
                other => other,
            };
            match answer {
                Ok(answer) => {
                    if let Err(e) = self.record(&change.id, &answer).await {
                        tracing::warn!(%server, change = %change.id, error = %e, "cannot record a config change");
                    }
                }
                Err(FleetError::Agent { message, .. }) => {
                    let reason = format!("the agent holds no record of the change: {message}");
                    if let Err(e) = self
                        .update(&change.id, ChangeState::Failed, &reason, None)
                        .await
                    {
                        tracing::warn!(%server, change = %change.id, error = %e, "cannot record a config change");
                    }
                }
                Err(e) => {
                    tracing::info!(%server, change = %change.id, error = %e, "config change not settled yet; the agent is asked again when it is back");
                }
            }
        }
    }

    /// Stores what the agent answered about a change.
    async fn record(&self, id: &str, answer: &AgentChange) -> Result<ConfigChange, ChangeError> {
        let state = match answer.phase {
            AgentPhase::Pending => ChangeState::AwaitingConfirm,
            AgentPhase::Confirmed => ChangeState::Confirmed,
            AgentPhase::Reverted => ChangeState::Reverted,
            AgentPhase::Unknown => ChangeState::Failed,
        };
        let deadline = (answer.deadline_unix_ms > 0)
            .then(|| chrono::DateTime::from_timestamp_millis(answer.deadline_unix_ms))
            .flatten();
        let applied = (!answer.files.is_empty()).then_some(answer.files.as_slice());
        let update = ChangeUpdate {
            state,
            reason: &answer.reason,
            deadline,
            applied,
        };
        tracing::info!(change = id, state = state.as_str(), reason = %answer.reason, "config change");
        self.inner
            .store
            .update_config_change(id, update, Utc::now())
            .await?
            .ok_or_else(|| ChangeError::NotFound(id.to_owned()))
    }

    async fn update(
        &self,
        id: &str,
        state: ChangeState,
        reason: &str,
        deadline: Option<chrono::DateTime<Utc>>,
    ) -> Result<Option<ConfigChange>, ChangeError> {
        let update = ChangeUpdate {
            state,
            reason,
            deadline,
            applied: None,
        };
        Ok(self
            .inner
            .store
            .update_config_change(id, update, Utc::now())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_is_a_third_of_the_window_at_most_thirty_seconds() {
        assert_eq!(hold(0), Duration::ZERO);
        assert_eq!(hold(12), Duration::from_secs(4));
        assert_eq!(hold(3600), MAX_HOLD);
    }
}
