//! From a log line on one real fail2ban host to the shared ban in another's fail2ban: a hub and
//! two hosts with the banhub action and the `banhub-shared` jail installed, a sharing policy from
//! every server to every other, and per round three failure lines for a new address appended to
//! host A's log. Timed from the append: A's ban action running (fail2ban's own detection), and B's
//! ban action running in the shared jail (the shared ban enforced); B's `banned` list is checked to
//! hold the address. A benchmark, not a timed test: it asserts only correctness and prints figures.
//! Run with `cargo test -p banhub-tests --test bench -- --ignored --nocapture sharing::`.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use banhub_tests::TestFleet;
use banhub_tests::agent::run_command;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::wait_until;
use serde_json::json;

const ROUNDS: usize = 20;
const DEADLINE: Duration = Duration::from_secs(30);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort_unstable();
    format!(
        "p50 {:.0?}, p90 {:.0?}, p99 {:.0?}, max {:.0?} over {}",
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples[samples.len() - 1],
        samples.len()
    )
}

/// Polls `path` until it holds `line`; the time since `from`.
fn wait_line(path: &std::path::Path, line: &str, from: Instant) -> Duration {
    loop {
        if std::fs::read_to_string(path).is_ok_and(|text| text.contains(line)) {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < DEADLINE,
            "no `{line}` in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn bench_log_line_to_shared_ban_on_another_host() {
    let hub = TestFleet::hub_builder().start().expect("hub starts");
    let mut fleet = TestFleet::on(hub);
    for name in ["a", "b"] {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        let host = fleet.add_host(name, sandbox, &[]).await.expect("online");
        let relay = host.state_dir().join("relay.json");
        wait_until(DEADLINE, "the relay", || relay.exists()).expect("relay.json");
        let (conf, state, socket) = (
            host.sandbox.conf_dir(),
            host.state_dir(),
            host.sandbox.socket_path(),
        );
        let args: Vec<&OsStr> = vec![
            OsStr::new("install-action"),
            OsStr::new("--config-dir"),
            conf.as_os_str(),
            OsStr::new("--state-dir"),
            state.as_os_str(),
            OsStr::new("--fail2ban-socket"),
            socket.as_os_str(),
        ];
        let out = run_command(&args, &[]).expect("install-action runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (status, policy) = fleet
        .api()
        .post(
            "/api/sharing/policies",
            &json!({"name": "bench", "sources": {"all": true}, "targets": {"all": true},
                    "duration": {"mode": "fixed", "seconds": 3600}}),
        )
        .await;
    assert!(status.is_success(), "{policy}");
    let (a, b) = (&fleet.hosts[0], &fleet.hosts[1]);
    let (mut origin, mut shared) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 1 {
        let ip = format!("203.0.113.{}", 100 + round);
        let started = Instant::now();
        a.sandbox
            .append_failures(&a.sandbox.log_path("testauth"), &ip, 3)
            .expect("log lines");
        let at_origin = wait_line(
            &a.sandbox.actions_path(),
            &format!("ban testauth {ip} "),
            started,
        );
        let at_target = wait_line(
            &b.sandbox.actions_path(),
            &format!("ban banhub-shared {ip} "),
            started,
        );
        let banned = b
            .sandbox
            .client(&["get", "banhub-shared", "banned"])
            .expect("b answers");
        assert!(banned.contains(&ip), "{banned}");
        // The first round warms up.
        if round > 0 {
            origin.push(at_origin);
            shared.push(at_target);
        }
    }
    let hub_part: Vec<Duration> = shared
        .iter()
        .zip(&origin)
        .map(|(s, o)| s.saturating_sub(*o))
        .collect();
    println!(
        "log line → origin's ban action (fail2ban's detection): {}",
        summary(origin)
    );
    println!(
        "log line → target's shared-jail ban action: {}",
        summary(shared)
    );
    println!(
        "origin's ban action → target's shared-jail ban action: {}",
        summary(hub_part)
    );
}
