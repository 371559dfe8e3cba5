//! The deferred rollups: what ingest leaves for later, and the task and the reads that write it.
//! SQLite keeps the per-address rollups of committed events in memory behind a watermark and
//! writes them every few seconds; PostgreSQL keeps what several agents' batches share in
//! `rollup_pending` rows that one applier at a time merges. Either way a read of those tables
//! writes what is pending first. Hand-written SQL on the writer connection (SQLite) or the pool.

use std::collections::HashMap;
use std::sync::Arc;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, TransactionTrait};
use tracing::Instrument as _;

use super::super::sql::{Sql, get, to_u64};
use super::super::writer::WriteGuard;
use super::super::{Store, StoreError};
use super::rollup_writes::ROLLUPS_APPLIED_TO;
use super::rollups::{PendingRollups, Rollups};
use super::row::{EVENT_COLUMNS, read_events};
use crate::domain::events::IpOrCidr;

/// How often PostgreSQL's pending rollup rows are applied.
const PG_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often SQLite's deferred per-address rollups are written. Each write upserts every address
/// banned since the last one, at random places in two tables keyed by address, so nearly every
/// page of those tables is rewritten whatever the number of addresses: fewer, larger writes cost
/// less per address on the writer every ingest transaction waits for. A read flushes first anyway,
/// so only how much a start re-derives (and a read during a burst waits for) grows.
const SQLITE_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// PostgreSQL: the transaction-level advisory lock of the rollup applier ("banhub_r"; the jobs'
/// keys are below 2^60, so never this one).
const ROLLUP_APPLIER_LOCK: i64 = 0x6261_6e68_7562_5f72;

/// PostgreSQL: pending rollup rows merged per applier transaction.
const PENDING_ROWS_PER_APPLY: i64 = 20_000;

/// Events read per transaction when the per-address rollups are derived again at start.
const REDERIVE_PAGE: i64 = 5_000;

/// SQLite: the per-address rollups (`ip_servers`, `ip_stats`, the distinct-address total) of
/// committed events that are not written yet. Writing them in every ingest transaction was about
/// half of the store's cost per event (an upsert into two tables keyed all over the address range,
/// per batch); they are gathered here and written every few seconds in one transaction by
/// [`Store::flush_rollups`], and by any read of those tables first, so a read never sees them late.
///
/// The transaction that writes them also moves a watermark (`event_totals.rollups_applied_to`, an
/// event id): the bans of every event up to it are in the tables, of none after it. A hub that stops
/// with rollups pending loses only memory: at start the bans of the events after the watermark are
/// read back from `events` and written (see [`Store::start_deferred_rollups`]). This holds because event
/// ids on SQLite follow the commit order (one writer), and an ingest holds [`Self::pending`] from
/// before its commit until its bans are in it, so a flush never takes a watermark past an event whose
/// bans it does not have. PostgreSQL (several writers, several replicas) keeps them in the ingest
/// transaction.
#[derive(Debug)]
pub(in crate::store) struct DeferredRollups {
    /// The store's writer connection (SQLite; the pool on PostgreSQL), for the task that flushes
    /// (which holds only a weak reference, so it ends with the last handle on the store).
    db: DatabaseConnection,
    /// The bans of committed events not written yet; `upto` is the highest event id committed.
    pending: tokio::sync::Mutex<Rollups>,
    /// Held across a flush, so watermarks commit in order; holds the watermark last committed.
    flushing: tokio::sync::Mutex<i64>,
    /// Events whose bans the start wrote again (a stop had left them pending).
    rederived: u64,
    /// PostgreSQL: what an ingest adds to the shared rollups is a row of `rollup_pending`
    /// (M0011), not memory; `pending` and `flushing` are unused.
    pub(super) rows: bool,
    /// The store's write gate (see [`Store::write_gate`]), which a flush queues on like ingest.
    write_gate: Arc<tokio::sync::Mutex<()>>,
}

impl DeferredRollups {
    /// PostgreSQL's deferred rollups: rows of `rollup_pending`.
    fn rows(db: DatabaseConnection, write_gate: Arc<tokio::sync::Mutex<()>>) -> Self {
        Self {
            rows: true,
            ..Self::new(db, write_gate, 0, 0)
        }
    }

    /// The deferred rollups of a SQLite store whose watermark is `applied`.
    fn new(
        db: DatabaseConnection,
        write_gate: Arc<tokio::sync::Mutex<()>>,
        applied: i64,
        rederived: u64,
    ) -> Self {
        Self {
            db,
            write_gate,
            rederived,
            rows: false,
            pending: tokio::sync::Mutex::new(Rollups {
                upto: applied,
                ..Rollups::default()
            }),
            flushing: tokio::sync::Mutex::new(applied),
        }
    }

    /// PostgreSQL: merges the committed `rollup_pending` rows, writes them to the rollups and
    /// deletes them, in transactions of at most [`PENDING_ROWS_PER_APPLY`] rows, one applier at a
    /// time across replicas. `wait`: wait for a running applier (a read must see what was
    /// committed before it) rather than leave the work to it (the periodic pass).
    async fn apply_pending_rows(&self, wait: bool) -> Result<(), StoreError> {
        loop {
            let txn = self.db.begin().await?;
            let mut lock = Sql::new(
                DbBackend::Postgres,
                if wait {
                    "SELECT true FROM pg_advisory_xact_lock("
                } else {
                    "SELECT pg_try_advisory_xact_lock("
                },
            );
            lock.bind(ROLLUP_APPLIER_LOCK).push(")");
            let locked: bool = match txn.query_one_raw(lock.build()).await? {
                Some(row) => get(&row, 0)?,
                None => false,
            };
            if !locked {
                return Ok(());
            }
            // Rows committed from here on are not in this snapshot's reads, and are deleted by
            // id only: they are left for the next pass, never deleted unapplied.
            let mut sql = Sql::new(
                DbBackend::Postgres,
                "SELECT id, body FROM rollup_pending ORDER BY id LIMIT ",
            );
            sql.bind(PENDING_ROWS_PER_APPLY);
            let rows = txn.query_all_raw(sql.build()).await?;
            if rows.is_empty() {
                txn.commit().await?;
                return Ok(());
            }
            let full = rows.len() as i64 >= PENDING_ROWS_PER_APPLY;
            let mut merged = Rollups::default();
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(get::<i64>(row, 0)?);
                merged.merge(Rollups::from_body(&get::<String>(row, 1)?)?);
            }
            merged.apply(&txn).await?;
            for chunk in ids.chunks(1_000) {
                let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
                txn.execute_unprepared(&format!(
                    "DELETE FROM rollup_pending WHERE id IN ({})",
                    list.join(", ")
                ))
                .await?;
            }
            txn.commit().await?;
            if !full {
                return Ok(());
            }
        }
    }

    /// SQLite: writes the pending per-address rollups and moves the watermark (see
    /// [`Store::flush_rollups`]).
    async fn flush_pending(&self) -> Result<(), StoreError> {
        let mut applied = self.flushing.lock().await;
        let rollups = {
            let mut pending = self.pending.lock().await;
            if pending.upto <= *applied && pending.ip_servers.is_empty() {
                return Ok(());
            }
            pending.take()
        };
        let result = async {
            // SQLite only: behind the write gate like every heavy writer.
            let _gate = Arc::clone(&self.write_gate).lock_owned().await;
            let txn = self.db.begin().await?;
            rollups.apply_deferred(&txn).await?;
            txn.commit().await?;
            Ok::<_, StoreError>(())
        }
        .await;
        match result {
            Ok(()) => {
                *applied = rollups.upto;
                Ok(())
            }
            Err(e) => {
                self.pending.lock().await.merge_addresses(rollups);
                Err(e)
            }
        }
    }
}

/// The task that writes the deferred rollups every [`SQLITE_FLUSH_EVERY`] (SQLite) or
/// [`PG_FLUSH_EVERY`] (PostgreSQL); it ends with the
/// last handle on the store.
fn spawn_flusher(deferred: &Arc<DeferredRollups>) {
    let every = if deferred.rows {
        PG_FLUSH_EVERY
    } else {
        SQLITE_FLUSH_EVERY
    };
    let weak = Arc::downgrade(deferred);
    // The store starts this loop itself: it lives exactly as long as the store.
    let span = tracing::info_span!("task", task = "rollup_flusher");
    tokio::spawn(
        async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(deferred) = weak.upgrade() else {
                    return;
                };
                // On PostgreSQL a replica already applying does this replica's rows too.
                let result = if deferred.rows {
                    deferred.apply_pending_rows(false).await
                } else {
                    // In its own task, like every flush (see `Store::flush_rollups`).
                    let flushing = Arc::clone(&deferred);
                    tokio::spawn(async move { flushing.flush_pending().await })
                        .await
                        .map_err(|e| StoreError::Corrupt(format!("the rollup flush failed: {e}")))
                        .and_then(|r| r)
                };
                if let Err(e) = result {
                    tracing::warn!(error = %e, "cannot write the deferred rollups; retrying");
                }
            }
        }
        .instrument(span),
    );
}

/// Commits a SQLite ingest transaction (`commit`), releases the write gate and hands the batch's
/// per-address rollups to the pending ones (see [`DeferredRollups`]). The commit and the
/// hand-over run in their own task: a caller that gives up (a session ending) must not leave a
/// committed batch whose bans never reach the pending rollups, which a later watermark would then
/// pass.
pub(super) async fn hand_over(
    deferred: &Arc<DeferredRollups>,
    commit: impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
    gate: WriteGuard,
    addresses: Rollups,
) -> Result<(), StoreError> {
    let deferred = Arc::clone(deferred);
    tokio::spawn(async move {
        let mut pending = deferred.pending.lock().await;
        commit.await?;
        drop(gate);
        pending.merge_addresses(addresses);
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| StoreError::Corrupt(format!("the commit task failed: {e}")))?
}

impl Store {
    /// Writes rollups gathered over imported batches, in one transaction. On SQLite the pending
    /// per-address rollups are written with them and the watermark moves past the imported events
    /// (call it after the imports, not during them).
    pub async fn apply_rollups(&self, rollups: PendingRollups) -> Result<(), StoreError> {
        let Some(deferred) = self.deferred.as_ref().filter(|d| !d.rows) else {
            let (txn, _gate) = self.begin_writer().await?;
            rollups.0.apply(&txn).await?;
            txn.commit().await?;
            return Ok(());
        };
        let mut imported = rollups.0;
        let mut applied = deferred.flushing.lock().await;
        let mut all = {
            let mut pending = deferred.pending.lock().await;
            pending.upto = pending.upto.max(imported.upto);
            pending.take()
        };
        let counts = Rollups {
            counts: std::mem::take(&mut imported.counts),
            ..Rollups::default()
        };
        all.merge_addresses(imported);
        let (txn, _gate) = self.begin_writer().await?;
        counts.apply(&txn).await?;
        all.apply_deferred(&txn).await?;
        txn.commit().await?;
        *applied = all.upto;
        Ok(())
    }

    /// How many events' bans the start of this store wrote to the per-address rollups again
    /// because a stop had left them pending (SQLite; always 0 on PostgreSQL).
    pub fn rollups_rederived_at_start(&self) -> u64 {
        self.deferred.as_ref().map_or(0, |d| d.rederived)
    }

    /// Writes the pending per-address rollups (SQLite; on PostgreSQL they are always written).
    /// Runs every few seconds by itself (every second on PostgreSQL); a read of `ip_stats`,
    /// `ip_servers` or the distinct address total calls it first, so it sees every committed event.
    pub async fn flush_rollups(&self) -> Result<(), StoreError> {
        let Some(deferred) = &self.deferred else {
            return Ok(());
        };
        if deferred.rows {
            return deferred.apply_pending_rows(true).await;
        }
        // In its own task, like the ingest's commit: a reader that gives up halfway must not drop
        // the rollups it took out of the pending ones.
        let deferred = Arc::clone(deferred);
        tokio::spawn(async move { deferred.flush_pending().await })
            .await
            .map_err(|e| StoreError::Corrupt(format!("the rollup flush failed: {e}")))?
    }

    /// PostgreSQL: the fleet-wide counts may be pending too; a read of them calls this first.
    /// Nothing to do on SQLite, where ingest writes them.
    pub async fn flush_counts(&self) -> Result<(), StoreError> {
        match &self.deferred {
            Some(deferred) if deferred.rows => deferred.apply_pending_rows(true).await,
            _ => Ok(()),
        }
    }

    /// The bans of `ips` still pending (SQLite), added to `counts` (read from `ip_stats` by
    /// `read`) under the flush lock, so a flush cannot move them between the two reads.
    pub(in crate::store) async fn with_pending_bans<F>(
        &self,
        ips: &[String],
        read: F,
    ) -> Result<HashMap<String, u64>, StoreError>
    where
        F: std::future::Future<Output = Result<HashMap<String, u64>, StoreError>>,
    {
        let Some(deferred) = &self.deferred else {
            return read.await;
        };
        if deferred.rows {
            deferred.apply_pending_rows(true).await?;
            return read.await;
        }
        let _flushing = deferred.flushing.lock().await;
        let mut counts = read.await?;
        let pending = deferred.pending.lock().await;
        // The addresses as the pending rollups key them (the texts are as stored, which is how
        // an address writes itself); a text that is not an address has no pending bans.
        let mut wanted: HashMap<IpOrCidr, (&String, i64)> = ips
            .iter()
            .filter_map(|ip| Some((IpOrCidr::parse(ip).ok()?, (ip, 0))))
            .collect();
        if !wanted.is_empty() {
            for ((ip, _), agg) in &pending.ip_servers {
                if let Some((_, bans)) = wanted.get_mut(ip) {
                    *bans += agg.bans;
                }
            }
        }
        for (ip, bans) in wanted.into_values() {
            if bans > 0 {
                *counts.entry(ip.clone()).or_default() += to_u64(bans);
            }
        }
        Ok(counts)
    }

    /// SQLite, at start: the deferred rollups, with the bans of events after the watermark that
    /// a stop left unwritten written now (in pages, each with its watermark), and the task that
    /// flushes them every few seconds. A database without a watermark had its rollups written by
    /// every ingest so far: its watermark is its newest event.
    pub(in crate::store) async fn start_deferred_rollups(
        &self,
    ) -> Result<Arc<DeferredRollups>, StoreError> {
        if self.backend() == DbBackend::Postgres {
            // The pending rows of a stopped replica are still there: nothing to derive again.
            let deferred = Arc::new(DeferredRollups::rows(
                self.db.clone(),
                Arc::clone(&self.write_gate),
            ));
            spawn_flusher(&deferred);
            return Ok(deferred);
        }
        let mut sql = Sql::new(
            self.backend(),
            "SELECT value FROM event_totals WHERE name = ",
        );
        sql.bind(ROLLUPS_APPLIED_TO);
        let stored: Option<i64> = match self.db.query_one_raw(sql.build()).await? {
            Some(row) => Some(get(&row, 0)?),
            None => None,
        };
        let mut applied = match stored {
            Some(applied) => applied,
            None => {
                let newest: i64 = match self
                    .db
                    .query_one_raw(
                        Sql::new(self.backend(), "SELECT COALESCE(MAX(id), 0) FROM events").build(),
                    )
                    .await?
                {
                    Some(row) => get(&row, 0)?,
                    None => 0,
                };
                let start = Rollups {
                    upto: newest,
                    ..Rollups::default()
                };
                let txn = self.db.begin().await?;
                start.apply_deferred(&txn).await?;
                txn.commit().await?;
                newest
            }
        };
        let mut rederived = 0u64;
        loop {
            let mut sql = Sql::new(
                self.backend(),
                &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id > "),
            );
            sql.bind(applied)
                .push(" ORDER BY id LIMIT ")
                .bind(REDERIVE_PAGE);
            let events = read_events(self.db.query_all_raw(sql.build()).await?)?;
            if events.is_empty() {
                break;
            }
            rederived += events.len() as u64;
            let mut rollups = Rollups::of(&events);
            rollups.counts.clear();
            let (txn, _gate) = self.begin_writer().await?;
            rollups.apply_deferred(&txn).await?;
            txn.commit().await?;
            applied = rollups.upto;
        }
        if rederived > 0 {
            tracing::info!(
                events = rederived,
                upto = applied,
                "per-address rollups written again for events a stop left unwritten"
            );
        }
        let deferred = Arc::new(DeferredRollups::new(
            self.writer.clone(),
            Arc::clone(&self.write_gate),
            applied,
            rederived,
        ));
        spawn_flusher(&deferred);
        Ok(deferred)
    }
}
