//! Fleet-wide actions: ban or unban one address on every server, or on the servers matching a label
//! selector, with one recorded result per server. A server whose agent is offline keeps its command
//! queued until the action's deadline: it is delivered when the agent's session starts (on whichever
//! replica), or by the periodic delivery pass, and the sweeper job marks what is still queued at the
//! deadline expired. Each target keeps one command id over every delivery, so an agent that already
//! ran it answers from its cache instead of running it twice.

use std::collections::BTreeMap;
use std::time::Duration;

use banhub_proto::rules::{IpOrCidr, JailName};
use banhub_proto::v1::{SetBan, command, command_result::Outcome};
use chrono::Utc;

use super::{Fleet, FleetError};
use crate::domain::{Server, ServerId};
use crate::store::fleet_actions::{FleetActionRecord, NewFleetAction, TargetOutcome, TargetWork};

/// Which servers an action applies to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Selector {
    /// Every registered server.
    All,
    /// Servers carrying every one of these labels.
    Labels(BTreeMap<String, String>),
}

impl Selector {
    pub fn matches(&self, server: &Server) -> bool {
        match self {
            Self::All => true,
            Self::Labels(wanted) => wanted
                .iter()
                .all(|(k, v)| server.labels.as_map().get(k) == Some(v)),
        }
    }
}

/// A fleet-wide ban or unban as the operator asked for it.
#[derive(Debug, Clone)]
pub struct FleetBan {
    pub ip: IpOrCidr,
    /// The jail to ban in (required for a ban); for an unban, `None` means every jail.
    pub jail: Option<JailName>,
    pub ban: bool,
    pub selector: Selector,
    /// How long commands for offline servers stay queued.
    pub queue_for: Duration,
}

/// Why a fleet action was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("no server matches the selector")]
    NoServer,
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

impl From<crate::store::StoreError> for ActionError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Fleet(FleetError::Store(e))
    }
}

impl Fleet {
    /// Records a fleet action, delivers it to every matching server whose agent is online (waiting
    /// for their answers) and leaves the others queued; returns the action with every target.
    pub async fn fleet_ban(
        &self,
        request: FleetBan,
        by: &str,
    ) -> Result<FleetActionRecord, ActionError> {
        let servers: Vec<Server> = self
            .store()
            .list_servers()
            .await?
            .into_iter()
            .filter(|s| request.selector.matches(s))
            .collect();
        if servers.is_empty() {
            return Err(ActionError::NoServer);
        }
        let now = Utc::now();
        let deadline = now + chrono::Duration::from_std(request.queue_for).unwrap_or_default();
        let id = uuid::Uuid::now_v7().to_string();
        let action = NewFleetAction {
            id: id.clone(),
            ban: request.ban,
            ip: request.ip.to_string(),
            jail: request.jail.as_ref().map(ToString::to_string),
            selector: serde_json::to_string(&request.selector).unwrap_or_default(),
            requested_by: by.to_owned(),
            deadline,
            targets: servers
                .iter()
                .map(|s| (s.id, s.name.to_string(), uuid::Uuid::now_v7().to_string()))
                .collect(),
        };
        self.store().create_fleet_action(&action).await?;
        tracing::info!(action = %id, ip = %action.ip, ban = request.ban, servers = servers.len(), %by, "fleet action recorded");
        let work: Vec<TargetWork> = action
            .targets
            .iter()
            .map(|(server, _, command_id)| TargetWork {
                action_id: id.clone(),
                server: *server,
                command_id: command_id.clone(),
                ban: action.ban,
                ip: action.ip.clone(),
                jail: action.jail.clone(),
                requested_by: action.requested_by.clone(),
                deadline,
            })
            .collect();
        // Every target goes out at once: one statement claims them all, one transaction records
        // every answer (a fleet of a thousand would otherwise be two thousand writes).
        self.store().claim_all_targets(&id).await?;
        let outcomes = futures::future::join_all(work.into_iter().map(|w| async move {
            let outcome = self.send_target(&w).await;
            (w.server, outcome)
        }))
        .await;
        self.store().settle_targets(&id, &outcomes).await?;
        self.store()
            .fleet_action(&id)
            .await?
            .ok_or_else(|| ActionError::Fleet(FleetError::Protocol("the action vanished".into())))
    }

    /// One fleet action with every target.
    pub async fn fleet_action(&self, id: &str) -> Result<Option<FleetActionRecord>, FleetError> {
        Ok(self.store().fleet_action(id).await?)
    }

    /// Fleet actions, newest first, before the action `before`.
    pub async fn fleet_actions(
        &self,
        limit: u64,
        before: Option<&str>,
    ) -> Result<Vec<FleetActionRecord>, FleetError> {
        Ok(self.store().list_fleet_actions(limit, before).await?)
    }

    /// Delivers what is queued for `server`, e.g. when its agent's session starts.
    pub(super) async fn deliver_due(&self, server: ServerId) {
        match self.store().due_targets(Some(server)).await {
            Ok(work) => {
                for w in work {
                    self.deliver(w).await;
                }
            }
            Err(e) => {
                tracing::warn!(%server, error = %e, "cannot read queued fleet actions; the delivery pass retries")
            }
        }
    }

    /// Sends one target's command if it is still queued, and records how it went.
    async fn deliver(&self, work: TargetWork) {
        let store = self.store();
        match store.claim_target(&work.action_id, work.server).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(action = %work.action_id, server = %work.server, error = %e, "cannot claim a fleet-action target");
                return;
            }
        }
        let result = match self.send_target(&work).await {
            Some(outcome) => {
                store
                    .finish_target(&work.action_id, work.server, &outcome)
                    .await
            }
            None => store.requeue_target(&work.action_id, work.server).await,
        };
        if let Err(e) = result {
            tracing::warn!(action = %work.action_id, server = %work.server, error = %e, "cannot record a fleet-action result");
        }
    }

    /// Sends one claimed target's command; `None` when it did not reach the agent (offline, or the
    /// session ended first), so it goes back in the queue until the deadline.
    async fn send_target(&self, work: &TargetWork) -> Option<TargetOutcome> {
        let kind = command::Kind::SetBan(SetBan {
            jail: work.jail.clone().unwrap_or_default(),
            ip: work.ip.clone(),
            ban: work.ban,
            // A fleet action is recorded only after the API's guard rails passed it (with an
            // admin's override where one was needed), so what the agent checks again was lifted.
            guard_override: work.ban,
        });
        let label = if work.ban { "fleet_ban" } else { "fleet_unban" };
        let result = self
            .call_with_id(
                work.server,
                kind,
                label,
                &work.requested_by,
                work.command_id.clone(),
            )
            .await;
        match result {
            Ok(Outcome::BanChange(change)) => Some(TargetOutcome::Done {
                changed: change.changed,
                jails: change.jails,
            }),
            Ok(other) => Some(TargetOutcome::Failed(format!(
                "an answer of the wrong kind: {other:?}"
            ))),
            Err(FleetError::Offline | FleetError::SessionEnded) => None,
            Err(e) => Some(TargetOutcome::Failed(e.to_string())),
        }
    }
}

impl Fleet {
    /// Delivers queued targets of servers whose agents hold a session here, every sweep interval,
    /// until shutdown: covers an agent that came back while its target was being handled elsewhere.
    pub async fn run_queued_delivery(self) {
        let fleet = self;
        let shutdown = fleet.0.sessions.shutdown_token();
        let cluster = fleet.cluster().clone();
        let mut ticker = tokio::time::interval(cluster.sweep_interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let due = match fleet.store().due_targets(None).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read queued fleet actions");
                    continue;
                }
            };
            let here: Vec<TargetWork> = due
                .into_iter()
                .filter(|w| fleet.sessions().is_live(w.server))
                .collect();
            futures::future::join_all(here.into_iter().map(|w| fleet.deliver(w))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(labels: &[(&str, &str)]) -> Server {
        Server::example("web-1", labels)
    }

    #[test]
    fn label_selectors_need_every_label() {
        let prod_web = server(&[("env", "prod"), ("role", "web")]);
        let staging = server(&[("env", "staging")]);
        let want = |pairs: &[(&str, &str)]| {
            Selector::Labels(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        assert!(Selector::All.matches(&staging));
        assert!(want(&[("env", "prod")]).matches(&prod_web));
        assert!(want(&[("env", "prod"), ("role", "web")]).matches(&prod_web));
        assert!(!want(&[("env", "prod"), ("role", "db")]).matches(&prod_web));
        assert!(!want(&[("env", "prod")]).matches(&staging));
    }
}
