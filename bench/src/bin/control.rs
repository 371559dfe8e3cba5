//! Benchmark of the control path, hub → agent → fail2ban, against a real fail2ban server holding many
//! bans: `GET /api/summary` (every jail's counters) and pages of `GET /api/jails/:jail/banned`, next to
//! the way today's tools do the same (one `fail2ban-client` process per jail). Prints its figures.
//!
//! `cargo run -p banhub-bench --bin control --release -- --jails 50 --bans 10000`
//! (build the binaries it drives first: `cargo build --release -p banhub -p banhub-agent`, and pass
//! `--profile release`; the default uses `target/debug`).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use banhub_bench::measure;
use banhub_tests::agent::AgentProcess;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Control-path latency through hub, agent and a real fail2ban")]
struct Args {
    /// Jails, each holding --bans banned addresses.
    #[arg(long, default_value_t = 50)]
    jails: usize,
    /// Banned addresses per jail.
    #[arg(long, default_value_t = 10_000)]
    bans: usize,
    /// Timed requests of each kind.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Rounds of the fail2ban-client baseline (each runs jails + 1 processes).
    #[arg(long, default_value_t = 3)]
    baseline_rounds: usize,
    /// Which build of banhub and banhub-agent to drive: `debug` or `release`.
    #[arg(long, default_value = "debug")]
    profile: String,
    /// The hub binary to drive instead of the `--profile` build (e.g. a copy kept as "before").
    #[arg(long)]
    hub_bin: Option<std::path::PathBuf>,
    /// The agent binary to drive instead of the `--profile` build.
    #[arg(long)]
    agent_bin: Option<std::path::PathBuf>,
}

/// The `i`-th address of a jail's ban list: distinct across jails, in 10.0.0.0/8 (never routed).
fn address(jail: usize, i: usize) -> String {
    format!("10.{}.{}.{}", jail % 250, (i / 250) % 250, i % 250 + 1)
}

struct Stats {
    samples: Vec<Duration>,
}

impl Stats {
    fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Self { samples }
    }

    fn at(&self, q: f64) -> Duration {
        let last = self.samples.len().saturating_sub(1);
        let index = ((last as f64) * q).round() as usize;
        self.samples.get(index).copied().unwrap_or_default()
    }

    fn line(&self, what: &str) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "{what:<48} median {:>9.2} ms   p90 {:>9.2} ms   min {:>9.2} ms   max {:>9.2} ms   (n={})",
            ms(self.at(0.5)),
            ms(self.at(0.9)),
            ms(self.at(0.0)),
            ms(self.at(1.0)),
            self.samples.len()
        )
    }
}

async fn time_get(client: &reqwest::Client, url: &str, rounds: usize) -> anyhow::Result<Stats> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let response = client.get(url).send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        samples.push(started.elapsed());
        if !status.is_success() {
            bail!("{url}: {status}: {}", String::from_utf8_lossy(&body));
        }
    }
    Ok(Stats::new(samples))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let hub_bin = match &args.hub_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub")?,
    };
    let agent_bin = match &args.agent_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub-agent")?,
    };

    println!(
        "control-path benchmark: {} jails x {} bans, {} rounds, hub {}, agent {}, {} cores",
        args.jails,
        args.bans,
        args.rounds,
        hub_bin.display(),
        agent_bin.display(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let started = Instant::now();
    let sandbox = Fail2banSandbox::builder()
        .name("bench")
        .extra_jails(args.jails)
        .start()
        .context("starting fail2ban")?;
    let socket = sandbox.socket_path();
    let jails: Vec<String> = (1..=args.jails).map(|i| format!("extra{i:02}")).collect();
    for (j, jail) in jails.iter().enumerate() {
        // One fail2ban-client call bans a chunk of addresses at once.
        for chunk in (0..args.bans).collect::<Vec<_>>().chunks(2_000) {
            let mut command = Command::new("fail2ban-client");
            command
                .arg("-s")
                .arg(&socket)
                .args(["set", jail.as_str(), "banip"]);
            command.args(chunk.iter().map(|&i| address(j, i)));
            let out = command.output().context("fail2ban-client")?;
            if !out.status.success() {
                bail!(
                    "banning in {jail}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    println!(
        "seeded {} bans in {:.1} s",
        args.jails * args.bans,
        started.elapsed().as_secs_f64()
    );

    let hub = HubProcess::builder()
        .binary(hub_bin)
        .env("BANHUB_LOG__FILTER", "warn")
        .start()?;
    // The hub accepts the harness's bootstrap admin token.
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", hub.admin_token()).parse()?,
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .default_headers(headers)
        .build()?;
    let created: serde_json::Value = client
        .post(hub.url("/api/servers"))
        .json(&serde_json::json!({"name": "bench"}))
        .send()
        .await?
        .json()
        .await?;
    let token = created["enrollment"]["token"]
        .as_str()
        .context("no token")?;
    let state = tempfile::tempdir()?;
    let out = Command::new(&agent_bin)
        .args(["enroll", token, "--state-dir"])
        .arg(state.path())
        .env("BANHUB_AGENT_RELAY__LISTEN", "127.0.0.1:0")
        .output()?;
    if !out.status.success() {
        bail!("enroll: {}", String::from_utf8_lossy(&out.stderr));
    }
    let agent = AgentProcess::start_binary(
        agent_bin,
        state.path(),
        &socket,
        &sandbox.conf_dir(),
        &[("BANHUB_AGENT_LOG__FILTER", "warn")],
    )?;
    let summary_url = hub.url("/api/summary");
    banhub_tests::wait::wait_for_async(Duration::from_secs(30), "the agent", || async {
        let response = client.get(&summary_url).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await
    .with_context(|| agent.logs())?;

    // Check the summary really reports every ban before timing it.
    let summary: serde_json::Value = client.get(&summary_url).send().await?.json().await?;
    let banned: u64 = summary["jails"]
        .as_array()
        .context("no jails")?
        .iter()
        .filter_map(|j| j["currentlyBanned"].as_u64())
        .sum();
    println!(
        "summary reports {banned} banned addresses in {} jails",
        summary["jails"].as_array().map_or(0, Vec::len)
    );

    // Warm-up, then the timed rounds.
    time_get(&client, &summary_url, 3).await?;
    let summary_stats = time_get(&client, &summary_url, args.rounds).await?;
    let first = jails.first().context("no jails")?;
    let page = hub.url(&format!("/api/jails/{first}/banned?limit=50"));
    time_get(&client, &page, 3).await?;
    let first_page = time_get(&client, &page, args.rounds).await?;
    let deep = hub.url(&format!(
        "/api/jails/{first}/banned?limit=50&offset={}",
        args.bans.saturating_sub(50)
    ));
    let deep_page = time_get(&client, &deep, args.rounds).await?;
    let search = hub.url(&format!("/api/jails/{first}/banned?limit=50&search=10.0.3"));
    let search_page = time_get(&client, &search, args.rounds).await?;

    // Today's way: one fail2ban-client process for `status`, then one per jail.
    let mut baseline = Vec::new();
    for _ in 0..args.baseline_rounds {
        let started = Instant::now();
        let status = Command::new("fail2ban-client")
            .arg("-s")
            .arg(&socket)
            .arg("status")
            .output()?;
        if !status.status.success() {
            bail!("fail2ban-client status failed");
        }
        for jail in &jails {
            let out = Command::new("fail2ban-client")
                .arg("-s")
                .arg(&socket)
                .args(["status", jail.as_str()])
                .output()?;
            if !out.status.success() {
                bail!("fail2ban-client status {jail} failed");
            }
        }
        baseline.push(started.elapsed());
    }
    let baseline = Stats::new(baseline);

    println!();
    println!(
        "{}",
        summary_stats.line("GET /api/summary (hub -> agent -> fail2ban)")
    );
    println!(
        "{}",
        first_page.line("GET /api/jails/:jail/banned, first page")
    );
    println!(
        "{}",
        deep_page.line("GET /api/jails/:jail/banned, last page")
    );
    println!(
        "{}",
        search_page.line("GET /api/jails/:jail/banned, search")
    );
    println!(
        "{}",
        baseline.line(&format!(
            "fail2ban-client x {} (status + each jail)",
            jails.len() + 1
        ))
    );
    let ratio = baseline.at(0.5).as_secs_f64() / summary_stats.at(0.5).as_secs_f64().max(1e-9);
    println!("summary is {ratio:.0}x faster than one fail2ban-client process per jail (medians)");
    drop(agent);
    drop(hub);
    Ok(())
}
