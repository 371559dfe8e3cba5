//! M0016: blocklist feeds for edge firewalls and their read-only tokens.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0016Feeds;

const UP: &[&str] = &[
    // `spec` is the feed's definition as JSON (the shape of `domain::feeds::FeedDraft`), checked
    // again by the same rules when it is read back.
    "CREATE TABLE feeds (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        name VARCHAR(64) NOT NULL,
        spec TEXT NOT NULL,
        created_by VARCHAR(255) NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE UNIQUE INDEX feeds_name ON feeds (name)",
    // A token reads one feed; only the SHA-256 (hex) of its secret is kept. Deleting the feed
    // deletes its tokens.
    "CREATE TABLE feed_tokens (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        feed_id VARCHAR(36) NOT NULL REFERENCES feeds (id) ON DELETE CASCADE,
        name VARCHAR(128) NOT NULL,
        secret_hash VARCHAR(64) NOT NULL,
        created_by VARCHAR(255) NOT NULL,
        created_at BIGINT NOT NULL,
        last_used_at BIGINT NULL,
        revoked_at BIGINT NULL
    )",
    "CREATE INDEX feed_tokens_feed ON feed_tokens (feed_id)",
];

const DOWN: &[&str] = &["DROP TABLE feed_tokens", "DROP TABLE feeds"];

#[async_trait::async_trait]
impl MigrationTrait for M0016Feeds {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
