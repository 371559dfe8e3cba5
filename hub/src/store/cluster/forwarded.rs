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
    pub async fn claim_forwarded_command(
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
    pub async fn pending_forwarded_commands(
        &self,
        replica: &str,
    ) -> Result<Vec<String>, StoreError> {
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
        Ok(self
            .exec(
                "UPDATE cluster_commands SET state = 'done', result = $2, error = $3 WHERE id = $1",
                vec![id.into(), result.into(), error.into()],
            )
            .await?
            == 1)
    }

    /// Takes (and deletes) the outcome of a forwarded command once it is there.
    pub async fn take_forwarded_outcome(
        &self,
        id: &str,
    ) -> Result<Option<ForwardedOutcome>, StoreError> {
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
                (Some(bytes), _) => ForwardedOutcome::Answered(bytes),
                (None, why) => ForwardedOutcome::Failed(why.unwrap_or_default()),
            })
        })
        .next()
        .transpose()
    }

    /// Forgets a forwarded command (the asker gave up waiting).
    pub async fn delete_forwarded_command(&self, id: &str) -> Result<(), StoreError> {
        self.exec(
            "DELETE FROM cluster_commands WHERE id = $1",
            vec![id.into()],
        )
        .await?;
        Ok(())
    }

    /// Deletes forwarded commands created before `before_ms` (whatever their state).
    pub async fn purge_forwarded_commands(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.exec(
            "DELETE FROM cluster_commands WHERE created_at < $1",
            vec![before_ms.into()],
        )
        .await
    }
}
