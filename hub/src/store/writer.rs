//! The store's heavy writers (ingest, the deferred rollups, the text indexer): on SQLite one
//! dedicated writer connection with its own page cache and checkpoint settings, and a gate that
//! queues the writers in the hub rather than in SQLite's busy handler; and the record of this hub's
//! ingest transactions that tells background writers when ingest is busy.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use sea_orm::sqlx::sqlite::SqliteConnectOptions;
use sea_orm::{DatabaseTransaction, DbBackend, TransactionTrait};

use super::{Store, StoreError, now_ms};

/// SQLite page cache of a connection that writes events, in KiB. The default (2 MiB) is far smaller
/// than what one batch touches (the events, five indexes, the per-address rollups), so a
/// transaction would spill pages to the WAL and rewrite them many times over.
pub(super) const SQLITE_WRITER_CACHE_KIB: u32 = 32 * 1024;

/// WAL pages after which a committing event writer checkpoints (SQLite's default is 1,000). One
/// batch of 1,000 events changes ≈ 2,500 pages (the rows, five indexes, per-address rollups spread
/// over the whole key range), so with the default every commit was followed by a checkpoint that
/// copied all of them into the database file again. With a larger WAL a page changed by several
/// batches in a row is copied once.
pub(super) const SQLITE_WRITER_AUTOCHECKPOINT_PAGES: u32 = 16 * 1024;

/// The settings of SQLite's writer connection (see `Store::writer`), on top of every connection's;
/// applied each time it connects.
pub(super) fn sqlite_writer_settings(sqlite: SqliteConnectOptions) -> SqliteConnectOptions {
    sqlite
        .pragma("cache_size", format!("-{SQLITE_WRITER_CACHE_KIB}"))
        .pragma(
            "wal_autocheckpoint",
            SQLITE_WRITER_AUTOCHECKPOINT_PAGES.to_string(),
        )
        // A multi-row insert or upsert inside a transaction keeps a statement journal (the pages
        // it changed, to undo the statement alone if it fails halfway). With files for temporary
        // storage a journal over 64 KiB spills to a temporary file, and every batch's inserts
        // would. In memory it is only ever as large as one statement's pages.
        .pragma("temp_store", "MEMORY")
}

/// The write gate's guard (see [`Store::write_gate`]); `None` on PostgreSQL.
pub(super) type WriteGuard = Option<tokio::sync::OwnedMutexGuard<()>>;

/// This hub's ingest transactions: how many run now and when (Unix ms) the last one ended. A
/// transaction can take longer than the window in which the text indexer counts ingest as busy, so
/// the running ones count too.
#[derive(Debug, Default)]
pub(super) struct IngestActivity {
    running: AtomicUsize,
    ended_ms: AtomicI64,
}

/// One running ingest transaction, counted in [`IngestActivity`] until dropped (however it ends).
pub(super) struct IngestRunning<'a>(&'a IngestActivity);

impl<'a> IngestRunning<'a> {
    pub(super) fn start(activity: &'a IngestActivity) -> Self {
        activity.running.fetch_add(1, Ordering::Relaxed);
        Self(activity)
    }
}

impl Drop for IngestRunning<'_> {
    fn drop(&mut self) {
        self.0.ended_ms.store(now_ms(), Ordering::Relaxed);
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Store {
    pub(super) fn backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    /// Waits for this hub's other heavy SQLite writers (ingest, the deferred rollups, the text
    /// indexer) to finish; `None` on PostgreSQL. SQLite allows one writer: a second one that
    /// starts meanwhile gets SQLITE_BUSY, and its busy handler then sleeps in steps of up to
    /// 100 ms, well past the moment the lock is free. Queued here, each starts as soon as the
    /// previous one commits.
    pub(super) async fn write_gate(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        if self.backend() == DbBackend::Sqlite {
            Some(Arc::clone(&self.write_gate).lock_owned().await)
        } else {
            None
        }
    }

    /// Whether an ingest transaction is running or ended in the last `window` (ingest is busy):
    /// background writers that may wait (the text indexer) keep off the gate meanwhile.
    pub fn ingest_active_within(&self, window: std::time::Duration) -> bool {
        let activity = &self.ingest_activity;
        if activity.running.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let ended = activity.ended_ms.load(Ordering::Relaxed);
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        ended > 0 && now_ms().saturating_sub(ended) < window
    }

    /// Begins a transaction that writes events and rollups on the writer connection, behind the
    /// write gate (see [`Store::write_gate`]); the guard is to be held until the commit.
    pub(super) async fn begin_writer(
        &self,
    ) -> Result<(DatabaseTransaction, WriteGuard), StoreError> {
        let gate = self.write_gate().await;
        Ok((self.writer.begin().await?, gate))
    }
}
