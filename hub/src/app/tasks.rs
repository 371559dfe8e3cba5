//! Every background task of the hub, started here and nowhere else, each under a span naming it;
//! and [`ReplicaSubscriber`], which hands what the cluster hears from the other replicas to the
//! services that act on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::api::AppState;
use crate::cluster::jobs::{self, run_singleton};
use crate::cluster::{Cluster, Subscriber};
use crate::domain::ServerId;
use crate::fleet::Fleet;
use crate::protected::Protection;
use crate::settings::SettingsService;

/// Batches of other replicas' event ids waiting to be read and published here.
const PEER_FEED_QUEUE: usize = 4096;

/// Starts the background tasks; each ends by itself once the hub's shutdown token is cancelled.
/// Returns the alert worker, whose last step the hub waits for when it stops.
pub(super) fn spawn_all(state: &AppState, shutdown: &CancellationToken) -> JoinHandle<()> {
    let AppState {
        config,
        fleet,
        events,
        cluster,
        settings,
        alerts,
        protection,
        feeds,
        sharing,
        defence,
        profiles,
        config_changes,
        rollouts,
        timed_bans,
        ..
    } = state;

    // Jobs that run on one replica at a time (on SQLite simply run).
    spawn(
        "sweeper",
        run_singleton(cluster.clone(), jobs::SWEEPER, jobs::sweeper),
    );
    let retention = events.clone();
    spawn(
        "retention",
        run_singleton(cluster.clone(), jobs::RETENTION, move |_| {
            retention.clone().run_retention()
        }),
    );
    let (probes, stop) = (fleet.clone(), shutdown.clone());
    spawn(
        "probes",
        run_singleton(cluster.clone(), jobs::PROBES, move |_| {
            probes.clone().run_probe_schedule(stop.clone())
        }),
    );
    // The alert worker reads committed events from the store, never from the ingest path.
    let worker = alerts.clone();
    let alert_worker = spawn(
        "alerts",
        run_singleton(cluster.clone(), jobs::ALERTS, move |_| worker.clone().run()),
    );

    // The sharing engine matches committed bans once across replicas; every replica delivers to
    // the agents it holds.
    let engine = sharing.clone();
    spawn(
        "sharing",
        run_singleton(cluster.clone(), jobs::SHARING, move |_| {
            engine.clone().run()
        }),
    );
    // The lifter of timed bans works through the stored schedule on one replica at a time.
    let lifter = timed_bans.clone();
    spawn(
        "timed_bans",
        run_singleton(cluster.clone(), jobs::TIMED_BANS, move |_| {
            lifter.clone().run()
        }),
    );
    spawn("sharing_delivery", sharing.clone().run_delivery());
    // On every replica: the breaker follows the stored pauses (a resume anywhere takes effect).
    spawn("defence", defence.clone().run(shutdown.clone()));

    // On every replica: the fleet's own passes, and the retention setting (it sets local state).
    spawn("seen_writer", fleet.clone().run_seen_writer());
    spawn("queued_delivery", fleet.clone().run_queued_delivery());
    spawn("protected_networks", protection.clone().run());
    // On every replica: the hosts whose sessions it holds are compared with their profiles.
    spawn("drift", profiles.clone().run(shutdown.clone()));
    // On every replica: confirms the config changes of the agents it holds, or records their end.
    spawn("config_changes", config_changes.clone().run());
    // Rollouts are driven by one replica at a time; the next leader resumes them from the store.
    let engine = rollouts.clone();
    spawn(
        "rollouts",
        run_singleton(cluster.clone(), crate::rollouts::JOB, move |_| {
            engine.clone().run()
        }),
    );
    // Each replica renders the feeds itself from the shared database.
    spawn("feeds", feeds.clone().run());
    spawn(
        "follow_retention",
        events.clone().follow_retention(
            settings.subscribe(),
            |snapshot| snapshot.settings.retention_days,
            config.events.retention_days,
            std::time::Duration::from_secs(config.events.prune_interval_secs),
            shutdown.clone(),
        ),
    );

    // Talking to the other replicas, on PostgreSQL only (on SQLite there is nobody to talk to).
    if cluster.is_shared() {
        events.attach_cluster(cluster.clone());
        let (peer_events, peer_events_rx) = mpsc::channel(PEER_FEED_QUEUE);
        spawn("peer_feed", events.clone().run_peer_feed(peer_events_rx));
        let subscriber = Arc::new(ReplicaSubscriber {
            fleet: fleet.clone(),
            settings: settings.clone(),
            protection: protection.clone(),
            peer_events,
        });
        spawn(
            "cluster_listener",
            cluster.clone().run_listener(subscriber.clone()),
        );
        spawn("cluster_announcer", cluster.clone().run_announcer());
        spawn("lease_keeper", cluster.clone().run_lease_keeper(subscriber));
    }
    alert_worker
}

/// Spawns `task` under a span naming it, so everything it logs says which task it was.
pub(super) fn spawn<F>(name: &'static str, task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(task.instrument(tracing::info_span!("task", task = name)))
}

/// What the other replicas say, handed to the fleet (commands, sessions, revocations, leases), the
/// settings, the lockout guard and the live event feed.
struct ReplicaSubscriber {
    fleet: Fleet,
    settings: SettingsService,
    protection: Protection,
    peer_events: mpsc::Sender<Vec<(i64, i64)>>,
}

impl Subscriber for ReplicaSubscriber {
    async fn command_forwarded(&self, cluster: &Cluster, id: String) {
        self.fleet.run_forwarded(cluster, &id).await;
    }

    fn session_replaced(&self, server: ServerId, generation: i64, reconnect: bool) {
        self.fleet.drop_replaced(server, generation, reconnect);
    }

    fn certificate_revoked(&self, serial: &str) {
        self.fleet.revoke_here(serial);
    }

    async fn settings_saved(&self) {
        if let Err(e) = self.settings.reload().await {
            tracing::warn!(error = %e, "cannot read the settings another replica saved");
        }
    }

    fn protected_changed(&self) {
        self.protection.changed_elsewhere();
    }

    fn events_committed(&self, ranges: Vec<(i64, i64)>) {
        if self.peer_events.try_send(ranges).is_err() {
            tracing::warn!(
                "live clients here fall behind the other replicas' events; they catch up from the database on reconnect"
            );
        }
    }

    async fn leases_renewed(&self, cluster: &Cluster, held: &HashMap<ServerId, i64>) {
        self.fleet.reconcile_leases(cluster, held).await;
    }
}
