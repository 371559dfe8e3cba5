//! Rollouts: a profile version applied to many servers safely. A rollout is stored with every
//! host's batch before anything is sent; the engine ([`engine`], on one replica at a time) applies
//! each batch through commit-confirm config changes, watches the batch ([`checks`]), confirms it
//! when every check passes, and on a failed check, a failed apply or an operator's stop rolls
//! back every host it changed. Each step is written to the store before it is acted on, so a
//! restarted hub resumes a running rollout where the store says it stands.
//!
//! Entry points: [`Rollouts::start`], [`Rollouts::stop`], the readings, and [`Rollouts::run`].

mod checks;
mod engine;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config_changes::{ChangeError, ConfigChanges};
use crate::domain::profiles::{ProfileName, selector_matches};
use crate::domain::rollouts::{
    HostState, PlanError, Rollout, RolloutHost, RolloutPlan, RolloutState, plan_batches,
};
use crate::domain::{Server, ServerId};
use crate::fleet::{Fleet, FleetError};
use crate::profiles::{ProfileError, Profiles};
use crate::store::{Store, StoreError};

/// The singleton job that drives the rollouts (one replica at a time).
pub const JOB: &str = "rollouts";
/// Most rollouts a listing returns.
pub const MAX_LIST: u64 = 500;
/// How long a stop waits for the engine to finish the rollback before it answers.
const STOP_WAIT: Duration = Duration::from_secs(60);
/// How often a waiting stop reads the rollout again.
const STOP_POLL: Duration = Duration::from_millis(250);

/// Why a rollout was refused.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Invalid(#[from] PlanError),
    #[error("servers: {0}")]
    NoServers(String),
    #[error("no rollout {0}")]
    NotFound(String),
    #[error("rollout {id} of profile {profile} is still running; stop it or wait until it ends")]
    Running { id: String, profile: String },
    #[error("rollout {id} is {state}, not running")]
    NotRunning { id: String, state: &'static str },
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `POST /api/rollouts` asks for.
#[derive(Debug, Clone)]
pub struct NewRollout {
    pub profile: ProfileName,
    pub version: i64,
    /// `None`: every server the profile is assigned to.
    pub servers: Option<Vec<ServerId>>,
    pub plan: RolloutPlan,
    pub by: String,
}

/// The rollout service; cheap to clone.
#[derive(Debug, Clone)]
pub struct Rollouts(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    store: Store,
    fleet: Fleet,
    profiles: Profiles,
    changes: ConfigChanges,
    shutdown: CancellationToken,
    /// Wakes the engine when a rollout starts or is asked to stop here.
    wake: Notify,
}

impl Rollouts {
    pub fn new(
        store: Store,
        fleet: Fleet,
        profiles: Profiles,
        changes: ConfigChanges,
        shutdown: CancellationToken,
    ) -> Self {
        Self(Arc::new(Inner {
            store,
            fleet,
            profiles,
            changes,
            shutdown,
            wake: Notify::new(),
        }))
    }

    /// Records a rollout of `new.version` to its servers, every host pending in its batch, and
    /// hands it to the engine.
    #[tracing::instrument(skip_all, fields(profile = %new.profile, version = new.version), err)]
    pub async fn start(&self, new: NewRollout) -> Result<Rollout, RolloutError> {
        new.plan.check()?;
        let profile = self.0.profiles.get(&new.profile).await?;
        self.0.profiles.version(&new.profile, new.version).await?;
        let servers: Vec<Server> = match new.servers {
            Some(ids) => {
                if ids.is_empty() {
                    return Err(RolloutError::NoServers(
                        "name at least one server, or leave the list out".to_owned(),
                    ));
                }
                let mut seen = HashSet::new();
                let mut servers = Vec::with_capacity(ids.len());
                for id in ids {
                    if seen.insert(id) {
                        servers.push(self.0.fleet.get(id).await?.server);
                    }
                }
                servers
            }
            None => {
                let mut servers: Vec<Server> = self
                    .0
                    .store
                    .list_servers()
                    .await?
                    .into_iter()
                    .filter(|s| selector_matches(&profile.selector, s))
                    .collect();
                if servers.is_empty() {
                    return Err(RolloutError::NoServers(format!(
                        "profile {} is assigned to no server; name the servers",
                        profile.name
                    )));
                }
                servers.sort_by_key(|s| s.name.to_string());
                servers
            }
        };
        let now = Utc::now();
        let batches = plan_batches(servers.len(), new.plan.canary, new.plan.batch_size);
        let hosts = servers
            .into_iter()
            .zip(batches)
            .enumerate()
            .map(|(position, (server, batch))| RolloutHost {
                server: server.id,
                server_name: server.name.to_string(),
                batch,
                position: u32::try_from(position).unwrap_or(u32::MAX),
                state: HostState::Pending,
                checks: Vec::new(),
                error: None,
                change_id: None,
                watch_started_at: None,
                updated_at: now,
            })
            .collect();
        let rollout = Rollout {
            id: uuid::Uuid::now_v7().to_string(),
            profile: new.profile,
            version: new.version,
            state: RolloutState::Running,
            plan: new.plan,
            created_by: new.by,
            created_at: now,
            updated_at: now,
            finished_at: None,
            reason: None,
            stop_requested_by: None,
            hosts,
        };
        if !self.0.store.insert_rollout(&rollout).await? {
            let running = self.0.store.rollouts(MAX_LIST).await?;
            let id = running
                .into_iter()
                .find(|r| r.profile == rollout.profile && r.state == RolloutState::Running)
                .map(|r| r.id)
                .unwrap_or_default();
            return Err(RolloutError::Running {
                id,
                profile: rollout.profile.to_string(),
            });
        }
        tracing::info!(rollout = %rollout.id, hosts = rollout.hosts.len(), by = %rollout.created_by, "rollout started");
        self.0.wake.notify_one();
        Ok(rollout)
    }

    /// Asks the engine to stop a running rollout and roll back every host it changed; answers
    /// once it has (or after [`STOP_WAIT`], still running, when the rollback takes longer).
    #[tracing::instrument(skip_all, fields(rollout = id), err)]
    pub async fn stop(&self, id: &str, by: &str) -> Result<Rollout, RolloutError> {
        match self
            .0
            .store
            .request_rollout_stop(id, by, Utc::now())
            .await?
        {
            None => return Err(RolloutError::NotFound(id.to_owned())),
            Some(false) => {
                let rollout = self.get(id).await?;
                return Err(RolloutError::NotRunning {
                    id: id.to_owned(),
                    state: rollout.state.as_str(),
                });
            }
            Some(true) => {}
        }
        tracing::info!(rollout = id, %by, "rollout stop requested");
        self.0.wake.notify_one();
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        loop {
            let rollout = self.get(id).await?;
            if rollout.state != RolloutState::Running || tokio::time::Instant::now() >= deadline {
                return Ok(rollout);
            }
            tokio::select! {
                () = self.0.shutdown.cancelled() => return Ok(rollout),
                () = tokio::time::sleep(STOP_POLL) => {}
            }
        }
    }

    /// One rollout with its hosts.
    pub async fn get(&self, id: &str) -> Result<Rollout, RolloutError> {
        self.0
            .store
            .rollout(id)
            .await?
            .ok_or_else(|| RolloutError::NotFound(id.to_owned()))
    }

    /// Rollouts without their hosts, newest first.
    pub async fn list(&self, limit: u64) -> Result<Vec<Rollout>, RolloutError> {
        Ok(self.0.store.rollouts(limit.min(MAX_LIST)).await?)
    }
}
