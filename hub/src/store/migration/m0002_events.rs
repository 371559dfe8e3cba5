//! M0002: ban events, the per-agent ingest cursors, the rollups that keep stats and insights fast, and
//! the servers' callback secret and default flag.
//!
//! Written as SQL that both SQLite and PostgreSQL accept; the two differences (the auto-increment id
//! and the byte-string type, plus SQLite's clustered `WITHOUT ROWID` rollup tables) are spelled out
//! per backend below.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0002Events;

/// `{id}`, `{bytes}` and `{clustered}` are replaced per backend.
const UP: &[&str] = &[
    // One row per event. `ip_key` orders addresses (16 bytes, IPv4 mapped into ::ffff:0:0/96) so a
    // CIDR filter is a range scan. `logs` is a JSON list of lines; `detail` holds a gap's reason and
    // sequence ranges as JSON. Times are Unix milliseconds.
    "CREATE TABLE events (
        id {id},
        server_id VARCHAR(36) NOT NULL,
        agent_id VARCHAR(36) NULL,
        epoch BIGINT NULL,
        seq BIGINT NULL,
        kind VARCHAR(8) NOT NULL,
        source VARCHAR(16) NOT NULL,
        ip VARCHAR(64) NULL,
        ip_key {bytes} NULL,
        jail VARCHAR(64) NULL,
        hostname VARCHAR(255) NOT NULL,
        failures BIGINT NOT NULL,
        logs TEXT NOT NULL,
        ban_time BIGINT NULL,
        ban_duration BIGINT NULL,
        ban_count BIGINT NULL,
        lost BIGINT NULL,
        detail TEXT NULL,
        occurred_at BIGINT NOT NULL,
        stored_at BIGINT NOT NULL
    )",
    // Idempotent ingest: an agent's event is stored once. Direct callbacks have no agent (NULL), and
    // NULLs never collide.
    "CREATE UNIQUE INDEX events_agent_position ON events (agent_id, epoch, seq)",
    // Newest-first keyset paging, unfiltered and by the common filters.
    "CREATE INDEX events_time ON events (occurred_at, id)",
    "CREATE INDEX events_server_time ON events (server_id, occurred_at, id)",
    "CREATE INDEX events_jail_time ON events (jail, occurred_at, id)",
    "CREATE INDEX events_ip_time ON events (ip_key, occurred_at, id)",
    // The last sequence number committed per agent and spool epoch, updated with the inserts.
    "CREATE TABLE agent_cursors (
        agent_id VARCHAR(36) NOT NULL,
        epoch BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        PRIMARY KEY (agent_id, epoch)
    )",
    // Event counts per hour and per day (bucket = start, Unix ms) by server, jail and kind. The empty
    // string stands for "every server" / "every jail", so each event counts in four rows per table:
    // (server, jail), (server, ''), ('', jail), ('', ''). Clustered by bucket first, so a batch
    // updates a few pages at the end of the table; the indexes, which do not hold the count, change
    // only when a bucket row is created.
    "CREATE TABLE event_counts_hourly (
        server_id VARCHAR(36) NOT NULL,
        jail VARCHAR(64) NOT NULL,
        bucket BIGINT NOT NULL,
        kind VARCHAR(8) NOT NULL,
        count BIGINT NOT NULL,
        PRIMARY KEY (bucket, server_id, jail, kind)
    ){clustered}",
    "CREATE INDEX event_counts_hourly_key ON event_counts_hourly (server_id, jail, bucket)",
    "CREATE INDEX event_counts_hourly_server ON event_counts_hourly (server_id, bucket)",
    "CREATE INDEX event_counts_hourly_jail ON event_counts_hourly (jail, bucket)",
    "CREATE TABLE event_counts_daily (
        server_id VARCHAR(36) NOT NULL,
        jail VARCHAR(64) NOT NULL,
        bucket BIGINT NOT NULL,
        kind VARCHAR(8) NOT NULL,
        count BIGINT NOT NULL,
        PRIMARY KEY (bucket, server_id, jail, kind)
    ){clustered}",
    "CREATE INDEX event_counts_daily_key ON event_counts_daily (server_id, jail, bucket)",
    "CREATE INDEX event_counts_daily_server ON event_counts_daily (server_id, bucket)",
    "CREATE INDEX event_counts_daily_jail ON event_counts_daily (jail, bucket)",
    // Bans per address: totals, on how many servers, first and last seen.
    "CREATE TABLE ip_stats (
        ip VARCHAR(64) NOT NULL PRIMARY KEY,
        bans BIGINT NOT NULL,
        servers BIGINT NOT NULL,
        first_seen BIGINT NOT NULL,
        last_seen BIGINT NOT NULL,
        last_jail VARCHAR(64) NOT NULL,
        last_server_id VARCHAR(36) NOT NULL
    ){clustered}",
    // Ranking indexes only hold addresses banned often (see `store::events::rollup_reads`): most
    // addresses are banned once or twice, and their updates then touch no index page at all.
    "CREATE INDEX ip_stats_hot ON ip_stats (bans, ip) WHERE bans >= 8",
    "CREATE INDEX ip_stats_repeat ON ip_stats (servers, bans, ip) WHERE servers >= 2",
    // Bans per address and server.
    "CREATE TABLE ip_servers (
        ip VARCHAR(64) NOT NULL,
        server_id VARCHAR(36) NOT NULL,
        bans BIGINT NOT NULL,
        first_seen BIGINT NOT NULL,
        last_seen BIGINT NOT NULL,
        PRIMARY KEY (ip, server_id)
    ){clustered}",
    "CREATE INDEX ip_servers_hot ON ip_servers (server_id, bans, ip) WHERE bans >= 4",
    // Running totals that would otherwise need a full count (e.g. distinct addresses).
    "CREATE TABLE event_totals (
        name VARCHAR(32) NOT NULL PRIMARY KEY,
        value BIGINT NOT NULL
    )",
    // A host without an agent calls back with its own secret; the hub keeps its SHA-256 (hex).
    "ALTER TABLE servers ADD COLUMN callback_secret_hash VARCHAR(64) NULL",
    "CREATE UNIQUE INDEX servers_callback_secret_hash ON servers (callback_secret_hash)",
    // The server commands go to when a request names none. At most one.
    "ALTER TABLE servers ADD COLUMN is_default BOOLEAN NOT NULL DEFAULT FALSE",
    "CREATE UNIQUE INDEX servers_one_default ON servers (is_default) WHERE is_default",
];

const DOWN: &[&str] = &[
    "DROP INDEX servers_one_default",
    "ALTER TABLE servers DROP COLUMN is_default",
    "DROP INDEX servers_callback_secret_hash",
    "ALTER TABLE servers DROP COLUMN callback_secret_hash",
    "DROP TABLE event_totals",
    "DROP TABLE ip_servers",
    "DROP TABLE ip_stats",
    "DROP TABLE event_counts_daily",
    "DROP TABLE event_counts_hourly",
    "DROP TABLE agent_cursors",
    "DROP TABLE events",
];

#[async_trait::async_trait]
impl MigrationTrait for M0002Events {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
