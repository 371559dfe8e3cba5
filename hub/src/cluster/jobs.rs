//! Singleton jobs: work that must run on one replica at a time (event retention, scheduled delivery
//! probes, the alert worker, the sweeper that expires fleet-action targets and purges leftovers). On PostgreSQL each
//! job is led by the replica whose dedicated connection holds the job's advisory lock; the others
//! try again now and then, and take over when the leader's connection (and with it the lock) goes
//! away. On SQLite jobs simply run. Each replica's terms as leader, and the passes of jobs that report
//! them, are counted in `cluster_jobs`: that is how an operator (and the tests) see who ran what.

use std::future::Future;
use std::time::Duration;

use chrono::Utc;

use super::Cluster;
use crate::store::cluster::JobEvent;

/// Event retention (`Events::run_retention`, or the settings-driven loop around it).
pub const RETENTION: &str = "retention";
/// Scheduled delivery probes.
pub const PROBES: &str = "probes";
/// The alert worker: matching committed events against the rules, and sending the deliveries. On
/// every replica at once, each would read every event back, they would keep taking the shared
/// cursor from each other (and rebuild their spike windows each time), and a replica starting would
/// put the others' deliveries in flight back to pending.
pub const ALERTS: &str = "alerts";
/// The sweeper: fleet-action deadlines, forwarded-command leftovers, stale leases, old tokens.
pub const SWEEPER: &str = "sweeper";
/// The sharing engine: matching committed bans against the sharing policies, once across replicas.
pub const SHARING: &str = "sharing";
/// The lifter of timed bans: each ban lifted once, at its time, across replicas.
pub const TIMED_BANS: &str = "timed_bans";

/// How long a running job has to end by itself once the hub stops.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often a replica that does not lead a job checks whether it may.
const TAKE_OVER_EVERY: Duration = Duration::from_secs(2);
/// How often the leader checks that its lock connection is alive.
const CHECK_LOCK_EVERY: Duration = Duration::from_secs(2);
/// Forwarded commands are answered within seconds; rows this old were abandoned.
const FORWARDED_KEEP: Duration = Duration::from_secs(600);
/// Leases and replica rows this far past their time belong to replicas long gone.
const STALE_KEEP: Duration = Duration::from_secs(24 * 3600);
/// Enrollment tokens and revoked certificates are kept this long past their expiry, so a late
/// attempt still gets a precise refusal.
const EXPIRED_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// The sweeper purges leftovers every this many passes.
const PURGE_EVERY: u64 = 60;

/// The advisory-lock key of a job: stable across replicas and versions.
fn lock_key(name: &str) -> i64 {
    let digest = crate::pki::sha256_hex(format!("banhub-job:{name}").as_bytes());
    i64::from_str_radix(&digest[..15], 16).unwrap_or(0)
}

/// Runs `job` whenever this replica holds the job's lock (always, on SQLite), until shutdown or
/// until `job` returns.
#[tracing::instrument(skip_all, fields(job = name))]
pub async fn run_singleton<F, Fut>(cluster: Cluster, name: &'static str, job: F)
where
    F: Fn(Cluster) -> Fut,
    Fut: Future<Output = ()>,
{
    let shutdown = cluster.0.shutdown.clone();
    if !cluster.is_shared() {
        record(&cluster, name, JobEvent::Leads).await;
        let job = job(cluster.clone());
        tokio::pin!(job);
        tokio::select! {
            () = shutdown.cancelled() => finish(job).await,
            () = &mut job => {}
        }
        return;
    }
    let key = lock_key(name);
    // One connection per job, kept while waiting for the lock: trying again costs a query, not a
    // new connection.
    let mut conn = None;
    loop {
        if conn.is_none() {
            match cluster.store().lock_connection().await {
                Ok(Some(c)) => conn = Some(c),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open a connection for the job's lock")
                }
            }
        }
        if let Some(c) = conn.as_mut() {
            match c.try_lock(key).await {
                Ok(true) => {
                    tracing::info!("this replica leads the job now");
                    record(&cluster, name, JobEvent::Leads).await;
                    let watch = async {
                        loop {
                            tokio::time::sleep(CHECK_LOCK_EVERY).await;
                            if !c.alive().await {
                                return;
                            }
                        }
                    };
                    let job = job(cluster.clone());
                    tokio::pin!(job);
                    tokio::select! {
                        () = shutdown.cancelled() => return finish(job).await,
                        () = &mut job => return,
                        () = watch => tracing::warn!("lost the job's lock connection; another replica may take over"),
                    }
                    conn = None;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot try the job's lock");
                    conn = None;
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(TAKE_OVER_EVERY) => {}
        }
    }
}

/// Gives a job that was running when the hub began to stop [`STOP_GRACE`] to end by itself (the
/// jobs watch the shutdown token too, and end after the step under way: an alert being sent is
/// then recorded as sent rather than sent again at the next start).
async fn finish(job: std::pin::Pin<&mut impl Future<Output = ()>>) {
    if tokio::time::timeout(STOP_GRACE, job).await.is_err() {
        tracing::warn!("the job did not end in time; stopping it");
    }
}

async fn record(cluster: &Cluster, name: &str, event: JobEvent) {
    if let Err(e) = cluster
        .store()
        .record_job(name, cluster.replica(), event)
        .await
    {
        tracing::warn!(error = %e, "could not record a job's progress");
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The sweeper job ([`SWEEPER`]): expires fleet-action targets every sweep interval and purges
/// leftovers now and then, until shutdown.
pub async fn sweeper(cluster: Cluster) {
    let mut ticker = tokio::time::interval(cluster.sweep_interval());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pass: u64 = 0;
    loop {
        tokio::select! {
            () = cluster.0.shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let store = cluster.store();
        match store.expire_targets().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                targets = n,
                "fleet-action targets expired: their agents did not come back before the deadline"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot expire fleet-action targets"),
        }
        // The purges are cheap but need not run every few seconds.
        if pass.is_multiple_of(PURGE_EVERY) {
            let now = Utc::now().timestamp_millis();
            let purged = async {
                let forwarded = store
                    .purge_forwarded_commands(now - ms(FORWARDED_KEEP))
                    .await?;
                let stale = store.purge_stale_cluster_rows(ms(STALE_KEEP)).await?;
                let expired = store
                    .purge_expired_enrollment(now - ms(EXPIRED_KEEP))
                    .await?;
                Ok::<_, crate::store::StoreError>(forwarded + stale + expired)
            }
            .await;
            match purged {
                Ok(0) => {}
                Ok(n) => tracing::debug!(rows = n, "sweeper purged leftovers"),
                Err(e) => tracing::warn!(error = %e, "sweeper could not purge leftovers"),
            }
        }
        pass += 1;
        record(&cluster, SWEEPER, JobEvent::Pass).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_are_stable_and_distinct() {
        assert_eq!(lock_key(RETENTION), lock_key("retention"));
        assert_ne!(lock_key(RETENTION), lock_key(SWEEPER));
        assert_ne!(lock_key(PROBES), lock_key(SWEEPER));
        assert!(lock_key(SWEEPER) > 0);
    }
}
