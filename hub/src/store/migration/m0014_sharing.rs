//! M0014: sharing policies, the shared bans they (and fleet rules) record per target server, and the
//! sharing engine's event cursor.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0014Sharing;

const UP: &[&str] = &[
    // `spec` is the policy as JSON (sources, jails, targets, duration); name and enabled are
    // columns of their own for uniqueness and listing.
    "CREATE TABLE sharing_policies (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        name VARCHAR(64) NOT NULL,
        enabled BOOLEAN NOT NULL,
        spec TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE UNIQUE INDEX sharing_policies_name ON sharing_policies (name)",
    // One row per (origin event, source, target). Times are Unix ms; `expires_at` NULL means until
    // lifted. `lift_pending` marks a lift the target has not confirmed yet.
    "CREATE TABLE shared_bans (
        id {id},
        ip VARCHAR(64) NOT NULL,
        target_server VARCHAR(36) NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
        origin_server VARCHAR(36) NOT NULL,
        origin_jail VARCHAR(64) NOT NULL,
        origin_event BIGINT NULL,
        source_kind VARCHAR(16) NOT NULL,
        source_id VARCHAR(64) NOT NULL,
        source_name VARCHAR(128) NOT NULL,
        step INTEGER NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NULL,
        status VARCHAR(16) NOT NULL,
        skip_reason TEXT NULL,
        delivered_at BIGINT NULL,
        lifted_at BIGINT NULL,
        lift_pending BOOLEAN NOT NULL DEFAULT FALSE
    )",
    "CREATE UNIQUE INDEX shared_bans_origin ON shared_bans (origin_event, source_kind, source_id, target_server)",
    "CREATE INDEX shared_bans_target ON shared_bans (target_server, status)",
    "CREATE INDEX shared_bans_ip ON shared_bans (ip, target_server)",
    "CREATE INDEX shared_bans_source ON shared_bans (source_kind, source_id, ip)",
    "CREATE INDEX shared_bans_origin_ip ON shared_bans (origin_server, ip)",
    "CREATE TABLE sharing_state (
        name VARCHAR(64) NOT NULL PRIMARY KEY,
        value BIGINT NOT NULL
    )",
];

const DOWN: &[&str] = &[
    "DROP TABLE sharing_state",
    "DROP TABLE shared_bans",
    "DROP TABLE sharing_policies",
];

#[async_trait::async_trait]
impl MigrationTrait for M0014Sharing {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
