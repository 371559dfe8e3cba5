//! SQLite's ingest path: the batch's transaction, run on the writer connection through sqlx
//! itself rather than sea-orm ([`Store::store_batch_sqlite`] and [`IngestTxn`]).
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
use sea_orm::{DbBackend, DbErr, RuntimeErr, Value};

use super::super::sql::{CHUNK_SIZES, Sql, fixed_chunks, to_i64, to_u64};
use super::super::{Store, StoreError};
use super::flusher::hand_over;
use super::ingest::{IngestOutcome, PreparedBatch, cursor_upsert, stored_events};
use super::rollups::Rollups;
use super::row::{EventRow, SQLITE_INSERT_EVENTS};

/// Values bound per row: the id, the sequence number, the 14 of an [`EventRow`] and the 4 of
/// [`Shared`].
const ROW_VALUES: usize = 20;

/// What the rows of a batch share.
struct Shared {
    pub server: Arc<str>,
    pub agent: Arc<str>,
    pub epoch: i64,
    pub stored_at: i64,
}

/// An ingest transaction on SQLite's writer connection; rolled back if dropped uncommitted.
struct IngestTxn(sqlx::Transaction<'static, Sqlite>);

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
    let mut text = String::from(SQLITE_INSERT_EVENTS);
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
    async fn begin(pool: &sqlx::SqlitePool) -> Result<Self, StoreError> {
        Ok(Self(pool.begin().await.map_err(db_error)?))
    }

    async fn execute(&mut self, sql: Sql) -> Result<(), StoreError> {
        let (text, values) = sql.into_parts();
        sqlx::query_with(sqlx::AssertSqlSafe(text), arguments(values)?)
            .execute(&mut *self.0)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// The first column of every row `sql` returns.
    async fn column(&mut self, sql: Sql) -> Result<Vec<i64>, StoreError> {
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
    async fn insert_events(
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

    async fn commit(self) -> Result<(), StoreError> {
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

impl Store {
    /// SQLite's [`Store::store_batch`], on the writer connection through sqlx (see the module
    /// doc). The transaction holds SQLite's write lock, so nobody else inserts
    /// meanwhile: the stored sequence numbers of the batch's range are read once, and the new
    /// events get explicit ids following the table's highest id ever (AUTOINCREMENT's counter, so
    /// ids are still never reused), without reading a row back per event. Should the check ever
    /// miss one, the unique index on `(agent_id, epoch, seq)` fails the transaction instead of
    /// storing it twice. The per-address rollups go to the pending ones once committed (see
    /// [`DeferredRollups`]).
    pub(super) async fn store_batch_sqlite(
        &self,
        batch: PreparedBatch,
        rollups: bool,
    ) -> Result<IngestOutcome, StoreError> {
        let PreparedBatch {
            server,
            agent,
            epoch,
            server_text,
            agent_text,
            stored_at,
            mut slots,
            order,
            rows,
            build_rows: _,
            seqs,
        } = batch;
        if rows.len() != order.len() {
            return Err(StoreError::Corrupt(
                "a batch prepared for PostgreSQL was stored on SQLite".to_owned(),
            ));
        }
        let epoch_db = to_i64(epoch, "epoch")?;
        let Some((min_seq, max_seq)) = seqs else {
            return self.nothing_stored(agent, epoch).await;
        };
        let max_seq_db = to_i64(max_seq, "sequence number")?;
        let backend = DbBackend::Sqlite;

        let gate = self.write_gate().await;
        let mut txn = IngestTxn::begin(self.writer.get_sqlite_connection_pool()).await?;
        // The cursor first: the first statement writes, so SQLite takes its write lock at once
        // (waiting out its busy timeout) rather than failing a read transaction that later wants
        // to write.
        let sql = cursor_upsert(backend, &agent_text, epoch_db, max_seq_db, stored_at);
        let committed = txn
            .column(sql)
            .await?
            .first()
            .copied()
            .unwrap_or(max_seq_db);

        let mut sql = Sql::new(backend, "SELECT seq FROM events WHERE agent_id = ");
        sql.bind(agent_text.clone())
            .push(" AND epoch = ")
            .bind(epoch_db)
            .push(" AND seq BETWEEN ")
            .bind(to_i64(min_seq, "sequence number")?)
            .push(" AND ")
            .bind(max_seq_db);
        let existing: std::collections::HashSet<i64> = txn.column(sql).await?.into_iter().collect();
        let mut new = Vec::with_capacity(order.len());
        for (seq, row) in order.into_iter().zip(rows) {
            let seq_db = to_i64(seq, "sequence number")?;
            if !existing.contains(&seq_db) {
                new.push((seq_db, row));
            }
        }
        let mut inserted = Vec::with_capacity(new.len());
        if !new.is_empty() {
            let sql = Sql::new(
                backend,
                "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), \
                 COALESCE((SELECT MAX(id) FROM events), 0))",
            );
            let mut id = txn.column(sql).await?.first().copied().unwrap_or(0);
            let shared = Shared {
                server: server_text.as_str().into(),
                agent: agent_text.as_str().into(),
                epoch: epoch_db,
                stored_at,
            };
            let sizes: Vec<usize> = fixed_chunks(&new).map(<[_]>::len).collect();
            let mut new = new.into_iter();
            for size in sizes {
                let mut chunk = Vec::with_capacity(size);
                for (seq, row) in new.by_ref().take(size) {
                    id += 1;
                    inserted.push((id, to_u64(seq)));
                    chunk.push((id, seq, row));
                }
                txn.insert_events(&shared, chunk).await?;
            }
        }
        let stored = stored_events((server, agent, epoch), stored_at, &mut slots, inserted)?;
        if !rollups {
            txn.commit().await?;
            return Ok(IngestOutcome {
                committed_seq: to_u64(committed),
                stored,
            });
        }
        let deferred = self.deferred.as_ref().filter(|d| !d.rows).ok_or_else(|| {
            StoreError::Corrupt("the SQLite store's pending rollups are not started".to_owned())
        })?;
        let mut counts = Rollups::of(&stored);
        let addresses = Rollups {
            ip_servers: std::mem::take(&mut counts.ip_servers),
            upto: counts.upto,
            ..Rollups::default()
        };
        for sql in counts.count_statements(backend) {
            txn.execute(sql).await?;
        }
        hand_over(deferred, txn.commit(), gate, addresses).await?;
        Ok(IngestOutcome {
            committed_seq: to_u64(committed),
            stored,
        })
    }
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
