//! The replica's background tasks: the `LISTEN` loop that dispatches notifications (commands to run,
//! answers to wake, sessions to drop, revocations, other replicas' events), the announcer that sends
//! this replica's committed event ids in batches, the lease keeper, and the sweeper job.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{
    CLUSTER_CHANNEL, Cluster, EVENTS_CHANNEL, SETTINGS_NOTICE, channel_of, jobs, leases,
    parse_ranges,
};
use crate::domain::ServerId;
use crate::events::Events;
use crate::fleet::Fleet;
use crate::settings::SettingsService;
use crate::store::cluster::Notice;

/// Batches of other replicas' event ids waiting to be read and published here.
const FEED_QUEUE: usize = 4096;
/// How long the announcer gathers committed event ids before it notifies.
const ANNOUNCE_GATHER: Duration = Duration::from_millis(10);
/// Pause before listening again after the listening connection failed.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

/// Starts every background task of this replica: the sweeper job and the fleet's own tasks, and on
/// PostgreSQL the listener, the announcer and the lease keeper (on SQLite there is nobody to talk
/// to). Other singleton jobs are started where they are defined, through `jobs::run_singleton`.
pub fn spawn_background(
    cluster: &Cluster,
    fleet: &Fleet,
    events: &Events,
    settings: &SettingsService,
) {
    jobs::spawn_standard(cluster);
    crate::fleet::spawn_background(fleet.clone());
    if !cluster.is_shared() {
        return;
    }
    events.attach_cluster(cluster.clone());
    let (feed, feed_rx) = mpsc::channel(FEED_QUEUE);
    tokio::spawn(events.clone().run_peer_feed(feed_rx));
    tokio::spawn(listen(
        cluster.clone(),
        fleet.clone(),
        settings.clone(),
        feed,
    ));
    tokio::spawn(announce(cluster.clone()));
    tokio::spawn(leases::keep(cluster.clone(), fleet.clone()));
}

async fn listen(
    cluster: Cluster,
    fleet: Fleet,
    settings: SettingsService,
    feed: mpsc::Sender<Vec<(i64, i64)>>,
) {
    let shutdown = cluster.0.shutdown.clone();
    let mine = channel_of(cluster.replica());
    let channels = vec![
        mine.clone(),
        EVENTS_CHANNEL.to_owned(),
        CLUSTER_CHANNEL.to_owned(),
    ];
    loop {
        let mut listener = match cluster.store().listen(&channels).await {
            Ok(Some(listener)) => listener,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for notifications from the other replicas; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RELISTEN_AFTER) => continue,
                }
            }
        };
        // Whatever was sent while nobody listened: commands waiting here, answers waited for,
        // settings saved elsewhere.
        resync(&cluster, &fleet, &settings);
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => return,
                notice = listener.recv() => notice,
            };
            match notice {
                Ok(Notice::Message { channel, payload }) => {
                    if channel == mine {
                        direct(&cluster, &fleet, &payload);
                    } else if channel == EVENTS_CHANNEL {
                        peer_events(&cluster, &feed, &payload);
                    } else if channel == CLUSTER_CHANNEL {
                        if let Some(serial) = payload.strip_prefix("revoke ") {
                            fleet.revoke_here(serial);
                        } else if payload == SETTINGS_NOTICE {
                            reload_settings(&settings);
                        }
                    }
                }
                Ok(Notice::Reconnected) => {
                    tracing::warn!("the notification connection was lost and is back; catching up");
                    resync(&cluster, &fleet, &settings);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the notification connection failed; listening again");
                    break;
                }
            }
        }
    }
}

/// A notification on this replica's own channel.
fn direct(cluster: &Cluster, fleet: &Fleet, payload: &str) {
    if let Some(id) = payload.strip_prefix("run:") {
        let fleet = fleet.clone();
        let cluster = cluster.clone();
        let id = id.to_owned();
        tokio::spawn(async move { fleet.run_relayed(&cluster, &id).await });
    } else if let Some(id) = payload.strip_prefix("done:") {
        cluster.wake(id);
    } else if let Some(rest) = payload.strip_prefix("drop:") {
        let mut parts = rest.split(':');
        let parsed = (|| {
            let server = ServerId::parse(parts.next()?).ok()?;
            let generation: i64 = parts.next()?.parse().ok()?;
            let reconnect = parts.next()? != "0";
            Some((server, generation, reconnect))
        })();
        match parsed {
            Some((server, generation, reconnect)) => {
                fleet.drop_replaced(server, generation, reconnect);
            }
            None => tracing::warn!(%payload, "an unreadable drop notification"),
        }
    } else {
        tracing::warn!(%payload, "an unknown notification on this replica's channel");
    }
}

fn peer_events(cluster: &Cluster, feed: &mpsc::Sender<Vec<(i64, i64)>>, payload: &str) {
    let Some((tag, ranges)) = parse_ranges(payload) else {
        tracing::warn!(%payload, "an unreadable events notification");
        return;
    };
    // This replica published its own events when it committed them.
    if tag == cluster.0.tag {
        return;
    }
    if feed.try_send(ranges).is_err() {
        tracing::warn!(
            "live clients here fall behind the other replicas' events; they catch up from the database on reconnect"
        );
    }
}

/// Takes the settings another replica saved (a no-op when this one has them already).
fn reload_settings(settings: &SettingsService) {
    let settings = settings.clone();
    tokio::spawn(async move {
        if let Err(e) = settings.reload().await {
            tracing::warn!(error = %e, "cannot read the settings another replica saved");
        }
    });
}

fn resync(cluster: &Cluster, fleet: &Fleet, settings: &SettingsService) {
    reload_settings(settings);
    cluster.wake_all();
    let cluster = cluster.clone();
    let fleet = fleet.clone();
    tokio::spawn(async move {
        match cluster
            .store()
            .pending_relayed_commands(cluster.replica())
            .await
        {
            Ok(ids) => {
                for id in ids {
                    let fleet = fleet.clone();
                    let cluster = cluster.clone();
                    tokio::spawn(async move { fleet.run_relayed(&cluster, &id).await });
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the commands relayed to this replica")
            }
        }
    });
}

/// Sends the ids of events committed here to the other replicas, merging what piled up meanwhile
/// into as few notifications as fit.
async fn announce(cluster: Cluster) {
    let Some(mut rx) = super::lock(&cluster.0.announce_rx).take() else {
        return;
    };
    let shutdown = cluster.0.shutdown.clone();
    loop {
        let mut ids = tokio::select! {
            () = shutdown.cancelled() => return,
            ids = rx.recv() => match ids { Some(ids) => ids, None => return },
        };
        // A moment's wait gathers the commits of a busy hub into one notification.
        tokio::time::sleep(ANNOUNCE_GATHER).await;
        while ids.len() < 100_000 {
            match rx.try_recv() {
                Ok(more) => ids.extend(more),
                Err(_) => break,
            }
        }
        for payload in super::ranges_payloads(&cluster.0.tag, ids) {
            if let Err(e) = cluster.store().notify(EVENTS_CHANNEL, &payload).await {
                tracing::warn!(error = %e, "could not announce committed events to the other replicas");
            }
        }
    }
}
