//! The matching step of the sharing engine: a singleton job that follows committed events after
//! its stored cursor, records what each batch makes (its shared bans, the lifts of its origin
//! unbans, the storm breaker's counts and trips, the recidive firings) with the cursor past it in
//! one transaction, and hands the touched targets to delivery. Woken by the live event broadcast (which also carries other replicas' events), and
//! by a short tick.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;

use super::Sharing;
use super::matcher::{self, Steps};
use crate::domain::events::{EventId, StoredEvent};
use crate::domain::sharing::SourceKind;
use crate::domain::{ServerId, breaker};
use crate::store::sharing::SharingBatch;
use crate::store::{Cursor, StoreError};

/// Events matched per step.
const BATCH: usize = 500;
/// How often the engine looks even when nothing woke it.
const TICK: Duration = Duration::from_millis(500);
/// A hole in the event ids younger than this may be a transaction still committing (PostgreSQL
/// hands out ids before commit); the engine waits for it rather than skip it.
const GAP_GRACE_MS: i64 = 5_000;
/// How often held shared bans past their expiry are marked expired.
const EXPIRE_EVERY: Duration = Duration::from_secs(10);

/// How many of `events` (in id order, after `cursor`) may be matched now: all of them, unless a
/// hole in the ids is young enough to be a transaction still committing.
pub(super) fn ready_prefix(
    cursor: i64,
    events: &[StoredEvent],
    now_ms: i64,
    grace_ms: i64,
) -> usize {
    let mut previous = cursor;
    for (i, event) in events.iter().enumerate() {
        let hole = event.id.0 > previous + 1;
        if hole && now_ms - event.stored_at.timestamp_millis() < grace_ms {
            return i;
        }
        previous = event.id.0;
    }
    events.len()
}

impl Sharing {
    /// Runs the engine until shutdown. Spawn it as a singleton job.
    pub async fn run(self) {
        let mut wake = self.0.events.subscribe();
        let mut cursor = loop {
            match self.start_cursor().await {
                Ok(cursor) => break cursor,
                Err(e) => {
                    tracing::warn!(error = %e, "sharing: cannot read the event cursor; retrying");
                    tokio::select! {
                        () = self.0.shutdown.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                }
            }
        };
        let mut expired_at = tokio::time::Instant::now();
        loop {
            if let Err(e) = self.step(&mut cursor).await {
                tracing::warn!(error = %e, "sharing: matching events failed; retrying");
            }
            if expired_at.elapsed() >= EXPIRE_EVERY {
                expired_at = tokio::time::Instant::now();
                let now = Utc::now().timestamp_millis();
                match self.0.store.expire_shared_bans(now).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(shared_bans = n, "shared bans expired"),
                    Err(e) => {
                        tracing::warn!(error = %e, "sharing: cannot mark expired shared bans")
                    }
                }
                let out_of_window = now - 2 * breaker::WINDOW.num_milliseconds();
                if let Err(e) = self.0.store.prune_origin_shares(out_of_window).await {
                    tracing::warn!(error = %e, "sharing: cannot forget the breaker's old counts");
                }
            }
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                // One message per committed event: the ones already queued go with this one, and
                // the events themselves are read from the store.
                _ = wake.recv() => while wake.try_recv().is_ok() {},
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// Where matching resumes: the stored cursor, or (first start) the newest event, so history is
    /// not shared.
    async fn start_cursor(&self) -> Result<i64, StoreError> {
        if let Some(cursor) = self.0.store.cursor(Cursor::Sharing).await? {
            return Ok(cursor);
        }
        let newest = self.0.store.last_event_id().await?.map_or(0, |id| id.0);
        self.0.store.init_cursor(Cursor::Sharing, newest).await
    }

    /// Matches every event after the cursor that can be matched now.
    async fn step(&self, cursor: &mut i64) -> Result<(), StoreError> {
        loop {
            let events = self.0.store.events_after(EventId(*cursor), BATCH).await?;
            let now = Utc::now().timestamp_millis();
            let ready = ready_prefix(*cursor, &events, now, GAP_GRACE_MS);
            let Some(last) = events[..ready].last() else {
                return Ok(());
            };
            let upto = last.id.0;
            let touched = self.match_batch(*cursor, upto, &events[..ready]).await?;
            match touched {
                Some(targets) => {
                    *cursor = upto;
                    if !targets.is_empty() {
                        let sharing = self.clone();
                        tokio::spawn(tracing::Instrument::in_current_span(async move {
                            sharing.deliver_now(targets).await;
                        }));
                    }
                }
                None => {
                    // Another engine moved the cursor: follow it.
                    *cursor = self.0.store.cursor(Cursor::Sharing).await?.unwrap_or(upto);
                    return Ok(());
                }
            }
            if ready < events.len() || events.len() < BATCH {
                return Ok(());
            }
        }
    }

    /// Records what `batch` makes (shared bans, lifts, the breaker's counts and trips, recidive
    /// firings) and moves the cursor from `from` to `upto`, in one transaction. Returns the
    /// targets with work to deliver, or `None` when another engine had moved the cursor (nothing
    /// recorded).
    async fn match_batch(
        &self,
        from: i64,
        upto: i64,
        batch: &[StoredEvent],
    ) -> Result<Option<Vec<ServerId>>, StoreError> {
        let now = Utc::now().timestamp_millis();
        let policies = self.0.store.list_sharing_policies().await?;
        let enabled: Vec<_> = policies
            .iter()
            .filter(|p| p.spec.enabled)
            .cloned()
            .collect();
        let relevant = batch
            .iter()
            .any(|e| matcher::origin_ban(e).is_some() || matcher::origin_unban(e).is_some());
        let mut breaker = self.breaker_for(batch, now).await?;
        let mut record = SharingBatch::default();
        if !policies.is_empty() && relevant {
            let servers = self.0.store.list_servers().await?;
            let mut ips: Vec<String> = batch
                .iter()
                .filter_map(|e| matcher::origin_ban(e).map(|f| f.ip.to_string()))
                .collect();
            ips.sort();
            ips.dedup();
            let mut steps = if enabled.is_empty() || ips.is_empty() {
                Steps::default()
            } else {
                Steps::new(self.0.store.shared_counts(SourceKind::Policy, &ips).await?)
            };
            (record.bans, record.lifts) = matcher::plan(
                &enabled,
                &servers,
                batch,
                &mut steps,
                &self.0.guards,
                &mut breaker,
            );
            record.follows = Self::follows_origin(&policies);
        }
        let (recidive, firings) = self.recidive_bans(batch, &mut breaker).await?;
        record.bans.extend(recidive);
        record.firings = firings;
        record.shares = breaker.shares();
        record.trips = breaker.trips().to_vec();
        let Some(recorded) = self
            .0
            .store
            .record_sharing_batch(from, upto, &record, now)
            .await?
        else {
            return Ok(None);
        };
        let bans = &record.bans;
        let mut touched: BTreeSet<ServerId> = bans
            .iter()
            .filter(|b| b.skipped.is_none())
            .map(|b| b.target)
            .collect();
        let skipped = bans.iter().filter(|b| b.skipped.is_some()).count();
        if !bans.is_empty() {
            tracing::debug!(
                shared_bans = bans.len(),
                skipped,
                upto,
                "sharing policies matched"
            );
        }
        if skipped > 0 {
            tracing::info!(
                skipped,
                "shared bans skipped: the lockout guard refused the address"
            );
        }
        if !recorded.lifted.is_empty() {
            tracing::info!(
                unbans = record.lifts.len(),
                targets = recorded.lifted.len(),
                "origin unbans lift their shared bans"
            );
        }
        touched.extend(recorded.lifted);
        self.tripped(recorded.paused);
        Ok(Some(touched.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::domain::events::{EventBody, EventSource, GapFacts, GapReason};

    fn event(id: i64, stored_ms: i64) -> StoredEvent {
        let stored = DateTime::from_timestamp_millis(stored_ms).expect("time");
        StoredEvent {
            id: EventId(id),
            server_id: ServerId::new(),
            agent_id: None,
            position: None,
            occurred_at: stored,
            stored_at: stored,
            source: EventSource::Action,
            body: EventBody::Gap(GapFacts {
                reason: GapReason::Overflow,
                lost: 1,
                ranges: Vec::new(),
            }),
        }
    }

    #[test]
    fn a_young_hole_in_the_ids_is_waited_for() {
        let now = 1_800_000_000_000;
        let events = vec![event(11, now), event(13, now)];
        assert_eq!(ready_prefix(10, &events, now, 5_000), 1);
        assert_eq!(ready_prefix(10, &events, now + 6_000, 5_000), 2);
        assert_eq!(ready_prefix(9, &events, now, 5_000), 0);
    }
}
