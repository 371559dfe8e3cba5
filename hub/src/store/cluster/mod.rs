//! The store side of hub replicas: agent leases and replica heartbeats (`leases`), commands
//! forwarded between replicas (`forwarded`), singleton-job bookkeeping and the shared settings (`jobs`),
//! and `LISTEN/NOTIFY` with advisory locks (`signals`, PostgreSQL only).
//!
//! Statements are hand-written SQL with `$n` placeholders, which PostgreSQL and (through sqlx)
//! SQLite both accept, run through sea-orm's pool by [`Store::exec`] and [`Store::rows`] (the
//! notifications and locks hold sqlx connections of their own). Everything that only makes sense
//! with several replicas is only called on PostgreSQL.

mod forwarded;
mod jobs;
mod leases;
mod signals;

pub use forwarded::{ClaimedCommand, ForwardedOutcome};
pub use jobs::{JobEvent, JobRuns};
pub use leases::{Lease, LeaseGrant, ReplicaRow};
pub use signals::{Listener, LockConnection, Notice};

use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};

pub(super) use super::sql::{get, to_u64};
use super::{Store, StoreError};
use crate::domain::ServerId;

pub(super) fn server_id(raw: &str) -> Result<ServerId, StoreError> {
    ServerId::parse(raw).map_err(|_| StoreError::Corrupt(format!("server id {raw:?}")))
}

impl Store {
    fn stmt(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.db.get_database_backend(), sql, values)
    }

    pub(super) async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(self.stmt(sql, values))
            .await?
            .rows_affected())
    }

    pub(super) async fn rows(
        &self,
        sql: &str,
        values: Vec<Value>,
    ) -> Result<Vec<QueryResult>, StoreError> {
        Ok(self.db.query_all_raw(self.stmt(sql, values)).await?)
    }

    /// Whether several replicas can share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.db.get_database_backend() == DbBackend::Postgres
    }
}
