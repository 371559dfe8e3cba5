//! M0009: a trigram index of the events' log lines, so a text search finds a rare string in a long
//! history without reading every row (seconds over 10 million events before). SQLite only: an FTS5
//! table with the trigram tokenizer, contentless (the text stays in `events`; the index holds only
//! which rows contain which three-character sequences, `detail=none`), rows deletable by id once
//! retention removed their events. It is filled by a background indexer in batches, never by
//! ingest, and `event_text_index.indexed_to` says up to which event id it is complete; a search uses
//! it for those and scans the few newer rows. PostgreSQL has no such table and scans.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct M0009EventText;

const UP_SQLITE: &[&str] = &[
    "CREATE VIRTUAL TABLE event_text USING fts5(logs, content = '', contentless_delete = 1, \
     detail = none, tokenize = 'trigram')",
    "CREATE TABLE event_text_index (
        id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
        indexed_to BIGINT NOT NULL
    )",
    "INSERT INTO event_text_index (id, indexed_to) VALUES (1, 0)",
];

const DOWN_SQLITE: &[&str] = &["DROP TABLE event_text_index", "DROP TABLE event_text"];

#[async_trait::async_trait]
impl MigrationTrait for M0009EventText {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        super::execute_all(manager, UP_SQLITE).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Sqlite {
            return Ok(());
        }
        super::execute_all(manager, DOWN_SQLITE).await
    }
}
