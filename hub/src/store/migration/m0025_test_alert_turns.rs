//! M0025: the test alerts' turns. `test_alert_turns` holds, per channel (`email` or
//! `webhook:<name>`), when its last test alert was let through, so the limit of one test per
//! channel and interval holds across every replica of the hub.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct M0025TestAlertTurns;

const UP: &[&str] = &["CREATE TABLE test_alert_turns (
        channel VARCHAR(300) NOT NULL PRIMARY KEY,
        last_at BIGINT NOT NULL
    )"];

const DOWN: &[&str] = &["DROP TABLE test_alert_turns"];

#[async_trait::async_trait]
impl MigrationTrait for M0025TestAlertTurns {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        super::execute_all(manager, DOWN).await
    }
}
