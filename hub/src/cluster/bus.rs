//! The replica's notification tasks: the `LISTEN` loop that hands notifications (forwarded commands
//! to run, answers to wake, sessions to drop, revocations, new settings, other replicas' events) to
//! the [`Subscriber`], and the announcer that sends this replica's committed event ids in batches.
//! `app` starts both, on PostgreSQL only.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use super::{
    CLUSTER_CHANNEL, Cluster, EVENTS_CHANNEL, PROTECTED_NOTICE, SETTINGS_NOTICE, Subscriber,
    channel_of, parse_ranges,
};
use crate::domain::ServerId;
use crate::store::cluster::Notice;

/// How long the announcer gathers committed event ids before it notifies.
const ANNOUNCE_GATHER: Duration = Duration::from_millis(10);
/// Pause before listening again after the listening connection failed.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

impl Cluster {
    /// Listens for the other replicas' notifications and hands each to `subscriber`, until
    /// shutdown; listens again whenever the connection fails.
    pub async fn run_listener<S: Subscriber>(self, subscriber: Arc<S>) {
        listen(self, subscriber).await;
    }

    /// Sends the ids of events committed here to the other replicas, until shutdown.
    pub async fn run_announcer(self) {
        announce(self).await;
    }
}

async fn listen<S: Subscriber>(cluster: Cluster, subscriber: Arc<S>) {
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
        resync(&cluster, &subscriber);
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => return,
                notice = listener.recv() => notice,
            };
            match notice {
                Ok(Notice::Message { channel, payload }) => {
                    if channel == mine {
                        direct(&cluster, &subscriber, &payload);
                    } else if channel == EVENTS_CHANNEL {
                        peer_events(&cluster, subscriber.as_ref(), &payload);
                    } else if channel == CLUSTER_CHANNEL {
                        if let Some(serial) = payload.strip_prefix("revoke ") {
                            subscriber.certificate_revoked(serial);
                        } else if payload == SETTINGS_NOTICE {
                            reload_settings(&subscriber);
                        } else if payload == PROTECTED_NOTICE {
                            subscriber.protected_changed();
                        }
                    }
                }
                Ok(Notice::Reconnected) => {
                    tracing::warn!("the notification connection was lost and is back; catching up");
                    resync(&cluster, &subscriber);
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
fn direct<S: Subscriber>(cluster: &Cluster, subscriber: &Arc<S>, payload: &str) {
    if let Some(id) = payload.strip_prefix("run:") {
        run_forwarded(cluster, subscriber, id.to_owned());
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
                subscriber.session_replaced(server, generation, reconnect);
            }
            None => tracing::warn!(%payload, "an unreadable drop notification"),
        }
    } else {
        tracing::warn!(%payload, "an unknown notification on this replica's channel");
    }
}

/// Runs a forwarded command in its own task, so a slow agent holds up no other notification.
fn run_forwarded<S: Subscriber>(cluster: &Cluster, subscriber: &Arc<S>, id: String) {
    let cluster = cluster.clone();
    let subscriber = subscriber.clone();
    let span = tracing::info_span!("forwarded_command", command = %id);
    tokio::spawn(async move { subscriber.command_forwarded(&cluster, id).await }.instrument(span));
}

fn peer_events(cluster: &Cluster, subscriber: &impl Subscriber, payload: &str) {
    let Some((tag, ranges)) = parse_ranges(payload) else {
        tracing::warn!(%payload, "an unreadable events notification");
        return;
    };
    // This replica published its own events when it committed them.
    if tag == cluster.0.tag {
        return;
    }
    subscriber.events_committed(ranges);
}

/// Takes the settings another replica saved (a no-op when this one has them already).
fn reload_settings<S: Subscriber>(subscriber: &Arc<S>) {
    let subscriber = subscriber.clone();
    tokio::spawn(async move { subscriber.settings_saved().await }.in_current_span());
}

/// Catches up with what was sent while nobody listened: new settings, answers waited for, and the
/// commands forwarded here.
fn resync<S: Subscriber>(cluster: &Cluster, subscriber: &Arc<S>) {
    reload_settings(subscriber);
    subscriber.protected_changed();
    cluster.wake_all();
    let cluster = cluster.clone();
    let subscriber = subscriber.clone();
    let catch_up = async move {
        match cluster
            .store()
            .pending_forwarded_commands(cluster.replica())
            .await
        {
            Ok(ids) => {
                for id in ids {
                    run_forwarded(&cluster, &subscriber, id);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the commands forwarded to this replica")
            }
        }
    };
    tokio::spawn(catch_up.in_current_span());
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
