//! Measurements of the spool and the relay on this machine (benchmarks, not timed tests: they assert
//! only correctness and print their figures). Run with
//! `cargo test -p banhub-tests --test bench -- --ignored --nocapture --test-threads 1 spool::`.

use std::time::{Duration, Instant};

use banhub_agent::relay::{LoopbackAddr, Relay, RelaySecret};
use banhub_agent::spool::{
    BanDuration, BanEvent, Event, JailName, Logs, Source, Spool, SpoolConfig,
};
use banhub_proto::rules::IpOrCidr;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

fn ban(i: u32) -> Event {
    Event::Ban(BanEvent {
        ip: IpOrCidr::parse(&format!("198.51.100.{}", i % 250 + 1)).expect("ip"),
        jail: JailName::parse("sshd").expect("jail"),
        hostname: "web-1".to_owned(),
        failures: 5,
        logs: Logs::capped(
            (0..5).map(|n| format!("Nov 22 23:42:3{n} web-1 sshd[1234]: Failed password for root from 198.51.100.7 port 22 ssh2")),
        ),
        ban_time: Some(1_790_000_000),
        ban_duration: Some(BanDuration::Seconds(600)),
        ban_count: Some(1),
        received_at_ms: 1_790_000_000_000,
        source: Source::Action,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn bench_append_latency_and_throughput() {
    let dir = TempDir::new_in(std::env::temp_dir()).expect("tempdir");
    let spool = Spool::open(dir.path(), SpoolConfig::default())
        .await
        .expect("spool");

    // One append at a time: every append pays a full write + fdatasync.
    let n = 2000;
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        spool.append(ban(i as u32)).await.expect("append");
        latencies.push(started.elapsed());
    }
    latencies.sort_unstable();
    println!(
        "sequential append (write + fdatasync): p50 {:?}, p99 {:?}, max {:?} over {n}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[n - 1]
    );

    // Many appenders at once: queued appends share one sync (group commit).
    for concurrency in [16u32, 256] {
        let per_task = 40_000 / concurrency;
        let started = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|t| {
                let spool = spool.clone();
                tokio::spawn(async move {
                    let mut worst = Duration::ZERO;
                    for i in 0..per_task {
                        let begun = Instant::now();
                        spool.append(ban(t * per_task + i)).await.expect("append");
                        worst = worst.max(begun.elapsed());
                    }
                    worst
                })
            })
            .collect();
        let mut worst = Duration::ZERO;
        for task in tasks {
            worst = worst.max(task.await.expect("task"));
        }
        let elapsed = started.elapsed();
        let total = f64::from(concurrency * per_task);
        println!(
            "{concurrency} concurrent appenders: {total} appends in {elapsed:?} = {:.0}/s, worst latency {worst:?}",
            total / elapsed.as_secs_f64()
        );
    }
    let head = spool.head().await.expect("head");
    assert_eq!(head.position.seq, 2000 + 40_000 + 256 * (40_000 / 256));
    println!("spool: {} bytes in {} segments", head.bytes, head.segments);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture"]
async fn bench_relay_callbacks_per_second() {
    let dir = TempDir::new().expect("tempdir");
    let spool = Spool::open(dir.path().join("spool"), SpoolConfig::default())
        .await
        .expect("spool");
    let secret = RelaySecret::generate();
    let listener = LoopbackAddr::new("127.0.0.1:0".parse().expect("addr"))
        .expect("loopback")
        .bind()
        .await
        .expect("bind");
    let url = format!("http://{}/api/ban", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    tokio::spawn(Relay::new(spool.clone(), secret.clone()).serve(listener, shutdown.clone()));
    let client = reqwest::Client::new();
    let body = serde_json::json!({
        "ip": "203.0.113.7", "jail": "sshd", "hostname": "web-1", "failures": 5,
        "logs": vec!["Nov 22 23:42:38 web-1 sshd[1234]: Failed password for root from 203.0.113.7 port 22 ssh2"; 5],
        "banTime": 1_790_000_000, "banDuration": 600, "banCount": 1
    })
    .to_string();

    for concurrency in [1u32, 64] {
        let per_task = if concurrency == 1 {
            1000
        } else {
            20_000 / concurrency
        };
        let started = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, url, body) = (client.clone(), url.clone(), body.clone());
                let secret = secret.expose().to_owned();
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    for _ in 0..per_task {
                        let begun = Instant::now();
                        let response = client
                            .post(&url)
                            .header("X-Callback-Secret", &secret)
                            .body(body.clone())
                            .send()
                            .await
                            .expect("send");
                        assert!(response.status().is_success());
                        latencies.push(begun.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("task"));
        }
        let elapsed = started.elapsed();
        latencies.sort_unstable();
        println!(
            "relay, {concurrency} concurrent clients: {} callbacks in {elapsed:?} = {:.0}/s, p50 {:?}, p99 {:?}",
            latencies.len(),
            latencies.len() as f64 / elapsed.as_secs_f64(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99)
        );
    }
    shutdown.cancel();
}
