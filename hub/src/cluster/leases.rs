//! The lease keeper: every third of the lease lifetime this replica says it is alive, extends every
//! lease it holds in one statement, and compares the leases with its live sessions, so a missed
//! notification never leaves two replicas serving one agent for longer than that.

use std::sync::Arc;

use super::{Cluster, Subscriber};

impl Cluster {
    /// Keeps this replica's heartbeat and leases, and has `subscriber` reconcile its sessions with
    /// them, until shutdown.
    pub async fn run_lease_keeper<S: Subscriber>(self, subscriber: Arc<S>) {
        keep(self, subscriber).await;
    }
}

async fn keep<S: Subscriber>(cluster: Cluster, subscriber: Arc<S>) {
    let shutdown = cluster.0.shutdown.clone();
    let period = (cluster.0.lease_ttl / 3).max(std::time::Duration::from_millis(100));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let store = cluster.store();
        if let Err(e) = store
            .replica_heartbeat(cluster.replica(), cluster.0.started_at)
            .await
        {
            tracing::warn!(error = %e, "could not record this replica's heartbeat");
        }
        if let Err(e) = store
            .renew_leases(cluster.replica(), cluster.ttl_ms())
            .await
        {
            tracing::warn!(error = %e, "could not renew this replica's agent leases; they expire if this lasts");
            continue;
        }
        match store.leases_of(cluster.replica()).await {
            Ok(held) => subscriber.leases_renewed(&cluster, &held).await,
            Err(e) => tracing::warn!(error = %e, "could not read this replica's agent leases"),
        }
    }
}

impl Cluster {
    /// Leaves the cluster on a graceful stop: the leases go at once, so commands for these agents
    /// are refused as offline (not waited for) until the agents reconnect to another replica.
    pub async fn leave(&self) {
        if !self.0.shared {
            return;
        }
        if let Err(e) = self.0.store.clear_leases_of(&self.0.replica).await {
            tracing::warn!(error = %e, "could not release this replica's leases; they expire");
        }
    }
}
