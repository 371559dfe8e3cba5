//! M0015: the lockout guard. `protected_networks` holds the networks an admin protected (nothing in
//! banhub bans them); `operator_addresses` the client address each operator credential (a session,
//! an API token) was last used from, which is protected while the credential lives.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0015ProtectedNetworks;

const UP: &[&str] = &[
    "CREATE TABLE protected_networks (
        id {id},
        network VARCHAR(64) NOT NULL,
        note TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE UNIQUE INDEX protected_networks_network ON protected_networks (network)",
    // `credential` is `session:<id>` or `token:<id>`; one row each, the newest address.
    "CREATE TABLE operator_addresses (
        credential VARCHAR(80) NOT NULL PRIMARY KEY,
        ip VARCHAR(64) NOT NULL,
        name TEXT NOT NULL,
        seen_at BIGINT NOT NULL
    )",
];

const DOWN: &[&str] = &[
    "DROP TABLE operator_addresses",
    "DROP INDEX protected_networks_network",
    "DROP TABLE protected_networks",
];

#[async_trait::async_trait]
impl MigrationTrait for M0015ProtectedNetworks {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
