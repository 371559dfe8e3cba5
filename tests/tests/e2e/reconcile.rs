//! Reconciliation against a real fail2ban: bans and unbans made behind the agent's back are
//! reported once, as observed; a fail2ban restart that restores its bans reports nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use banhub_agent::reconcile::{Belief, PassOutcome, ReconcileConfig, Reconciler};
use banhub_agent::spool::{Event, Source, Spool, SpoolConfig};
use banhub_tests::fail2ban::Fail2banSandbox;
use tempfile::TempDir;

fn config(sandbox: &Fail2banSandbox) -> ReconcileConfig {
    let mut config = ReconcileConfig::new(sandbox.socket_path(), None);
    config.confirm_delay = Duration::from_millis(200);
    config.timeout = Duration::from_secs(10);
    config
}

/// Every (kind, jail, ip, source) in the spool, oldest first.
async fn events(spool: &Spool) -> Vec<(String, String, String, Source)> {
    spool
        .pending(0, 1000)
        .await
        .expect("pending")
        .into_iter()
        .filter_map(|record| match record.event {
            Event::Ban(b) => Some((
                "ban".to_owned(),
                b.jail.to_string(),
                b.ip.to_string(),
                b.source,
            )),
            Event::Unban(b) => Some((
                "unban".to_owned(),
                b.jail.to_string(),
                b.ip.to_string(),
                b.source,
            )),
            Event::Gap(_) => None,
        })
        .collect()
}

fn observed(kind: &str, ip: &str) -> (String, String, String, Source) {
    (
        kind.to_owned(),
        "testauth".to_owned(),
        ip.to_owned(),
        Source::Observed,
    )
}

fn banned(sandbox: &Fail2banSandbox) -> String {
    sandbox
        .client(&["get", "testauth", "banned"])
        .expect("banned")
}

async fn open(state: &Path) -> (Spool, Belief) {
    let spool = Spool::open(state.join("spool"), SpoolConfig::default())
        .await
        .expect("spool");
    let belief = Belief::load(state).expect("belief");
    (spool, belief)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_what_the_action_missed_and_nothing_on_restart() {
    let mut sandbox = Fail2banSandbox::builder()
        .name("reconcile")
        .persistent_db(true)
        .start()
        .expect("sandbox");
    let state = TempDir::new().expect("state dir");
    // An existing ban before the agent ever ran: part of the baseline, never reported.
    sandbox
        .client(&["set", "testauth", "banip", "192.0.2.9"])
        .expect("ban");
    let (spool, belief) = open(state.path()).await;
    let mut reconciler = Reconciler::new(config(&sandbox), spool.clone(), belief);

    let first = reconciler.pass().await.expect("first pass");
    assert!(first.baseline, "{first:?}");
    assert!(events(&spool).await.is_empty());
    assert!(state.path().join("reconcile.json").exists());

    // Banned behind the agent's back → one observed ban, once.
    sandbox
        .client(&["set", "testauth", "banip", "192.0.2.5"])
        .expect("ban");
    let outcome = reconciler.pass().await.expect("pass");
    assert_eq!(
        outcome,
        PassOutcome {
            bans: 1,
            ..PassOutcome::default()
        }
    );
    assert_eq!(events(&spool).await, [observed("ban", "192.0.2.5")]);
    assert_eq!(
        reconciler.pass().await.expect("pass"),
        PassOutcome::default()
    );

    // Unbanned behind its back → one observed unban, once.
    sandbox
        .client(&["set", "testauth", "unbanip", "192.0.2.5"])
        .expect("unban");
    let outcome = reconciler.pass().await.expect("pass");
    assert_eq!(
        outcome,
        PassOutcome {
            unbans: 1,
            ..PassOutcome::default()
        }
    );
    assert_eq!(
        events(&spool).await,
        [observed("ban", "192.0.2.5"), observed("unban", "192.0.2.5")]
    );
    assert_eq!(
        reconciler.pass().await.expect("pass"),
        PassOutcome::default()
    );

    // fail2ban restarts (clean stop, start on the same database) and the agent restarts too:
    // the restored bans match the saved belief, so nothing is reported.
    sandbox
        .client(&["set", "testauth", "banip", "192.0.2.6"])
        .expect("ban");
    assert_eq!(reconciler.pass().await.expect("pass").bans, 1);
    drop(reconciler);
    spool.close().await;
    sandbox.restart().expect("fail2ban restarts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(banned(&sandbox).contains("192.0.2.6") && banned(&sandbox).contains("192.0.2.9")) {
        assert!(
            Instant::now() < deadline,
            "bans not restored: {}",
            banned(&sandbox)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (spool, belief) = open(state.path()).await;
    let before = events(&spool).await.len();
    let mut reconciler = Reconciler::new(config(&sandbox), spool.clone(), belief);
    for _ in 0..3 {
        let outcome = reconciler.pass().await.expect("pass after restart");
        assert_eq!(outcome, PassOutcome::default(), "no storm after a restart");
    }
    assert_eq!(events(&spool).await.len(), before);
    spool.close().await;
}

/// The run loop itself: a ban made while the agent runs is reported without a manual pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_loop_reports_periodically() {
    let sandbox = Fail2banSandbox::start("reconcile-run").expect("sandbox");
    let state = TempDir::new().expect("state dir");
    let (spool, belief) = open(state.path()).await;
    let mut config = config(&sandbox);
    config.interval = Some(Duration::from_millis(300));
    config.watch_interval = Duration::from_millis(200);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(Reconciler::new(config, spool.clone(), belief).run(shutdown.clone()));
    // The first pass records the baseline.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !state.path().join("reconcile.json").exists() {
        assert!(Instant::now() < deadline, "no baseline");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sandbox
        .client(&["set", "testauth", "banip", "192.0.2.7"])
        .expect("ban");
    while events(&spool).await.is_empty() {
        assert!(Instant::now() < deadline, "no observed ban");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(events(&spool).await, [observed("ban", "192.0.2.7")]);
    shutdown.cancel();
    task.await.expect("run loop");
    spool.close().await;
}
