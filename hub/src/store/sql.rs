//! The SQL builder of the store's hand-written statements: text and bound values with the
//! backend's placeholders (`?` on SQLite, `$n` on PostgreSQL), multi-row statements cut into a few
//! fixed sizes, and reading a column of a raw row.
//!
//! Hand-written SQL is one of the store's ways to the database (beside sea-orm's entities): the
//! hot and multi-row paths (ingest, rollups, reads of events, fleet actions, the replicas' tables)
//! use it where the statement must be exactly what both databases accept and plan well. Every
//! hand-written statement is built here, so placeholders are never written by hand;
//! [`Store::sql`], [`Store::exec`] and [`Store::rows`] run one on the pool.

use std::fmt::Write as _;

use sea_orm::{ConnectionTrait as _, DbBackend, QueryResult, Statement, Value};

use super::{Store, StoreError};

/// Rows per multi-row statement. A batch is cut greedily into statements of these sizes, so each
/// table is written by at most five distinct statement texts, which the driver prepares once per
/// connection and reuses (a statement per batch length would be prepared anew almost every batch).
/// 256 rows of the widest table (19 values) stay well under SQLite's 32,766 parameters.
pub(super) const CHUNK_SIZES: [usize; 5] = [256, 64, 16, 4, 1];

/// SQL text with its bound values and the right placeholders for the backend.
pub(super) struct Sql {
    backend: DbBackend,
    text: String,
    values: Vec<Value>,
}

impl Sql {
    pub(super) fn new(backend: DbBackend, text: &str) -> Self {
        Self {
            backend,
            text: text.to_owned(),
            values: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub(super) fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        if self.backend == DbBackend::Postgres {
            // Writing into a String cannot fail.
            let _ = write!(self.text, "${}", self.values.len());
        } else {
            self.text.push('?');
        }
        self
    }

    /// `(?, ?, …)` with one placeholder per value.
    pub(super) fn tuple<I: IntoIterator<Item = Value>>(&mut self, values: I) -> &mut Self {
        self.text.push('(');
        for (i, value) in values.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.bind(value);
        }
        self.text.push(')');
        self
    }

    pub(super) fn backend(&self) -> DbBackend {
        self.backend
    }

    pub(super) fn build(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text, self.values)
    }

    /// The text and the values, for a driver other than sea-orm's (see `sqlite_ingest`).
    pub(super) fn into_parts(self) -> (String, Vec<Value>) {
        (self.text, self.values)
    }
}

impl Store {
    /// A statement for this store's backend, starting with `text`.
    pub(super) fn sql(&self, text: &str) -> Sql {
        Sql::new(self.backend(), text)
    }

    /// Runs `sql` on the pool; the rows it changed.
    pub(super) async fn exec(&self, sql: Sql) -> Result<u64, StoreError> {
        Ok(self.db.execute_raw(sql.build()).await?.rows_affected())
    }

    /// Runs `sql` on the pool; the rows it returned.
    pub(super) async fn rows(&self, sql: Sql) -> Result<Vec<QueryResult>, StoreError> {
        Ok(self.db.query_all_raw(sql.build()).await?)
    }
}

/// `items` cut into consecutive slices of the [`CHUNK_SIZES`], largest first.
pub(super) fn fixed_chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        let size = CHUNK_SIZES
            .iter()
            .copied()
            .find(|size| *size <= rest.len())?;
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        Some(chunk)
    })
}

pub(super) fn to_i64(n: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(n)
        .map_err(|_| StoreError::Corrupt(format!("{what} {n} does not fit the database")))
}

pub(super) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(super) fn get<T: sea_orm::TryGetable>(
    row: &QueryResult,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get_by_index(index).map_err(StoreError::from)
}
