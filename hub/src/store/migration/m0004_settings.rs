//! M0004: the settings document with its sealed secrets, and the alert worker's tables: its event
//! cursor, the digests it groups matches into, and the deliveries of each digest with their status.
//!
//! Written as SQL that both SQLite and PostgreSQL accept, like M0002; `{id}` is the backend's
//! auto-increment key.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0004Settings;

const UP: &[&str] = &[
    // One row (id 1). `document` is the canonical JSON without secrets; `secrets` a JSON object of
    // sealed values by slot. `version` rises by one per save: an edit from an older version is
    // refused.
    "CREATE TABLE settings (
        id INTEGER NOT NULL PRIMARY KEY,
        version BIGINT NOT NULL,
        document TEXT NOT NULL,
        secrets TEXT NOT NULL,
        updated_at BIGINT NULL
    )",
    "INSERT INTO settings (id, version, document, secrets, updated_at) VALUES (1, 0, '{}', '{}', NULL)",
    // Named counters of the alert worker; `event_cursor`: every event up to this id was matched.
    "CREATE TABLE alert_state (
        name VARCHAR(32) NOT NULL PRIMARY KEY,
        value BIGINT NOT NULL
    )",
    // The matches of one rule within its digest window. Open while `closed_at` is NULL.
    "CREATE TABLE alert_digests (
        id {id},
        rule_id VARCHAR(36) NOT NULL,
        rule_name VARCHAR(128) NOT NULL,
        opened_at BIGINT NOT NULL,
        due_at BIGINT NOT NULL,
        closed_at BIGINT NULL,
        events BIGINT NOT NULL,
        first_event_id BIGINT NOT NULL,
        last_event_id BIGINT NOT NULL,
        summary TEXT NOT NULL
    )",
    "CREATE INDEX alert_digests_open ON alert_digests (closed_at, due_at)",
    "CREATE INDEX alert_digests_rule ON alert_digests (rule_id, closed_at)",
    // One message of a digest to one channel (e-mail, or a webhook by name).
    "CREATE TABLE alert_deliveries (
        id {id},
        digest_id BIGINT NOT NULL,
        rule_id VARCHAR(36) NOT NULL,
        rule_name VARCHAR(128) NOT NULL,
        channel VARCHAR(16) NOT NULL,
        target VARCHAR(128) NOT NULL,
        status VARCHAR(16) NOT NULL,
        attempts INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        next_attempt_at BIGINT NOT NULL,
        last_error TEXT NULL,
        response TEXT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        delivered_at BIGINT NULL
    )",
    "CREATE INDEX alert_deliveries_due ON alert_deliveries (status, next_attempt_at)",
    "CREATE INDEX alert_deliveries_digest ON alert_deliveries (digest_id)",
];

const DOWN: &[&str] = &[
    "DROP TABLE alert_deliveries",
    "DROP TABLE alert_digests",
    "DROP TABLE alert_state",
    "DROP TABLE settings",
];

#[async_trait::async_trait]
impl MigrationTrait for M0004Settings {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
