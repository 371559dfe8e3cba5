//! M0010: a trigram index of the events' log lines on PostgreSQL (`pg_trgm`, GIN), so a text
//! search (`logs ILIKE '%text%'`) finds a rare string in a long history without reading every row;
//! SQLite has its own index since M0009. PostgreSQL's planner uses it for a pattern it expects to
//! be rare and keeps walking the newest rows for a common one. Only when `pg_trgm` can be
//! installed here (it ships with PostgreSQL's contrib and is a trusted extension: the database
//! owner may create it); otherwise there is no index and a search scans, as before. GIN's pending
//! list (`fastupdate`, on by default) keeps the cost for ingest low: new rows are merged into the
//! index in the background by autovacuum, and searched in the list meanwhile.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct M0010EventTextPg;

/// Whether `pg_trgm` is installed, or available and creatable by this user.
const CAN_INDEX: &str = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') \
     OR (EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') \
     AND has_database_privilege(current_database(), 'CREATE'))";

const UP: &[&str] = &[
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS events_logs_trgm ON events USING gin (logs gin_trgm_ops)",
];

#[async_trait::async_trait]
impl MigrationTrait for M0010EventTextPg {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        let can = db
            .query_one_raw(Statement::from_string(DbBackend::Postgres, CAN_INDEX))
            .await?
            .map(|row| row.try_get_by_index::<bool>(0))
            .transpose()?
            .unwrap_or(false);
        if !can {
            tracing::warn!(
                "PostgreSQL extension pg_trgm is not available to this user: no index of log lines \
                 is made, and a text search reads every row"
            );
            return Ok(());
        }
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(manager, &["DROP INDEX IF EXISTS events_logs_trgm"]).await
    }
}
