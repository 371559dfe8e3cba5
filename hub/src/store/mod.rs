//! The store: the only module that names sea-orm. Repository functions take and return domain types.
//!
//! SQLite (one WAL file in the data directory) is the embedded default; PostgreSQL is used when a
//! `postgres://` URL is configured. The same migrations serve both.
//!
//! One module per concern: `servers` (with their enrollment and callback secrets), `events`
//! (ingest, rollups, reads, retention), `fleet_actions`, `cluster` (replicas), `alerts`, `auth`,
//! `settings`, `places`; `writer` (the heavy writers' connection and gate), `health` (recovering
//! from failed writes), `sql` (the SQL builder). Each module's doc says how it talks to the
//! database, one way per path: sea-orm's entities for single rows by key and simple filtered
//! updates (`servers`, `auth`, `settings`, most of `alerts`); hand-written SQL built with
//! `sql::Sql` (which writes every placeholder) and run through sea-orm's pool or the writer for
//! multi-row, conditional and hot statements that both databases must plan well (`events`,
//! `fleet_actions`, `cluster`, `places`, callback secrets); and sqlx directly only where sea-orm
//! costs too much or cannot hold the connection: SQLite's ingest on the writer connection, and
//! PostgreSQL's `LISTEN` and session-level advisory locks on connections of their own.
//!
//! `Store` is one type; its methods are grouped by file, one `impl Store` block per concern:
//! servers, their enrollment and callback secrets in `servers/`; ingest, reads, text search,
//! rollups, the deferred flusher and retention in `events/`; leases, forwarded commands, jobs and
//! notifications in `cluster/`; fleet action targets in `fleet_actions`; users, sessions, tokens
//! and audit in `auth`; alert state and deliveries in `alerts`; the settings row in `settings`;
//! recidive rules, their firings and the breaker's pauses in `defence`;
//! per-address ban counts in `places`; the health and write checks in `health`. Look for a
//! method in the file of its concern.

mod alerts;
mod alerts_turns;
mod auth;
pub mod backup;
pub mod cluster;
pub mod config_changes;
mod cursors;
mod defence;
mod entities;
pub mod events;
pub mod feeds;
pub mod fleet_actions;
mod health;
mod migration;
mod places;
pub mod profiles;
mod protected;
pub mod rollouts;
mod servers;
mod settings;
pub mod sharing;
mod sql;
mod sqlite_memory;
pub mod timed_bans;
mod writer;

pub use cursors::Cursor;
pub use defence::RuleWrite;
pub use places::IpBans;
pub use servers::{CallbackSecretRow, EnrollOutcome, RotateOutcome, TokenRefusal};

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbBackend};
use sea_orm_migration::MigratorTrait;

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] sea_orm::DbErr),
    #[error("a server named {0:?} already exists")]
    NameTaken(String),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    /// The write check failed (see [`Store::writable`]).
    #[error("the database does not take writes: {0}")]
    Unwritable(String),
}

/// A handle on the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    /// SQLite: the one connection that the heavy writers (ingest, the rollup flush, the text
    /// indexer) use, behind the write gate. SQLite drops a connection's page cache whenever
    /// another connection changed the database, so writers taking turns on pooled connections
    /// each began with a cold cache and read every index page they touched again; one writer
    /// connection keeps its cache. PostgreSQL: the pool.
    writer: DatabaseConnection,
    /// The shared rollups written behind ingest (see [`events::DeferredRollups`]).
    deferred: Option<std::sync::Arc<events::DeferredRollups>>,
    /// Ingest transactions that may run at once (see [`Store::with_ingest_writers`]).
    ingest_slots: std::sync::Arc<tokio::sync::Semaphore>,
    /// SQLite: one heavy writer at a time (see [`Store::write_gate`]).
    write_gate: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// This hub's ingest transactions: the text indexer keeps off the gate while ingest is busy
    /// (see [`Store::ingest_active_within`]).
    ingest_activity: std::sync::Arc<writer::IngestActivity>,
    /// PostgreSQL: set once the `pg_trgm` index of M0013 was seen to exist, so that text searches
    /// stop asking (see [`Store::pg_text_index_exists`]).
    pg_text_index_seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Failed and successful writes, shared with the pools' hooks that replace connections a
    /// failed write left unusable (see [`health`]).
    health: std::sync::Arc<health::StoreHealth>,
}

/// Ingest transactions at once unless configured otherwise (`database.ingest_writers`).
pub const DEFAULT_INGEST_WRITERS: u32 = 4;

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// The settings of every SQLite connection (see [`Store::connect`]).
fn sqlite_settings(
    sqlite: sea_orm::sqlx::sqlite::SqliteConnectOptions,
) -> sea_orm::sqlx::sqlite::SqliteConnectOptions {
    use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
    sqlite
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true)
}

impl Store {
    /// Connects and brings the schema up to date.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let mut options = ConnectOptions::new(url.to_owned());
        options
            .max_connections(max_connections)
            .min_connections(1)
            .connect_timeout(Duration::from_secs(10))
            .sqlx_logging(false);
        // Every pooled SQLite connection gets these settings, not just the first one: WAL so readers
        // never wait for the writer, a busy timeout so writers queue instead of failing, and FULL
        // synchronous so a commit is on disk before it returns: the hub acknowledges a batch after
        // its commit and the agent then deletes those events, so a commit that a power cut could
        // still undo (NORMAL, in WAL mode) would lose them.
        options.map_sqlx_sqlite_opts(sqlite_settings);
        // The same on PostgreSQL, whatever the server's default: a commit returns once its WAL is
        // flushed, so an acknowledged batch survives a crash of the database server.
        options.map_sqlx_postgres_opts(|pg| pg.options([("synchronous_commit", "on")]));
        // Both pools (and the writer's) replace connections a failed write left unusable.
        let health = health::StoreHealth::new();
        let hooks = std::sync::Arc::clone(&health);
        options.map_sqlx_sqlite_pool_opts(move |pool| health::recovering(pool, &hooks));
        let hooks = std::sync::Arc::clone(&health);
        options.map_sqlx_postgres_pool_opts(move |pool| health::recovering(pool, &hooks));
        // Before any connection; harmless when the database is PostgreSQL (SQLite is then unused).
        sqlite_memory::install();
        let db = Database::connect(options.clone()).await?;
        migration::Migrator::up(&db, None).await?;
        let writer = if db.get_database_backend() == DbBackend::Sqlite {
            options
                .max_connections(1)
                .min_connections(1)
                .map_sqlx_sqlite_opts(|sqlite| {
                    writer::sqlite_writer_settings(sqlite_settings(sqlite))
                });
            Database::connect(options).await?
        } else {
            db.clone()
        };
        let mut store = Self {
            db,
            writer,
            deferred: None,
            ingest_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(
                DEFAULT_INGEST_WRITERS as usize,
            )),
            write_gate: std::sync::Arc::new(tokio::sync::Mutex::new(())),
            ingest_activity: std::sync::Arc::default(),
            pg_text_index_seen: std::sync::Arc::default(),
            health,
        };
        store.deferred = Some(store.start_deferred_rollups().await?);
        store.spawn_health_checks();
        Ok(store)
    }

    /// Lets at most `writers` (at least one) agents' batches be stored at once through this handle
    /// and its clones. Every session of this hub stores its own batches; without a bound, a burst
    /// from many agents opens as many write transactions as the pool has connections, and on
    /// PostgreSQL those contend for the same pages and locks, and pooled connections stay taken
    /// from API reads. Batches that wait meanwhile are merged by their
    /// session into the next transaction, so fewer writers also means larger transactions.
    #[must_use]
    pub fn with_ingest_writers(mut self, writers: u32) -> Self {
        self.ingest_slots =
            std::sync::Arc::new(tokio::sync::Semaphore::new(writers.max(1) as usize));
        self
    }

    /// `sqlite` or `postgres`.
    pub fn backend_name(&self) -> &'static str {
        match self.db.get_database_backend() {
            DbBackend::Postgres => "postgres",
            DbBackend::Sqlite => "sqlite",
            _ => "other",
        }
    }

    /// Checks the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.db.ping().await.map_err(StoreError::from)
    }
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

    use super::Store;
    use super::writer::{SQLITE_WRITER_AUTOCHECKPOINT_PAGES, SQLITE_WRITER_CACHE_KIB};

    async fn pragma(db: &DatabaseConnection, name: &str) -> i64 {
        let row = db
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                format!("PRAGMA {name}"),
            ))
            .await
            .expect("pragma")
            .expect("a row");
        row.try_get_by_index(0).expect("an integer")
    }

    /// The heavy writers' settings are set once, when the writer connects, not per transaction:
    /// the writer has them, and the read pool keeps SQLite's defaults.
    #[tokio::test]
    async fn the_sqlite_writer_connection_has_the_writers_settings() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        let writer = &store.writer;
        assert_eq!(
            pragma(writer, "cache_size").await,
            -i64::from(SQLITE_WRITER_CACHE_KIB)
        );
        assert_eq!(
            pragma(writer, "wal_autocheckpoint").await,
            i64::from(SQLITE_WRITER_AUTOCHECKPOINT_PAGES)
        );
        // 2 = MEMORY.
        assert_eq!(pragma(writer, "temp_store").await, 2);
        // Every connection's settings hold on the writer too.
        assert_eq!(pragma(writer, "synchronous").await, 2, "FULL");
        assert_eq!(pragma(writer, "foreign_keys").await, 1);
        assert_eq!(pragma(&store.db, "temp_store").await, 0);
        assert_eq!(pragma(&store.db, "synchronous").await, 2, "FULL");
    }
}
