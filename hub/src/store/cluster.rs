//! The store side of hub replicas and fleet-wide actions: agent leases, replica heartbeats, commands
//! relayed between replicas, singleton-job bookkeeping, shared settings, `LISTEN/NOTIFY` and advisory
//! locks (PostgreSQL only), server labels, and fleet actions with their per-server targets.
//!
//! Statements are hand-written SQL with `$n` placeholders, which PostgreSQL and (through sqlx) SQLite
//! both accept. Everything that only makes sense with several replicas is only called on PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sqlx;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, QueryResult, RuntimeErr, Statement, Value};

use super::{Store, StoreError, now_ms, to_server, to_time};
use crate::domain::{AgentId, Labels, Server, ServerId};

/// What taking a server's lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The lease's new generation; a holder with a lower one has been replaced.
    pub generation: i64,
    /// Another replica that held a lease which had not expired yet.
    pub previous: Option<String>,
}

/// A server's lease: the replica holding its agent's session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub server: ServerId,
    pub agent: Option<AgentId>,
    pub replica: String,
    pub generation: i64,
    pub connected_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A replica as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Servers whose lease it holds (not expired).
    pub agents: u64,
}

/// How often one replica led and ran one singleton job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRuns {
    pub name: String,
    pub replica: String,
    /// Times it became the job's leader.
    pub terms: u64,
    /// Passes it reported (jobs that report them).
    pub runs: u64,
    pub first_run_at: DateTime<Utc>,
    pub last_run_at: DateTime<Utc>,
}

/// What a singleton job reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// This replica became the job's leader.
    Leads,
    /// One pass of the job ran.
    Pass,
}

/// A relayed command claimed by the replica that holds the agent.
#[derive(Debug, Clone)]
pub struct ClaimedCommand {
    pub server: ServerId,
    /// The encoded protocol command.
    pub command: Vec<u8>,
    pub deadline_ms: i64,
}

/// The answer to a relayed command, as the holding replica wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayedOutcome {
    /// The encoded protocol result.
    Answered(Vec<u8>),
    /// Why there is no answer (`offline`, `timeout`, `session_ended`, `undecodable`).
    Failed(String),
}

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

/// A notification received on a channel this replica listens to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Message {
        channel: String,
        payload: String,
    },
    /// The listening connection was lost and is back: notifications sent in between are gone.
    Reconnected,
}

/// A `LISTEN` connection (PostgreSQL).
pub struct Listener {
    inner: sqlx::postgres::PgListener,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Listener {
    /// The next notification; `Notice::Reconnected` after the connection was lost and restored.
    pub async fn recv(&mut self) -> Result<Notice, StoreError> {
        match self.inner.try_recv().await.map_err(sqlx_err)? {
            Some(n) => Ok(Notice::Message {
                channel: n.channel().to_owned(),
                payload: n.payload().to_owned(),
            }),
            None => Ok(Notice::Reconnected),
        }
    }
}

/// A dedicated database connection holding session-level advisory locks (PostgreSQL). The locks
/// go when the connection does, so a replica that dies releases its jobs at once.
pub struct LockConnection {
    conn: sqlx::PgConnection,
}

impl std::fmt::Debug for LockConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockConnection").finish_non_exhaustive()
    }
}

impl LockConnection {
    /// `pg_try_advisory_lock(key)`: whether this connection holds the lock now.
    pub async fn try_lock(&mut self, key: i64) -> Result<bool, StoreError> {
        sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut self.conn)
            .await
            .map_err(sqlx_err)
    }

    /// Whether the connection (and so every lock it holds) is still alive.
    pub async fn alive(&mut self) -> bool {
        sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&mut self.conn)
            .await
            .is_ok()
    }
}

fn sqlx_err(e: sqlx::Error) -> StoreError {
    StoreError::Db(DbErr::Conn(RuntimeErr::SqlxError(Arc::new(e))))
}

fn get<T: sea_orm::TryGetable>(row: &QueryResult, index: usize) -> Result<T, StoreError> {
    row.try_get_by_index(index).map_err(StoreError::from)
}

fn server_id(raw: &str) -> Result<ServerId, StoreError> {
    ServerId::parse(raw).map_err(|_| StoreError::Corrupt(format!("server id {raw:?}")))
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl Store {
    fn stmt(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.db.get_database_backend(), sql, values)
    }

    async fn exec(&self, sql: &str, values: Vec<Value>) -> Result<u64, StoreError> {
        Ok(self
            .db
            .execute_raw(self.stmt(sql, values))
            .await?
            .rows_affected())
    }

    async fn rows(&self, sql: &str, values: Vec<Value>) -> Result<Vec<QueryResult>, StoreError> {
        Ok(self.db.query_all_raw(self.stmt(sql, values)).await?)
    }

    /// Whether several replicas can share this database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.db.get_database_backend() == DbBackend::Postgres
    }

    // ----- replicas and leases -----

    /// Records that `replica` is alive.
    pub async fn replica_heartbeat(
        &self,
        replica: &str,
        started_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO hub_replicas (replica_id, started_at, heartbeat_at) VALUES ($1, $2, $3) \
             ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, \
             started_at = excluded.started_at",
            vec![
                replica.into(),
                started_at.timestamp_millis().into(),
                now_ms().into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Every replica seen within `window_ms`, with the agents it holds.
    pub async fn replicas(&self, window_ms: i64) -> Result<Vec<ReplicaRow>, StoreError> {
        let now = now_ms();
        self.rows(
            "SELECT r.replica_id, r.started_at, r.heartbeat_at, \
               (SELECT COUNT(*) FROM agent_leases l WHERE l.replica_id = r.replica_id AND l.expires_at > $1) \
             FROM hub_replicas r WHERE r.heartbeat_at > $2 ORDER BY r.replica_id",
            vec![now.into(), (now - window_ms).into()],
        )
        .await?
        .iter()
        .map(|row| {
            Ok(ReplicaRow {
                id: get(row, 0)?,
                started_at: to_time(get(row, 1)?),
                heartbeat_at: to_time(get(row, 2)?),
                agents: to_u64(get(row, 3)?),
            })
        })
        .collect()
    }

    /// Removes the leases `replica` held in an earlier life (same replica id, restarted).
    pub async fn clear_leases_of(&self, replica: &str) -> Result<u64, StoreError> {
        self.exec(
            "DELETE FROM agent_leases WHERE replica_id = $1",
            vec![replica.into()],
        )
        .await
    }

    /// Takes the lease of `server` for `replica`, whoever held it: the newest session wins.
    pub async fn acquire_lease(
        &self,
        server: ServerId,
        agent: AgentId,
        replica: &str,
        ttl_ms: i64,
    ) -> Result<LeaseGrant, StoreError> {
        use sea_orm::TransactionTrait as _;
        let now = now_ms();
        let txn = self.db.begin().await?;
        let backend = self.db.get_database_backend();
        // The old holder is read under a row lock, so two sessions of one server starting on two
        // replicas at once are ordered: the second sees the first as the holder it replaces.
        // (Leases are only used on PostgreSQL; SQLite has one hub.)
        let previous = txn
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                match backend {
                    DbBackend::Postgres => {
                        "SELECT replica_id, expires_at FROM agent_leases WHERE server_id = $1 FOR UPDATE"
                    }
                    _ => "SELECT replica_id, expires_at FROM agent_leases WHERE server_id = $1",
                },
                vec![server.to_string().into()],
            ))
            .await?
            .map(|row| Ok::<_, StoreError>((get::<String>(&row, 0)?, get::<i64>(&row, 1)?)))
            .transpose()?;
        let generation: i64 = match txn
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                "INSERT INTO agent_leases (server_id, agent_id, replica_id, generation, connected_at, expires_at) \
                 VALUES ($1, $2, $3, 1, $4, $5) \
                 ON CONFLICT (server_id) DO UPDATE SET agent_id = excluded.agent_id, \
                   replica_id = excluded.replica_id, generation = agent_leases.generation + 1, \
                   connected_at = excluded.connected_at, expires_at = excluded.expires_at \
                 RETURNING generation",
                vec![
                    server.to_string().into(),
                    agent.to_string().into(),
                    replica.into(),
                    now.into(),
                    (now + ttl_ms).into(),
                ],
            ))
            .await?
        {
            Some(row) => get(&row, 0)?,
            None => return Err(StoreError::Corrupt("the lease upsert returned nothing".into())),
        };
        txn.commit().await?;
        Ok(LeaseGrant {
            generation,
            previous: previous
                .filter(|(holder, expires)| holder != replica && *expires > now)
                .map(|(holder, _)| holder),
        })
    }

    /// Extends every lease `replica` holds; returns how many.
    pub async fn renew_leases(&self, replica: &str, ttl_ms: i64) -> Result<u64, StoreError> {
        self.exec(
            "UPDATE agent_leases SET expires_at = $1 WHERE replica_id = $2",
            vec![(now_ms() + ttl_ms).into(), replica.into()],
        )
        .await
    }

    /// The leases `replica` holds, as server → generation.
    pub async fn leases_of(
        &self,
        replica: &str,
    ) -> Result<std::collections::HashMap<ServerId, i64>, StoreError> {
        self.rows(
            "SELECT server_id, generation FROM agent_leases WHERE replica_id = $1",
            vec![replica.into()],
        )
        .await?
        .iter()
        .map(|row| Ok((server_id(&get::<String>(row, 0)?)?, get(row, 1)?)))
        .collect()
    }

    /// Gives up the lease of `server` if `replica` still holds it at `generation`.
    pub async fn release_lease(
        &self,
        server: ServerId,
        replica: &str,
        generation: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .exec(
                "DELETE FROM agent_leases WHERE server_id = $1 AND replica_id = $2 AND generation = $3",
                vec![server.to_string().into(), replica.into(), generation.into()],
            )
            .await?
            == 1)
    }

    /// The lease of `server` if it has not expired.
    pub async fn lease(&self, server: ServerId) -> Result<Option<Lease>, StoreError> {
        self.rows(
            "SELECT server_id, agent_id, replica_id, generation, connected_at, expires_at \
                 FROM agent_leases WHERE server_id = $1 AND expires_at > $2",
            vec![server.to_string().into(), now_ms().into()],
        )
        .await?
        .iter()
        .map(to_lease)
        .next()
        .transpose()
    }

    /// Every lease that has not expired.
    pub async fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        self.rows(
            "SELECT server_id, agent_id, replica_id, generation, connected_at, expires_at \
             FROM agent_leases WHERE expires_at > $1",
            vec![now_ms().into()],
        )
        .await?
        .iter()
        .map(to_lease)
        .collect()
    }

    /// Deletes leases that expired more than `grace_ms` ago and replicas silent for as long.
    pub async fn purge_stale_cluster_rows(&self, grace_ms: i64) -> Result<u64, StoreError> {
        let before = now_ms() - grace_ms;
        let leases = self
            .exec(
                "DELETE FROM agent_leases WHERE expires_at < $1",
                vec![before.into()],
            )
            .await?;
        let replicas = self
            .exec(
                "DELETE FROM hub_replicas WHERE heartbeat_at < $1",
                vec![before.into()],
            )
            .await?;
        Ok(leases + replicas)
    }

    /// Deletes enrollment tokens that expired before `before_ms`, and revoked certificates that
    /// expired before it (the TLS handshake refuses an expired certificate by itself).
    pub async fn purge_expired_enrollment(&self, before_ms: i64) -> Result<u64, StoreError> {
        let tokens = self
            .exec(
                "DELETE FROM enrollment_tokens WHERE expires_at < $1",
                vec![before_ms.into()],
            )
            .await?;
        let certs = self
            .exec(
                "DELETE FROM agent_certs WHERE revoked_at IS NOT NULL AND not_after < $1",
                vec![before_ms.into()],
            )
            .await?;
        Ok(tokens + certs)
    }

    // ----- commands relayed between replicas -----

    /// Records a command for the replica `target` to run on its session of `server`.
    pub async fn insert_relayed_command(
        &self,
        id: &str,
        server: ServerId,
        origin: &str,
        target: &str,
        command: Vec<u8>,
        deadline_ms: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO cluster_commands (id, server_id, origin_replica, target_replica, command, \
               deadline, created_at, state) VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending')",
            vec![
                id.into(),
                server.to_string().into(),
                origin.into(),
                target.into(),
                command.into(),
                deadline_ms.into(),
                now_ms().into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Claims a pending command addressed to `replica`: only one claim succeeds. Returns it with the
    /// replica that asked.
    pub async fn claim_relayed_command(
        &self,
        id: &str,
        replica: &str,
    ) -> Result<Option<(ClaimedCommand, String)>, StoreError> {
        self.rows(
            "UPDATE cluster_commands SET state = 'running' \
             WHERE id = $1 AND target_replica = $2 AND state = 'pending' \
             RETURNING server_id, command, deadline, origin_replica",
            vec![id.into(), replica.into()],
        )
        .await?
        .iter()
        .map(|row| {
            Ok((
                ClaimedCommand {
                    server: server_id(&get::<String>(row, 0)?)?,
                    command: get(row, 1)?,
                    deadline_ms: get(row, 2)?,
                },
                get(row, 3)?,
            ))
        })
        .next()
        .transpose()
    }

    /// Ids of the pending commands addressed to `replica` (after notifications were lost).
    pub async fn pending_relayed_commands(&self, replica: &str) -> Result<Vec<String>, StoreError> {
        self.rows(
            "SELECT id FROM cluster_commands WHERE target_replica = $1 AND state = 'pending' \
             AND deadline > $2",
            vec![replica.into(), now_ms().into()],
        )
        .await?
        .iter()
        .map(|row| get(row, 0))
        .collect()
    }

    /// Writes the outcome of a relayed command. False when the asking replica gave up on it.
    pub async fn finish_relayed_command(
        &self,
        id: &str,
        outcome: RelayedOutcome,
    ) -> Result<bool, StoreError> {
        let (result, error): (Option<Vec<u8>>, Option<String>) = match outcome {
            RelayedOutcome::Answered(bytes) => (Some(bytes), None),
            RelayedOutcome::Failed(why) => (None, Some(why)),
        };
        Ok(self
            .exec(
                "UPDATE cluster_commands SET state = 'done', result = $2, error = $3 WHERE id = $1",
                vec![id.into(), result.into(), error.into()],
            )
            .await?
            == 1)
    }

    /// Takes (and deletes) the outcome of a relayed command once it is there.
    pub async fn take_relayed_outcome(
        &self,
        id: &str,
    ) -> Result<Option<RelayedOutcome>, StoreError> {
        self.rows(
            "DELETE FROM cluster_commands WHERE id = $1 AND state = 'done' RETURNING result, error",
            vec![id.into()],
        )
        .await?
        .iter()
        .map(|row| {
            let result: Option<Vec<u8>> = get(row, 0)?;
            let error: Option<String> = get(row, 1)?;
            Ok(match (result, error) {
                (Some(bytes), _) => RelayedOutcome::Answered(bytes),
                (None, why) => RelayedOutcome::Failed(why.unwrap_or_default()),
            })
        })
        .next()
        .transpose()
    }

    /// Forgets a relayed command (the asker gave up waiting).
    pub async fn delete_relayed_command(&self, id: &str) -> Result<(), StoreError> {
        self.exec(
            "DELETE FROM cluster_commands WHERE id = $1",
            vec![id.into()],
        )
        .await?;
        Ok(())
    }

    /// Deletes relayed commands created before `before_ms` (whatever their state).
    pub async fn purge_relayed_commands(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.exec(
            "DELETE FROM cluster_commands WHERE created_at < $1",
            vec![before_ms.into()],
        )
        .await
    }

    // ----- notifications and locks (PostgreSQL) -----

    /// `pg_notify(channel, payload)`: delivered to every listener after this statement commits.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        self.db
            .execute_raw(self.stmt(
                "SELECT pg_notify($1, $2)",
                vec![channel.into(), payload.into()],
            ))
            .await?;
        Ok(())
    }

    /// A connection listening on `channels`; `None` on SQLite, which has no notifications.
    pub async fn listen(&self, channels: &[String]) -> Result<Option<Listener>, StoreError> {
        if !self.is_shared() {
            return Ok(None);
        }
        let pool = self.db.get_postgres_connection_pool();
        let mut inner = sqlx::postgres::PgListener::connect_with(pool)
            .await
            .map_err(sqlx_err)?;
        // Closing the pool at shutdown must not hang on this connection.
        inner.ignore_pool_close_event(false);
        let names: Vec<&str> = channels.iter().map(String::as_str).collect();
        inner.listen_all(names).await.map_err(sqlx_err)?;
        Ok(Some(Listener { inner }))
    }

    /// A connection of its own for advisory locks; `None` on SQLite.
    pub async fn lock_connection(&self) -> Result<Option<LockConnection>, StoreError> {
        if !self.is_shared() {
            return Ok(None);
        }
        let pool = self.db.get_postgres_connection_pool();
        // Detached: the connection never goes back to the pool with a lock held.
        let conn = pool.acquire().await.map_err(sqlx_err)?.detach();
        Ok(Some(LockConnection { conn }))
    }

    // ----- singleton jobs and settings -----

    /// Counts, for job `name` on `replica`, a new term as its leader or one more pass.
    pub async fn record_job(
        &self,
        name: &str,
        replica: &str,
        event: JobEvent,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let (terms, runs) = match event {
            JobEvent::Leads => (1i64, 0i64),
            JobEvent::Pass => (0, 1),
        };
        self.exec(
            "INSERT INTO cluster_jobs (name, replica_id, terms, runs, first_run_at, last_run_at) \
             VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (name, replica_id) DO UPDATE SET \
             terms = cluster_jobs.terms + excluded.terms, runs = cluster_jobs.runs + excluded.runs, \
             last_run_at = excluded.last_run_at",
            vec![
                name.into(),
                replica.into(),
                terms.into(),
                runs.into(),
                now.into(),
            ],
        )
        .await?;
        Ok(())
    }

    /// Runs per job and replica.
    pub async fn job_runs(&self) -> Result<Vec<JobRuns>, StoreError> {
        self.rows(
            "SELECT name, replica_id, terms, runs, first_run_at, last_run_at FROM cluster_jobs \
             ORDER BY name, replica_id",
            vec![],
        )
        .await?
        .iter()
        .map(|row| {
            Ok(JobRuns {
                name: get(row, 0)?,
                replica: get(row, 1)?,
                terms: to_u64(get(row, 2)?),
                runs: to_u64(get(row, 3)?),
                first_run_at: to_time(get(row, 4)?),
                last_run_at: to_time(get(row, 5)?),
            })
        })
        .collect()
    }

    /// Stores `value` under `name` unless something is stored already; returns what is stored.
    pub async fn init_cluster_setting(
        &self,
        name: &str,
        value: &str,
    ) -> Result<String, StoreError> {
        self.exec(
            "INSERT INTO cluster_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            vec![name.into(), value.into()],
        )
        .await?;
        self.rows(
            "SELECT value FROM cluster_settings WHERE name = $1",
            vec![name.into()],
        )
        .await?
        .first()
        .map(|row| get(row, 0))
        .transpose()?
        .ok_or_else(|| StoreError::Corrupt(format!("cluster setting {name} vanished")))
    }

    /// Records that the agents of `servers` are alive now, in one statement.
    pub async fn mark_seen_many(&self, servers: &[ServerId]) -> Result<u64, StoreError> {
        if servers.is_empty() {
            return Ok(0);
        }
        let placeholders: Vec<String> = (2..servers.len() + 2).map(|i| format!("${i}")).collect();
        let mut values: Vec<Value> = vec![now_ms().into()];
        values.extend(servers.iter().map(|s| Value::from(s.to_string())));
        self.exec(
            &format!(
                "UPDATE servers SET last_seen_at = $1 WHERE id IN ({})",
                placeholders.join(", ")
            ),
            values,
        )
        .await
    }

    // ----- labels -----

    /// Replaces the labels of `server`; the updated server, or `None` if there is none.
    pub async fn set_server_labels(
        &self,
        server: ServerId,
        labels: &Labels,
    ) -> Result<Option<Server>, StoreError> {
        use sea_orm::EntityTrait as _;
        let json = serde_json::to_string(labels.as_map())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let changed = self
            .exec(
                "UPDATE servers SET labels = $1 WHERE id = $2",
                vec![json.into(), server.to_string().into()],
            )
            .await?;
        if changed == 0 {
            return Ok(None);
        }
        super::entities::server::Entity::find_by_id(server.to_string())
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    // ----- fleet actions -----

    /// Records a fleet action with every target queued.
    pub async fn create_fleet_action(&self, action: &NewFleetAction) -> Result<(), StoreError> {
        use sea_orm::TransactionTrait as _;
        let now = now_ms();
        let backend = self.db.get_database_backend();
        let deadline = action.deadline.timestamp_millis();
        let txn = self.db.begin().await?;
        txn.execute_raw(Statement::from_sql_and_values(
            backend,
            "INSERT INTO fleet_actions (id, kind, ip, jail, selector, requested_by, created_at, deadline) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            vec![
                action.id.clone().into(),
                if action.ban { "ban" } else { "unban" }.into(),
                action.ip.clone().into(),
                action.jail.clone().into(),
                action.selector.clone().into(),
                action.requested_by.clone().into(),
                now.into(),
                deadline.into(),
            ],
        ))
        .await?;
        for chunk in action.targets.chunks(500) {
            let mut sql = String::from(
                "INSERT INTO fleet_action_targets (action_id, server_id, server_name, state, \
                 command_id, deadline, attempts, updated_at) VALUES ",
            );
            let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 5);
            for (i, (server, name, command_id)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                let n = values.len();
                sql.push_str(&format!(
                    "(${}, ${}, ${}, 'queued', ${}, ${}, 0, ${})",
                    n + 1,
                    n + 2,
                    n + 3,
                    n + 4,
                    n + 5,
                    n + 6
                ));
                values.extend([
                    action.id.clone().into(),
                    server.to_string().into(),
                    name.clone().into(),
                    command_id.clone().into(),
                    deadline.into(),
                    now.into(),
                ]);
            }
            txn.execute_raw(Statement::from_sql_and_values(backend, sql, values))
                .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Marks a queued target delivered; false when it is not queued any more (somebody else
    /// delivers it, or it expired) or its deadline passed.
    pub async fn claim_target(&self, action: &str, server: ServerId) -> Result<bool, StoreError> {
        let now = now_ms();
        Ok(self
            .exec(
                "UPDATE fleet_action_targets SET state = 'delivered', attempts = attempts + 1, \
                   updated_at = $3, delivered_at = $3 \
                 WHERE action_id = $1 AND server_id = $2 AND state = 'queued' AND deadline > $3",
                vec![action.into(), server.to_string().into(), now.into()],
            )
            .await?
            == 1)
    }

    /// Marks every queued target of `action` delivered at once (its first delivery); returns how
    /// many.
    pub async fn claim_all_targets(&self, action: &str) -> Result<u64, StoreError> {
        let now = now_ms();
        self.exec(
            "UPDATE fleet_action_targets SET state = 'delivered', attempts = attempts + 1, \
               updated_at = $2, delivered_at = $2 \
             WHERE action_id = $1 AND state = 'queued' AND deadline > $2",
            vec![action.into(), now.into()],
        )
        .await
    }

    /// Records how many delivered targets of one action ended, in one transaction: `None` puts a
    /// target back in the queue.
    pub async fn settle_targets(
        &self,
        action: &str,
        outcomes: &[(ServerId, Option<TargetOutcome>)],
    ) -> Result<(), StoreError> {
        use sea_orm::TransactionTrait as _;
        let backend = self.db.get_database_backend();
        let txn = self.db.begin().await?;
        for (server, outcome) in outcomes {
            let (sql, values) = match outcome {
                Some(outcome) => finish_statement(action, *server, outcome)?,
                None => requeue_statement(action, *server),
            };
            txn.execute_raw(Statement::from_sql_and_values(backend, sql, values))
                .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Puts a delivered target back in the queue (the agent went away before answering).
    pub async fn requeue_target(&self, action: &str, server: ServerId) -> Result<(), StoreError> {
        let (sql, values) = requeue_statement(action, server);
        self.exec(sql, values).await?;
        Ok(())
    }

    /// Records how a delivered target ended.
    pub async fn finish_target(
        &self,
        action: &str,
        server: ServerId,
        outcome: &TargetOutcome,
    ) -> Result<(), StoreError> {
        let (sql, values) = finish_statement(action, server, outcome)?;
        self.exec(sql, values).await?;
        Ok(())
    }

    /// Queued targets whose deadline has not passed, for `server` only or for every server.
    pub async fn due_targets(
        &self,
        server: Option<ServerId>,
    ) -> Result<Vec<TargetWork>, StoreError> {
        let mut sql = String::from(
            "SELECT t.action_id, t.server_id, t.command_id, a.kind, a.ip, a.jail, a.requested_by, t.deadline \
             FROM fleet_action_targets t JOIN fleet_actions a ON a.id = t.action_id \
             WHERE t.state = 'queued' AND t.deadline > $1",
        );
        let mut values: Vec<Value> = vec![now_ms().into()];
        if let Some(server) = server {
            sql.push_str(" AND t.server_id = $2");
            values.push(server.to_string().into());
        }
        sql.push_str(" ORDER BY a.created_at, t.action_id");
        self.rows(&sql, values)
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
        self.exec(
            "UPDATE fleet_action_targets SET state = 'expired', updated_at = $1, finished_at = $1 \
             WHERE state = 'queued' AND deadline <= $1",
            vec![now.into()],
        )
        .await
    }

    /// One fleet action with all its targets.
    pub async fn fleet_action(&self, id: &str) -> Result<Option<FleetActionRecord>, StoreError> {
        let Some(mut action) = self
            .rows(&format!("{ACTION_SELECT} WHERE a.id = $1"), vec![id.into()])
            .await?
            .iter()
            .map(to_action)
            .next()
            .transpose()?
        else {
            return Ok(None);
        };
        action.targets = self
            .rows(
                "SELECT server_id, server_name, state, command_id, changed, jails, error, attempts, \
                   updated_at, delivered_at, finished_at \
                 FROM fleet_action_targets WHERE action_id = $1 ORDER BY server_name",
                vec![id.into()],
            )
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
        let mut sql = String::from(ACTION_SELECT);
        let mut values: Vec<Value> = Vec::new();
        if let Some(before) = before {
            sql.push_str(
                " WHERE (a.created_at, a.id) < (SELECT b.created_at, b.id FROM fleet_actions b WHERE b.id = $1)",
            );
            values.push(before.into());
        }
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        sql.push_str(&format!(
            " ORDER BY a.created_at DESC, a.id DESC LIMIT ${}",
            values.len()
        ));
        let mut actions: Vec<FleetActionRecord> = self
            .rows(&sql, values)
            .await?
            .iter()
            .map(to_action)
            .collect::<Result<_, _>>()?;
        if actions.is_empty() {
            return Ok(actions);
        }
        let placeholders: Vec<String> = (1..=actions.len()).map(|i| format!("${i}")).collect();
        let counts = self
            .rows(
                &format!(
                    "SELECT action_id, state, COUNT(*) FROM fleet_action_targets \
                     WHERE action_id IN ({}) GROUP BY action_id, state",
                    placeholders.join(", ")
                ),
                actions.iter().map(|a| a.id.clone().into()).collect(),
            )
            .await?;
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

fn requeue_statement(action: &str, server: ServerId) -> (&'static str, Vec<Value>) {
    (
        "UPDATE fleet_action_targets SET state = 'queued', updated_at = $3 \
         WHERE action_id = $1 AND server_id = $2 AND state = 'delivered'",
        vec![action.into(), server.to_string().into(), now_ms().into()],
    )
}

fn finish_statement(
    action: &str,
    server: ServerId,
    outcome: &TargetOutcome,
) -> Result<(&'static str, Vec<Value>), StoreError> {
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
    Ok((
        "UPDATE fleet_action_targets SET state = $3, changed = $4, jails = $5, error = $6, \
           updated_at = $7, finished_at = $7 \
         WHERE action_id = $1 AND server_id = $2 AND state IN ('queued', 'delivered')",
        vec![
            action.into(),
            server.to_string().into(),
            state.into(),
            changed.into(),
            jails.into(),
            error.into(),
            now_ms().into(),
        ],
    ))
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

fn to_lease(row: &QueryResult) -> Result<Lease, StoreError> {
    let agent: String = get(row, 1)?;
    Ok(Lease {
        server: server_id(&get::<String>(row, 0)?)?,
        agent: AgentId::parse(&agent).ok(),
        replica: get(row, 2)?,
        generation: get(row, 3)?,
        connected_at: to_time(get(row, 4)?),
        expires_at: to_time(get(row, 5)?),
    })
}
