//! M0013: a text index of the events' log lines on PostgreSQL that ingest never writes (M0010's
//! index on `events.logs` was maintained by every ingest transaction and tripled PostgreSQL's CPU
//! per stored event; M0012 dropped it). `event_text_pg` holds a copy of each event's log lines
//! under a `pg_trgm` GIN index, filled in the background by the text indexer
//! (`store/event_text_pg.rs`). Ingest only adds one small row per transaction to
//! `event_text_pending`: the lowest and highest event id it inserted. The indexer copies those
//! events and deletes the row in one transaction, so every committed event is either in
//! `event_text_pg` or inside a pending range, whatever order ids commit in.
//!
//! Existing events become one pending range, which the indexer works through in the background.
//! Without `pg_trgm` (not installed and not creatable by this user) the tables are made but not the
//! index: the indexer then only drops the pending rows, and a text search scans as before.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct M0013EventTextPg;

/// Whether `pg_trgm` is installed, or available and creatable by this user (as in M0010).
const CAN_INDEX: &str = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') \
     OR (EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') \
     AND has_database_privilege(current_database(), 'CREATE'))";

const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS event_text_pending (id {id}, first_id BIGINT NOT NULL, \
     last_id BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS event_text_pg (id BIGINT PRIMARY KEY, logs TEXT NOT NULL)",
    "INSERT INTO event_text_pending (first_id, last_id) SELECT MIN(id), MAX(id) FROM events \
     HAVING COUNT(*) > 0",
];

const INDEX: &[&str] = &[
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS event_text_pg_trgm ON event_text_pg USING gin (logs gin_trgm_ops)",
];

#[async_trait::async_trait]
impl MigrationTrait for M0013EventTextPg {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(manager, TABLES).await?;
        let can = manager
            .get_connection()
            .query_one_raw(Statement::from_string(DbBackend::Postgres, CAN_INDEX))
            .await?
            .map(|row| row.try_get_by_index::<bool>(0))
            .transpose()?
            .unwrap_or(false);
        if !can {
            tracing::warn!(
                "PostgreSQL extension pg_trgm is not available to this user: log lines are not \
                 indexed, and a text search reads every row"
            );
            return Ok(());
        }
        super::execute_all(manager, INDEX).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(
            manager,
            &[
                "DROP TABLE IF EXISTS event_text_pg",
                "DROP TABLE IF EXISTS event_text_pending",
            ],
        )
        .await
    }
}
