//! M0007: rotating a server's callback secret with an overlap: when the current secret was set,
//! and the previous one with the time until which it is still accepted.
//!
//! (M0006 is left to the event-performance indexes being written at the same time.)

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0007CallbackSecrets;

const UP: &[&str] = &[
    "ALTER TABLE servers ADD COLUMN callback_secret_set_at BIGINT NULL",
    // SHA-256 hex of the secret before the last rotation, accepted until `..._until` (Unix ms).
    "ALTER TABLE servers ADD COLUMN callback_secret_previous_hash VARCHAR(64) NULL",
    "ALTER TABLE servers ADD COLUMN callback_secret_previous_until BIGINT NULL",
    "CREATE INDEX servers_callback_secret_previous ON servers (callback_secret_previous_hash)",
];

const DOWN: &[&str] = &[
    "DROP INDEX servers_callback_secret_previous",
    "ALTER TABLE servers DROP COLUMN callback_secret_previous_until",
    "ALTER TABLE servers DROP COLUMN callback_secret_previous_hash",
    "ALTER TABLE servers DROP COLUMN callback_secret_set_at",
];

#[async_trait::async_trait]
impl MigrationTrait for M0007CallbackSecrets {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
