//! The sharing engine's tables: sharing policies (`policies`), the shared bans recorded per target
//! server and their delivery state (`bans`), and the engine's event cursor. Recording the shared
//! bans of a batch of events and moving the cursor past it is one transaction, so a replica that
//! dies mid-way neither loses nor doubles a shared ban. Policies go through sea-orm's entities;
//! the multi-row and conditional statements on shared bans are hand-written SQL (`sql::Sql`).

mod bans;
mod policies;

pub use bans::TargetWork;

use sea_orm::{ActiveModelTrait, EntityTrait, Set};

use super::entities::sharing_state;
use super::{Store, StoreError};

const CURSOR: &str = "event_cursor";

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(what.into())
}

impl Store {
    /// The id of the last event the sharing engine matched, once it has started.
    pub async fn sharing_cursor(&self) -> Result<Option<i64>, StoreError> {
        Ok(sharing_state::Entity::find_by_id(CURSOR.to_owned())
            .one(&self.db)
            .await?
            .map(|row| row.value))
    }

    /// Starts the cursor at `value` unless it exists; returns the cursor.
    pub async fn init_sharing_cursor(&self, value: i64) -> Result<i64, StoreError> {
        if let Some(existing) = self.sharing_cursor().await? {
            return Ok(existing);
        }
        let inserted = sharing_state::ActiveModel {
            name: Set(CURSOR.to_owned()),
            value: Set(value),
        }
        .insert(&self.db)
        .await;
        match inserted {
            Ok(_) => Ok(value),
            // Another hub started it first.
            Err(_) => self
                .sharing_cursor()
                .await?
                .ok_or_else(|| corrupt("the sharing cursor vanished")),
        }
    }
}
