//! M0011: the per-address and fleet-wide rollups of ingested batches that are not written yet, on
//! PostgreSQL. Every ingest transaction used to update the same rows (the distinct-address total,
//! the fleet's counts of the current hour and day, the often banned addresses), so concurrent
//! agents' transactions waited on each other's row locks up to the commit. Now each adds one row
//! here (insert-only: no row is shared) with what it adds to those rollups, and one applier at a
//! time (an advisory lock across replicas) merges the rows, writes the rollups and deletes them in
//! one transaction. A replica that stops leaves its rows for the next applier. SQLite keeps them in
//! memory with a watermark instead (one writer, see `store::events`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct M0011RollupPending;

const UP_POSTGRES: &[&str] = &["CREATE TABLE rollup_pending (
        id {id},
        body TEXT NOT NULL
    )"];

const DOWN_POSTGRES: &[&str] = &["DROP TABLE rollup_pending"];

#[async_trait::async_trait]
impl MigrationTrait for M0011RollupPending {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(manager, UP_POSTGRES).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        super::execute_all(manager, DOWN_POSTGRES).await
    }
}
