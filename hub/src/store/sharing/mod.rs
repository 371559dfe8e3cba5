//! The sharing engine's tables: sharing policies (`policies`), the shared bans recorded per target
//! server and their delivery state (`bans`), and what the engine records for one batch of events
//! (`batch`: the shared bans, the lifts of origin unbans, the breaker's counts and trips and the
//! recidive firings) in one transaction with its cursor (`cursors`), so a replica that dies
//! mid-way neither loses nor doubles any of them. Policies go through sea-orm's entities; the
//! multi-row and conditional statements on shared bans are hand-written SQL (`sql::Sql`).

mod bans;
mod batch;
mod policies;

pub use bans::TargetWork;
pub use batch::{Recorded, SharingBatch};

use super::StoreError;

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(what.into())
}

#[cfg(test)]
mod tests;
