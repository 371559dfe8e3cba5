//! Measurements of the agent's command layer against a real fail2ban holding 50 jails of 10,000
//! bans each (a benchmark, not a timed test: it asserts only correctness and prints figures).
//! Run with
//! `cargo test --release -p banhub-tests --test agent_commands_bench -- --ignored --nocapture`.
//!
//! What it measures, each through `commands::execute` with the context `banhub-agent run`
//! builds: GetStatus (`status` + `status <jail> short` for every jail on one kept connection),
//! the same numbers gathered the old way with one `fail2ban-client` process per jail, and pages
//! of ListBanned on a 10,000-ban jail: the first page of a jail not browsed before (fetches the
//! list with times), the first page after bans changed (`get <jail> banned` merged into the
//! kept list), and the following ones (served from the kept list).

use std::path::PathBuf;
use std::process::Command as Process;
use std::time::{Duration, Instant};

use banhub_agent::config::{Fail2banSettings, Settings};
use banhub_agent::fail2ban::Fail2banSocket;
use banhub_agent::link::commands::{self, Context};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{Command, ListBanned};
use banhub_tests::Fail2banSandbox;

const JAILS: usize = 50;
const BANS: usize = 10_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort_unstable();
    format!(
        "p50 {:.2?}, p90 {:.2?}, max {:.2?} over {}",
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        samples[samples.len() - 1],
        samples.len()
    )
}

fn command(kind: Kind) -> Command {
    Command {
        id: uuid::Uuid::new_v4().to_string(),
        deadline_unix_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        requested_by: "bench".to_owned(),
        kind: Some(kind),
    }
}

async fn run(context: &Context, kind: Kind) -> (Duration, Outcome) {
    let started = Instant::now();
    let result = commands::execute(context, command(kind)).await;
    (started.elapsed(), result.outcome.expect("outcome"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn bench_status_and_banned_pages() {
    let setup = Instant::now();
    let sandbox = Fail2banSandbox::builder()
        .name("cmd-bench")
        .extra_jails(JAILS)
        .start()
        .expect("sandbox");
    let jails: Vec<String> = sandbox.jails()[2..].to_vec();
    let mut socket = Fail2banSocket::connect(&sandbox.socket_path(), Duration::from_secs(120))
        .await
        .expect("socket");
    for (j, jail) in jails.iter().enumerate() {
        // 198.18.0.0/15 (benchmarking addresses): 10,000 per jail, distinct across jails.
        let ips: Vec<String> = (0..BANS)
            .map(|i| {
                let n = j * BANS + i;
                format!("198.{}.{}.{}", 18 + n / 65_536 % 2, n / 256 % 256, n % 256)
            })
            .collect();
        let mut args = vec!["set", jail.as_str(), "banip"];
        args.extend(ips.iter().map(String::as_str));
        let banned = socket.call(&args).await.expect("banip");
        assert_eq!(banned.as_int(), Some(BANS as i64), "{jail}");
    }
    drop(socket);
    println!(
        "setup: {} jails x {BANS} bans in {:.1?}",
        jails.len(),
        setup.elapsed()
    );

    let state = tempfile::tempdir().expect("state");
    let context = Context::new(&Settings {
        state_dir: state.path().to_owned(),
        fail2ban: Fail2banSettings {
            socket: sandbox.socket_path(),
            config_dir: sandbox.conf_dir(),
            client: PathBuf::from("/usr/bin/fail2ban-client"),
            timeout_ms: 30_000,
            ..Fail2banSettings::default()
        },
        ..Settings::default()
    });

    // GetStatus through the command layer.
    let mut samples = Vec::new();
    let mut fail2ban_side = Vec::new();
    for _ in 0..200 {
        let (elapsed, outcome) = run(&context, Kind::Status(Default::default())).await;
        let Outcome::Status(status) = outcome else {
            panic!("expected a status, got {outcome:?}");
        };
        assert_eq!(status.jails.len(), JAILS + 2);
        assert!(
            status
                .jails
                .iter()
                .filter(|j| j.name.starts_with("extra"))
                .all(|j| j.currently_banned == BANS as u64)
        );
        samples.push(elapsed);
        fail2ban_side.push(Duration::from_micros(status.fail2ban_latency_us));
    }
    let status_p50 = {
        let mut s = samples.clone();
        s.sort_unstable();
        percentile(&s, 0.5)
    };
    println!(
        "GetStatus ({} jails, {} bans): {}",
        JAILS + 2,
        JAILS * BANS,
        summary(samples)
    );
    println!("  of which fail2ban's answers: {}", summary(fail2ban_side));

    // The same through a new connection for every command (what a pool-less agent does).
    let mut fresh = Vec::new();
    for _ in 0..50 {
        context.fail2ban().clear();
        let (elapsed, outcome) = run(&context, Kind::Status(Default::default())).await;
        assert!(matches!(outcome, Outcome::Status(_)));
        fresh.push(elapsed);
    }
    println!(
        "GetStatus on a new connection each time: {}",
        summary(fresh)
    );

    // The same numbers the old way: one fail2ban-client process per call.
    let mut old_way = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let client = |args: &[&str]| {
            let output = Process::new("/usr/bin/fail2ban-client")
                .arg("-s")
                .arg(sandbox.socket_path())
                .args(args)
                .output()
                .expect("fail2ban-client");
            assert!(output.status.success());
        };
        client(&["status"]);
        for jail in sandbox.jails() {
            client(&["status", jail, "short"]);
        }
        old_way.push(started.elapsed());
    }
    let old_p50 = {
        let mut s = old_way.clone();
        s.sort_unstable();
        percentile(&s, 0.5)
    };
    println!(
        "status with one fail2ban-client per jail: {} -> {:.0}x slower",
        summary(old_way),
        old_p50.as_secs_f64() / status_p50.as_secs_f64()
    );

    // ListBanned on a 10,000-ban jail.
    let jail = jails[0].clone();
    let page = |offset: u32, search: &str| {
        Kind::ListBanned(ListBanned {
            jail: jail.clone(),
            search: search.to_owned(),
            offset,
            limit: 50,
        })
    };
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for round in 0..10 {
        // Each round starts after a change (a ban and its unban), so the first page fetches.
        let ip = format!("203.0.113.{round}");
        let mut socket = Fail2banSocket::connect(&sandbox.socket_path(), Duration::from_secs(10))
            .await
            .expect("socket");
        socket.ban(&jail, &ip).await.expect("ban");
        socket.unban(&jail, &ip).await.expect("unban");
        let (elapsed, outcome) = run(&context, page(0, "")).await;
        let Outcome::Banned(first) = outcome else {
            panic!("expected a page, got {outcome:?}");
        };
        assert_eq!((first.total, first.entries.len()), (BANS as u64, 50));
        cold.push(elapsed);
        for n in 1..20u32 {
            let (elapsed, outcome) = run(&context, page(n * 50, "")).await;
            assert!(matches!(outcome, Outcome::Banned(p) if p.entries.len() == 50));
            warm.push(elapsed);
        }
    }
    println!("ListBanned first page after a change: {}", summary(cold));
    println!("ListBanned next pages: {}", summary(warm));
    // A jail nobody browsed yet: the first page fetches the list with times.
    let mut first = Vec::new();
    for other in &jails[1..11] {
        let (elapsed, outcome) = run(
            &context,
            Kind::ListBanned(ListBanned {
                jail: other.clone(),
                limit: 50,
                ..Default::default()
            }),
        )
        .await;
        let Outcome::Banned(page) = outcome else {
            panic!("expected a page, got {outcome:?}");
        };
        assert!(page.entries.iter().all(|e| e.banned_at_unix > 0));
        first.push(elapsed);
    }
    println!(
        "ListBanned first page of a jail not browsed before: {}",
        summary(first)
    );
    let mut searches = Vec::new();
    for search in ["198.18.1", "198.18.0.0/24", "0.7"] {
        for _ in 0..20 {
            let (elapsed, outcome) = run(&context, page(0, search)).await;
            assert!(
                matches!(outcome, Outcome::Banned(p) if p.total > 0),
                "{search}"
            );
            searches.push(elapsed);
        }
    }
    println!(
        "ListBanned searches (substring, CIDR): {}",
        summary(searches)
    );

    // The raw socket calls behind them, for reference.
    let mut socket = Fail2banSocket::connect(&sandbox.socket_path(), Duration::from_secs(10))
        .await
        .expect("socket");
    let mut banned = Vec::new();
    let mut with_time = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        assert_eq!(socket.banned(&jail).await.expect("banned").len(), BANS);
        banned.push(started.elapsed());
        let started = Instant::now();
        assert_eq!(
            socket
                .banned_with_time(&jail)
                .await
                .expect("with time")
                .len(),
            BANS
        );
        with_time.push(started.elapsed());
    }
    println!("socket `get <jail> banned` (10,000): {}", summary(banned));
    println!(
        "socket `get <jail> banip --with-time` (10,000, parsed): {}",
        summary(with_time)
    );
}
