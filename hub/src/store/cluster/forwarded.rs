//! Commands forwarded between replicas: a row per command for the replica holding the agent's
//! session, claimed, answered and purged.

use super::super::{Store, StoreError, now_ms};
use super::{get, server_id};
use crate::domain::ServerId;

/// A forwarded command claimed by the replica that holds the agent.
#[derive(Debug, Clone)]
pub struct ClaimedCommand {
    pub server: ServerId,
    /// The encoded protocol command.
    pub command: Vec<u8>,
    pub deadline_ms: i64,
}

/// The answer to a forwarded command, as the holding replica wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardedOutcome {
    /// The encoded protocol result.
    Answered(Vec<u8>),
    /// Why there is no answer (`offline`, `timeout`, `session_ended`, `undecodable`).
    Failed(String),
}

impl Store {
    /// Records a command for the replica `target` to run on its session of `server`.
    pub async fn insert_forwarded_command(
        &self,
        id: &str,
        server: ServerId,
        origin: &str,
        target: &str,
        command: Vec<u8>,
        deadline_ms: i64,
    ) -> Result<(), StoreError> {
        let mut sql = self.sql(
            "INSERT INTO cluster_commands (id, server_id, origin_replica, target_replica, command, \
               deadline, created_at, state) VALUES (",
        );
        sql.bind(id)
            .push(", ")
            .bind(server.to_string())
            .push(", ")
            .bind(origin)
            .push(", ")
            .bind(target)
            .push(", ")
            .bind(command)
            .push(", ")
            .bind(deadline_ms)
            .push(", ")
            .bind(now_ms())
            .push(", 'pending')");
        self.exec(sql).await?;
        Ok(())
    }

    /// Claims a pending command addressed to `replica`: only one claim succeeds. Returns it with the
    /// replica that asked.
    pub async fn claim_forwarded_command(
        &self,
        id: &str,
        replica: &str,
    ) -> Result<Option<(ClaimedCommand, String)>, StoreError> {
        let mut sql = self.sql("UPDATE cluster_commands SET state = 'running' WHERE id = ");
        sql.bind(id)
            .push(" AND target_replica = ")
            .bind(replica)
            .push(
                " AND state = 'pending' \
                 RETURNING server_id, command, deadline, origin_replica",
            );
        self.rows(sql)
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
    pub async fn pending_forwarded_commands(
        &self,
        replica: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut sql = self.sql("SELECT id FROM cluster_commands WHERE target_replica = ");
        sql.bind(replica)
            .push(" AND state = 'pending' AND deadline > ")
            .bind(now_ms());
        self.rows(sql)
            .await?
            .iter()
            .map(|row| get(row, 0))
            .collect()
    }

    /// Writes the outcome of a forwarded command. False when the asking replica gave up on it.
    pub async fn finish_forwarded_command(
        &self,
        id: &str,
        outcome: ForwardedOutcome,
    ) -> Result<bool, StoreError> {
        let (result, error): (Option<Vec<u8>>, Option<String>) = match outcome {
            ForwardedOutcome::Answered(bytes) => (Some(bytes), None),
            ForwardedOutcome::Failed(why) => (None, Some(why)),
        };
        let mut sql = self.sql("UPDATE cluster_commands SET state = 'done', result = ");
        sql.bind(result)
            .push(", error = ")
            .bind(error)
            .push(" WHERE id = ")
            .bind(id);
        Ok(self.exec(sql).await? == 1)
    }

    /// Takes (and deletes) the outcome of a forwarded command once it is there.
    pub async fn take_forwarded_outcome(
        &self,
        id: &str,
    ) -> Result<Option<ForwardedOutcome>, StoreError> {
        let mut sql = self.sql("DELETE FROM cluster_commands WHERE id = ");
        sql.bind(id)
            .push(" AND state = 'done' RETURNING result, error");
        self.rows(sql)
            .await?
            .iter()
            .map(|row| {
                let result: Option<Vec<u8>> = get(row, 0)?;
                let error: Option<String> = get(row, 1)?;
                Ok(match (result, error) {
                    (Some(bytes), _) => ForwardedOutcome::Answered(bytes),
                    (None, why) => ForwardedOutcome::Failed(why.unwrap_or_default()),
                })
            })
            .next()
            .transpose()
    }

    /// Forgets a forwarded command (the asker gave up waiting).
    pub async fn delete_forwarded_command(&self, id: &str) -> Result<(), StoreError> {
        let mut sql = self.sql("DELETE FROM cluster_commands WHERE id = ");
        sql.bind(id);
        self.exec(sql).await?;
        Ok(())
    }

    /// Deletes forwarded commands created before `before_ms` (whatever their state).
    pub async fn purge_forwarded_commands(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut sql = self.sql("DELETE FROM cluster_commands WHERE created_at < ");
        sql.bind(before_ms);
        self.exec(sql).await
    }
}
