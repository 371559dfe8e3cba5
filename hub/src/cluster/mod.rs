//! Hub replicas on one PostgreSQL database: who this replica is, the agent leases it holds, commands
//! forwarded to the replica holding an agent, the fan-out of committed events, and singleton jobs.
//!
//! There is no consensus of our own: the database is the only shared state. A replica records each
//! agent session it holds as a lease (renewed in bulk, released when the session ends, taken over by
//! a newer session anywhere). A command for an agent held elsewhere is written to `cluster_commands`
//! and its id sent with `NOTIFY` on the holder's channel; the holder runs it and answers the same
//! way. Committed event ids go out on one channel every replica listens to. Jobs that must run once
//! per cluster hold a PostgreSQL advisory lock. On SQLite (one hub) none of this runs: leases are not
//! written, nothing is forwarded, jobs simply run.
//!
//! Channels: `banhub_r_<tag>` per replica (`run:<id>`, `done:<id>`, `drop:<server>:<generation>:<0|1>`),
//! `banhub_events` (`<tag> <id ranges>`), `banhub_cluster` (`revoke <serial>`).

mod bus;
pub mod jobs;
mod leases;
mod subscriber;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::ClusterConfig;
use crate::domain::{AgentId, ServerId};
use crate::store::cluster::{ForwardedOutcome, JobRuns, Lease, LeaseGrant, ReplicaRow};
use crate::store::{Store, StoreError};

pub use subscriber::Subscriber;

/// The channel every replica listens to for committed events.
const EVENTS_CHANNEL: &str = "banhub_events";
/// The channel every replica listens to for fleet-wide facts (revocations, new settings).
const CLUSTER_CHANNEL: &str = "banhub_cluster";
/// The notice on [`CLUSTER_CHANNEL`] that the settings changed.
const SETTINGS_NOTICE: &str = "settings";
/// The payload on [`CLUSTER_CHANNEL`] that says the protected networks changed.
const PROTECTED_NOTICE: &str = "protected";
/// PostgreSQL refuses payloads of 8000 bytes or more; event id lists are split below this.
const MAX_PAYLOAD: usize = 7000;
/// Extra time a forwarded command is waited for beyond its own deadline (two notifications and a few
/// statements).
const FORWARD_MARGIN: Duration = Duration::from_secs(2);

/// Why a forwarded command brought no answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("the replica holding the agent did not answer in time")]
    Timeout,
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Inner {
    store: Store,
    replica: String,
    tag: String,
    started_at: DateTime<Utc>,
    shared: bool,
    lease_ttl: Duration,
    sweep_interval: Duration,
    /// Forwarded commands this replica waits for answers to, by row id.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// Ids of events committed here, for the announcer task.
    announce: mpsc::UnboundedSender<Vec<i64>>,
    announce_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<i64>>>>,
    shutdown: CancellationToken,
}

/// This replica's handle on the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster(Arc<Inner>);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("replica", &self.0.replica)
            .field("shared", &self.0.shared)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain maps behind these locks; a panic elsewhere leaves them usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A short, stable tag of a replica id, usable in channel names whatever the id contains.
fn tag_of(replica: &str) -> String {
    crate::pki::sha256_hex(replica.as_bytes())[..12].to_owned()
}

/// The channel the replica `replica` listens to for commands, answers and drops.
fn channel_of(replica: &str) -> String {
    format!("banhub_r_{}", tag_of(replica))
}

fn default_replica_id() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| {
            h.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
                .take(40)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hub".to_owned());
    format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

impl Cluster {
    /// The replica described by `config` on `store`; several replicas share the store when it is
    /// PostgreSQL.
    pub fn new(store: Store, config: &ClusterConfig, shutdown: CancellationToken) -> Self {
        let replica = if config.replica_id.is_empty() {
            default_replica_id()
        } else {
            config.replica_id.clone()
        };
        let (announce, announce_rx) = mpsc::unbounded_channel();
        Self(Arc::new(Inner {
            shared: store.is_shared(),
            store,
            tag: tag_of(&replica),
            replica,
            started_at: Utc::now(),
            lease_ttl: Duration::from_secs(config.lease_ttl_secs),
            sweep_interval: Duration::from_millis(config.sweep_interval_ms),
            waiters: Mutex::default(),
            announce,
            announce_rx: Mutex::new(Some(announce_rx)),
            shutdown,
        }))
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.0.replica
    }

    /// Whether other replicas may share the database (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        self.0.shared
    }

    pub fn store(&self) -> &Store {
        &self.0.store
    }

    pub fn sweep_interval(&self) -> Duration {
        self.0.sweep_interval
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.0.lease_ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Registers this replica: forgets leases an earlier run with the same id left behind, and
    /// checks that every replica uses the same CA (`ca_fingerprint`). Call once before serving.
    #[tracing::instrument(skip_all, fields(replica = %self.0.replica), err)]
    pub async fn join(&self, ca_fingerprint: &str) -> Result<(), JoinError> {
        if !self.0.shared {
            return Ok(());
        }
        let stored = self
            .0
            .store
            .init_cluster_setting("ca_fingerprint", ca_fingerprint)
            .await?;
        if stored != ca_fingerprint {
            return Err(JoinError::OtherCa {
                ours: ca_fingerprint.to_owned(),
                theirs: stored,
            });
        }
        let stale = self.0.store.clear_leases_of(&self.0.replica).await?;
        if stale > 0 {
            tracing::info!(
                leases = stale,
                "dropped the leases an earlier run of this replica left behind"
            );
        }
        self.0
            .store
            .replica_heartbeat(&self.0.replica, self.0.started_at)
            .await?;
        tracing::info!(replica = %self.0.replica, "joined the hub replicas on this database");
        Ok(())
    }

    // ----- leases -----

    /// Takes the lease of `server` for a session starting here; tells a replica that held it to let
    /// its older session go. `None` on SQLite.
    pub async fn acquire(
        &self,
        server: ServerId,
        agent: AgentId,
    ) -> Result<Option<i64>, StoreError> {
        if !self.0.shared {
            return Ok(None);
        }
        let LeaseGrant {
            generation,
            previous,
        } = self
            .0
            .store
            .acquire_lease(server, agent, &self.0.replica, self.ttl_ms())
            .await?;
        if let Some(previous) = previous {
            tracing::info!(%server, %previous, generation, "this session replaces one held by another replica");
            self.tell_drop(&previous, server, generation, true).await;
        }
        Ok(Some(generation))
    }

    /// Gives up the lease of a session that ended here.
    pub async fn release(&self, server: ServerId, generation: i64) {
        if let Err(e) = self
            .0
            .store
            .release_lease(server, &self.0.replica, generation)
            .await
        {
            tracing::warn!(%server, error = %e, "could not release an agent lease; it will expire");
        }
    }

    /// The replica holding `server`'s agent, if a valid lease says so (never on SQLite).
    pub async fn holder(&self, server: ServerId) -> Result<Option<Lease>, StoreError> {
        if !self.0.shared {
            return Ok(None);
        }
        self.0.store.lease(server).await
    }

    /// Every valid lease by server (empty on SQLite).
    pub async fn leases(&self) -> Result<HashMap<ServerId, Lease>, StoreError> {
        if !self.0.shared {
            return Ok(HashMap::new());
        }
        Ok(self
            .0
            .store
            .leases()
            .await?
            .into_iter()
            .map(|l| (l.server, l))
            .collect())
    }

    /// Tells `replica` that a session of `server` with lease `generation` now exists elsewhere (or,
    /// with `reconnect` false, that the server is gone) so its older session must end.
    pub async fn tell_drop(
        &self,
        replica: &str,
        server: ServerId,
        generation: i64,
        reconnect: bool,
    ) {
        let payload = format!("drop:{server}:{generation}:{}", u8::from(reconnect));
        if let Err(e) = self.0.store.notify(&channel_of(replica), &payload).await {
            tracing::warn!(%server, %replica, error = %e, "could not tell a replica to drop a session; its lease check will");
        }
    }

    /// Tells every replica that the settings changed (each reads them again).
    pub async fn announce_settings(&self) {
        if !self.0.shared {
            return;
        }
        if let Err(e) = self.0.store.notify(CLUSTER_CHANNEL, SETTINGS_NOTICE).await {
            tracing::warn!(error = %e, "could not announce new settings to the other replicas; they take them at their next resync");
        }
    }

    /// Tells every replica that the protected networks changed (each reads them again).
    pub async fn announce_protected(&self) {
        if !self.0.shared {
            return;
        }
        if let Err(e) = self.0.store.notify(CLUSTER_CHANNEL, PROTECTED_NOTICE).await {
            tracing::warn!(error = %e, "could not announce a change of the protected networks; the other replicas read them at their next refresh");
        }
    }

    /// Tells every replica that a certificate is revoked.
    pub async fn announce_revocation(&self, serial: &str) {
        if !self.0.shared {
            return;
        }
        if let Err(e) = self
            .0
            .store
            .notify(CLUSTER_CHANNEL, &format!("revoke {serial}"))
            .await
        {
            tracing::warn!(error = %e, "could not announce a revocation to the other replicas");
        }
    }

    // ----- forwarded commands -----

    /// Sends an encoded command to `target` (the replica holding `server`'s agent) and waits up to
    /// `timeout` (plus a small margin) for its encoded answer.
    #[tracing::instrument(skip_all, fields(%server, target), err(level = "warn"))]
    pub async fn forward(
        &self,
        target: &str,
        server: ServerId,
        command: Vec<u8>,
        timeout: Duration,
    ) -> Result<ForwardedOutcome, ForwardError> {
        let id = uuid::Uuid::now_v7().to_string();
        let wake = Arc::new(Notify::new());
        lock(&self.0.waiters).insert(id.clone(), wake.clone());
        let outcome = self
            .forward_inner(&id, target, server, command, timeout, &wake)
            .await;
        lock(&self.0.waiters).remove(&id);
        if outcome.is_err() {
            // Whatever happens to it now, nobody reads the answer.
            let _ = self.0.store.delete_forwarded_command(&id).await;
        }
        outcome
    }

    async fn forward_inner(
        &self,
        id: &str,
        target: &str,
        server: ServerId,
        command: Vec<u8>,
        timeout: Duration,
        wake: &Notify,
    ) -> Result<ForwardedOutcome, ForwardError> {
        let deadline_ms = Utc::now().timestamp_millis()
            + i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX / 2);
        let store = &self.0.store;
        store
            .insert_forwarded_command(id, server, &self.0.replica, target, command, deadline_ms)
            .await?;
        store
            .notify(&channel_of(target), &format!("run:{id}"))
            .await?;
        let give_up = tokio::time::Instant::now() + timeout + FORWARD_MARGIN;
        loop {
            if tokio::time::timeout_at(give_up, wake.notified())
                .await
                .is_err()
            {
                return Err(ForwardError::Timeout);
            }
            // A wake-up after lost notifications may come before the answer: then wait on.
            if let Some(outcome) = store.take_forwarded_outcome(id).await? {
                return Ok(outcome);
            }
        }
    }

    /// Claims a command forwarded to this replica; `None` when somebody else has it or it is gone.
    pub async fn claim(
        &self,
        id: &str,
    ) -> Result<Option<(crate::store::cluster::ClaimedCommand, String)>, StoreError> {
        self.0
            .store
            .claim_forwarded_command(id, &self.0.replica)
            .await
    }

    /// Writes the answer to a forwarded command and wakes the replica that asked.
    pub async fn answer(&self, id: &str, origin: &str, outcome: ForwardedOutcome) {
        let store = &self.0.store;
        match store.finish_forwarded_command(id, outcome).await {
            Ok(true) => {
                if let Err(e) = store
                    .notify(&channel_of(origin), &format!("done:{id}"))
                    .await
                {
                    tracing::warn!(command = %id, error = %e, "could not wake the replica waiting for a forwarded command");
                }
            }
            Ok(false) => {
                tracing::debug!(command = %id, "the asking replica gave up on this forwarded command")
            }
            Err(e) => {
                tracing::warn!(command = %id, error = %e, "could not store the answer to a forwarded command")
            }
        }
    }

    fn wake(&self, id: &str) {
        if let Some(wake) = lock(&self.0.waiters).get(id) {
            wake.notify_one();
        }
    }

    fn wake_all(&self) {
        for wake in lock(&self.0.waiters).values() {
            wake.notify_one();
        }
    }

    // ----- events -----

    /// Announces events committed on this replica to the others (after commit; batched).
    pub fn announce_events(&self, ids: Vec<i64>) {
        if self.0.shared && !ids.is_empty() {
            // The announcer lives as long as the hub; after shutdown nobody listens anyway.
            let _ = self.0.announce.send(ids);
        }
    }

    // ----- views -----

    /// Replicas seen recently, with the agents each holds.
    pub async fn replicas(&self) -> Result<Vec<ReplicaRow>, StoreError> {
        if !self.0.shared {
            return Ok(vec![ReplicaRow {
                id: self.0.replica.clone(),
                started_at: self.0.started_at,
                heartbeat_at: Utc::now(),
                agents: 0,
            }]);
        }
        self.0.store.replicas(3 * self.ttl_ms()).await
    }

    /// Runs of the singleton jobs per replica.
    pub async fn job_runs(&self) -> Result<Vec<JobRuns>, StoreError> {
        self.0.store.job_runs().await
    }

    /// The replicas sharing the database as this one sees them; `agents_here` is the number of
    /// agents with a session on this replica, which the caller knows.
    pub async fn status(&self, agents_here: u64) -> Result<ClusterStatus, StoreError> {
        Ok(ClusterStatus {
            replica: self.0.replica.clone(),
            database: self.0.store.backend_name(),
            agents_here,
            replicas: self.replicas().await?,
            jobs: self.job_runs().await?,
        })
    }
}

/// The replicas, the agents each holds, and which replica ran the singleton jobs.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    /// The replica that answers.
    pub replica: String,
    /// `sqlite` (one hub) or `postgres` (replicas possible).
    pub database: &'static str,
    /// Agents with a session on the replica that answers.
    pub agents_here: u64,
    pub replicas: Vec<ReplicaRow>,
    pub jobs: Vec<JobRuns>,
}

/// Why this replica cannot join the others.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "this hub's internal CA (fingerprint {ours}) is not the one the other replicas on this \
         database use ({theirs}); every replica must use the same CA: copy the first replica's CA \
         directory (`<data_dir>/ca`, or `cluster.ca_dir`) to this one"
    )]
    OtherCa { ours: String, theirs: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `100-140,145,150-151` for the sorted, deduplicated `ids`, cut into payloads below the limit.
fn ranges_payloads(tag: &str, mut ids: Vec<i64>) -> Vec<String> {
    ids.sort_unstable();
    ids.dedup();
    let mut payloads = Vec::new();
    let mut current = format!("{tag} ");
    let header = current.len();
    let mut i = 0;
    while i < ids.len() {
        let first = ids[i];
        let mut last = first;
        while i + 1 < ids.len() && ids[i + 1] == last + 1 {
            i += 1;
            last = ids[i];
        }
        i += 1;
        let part = if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        };
        if current.len() + part.len() + 1 > MAX_PAYLOAD {
            payloads.push(std::mem::replace(&mut current, format!("{tag} ")));
        }
        if current.len() > header {
            current.push(',');
        }
        current.push_str(&part);
    }
    if current.len() > header {
        payloads.push(current);
    }
    payloads
}

/// Parses an events payload into its sender's tag and the id ranges.
fn parse_ranges(payload: &str) -> Option<(&str, Vec<(i64, i64)>)> {
    let (tag, list) = payload.split_once(' ')?;
    let mut ranges = Vec::new();
    for part in list.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let n = part.parse().ok()?;
                (n, n)
            }
        };
        if first > last {
            return None;
        }
        ranges.push((first, last));
    }
    Some((tag, ranges))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges_round_trip_and_split() {
        let payloads = ranges_payloads("abc", vec![5, 3, 4, 9, 11, 12, 4]);
        assert_eq!(payloads, vec!["abc 3-5,9,11-12".to_owned()]);
        let (tag, ranges) = parse_ranges(&payloads[0]).expect("parses");
        assert_eq!(tag, "abc");
        assert_eq!(ranges, vec![(3, 5), (9, 9), (11, 12)]);

        // Every other id: no ranges to merge, so the list must be cut into several payloads.
        let ids: Vec<i64> = (0..20_000).map(|i| 1_000_000_000 + 2 * i).collect();
        let payloads = ranges_payloads("t", ids.clone());
        assert!(payloads.len() > 1);
        let mut back = Vec::new();
        for p in &payloads {
            assert!(p.len() < MAX_PAYLOAD);
            let (_, ranges) = parse_ranges(p).expect("parses");
            back.extend(ranges.into_iter().map(|(a, _)| a));
        }
        assert_eq!(back, ids);
    }

    #[test]
    fn bad_payloads_are_refused() {
        assert!(parse_ranges("noranges").is_none());
        assert!(parse_ranges("t 5-3").is_none());
        assert!(parse_ranges("t x").is_none());
    }

    #[test]
    fn channels_are_safe_identifiers() {
        let channel = channel_of("hub a/1 \"quoted\"");
        assert!(channel.len() < 64);
        assert!(
            channel
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        );
        assert_eq!(channel, channel_of("hub a/1 \"quoted\""));
        assert_ne!(channel, channel_of("hub b"));
    }
}
