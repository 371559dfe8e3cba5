//! The event cursors of the workers that follow committed events (the alert worker, the sharing
//! engine): where each resumes, started once, and moved from where its worker last saw it to past
//! a batch inside the transaction that records the batch, so a worker that lost the race to
//! another replica records nothing. Each cursor is the `event_cursor` row of its worker's own
//! table; hand-written SQL (`sql::Sql`), the table named by [`Cursor`].

use sea_orm::ConnectionTrait;

use super::sql::{Sql, get};
use super::{Store, StoreError};

/// The row that holds a cursor in its worker's table.
const NAME: &str = "event_cursor";

/// Which worker's cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    /// The alert worker's (table `alert_state`, M0004).
    Alerts,
    /// The sharing engine's (table `sharing_state`, M0014).
    Sharing,
}

impl Cursor {
    fn table(self) -> &'static str {
        match self {
            Self::Alerts => "alert_state",
            Self::Sharing => "sharing_state",
        }
    }
}

impl Store {
    /// The id of the last event `cursor`'s worker matched, once it has started.
    pub async fn cursor(&self, cursor: Cursor) -> Result<Option<i64>, StoreError> {
        let mut sql = self.sql(&format!(
            "SELECT value FROM {} WHERE name = ",
            cursor.table()
        ));
        sql.bind(NAME);
        self.rows(sql)
            .await?
            .first()
            .map(|row| get(row, 0))
            .transpose()
    }

    /// Starts `cursor` at `value` unless it exists (another replica may have started it first);
    /// returns the cursor.
    pub async fn init_cursor(&self, cursor: Cursor, value: i64) -> Result<i64, StoreError> {
        let mut sql = self.sql(&format!(
            "INSERT INTO {} (name, value) VALUES (",
            cursor.table()
        ));
        sql.bind(NAME)
            .push(", ")
            .bind(value)
            .push(") ON CONFLICT (name) DO NOTHING");
        self.exec(sql).await?;
        self.cursor(cursor)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("the {} cursor vanished", cursor.table())))
    }
}

/// Moves `cursor` from `from` to `to` inside `txn`; false (nothing changed) when it was no longer
/// at `from`. Written first in its transaction: the write takes the row's lock, so of two workers
/// the one that lost the race stops here.
pub(super) async fn advance(
    txn: &impl ConnectionTrait,
    cursor: Cursor,
    from: i64,
    to: i64,
) -> Result<bool, StoreError> {
    let mut sql = Sql::new(
        txn.get_database_backend(),
        &format!("UPDATE {} SET value = ", cursor.table()),
    );
    sql.bind(to)
        .push(" WHERE name = ")
        .bind(NAME)
        .push(" AND value = ")
        .bind(from);
    Ok(txn.execute_raw(sql.build()).await?.rows_affected() == 1)
}
