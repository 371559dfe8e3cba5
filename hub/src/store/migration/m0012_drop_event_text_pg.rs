//! M0012: drops the `pg_trgm` index of log lines that M0010 made on PostgreSQL. GIN is updated by
//! every ingest transaction, which costs the ingest path more than a faster search of rare texts
//! is worth (figures in bench/README.md). A text search on PostgreSQL
//! reads rows again (a rare text over a long history is slow). The extension stays installed.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct M0012DropEventTextPg;

#[async_trait::async_trait]
impl MigrationTrait for M0012DropEventTextPg {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(manager, &["DROP INDEX IF EXISTS events_logs_trgm"]).await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        // M0010's down would drop it again; nothing to restore here.
        Ok(())
    }
}
