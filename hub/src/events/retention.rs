//! Retention: events older than `events.retention_days` are deleted in the background, in small
//! chunks so ingest is never held up for long, and the rollups are trimmed to match.
//!
//! The cutoff is rounded down to a whole UTC day, so every count bucket is either wholly kept or
//! wholly dropped and stats never count an event that is gone. The per-address rollups keep an
//! address's whole history as long as it was banned within the retention (its count and first
//! sighting may predate the oldest kept event: a repeat offender stays one); an address not banned
//! within the retention is dropped entirely.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Events, EventsError};

/// Events deleted per transaction.
const CHUNK: usize = 5000;
/// The first pass runs this long after start, out of the way of start-up.
const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);
/// How soon a prune that failed after a retention change is tried again (a busy database passes).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(2);
const DAY_MS: i64 = 24 * 3_600_000;

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Events older than this (Unix ms) were removed; `None` when retention is off.
    pub cutoff_ms: Option<i64>,
    pub events: u64,
    pub buckets: u64,
    pub addresses: u64,
}

pub(super) async fn prune(events: &Events, now: DateTime<Utc>) -> Result<PruneReport, EventsError> {
    let Some(retention) = events.retention() else {
        return Ok(PruneReport::default());
    };
    let keep_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now
        .timestamp_millis()
        .saturating_sub(keep_ms)
        .div_euclid(DAY_MS)
        * DAY_MS;
    let store = events.store();
    let mut report = PruneReport {
        cutoff_ms: Some(cutoff),
        ..PruneReport::default()
    };
    loop {
        let deleted = store.delete_events_before(cutoff, CHUNK).await?;
        report.events += deleted;
        if deleted < CHUNK as u64 {
            break;
        }
        // Let waiting writers in between chunks.
        tokio::task::yield_now().await;
    }
    let (buckets, addresses) = store.prune_rollups_before(cutoff).await?;
    if let Some(cache) = &events.0.day_cache {
        cache.clear();
    }
    report.buckets = buckets;
    report.addresses = addresses;
    if report.events > 0 || buckets > 0 || addresses > 0 {
        tracing::info!(
            cutoff_ms = cutoff,
            events = report.events,
            buckets,
            addresses,
            "pruned events past their retention"
        );
    }
    Ok(report)
}

pub(super) async fn run(events: Events) {
    if events.retention().is_none() {
        return;
    }
    let shutdown = events.0.shutdown.clone();
    let mut wait = FIRST_PASS_AFTER;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        if let Err(e) = prune(&events, Utc::now()).await {
            tracing::warn!(error = %e, "pruning old events failed; trying again next interval");
        }
        wait = events.0.prune_interval;
    }
}

impl Events {
    /// Applies the operator's event retention, read from each value of `changes` by `days_of` (else
    /// `configured_days` from the hub's configuration), now and after every change, pruning at once
    /// when it changes. When the configuration has retention off, no periodic pruning job runs, so
    /// this prunes every `interval` itself. Runs until shutdown or until `changes` closes.
    pub async fn follow_retention<T>(
        self,
        mut changes: watch::Receiver<T>,
        days_of: impl Fn(&T) -> Option<u32>,
        configured_days: u32,
        interval: Duration,
        shutdown: CancellationToken,
    ) {
        let mut applied: Option<u32> = None;
        let mut next_pass = tokio::time::Instant::now() + interval;
        // Set while a prune owed to a retention change has failed and waits to be tried again.
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            let days = days_of(&changes.borrow_and_update()).unwrap_or(configured_days);
            if applied != Some(days) {
                self.set_retention_days(days);
                if applied.is_some() {
                    tracing::info!(days, "event retention changed; pruning now");
                    retry_at = self.prune_or_retry().await;
                }
                applied = Some(days);
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(retry_at.unwrap_or(next_pass)), if retry_at.is_some() => {
                    retry_at = self.prune_or_retry().await;
                }
                () = tokio::time::sleep_until(next_pass), if configured_days == 0 => {
                    next_pass = tokio::time::Instant::now() + interval;
                    if let Err(e) = self.prune(Utc::now()).await {
                        tracing::warn!(error = %e, "pruning old events failed; trying again next interval");
                    }
                }
            }
        }
    }

    /// Prunes now; on failure, when to try again.
    async fn prune_or_retry(&self) -> Option<tokio::time::Instant> {
        match self.prune(Utc::now()).await {
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "pruning old events failed; trying again shortly");
                Some(tokio::time::Instant::now() + RETRY_AFTER_FAILURE)
            }
        }
    }
}
