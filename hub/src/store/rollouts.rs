//! Repository functions of rollouts: record one with its hosts, move the rollout and each host
//! along their states, list them, find the running ones after a start, the config changes a
//! running rollout confirms itself, and the ban counts its ban-rate check reads.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Set, TransactionTrait,
};

use super::entities::{event, rollout, rollout_host};
use super::servers::is_unique_violation;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::profiles::ProfileName;
use crate::domain::rollouts::{Check, HostState, Rollout, RolloutHost, RolloutPlan, RolloutState};

fn corrupt(id: &str, what: &str) -> StoreError {
    StoreError::Corrupt(format!("rollout {id}: {what}"))
}

fn to_rollout(row: rollout::Model) -> Result<Rollout, StoreError> {
    let count = |v: i64, what: &str| u32::try_from(v).map_err(|_| corrupt(&row.id, what));
    Ok(Rollout {
        profile: ProfileName::parse(&row.profile).map_err(|_| corrupt(&row.id, "profile"))?,
        version: row.version,
        state: RolloutState::parse(&row.state).ok_or_else(|| corrupt(&row.id, "state"))?,
        plan: RolloutPlan {
            canary: count(row.canary, "canary")?,
            batch_size: count(row.batch_size, "batch size")?,
            watch_secs: count(row.watch_secs, "watch")?,
            confirm_secs: count(row.confirm_secs, "confirmation window")?,
            max_ban_rate_factor: row.max_ban_rate_factor,
        },
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
        finished_at: row.finished_at.map(to_time),
        reason: row.reason,
        stop_requested_by: row.stop_requested_by,
        hosts: Vec::new(),
        id: row.id,
    })
}

fn to_host(row: rollout_host::Model) -> Result<RolloutHost, StoreError> {
    let id = row.rollout_id.clone();
    let checks: Vec<Check> =
        serde_json::from_str(&row.checks).map_err(|_| corrupt(&id, "checks"))?;
    Ok(RolloutHost {
        server: ServerId::parse(&row.server_id).map_err(|_| corrupt(&id, "server id"))?,
        server_name: row.server_name,
        batch: u32::try_from(row.batch).map_err(|_| corrupt(&id, "batch"))?,
        position: u32::try_from(row.position).map_err(|_| corrupt(&id, "position"))?,
        state: HostState::parse(&row.state).ok_or_else(|| corrupt(&id, "host state"))?,
        checks,
        error: row.error,
        change_id: row.change_id,
        watch_started_at: row.watch_started_at.map(to_time),
        updated_at: to_time(row.updated_at),
    })
}

fn checks_json(checks: &[Check]) -> Result<String, StoreError> {
    serde_json::to_string(checks).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// What a host's state change writes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct HostUpdate<'a> {
    pub state: Option<HostState>,
    pub checks: Option<&'a [Check]>,
    /// `Some(None)` clears the error.
    pub error: Option<Option<&'a str>>,
    pub change_id: Option<&'a str>,
    pub watch_started_at: Option<DateTime<Utc>>,
}

/// The host states in which a running rollout, not the config-change service, settles the
/// host's change.
const HELD_STATES: [HostState; 3] = [
    HostState::Applying,
    HostState::Watching,
    HostState::RollingBack,
];

impl Store {
    /// Records a rollout and its hosts in one transaction; `false` (nothing stored) when another
    /// rollout of the same profile is running.
    pub async fn insert_rollout(&self, r: &Rollout) -> Result<bool, StoreError> {
        let tx = self.db.begin().await?;
        let inserted = rollout::ActiveModel {
            id: Set(r.id.clone()),
            profile: Set(r.profile.to_string()),
            version: Set(r.version),
            state: Set(r.state.as_str().to_owned()),
            canary: Set(i64::from(r.plan.canary)),
            batch_size: Set(i64::from(r.plan.batch_size)),
            watch_secs: Set(i64::from(r.plan.watch_secs)),
            confirm_secs: Set(i64::from(r.plan.confirm_secs)),
            max_ban_rate_factor: Set(r.plan.max_ban_rate_factor),
            created_by: Set(r.created_by.clone()),
            created_at: Set(r.created_at.timestamp_millis()),
            updated_at: Set(r.updated_at.timestamp_millis()),
            finished_at: Set(r.finished_at.map(|t| t.timestamp_millis())),
            reason: Set(r.reason.clone()),
            stop_requested_by: Set(None),
        }
        .insert(&tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        for host in &r.hosts {
            rollout_host::ActiveModel {
                rollout_id: Set(r.id.clone()),
                server_id: Set(host.server.to_string()),
                server_name: Set(host.server_name.clone()),
                position: Set(i64::from(host.position)),
                batch: Set(i64::from(host.batch)),
                state: Set(host.state.as_str().to_owned()),
                checks: Set(checks_json(&host.checks)?),
                error: Set(host.error.clone()),
                change_id: Set(host.change_id.clone()),
                watch_started_at: Set(host.watch_started_at.map(|t| t.timestamp_millis())),
                updated_at: Set(host.updated_at.timestamp_millis()),
            }
            .insert(&tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// One rollout with its hosts in rollout order.
    pub async fn rollout(&self, id: &str) -> Result<Option<Rollout>, StoreError> {
        let Some(row) = rollout::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let mut found = to_rollout(row)?;
        found.hosts = rollout_host::Entity::find()
            .filter(rollout_host::Column::RolloutId.eq(id))
            .order_by_asc(rollout_host::Column::Position)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_host)
            .collect::<Result<_, _>>()?;
        Ok(Some(found))
    }

    /// Rollouts without their hosts, newest first, at most `limit`.
    pub async fn rollouts(&self, limit: u64) -> Result<Vec<Rollout>, StoreError> {
        rollout::Entity::find()
            .order_by_desc(rollout::Column::CreatedAt)
            .order_by_desc(rollout::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_rollout)
            .collect()
    }

    /// The ids of the running rollouts, oldest first.
    pub async fn running_rollouts(&self) -> Result<Vec<String>, StoreError> {
        Ok(rollout::Entity::find()
            .filter(rollout::Column::State.eq(RolloutState::Running.as_str()))
            .order_by_asc(rollout::Column::CreatedAt)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    /// Ends a rollout (or records a new reason while it runs); `None` when there is no such
    /// rollout.
    pub async fn set_rollout_state(
        &self,
        id: &str,
        state: RolloutState,
        reason: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<Option<Rollout>, StoreError> {
        let Some(row) = rollout::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let mut active: rollout::ActiveModel = row.into();
        active.state = Set(state.as_str().to_owned());
        active.updated_at = Set(at.timestamp_millis());
        if let Some(reason) = reason {
            active.reason = Set(Some(reason.to_owned()));
        }
        if state != RolloutState::Running {
            active.finished_at = Set(Some(at.timestamp_millis()));
        }
        to_rollout(active.update(&self.db).await?).map(Some)
    }

    /// Records an operator's stop of a running rollout for the engine; `None` when there is no
    /// such rollout, `Some(false)` when it is not running.
    pub async fn request_rollout_stop(
        &self,
        id: &str,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        let updated = rollout::Entity::update_many()
            .col_expr(rollout::Column::StopRequestedBy, Expr::value(by))
            .col_expr(
                rollout::Column::UpdatedAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(rollout::Column::Id.eq(id))
            .filter(rollout::Column::State.eq(RolloutState::Running.as_str()))
            .exec(&self.db)
            .await?;
        if updated.rows_affected > 0 {
            return Ok(Some(true));
        }
        let exists = rollout::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .is_some();
        Ok(exists.then_some(false))
    }

    /// Moves one host of a rollout along.
    pub async fn update_rollout_host(
        &self,
        id: &str,
        server: ServerId,
        update: HostUpdate<'_>,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let Some(row) = rollout_host::Entity::find_by_id((id.to_owned(), server.to_string()))
            .one(&self.db)
            .await?
        else {
            return Err(corrupt(id, &format!("no host {server}")));
        };
        let mut active: rollout_host::ActiveModel = row.into();
        if let Some(state) = update.state {
            active.state = Set(state.as_str().to_owned());
        }
        if let Some(checks) = update.checks {
            active.checks = Set(checks_json(checks)?);
        }
        if let Some(error) = update.error {
            active.error = Set(error.map(str::to_owned));
        }
        if let Some(change) = update.change_id {
            active.change_id = Set(Some(change.to_owned()));
        }
        if let Some(started) = update.watch_started_at {
            active.watch_started_at = Set(Some(started.timestamp_millis()));
        }
        active.updated_at = Set(at.timestamp_millis());
        active.update(&self.db).await?;
        rollout::Entity::update_many()
            .col_expr(
                rollout::Column::UpdatedAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(rollout::Column::Id.eq(id))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// The config changes a rollout settles itself (its hosts applying, watched or rolling
    /// back), which the config-change service leaves alone.
    pub async fn rollout_held_changes(&self) -> Result<HashSet<String>, StoreError> {
        let states: Vec<&str> = HELD_STATES.iter().map(|s| s.as_str()).collect();
        Ok(rollout_host::Entity::find()
            .filter(rollout_host::Column::State.is_in(states))
            .filter(rollout_host::Column::ChangeId.is_not_null())
            .all(&self.db)
            .await?
            .into_iter()
            .filter_map(|h| h.change_id)
            .collect())
    }

    /// Ban events of `server` that occurred in `[from, to)`.
    pub async fn count_server_bans(
        &self,
        server: ServerId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(event::Entity::find()
            .filter(event::Column::ServerId.eq(server.to_string()))
            .filter(event::Column::Kind.eq("ban"))
            .filter(event::Column::OccurredAt.gte(from.timestamp_millis()))
            .filter(event::Column::OccurredAt.lt(to.timestamp_millis()))
            .count(&self.db)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        (dir, store)
    }

    fn rollout(id: &str, server: ServerId) -> Rollout {
        let now = Utc::now();
        Rollout {
            id: id.to_owned(),
            profile: ProfileName::parse("web").expect("name"),
            version: 2,
            state: RolloutState::Running,
            plan: RolloutPlan::default(),
            created_by: "admin".to_owned(),
            created_at: now,
            updated_at: now,
            finished_at: None,
            reason: None,
            stop_requested_by: None,
            hosts: vec![RolloutHost {
                server,
                server_name: "web-1".to_owned(),
                batch: 0,
                position: 0,
                state: HostState::Pending,
                checks: Vec::new(),
                error: None,
                change_id: None,
                watch_started_at: None,
                updated_at: now,
            }],
        }
    }

    #[tokio::test]
    async fn one_rollout_of_a_profile_runs_and_its_held_changes_and_stop_are_kept() {
        let (_dir, store) = store().await;
        let server = ServerId::new();
        assert!(
            store
                .insert_rollout(&rollout("r1", server))
                .await
                .expect("insert")
        );
        assert!(
            !store
                .insert_rollout(&rollout("r2", server))
                .await
                .expect("second")
        );
        assert_eq!(store.running_rollouts().await.expect("running"), ["r1"]);

        let update = HostUpdate {
            state: Some(HostState::Watching),
            change_id: Some("c1"),
            ..HostUpdate::default()
        };
        store
            .update_rollout_host("r1", server, update, Utc::now())
            .await
            .expect("update");
        let held = store.rollout_held_changes().await.expect("held");
        assert!(held.contains("c1"), "{held:?}");
        let read = store.rollout("r1").await.expect("read").expect("found");
        assert_eq!(read.hosts[0].state, HostState::Watching);
        assert_eq!(read.hosts[0].change_id.as_deref(), Some("c1"));

        assert_eq!(
            store
                .request_rollout_stop("r1", "admin", Utc::now())
                .await
                .expect("stop"),
            Some(true)
        );
        assert_eq!(
            store
                .rollout("r1")
                .await
                .expect("read")
                .expect("found")
                .stop_requested_by
                .as_deref(),
            Some("admin")
        );
        store
            .set_rollout_state(
                "r1",
                RolloutState::Stopped,
                Some("stopped by admin"),
                Utc::now(),
            )
            .await
            .expect("end");
        assert_eq!(
            store
                .request_rollout_stop("r1", "admin", Utc::now())
                .await
                .expect("stop"),
            Some(false)
        );
        assert_eq!(
            store
                .request_rollout_stop("nope", "admin", Utc::now())
                .await
                .expect("stop"),
            None
        );
        // Once it ended, another rollout of the profile may run.
        assert!(
            store
                .insert_rollout(&rollout("r3", server))
                .await
                .expect("third")
        );
        let listed: Vec<String> = store
            .rollouts(10)
            .await
            .expect("list")
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
    }
}
