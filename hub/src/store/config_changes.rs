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

#[cfg(test)]
mod tests {
    use super::*;

    async fn sqlite_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        (dir, store)
    }

    fn change(server: ServerId, id: &str) -> ConfigChange {
        let at = to_time(Utc::now().timestamp_millis());
        ConfigChange {
            id: id.to_owned(),
            server,
            files: vec![SetFile {
                path: "jail.d/sshd.local".to_owned(),
                content: "[sshd]\nmaxretry = 4\n".to_owned(),
                version: "absent".to_owned(),
                exists: true,
            }],
            confirm_within_secs: 60,
            state: ChangeState::Applying,
            reason: "sent to the agent".to_owned(),
            deadline: None,
            applied: Vec::new(),
            created_by: "admin".to_owned(),
            created_at: at,
            updated_at: at,
        }
    }

    #[tokio::test]
    async fn a_change_is_stored_moved_along_and_open_until_settled() {
        let (_dir, store) = sqlite_store().await;
        let (server, other) = (ServerId::new(), ServerId::new());
        let first = change(server, "c1");
        store.insert_config_change(&first).await.expect("insert");
        store
            .insert_config_change(&change(other, "c2"))
            .await
            .expect("insert");
        assert_eq!(
            store.config_change(server, "c1").await.expect("get"),
            Some(first.clone())
        );
        assert_eq!(store.config_change(other, "c1").await.expect("get"), None);
        let open = store.open_config_changes(Some(server)).await.expect("open");
        assert_eq!(
            open.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["c1"]
        );

        let deadline = to_time(Utc::now().timestamp_millis() + 60_000);
        let applied = vec![("jail.d/sshd.local".to_owned(), "ab".repeat(32))];
        let waiting = store
            .update_config_change(
                "c1",
                ChangeUpdate {
                    state: ChangeState::AwaitingConfirm,
                    reason: "applied",
                    deadline: Some(deadline),
                    applied: Some(&applied),
                },
                Utc::now(),
            )
            .await
            .expect("update")
            .expect("known");
        assert_eq!(waiting.state, ChangeState::AwaitingConfirm);
        assert_eq!(waiting.deadline, Some(deadline));
        assert_eq!(waiting.applied, applied);

        let confirmed = store
            .update_config_change(
                "c1",
                ChangeUpdate {
                    state: ChangeState::Confirmed,
                    reason: "confirmed by the hub",
                    deadline: None,
                    applied: None,
                },
                Utc::now(),
            )
            .await
            .expect("update")
            .expect("known");
        assert_eq!(confirmed.deadline, Some(deadline), "kept when not given");
        assert_eq!(confirmed.applied, applied, "kept when not given");
        assert!(
            store
                .open_config_changes(Some(server))
                .await
                .expect("open")
                .is_empty()
        );
        assert_eq!(
            store.open_config_changes(None).await.expect("open").len(),
            1,
            "the other server's change is still open"
        );
        assert_eq!(
            store.config_changes(server, 10).await.expect("list"),
            vec![confirmed]
        );
        let unknown = ChangeUpdate {
            state: ChangeState::Failed,
            reason: "x",
            deadline: None,
            applied: None,
        };
        assert_eq!(
            store
                .update_config_change("nope", unknown, Utc::now())
                .await
                .expect("update"),
            None
        );
    }
}
