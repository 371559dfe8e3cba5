//! The store: the only module that names sea-orm. Repository functions take and return domain types.
//!
//! SQLite (one WAL file in the data directory) is the embedded default; PostgreSQL is used when a
//! `postgres://` URL is configured. The same migrations serve both.

mod alerts;
mod auth;
pub mod cluster;
mod entities;
pub mod events;
mod health;
mod migration;
mod places;
mod settings;
mod sql;
mod sqlite_memory;
mod writer;

pub use places::IpBans;
pub use settings::{CallbackSecretRow, RotateOutcome};

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectOptions, Database, DatabaseConnection, DbBackend,
    EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};
use sea_orm_migration::MigratorTrait;
use subtle::ConstantTimeEq;

use crate::domain::{
    AgentFacts, AgentId, Labels, NewServer, Server, ServerId, ServerName, SignedAgentCert,
    sha256_hex,
};
use entities::{agent_cert, enrollment_token, server};

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

/// Why an enrollment token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    #[error("the enrollment token is unknown or its secret does not match")]
    Invalid,
    #[error("the enrollment token has already been used; create a new one on the hub")]
    Used,
    #[error("the enrollment token has expired; create a new one on the hub")]
    Expired,
}

/// Outcome of an enrollment attempt.
#[derive(Debug)]
pub enum EnrollOutcome<E> {
    Enrolled(Box<Server>, SignedAgentCert, AgentId),
    Refused(TokenRefusal),
    SignFailed(E),
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

    pub async fn create_server(&self, new: NewServer) -> Result<Server, StoreError> {
        let id = ServerId::new();
        let model = server::ActiveModel {
            id: Set(id.to_string()),
            name: Set(new.name.as_str().to_owned()),
            description: Set(new.description),
            labels: Set(serde_json::to_string(new.labels.as_map())
                .map_err(|e| StoreError::Corrupt(e.to_string()))?),
            created_at: Set(now_ms()),
            agent_id: Set(None),
            enrolled_at: Set(None),
            last_seen_at: Set(None),
            agent_version: Set(None),
            fail2ban_version: Set(None),
            hostname: Set(None),
            last_address: Set(None),
        };
        if server::Entity::find()
            .filter(server::Column::Name.eq(new.name.as_str()))
            .one(&self.db)
            .await?
            .is_some()
        {
            return Err(StoreError::NameTaken(new.name.to_string()));
        }
        match model.insert(&self.db).await {
            Ok(row) => to_server(row),
            // A concurrent insert of the same name loses on the unique index.
            Err(e) if is_unique_violation(&e) => Err(StoreError::NameTaken(new.name.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn list_servers(&self) -> Result<Vec<Server>, StoreError> {
        server::Entity::find()
            .order_by_asc(server::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_server)
            .collect()
    }

    pub async fn get_server(&self, id: ServerId) -> Result<Option<Server>, StoreError> {
        server::Entity::find_by_id(id.to_string())
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server requests go to when they name none: the oldest one.
    pub async fn default_server(&self) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .order_by_asc(server::Column::CreatedAt)
            .order_by_asc(server::Column::Id)
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server named `name`, if any.
    pub async fn server_by_name(&self, name: &ServerName) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .filter(server::Column::Name.eq(name.as_str()))
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server whose current agent is `agent`, if any.
    pub async fn server_of_agent(&self, agent: AgentId) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .filter(server::Column::AgentId.eq(agent.to_string()))
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// Deletes a server with its tokens and revokes every certificate issued for it. Returns the
    /// revoked serials, or `None` if there was no such server.
    pub async fn delete_server(&self, id: ServerId) -> Result<Option<Vec<String>>, StoreError> {
        let txn = self.db.begin().await?;
        let now = now_ms();
        // Write before reading (see `enroll`): revoking the certificates of a server that does not
        // exist changes nothing, and the transaction then holds the write lock.
        agent_cert::Entity::update_many()
            .col_expr(agent_cert::Column::RevokedAt, Expr::value(now))
            .filter(agent_cert::Column::ServerId.eq(id.to_string()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        let Some(row) = server::Entity::find_by_id(id.to_string()).one(&txn).await? else {
            return Ok(None);
        };
        let serials = agent_cert::Entity::find()
            .filter(agent_cert::Column::ServerId.eq(row.id.clone()))
            .all(&txn)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect();
        enrollment_token::Entity::delete_many()
            .filter(enrollment_token::Column::ServerId.eq(row.id.clone()))
            .exec(&txn)
            .await?;
        server::Entity::delete_by_id(row.id).exec(&txn).await?;
        txn.commit().await?;
        Ok(Some(serials))
    }

    /// Stores a new enrollment token for `server` with the hash of its secret.
    pub async fn create_enrollment_token(
        &self,
        server: ServerId,
        token_id: &str,
        secret: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        enrollment_token::ActiveModel {
            id: Set(token_id.to_owned()),
            server_id: Set(server.to_string()),
            secret_hash: Set(sha256_hex(secret.as_bytes())),
            created_at: Set(now_ms()),
            expires_at: Set(expires_at.timestamp_millis()),
            used_at: Set(None),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    /// Redeems a token and records the agent it enrolls, in one transaction: the token is marked used,
    /// `sign` issues the certificate, the server points at the new agent, and older certificates of the
    /// server are revoked (returned in the outcome through the revocation list the caller keeps).
    pub async fn enroll<E>(
        &self,
        token_id: &str,
        secret: &str,
        facts: &AgentFacts,
        sign: impl FnOnce(&Server, AgentId) -> Result<SignedAgentCert, E>,
    ) -> Result<(EnrollOutcome<E>, Vec<String>), StoreError> {
        let txn = self.db.begin().await?;
        let now = now_ms();
        // Claim the token with one write before reading anything: on SQLite a transaction that
        // reads first and writes later fails with "database is locked" when another redemption
        // races it, instead of waiting. Only one concurrent redemption can update the row.
        let presented = sha256_hex(secret.as_bytes());
        let claimed = enrollment_token::Entity::update_many()
            .col_expr(enrollment_token::Column::UsedAt, Expr::value(now))
            .filter(enrollment_token::Column::Id.eq(token_id.to_owned()))
            .filter(enrollment_token::Column::SecretHash.eq(presented.clone()))
            .filter(enrollment_token::Column::UsedAt.is_null())
            .filter(enrollment_token::Column::ExpiresAt.gt(now))
            .exec(&txn)
            .await?;
        if claimed.rows_affected != 1 {
            // Say why, from the row as it is (the transaction changed nothing).
            let token = enrollment_token::Entity::find_by_id(token_id.to_owned())
                .one(&txn)
                .await?;
            let refusal = match token {
                Some(token)
                    if bool::from(presented.as_bytes().ct_eq(token.secret_hash.as_bytes())) =>
                {
                    if token.used_at.is_some() {
                        TokenRefusal::Used
                    } else {
                        TokenRefusal::Expired
                    }
                }
                _ => TokenRefusal::Invalid,
            };
            return Ok((EnrollOutcome::Refused(refusal), Vec::new()));
        }
        let token = enrollment_token::Entity::find_by_id(token_id.to_owned())
            .one(&txn)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a claimed token vanished".to_owned()))?;
        let Some(server_row) = server::Entity::find_by_id(token.server_id.clone())
            .one(&txn)
            .await?
        else {
            return Ok((EnrollOutcome::Refused(TokenRefusal::Invalid), Vec::new()));
        };
        let server = to_server(server_row.clone())?;
        let agent = AgentId::new();
        let cert = match sign(&server, agent) {
            Ok(cert) => cert,
            Err(e) => return Ok((EnrollOutcome::SignFailed(e), Vec::new())),
        };
        // Older certificates of this server stop working: one agent per server.
        let old: Vec<String> = agent_cert::Entity::find()
            .filter(agent_cert::Column::ServerId.eq(server_row.id.clone()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .all(&txn)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect();
        agent_cert::Entity::update_many()
            .col_expr(agent_cert::Column::RevokedAt, Expr::value(now))
            .filter(agent_cert::Column::ServerId.eq(server_row.id.clone()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        agent_cert::ActiveModel {
            serial: Set(cert.serial.clone()),
            agent_id: Set(agent.to_string()),
            server_id: Set(server_row.id.clone()),
            fingerprint: Set(cert.fingerprint.clone()),
            issued_at: Set(now),
            not_after: Set(cert.not_after.timestamp_millis()),
            revoked_at: Set(None),
        }
        .insert(&txn)
        .await?;
        let mut active: server::ActiveModel = server_row.into();
        active.agent_id = Set(Some(agent.to_string()));
        active.enrolled_at = Set(Some(now));
        active.agent_version = Set(non_empty(&facts.agent_version));
        active.hostname = Set(non_empty(&facts.hostname));
        active.last_address = Set(non_empty(&facts.address));
        let updated = active.update(&txn).await?;
        txn.commit().await?;
        Ok((
            EnrollOutcome::Enrolled(Box::new(to_server(updated)?), cert, agent),
            old,
        ))
    }

    /// Serials of every revoked certificate, for the handshake's revocation list.
    pub async fn revoked_serials(&self) -> Result<Vec<String>, StoreError> {
        Ok(agent_cert::Entity::find()
            .filter(agent_cert::Column::RevokedAt.is_not_null())
            .all(&self.db)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect())
    }

    /// Whether `serial` was issued to `agent` and is still valid.
    pub async fn cert_is_current(&self, agent: AgentId, serial: &str) -> Result<bool, StoreError> {
        Ok(agent_cert::Entity::find_by_id(serial.to_owned())
            .one(&self.db)
            .await?
            .is_some_and(|c| c.agent_id == agent.to_string() && c.revoked_at.is_none()))
    }

    /// Records a direct callback of a server that has no agent, so it shows as reporting; a
    /// server with an agent is left alone (its `last_seen_at` is its agent's).
    pub async fn mark_reported_directly(&self, id: ServerId) -> Result<(), StoreError> {
        server::Entity::update_many()
            .col_expr(server::Column::LastSeenAt, Expr::value(now_ms()))
            .filter(server::Column::Id.eq(id.to_string()))
            .filter(server::Column::AgentId.is_null())
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Records that the server's agent is alive, with what it reported.
    pub async fn mark_seen(
        &self,
        id: ServerId,
        facts: Option<&AgentFacts>,
    ) -> Result<(), StoreError> {
        let mut update = server::Entity::update_many()
            .col_expr(server::Column::LastSeenAt, Expr::value(now_ms()))
            .filter(server::Column::Id.eq(id.to_string()));
        if let Some(facts) = facts {
            update = update
                .col_expr(
                    server::Column::AgentVersion,
                    Expr::value(non_empty(&facts.agent_version)),
                )
                .col_expr(
                    server::Column::Fail2banVersion,
                    Expr::value(non_empty(&facts.fail2ban_version)),
                )
                .col_expr(
                    server::Column::Hostname,
                    Expr::value(non_empty(&facts.hostname)),
                )
                .col_expr(
                    server::Column::LastAddress,
                    Expr::value(non_empty(&facts.address)),
                );
        }
        update.exec(&self.db).await?;
        Ok(())
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn is_unique_violation(e: &sea_orm::DbErr) -> bool {
    matches!(
        e.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}

fn to_server(row: server::Model) -> Result<Server, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("server {}: {what}", row.id));
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&row.labels).map_err(|_| corrupt("labels"))?;
    Ok(Server {
        id: ServerId::parse(&row.id).map_err(|_| corrupt("id"))?,
        name: ServerName::parse(&row.name).map_err(|_| corrupt("name"))?,
        description: row.description.clone(),
        labels: Labels::parse(labels).map_err(|_| corrupt("labels"))?,
        created_at: to_time(row.created_at),
        agent_id: row
            .agent_id
            .as_deref()
            .map(AgentId::parse)
            .transpose()
            .map_err(|_| corrupt("agent id"))?,
        enrolled_at: row.enrolled_at.map(to_time),
        last_seen_at: row.last_seen_at.map(to_time),
        agent_version: row.agent_version,
        fail2ban_version: row.fail2ban_version,
        hostname: row.hostname,
        last_address: row.last_address,
    })
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
