//! M0021: profiles and drift. `profiles` holds each profile's assignment (a label selector as
//! JSON, an optional pinned version) and its newest version's number; `profile_versions` the
//! immutable versions (the files as JSON, the comment, who saved it and when); `server_drift` the
//! last comparison of each server with its profile (state, differing files as JSON, the drift
//! last alerted about, the baseline of the files outside the profile).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0021Profiles;

const UP: &[&str] = &[
    "CREATE TABLE profiles (
        name VARCHAR(64) NOT NULL PRIMARY KEY,
        description TEXT NOT NULL,
        selector TEXT NOT NULL,
        pinned_version BIGINT NULL,
        latest_version BIGINT NULL,
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL
    )",
    "CREATE TABLE profile_versions (
        profile VARCHAR(64) NOT NULL,
        version BIGINT NOT NULL,
        files TEXT NOT NULL,
        comment TEXT NOT NULL,
        author TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        PRIMARY KEY (profile, version)
    )",
    "CREATE TABLE server_drift (
        server_id VARCHAR(36) NOT NULL PRIMARY KEY,
        state VARCHAR(16) NOT NULL,
        profile VARCHAR(64) NULL,
        version BIGINT NULL,
        reason TEXT NOT NULL,
        files TEXT NOT NULL,
        fingerprint VARCHAR(64) NOT NULL,
        alerted VARCHAR(64) NULL,
        baseline TEXT NULL,
        checked_at BIGINT NOT NULL,
        since BIGINT NOT NULL
    )",
];

const DOWN: &[&str] = &[
    "DROP TABLE server_drift",
    "DROP TABLE profile_versions",
    "DROP TABLE profiles",
];

#[async_trait::async_trait]
impl MigrationTrait for M0021Profiles {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
