//! The fleet's side of hub replicas: commands for agents held by another replica are forwarded
//! through [`Cluster::forward`] as encoded protocol messages, commands forwarded here run on the
//! local session, and what other replicas say (a newer session, a removed server, a revoked
//! certificate) reaches the local sessions and revocation list.

use std::collections::HashMap;
use std::time::Duration;

use banhub_proto::v1::{Command, CommandResult};
use chrono::Utc;
use prost::Message as _;

use super::sessions::{DrainReason, SendError, SessionEnd};
use super::{Fleet, FleetError};
use crate::cluster::{Cluster, ForwardError};
use crate::domain::{AgentId, ServerId};
use crate::store::cluster::ForwardedOutcome;

/// How the holder says why a forwarded command has no answer.
const OFFLINE: &str = "offline";
const TIMEOUT: &str = "timeout";
const SESSION_ENDED: &str = "session_ended";
const UNDECODABLE: &str = "undecodable";

impl Fleet {
    /// Sends `command` to the replica holding `server`'s agent, if another one does.
    pub(super) async fn call_elsewhere(
        &self,
        server: ServerId,
        command: Command,
        timeout: Duration,
    ) -> Result<CommandResult, FleetError> {
        let cluster = self.cluster();
        let Some(lease) = cluster.holder(server).await? else {
            return Err(FleetError::Offline);
        };
        if lease.replica == cluster.replica() {
            // Our own lease without a session here: the session just ended.
            return Err(FleetError::Offline);
        }
        tracing::debug!(%server, holder = %lease.replica, command = %command.id, "forwarding a command to the replica holding the agent");
        match cluster
            .forward(&lease.replica, server, command.encode_to_vec(), timeout)
            .await
        {
            Ok(ForwardedOutcome::Answered(bytes)) => CommandResult::decode(bytes.as_slice())
                .map_err(|e| FleetError::Protocol(format!("a forwarded answer: {e}"))),
            Ok(ForwardedOutcome::Failed(why)) => Err(match why.as_str() {
                OFFLINE => FleetError::Offline,
                TIMEOUT => FleetError::Timeout(timeout),
                SESSION_ENDED => FleetError::SessionEnded,
                other => FleetError::Protocol(format!("the holding replica said: {other}")),
            }),
            Err(ForwardError::Timeout) => Err(FleetError::Timeout(timeout)),
            Err(ForwardError::Store(e)) => Err(FleetError::Store(e)),
        }
    }

    /// Runs a command another replica forwarded here on the local session and answers it.
    pub async fn run_forwarded(&self, cluster: &Cluster, id: &str) {
        let (claimed, origin) = match cluster.claim(id).await {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "cannot claim a forwarded command");
                return;
            }
        };
        let outcome = match Command::decode(claimed.command.as_slice()) {
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "a forwarded command does not decode");
                ForwardedOutcome::Failed(UNDECODABLE.to_owned())
            }
            Ok(command) => {
                let left = claimed.deadline_ms - Utc::now().timestamp_millis();
                let timeout = Duration::from_millis(u64::try_from(left).unwrap_or(0));
                if timeout.is_zero() {
                    ForwardedOutcome::Failed(TIMEOUT.to_owned())
                } else {
                    match self.sessions().call(claimed.server, command, timeout).await {
                        Ok(result) => ForwardedOutcome::Answered(result.encode_to_vec()),
                        Err(SendError::Offline) => ForwardedOutcome::Failed(OFFLINE.to_owned()),
                        Err(SendError::Timeout(_)) => ForwardedOutcome::Failed(TIMEOUT.to_owned()),
                        Err(SendError::SessionEnded) => {
                            ForwardedOutcome::Failed(SESSION_ENDED.to_owned())
                        }
                    }
                }
            }
        };
        cluster.answer(id, &origin, outcome).await;
    }

    /// Another replica took the lease of `server` at `generation` (or removed the server).
    pub fn drop_replaced(&self, server: ServerId, generation: i64, reconnect: bool) {
        if self.sessions().drop_older(server, generation, reconnect) {
            tracing::info!(%server, generation, "the session here was replaced elsewhere; dropped it");
            self.metrics()
                .agents_connected
                .set(i64::try_from(self.sessions().count()).unwrap_or(i64::MAX));
        }
    }

    /// A certificate another replica revoked.
    pub fn revoke_here(&self, serial: &str) {
        self.revocations().revoke(serial);
    }

    /// Revokes certificates here and on every other replica.
    pub(super) async fn revoke_everywhere(&self, serials: &[String]) {
        for serial in serials {
            self.revocations().revoke(serial);
            self.cluster().announce_revocation(serial).await;
        }
    }

    /// Ends the session of `server` wherever it is held, unless its agent is `keep` (the agent just
    /// enrolled for it). The agent is told not to reconnect.
    #[tracing::instrument(skip_all, fields(%server, reason))]
    pub(super) async fn cut_off(&self, server: ServerId, keep: Option<AgentId>, reason: &str) {
        self.sessions().disconnect_unless(
            server,
            keep,
            DrainReason {
                end: SessionEnd::Revoked,
                reason: reason.to_owned(),
                reconnect: false,
            },
        );
        let cluster = self.cluster();
        match cluster.holder(server).await {
            Ok(Some(lease)) if lease.replica != cluster.replica() && lease.agent != keep => {
                cluster
                    .tell_drop(&lease.replica, server, lease.generation, false)
                    .await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(%server, error = %e, "cannot find which replica holds the agent; its lease check will drop it")
            }
        }
    }

    /// Makes the local sessions and this replica's leases agree (the lease keeper's tick): a
    /// session whose lease another replica took ends, a session without a lease takes one, and a
    /// lease without a session is released.
    pub async fn reconcile_leases(&self, cluster: &Cluster, held: &HashMap<ServerId, i64>) {
        let local = self.sessions().local_leases();
        for lease in &local {
            if lease.generation.is_some() && lease.generation == held.get(&lease.server).copied() {
                continue;
            }
            match cluster.holder(lease.server).await {
                Ok(Some(other)) if other.replica != cluster.replica() => {
                    self.drop_replaced(lease.server, other.generation, true);
                }
                Ok(_) => match cluster.acquire(lease.server, lease.agent).await {
                    Ok(Some(generation)) => {
                        self.sessions()
                            .set_generation(lease.server, lease.session_id, generation);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(server = %lease.server, error = %e, "cannot take the lease of a live session")
                    }
                },
                Err(e) => {
                    tracing::warn!(server = %lease.server, error = %e, "cannot read an agent lease")
                }
            }
        }
        for (server, generation) in held {
            if !local.iter().any(|l| l.server == *server) {
                cluster.release(*server, *generation).await;
            }
        }
    }

    /// Takes the lease of a session that just started here.
    pub(super) async fn take_lease(&self, server: ServerId, session_id: u64, agent: AgentId) {
        match self.cluster().acquire(server, agent).await {
            Ok(Some(generation)) => self
                .sessions()
                .set_generation(server, session_id, generation),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(%server, error = %e, "cannot take the agent's lease; the lease keeper retries")
            }
        }
    }

    /// Gives up the lease of a session that ended here.
    pub(super) async fn end_lease(&self, server: ServerId, generation: Option<i64>) {
        if let Some(generation) = generation {
            self.cluster().release(server, generation).await;
        }
    }
}
