//! Whether the database takes writes, and how the store gets over a time when it did not, without a
//! restart: a pooled connection that a failed commit left inside a transaction is closed rather
//! than reused, connections opened before the database took writes again are replaced, and a
//! small write, cached briefly, answers `/readyz`. All of it runs on the error path or beside
//! ingest, never per event. Fixed statements without values, through sea-orm's connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sea_orm::sqlx;
use sea_orm::sqlx::pool::{PoolConnectionMetadata, PoolOptions};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, RuntimeErr, Statement};
use tracing::Instrument as _;

use super::{Store, StoreError};

/// How long a write check's answer is reused, so that `/readyz` polled often costs one small
/// write every so often.
const CHECK_CACHED_FOR: Duration = Duration::from_millis(1500);
/// A write check that has not committed by then counts as failed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the store checks by itself while writes fail, so it notices the end of a fault
/// whether or not anything else writes.
const RECHECK_FAILING: Duration = Duration::from_secs(1);
/// How often it checks while writes work, so it notices a fault that nothing else ran into.
const RECHECK_HEALTHY: Duration = Duration::from_secs(10);

/// The store's record of failed and successful writes, shared with the connection pools' hooks.
#[derive(Debug)]
pub(super) struct StoreHealth {
    started: Instant,
    /// When (ms after `started`, plus one) the last write failed; 0: never.
    failed_at: AtomicU64,
    /// When the first write check after a failure succeeded; 0: never. Pooled connections opened
    /// before it are closed when next taken: one opened during the fault may have fallen back to
    /// read-only (SQLite opens a file it cannot write read-only, and it stays so).
    healed_at: AtomicU64,
    /// The last write check, reused for [`CHECK_CACHED_FOR`]; the lock lets one check run at a time.
    last_check: tokio::sync::Mutex<Option<Check>>,
}

#[derive(Debug, Clone)]
struct Check {
    at: Instant,
    outcome: Result<(), String>,
}

impl StoreHealth {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            failed_at: AtomicU64::new(0),
            healed_at: AtomicU64::new(0),
            last_check: tokio::sync::Mutex::new(None),
        })
    }

    fn now(&self) -> u64 {
        millis(self.started.elapsed()).saturating_add(1)
    }

    /// A write failed: the database may not take writes.
    pub(super) fn failed(&self) {
        self.failed_at.fetch_max(self.now(), Ordering::AcqRel);
    }

    /// A write check committed: if writes had failed, the connections opened until now are
    /// replaced as they are next taken from their pool.
    fn succeeded(&self) {
        if self.failing() {
            self.healed_at.store(self.now(), Ordering::Release);
            tracing::info!(
                "the database takes writes again; pooled connections opened before are replaced"
            );
        }
    }

    /// Whether the last write failed after the last successful check.
    fn failing(&self) -> bool {
        self.failed_at.load(Ordering::Acquire) > self.healed_at.load(Ordering::Acquire)
    }

    /// Whether a pooled connection opened `age` ago may be used: not if it was opened before the
    /// database last took writes again, nor, while writes fail, before the last failure (so a
    /// write check after the fault is not made on a connection opened read-only during it).
    fn keeps(&self, age: Duration) -> bool {
        let opened = self.now().saturating_sub(millis(age));
        let failed = self.failed_at.load(Ordering::Acquire);
        let healed = self.healed_at.load(Ordering::Acquire);
        opened >= healed && (failed <= healed || opened > failed)
    }

    /// Writes one small thing through `probe`, or reuses an answer younger than
    /// [`CHECK_CACHED_FOR`]; records the outcome.
    async fn check(&self, probe: &WriteProbe) -> Result<(), StoreError> {
        let mut last = self.last_check.lock().await;
        if let Some(check) = last.as_ref()
            && check.at.elapsed() < CHECK_CACHED_FOR
        {
            return check.outcome.clone().map_err(StoreError::Unwritable);
        }
        let was_writable = last.as_ref().is_none_or(|check| check.outcome.is_ok());
        let outcome = match tokio::time::timeout(CHECK_TIMEOUT, probe.write()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no write committed within {CHECK_TIMEOUT:?}")),
        };
        match &outcome {
            Ok(()) => self.succeeded(),
            Err(reason) => {
                self.failed();
                if was_writable {
                    tracing::warn!(%reason, "the database does not take writes");
                }
            }
        }
        *last = Some(Check {
            at: Instant::now(),
            outcome: outcome.clone(),
        });
        outcome.map_err(StoreError::Unwritable)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Adds the hooks that keep a pool usable after failed writes (see [`StoreHealth`]).
pub(super) fn recovering<DB: sqlx::Database>(
    options: PoolOptions<DB>,
    health: &Arc<StoreHealth>,
) -> PoolOptions<DB> {
    let on_acquire = Arc::clone(health);
    let on_release = Arc::clone(health);
    options
        .before_acquire(move |_, meta: PoolConnectionMetadata| {
            let keep = on_acquire.keeps(meta.age);
            Box::pin(async move { Ok(keep) })
        })
        .after_release(move |conn, _| still_usable(conn, Arc::clone(&on_release)))
}

/// Whether a connection given back to its pool may be used again. sqlx counts the transactions it
/// opened on a connection; when a commit or rollback fails (SQLite rolls a transaction back by
/// itself on an I/O error, so the rollback sqlx sends then fails too) the count stays up, the
/// next `begin` becomes a savepoint inside a transaction that never ends, its "commit" commits
/// nothing and the connection keeps the database's write lock. Such a connection is closed.
fn still_usable<C: sqlx::Connection>(
    conn: &mut C,
    health: Arc<StoreHealth>,
) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
    Box::pin(async move {
        if !conn.is_in_transaction() {
            return Ok(true);
        }
        // A dropped transaction's rollback is queued on the connection; the ping runs it first.
        conn.ping().await?;
        if conn.is_in_transaction() {
            health.failed();
            tracing::warn!("a connection was left inside a failed transaction; it is closed");
            return Ok(false);
        }
        Ok(true)
    })
}

/// What a write check needs: the connections and the write gate, without the store itself, so
/// the background checker ends with the last handle on the store.
#[derive(Debug, Clone)]
pub(super) struct WriteProbe {
    db: DatabaseConnection,
    writer: DatabaseConnection,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl WriteProbe {
    /// One small write that commits: on SQLite the schema's `user_version` written back as it is,
    /// on the writer connection behind the write gate (a real page written and synced, as an
    /// ingest commit does); on PostgreSQL a transaction id taken and committed.
    async fn write(&self) -> Result<(), StoreError> {
        match self.db.get_database_backend() {
            DbBackend::Sqlite => {
                let _gate = self.gate.lock().await;
                let row = self
                    .writer
                    .query_one_raw(Statement::from_string(
                        DbBackend::Sqlite,
                        "PRAGMA user_version",
                    ))
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("no user_version".to_owned()))?;
                let version: i64 = row.try_get_by_index(0)?;
                self.writer
                    .execute_unprepared(&format!("PRAGMA user_version = {version}"))
                    .await?;
            }
            backend => {
                self.db
                    .execute_raw(Statement::from_string(backend, "SELECT txid_current()"))
                    .await?;
            }
        }
        Ok(())
    }
}

impl Store {
    /// Whether the database takes writes: a small write that commits, at most one every
    /// 1.5 seconds (a newer answer is reused) and bounded to 3 seconds.
    pub async fn writable(&self) -> Result<(), StoreError> {
        self.health.check(&self.write_probe()).await
    }

    /// Records a failed write when `result` failed for want of a database (see
    /// [`StoreError::is_unavailable`]).
    pub(super) fn noting<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &result
            && e.is_unavailable()
        {
            self.health.failed();
        }
        result
    }

    fn write_probe(&self) -> WriteProbe {
        WriteProbe {
            db: self.db.clone(),
            writer: self.writer.clone(),
            gate: Arc::clone(&self.write_gate),
        }
    }

    /// Starts the check that runs by itself: every second while writes fail, every ten seconds
    /// otherwise; it ends with the last handle on the store.
    pub(super) fn spawn_health_checks(&self) {
        let health: Weak<StoreHealth> = Arc::downgrade(&self.health);
        let probe = self.write_probe();
        // The store starts this loop itself: it lives exactly as long as the store.
        let span = tracing::info_span!("task", task = "store_health");
        tokio::spawn(
            async move {
                loop {
                    let pause = match health.upgrade() {
                        Some(health) if health.failing() => RECHECK_FAILING,
                        Some(_) => RECHECK_HEALTHY,
                        None => return,
                    };
                    tokio::time::sleep(pause).await;
                    let Some(health) = health.upgrade() else {
                        return;
                    };
                    // The outcome is recorded (and logged on a change) by the check itself.
                    let _ = health.check(&probe).await;
                }
            }
            .instrument(span),
        );
    }
}

impl StoreError {
    /// Whether this is the database being unreachable or not taking writes (I/O errors, a full
    /// disk, a read-only or locked file, a lost connection), which passes, rather than a fault
    /// of the request or of the data.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Unwritable(_) => true,
            Self::Db(e) => db_unavailable(e),
            Self::NameTaken(_) | Self::Corrupt(_) => false,
        }
    }
}

fn db_unavailable(e: &DbErr) -> bool {
    match e {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => {
            sqlx_unavailable(e)
        }
        _ => false,
    }
}

fn sqlx_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                sqlite_unavailable(&code)
            } else {
                postgres_unavailable(&code)
            }
        }),
        _ => false,
    }
}

/// SQLite's result codes (numbers; the primary code is the low byte): BUSY, LOCKED, READONLY,
/// IOERR, FULL, CANTOPEN.
fn sqlite_unavailable(code: &str) -> bool {
    code.parse::<i32>()
        .is_ok_and(|code| matches!(code & 0xff, 5 | 6 | 8 | 10 | 13 | 14))
}

/// PostgreSQL's SQLSTATEs: connection exceptions (08), insufficient resources such as a full disk
/// (53), operator intervention such as a shutdown (57P), system errors (58), and a read-only
/// transaction (25006).
fn postgres_unavailable(code: &str) -> bool {
    ["08", "53", "57P", "58"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == "25006"
}

#[cfg(test)]
mod tests {
    use sea_orm::TransactionTrait as _;

    use super::*;

    #[test]
    fn result_codes_of_a_database_that_does_not_take_writes_are_unavailable() {
        for (code, unavailable) in [
            ("5", true),     // SQLITE_BUSY
            ("6", true),     // SQLITE_LOCKED
            ("8", true),     // SQLITE_READONLY
            ("778", true),   // SQLITE_IOERR_WRITE
            ("1034", true),  // SQLITE_IOERR_FSYNC
            ("13", true),    // SQLITE_FULL
            ("14", true),    // SQLITE_CANTOPEN
            ("19", false),   // SQLITE_CONSTRAINT
            ("2067", false), // SQLITE_CONSTRAINT_UNIQUE
            ("1", false),    // SQLITE_ERROR
        ] {
            assert_eq!(sqlite_unavailable(code), unavailable, "{code}");
        }
        for (code, unavailable) in [
            ("08006", true), // connection_failure
            ("57P01", true), // admin_shutdown
            ("53100", true), // disk_full
            ("25006", true), // read_only_sql_transaction
            ("23505", false),
            ("42P01", false),
        ] {
            assert_eq!(postgres_unavailable(code), unavailable, "{code}");
        }
    }

    #[test]
    fn connections_opened_before_the_database_healed_are_replaced() {
        let health = StoreHealth::new();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            health.keeps(Duration::from_millis(10)),
            "nothing failed yet"
        );
        health.failed();
        assert!(health.failing());
        assert!(
            !health.keeps(Duration::from_millis(10)),
            "opened before the failure"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            health.keeps(Duration::from_millis(5)),
            "opened after the failure"
        );
        health.succeeded();
        assert!(!health.failing());
        assert!(!health.keeps(Duration::from_millis(10)), "opened before");
        std::thread::sleep(Duration::from_millis(20));
        assert!(health.keeps(Duration::from_millis(5)), "opened after");
        assert!(!health.keeps(Duration::from_millis(100)), "opened before");
    }

    async fn user_version(db: &DatabaseConnection) -> i64 {
        db.query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA user_version",
        ))
        .await
        .expect("pragma")
        .expect("a row")
        .try_get_by_index(0)
        .expect("an integer")
    }

    /// What a commit failing with an I/O error leaves behind (SQLite ended the transaction, sqlx
    /// still counts it, and the next failed transaction stays open in SQLite), reproduced without
    /// an I/O error: a write on the writer afterwards is committed for real, and the store knows
    /// a write failed.
    #[tokio::test]
    async fn a_connection_left_inside_a_failed_transaction_is_not_reused() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        let txn = store.writer.begin().await.expect("begin");
        txn.execute_unprepared("ROLLBACK")
            .await
            .expect("SQLite ends it");
        drop(txn);
        let txn = store.writer.begin().await.expect("begin");
        txn.execute_unprepared("INSERT INTO no_such_table VALUES (1)")
            .await
            .expect_err("a failing statement");
        drop(txn);
        let txn = store.writer.begin().await.expect("begin");
        txn.execute_unprepared("PRAGMA user_version = 7")
            .await
            .expect("write");
        txn.commit().await.expect("commit");

        assert_eq!(user_version(&store.db).await, 7, "the commit committed");
        assert!(store.health.failing());
        store.writable().await.expect("the database takes writes");
        assert!(!store.health.failing());
    }

    #[test]
    fn a_success_without_a_failure_replaces_nothing() {
        let health = StoreHealth::new();
        std::thread::sleep(Duration::from_millis(5));
        health.succeeded();
        assert!(health.keeps(Duration::from_millis(4)));
    }
}
