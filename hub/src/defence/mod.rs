//! Fleet defence beside the sharing engine: the fleet recidive rules (kept, and evaluated for each
//! ban event the engine reads) and the storm breaker (asked before a source's shared bans are
//! recorded; when it trips, the pause is stored, an alert notice is sent and the
//! `banhub_sharing_paused_sources` gauge counts it until an admin resumes the source).
//!
//! The breaker's windows live in the memory of the replica running the engine (a singleton job);
//! the pauses live in the store, which stays the truth: [`Defence::run`] reads them again every
//! few seconds, so a source resumed on another replica shares again.

mod recidive;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

pub use recidive::RecidiveBan;

use crate::alerts::Alerts;
use crate::alerts::notice::Notice;
use crate::domain::ServerId;
use crate::domain::breaker::{Admission, SourcePause, StormBreaker};
use crate::domain::recidive::{RecidiveRule, RecidiveSpec, RuleError, StoredRule};
use crate::metrics::Metrics;
use crate::store::{RuleWrite, Store, StoreError};

/// How often the stored pauses are read again (a resume on another replica takes effect then).
const PAUSES_RELOAD: Duration = Duration::from_secs(2);

/// The `rule.id` of the alert notice sent when a source is paused.
pub const PAUSED_NOTICE: &str = "sharing-paused";

/// Why a defence request failed.
#[derive(Debug, thiserror::Error)]
pub enum DefenceError {
    #[error(transparent)]
    Invalid(#[from] RuleError),
    #[error("a recidive rule named {0:?} already exists")]
    NameTaken(String),
    #[error("no recidive rule {0}")]
    NoRule(i64),
    #[error("sharing from server {0} is not paused")]
    NotPaused(ServerId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A trip of this replica's breaker, until the store shows its pause.
#[derive(Debug, Clone, Copy)]
struct Trip {
    at: DateTime<Utc>,
    count: u64,
    /// When the pause was written (`None`: not yet).
    stored_at: Option<Instant>,
}

/// The breaker and the trips the store may not show yet.
struct BreakerState {
    breaker: StormBreaker,
    trips: HashMap<ServerId, Trip>,
}

struct Inner {
    store: Store,
    alerts: Alerts,
    metrics: Metrics,
    breaker: Mutex<BreakerState>,
    rules: recidive::RuleCache,
}

/// The defence service; cheap to clone.
#[derive(Clone)]
pub struct Defence(Arc<Inner>);

impl std::fmt::Debug for Defence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Defence").finish_non_exhaustive()
    }
}

impl Defence {
    /// A service whose breaker trips a source past `storm_limit` shared bans a minute.
    pub fn new(store: Store, alerts: Alerts, metrics: Metrics, storm_limit: u32) -> Self {
        Self(Arc::new(Inner {
            store,
            alerts,
            metrics,
            breaker: Mutex::new(BreakerState {
                breaker: StormBreaker::new(storm_limit),
                trips: HashMap::new(),
            }),
            rules: recidive::RuleCache::default(),
        }))
    }

    fn breaker(&self) -> MutexGuard<'_, BreakerState> {
        // A panic while holding the lock leaves counts only; they are still usable.
        self.0
            .breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub async fn rules(&self) -> Result<Vec<StoredRule>, DefenceError> {
        Ok(self.0.store.list_recidive_rules().await?)
    }

    pub async fn rule(&self, id: i64) -> Result<StoredRule, DefenceError> {
        self.0
            .store
            .recidive_rule(id)
            .await?
            .ok_or(DefenceError::NoRule(id))
    }

    pub async fn create_rule(&self, spec: RecidiveSpec) -> Result<StoredRule, DefenceError> {
        let rule = RecidiveRule::parse(spec)?;
        let written = self.0.store.create_recidive_rule(&rule).await?;
        self.0.rules.invalidate();
        saved(written, &rule, 0)
    }

    pub async fn update_rule(
        &self,
        id: i64,
        spec: RecidiveSpec,
    ) -> Result<StoredRule, DefenceError> {
        let rule = RecidiveRule::parse(spec)?;
        let written = self.0.store.update_recidive_rule(id, &rule).await?;
        self.0.rules.invalidate();
        saved(written, &rule, id)
    }

    pub async fn delete_rule(&self, id: i64) -> Result<(), DefenceError> {
        let deleted = self.0.store.delete_recidive_rule(id).await?;
        self.0.rules.invalidate();
        if deleted {
            Ok(())
        } else {
            Err(DefenceError::NoRule(id))
        }
    }

    /// The sources paused now.
    pub async fn pauses(&self) -> Result<Vec<SourcePause>, DefenceError> {
        let pauses = self.0.store.open_pauses().await?;
        self.0
            .metrics
            .sharing_paused_sources
            .set(i64::try_from(pauses.len()).unwrap_or(i64::MAX));
        Ok(pauses)
    }

    /// Lets `server` share again; `by` is who asked.
    pub async fn resume(&self, server: ServerId, by: &str) -> Result<SourcePause, DefenceError> {
        let resumed = self.0.store.resume_source(server, by, Utc::now()).await?;
        let Some(pause) = resumed else {
            return Err(DefenceError::NotPaused(server));
        };
        {
            let mut state = self.breaker();
            state.breaker.resume(server);
            state.trips.remove(&server);
        }
        tracing::info!(server = %server, by, "sharing from the server resumed");
        self.pauses().await?;
        Ok(pause)
    }

    /// Asks the breaker whether `bans` shared bans caused by an event of `source` may be
    /// recorded now. False while the source is paused, and when these bans trip it: the pause is
    /// then stored and announced in the background. Only sharing stops; the source's events are
    /// stored as always.
    pub fn admit(&self, source: ServerId, bans: usize) -> bool {
        let bans = u32::try_from(bans).unwrap_or(u32::MAX);
        let now = Utc::now();
        let mut state = self.breaker();
        match state.breaker.admit(source, bans, now) {
            Admission::Admitted => true,
            Admission::Paused => false,
            Admission::Tripped { count } => {
                tracing::warn!(
                    server = %source,
                    shared_bans = count,
                    limit = state.breaker.limit(),
                    "storm breaker tripped: sharing from the server is paused until an admin \
                     resumes it"
                );
                state.trips.insert(
                    source,
                    Trip {
                        at: now,
                        count,
                        stored_at: None,
                    },
                );
                drop(state);
                let defence = self.clone();
                tokio::spawn(tracing::Instrument::in_current_span(async move {
                    if let Err(e) = defence.store_trips().await {
                        tracing::warn!(error = %e, "cannot store a pause yet; retrying");
                    }
                }));
                false
            }
        }
    }

    /// Whether sharing from `source` is paused (as this replica last knew).
    pub fn is_paused(&self, source: ServerId) -> bool {
        self.breaker().breaker.is_paused(source)
    }

    /// Keeps the breaker's paused sources those of the store (plus this replica's trips not yet
    /// stored, stored again meanwhile) until shutdown. Spawn it once.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.reload_pauses().await {
                tracing::warn!(error = %e, "defence: cannot read the paused sources; retrying");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PAUSES_RELOAD) => {}
            }
        }
    }

    /// Stores the pauses of this replica's trips not stored yet, and announces the new ones.
    async fn store_trips(&self) -> Result<(), StoreError> {
        let (limit, unstored) = {
            let state = self.breaker();
            let unstored: Vec<(ServerId, Trip)> = state
                .trips
                .iter()
                .filter(|(_, trip)| trip.stored_at.is_none())
                .map(|(server, trip)| (*server, *trip))
                .collect();
            (state.breaker.limit(), unstored)
        };
        for (server, trip) in unstored {
            let reason = storm_reason(trip.count, limit);
            let new = self
                .0
                .store
                .pause_source(server, trip.at, trip.count, &reason)
                .await?;
            if let Some(stored) = self.breaker().trips.get_mut(&server) {
                stored.stored_at = Some(Instant::now());
            }
            if new {
                self.announce(server, trip.count, limit).await;
            }
        }
        self.pauses().await.map_err(store_error)?;
        Ok(())
    }

    /// Sends the alert notice of a new pause.
    async fn announce(&self, source: ServerId, count: u64, limit: u32) {
        let name = match self.0.store.get_server(source).await {
            Ok(Some(server)) => server.name.to_string(),
            _ => source.to_string(),
        };
        let notice = Notice {
            kind: PAUSED_NOTICE,
            title: format!("Sharing paused for server {name}"),
            text: format!(
                "The storm breaker paused sharing from server {name} ({source}): its bans would \
                 have caused {count} shared bans within a minute, over the limit of {limit} \
                 (defence.storm_limit_per_minute). Its events are still stored, but none of its \
                 bans is shared until an admin resumes it (Sharing → Paused sources, or POST \
                 /api/sharing/pauses/{source}/resume)."
            ),
        };
        if let Err(e) = self.0.alerts.notify(notice).await {
            tracing::warn!(error = %e, server = %source, "cannot send the pause notice");
        }
    }

    /// Makes the breaker's paused sources the stored ones, plus the trips the store did not show
    /// when it was read. A trip stored before the read and missing from it was resumed meanwhile.
    async fn reload_pauses(&self) -> Result<(), StoreError> {
        self.store_trips().await?;
        let read_at = Instant::now();
        let stored = self.pauses().await.map_err(store_error)?;
        let mut state = self.breaker();
        let mut paused: HashSet<ServerId> = stored.iter().map(|p| p.server).collect();
        state.trips.retain(|server, trip| {
            !paused.contains(server) && trip.stored_at.is_none_or(|at| at > read_at)
        });
        paused.extend(state.trips.keys().copied());
        state.breaker.set_paused(paused);
        state.breaker.prune(Utc::now());
        Ok(())
    }
}

fn store_error(e: DefenceError) -> StoreError {
    match e {
        DefenceError::Store(e) => e,
        other => StoreError::Corrupt(other.to_string()),
    }
}

fn storm_reason(count: u64, limit: u32) -> String {
    format!("storm: {count} shared bans within a minute, over the limit of {limit}")
}

fn saved(written: RuleWrite, rule: &RecidiveRule, id: i64) -> Result<StoredRule, DefenceError> {
    match written {
        RuleWrite::Saved(stored) => Ok(*stored),
        RuleWrite::NameTaken => Err(DefenceError::NameTaken(rule.spec().name.clone())),
        RuleWrite::NotFound => Err(DefenceError::NoRule(id)),
    }
}
