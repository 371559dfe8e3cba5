//! The lockout guard's service: the networks an admin protects (kept in the store), the addresses
//! operators work from (live sessions', recently used API tokens'), kept current in the shared
//! [`Guards`] every ban path checks, and pushed into every host's `[DEFAULT] ignoreip` so fail2ban's
//! own jails never ban them either.
//!
//! A change of the protected networks is announced to the other replicas (on PostgreSQL), and each
//! reads the lists again when it hears one; every `guards.protected_refresh_secs` too, so a lost
//! notice or a session that ended shows within that interval. Each replica pushes `ignoreip` to the
//! hosts whose agents it holds when the list differs from what the store says the host was last
//! given (kept per host in the database, so a restarted replica, or the next one to hold the
//! agent, knows it and takes out only the networks no longer protected).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use ipnet::IpNet;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::auth::Auth;
use crate::cluster::Cluster;
use crate::domain::protected::{ProtectedEntry, ProtectedNetwork, ProtectionKind};
use crate::domain::{Guards, ServerId};
use crate::fleet::Fleet;
use crate::store::{Store, StoreError};

/// How long a host whose push failed waits before the next attempt.
const RETRY_AFTER: Duration = Duration::from_secs(60);
/// Who the audit trail and the agents' logs name for automatic pushes.
const PUSHED_BY: &str = "lockout-guard";

/// What [`Protection::new`] needs.
#[derive(Debug)]
pub struct ProtectionParts {
    pub store: Store,
    pub auth: Auth,
    pub fleet: Fleet,
    pub guards: Arc<Guards>,
    /// How long after its last use a token's address stays protected; zero: never.
    pub token_window: TimeDelta,
    /// How often the lists are read again.
    pub refresh: Duration,
    /// Where a change is announced to the other replicas.
    pub cluster: Cluster,
    pub shutdown: CancellationToken,
}

/// The lockout guard; cheap to clone.
#[derive(Debug, Clone)]
pub struct Protection(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    parts: ProtectionParts,
    /// Per host of this replica whose last push failed: when.
    failed: Mutex<HashMap<ServerId, Instant>>,
    wake: Notify,
}

impl Protection {
    pub fn new(parts: ProtectionParts) -> Self {
        Self(Arc::new(Inner {
            parts,
            failed: Mutex::default(),
            wake: Notify::new(),
        }))
    }

    pub fn guards(&self) -> &Arc<Guards> {
        &self.0.parts.guards
    }

    /// The networks an admin protected, oldest first.
    pub async fn list(&self) -> Result<Vec<ProtectedNetwork>, StoreError> {
        self.0.parts.store.protected_networks().await
    }

    /// Protects `network` (checked by the caller against the guard rails); `None` when it is
    /// protected already. Bans see it at once; hosts get it in their `ignoreip` shortly.
    pub async fn add(
        &self,
        network: IpNet,
        note: &str,
        by: &str,
    ) -> Result<Option<ProtectedNetwork>, StoreError> {
        let added = self
            .0
            .parts
            .store
            .insert_protected_network(network, note, by, Utc::now())
            .await?;
        self.reload_configured().await?;
        self.0.wake.notify_one();
        self.0.parts.cluster.announce_protected().await;
        Ok(added)
    }

    /// Lifts a protection; the network it protected, or `None` when there was no such entry.
    pub async fn remove(&self, id: i64) -> Result<Option<ProtectedNetwork>, StoreError> {
        let removed = self.0.parts.store.delete_protected_network(id).await?;
        self.reload_configured().await?;
        self.0.wake.notify_one();
        self.0.parts.cluster.announce_protected().await;
        Ok(removed)
    }

    /// Another replica changed the protected networks: read them again now.
    pub fn changed_elsewhere(&self) {
        self.0.wake.notify_one();
    }

    /// Reads both lists again into the guards.
    pub async fn refresh(&self) {
        if let Err(e) = self.reload_configured().await {
            tracing::warn!(error = %e, "cannot read the protected networks; keeping the last ones");
        }
        let window = self.0.parts.token_window;
        match self.0.parts.auth.operator_addresses(window).await {
            Ok(addresses) => {
                let entries = addresses
                    .into_iter()
                    .map(|a| ProtectedEntry::address(a.ip, ProtectionKind::OperatorSession, a.name))
                    .collect();
                if self.0.parts.guards.set_operators(entries) {
                    tracing::info!("the operators' protected addresses changed");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the operators' addresses; keeping the last ones");
            }
        }
    }

    async fn reload_configured(&self) -> Result<(), StoreError> {
        let entries = self
            .0
            .parts
            .store
            .protected_networks()
            .await?
            .iter()
            .map(ProtectedNetwork::entry)
            .collect();
        if self.0.parts.guards.set_configured(entries) {
            tracing::info!("the configured protected networks changed");
        }
        Ok(())
    }

    /// Keeps the guards current and the hosts' `ignoreip` with them, until shutdown.
    pub async fn run(self) {
        let shutdown = self.0.parts.shutdown.clone();
        loop {
            self.refresh().await;
            self.push_stale().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.0.wake.notified() => {}
                () = tokio::time::sleep(self.0.parts.refresh) => {}
            }
        }
    }

    /// Pushes the current list to every host of this replica whose last push, as stored, differs.
    async fn push_stale(&self) {
        let fleet = &self.0.parts.fleet;
        let current = fleet.protected_ignoreip();
        let local = fleet.local_servers();
        let previous = match self.0.parts.store.ignoreip_pushes(&local).await {
            Ok(previous) => previous,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read what the hosts' ignoreip holds; trying again later");
                return;
            }
        };
        let stale: Vec<ServerId> = {
            let mut failed = self.0.failed.lock().unwrap_or_else(PoisonError::into_inner);
            failed.retain(|server, _| local.contains(server));
            local
                .into_iter()
                .filter(|server| {
                    previous.get(server) != Some(&current)
                        && failed
                            .get(server)
                            .is_none_or(|at| at.elapsed() >= RETRY_AFTER)
                })
                .collect()
        };
        let (current, previous) = (&current, &previous);
        let store = &self.0.parts.store;
        let pushes = stale.into_iter().map(|server| async move {
            let before = previous.get(&server).map_or(&[][..], Vec::as_slice);
            // What the host may hold once the push starts: if the push fails or this replica
            // stops during it, whoever pushes next still takes out what is no longer protected.
            let mut may_hold: Vec<IpNet> = before.iter().chain(current).copied().collect();
            may_hold.sort();
            may_hold.dedup();
            if may_hold != before
                && let Err(e) = store
                    .record_ignoreip_push(server, &may_hold, Utc::now())
                    .await
            {
                return (server, Err(e.into()));
            }
            let result = fleet
                .write_protected_ignoreip(server, current, before, PUSHED_BY)
                .await;
            (server, result)
        });
        for (server, result) in futures::future::join_all(pushes).await {
            match result {
                Ok(wrote) => {
                    tracing::info!(server_id = %server, entries = current.len(), wrote, "protected networks in ignoreip");
                    self.forget_failure(server);
                    if let Err(e) = self
                        .0
                        .parts
                        .store
                        .record_ignoreip_push(server, current, Utc::now())
                        .await
                    {
                        tracing::warn!(server_id = %server, error = %e, "cannot record the push of the protected networks; it is repeated");
                    }
                }
                Err(e) => {
                    tracing::warn!(server_id = %server, error = %e, "cannot push the protected networks into ignoreip; trying again later");
                    self.0
                        .failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(server, Instant::now());
                }
            }
        }
    }

    fn forget_failure(&self, server: ServerId) {
        self.0
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&server);
    }
}
