//! M0024: timed bans. `timed_bans` holds one row per ban that carries a duration, on one server
//! and jail: when it ends, its state (`active` until the hub lifts it, then `lifted`, `failed`,
//! or `cancelled` / `replaced` when a later ban or unban of the same address took over), the
//! fleet action it came with, and when the lifter tries next after a failed attempt.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0024TimedBans;

const UP: &[&str] = &[
    "CREATE TABLE timed_bans (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        server_id VARCHAR(36) NOT NULL,
        jail VARCHAR(64) NOT NULL,
        ip VARCHAR(64) NOT NULL,
        ends_at BIGINT NOT NULL,
        state VARCHAR(16) NOT NULL,
        fleet_action_id VARCHAR(36) NULL,
        requested_by VARCHAR(255) NOT NULL,
        created_at BIGINT NOT NULL,
        next_try_at BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        error TEXT NULL,
        finished_at BIGINT NULL
    )",
    "CREATE INDEX timed_bans_due ON timed_bans (state, next_try_at)",
    "CREATE INDEX timed_bans_address ON timed_bans (ip, server_id)",
    "CREATE INDEX timed_bans_action ON timed_bans (fleet_action_id)",
];

const DOWN: &[&str] = &["DROP TABLE timed_bans"];

#[async_trait::async_trait]
impl MigrationTrait for M0024TimedBans {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
