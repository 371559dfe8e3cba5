//! M0003: operator authentication and the audit log: the local administrator's password hash,
//! server-side sessions, OIDC logins in progress, API tokens, and the audit log.
//!
//! Secrets are stored only as hashes: argon2 for the password, SHA-256 (hex) for session and token
//! secrets (random 256-bit values, for which a fast hash is enough). Times are Unix milliseconds.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0003Auth;

/// `{id}` is replaced per backend.
const UP: &[&str] = &[
    "CREATE TABLE local_users (
        username VARCHAR(64) NOT NULL PRIMARY KEY,
        password_hash TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    // One row per login. `id` names the session in the cookie; the cookie's secret is checked against
    // `secret_hash`. `expires_at` is the absolute expiry, `last_seen_at` drives the idle one.
    "CREATE TABLE sessions (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        secret_hash VARCHAR(64) NOT NULL,
        kind VARCHAR(8) NOT NULL,
        subject VARCHAR(255) NOT NULL,
        name TEXT NOT NULL,
        email TEXT NULL,
        role VARCHAR(16) NOT NULL,
        id_token TEXT NULL,
        created_at BIGINT NOT NULL,
        last_seen_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        revoked_at BIGINT NULL
    )",
    "CREATE INDEX sessions_expires ON sessions (expires_at)",
    "CREATE INDEX sessions_subject ON sessions (subject)",
    // An OIDC login between the redirect to the provider and its callback, found by the SHA-256 of
    // its `state`, used once.
    "CREATE TABLE login_flows (
        state_hash VARCHAR(64) NOT NULL PRIMARY KEY,
        nonce TEXT NOT NULL,
        pkce_verifier TEXT NOT NULL,
        return_to TEXT NOT NULL,
        redirect_url TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    )",
    "CREATE INDEX login_flows_expires ON login_flows (expires_at)",
    "CREATE TABLE api_tokens (
        id VARCHAR(36) NOT NULL PRIMARY KEY,
        name VARCHAR(64) NOT NULL,
        role VARCHAR(16) NOT NULL,
        secret_hash VARCHAR(64) NOT NULL,
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        last_used_at BIGINT NULL,
        expires_at BIGINT NULL,
        revoked_at BIGINT NULL
    )",
    // Every state-changing action: who, what, on which server, how it ended, when. Newest first by id.
    "CREATE TABLE audit_log (
        id {id},
        at BIGINT NOT NULL,
        actor VARCHAR(255) NOT NULL,
        actor_name TEXT NOT NULL,
        actor_kind VARCHAR(16) NOT NULL,
        action VARCHAR(255) NOT NULL,
        path TEXT NOT NULL,
        server_id VARCHAR(36) NULL,
        status INTEGER NOT NULL,
        outcome VARCHAR(8) NOT NULL,
        detail TEXT NOT NULL,
        client_addr VARCHAR(64) NULL
    )",
    "CREATE INDEX audit_log_actor ON audit_log (actor, id)",
    "CREATE INDEX audit_log_server ON audit_log (server_id, id)",
];

const DOWN: &[&str] = &[
    "DROP TABLE audit_log",
    "DROP TABLE api_tokens",
    "DROP TABLE login_flows",
    "DROP TABLE sessions",
    "DROP TABLE local_users",
];

#[async_trait::async_trait]
impl MigrationTrait for M0003Auth {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
