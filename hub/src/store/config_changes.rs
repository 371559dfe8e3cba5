//! Repository functions of config changes (sets of fail2ban files applied with commit-confirm):
//! record one, move it along its states, list a server's, and find the open ones after a start.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};

use super::entities::config_change;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::config_changes::{ChangeState, ConfigChange, SetFile};

fn corrupt(id: &str, what: &str) -> StoreError {
    StoreError::Corrupt(format!("config change {id}: {what}"))
}

fn to_change(row: config_change::Model) -> Result<ConfigChange, StoreError> {
    let files: Vec<SetFile> =
        serde_json::from_str(&row.files).map_err(|_| corrupt(&row.id, "files"))?;
    let applied: Vec<(String, String)> =
        serde_json::from_str(&row.applied).map_err(|_| corrupt(&row.id, "applied"))?;
    Ok(ConfigChange {
        server: ServerId::parse(&row.server_id).map_err(|_| corrupt(&row.id, "server id"))?,
        state: ChangeState::parse(&row.state).ok_or_else(|| corrupt(&row.id, "state"))?,
        confirm_within_secs: u32::try_from(row.confirm_within_secs)
            .map_err(|_| corrupt(&row.id, "window"))?,
        reason: row.reason,
        deadline: row.deadline_at.map(to_time),
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
        files,
        applied,
        id: row.id,
    })
}

/// What a state change writes.
#[derive(Debug, Clone)]
pub struct ChangeUpdate<'a> {
    pub state: ChangeState,
    pub reason: &'a str,
    /// `None` leaves the stored deadline as it is.
    pub deadline: Option<DateTime<Utc>>,
    /// `None` leaves the stored versions as they are.
    pub applied: Option<&'a [(String, String)]>,
}

impl Store {
    /// Records a change about to be sent, in the state `applying`.
    pub async fn insert_config_change(&self, change: &ConfigChange) -> Result<(), StoreError> {
        let files =
            serde_json::to_string(&change.files).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let applied = serde_json::to_string(&change.applied)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        config_change::ActiveModel {
            id: Set(change.id.clone()),
            server_id: Set(change.server.to_string()),
            files: Set(files),
            confirm_within_secs: Set(i64::from(change.confirm_within_secs)),
            state: Set(change.state.as_str().to_owned()),
            reason: Set(change.reason.clone()),
            deadline_at: Set(change.deadline.map(|d| d.timestamp_millis())),
            applied: Set(applied),
            created_by: Set(change.created_by.clone()),
            created_at: Set(change.created_at.timestamp_millis()),
            updated_at: Set(change.updated_at.timestamp_millis()),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    /// Moves a change to a new state; `None` when no change has this id.
    pub async fn update_config_change(
        &self,
        id: &str,
        update: ChangeUpdate<'_>,
        at: DateTime<Utc>,
    ) -> Result<Option<ConfigChange>, StoreError> {
        let Some(row) = config_change::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let mut active: config_change::ActiveModel = row.into();
        active.state = Set(update.state.as_str().to_owned());
        active.reason = Set(update.reason.to_owned());
        active.updated_at = Set(at.timestamp_millis());
        if let Some(deadline) = update.deadline {
            active.deadline_at = Set(Some(deadline.timestamp_millis()));
        }
        if let Some(applied) = update.applied {
            let applied =
                serde_json::to_string(applied).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            active.applied = Set(applied);
        }
        to_change(active.update(&self.db).await?).map(Some)
    }

    /// One change of a server.
    pub async fn config_change(
        &self,
        server: ServerId,
        id: &str,
    ) -> Result<Option<ConfigChange>, StoreError> {
        config_change::Entity::find_by_id(id.to_owned())
            .filter(config_change::Column::ServerId.eq(server.to_string()))
            .one(&self.db)
            .await?
            .map(to_change)
            .transpose()
    }

    /// A server's changes, newest first, at most `limit`.
    pub async fn config_changes(
        &self,
        server: ServerId,
        limit: u64,
    ) -> Result<Vec<ConfigChange>, StoreError> {
        config_change::Entity::find()
            .filter(config_change::Column::ServerId.eq(server.to_string()))
            .order_by_desc(config_change::Column::CreatedAt)
            .order_by_desc(config_change::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_change)
            .collect()
    }

    /// The changes the hub still has something to do for (`applying`, `awaiting_confirm`),
    /// oldest first; of one server when `server` is given.
    pub async fn open_config_changes(
        &self,
        server: Option<ServerId>,
    ) -> Result<Vec<ConfigChange>, StoreError> {
        let open = [ChangeState::Applying, ChangeState::AwaitingConfirm].map(|s| s.as_str());
        let mut query =
            config_change::Entity::find().filter(config_change::Column::State.is_in(open));
        if let Some(server) = server {
            query = query.filter(config_change::Column::ServerId.eq(server.to_string()));
        }
        query
            .order_by_asc(config_change::Column::CreatedAt)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_change)
            .collect()
    }
}
