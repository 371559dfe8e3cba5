//! The store side of hub replicas: agent leases and replica heartbeats (`leases`), commands
//! forwarded between replicas (`forwarded`), singleton-job bookkeeping and the shared settings (`jobs`),
//! and `LISTEN/NOTIFY` with advisory locks (`signals`, PostgreSQL only).
//!
//! Statements are hand-written SQL built with the store's SQL builder (`sql::Sql`) and run on
//! sea-orm's pool (`Store::exec`, `Store::rows`): upserts, conditional updates and row locks that
//! sea-orm's entities do not express (the notifications and locks hold sqlx connections of their
//! own). Everything that only makes sense with several replicas is only called on PostgreSQL.

mod forwarded;
mod jobs;
mod leases;
mod signals;

pub use forwarded::{ClaimedCommand, ForwardedOutcome};
pub use jobs::{JobEvent, JobRuns};
pub use leases::{Lease, LeaseGrant, ReplicaRow};
pub use signals::{Listener, LockConnection, Notice};

use sea_orm::DbBackend;

pub(super) use super::sql::{get, to_u64};
use super::{Store, StoreError};
use crate::domain::ServerId;

pub(super) fn server_id(raw: &str) -> Result<ServerId, StoreError> {
    ServerId::parse(raw).map_err(|_| StoreError::Corrupt(format!("server id {raw:?}")))
}

impl Store {
    /// Whether several replicas can share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.db.get_database_backend() == DbBackend::Postgres
    }
}
