//! A ban storm from one host against the storm breaker: 10,000 bans pushed through one agent's
//! relay (the path of fail2ban's action) as fast as it takes them, first with no sharing policy,
//! then with a policy that shares every ban with the two other hosts (whose fail2ban has no shared
//! jail installed, so that the hub's count of stored events is the storm's alone). It prints when the breaker
//! tripped (seconds after the storm began, and the bans stored by then) and the ingest rate of
//! both storms, side by side. Run with
//! `cargo test -p banhub-tests --test bench -- --ignored --nocapture storm::`
//! (the hub and agent of `target/debug`: `cargo build -p banhub -p banhub-agent` first; with
//! `BANHUB_BENCH_PROFILE=release`, those of `target/release`: `cargo build --release -p banhub -p
//! banhub-agent` first).

use std::time::{Duration, Instant};

use banhub_tests::agent::{AgentProcess, relay_addr, relay_secret};
use banhub_tests::client::ServerStatus;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::{ApiClient, TestFleet, TestHost};
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

const BANS: usize = 10_000;
/// Callbacks in flight at once.
const CLIENTS: usize = 32;
const DEADLINE: Duration = Duration::from_secs(600);

/// The hub's count of stored events (`banhub_events_ingested_total`).
async fn ingested(fleet: &TestFleet) -> u64 {
    let text = fleet
        .hub
        .client()
        .get(fleet.hub.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix("banhub_events_ingested_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

async fn pauses(api: &ApiClient) -> Vec<Value> {
    let (status, pauses) = api.get("/api/sharing/pauses").await;
    assert_eq!(status, StatusCode::OK, "{pauses}");
    pauses.as_array().cloned().unwrap_or_default()
}

/// What one storm came to.
struct Storm {
    pushed: Duration,
    stored: Duration,
    /// Seconds after the start the pause was seen, the bans stored by then, the shared bans the
    /// breaker counted at the trip, and the pause's reason.
    trip: Option<(f64, u64, u64, String)>,
}

/// Pushes `BANS` bans of distinct addresses (`10.<block>.x.y`) through `host`'s relay and waits
/// until the hub has stored them all, watching for a pause meanwhile.
async fn storm(fleet: &TestFleet, host: &TestHost, block: u8, watch_breaker: bool) -> Storm {
    let relay = relay_addr(&host.state_dir()).expect("relay address");
    let secret = relay_secret(&host.state_dir()).expect("relay secret");
    let client = reqwest::Client::new();
    let before = ingested(fleet).await;
    let started = Instant::now();
    let api = fleet.api();
    let watcher = watch_breaker.then(|| {
        let api = api.clone();
        let hub = fleet.hub.url("/metrics");
        let http = fleet.hub.client();
        tokio::spawn(async move {
            loop {
                let p = pauses(&api).await;
                if let Some(pause) = p.first() {
                    let at = started.elapsed().as_secs_f64();
                    let text = http.get(&hub).send().await.ok()?.text().await.ok()?;
                    let stored = text
                        .lines()
                        .find_map(|l| l.strip_prefix("banhub_events_ingested_total "))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .unwrap_or(0);
                    let counted = pause["sharedBans"].as_u64().unwrap_or(0);
                    let reason = pause["reason"].as_str().unwrap_or_default().to_owned();
                    return Some((at, stored.saturating_sub(before), counted, reason));
                }
                if started.elapsed() > DEADLINE {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    });
    let refused = futures::stream::iter(0..BANS)
        .map(|i| {
            let (client, secret) = (client.clone(), secret.clone());
            let ip = format!("10.{block}.{}.{}", i / 250, i % 250 + 1);
            async move {
                let body = json!({"ip": ip, "jail": "testauth", "hostname": "storm",
                                  "failures": 3, "logs": [format!("auth failure from {ip}")]});
                client
                    .post(format!("http://{relay}/api/ban"))
                    .header("X-Callback-Secret", &secret)
                    .json(&body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::OK)
            }
        })
        .buffer_unordered(CLIENTS)
        .filter(|ok| futures::future::ready(!ok))
        .count()
        .await;
    assert_eq!(refused, 0, "the relay refused callbacks");
    let pushed = started.elapsed();
    let want = before + BANS as u64;
    while ingested(fleet).await < want {
        assert!(
            started.elapsed() < DEADLINE,
            "the storm was not stored in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = started.elapsed();
    let trip = match watcher {
        Some(handle) => handle.await.expect("the watcher"),
        None => None,
    };
    Storm {
        pushed,
        stored,
        trip,
    }
}

fn rate(d: Duration) -> f64 {
    BANS as f64 / d.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn bench_a_storm_trips_the_breaker_while_ingest_keeps_its_rate() {
    let profile = std::env::var("BANHUB_BENCH_PROFILE").unwrap_or_else(|_| "debug".to_owned());
    let binaries = banhub_tests::process::target_dir().join(&profile);
    let mut hub = TestFleet::hub_builder();
    if profile != "debug" {
        hub = hub.binary(binaries.join("banhub"));
    }
    let hub = hub.start().expect("hub starts");
    let mut fleet = TestFleet::on(hub);
    for name in ["storm", "b", "c"] {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        fleet
            .add_host(name, sandbox, &[])
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    }
    if profile != "debug" {
        // The same enrolled agents, run from the profile's binary.
        for i in 0..fleet.hosts.len() {
            fleet.hosts[i].agent.stop().expect("the debug agent stops");
            fleet
                .wait_status(&fleet.hosts[i], ServerStatus::Offline)
                .await;
            let host = &mut fleet.hosts[i];
            host.agent = AgentProcess::start_binary(
                binaries.join("banhub-agent"),
                &host.state_dir(),
                &host.sandbox.socket_path(),
                &host.sandbox.conf_dir(),
                &[],
            )
            .expect("the agent starts");
        }
        for host in &fleet.hosts {
            fleet.wait_status(host, ServerStatus::Online).await;
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before: {}", load.trim());

    let source = &fleet.hosts[0];
    let quiet = storm(&fleet, source, 1, false).await;

    let (status, policy) = fleet
        .api()
        .post(
            "/api/sharing/policies",
            &json!({"name": "everywhere", "sources": {"all": true}, "targets": {"all": true},
                    "duration": {"mode": "fixed", "seconds": 3600}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{policy}");
    let shared = storm(&fleet, source, 2, true).await;
    let (tripped_at, stored_at_trip, counted, reason) = shared
        .trip
        .unwrap_or_else(|| panic!("the breaker did not trip\n{}", fleet.logs()));
    let (status, bans) = fleet.api().get("/api/sharing/bans?limit=1000").await;
    assert_eq!(status, StatusCode::OK, "{bans}");
    let recorded = bans.as_array().map_or(0, Vec::len);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    println!(
        "storm of {BANS} bans from one host through its relay, {CLIENTS} callbacks in flight \
         ({profile} hub and agents)"
    );
    println!(
        "  no policy:          pushed in {:.2} s, stored in {:.2} s: {:.0} bans/s ingested",
        quiet.pushed.as_secs_f64(),
        quiet.stored.as_secs_f64(),
        rate(quiet.stored)
    );
    println!(
        "  policy, breaker on: pushed in {:.2} s, stored in {:.2} s: {:.0} bans/s ingested \
         ({:.2}x the rate without a policy)",
        shared.pushed.as_secs_f64(),
        shared.stored.as_secs_f64(),
        rate(shared.stored),
        rate(shared.stored) / rate(quiet.stored)
    );
    println!(
        "  breaker tripped (pause seen by the API) {tripped_at:.2} s after the storm began, \
         {} bans of the storm stored by then; {counted} shared bans counted at the trip \
         (default limits, 2 targets per ban; {reason}); {recorded} shared bans recorded in all",
        stored_at_trip
    );
    println!("load average after: {}", load.trim());
    assert!(tripped_at < 60.0, "the breaker trips within its minute");
}
