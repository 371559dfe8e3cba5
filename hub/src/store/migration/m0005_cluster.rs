//! M0005: hub replicas on one database (replica heartbeats, agent leases, commands relayed between
//! replicas, singleton job runs, shared settings) and fleet-wide actions with per-server targets.
//!
//! Written as SQL that both SQLite and PostgreSQL accept; only the byte-string type differs. On SQLite
//! (one hub) the replica tables stay empty, the fleet-action tables are used the same way.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0005Cluster;

/// `{bytes}` is replaced per backend. Times are Unix milliseconds.
const UP: &[&str] = &[
    // Each running replica refreshes its row; a row that stops moving belongs to a dead replica.
    "CREATE TABLE hub_replicas (
        replica_id VARCHAR(64) NOT NULL PRIMARY KEY,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL
    )",
    // Which replica holds the session of a server's agent. One row per server; a newer session (on
    // any replica) takes the row over and bumps `generation`, which tells the older holder to let go.
    // The holder renews `expires_at` in bulk; a lease past it is void.
    "CREATE TABLE agent_leases (
        server_id VARCHAR(36) NOT NULL PRIMARY KEY,
        agent_id VARCHAR(36) NOT NULL,
        replica_id VARCHAR(64) NOT NULL,
        generation BIGINT NOT NULL,
        connected_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    )",
    "CREATE INDEX agent_leases_replica ON agent_leases (replica_id)",
    // A command accepted by one replica for an agent held by another. The NOTIFY payloads carry
    // only the id; the encoded command and its encoded result live here.
    "CREATE TABLE cluster_commands (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        server_id VARCHAR(36) NOT NULL,
        origin_replica VARCHAR(64) NOT NULL,
        target_replica VARCHAR(64) NOT NULL,
        command {bytes} NOT NULL,
        deadline BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        state VARCHAR(16) NOT NULL,
        result {bytes} NULL,
        error VARCHAR(32) NULL
    )",
    "CREATE INDEX cluster_commands_target ON cluster_commands (target_replica, state)",
    "CREATE INDEX cluster_commands_created ON cluster_commands (created_at)",
    // Each replica's record of each singleton job (only the one holding the job's lock runs it):
    // how often it became the job's leader, and how many passes it reported.
    "CREATE TABLE cluster_jobs (
        name VARCHAR(64) NOT NULL,
        replica_id VARCHAR(64) NOT NULL,
        terms BIGINT NOT NULL,
        runs BIGINT NOT NULL,
        first_run_at BIGINT NOT NULL,
        last_run_at BIGINT NOT NULL,
        PRIMARY KEY (name, replica_id)
    )",
    // Facts every replica must agree on, e.g. the fingerprint of the internal CA.
    "CREATE TABLE cluster_settings (
        name VARCHAR(64) NOT NULL PRIMARY KEY,
        value TEXT NOT NULL
    )",
    // A ban or unban of one address on many servers. `selector` is the JSON of what was asked for
    // (every server, or a label selector), kept to show it back.
    "CREATE TABLE fleet_actions (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        kind VARCHAR(8) NOT NULL,
        ip VARCHAR(64) NOT NULL,
        jail VARCHAR(64) NULL,
        selector TEXT NOT NULL,
        requested_by VARCHAR(255) NOT NULL,
        created_at BIGINT NOT NULL,
        deadline BIGINT NOT NULL
    )",
    "CREATE INDEX fleet_actions_created ON fleet_actions (created_at, id)",
    // One row per server an action applies to: queued → delivered → done | failed, or queued →
    // expired past the deadline. `command_id` stays the same over redeliveries, so an agent that
    // already ran the command does not run it twice.
    "CREATE TABLE fleet_action_targets (
        action_id VARCHAR(36) NOT NULL,
        server_id VARCHAR(36) NOT NULL,
        server_name VARCHAR(64) NOT NULL,
        state VARCHAR(16) NOT NULL,
        command_id VARCHAR(36) NOT NULL,
        deadline BIGINT NOT NULL,
        changed BOOLEAN NULL,
        jails TEXT NULL,
        error TEXT NULL,
        attempts BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        delivered_at BIGINT NULL,
        finished_at BIGINT NULL,
        PRIMARY KEY (action_id, server_id)
    )",
    "CREATE INDEX fleet_action_targets_state ON fleet_action_targets (state, server_id)",
];

const DOWN: &[&str] = &[
    "DROP TABLE fleet_action_targets",
    "DROP TABLE fleet_actions",
    "DROP TABLE cluster_settings",
    "DROP TABLE cluster_jobs",
    "DROP TABLE cluster_commands",
    "DROP TABLE agent_leases",
    "DROP TABLE hub_replicas",
];

#[async_trait::async_trait]
impl MigrationTrait for M0005Cluster {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
