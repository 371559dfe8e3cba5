//! `banhub-bench render`: how soon the dashboard, the events page and the servers page show their
//! first data in Chromium, with 1,000 servers and 10 million stored events. Starts the release hub
//! on the history `queries --servers` seeded and kept, with some of its servers online through
//! simulated agents (the `fleet` binary's `simulate`), and beside it a floor hub with one server
//! and no events; `bench/ui/render.mjs` loads each page cold and warm in Chromium and records each
//! load; this prints medians and 90th percentiles side by side.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use banhub_tests::hub::HubProcess;
use serde_json::Value;

use crate::measure;
use crate::queries::history_stem;

/// Options of `banhub-bench render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The directory that keeps the seeded history (`queries --servers N --seed-only --data DIR`).
    #[arg(long)]
    pub data: PathBuf,
    /// Events of the kept history to use.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Servers of the kept history to use.
    #[arg(long, default_value_t = 1000)]
    pub servers: usize,
    /// Seeded servers that get a simulated agent, and so show online: never-connected ones.
    #[arg(long, default_value_t = 100)]
    pub online: usize,
    /// Timed loads per page, cold and warm, on each hub.
    #[arg(long, default_value_t = 15)]
    pub runs: usize,
    /// Build of banhub (and of the `fleet` simulator) to drive: `release` (for figures) or `debug`.
    #[arg(long, default_value = "release")]
    pub profile: String,
    /// The hub binary to drive; default: the `--profile` build of this tree.
    #[arg(long)]
    pub hub_bin: Option<PathBuf>,
    /// Where the raw records of every load are written (JSON); default: a temporary file.
    #[arg(long)]
    pub raw: Option<PathBuf>,
}

/// The simulator's process, killed when dropped.
struct Simulator(Child);

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(args: RenderArgs) -> anyhow::Result<()> {
    let stem = history_stem(args.events, args.servers);
    let file = args.data.join(format!("{stem}.db"));
    if !args.data.join(format!("{stem}.json")).is_file() {
        bail!(
            "no seeded history at {}: seed it first with `banhub-bench queries --events {} \
             --servers {} --seed-only --data {}`",
            file.display(),
            args.events,
            args.servers,
            args.data.display()
        );
    }
    let hub_bin = match &args.hub_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub")?,
    };
    println!(
        "== banhub-bench render: {} servers ({} online), {} events, {} build ({}); {} runs per \
         page cold and warm; load average {} ==",
        args.servers,
        args.online,
        args.events,
        args.profile,
        measure::modified(&hub_bin),
        args.runs,
        measure::load_average()
    );
    let password = format!("render-bench-{}", std::process::id());
    let started = Instant::now();
    let hub = HubProcess::builder()
        .binary(&hub_bin)
        .database_url(format!("sqlite://{}?mode=rwc", file.display()))
        .env("BANHUB_AUTH__LOCAL__PASSWORD", password.as_str())
        .env("BANHUB_LOG__FILTER", "warn")
        .start_timeout(Duration::from_secs(300))
        .start()
        .context("starting the hub on the seeded history")?;
    println!(
        "hub on {} started in {:.1} s",
        file.display(),
        started.elapsed().as_secs_f64()
    );
    let _simulator = simulate_online(&hub, &args).await?;
    let counts = status_counts(&hub).await?;
    println!("servers by status: {counts}");

    let floor = HubProcess::builder()
        .binary(&hub_bin)
        .env("BANHUB_AUTH__LOCAL__PASSWORD", password.as_str())
        .env("BANHUB_LOG__FILTER", "warn")
        .start()
        .context("starting the floor hub")?;
    floor
        .client()
        .post(floor.url("/api/servers"))
        .json(&serde_json::json!({"name": "floor-01", "labels": {"env": "prod"}}))
        .send()
        .await?
        .error_for_status()?;

    let raw_dir = tempfile::tempdir()?;
    let raw = args
        .raw
        .clone()
        .unwrap_or_else(|| raw_dir.path().join("render.json"));
    let targets = serde_json::json!([
        {"name": "seeded", "url": hub.url("/"), "password": password, "empty": false},
        {"name": "floor", "url": floor.url("/"), "password": password, "empty": true},
    ]);
    browse(&targets, args.runs, &raw)?;
    let records: Vec<Value> = serde_json::from_slice(&std::fs::read(&raw)?)?;
    report(&records);
    println!("load average at the end: {}", measure::load_average());
    Ok(())
}

/// Starts the `fleet` simulator with agents for the first `--online` never-connected seeded
/// servers and waits until the hub counts them connected.
async fn simulate_online(hub: &HubProcess, args: &RenderArgs) -> anyhow::Result<Option<Simulator>> {
    if args.online == 0 {
        return Ok(None);
    }
    let servers = list_servers(hub).await?;
    // The seeder leaves the servers numbered 8 and 9 of every ten never connected (its
    // `server_states`); those numbered 8 get the agents, on every run the same ones.
    let names: Vec<String> = servers
        .iter()
        .filter_map(|s| s["name"].as_str())
        .filter(|name| {
            name.strip_prefix("host-")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n % 10 == 8)
        })
        .take(args.online)
        .map(str::to_owned)
        .collect();
    if names.len() < args.online {
        bail!(
            "the history has {} servers to put online, not {}",
            names.len(),
            args.online
        );
    }
    let fleet = measure::binary(&args.profile, "fleet")?;
    let log = std::fs::File::create(hub.dir().join("fleet-simulate.log"))?;
    let child = Command::new(&fleet)
        .args(["--scenario", "simulate", "--agents"])
        .arg(names.len().to_string())
        .arg("--hub-http")
        .arg(hub.http_url())
        .arg("--token")
        .arg(hub.admin_token())
        .arg("--ca")
        .arg(hub.data_dir().join("ca").join("ca.pem"))
        .arg("--enroll-existing")
        .arg(names.join(","))
        .env("FLEET_SIM_GRPC", hub.grpc_addr().to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", fleet.display()))?;
    let simulator = Simulator(child);
    wait_connected(hub, names.len()).await?;
    Ok(Some(simulator))
}

/// Waits until the hub's `/metrics` counts `n` agents connected.
async fn wait_connected(hub: &HubProcess, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let text = hub
            .client()
            .get(hub.url("/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let connected = text
            .lines()
            .find_map(|l| l.strip_prefix("banhub_agents_connected "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as usize;
        if connected >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{connected} of {n} simulated agents connected; see {}",
                hub.dir().join("fleet-simulate.log").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The hub's `GET /api/servers`.
async fn list_servers(hub: &HubProcess) -> anyhow::Result<Vec<Value>> {
    Ok(hub
        .client()
        .get(hub.url("/api/servers"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// "N online, N offline, …" as the hub lists its servers.
async fn status_counts(hub: &HubProcess) -> anyhow::Result<String> {
    let servers = list_servers(hub).await?;
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for s in &servers {
        *counts
            .entry(s["status"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    Ok(format!(
        "{} in all: {}",
        servers.len(),
        counts
            .iter()
            .map(|(status, n)| format!("{n} {status}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Runs `bench/ui/render.mjs` with Node, the hub UI's playwright-core and Debian's Chromium.
fn browse(targets: &Value, runs: usize, raw: &Path) -> anyhow::Result<()> {
    let root = banhub_tests::process::workspace_root();
    let ui = root.join("hub/ui");
    if !ui.join("node_modules/playwright-core").is_dir() {
        bail!(
            "{} has no playwright-core: run `npm ci` there (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1)",
            ui.display()
        );
    }
    let status = Command::new("node")
        .arg(root.join("bench/ui/render.mjs"))
        .env("BANHUB_UI", &ui)
        .env("BANHUB_RENDER_TARGETS", targets.to_string())
        .env("BANHUB_RENDER_RUNS", runs.to_string())
        .env("BANHUB_RENDER_OUT", raw)
        .env(
            "CHROMIUM_PATH",
            std::env::var_os("CHROMIUM_PATH").unwrap_or_else(|| "/usr/bin/chromium".into()),
        )
        .status()
        .context("running node bench/ui/render.mjs")?;
    if !status.success() {
        bail!("bench/ui/render.mjs failed ({status})");
    }
    Ok(())
}

/// Median and 90th percentile of `samples` (milliseconds).
fn p50_p90(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        samples
            .get(((samples.len().saturating_sub(1)) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    (at(0.5), at(0.9))
}

/// Prints, per page and temperature, the seeded hub beside the floor: first data, DOMContentLoaded
/// and each API call's duration, as median / 90th percentile in milliseconds.
fn report(records: &[Value]) {
    let field = |r: &Value, name: &str| r[name].as_f64().unwrap_or(f64::NAN);
    println!(
        "\nmilliseconds from navigation start, median / p90 (n per cell: runs); seeded | floor"
    );
    for page in ["dashboard", "events", "servers"] {
        for temperature in ["cold", "warm"] {
            let of = |target: &str| -> Vec<&Value> {
                records
                    .iter()
                    .filter(|r| {
                        r["page"] == page
                            && r["temperature"] == temperature
                            && r["target"] == target
                    })
                    .collect()
            };
            let (seeded, floor) = (of("seeded"), of("floor"));
            let cell = |rs: &[&Value], name: &str| {
                let (p50, p90) = p50_p90(rs.iter().map(|r| field(r, name)).collect());
                format!("{p50:7.0} / {p90:5.0}")
            };
            println!(
                "{page:<9} {temperature:<4} first data {} | {}   DOMContentLoaded {} | {}   (n={})",
                cell(&seeded, "firstData"),
                cell(&floor, "firstData"),
                cell(&seeded, "domContentLoaded"),
                cell(&floor, "domContentLoaded"),
                seeded.len()
            );
            for path in api_paths(&seeded) {
                let durations = |rs: &[&Value]| -> Vec<f64> {
                    rs.iter()
                        .filter_map(|r| {
                            r["api"]
                                .as_array()?
                                .iter()
                                .find(|c| c["path"] == path.as_str())
                        })
                        .map(|c| field(c, "end") - field(c, "start"))
                        .collect()
                };
                let (s50, s90) = p50_p90(durations(&seeded));
                let (f50, f90) = p50_p90(durations(&floor));
                println!(
                    "{:<15}   {path:<34} {s50:7.0} / {s90:5.0} | {f50:7.0} / {f90:5.0}",
                    ""
                );
            }
        }
    }
}

/// The API paths the loads of a page called, in the order of their first call.
fn api_paths(records: &[&Value]) -> Vec<String> {
    let mut paths = Vec::new();
    for r in records {
        for call in r["api"].as_array().into_iter().flatten() {
            if let Some(path) = call["path"].as_str()
                && !paths.iter().any(|p| p == path)
            {
                paths.push(path.to_owned());
            }
        }
    }
    paths
}
