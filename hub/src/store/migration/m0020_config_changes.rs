//! M0020: config changes, sets of fail2ban files applied to one server with commit-confirm, with
//! what became of each, so a hub restart resumes confirming the open ones or records their end.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0020ConfigChanges;

const UP: &[&str] = &[
    // `files` and `applied` are JSON; times are Unix milliseconds.
    "CREATE TABLE config_changes (
        id VARCHAR(40) NOT NULL PRIMARY KEY,
        server_id VARCHAR(40) NOT NULL,
        files TEXT NOT NULL,
        confirm_within_secs BIGINT NOT NULL,
        state VARCHAR(20) NOT NULL,
        reason TEXT NOT NULL,
        deadline_at BIGINT,
        applied TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE INDEX config_changes_server ON config_changes (server_id, created_at)",
    "CREATE INDEX config_changes_state ON config_changes (state)",
];

const DOWN: &[&str] = &[
    "DROP INDEX config_changes_state",
    "DROP INDEX config_changes_server",
    "DROP TABLE config_changes",
];

#[async_trait::async_trait]
impl MigrationTrait for M0020ConfigChanges {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
