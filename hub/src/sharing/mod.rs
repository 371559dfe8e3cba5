//! The sharing engine: sharing policies, and the shared bans they make. A ban an origin server
//! reports is matched against the enabled policies once, across replicas; each match becomes one
//! shared ban per target server, recorded with its origin (server, jail, event, policy) and sent
//! to the target's agent as `SyncSharedBans`, which holds it in fail2ban's shared-ban jail until
//! it expires. A shared ban never becomes an origin itself.
//!
//! Three steps, each durable in the store:
//! 1. *Match* ([`engine`]): a singleton job follows the committed events after its stored cursor;
//!    the shared bans of a batch, the lifts of its origin unbans (of policies with
//!    `unbanFollowsOrigin`), the storm breaker's counts and trips, the recidive firings, and the
//!    cursor past the batch are written in one transaction, so a replica dying mid-way neither
//!    loses nor doubles any of them.
//! 2. *Deliver* ([`delivery`]): online targets are told at once (through the replica holding their
//!    agent), a target whose agent's session starts gets the whole set of shared bans still valid,
//!    and a pass on every replica retries what was not confirmed (bans and lifts alike, from
//!    their stored state). Expired bans are never sent.
//! 3. *Show*: the policies with live counters, the shared bans with their status, and why an
//!    address is banned where.

mod defence;
mod delivery;
mod engine;
pub mod matcher;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::domain::events::{EventFilter, EventKind, IpOrCidr, StoredEvent};
use crate::domain::sharing::{Policy, PolicyCounters, PolicySpec, SharedBan, SharedBanFilter};
use crate::domain::{Guards, ServerId};
use crate::events::Events;
use crate::fleet::Fleet;
use crate::store::{Store, StoreError};

/// Who the hub names as the sender of the commands this service sends.
const REQUESTED_BY: &str = "banhub:sharing";
/// Most recent events of one address shown on its page.
const ADDRESS_EVENTS: usize = 200;
/// Most shared bans of one address shown on its page.
const ADDRESS_SHARED: u64 = 500;

/// Why a sharing request failed.
#[derive(Debug, thiserror::Error)]
pub enum SharingError {
    #[error("no sharing policy has this id")]
    NotFound,
    #[error("another sharing policy is named {0:?}")]
    NameTaken(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Inner {
    store: Store,
    fleet: Fleet,
    events: Events,
    guards: Arc<Guards>,
    /// Fleet defence, once handed over (see `defence.rs`).
    defence: std::sync::OnceLock<crate::defence::Defence>,
    /// Wakes this replica's delivery pass.
    work_due: Notify,
    target_locks: delivery::TargetLocks,
    shutdown: CancellationToken,
}

/// The sharing service; cheap to clone.
#[derive(Clone)]
pub struct Sharing(Arc<Inner>);

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing").finish_non_exhaustive()
    }
}

/// A policy with its counters.
#[derive(Debug, Clone)]
pub struct PolicyView {
    pub policy: Policy,
    pub counters: PolicyCounters,
}

/// Why an address is banned where: its recent events and the shared bans of it.
#[derive(Debug, Clone)]
pub struct AddressView {
    pub events: Vec<StoredEvent>,
    pub shared: Vec<SharedBan>,
}

impl Sharing {
    pub fn new(
        store: Store,
        fleet: Fleet,
        events: Events,
        guards: Arc<Guards>,
        shutdown: CancellationToken,
    ) -> Self {
        Self(Arc::new(Inner {
            store,
            fleet,
            events,
            guards,
            defence: std::sync::OnceLock::new(),
            work_due: Notify::new(),
            target_locks: delivery::TargetLocks::default(),
            shutdown,
        }))
    }

    /// Every policy with its counters, by name.
    pub async fn policies(&self) -> Result<Vec<PolicyView>, SharingError> {
        let now = Utc::now().timestamp_millis();
        let mut counters = self.0.store.sharing_policy_counters(now).await?;
        Ok(self
            .0
            .store
            .list_sharing_policies()
            .await?
            .into_iter()
            .map(|policy| PolicyView {
                counters: counters.remove(&policy.id).unwrap_or_default(),
                policy,
            })
            .collect())
    }

    pub async fn policy(&self, id: &str) -> Result<PolicyView, SharingError> {
        let policy = self
            .0
            .store
            .sharing_policy(id)
            .await?
            .ok_or(SharingError::NotFound)?;
        let now = Utc::now().timestamp_millis();
        let counters = self
            .0
            .store
            .sharing_policy_counters(now)
            .await?
            .remove(id)
            .unwrap_or_default();
        Ok(PolicyView { policy, counters })
    }

    #[tracing::instrument(skip_all, fields(name = %spec.name), err)]
    pub async fn create_policy(&self, spec: PolicySpec) -> Result<PolicyView, SharingError> {
        if self
            .0
            .store
            .sharing_policy_name_taken(&spec.name, None)
            .await?
        {
            return Err(SharingError::NameTaken(spec.name));
        }
        let policy = self.0.store.create_sharing_policy(&spec).await?;
        tracing::info!(policy = %policy.id, "sharing policy created");
        Ok(PolicyView {
            policy,
            counters: PolicyCounters::default(),
        })
    }

    #[tracing::instrument(skip_all, fields(policy = id), err)]
    pub async fn update_policy(
        &self,
        id: &str,
        spec: PolicySpec,
    ) -> Result<PolicyView, SharingError> {
        if self.0.store.sharing_policy(id).await?.is_none() {
            return Err(SharingError::NotFound);
        }
        if self
            .0
            .store
            .sharing_policy_name_taken(&spec.name, Some(id))
            .await?
        {
            return Err(SharingError::NameTaken(spec.name));
        }
        self.0
            .store
            .update_sharing_policy(id, &spec)
            .await?
            .ok_or(SharingError::NotFound)?;
        self.policy(id).await
    }

    /// Deletes a policy; the shared bans it made stay until they expire or are lifted.
    #[tracing::instrument(skip_all, fields(policy = id), err)]
    pub async fn delete_policy(&self, id: &str) -> Result<(), SharingError> {
        if self.0.store.delete_sharing_policy(id).await? {
            Ok(())
        } else {
            Err(SharingError::NotFound)
        }
    }

    /// Shared bans matching `filter`, newest first.
    pub async fn shared_bans(
        &self,
        filter: &SharedBanFilter,
        limit: u64,
    ) -> Result<Vec<SharedBan>, SharingError> {
        let now = Utc::now().timestamp_millis();
        Ok(self.0.store.list_shared_bans(filter, limit, now).await?)
    }

    /// Lifts every shared ban of `ip` on every server ("unban everywhere"); the targets are told
    /// now (or when their agent comes back).
    #[tracing::instrument(skip_all, fields(%ip), err)]
    pub async fn lift_everywhere(&self, ip: IpOrCidr) -> Result<usize, SharingError> {
        let now = Utc::now().timestamp_millis();
        let targets = self.0.store.lift_shared_bans(&ip.to_string(), now).await?;
        let n = targets.len();
        self.deliver_now(targets).await;
        Ok(n)
    }

    /// Recent events of `ip` on every server and the shared bans of it.
    pub async fn address(&self, ip: IpOrCidr) -> Result<AddressView, SharingError> {
        let filter = EventFilter {
            ip: Some(ip),
            kinds: vec![EventKind::Ban, EventKind::Unban],
            ..EventFilter::default()
        };
        let page = self
            .0
            .store
            .list_events(&filter, None, ADDRESS_EVENTS)
            .await?;
        let shared = self
            .shared_bans(
                &SharedBanFilter {
                    ip: Some(ip),
                    ..SharedBanFilter::default()
                },
                ADDRESS_SHARED,
            )
            .await?;
        Ok(AddressView {
            events: page.events,
            shared,
        })
    }

    /// For each event of the shared-ban jail among `events`, the shared ban it came from: the
    /// latest one of its address on its server recorded before it.
    pub async fn origins(
        &self,
        events: &[StoredEvent],
    ) -> Result<HashMap<i64, SharedBan>, SharingError> {
        let shared: Vec<&StoredEvent> = events
            .iter()
            .filter(|e| {
                e.body
                    .facts()
                    .is_some_and(|f| f.jail.as_str() == banhub_proto::rules::SHARED_JAIL)
            })
            .collect();
        if shared.is_empty() {
            return Ok(HashMap::new());
        }
        let mut targets: Vec<ServerId> = shared.iter().map(|e| e.server_id).collect();
        targets.sort();
        targets.dedup();
        let mut ips: Vec<String> = shared
            .iter()
            .filter_map(|e| e.body.facts().map(|f| f.ip.to_string()))
            .collect();
        ips.sort();
        ips.dedup();
        let bans = self.0.store.shared_bans_of(&targets, &ips).await?;
        let mut origins = HashMap::new();
        for event in shared {
            let Some(facts) = event.body.facts() else {
                continue;
            };
            let ip = facts.ip.to_string();
            // Rows are oldest first: the last one recorded before the event (with a little slack
            // for the clocks of hub and host) is its origin; else the first one after it.
            let slack = chrono::Duration::seconds(5);
            let candidates: Vec<&SharedBan> = bans
                .iter()
                .filter(|b| b.target == event.server_id && b.ip == ip)
                .collect();
            let origin = candidates
                .iter()
                .rev()
                .find(|b| b.created_at <= event.occurred_at + slack)
                .or(candidates.first());
            if let Some(origin) = origin {
                origins.insert(event.id.0, (*origin).clone());
            }
        }
        Ok(origins)
    }

    /// The ids of the policies whose shared bans an unban at the origin lifts.
    fn follows_origin(policies: &[Policy]) -> Vec<String> {
        policies
            .iter()
            .filter(|p| p.spec.unban_follows_origin)
            .map(|p| p.id.clone())
            .collect()
    }
}
