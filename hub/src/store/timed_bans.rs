//! Timed bans: the durable schedule of bans the hub lifts at their time. Recorded before the ban
//! is sent, read back by the lifter when due, settled once lifted. Through sea-orm's entities:
//! single rows by key and simple filtered updates.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
    TransactionTrait,
};

use super::entities::timed_ban;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;

/// Where a timed ban is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum TimedBanState {
    /// Banned; the hub lifts it at its end.
    Active,
    /// The hub lifted it.
    Lifted,
    /// Lifting it failed for a reason that trying again does not fix (the server was deleted,
    /// the jail is gone).
    Failed,
    /// An unban of the same address in the same jail came first.
    Cancelled,
    /// A later ban of the same address in the same jail took its place.
    Replaced,
}

impl TimedBanState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Lifted => "lifted",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Replaced => "replaced",
        }
    }

    fn parse(raw: &str) -> Result<Self, StoreError> {
        Ok(match raw {
            "active" => Self::Active,
            "lifted" => Self::Lifted,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            "replaced" => Self::Replaced,
            other => return Err(StoreError::Corrupt(format!("timed ban state {other:?}"))),
        })
    }
}

/// One timed ban as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedBan {
    pub id: String,
    pub server: ServerId,
    pub jail: String,
    pub ip: String,
    pub ends_at: DateTime<Utc>,
    pub state: TimedBanState,
    pub fleet_action_id: Option<String>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub attempts: u64,
    pub error: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Which timed bans a listing shows.
#[derive(Debug, Clone, Default)]
pub struct TimedBanFilter {
    pub server: Option<ServerId>,
    pub jail: Option<String>,
    pub ip: Option<String>,
    /// Only the active ones.
    pub active_only: bool,
    pub limit: u64,
}

fn to_timed_ban(row: timed_ban::Model) -> Result<TimedBan, StoreError> {
    Ok(TimedBan {
        server: ServerId::parse(&row.server_id)
            .map_err(|_| StoreError::Corrupt(format!("timed ban {}: server id", row.id)))?,
        state: TimedBanState::parse(&row.state)?,
        ends_at: to_time(row.ends_at),
        created_at: to_time(row.created_at),
        attempts: u64::try_from(row.attempts).unwrap_or(0),
        finished_at: row.finished_at.map(to_time),
        id: row.id,
        jail: row.jail,
        ip: row.ip,
        fleet_action_id: row.fleet_action_id,
        requested_by: row.requested_by,
        error: row.error,
    })
}

impl Store {
    /// Records timed bans, each replacing the active one of its server, jail and address.
    pub async fn insert_timed_bans(&self, bans: &[TimedBan]) -> Result<(), StoreError> {
        let txn = self.db.begin().await?;
        let now = Utc::now().timestamp_millis();
        for ban in bans {
            timed_ban::Entity::update_many()
                .col_expr(
                    timed_ban::Column::State,
                    Expr::value(TimedBanState::Replaced.as_str()),
                )
                .col_expr(timed_ban::Column::FinishedAt, Expr::value(now))
                .filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()))
                .filter(timed_ban::Column::ServerId.eq(ban.server.to_string()))
                .filter(timed_ban::Column::Jail.eq(ban.jail.clone()))
                .filter(timed_ban::Column::Ip.eq(ban.ip.clone()))
                .exec(&txn)
                .await?;
            timed_ban::ActiveModel {
                id: Set(ban.id.clone()),
                server_id: Set(ban.server.to_string()),
                jail: Set(ban.jail.clone()),
                ip: Set(ban.ip.clone()),
                ends_at: Set(ban.ends_at.timestamp_millis()),
                state: Set(ban.state.as_str().to_owned()),
                fleet_action_id: Set(ban.fleet_action_id.clone()),
                requested_by: Set(ban.requested_by.clone()),
                created_at: Set(ban.created_at.timestamp_millis()),
                next_try_at: Set(ban.ends_at.timestamp_millis()),
                attempts: Set(0),
                error: Set(None),
                finished_at: Set(None),
            }
            .insert(&txn)
            .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Ties timed bans recorded before their fleet action to it.
    pub async fn link_timed_bans(&self, ids: &[String], action_id: &str) -> Result<(), StoreError> {
        timed_ban::Entity::update_many()
            .col_expr(
                timed_ban::Column::FleetActionId,
                Expr::value(action_id.to_owned()),
            )
            .filter(timed_ban::Column::Id.is_in(ids.iter().cloned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Forgets timed bans whose ban was never sent.
    pub async fn delete_timed_bans(&self, ids: &[String]) -> Result<(), StoreError> {
        timed_ban::Entity::delete_many()
            .filter(timed_ban::Column::Id.is_in(ids.iter().cloned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Cancels the active timed bans of an address on these servers, in one jail or (`None`) in
    /// every jail; returns how many.
    pub async fn cancel_timed_bans(
        &self,
        servers: &[ServerId],
        jail: Option<&str>,
        ip: &str,
    ) -> Result<u64, StoreError> {
        let mut update = timed_ban::Entity::update_many()
            .col_expr(
                timed_ban::Column::State,
                Expr::value(TimedBanState::Cancelled.as_str()),
            )
            .col_expr(
                timed_ban::Column::FinishedAt,
                Expr::value(Utc::now().timestamp_millis()),
            )
            .filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()))
            .filter(timed_ban::Column::Ip.eq(ip.to_owned()))
            .filter(timed_ban::Column::ServerId.is_in(servers.iter().map(ToString::to_string)));
        if let Some(jail) = jail {
            update = update.filter(timed_ban::Column::Jail.eq(jail.to_owned()));
        }
        Ok(update.exec(&self.db).await?.rows_affected)
    }

    /// Active timed bans whose next attempt is due at `now`, earliest first.
    pub async fn due_timed_bans(
        &self,
        now: DateTime<Utc>,
        limit: u64,
    ) -> Result<Vec<TimedBan>, StoreError> {
        timed_ban::Entity::find()
            .filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()))
            .filter(timed_ban::Column::NextTryAt.lte(now.timestamp_millis()))
            .order_by_asc(timed_ban::Column::NextTryAt)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_timed_ban)
            .collect()
    }

    /// Settles an active timed ban (lifted or failed); `false` when it was no longer active.
    pub async fn finish_timed_ban(
        &self,
        id: &str,
        state: TimedBanState,
        error: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = timed_ban::Entity::update_many()
            .col_expr(timed_ban::Column::State, Expr::value(state.as_str()))
            .col_expr(
                timed_ban::Column::Error,
                Expr::value(error.map(str::to_owned)),
            )
            .col_expr(
                timed_ban::Column::FinishedAt,
                Expr::value(at.timestamp_millis()),
            )
            .col_expr(
                timed_ban::Column::Attempts,
                Expr::col(timed_ban::Column::Attempts).add(1),
            )
            .filter(timed_ban::Column::Id.eq(id.to_owned()))
            .filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()))
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Puts off the next attempt of an active timed ban after a failure worth trying again.
    pub async fn retry_timed_ban(
        &self,
        id: &str,
        next_try_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        timed_ban::Entity::update_many()
            .col_expr(
                timed_ban::Column::NextTryAt,
                Expr::value(next_try_at.timestamp_millis()),
            )
            .col_expr(timed_ban::Column::Error, Expr::value(error.to_owned()))
            .col_expr(
                timed_ban::Column::Attempts,
                Expr::col(timed_ban::Column::Attempts).add(1),
            )
            .filter(timed_ban::Column::Id.eq(id.to_owned()))
            .filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Timed bans matching the filter, those ending first first.
    pub async fn timed_bans(&self, filter: &TimedBanFilter) -> Result<Vec<TimedBan>, StoreError> {
        let mut select = timed_ban::Entity::find();
        if let Some(server) = filter.server {
            select = select.filter(timed_ban::Column::ServerId.eq(server.to_string()));
        }
        if let Some(jail) = &filter.jail {
            select = select.filter(timed_ban::Column::Jail.eq(jail.clone()));
        }
        if let Some(ip) = &filter.ip {
            select = select.filter(timed_ban::Column::Ip.eq(ip.clone()));
        }
        if filter.active_only {
            select = select.filter(timed_ban::Column::State.eq(TimedBanState::Active.as_str()));
        }
        select
            .order_by_asc(timed_ban::Column::EndsAt)
            .limit(filter.limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_timed_ban)
            .collect()
    }

    /// When the timed bans of these fleet actions end, by action.
    pub async fn timed_ban_ends(
        &self,
        action_ids: &[String],
    ) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
        if action_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = timed_ban::Entity::find()
            .filter(timed_ban::Column::FleetActionId.is_in(action_ids.iter().cloned()))
            .all(&self.db)
            .await?;
        let mut ends = HashMap::new();
        for row in rows {
            if let Some(action) = row.fleet_action_id {
                let end = to_time(row.ends_at);
                ends.entry(action)
                    .and_modify(|e: &mut DateTime<Utc>| *e = Ord::max(*e, end))
                    .or_insert(end);
            }
        }
        Ok(ends)
    }
}
