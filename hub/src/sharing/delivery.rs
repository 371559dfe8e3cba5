//! Delivering shared bans to their targets: what changed goes out at once to the targets the
//! engine or an API call touched; a target whose agent's session starts on this replica gets the
//! whole set it should hold; and a pass on every replica retries, for the agents it holds, what
//! was not confirmed. Each target is told one thing at a time (per replica), and its rows are
//! settled only after its agent confirmed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::broadcast::error::RecvError;

use super::{REQUESTED_BY, Sharing};
use crate::domain::ServerId;
use crate::domain::sharing::SharedBanSync;
use crate::fleet::{AgentErrorKind, FleetError};
use crate::store::sharing::TargetWork;

/// How often every replica retries what its agents have not confirmed.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Targets told at once by one pass.
const PARALLEL: usize = 64;

/// One lock per target server, so a target is told one thing at a time by this replica.
#[derive(Debug, Default)]
pub(super) struct TargetLocks(Mutex<HashMap<ServerId, Arc<tokio::sync::Mutex<()>>>>);

impl TargetLocks {
    fn of(&self, target: ServerId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(target).or_default())
    }
}

/// The command that tells a target `work`.
fn sync_of(work: &TargetWork, full: bool) -> SharedBanSync {
    SharedBanSync {
        full,
        bans: work
            .holds
            .iter()
            .map(|(ip, (expires, reason))| (ip.clone(), expires.unwrap_or(0), reason.clone()))
            .collect(),
        lift: work.lifts.clone(),
    }
}

impl Sharing {
    /// Tells each of `targets` what changed, waiting for their answers.
    pub(super) async fn deliver_now(&self, targets: Vec<ServerId>) {
        use futures::StreamExt as _;
        futures::stream::iter(targets)
            .for_each_concurrent(PARALLEL, |target| async move {
                self.deliver(target, false).await;
            })
            .await;
    }

    /// Tells `target` what changed (or, with `full`, every shared ban it should hold) and settles
    /// the rows once its agent confirmed. An offline target keeps its rows pending.
    async fn deliver(&self, target: ServerId, full: bool) {
        let lock = self.0.target_locks.of(target);
        let _told_alone = lock.lock().await;
        let now = Utc::now().timestamp_millis();
        let work = match self.0.store.shared_work(target, full, now).await {
            Ok(work) => work,
            Err(e) => {
                tracing::warn!(%target, error = %e, "sharing: cannot read a target's shared bans; the next pass retries");
                return;
            }
        };
        if work.is_empty() && work.pending_ids.is_empty() && work.lift_ids.is_empty() {
            return;
        }
        let sync = sync_of(&work, full);
        match self
            .0
            .fleet
            .sync_shared_bans(target, &sync, REQUESTED_BY)
            .await
        {
            Ok(report) => {
                if !report.refused.is_empty() {
                    tracing::warn!(%target, refused = ?report.refused, "the agent refused shared bans");
                }
                tracing::debug!(%target, full, held = report.held, added = report.added, lifted = report.lifted, "shared bans delivered");
                let now = Utc::now().timestamp_millis();
                if let Err(e) = self.0.store.settle_shared_work(&work, now).await {
                    tracing::warn!(%target, error = %e, "sharing: cannot record a delivery; it is sent again");
                }
            }
            Err(FleetError::Offline | FleetError::SessionEnded | FleetError::NotEnrolled) => {
                tracing::debug!(%target, "shared bans wait for the target's agent");
            }
            Err(FleetError::Agent {
                kind: AgentErrorKind::Unsupported,
                ..
            }) => {
                tracing::debug!(%target, "the target's agent does not hold shared bans; upgrade it");
            }
            Err(e) => tracing::warn!(%target, error = %e, "shared bans not delivered; retrying"),
        }
    }

    /// On every replica until shutdown: the whole set to each agent whose session starts here, and
    /// a pass now and then for what its agents have not confirmed.
    pub async fn run_delivery(self) {
        let mut starts = self.0.fleet.session_starts();
        let mut ticker = tokio::time::interval(RETRY_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                started = starts.recv() => match started {
                    Ok(server) => {
                        let sharing = self.clone();
                        tokio::spawn(tracing::Instrument::in_current_span(async move {
                            sharing.deliver(server, true).await;
                        }));
                    }
                    Err(RecvError::Lagged(_)) => self.retry_pass().await,
                    Err(RecvError::Closed) => return,
                },
                _ = ticker.tick() => self.retry_pass().await,
                () = self.0.work_due.notified() => self.retry_pass().await,
            }
        }
    }

    /// Tells the targets whose agent this replica holds what they have not confirmed.
    async fn retry_pass(&self) {
        let now = Utc::now().timestamp_millis();
        let targets = match self.0.store.targets_with_shared_work(now).await {
            Ok(targets) => targets,
            Err(e) => {
                tracing::warn!(error = %e, "sharing: cannot read the targets with work");
                return;
            }
        };
        let here: Vec<ServerId> = targets
            .into_iter()
            .filter(|t| self.0.fleet.holds_session(*t))
            .collect();
        self.deliver_now(here).await;
    }
}
