//! The event path on the hub: ingest of agent batches and direct callbacks, the live feed of
//! committed events, reads (pages, stats, insights) and retention.
//!
//! Everything goes through [`Events`], a cheap-to-clone handle kept in `AppState`. Writes commit in
//! the store first and are published to the live feed after, so a subscriber never sees an event the
//! database does not have.

mod batch;
pub mod callback;
mod live;
mod retention;
mod stats;

pub use batch::EventBatch;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::Stream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::config::EventsConfig;
use crate::domain::events::{
    Cursor, EventFilter, EventId, EventPage, Insights, InsightsQuery, NewEvent, Stats, StatsQuery,
    StoredEvent,
};
use crate::domain::{AgentId, Server, ServerId};
use crate::pki::{random_secret, sha256_hex};
use crate::store::events::IngestOutcome;
use crate::store::{Store, StoreError};

pub use retention::PruneReport;

/// How many committed events the live feed buffers for a slow subscriber before it must catch up
/// from the database.
const LIVE_CAPACITY: usize = 4096;
/// Largest page of events.
pub const MAX_PAGE: usize = 1000;
/// Largest number of entries per insights list.
pub const MAX_TOP: usize = 100;
/// Events added to the text index per transaction while ingest is busy: small, so ingest waits
/// little for the write lock (500 events hold it for tens of milliseconds).
const TEXT_INDEX_BATCH: usize = 500;
/// … and while ingest is quiet: larger transactions cost less per event (fewer FTS5 segments to
/// write and merge) and hold up nobody.
const TEXT_INDEX_BATCH_QUIET: usize = 5_000;
/// Ingest counts as busy while one of its transactions runs and this long after the last one
/// ended (see `Store::ingest_active_within`). While it is busy the indexer leaves SQLite's one
/// writer to it (the indexer cannot run beside it), unless it is [`TEXT_INDEX_MAX_BEHIND`] behind.
const TEXT_INDEX_QUIET: Duration = Duration::from_millis(250);
/// Events the indexer may fall behind while it waits for ingest to pause: what a text search scans
/// instead of asking the index. Further behind, it indexes [`TEXT_INDEX_BATCH`] at a time between
/// ingest's transactions.
const TEXT_INDEX_MAX_BEHIND: u64 = 400_000;
/// Pause of the text indexer once it has caught up (what a search then scans is about this much
/// ingest), and between batches while it catches up during ingest (to let ingest in).
const TEXT_INDEX_IDLE: Duration = Duration::from_secs(1);
const TEXT_INDEX_BUSY: Duration = Duration::from_millis(10);
/// Ranges (days back from now) whose stats are read once at start (SQLite), so the
/// first request of each finds its past days in the day cache: read cold, 90 days of a large
/// history take 0.3–1.4 s right after a start.
const WARM_DAYS: [i64; 4] = [1, 7, 30, 90];

/// Why an events operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A query parameter that parsed but makes no sense (e.g. `from` after `to`).
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl EventsError {
    fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            reason: reason.into(),
        }
    }
}

struct Inner {
    store: Store,
    live: broadcast::Sender<Arc<StoredEvent>>,
    /// Events older than this are pruned; `None` keeps them forever.
    /// Starts as the configuration's; the settings may change it (`set_retention_days`).
    retention: std::sync::Mutex<Option<Duration>>,
    prune_interval: Duration,
    shutdown: CancellationToken,
    /// The other hub replicas, told about every committed event (see `live::attach_cluster`).
    cluster: std::sync::OnceLock<crate::cluster::Cluster>,
    /// Live streams open on this replica; other replicas' events are only read back for them.
    live_clients: std::sync::atomic::AtomicUsize,
    /// Stats and insights reads of past days; `None` where other replicas may store events this
    /// one does not see (PostgreSQL).
    day_cache: Option<stats::DayCache>,
}

/// The event service; cheap to clone.
#[derive(Clone)]
pub struct Events(Arc<Inner>);

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("retention", &self.retention())
            .field("subscribers", &self.0.live.receiver_count())
            .finish_non_exhaustive()
    }
}

impl Events {
    /// `shutdown` ends live streams (so HTTP can drain) and the retention task.
    pub fn new(store: Store, config: &EventsConfig, shutdown: CancellationToken) -> Self {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let store_is_sqlite = store.backend_name() == "sqlite";
        let retention = (config.retention_days > 0)
            .then(|| Duration::from_secs(u64::from(config.retention_days) * 24 * 3600));
        Self(Arc::new(Inner {
            store,
            live,
            retention: std::sync::Mutex::new(retention),
            prune_interval: Duration::from_secs(config.prune_interval_secs),
            shutdown,
            cluster: std::sync::OnceLock::new(),
            live_clients: std::sync::atomic::AtomicUsize::new(0),
            day_cache: (store_is_sqlite).then(stats::DayCache::default),
        }))
    }

    fn store(&self) -> &Store {
        &self.0.store
    }

    /// Stores an agent's batch `(seq, event)` of spool `epoch` in one transaction and returns the
    /// highest committed sequence number of that epoch: the cumulative ack to send. Events already
    /// stored are skipped, so a re-sent batch changes nothing.
    #[tracing::instrument(skip_all, fields(server_id = %server, agent_id = %agent, epoch, events = events.len()), err)]
    pub async fn ingest_batch(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<u64, EventsError> {
        let outcome = self
            .store()
            .ingest_batch(server, agent, epoch, events)
            .await?;
        Ok(self.committed(outcome))
    }

    /// Publishes what an ingest transaction stored; returns the cumulative ack to send.
    fn committed(&self, outcome: IngestOutcome) -> u64 {
        tracing::debug!(
            stored = outcome.stored.len(),
            committed_seq = outcome.committed_seq,
            "event batch committed"
        );
        self.publish(outcome.stored);
        outcome.committed_seq
    }

    /// The highest sequence number committed for `agent`'s spool `epoch` (0 before the first), for
    /// the session's welcome.
    pub async fn committed_seq(&self, agent: AgentId, epoch: u64) -> Result<u64, EventsError> {
        Ok(self.store().committed_seq(agent, epoch).await?)
    }

    /// Stores one event from a host without an agent.
    #[tracing::instrument(skip_all, fields(server_id = %server, kind = %event.kind()), err)]
    pub async fn ingest_direct(
        &self,
        server: ServerId,
        event: NewEvent,
    ) -> Result<StoredEvent, EventsError> {
        let stored = self.store().insert_direct_event(server, event).await?;
        self.publish(vec![stored.clone()]);
        // The event is stored whatever happens here: failing the callback now would only have
        // the sender send it again.
        if let Err(e) = self.store().mark_reported_directly(server).await {
            tracing::warn!(server_id = %server, error = %e, "could not note the direct callback on its server");
        }
        Ok(stored)
    }

    fn publish(&self, events: Vec<StoredEvent>) {
        if let (Some(cache), Some(oldest)) = (
            &self.0.day_cache,
            events
                .iter()
                .map(|e| e.occurred_at.timestamp_millis())
                .min(),
        ) {
            cache.stored(oldest, Utc::now().timestamp_millis());
        }
        if let Some(cluster) = self.0.cluster.get() {
            cluster.announce_events(events.iter().map(|e| e.id.0).collect());
        }
        for event in events {
            // No subscriber is not an error: nobody is watching.
            let _ = self.0.live.send(Arc::new(event));
        }
    }

    /// Committed events as they come, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.0.live.subscribe()
    }

    /// The live feed for one client: events matching `filter`, starting after `last` (replayed from
    /// the database) or from now. Ends when the hub shuts down. Takes a clone of the service, which
    /// the stream keeps.
    pub async fn live(
        self,
        filter: EventFilter,
        last: Option<EventId>,
    ) -> Result<impl Stream<Item = Arc<StoredEvent>> + Send + 'static, EventsError> {
        live::stream(self, filter, last).await
    }

    /// The server whose callback secret this is, if any.
    pub async fn callback_server(&self, secret: &str) -> Result<Option<Server>, EventsError> {
        if secret.is_empty() {
            return Ok(None);
        }
        let hash = sha256_hex(secret.as_bytes());
        Ok(self.store().server_by_callback_secret_hash(&hash).await?)
    }

    /// Gives `server` a new callback secret (the old one stops working) and returns it: the only
    /// time it exists outside the host. `None` if there is no such server.
    pub async fn rotate_callback_secret(
        &self,
        server: ServerId,
    ) -> Result<Option<String>, EventsError> {
        let secret = random_secret();
        let hash = sha256_hex(secret.as_bytes());
        let found = self
            .store()
            .set_callback_secret(server, Some(&hash))
            .await?;
        Ok(found.then_some(secret))
    }

    /// One page of events, newest first.
    pub async fn list(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<EventPage, EventsError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(EventsError::invalid(
                "limit",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        check_range(filter.from, filter.to)?;
        Ok(self.store().list_events(filter, after, limit).await?)
    }

    /// Every event matching `filter` after `after`, newest first, at most `max` of them, read page
    /// by page: for exports.
    pub fn export(
        &self,
        filter: EventFilter,
        after: Option<Cursor>,
        max: usize,
    ) -> Result<
        impl Stream<Item = Result<Vec<StoredEvent>, EventsError>> + Send + 'static,
        EventsError,
    > {
        check_range(filter.from, filter.to)?;
        let state = (self.clone(), filter, after, max);
        Ok(futures::stream::try_unfold(
            state,
            |(events, filter, after, left)| async move {
                if left == 0 {
                    return Ok(None);
                }
                let page = events.list(&filter, after, left.min(MAX_PAGE)).await?;
                if page.events.is_empty() {
                    return Ok(None);
                }
                // After the last page, stop by asking for nothing more.
                let left = match page.next {
                    Some(_) => left - page.events.len(),
                    None => 0,
                };
                Ok(Some((page.events, (events, filter, page.next, left))))
            },
        ))
    }

    /// Counts over time, per server, per jail and in total, from the rollups.
    #[tracing::instrument(skip_all, err)]
    pub async fn stats(
        &self,
        query: &StatsQuery,
        now: DateTime<Utc>,
    ) -> Result<Stats, EventsError> {
        stats::stats(self.store(), self.0.day_cache.as_ref(), query, now).await
    }

    /// Top addresses, jails and servers and repeat offenders.
    #[tracing::instrument(skip_all, err)]
    pub async fn insights(
        &self,
        query: &InsightsQuery,
        now: DateTime<Utc>,
    ) -> Result<Insights, EventsError> {
        if !(1..=MAX_TOP).contains(&query.limit) {
            return Err(EventsError::invalid(
                "limit",
                format!("must be between 1 and {MAX_TOP}"),
            ));
        }
        stats::insights(self.store(), self.0.day_cache.as_ref(), query, now).await
    }

    /// Events older than this are pruned; `None` keeps them forever.
    pub fn retention(&self) -> Option<Duration> {
        *self.0.retention.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the retention (the settings' `events.retentionDays`); `0` keeps events forever.
    /// Takes effect at the next pruning pass.
    pub fn set_retention_days(&self, days: u32) {
        let retention = (days > 0).then(|| Duration::from_secs(u64::from(days) * 24 * 3600));
        *self.0.retention.lock().unwrap_or_else(|p| p.into_inner()) = retention;
    }

    /// Prunes events older than the retention now; nothing when retention is off.
    pub async fn prune(&self, now: DateTime<Utc>) -> Result<PruneReport, EventsError> {
        retention::prune(self, now).await
    }

    /// Keeps the text index of log lines (SQLite) caught up with the stored events, in batches off
    /// the ingest path, until shutdown. Runs with the retention job; on PostgreSQL the indexer of
    /// pending ranges (`Store::run_text_indexer_pg`).
    async fn run_text_index(self) {
        // PostgreSQL: its own indexer (pending ranges, one replica at a time).
        if self.store().backend_name() == "postgres" {
            self.store()
                .run_text_indexer_pg(self.0.shutdown.clone())
                .await;
            return;
        }
        if self
            .store()
            .event_text_indexed_to()
            .await
            .ok()
            .flatten()
            .is_none()
        {
            return;
        }
        let shutdown = self.0.shutdown.clone();
        loop {
            let busy = self.store().ingest_active_within(TEXT_INDEX_QUIET);
            let wait = if busy
                && self
                    .store()
                    .event_text_backlog()
                    .await
                    .is_ok_and(|behind| behind < TEXT_INDEX_MAX_BEHIND)
            {
                // Ingest has the writer; searches scan what is not indexed yet meanwhile.
                TEXT_INDEX_QUIET
            } else {
                let batch = if busy {
                    TEXT_INDEX_BATCH
                } else {
                    TEXT_INDEX_BATCH_QUIET
                };
                match self.store().index_event_text(batch).await {
                    Ok(n) if n >= batch as u64 && busy => TEXT_INDEX_BUSY,
                    // Still behind and ingest quiet: the next batch at once.
                    Ok(n) if n >= batch as u64 => Duration::ZERO,
                    Ok(_) => TEXT_INDEX_IDLE,
                    Err(e) => {
                        tracing::warn!(error = %e, "indexing log lines failed; trying again");
                        TEXT_INDEX_IDLE * 5
                    }
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Reads the stats of the usual ranges once (SQLite, where past days are cached), as the UI
    /// would, so the first requests after a start find them. The cache keys are whole days (and
    /// the series' buckets), so a request of the same range later today hits.
    async fn warm_day_cache(self) {
        if self.0.day_cache.is_none() {
            return;
        }
        let started = std::time::Instant::now();
        for days in WARM_DAYS {
            let now = Utc::now();
            let from = Some(now - chrono::Duration::days(days));
            let stats = StatsQuery {
                server: None,
                jail: None,
                from,
                to: None,
            };
            // Not insights: its first request starts the count of places over every address,
            // which is the first user's to start. Its per-server and per-jail reads are those of
            // the stats.
            if let Err(e) = self.stats(&stats, now).await {
                tracing::warn!(error = %e, "reading stats at start failed");
                return;
            }
            if self.0.shutdown.is_cancelled() {
                return;
            }
        }
        tracing::debug!(
            ms = started.elapsed().as_millis(),
            "stats of the usual ranges read at start"
        );
    }

    /// Prunes every `events.prune_interval_secs` until shutdown, keeps the text index of log
    /// lines caught up and reads the usual stats once at start (SQLite). Spawn it once.
    pub async fn run_retention(self) {
        tokio::join!(
            retention::run(self.clone()),
            self.clone().run_text_index(),
            self.warm_day_cache()
        );
    }
}

/// `from` must come before `to` when both are given.
fn check_range(from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Result<(), EventsError> {
    if let (Some(from), Some(to)) = (from, to)
        && from >= to
    {
        return Err(EventsError::invalid("from", "must be before `to`"));
    }
    Ok(())
}
