//! M0008: a partial index for gap events, so a page filtered on `kind=gap` stays fast on a large
//! history: without it such a page read the whole table newest-first looking for rows that are
//! rare or absent (over 15 s on 10 million events). Partial, so ingest writes it only for gaps.
//! Both SQLite and PostgreSQL use it only when the query names `kind = 'gap'` as a literal, which
//! `store::events` does for kinds. (Numbered after M0007, which landed first: migrations are
//! applied in list order.)

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0008EventPerf;

const UP: &[&str] =
    &["CREATE INDEX events_gap_time ON events (occurred_at, id) WHERE kind = 'gap'"];

const DOWN: &[&str] = &["DROP INDEX events_gap_time"];

#[async_trait::async_trait]
impl MigrationTrait for M0008EventPerf {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
