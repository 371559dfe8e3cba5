//! M0019: what the feeds and the lockout guard need across restarts and replicas. An index of the
//! ban events by the time their ban ends, so the feeds read the bans in force without reading every
//! event; and `ignoreip_pushes`, the protected networks each host's `ignoreip` was last given.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0019Guard;

/// When a stored ban ends, in Unix ms: its ban time (seconds, or the event's time when unknown)
/// plus its duration; fail2ban's permanent bans (a negative or unknown duration) never end. The
/// store's query of the bans in force repeats this text exactly, so both databases use the index.
pub(in crate::store) const BAN_END: &str = "(CASE WHEN ban_duration IS NULL OR ban_duration < 0 \
     THEN 9223372036854775807 \
     ELSE COALESCE(ban_time * 1000, occurred_at) + ban_duration * 1000 END)";

fn up() -> Vec<String> {
    vec![
        format!("CREATE INDEX events_ban_end ON events ({BAN_END}) WHERE kind = 'ban'"),
        // `list` is the protected networks last written into the host's `ignoreip` (CIDRs, one
        // per line); a row goes with its server.
        "CREATE TABLE ignoreip_pushes (
            server_id VARCHAR(36) NOT NULL PRIMARY KEY REFERENCES servers (id) ON DELETE CASCADE,
            list TEXT NOT NULL,
            pushed_at BIGINT NOT NULL
        )"
        .to_owned(),
    ]
}

const DOWN: &[&str] = &["DROP TABLE ignoreip_pushes", "DROP INDEX events_ban_end"];

#[async_trait::async_trait]
impl MigrationTrait for M0019Guard {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let statements = up();
        let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
        super::execute_all(manager, &statements).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
