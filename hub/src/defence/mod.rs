//! Fleet defence beside the sharing engine: the fleet recidive rules (kept, and evaluated for each
//! ban event the engine reads) and the storm breaker (built for each batch the engine matches from
//! the store's window of what each source shared and the stored pauses; when it trips a source,
//! the engine stores the pause with its batch, an alert notice is sent and the
//! `banhub_sharing_paused_sources` gauge counts it until an admin resumes the source).
//!
//! The store is the breaker's only memory, so every replica counts the same window and a resume
//! on any replica takes effect at the engine's next batch.

mod recidive;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

pub use recidive::RecidiveBan;

use crate::alerts::Alerts;
use crate::alerts::notice::Notice;
use crate::domain::ServerId;
use crate::domain::breaker::{SourcePause, StormBreaker, StormLimits, Trip};
use crate::domain::recidive::{RecidiveRule, RecidiveSpec, RuleError, StoredRule};
use crate::metrics::Metrics;
use crate::store::{RuleWrite, Store, StoreError};

/// How often the gauge of paused sources is read again from the store.
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

struct Inner {
    store: Store,
    alerts: Alerts,
    metrics: Metrics,
    limits: StormLimits,
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
    /// A service whose breaker trips a source past `limits`.
    pub fn new(store: Store, alerts: Alerts, metrics: Metrics, limits: StormLimits) -> Self {
        Self(Arc::new(Inner {
            store,
            alerts,
            metrics,
            limits,
            rules: recidive::RuleCache::default(),
        }))
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
        tracing::info!(server = %server, by, "sharing from the server resumed");
        self.pauses().await?;
        Ok(pause)
    }

    /// The breaker of one batch whose origin bans come from `sources`: their window ending at
    /// `now_ms` and the paused sources, as stored.
    pub async fn breaker(
        &self,
        sources: &[ServerId],
        now_ms: i64,
    ) -> Result<StormBreaker, StoreError> {
        let paused: HashSet<ServerId> = self
            .0
            .store
            .open_pauses()
            .await?
            .into_iter()
            .map(|p| p.server)
            .collect();
        let counts = self.0.store.storm_counts(sources, now_ms).await?;
        Ok(StormBreaker::new(self.0.limits, counts, paused))
    }

    /// Says that the engine stored the pauses of `trips`: logged, announced by an alert notice,
    /// and counted by the gauge, in the background.
    pub fn tripped(&self, trips: Vec<Trip>) {
        if trips.is_empty() {
            return;
        }
        let defence = self.clone();
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            for trip in trips {
                tracing::warn!(
                    server = %trip.server,
                    origin_bans = trip.count.origin_bans,
                    shared_bans = trip.count.shared_bans,
                    reason = %trip.reason,
                    "storm breaker tripped: sharing from the server is paused until an admin \
                     resumes it"
                );
                defence.announce(&trip).await;
            }
            if let Err(e) = defence.pauses().await {
                tracing::warn!(error = %e, "defence: cannot count the paused sources");
            }
        }));
    }

    /// Keeps the gauge of paused sources the stored count (pauses and resumes on any replica)
    /// until shutdown. Spawn it once.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.pauses().await {
                tracing::warn!(error = %e, "defence: cannot read the paused sources; retrying");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PAUSES_RELOAD) => {}
            }
        }
    }

    /// Sends the alert notice of a new pause.
    async fn announce(&self, trip: &Trip) {
        let source = trip.server;
        let name = match self.0.store.get_server(source).await {
            Ok(Some(server)) => server.name.to_string(),
            _ => source.to_string(),
        };
        let notice = Notice {
            kind: PAUSED_NOTICE,
            title: format!("Sharing paused for server {name}"),
            text: format!(
                "The storm breaker paused sharing from server {name} ({source}): its bans would \
                 have shared {} origin bans causing {} shared bans within a minute ({}). Its \
                 events are still stored, but none of its bans is shared until an admin resumes \
                 it (Sharing → Paused sources, or POST /api/sharing/pauses/{source}/resume).",
                trip.count.origin_bans, trip.count.shared_bans, trip.reason
            ),
        };
        if let Err(e) = self.0.alerts.notify(notice).await {
            tracing::warn!(error = %e, server = %source, "cannot send the pause notice");
        }
    }
}

fn saved(written: RuleWrite, rule: &RecidiveRule, id: i64) -> Result<StoredRule, DefenceError> {
    match written {
        RuleWrite::Saved(stored) => Ok(*stored),
        RuleWrite::NameTaken => Err(DefenceError::NameTaken(rule.spec().name.clone())),
        RuleWrite::NotFound => Err(DefenceError::NoRule(id)),
    }
}
