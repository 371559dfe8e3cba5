//! Fleet defence beside the sharing engine: the fleet recidive rules (kept, and evaluated for each
//! ban event the engine reads) and the storm breaker (asked before a source's shared bans are
//! recorded; when it trips, the pause is stored, an alert notice is sent and the
//! `banhub_sharing_paused_sources` gauge counts it until an admin resumes the source).
//!
//! The breaker's windows live in the memory of the replica running the engine (a singleton job);
//! the pauses live in the store, which stays the truth: this replica reads them again every few
//! seconds, so a source resumed on another replica shares again.

mod recidive;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

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

/// The breaker and what it knows of the stored pauses.
struct BreakerState {
    breaker: StormBreaker,
    /// Pauses this replica tripped but could not store yet, stored again on the next reload.
    unsaved: HashMap<ServerId, (DateTime<Utc>, u64)>,
    reloaded_at: Option<Instant>,
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
                unsaved: HashMap::new(),
                reloaded_at: None,
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
            state.unsaved.remove(&server);
        }
        tracing::info!(server = %server, by, "sharing from the server resumed");
        self.pauses().await?;
        Ok(pause)
    }

    /// Asks the breaker whether `bans` shared bans caused by an event of `source` may be
    /// recorded. False while the source is paused, and when these bans trip it: the pause is then
    /// stored and announced. Only sharing stops; the source's events are stored as always.
    pub async fn admit(&self, source: ServerId, bans: u32) -> Result<bool, StoreError> {
        self.reload_pauses_if_due().await?;
        let now = Utc::now();
        let admission = self.breaker().breaker.admit(source, bans, now);
        match admission {
            Admission::Admitted => Ok(true),
            Admission::Paused => Ok(false),
            Admission::Tripped { count } => {
                self.trip(source, count, now).await;
                Ok(false)
            }
        }
    }

    /// Whether sharing from `source` is paused (as this replica last knew).
    pub fn is_paused(&self, source: ServerId) -> bool {
        self.breaker().breaker.is_paused(source)
    }

    async fn trip(&self, source: ServerId, count: u64, at: DateTime<Utc>) {
        let limit = self.breaker().breaker.limit();
        tracing::warn!(
            server = %source,
            shared_bans = count,
            limit,
            "storm breaker tripped: sharing from the server is paused until an admin resumes it"
        );
        let reason = storm_reason(count, limit);
        match self.0.store.pause_source(source, at, count, &reason).await {
            Ok(true) => self.announce(source, count, limit).await,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, server = %source, "cannot store the pause; retrying");
                self.breaker().unsaved.insert(source, (at, count));
            }
        }
        if let Err(e) = self.pauses().await {
            tracing::warn!(error = %e, "cannot count the paused sources");
        }
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

    /// Makes the breaker's paused sources the stored ones (plus those this replica could not
    /// store yet, stored again now), every [`PAUSES_RELOAD`].
    async fn reload_pauses_if_due(&self) -> Result<(), StoreError> {
        let unsaved = {
            let state = self.breaker();
            if state
                .reloaded_at
                .is_some_and(|at| at.elapsed() < PAUSES_RELOAD)
            {
                return Ok(());
            }
            state.unsaved.clone()
        };
        let limit = self.breaker().breaker.limit();
        for (server, (at, count)) in &unsaved {
            let reason = storm_reason(*count, limit);
            if self
                .0
                .store
                .pause_source(*server, *at, *count, &reason)
                .await?
            {
                self.announce(*server, *count, limit).await;
            }
            self.breaker().unsaved.remove(server);
        }
        let stored = self.pauses().await.map_err(|e| match e {
            DefenceError::Store(e) => e,
            other => StoreError::Corrupt(other.to_string()),
        })?;
        let mut state = self.breaker();
        let mut paused: HashSet<ServerId> = stored.iter().map(|p| p.server).collect();
        paused.extend(state.unsaved.keys().copied());
        state.breaker.set_paused(paused);
        state.breaker.prune(Utc::now());
        state.reloaded_at = Some(Instant::now());
        Ok(())
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
