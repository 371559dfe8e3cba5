//! Benchmark of a blocklist feed: a hub over a store holding `--entries` bans in force serves the
//! feed's file in full and as a 304 (`If-None-Match`), beside a static file of the same hub (the
//! UI's script, embedded in the binary) in full and as a 304, as the floor. Prints its figures.
//! With `--history`, the store also holds that many older bans whose time is over (of other
//! addresses), and the time from the feed's creation to its first rendering shows what they cost.
//!
//! `cargo run --release -p banhub-bench --bin feeds -- --profile release --entries 100000`
//! (build the hub first: `cargo build --release -p banhub`).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use banhub::domain::events::{
    BanDuration, BanFacts, EventBody, EventSource, IpOrCidr, JailName, Logs, NewEvent,
};
use banhub::domain::{AgentId, Labels, NewServer, ServerName};
use banhub::store::Store;
use banhub_bench::measure::{self, Summary, ms};
use banhub_tests::hub::HubProcess;
use chrono::Utc;
use clap::Parser;
use reqwest::StatusCode;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(about = "A blocklist feed of many entries: full responses and 304s beside a static file")]
struct Args {
    /// Bans in force, each of a distinct address.
    #[arg(long, default_value_t = 100_000)]
    entries: u32,
    /// Older bans whose time is over, stored before the bans in force.
    #[arg(long, default_value_t = 0)]
    history: u32,
    /// Timed full responses per file.
    #[arg(long, default_value_t = 200)]
    full_rounds: usize,
    /// Timed 304s per file.
    #[arg(long, default_value_t = 2000)]
    not_modified_rounds: usize,
    /// Which build of banhub to drive: `debug` or `release`.
    #[arg(long, default_value = "debug")]
    profile: String,
}

/// The `i`-th banned address: distinct, spread over 11.0.0.0/8 with a gap between neighbours so
/// no two merge.
fn address(i: u32) -> IpOrCidr {
    let base: u32 = 11 << 24;
    let ip = std::net::Ipv4Addr::from(base + i * 2);
    IpOrCidr::Ip(std::net::IpAddr::V4(ip))
}

/// The `i`-th address of the history: distinct, in 12.0.0.0/8 and up, never one of [`address`]'s.
fn old_address(i: u32) -> IpOrCidr {
    let ip = std::net::Ipv4Addr::from((12 << 24) + i);
    IpOrCidr::Ip(std::net::IpAddr::V4(ip))
}

async fn seed(url: &str, entries: u32, history: u32) -> anyhow::Result<()> {
    let store = Store::connect(url, 4).await?;
    let server = store
        .create_server(NewServer {
            name: ServerName::parse("edge-1")?,
            description: String::new(),
            labels: Labels::default(),
        })
        .await?;
    let agent = AgentId::new();
    let jail = JailName::parse("sshd")?;
    let now = Utc::now();
    let started = Instant::now();
    let mut seq = 0u64;
    // Two days ago, an hour each: over long since.
    let past = now - chrono::TimeDelta::days(2);
    let old = (0..history).map(|i| (old_address(i), past, 3_600));
    let current = (0..entries).map(|i| (address(i), now, 86_400));
    let all: Vec<(IpOrCidr, chrono::DateTime<Utc>, u64)> = old.chain(current).collect();
    for chunk in all.chunks(5_000) {
        let batch = chunk
            .iter()
            .map(|(ip, at, secs)| {
                seq += 1;
                let facts = BanFacts {
                    ip: *ip,
                    jail: jail.clone(),
                    hostname: "edge-1".to_owned(),
                    failures: 5,
                    logs: Logs::capped(["Failed password for root"]),
                    ban_time: Some(at.timestamp()),
                    ban_duration: Some(BanDuration::Seconds(*secs)),
                    ban_count: Some(1),
                };
                (
                    seq,
                    NewEvent {
                        occurred_at: *at,
                        source: EventSource::Action,
                        body: EventBody::Ban(facts),
                    },
                )
            })
            .collect();
        store.ingest_batch(server.id, agent, 1, batch).await?;
    }
    println!(
        "seeded {history} past bans and {entries} bans in force in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn get_json(client: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let response = client.get(url).send().await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if !status.is_success() {
        bail!("GET {url}: {status} {body}");
    }
    Ok(body)
}

/// Times `rounds` full GETs (body read to its end) and `rounds_304` revalidations of `url`.
async fn time_file(
    client: &reqwest::Client,
    url: &str,
    rounds: usize,
    rounds_304: usize,
) -> anyhow::Result<(usize, Summary, Summary)> {
    let first = client.get(url).send().await?;
    if first.status() != StatusCode::OK {
        bail!("GET {url}: {}", first.status());
    }
    let etag = first
        .headers()
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .context("an ETag")?
        .to_owned();
    let size = first.bytes().await?.len();
    let mut full = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let response = client.get(url).send().await?;
        let body = response.bytes().await?;
        full.push(t.elapsed());
        if body.len() != size {
            bail!("{url} changed size during the run");
        }
    }
    let mut revalidated = Vec::with_capacity(rounds_304);
    for _ in 0..rounds_304 {
        let t = Instant::now();
        let response = client.get(url).header(IF_NONE_MATCH, &etag).send().await?;
        let status = response.status();
        response.bytes().await?;
        revalidated.push(t.elapsed());
        if status != StatusCode::NOT_MODIFIED {
            bail!("{url} answered {status} to its own ETag");
        }
    }
    Ok((size, Summary::of(full), Summary::of(revalidated)))
}

fn print_row(what: &str, size: usize, full: Summary, revalidated: Summary) {
    println!(
        "{what:<28} {:>10} B  full p50 {:>8.2} ms  p99 {:>8.2} ms ({:>5.0} MB/s at p50)  |  304 p50 {:>6.3} ms  p99 {:>6.3} ms",
        size,
        ms(full.p50),
        ms(full.p99),
        size as f64 / full.p50.as_secs_f64() / 1e6,
        ms(revalidated.p50),
        ms(revalidated.p99),
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let hub_bin = measure::binary(&args.profile, "banhub")?;
    println!(
        "feed bench: {} entries, {} past bans, {} full rounds, {} 304 rounds, hub {} ({}), load {}",
        args.entries,
        args.history,
        args.full_rounds,
        args.not_modified_rounds,
        hub_bin.display(),
        measure::modified(&hub_bin),
        measure::load_average()
    );
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}/bench.db?mode=rwc", dir.path().display());
    seed(&url, args.entries, args.history).await?;
    let hub = HubProcess::builder()
        .binary(&hub_bin)
        .database_url(&url)
        .env("BANHUB_LOG__FILTER", "warn")
        .start_timeout(Duration::from_secs(300))
        .start()?;
    let client = hub.client();
    let response = client
        .post(hub.url("/api/feeds"))
        .json(&json!({"name": "edge", "allServers": true}))
        .send()
        .await?;
    if response.status() != StatusCode::CREATED {
        bail!("creating the feed: {}", response.text().await?);
    }
    let created = Instant::now();
    let token: Value = client
        .post(hub.url("/api/feeds/edge/tokens"))
        .json(&json!({"name": "bench"}))
        .send()
        .await?
        .json()
        .await?;
    let token = token["token"].as_str().context("a token")?.to_owned();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let feed = get_json(&client, &hub.url("/api/feeds/edge")).await?;
        if feed["entries"].as_u64() == Some(u64::from(args.entries)) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the feed never listed every entry: {feed}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "feed created → first rendering with every entry (all four formats): {:.2} s",
        created.elapsed().as_secs_f64()
    );

    let feed_client = banhub_tests::hub::bearer_client(&token)?;
    for format in ["txt", "nft", "ipset", "rsc"] {
        let url = hub.url(&format!("/feeds/edge.{format}"));
        let (size, full, revalidated) = time_file(
            &feed_client,
            &url,
            args.full_rounds,
            args.not_modified_rounds,
        )
        .await?;
        print_row(&format!("feed edge.{format}"), size, full, revalidated);
    }
    // The floor: the largest static file the same hub serves (the UI's script, from memory).
    let index = client.get(hub.url("/")).send().await?.text().await?;
    let script = index
        .split('"')
        .find(|part| part.contains("assets/") && part.ends_with(".js"))
        .context("the UI's script in index.html")?
        .trim_start_matches("./")
        .to_owned();
    let url = hub.url(&format!("/{script}"));
    let (size, full, revalidated) =
        time_file(&client, &url, args.full_rounds, args.not_modified_rounds).await?;
    print_row("static UI script (floor)", size, full, revalidated);
    println!("load after the run: {}", measure::load_average());
    Ok(())
}
