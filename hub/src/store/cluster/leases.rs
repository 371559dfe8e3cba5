//! Agent leases (which replica holds which agent's session) and replica heartbeats, with the
//! purge of stale rows.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult};

use super::super::sql::Sql;
use super::super::{Store, StoreError, now_ms, to_time};
use super::{get, server_id, to_u64};
use crate::domain::{AgentId, ServerId};

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

impl Store {
    /// Records that `replica` is alive.
    pub async fn replica_heartbeat(
        &self,
        replica: &str,
        started_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut sql =
            self.sql("INSERT INTO hub_replicas (replica_id, started_at, heartbeat_at) VALUES ");
        sql.tuple([
            replica.into(),
            started_at.timestamp_millis().into(),
            now_ms().into(),
        ])
        .push(
            " ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, \
             started_at = excluded.started_at",
        );
        self.exec(sql).await?;
        Ok(())
    }

    /// Every replica seen within `window_ms`, with the agents it holds.
    pub async fn replicas(&self, window_ms: i64) -> Result<Vec<ReplicaRow>, StoreError> {
        let now = now_ms();
        let mut sql = self.sql(
            "SELECT r.replica_id, r.started_at, r.heartbeat_at, \
               (SELECT COUNT(*) FROM agent_leases l WHERE l.replica_id = r.replica_id AND l.expires_at > ",
        );
        sql.bind(now)
            .push(") FROM hub_replicas r WHERE r.heartbeat_at > ")
            .bind(now - window_ms)
            .push(" ORDER BY r.replica_id");
        self.rows(sql)
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
        let mut sql = self.sql("DELETE FROM agent_leases WHERE replica_id = ");
        sql.bind(replica);
        self.exec(sql).await
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
        let backend = self.backend();
        // The old holder is read under a row lock, so two sessions of one server starting on two
        // replicas at once are ordered: the second sees the first as the holder it replaces.
        // (Leases are only used on PostgreSQL; SQLite has one hub.)
        let mut holder = Sql::new(
            backend,
            "SELECT replica_id, expires_at FROM agent_leases WHERE server_id = ",
        );
        holder.bind(server.to_string());
        if backend == DbBackend::Postgres {
            holder.push(" FOR UPDATE");
        }
        let previous = txn
            .query_one_raw(holder.build())
            .await?
            .map(|row| Ok::<_, StoreError>((get::<String>(&row, 0)?, get::<i64>(&row, 1)?)))
            .transpose()?;
        let mut upsert = Sql::new(
            backend,
            "INSERT INTO agent_leases (server_id, agent_id, replica_id, generation, connected_at, expires_at) \
             VALUES (",
        );
        upsert
            .bind(server.to_string())
            .push(", ")
            .bind(agent.to_string())
            .push(", ")
            .bind(replica)
            .push(", 1, ")
            .bind(now)
            .push(", ")
            .bind(now + ttl_ms)
            .push(
                ") ON CONFLICT (server_id) DO UPDATE SET agent_id = excluded.agent_id, \
                   replica_id = excluded.replica_id, generation = agent_leases.generation + 1, \
                   connected_at = excluded.connected_at, expires_at = excluded.expires_at \
                 RETURNING generation",
            );
        let generation: i64 = match txn.query_one_raw(upsert.build()).await? {
            Some(row) => get(&row, 0)?,
            None => {
                return Err(StoreError::Corrupt(
                    "the lease upsert returned nothing".into(),
                ));
            }
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
        let mut sql = self.sql("UPDATE agent_leases SET expires_at = ");
        sql.bind(now_ms() + ttl_ms)
            .push(" WHERE replica_id = ")
            .bind(replica);
        self.exec(sql).await
    }

    /// The leases `replica` holds, as server → generation.
    pub async fn leases_of(
        &self,
        replica: &str,
    ) -> Result<std::collections::HashMap<ServerId, i64>, StoreError> {
        let mut sql =
            self.sql("SELECT server_id, generation FROM agent_leases WHERE replica_id = ");
        sql.bind(replica);
        self.rows(sql)
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
        let mut sql = self.sql("DELETE FROM agent_leases WHERE server_id = ");
        sql.bind(server.to_string())
            .push(" AND replica_id = ")
            .bind(replica)
            .push(" AND generation = ")
            .bind(generation);
        Ok(self.exec(sql).await? == 1)
    }

    /// The lease of `server` if it has not expired.
    pub async fn lease(&self, server: ServerId) -> Result<Option<Lease>, StoreError> {
        let mut sql = self.sql(LEASE_SELECT);
        sql.push(" WHERE server_id = ")
            .bind(server.to_string())
            .push(" AND expires_at > ")
            .bind(now_ms());
        self.rows(sql)
            .await?
            .iter()
            .map(to_lease)
            .next()
            .transpose()
    }

    /// Every lease that has not expired.
    pub async fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        let mut sql = self.sql(LEASE_SELECT);
        sql.push(" WHERE expires_at > ").bind(now_ms());
        self.rows(sql).await?.iter().map(to_lease).collect()
    }

    /// Deletes leases that expired more than `grace_ms` ago and replicas silent for as long.
    pub async fn purge_stale_cluster_rows(&self, grace_ms: i64) -> Result<u64, StoreError> {
        let before = now_ms() - grace_ms;
        let mut leases = self.sql("DELETE FROM agent_leases WHERE expires_at < ");
        leases.bind(before);
        let leases = self.exec(leases).await?;
        let mut replicas = self.sql("DELETE FROM hub_replicas WHERE heartbeat_at < ");
        replicas.bind(before);
        let replicas = self.exec(replicas).await?;
        Ok(leases + replicas)
    }
}

const LEASE_SELECT: &str = "SELECT server_id, agent_id, replica_id, generation, connected_at, \
    expires_at FROM agent_leases";

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
