//! Fleet actions: a ban or unban over the servers a selector chose, with one target row per server
//! that the holder of its agent's session claims, runs and settles. Hand-written SQL built with
//! the store's SQL builder (`sql::Sql`) and run on sea-orm's pool, like `cluster`'s: multi-row
//! inserts, conditional state changes and joins that sea-orm's entities do not express.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Value};

use super::cluster::{get, server_id, to_u64};
use super::sql::Sql;
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::ServerId;

/// Where one server is in a fleet action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum TargetState {
    /// Waiting for the agent (offline, or not yet sent).
    Queued,
    /// Sent to the agent; no answer yet.
    Delivered,
    /// The agent carried it out.
    Done,
    /// The agent (or fail2ban) refused it.
    Failed,
    /// The agent did not come back before the deadline.
    Expired,
}

impl TargetState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Delivered => "delivered",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }

    fn parse(raw: &str) -> Result<Self, StoreError> {
        Ok(match raw {
            "queued" => Self::Queued,
            "delivered" => Self::Delivered,
            "done" => Self::Done,
            "failed" => Self::Failed,
            "expired" => Self::Expired,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "fleet action target state {other:?}"
                )));
            }
        })
    }
}

/// A fleet action to record, with the servers it applies to.
#[derive(Debug, Clone)]
pub struct NewFleetAction {
    pub id: String,
    pub ban: bool,
    pub ip: String,
    pub jail: Option<String>,
    /// JSON of what was asked for.
    pub selector: String,
    pub requested_by: String,
    pub deadline: DateTime<Utc>,
    /// Server, its name, and the command id used for it.
    pub targets: Vec<(ServerId, String, String)>,
}

/// One server of a fleet action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetRecord {
    pub server_id: ServerId,
    pub server_name: String,
    pub state: TargetState,
    pub command_id: String,
    pub changed: Option<bool>,
    pub jails: Vec<String>,
    pub error: Option<String>,
    pub attempts: u64,
    pub updated_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A fleet action as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetActionRecord {
    pub id: String,
    pub ban: bool,
    pub ip: String,
    pub jail: Option<String>,
    pub selector: String,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub deadline: DateTime<Utc>,
    /// Every target (for one action), or none (in listings, which carry `counts`).
    pub targets: Vec<TargetRecord>,
    /// Targets per state.
    pub counts: BTreeMap<&'static str, u64>,
}

/// A target that is due for delivery, with what to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetWork {
    pub action_id: String,
    pub server: ServerId,
    pub command_id: String,
    pub ban: bool,
    pub ip: String,
    pub jail: Option<String>,
    pub requested_by: String,
    pub deadline: DateTime<Utc>,
}

/// How a delivered target ended.
#[derive(Debug, Clone)]
pub enum TargetOutcome {
    Done { changed: bool, jails: Vec<String> },
    Failed(String),
}

impl Store {
    /// Records a fleet action with every target queued.
    pub async fn create_fleet_action(&self, action: &NewFleetAction) -> Result<(), StoreError> {
        use sea_orm::TransactionTrait as _;
        let now = now_ms();
        let backend = self.backend();
        let deadline = action.deadline.timestamp_millis();
        let txn = self.db.begin().await?;
        let mut insert = Sql::new(
            backend,
            "INSERT INTO fleet_actions (id, kind, ip, jail, selector, requested_by, created_at, deadline) \
             VALUES ",
        );
        insert.tuple([
            action.id.clone().into(),
            if action.ban { "ban" } else { "unban" }.into(),
            action.ip.clone().into(),
            action.jail.clone().into(),
            action.selector.clone().into(),
            action.requested_by.clone().into(),
            now.into(),
            deadline.into(),
        ]);
        txn.execute_raw(insert.build()).await?;
        for chunk in action.targets.chunks(500) {
            let mut sql = Sql::new(
                backend,
                "INSERT INTO fleet_action_targets (action_id, server_id, server_name, state, \
                 command_id, deadline, attempts, updated_at) VALUES ",
            );
            for (i, (server, name, command_id)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(action.id.clone())
                    .push(", ")
                    .bind(server.to_string())
                    .push(", ")
                    .bind(name.clone())
                    .push(", 'queued', ")
                    .bind(command_id.clone())
                    .push(", ")
                    .bind(deadline)
                    .push(", 0, ")
                    .bind(now)
                    .push(")");
            }
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Marks a queued target delivered; false when it is not queued any more (somebody else
    /// delivers it, or it expired) or its deadline passed.
    pub async fn claim_target(&self, action: &str, server: ServerId) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut sql = self.sql(
            "UPDATE fleet_action_targets SET state = 'delivered', attempts = attempts + 1, \
             updated_at = ",
        );
        sql.bind(now)
            .push(", delivered_at = ")
            .bind(now)
            .push(" WHERE action_id = ")
            .bind(action)
            .push(" AND server_id = ")
            .bind(server.to_string())
            .push(" AND state = 'queued' AND deadline > ")
            .bind(now);
        Ok(self.exec(sql).await? == 1)
    }

    /// Marks every queued target of `action` delivered at once (its first delivery); returns how
    /// many.
    pub async fn claim_all_targets(&self, action: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        let mut sql = self.sql(
            "UPDATE fleet_action_targets SET state = 'delivered', attempts = attempts + 1, \
             updated_at = ",
        );
        sql.bind(now)
            .push(", delivered_at = ")
            .bind(now)
            .push(" WHERE action_id = ")
            .bind(action)
            .push(" AND state = 'queued' AND deadline > ")
            .bind(now);
        self.exec(sql).await
    }

    /// Records how many delivered targets of one action ended, in one transaction: `None` puts a
    /// target back in the queue.
    pub async fn settle_targets(
        &self,
        action: &str,
        outcomes: &[(ServerId, Option<TargetOutcome>)],
    ) -> Result<(), StoreError> {
        use sea_orm::TransactionTrait as _;
        let backend = self.backend();
        let txn = self.db.begin().await?;
        for (server, outcome) in outcomes {
            let sql = match outcome {
                Some(outcome) => finish_statement(backend, action, *server, outcome)?,
                None => requeue_statement(backend, action, *server),
            };
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Puts a delivered target back in the queue (the agent went away before answering).
    pub async fn requeue_target(&self, action: &str, server: ServerId) -> Result<(), StoreError> {
        self.exec(requeue_statement(self.backend(), action, server))
            .await?;
        Ok(())
    }

    /// Records how a delivered target ended.
    pub async fn finish_target(
        &self,
        action: &str,
        server: ServerId,
        outcome: &TargetOutcome,
    ) -> Result<(), StoreError> {
        self.exec(finish_statement(self.backend(), action, server, outcome)?)
            .await?;
        Ok(())
    }

    /// Queued targets whose deadline has not passed, for `server` only or for every server.
    pub async fn due_targets(
        &self,
        server: Option<ServerId>,
    ) -> Result<Vec<TargetWork>, StoreError> {
        let mut sql = self.sql(
            "SELECT t.action_id, t.server_id, t.command_id, a.kind, a.ip, a.jail, a.requested_by, t.deadline \
             FROM fleet_action_targets t JOIN fleet_actions a ON a.id = t.action_id \
             WHERE t.state = 'queued' AND t.deadline > ",
        );
        sql.bind(now_ms());
        if let Some(server) = server {
            sql.push(" AND t.server_id = ").bind(server.to_string());
        }
        sql.push(" ORDER BY a.created_at, t.action_id");
        self.rows(sql)
            .await?
            .iter()
            .map(|row| {
                Ok(TargetWork {
                    action_id: get(row, 0)?,
                    server: server_id(&get::<String>(row, 1)?)?,
                    command_id: get(row, 2)?,
                    ban: get::<String>(row, 3)? == "ban",
                    ip: get(row, 4)?,
                    jail: get(row, 5)?,
                    requested_by: get(row, 6)?,
                    deadline: to_time(get(row, 7)?),
                })
            })
            .collect()
    }

    /// Marks queued targets past their deadline expired; returns how many.
    pub async fn expire_targets(&self) -> Result<u64, StoreError> {
        let now = now_ms();
        let mut sql = self.sql("UPDATE fleet_action_targets SET state = 'expired', updated_at = ");
        sql.bind(now)
            .push(", finished_at = ")
            .bind(now)
            .push(" WHERE state = 'queued' AND deadline <= ")
            .bind(now);
        self.exec(sql).await
    }

    /// One fleet action with all its targets.
    pub async fn fleet_action(&self, id: &str) -> Result<Option<FleetActionRecord>, StoreError> {
        let mut sql = self.sql(ACTION_SELECT);
        sql.push(" WHERE a.id = ").bind(id);
        let Some(mut action) = self
            .rows(sql)
            .await?
            .iter()
            .map(to_action)
            .next()
            .transpose()?
        else {
            return Ok(None);
        };
        let mut sql = self.sql(
            "SELECT server_id, server_name, state, command_id, changed, jails, error, attempts, \
               updated_at, delivered_at, finished_at \
             FROM fleet_action_targets WHERE action_id = ",
        );
        sql.bind(id).push(" ORDER BY server_name");
        action.targets = self
            .rows(sql)
            .await?
            .iter()
            .map(to_target)
            .collect::<Result<_, _>>()?;
        for target in &action.targets {
            *action.counts.entry(target.state.as_str()).or_default() += 1;
        }
        Ok(Some(action))
    }

    /// Fleet actions newest first, with counts per state, created before `before` (an action id).
    pub async fn list_fleet_actions(
        &self,
        limit: u64,
        before: Option<&str>,
    ) -> Result<Vec<FleetActionRecord>, StoreError> {
        let mut sql = self.sql(ACTION_SELECT);
        if let Some(before) = before {
            sql.push(
                " WHERE (a.created_at, a.id) < (SELECT b.created_at, b.id FROM fleet_actions b WHERE b.id = ",
            )
            .bind(before)
            .push(")");
        }
        sql.push(" ORDER BY a.created_at DESC, a.id DESC LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut actions: Vec<FleetActionRecord> = self
            .rows(sql)
            .await?
            .iter()
            .map(to_action)
            .collect::<Result<_, _>>()?;
        if actions.is_empty() {
            return Ok(actions);
        }
        let mut sql = self
            .sql("SELECT action_id, state, COUNT(*) FROM fleet_action_targets WHERE action_id IN ");
        sql.tuple(actions.iter().map(|a| Value::from(a.id.clone())))
            .push(" GROUP BY action_id, state");
        let counts = self.rows(sql).await?;
        for row in &counts {
            let id: String = get(row, 0)?;
            let state = TargetState::parse(&get::<String>(row, 1)?)?;
            if let Some(action) = actions.iter_mut().find(|a| a.id == id) {
                action.counts.insert(state.as_str(), to_u64(get(row, 2)?));
            }
        }
        Ok(actions)
    }
}

fn requeue_statement(backend: DbBackend, action: &str, server: ServerId) -> Sql {
    let mut sql = Sql::new(
        backend,
        "UPDATE fleet_action_targets SET state = 'queued', updated_at = ",
    );
    sql.bind(now_ms())
        .push(" WHERE action_id = ")
        .bind(action)
        .push(" AND server_id = ")
        .bind(server.to_string())
        .push(" AND state = 'delivered'");
    sql
}

fn finish_statement(
    backend: DbBackend,
    action: &str,
    server: ServerId,
    outcome: &TargetOutcome,
) -> Result<Sql, StoreError> {
    let (state, changed, jails, error): (&str, Option<bool>, Option<String>, Option<String>) =
        match outcome {
            TargetOutcome::Done { changed, jails } => (
                "done",
                Some(*changed),
                Some(serde_json::to_string(jails).map_err(|e| StoreError::Corrupt(e.to_string()))?),
                None,
            ),
            TargetOutcome::Failed(why) => ("failed", None, None, Some(why.clone())),
        };
    let now = now_ms();
    let mut sql = Sql::new(backend, "UPDATE fleet_action_targets SET state = ");
    sql.bind(state)
        .push(", changed = ")
        .bind(changed)
        .push(", jails = ")
        .bind(jails)
        .push(", error = ")
        .bind(error)
        .push(", updated_at = ")
        .bind(now)
        .push(", finished_at = ")
        .bind(now)
        .push(" WHERE action_id = ")
        .bind(action)
        .push(" AND server_id = ")
        .bind(server.to_string())
        .push(" AND state IN ('queued', 'delivered')");
    Ok(sql)
}

const ACTION_SELECT: &str = "SELECT a.id, a.kind, a.ip, a.jail, a.selector, a.requested_by, \
    a.created_at, a.deadline FROM fleet_actions a";

fn to_action(row: &QueryResult) -> Result<FleetActionRecord, StoreError> {
    Ok(FleetActionRecord {
        id: get(row, 0)?,
        ban: get::<String>(row, 1)? == "ban",
        ip: get(row, 2)?,
        jail: get(row, 3)?,
        selector: get(row, 4)?,
        requested_by: get(row, 5)?,
        created_at: to_time(get(row, 6)?),
        deadline: to_time(get(row, 7)?),
        targets: Vec::new(),
        counts: BTreeMap::new(),
    })
}

fn to_target(row: &QueryResult) -> Result<TargetRecord, StoreError> {
    let jails: Option<String> = get(row, 5)?;
    Ok(TargetRecord {
        server_id: server_id(&get::<String>(row, 0)?)?,
        server_name: get(row, 1)?,
        state: TargetState::parse(&get::<String>(row, 2)?)?,
        command_id: get(row, 3)?,
        changed: get(row, 4)?,
        jails: match jails {
            Some(text) => serde_json::from_str(&text)
                .map_err(|_| StoreError::Corrupt("fleet action target jails".to_owned()))?,
            None => Vec::new(),
        },
        error: get(row, 6)?,
        attempts: to_u64(get(row, 7)?),
        updated_at: to_time(get(row, 8)?),
        delivered_at: get::<Option<i64>>(row, 9)?.map(to_time),
        finished_at: get::<Option<i64>>(row, 10)?.map(to_time),
    })
}
