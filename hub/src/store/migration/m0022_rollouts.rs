//! M0022: rollouts of a profile version to many servers. `rollouts` holds each rollout's plan, its
//! state and why it ended, and an operator's stop request until the engine acts on it (at most
//! one running rollout per profile, held by a partial unique index); `rollout_hosts` each host's
//! batch, state, checks (JSON), error and the config change that applied the version there.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0022Rollouts;

const UP: &[&str] = &[
    // Times are Unix milliseconds.
    "CREATE TABLE rollouts (
        id VARCHAR(40) NOT NULL PRIMARY KEY,
        profile VARCHAR(64) NOT NULL,
        version BIGINT NOT NULL,
        state VARCHAR(16) NOT NULL,
        canary BIGINT NOT NULL,
        batch_size BIGINT NOT NULL,
        watch_secs BIGINT NOT NULL,
        confirm_secs BIGINT NOT NULL,
        max_ban_rate_factor DOUBLE PRECISION NOT NULL,
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        finished_at BIGINT NULL,
        reason TEXT NULL,
        stop_requested_by TEXT NULL
    )",
    "CREATE INDEX rollouts_created ON rollouts (created_at)",
    "CREATE UNIQUE INDEX rollouts_running ON rollouts (profile) WHERE state = 'running'",
    "CREATE TABLE rollout_hosts (
        rollout_id VARCHAR(40) NOT NULL,
        server_id VARCHAR(40) NOT NULL,
        server_name TEXT NOT NULL,
        position BIGINT NOT NULL,
        batch BIGINT NOT NULL,
        state VARCHAR(16) NOT NULL,
        checks TEXT NOT NULL,
        error TEXT NULL,
        change_id VARCHAR(40) NULL,
        watch_started_at BIGINT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (rollout_id, server_id)
    )",
    "CREATE INDEX rollout_hosts_change ON rollout_hosts (change_id)",
];

const DOWN: &[&str] = &[
    "DROP INDEX rollout_hosts_change",
    "DROP TABLE rollout_hosts",
    "DROP INDEX rollouts_running",
    "DROP INDEX rollouts_created",
    "DROP TABLE rollouts",
];

#[async_trait::async_trait]
impl MigrationTrait for M0022Rollouts {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
