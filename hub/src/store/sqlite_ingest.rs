//! SQLite's ingest transaction, run on the writer connection through sqlx itself rather than
//! sea-orm (see `Store::store_batch_sqlite` in `events`).
//!
//! sea-orm hands a statement's values to sqlx by cloning them (every string of every row) and then
//! converting each into sqlx's own argument, and an events insert of a batch carries most of the
//! batch's bytes. Here the rows' values move into sqlx's arguments once, and the texts the rows of a
//! batch share (server, agent) are one allocation each, bound to every row. The statement texts
//! are built once per process, one per chunk size. (Numbered parameters, to bind the shared values
//! once per statement, cost far more: sqlx looks up every parameter's name, and SQLite finds a
//! name by walking the list of all of them.)
//!
//! The inserts are `INSERT OR FAIL`: with SQLite's default (`ABORT`) a statement that may fail
//! halfway keeps a journal of every page it changes, to undo itself alone. An ingest transaction
//! that fails in any statement is rolled back whole, so that journal was never needed; with `FAIL`
//! SQLite does not keep it. The unique index on `(agent_id, epoch, seq)` still refuses a repeat.

use std::sync::{Arc, OnceLock};

use sea_orm::sqlx::sqlite::{SqliteArguments, SqliteRow};
use sea_orm::sqlx::{self, Arguments as _, Row as _, Sqlite};
use sea_orm::{DbErr, RuntimeErr, Value};

use super::StoreError;
use super::events::{CHUNK_SIZES, EventRow, Sql};

/// Values bound per row: the id, the sequence number, the 14 of an [`EventRow`] and the 4 of
/// [`Shared`].
const ROW_VALUES: usize = 20;

/// What the rows of a batch share.
pub(super) struct Shared {
    pub server: Arc<str>,
    pub agent: Arc<str>,
    pub epoch: i64,
    pub stored_at: i64,
}

/// An ingest transaction on SQLite's writer connection; rolled back if dropped uncommitted.
pub(super) struct IngestTxn(sqlx::Transaction<'static, Sqlite>);

fn db_error(e: sqlx::Error) -> StoreError {
    StoreError::Db(DbErr::Exec(RuntimeErr::SqlxError(e.into())))
}

fn bind_error(e: sqlx::error::BoxDynError) -> StoreError {
    StoreError::Corrupt(format!("a value could not be bound: {e}"))
}

/// `sql`'s values as sqlx arguments, moved; only the kinds of value the ingest statements bind.
fn arguments(values: Vec<Value>) -> Result<SqliteArguments, StoreError> {
    let mut args = SqliteArguments::default();
    for value in values {
        match value {
            Value::String(v) => args.add(v),
            Value::BigInt(v) => args.add(v),
            Value::Int(v) => args.add(v),
            Value::Bytes(v) => args.add(v),
            other => {
                return Err(StoreError::Corrupt(format!(
                    "an ingest statement binds an unexpected value: {other:?}"
                )));
            }
        }
        .map_err(bind_error)?;
    }
    Ok(args)
}

/// The insert of `rows` events (one of [`CHUNK_SIZES`]), built once.
fn insert_text(rows: usize) -> Result<&'static str, StoreError> {
    static TEXTS: OnceLock<Vec<(usize, String)>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        CHUNK_SIZES
            .iter()
            .map(|&size| (size, build_insert_text(size)))
            .collect()
    });
    texts
        .iter()
        .find(|(size, _)| *size == rows)
        .map(|(_, text)| text.as_str())
        .ok_or_else(|| StoreError::Corrupt(format!("no insert statement for {rows} rows")))
}

fn build_insert_text(rows: usize) -> String {
    let mut text = String::from(
        "INSERT OR FAIL INTO events (id, seq, kind, source, ip, ip_key, jail, hostname, failures, \
         logs, ban_time, ban_duration, ban_count, lost, detail, occurred_at, server_id, agent_id, \
         epoch, stored_at) VALUES ",
    );
    for row in 0..rows {
        if row > 0 {
            text.push_str(", ");
        }
        text.push('(');
        for n in 0..ROW_VALUES {
            text.push_str(if n == 0 { "?" } else { ", ?" });
        }
        text.push(')');
    }
    text
}

impl IngestTxn {
    /// Begins on `pool` (the writer's pool of one connection).
    pub(super) async fn begin(pool: &sqlx::SqlitePool) -> Result<Self, StoreError> {
        Ok(Self(pool.begin().await.map_err(db_error)?))
    }

    pub(super) async fn execute(&mut self, sql: Sql) -> Result<(), StoreError> {
        let (text, values) = sql.into_parts();
        sqlx::query_with(sqlx::AssertSqlSafe(text), arguments(values)?)
            .execute(&mut *self.0)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// The first column of every row `sql` returns.
    pub(super) async fn column(&mut self, sql: Sql) -> Result<Vec<i64>, StoreError> {
        let (text, values) = sql.into_parts();
        let rows: Vec<SqliteRow> = sqlx::query_with(sqlx::AssertSqlSafe(text), arguments(values)?)
            .fetch_all(&mut *self.0)
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| row.try_get::<i64, _>(0).map_err(db_error))
            .collect()
    }

    /// Inserts `rows` (`(id, seq, row)`, as many as one of [`CHUNK_SIZES`]) in one statement.
    pub(super) async fn insert_events(
        &mut self,
        shared: &Shared,
        rows: Vec<(i64, i64, EventRow)>,
    ) -> Result<(), StoreError> {
        let text = insert_text(rows.len())?;
        let mut args = SqliteArguments::default();
        for (id, seq, row) in rows {
            add_row(&mut args, id, seq, row, shared).map_err(bind_error)?;
        }
        sqlx::query_with(text, args)
            .execute(&mut *self.0)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    pub(super) async fn commit(self) -> Result<(), StoreError> {
        self.0.commit().await.map_err(db_error)
    }
}

/// One row's [`ROW_VALUES`], in the order of the insert's columns.
fn add_row(
    args: &mut SqliteArguments,
    id: i64,
    seq: i64,
    row: EventRow,
    shared: &Shared,
) -> Result<(), sqlx::error::BoxDynError> {
    args.add(id)?;
    args.add(seq)?;
    args.add(row.kind)?;
    args.add(row.source)?;
    args.add(row.ip)?;
    args.add(row.ip_key)?;
    args.add(row.jail)?;
    args.add(row.hostname)?;
    args.add(row.failures)?;
    args.add(row.logs)?;
    args.add(row.ban_time)?;
    args.add(row.ban_duration)?;
    args.add(row.ban_count)?;
    args.add(row.lost)?;
    args.add(row.detail)?;
    args.add(row.occurred_at)?;
    args.add(Arc::clone(&shared.server))?;
    args.add(Arc::clone(&shared.agent))?;
    args.add(shared.epoch)?;
    args.add(shared.stored_at)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_has_a_placeholder_per_column() {
        let text = build_insert_text(2);
        let (columns, values) = text.split_once(" VALUES ").expect("an insert");
        let row = format!("({})", vec!["?"; ROW_VALUES].join(", "));
        assert_eq!(values, format!("{row}, {row}"));
        assert_eq!(
            columns.matches(',').count() + 1,
            ROW_VALUES,
            "one column per value"
        );
    }

    #[test]
    fn the_largest_chunk_stays_under_sqlites_parameter_limit() {
        let most = CHUNK_SIZES[0] * ROW_VALUES;
        assert!(most <= 32_766, "{most} parameters");
        assert!(insert_text(CHUNK_SIZES[0]).is_ok());
        assert!(insert_text(CHUNK_SIZES[0] + 1).is_err());
    }
}
