//! M0018: the storm breaker's window in the database: one row per origin ban that shared (its
//! event, source server, when, and the shared bans it caused), written by the sharing engine in
//! the transaction that records the shared bans, so every replica counts the same window.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0018SharingOrigins;

const UP: &[&str] = &[
    "CREATE TABLE sharing_origins (
        origin_event BIGINT NOT NULL PRIMARY KEY,
        origin_server VARCHAR(36) NOT NULL,
        shared_at BIGINT NOT NULL,
        shared_bans BIGINT NOT NULL
    )",
    "CREATE INDEX sharing_origins_server ON sharing_origins (origin_server, shared_at)",
    "CREATE INDEX sharing_origins_time ON sharing_origins (shared_at)",
];

const DOWN: &[&str] = &["DROP TABLE sharing_origins"];

#[async_trait::async_trait]
impl MigrationTrait for M0018SharingOrigins {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
