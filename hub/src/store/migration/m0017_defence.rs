//! M0017: fleet defence beside the sharing engine: recidive rules (the checked rule as JSON), what
//! each rule remembers of the addresses it fired for (for escalation and the cooldown), and the
//! storm breaker's pauses of source servers (at most one open pause per server). An address's ban
//! events within a window are read through `events_ip_time` (M0002).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0017Defence;

const UP: &[&str] = &[
    "CREATE TABLE recidive_rules (
        id {id},
        name VARCHAR(100) NOT NULL,
        spec TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE UNIQUE INDEX recidive_rules_name ON recidive_rules (name)",
    "CREATE TABLE recidive_firings (
        rule_id BIGINT NOT NULL,
        ip VARCHAR(64) NOT NULL,
        count BIGINT NOT NULL,
        last_fired_at BIGINT NOT NULL,
        last_duration_secs BIGINT NOT NULL,
        last_event_id BIGINT NOT NULL,
        PRIMARY KEY (rule_id, ip)
    ){clustered}",
    "CREATE TABLE sharing_pauses (
        id {id},
        server_id VARCHAR(36) NOT NULL,
        paused_at BIGINT NOT NULL,
        shared_bans BIGINT NOT NULL,
        reason TEXT NOT NULL,
        resumed_at BIGINT NULL,
        resumed_by VARCHAR(255) NULL
    )",
    "CREATE UNIQUE INDEX sharing_pauses_open ON sharing_pauses (server_id) WHERE resumed_at IS NULL",
    "CREATE INDEX sharing_pauses_time ON sharing_pauses (paused_at)",
];

const DOWN: &[&str] = &[
    "DROP TABLE sharing_pauses",
    "DROP TABLE recidive_firings",
    "DROP TABLE recidive_rules",
];

#[async_trait::async_trait]
impl MigrationTrait for M0017Defence {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
