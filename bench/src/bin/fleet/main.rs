//! Fleet simulator and scale benchmarks. Simulated agents are lightweight tasks in this process that
//! speak the real protocol over real mutual TLS: each enrolls through `Enrollment.Enroll` with a token
//! from the API (its own key and CSR), then holds one `AgentGateway.Session`, heartbeats, answers
//! commands as a host would with no latency (`sim_host`: bans, pings, its files, config sets with
//! commit-confirm, fail2ban's status) and reports ban events from a spool it numbers like the real
//! agent. Prints its figures.
//!
//! Scenarios (`--scenario`, several allowed):
//! * `sessions`: N agents (10,000) on one hub with heartbeats: hub memory per session, idle CPU.
//! * `fleet-ban`: fleet-wide bans over N online agents (1,000): time until every ack is back.
//! * `share`: a sharing policy over N online agents (1,000): from one agent's ban event to each
//!   other agent receiving the shared ban (`SyncSharedBans`).
//! * `replicas`: ingest with one hub replica and with two on one PostgreSQL (agents split), in
//!   alternating phases of one run; CPU per 1,000 events of the hubs, PostgreSQL and the simulator.
//! * `agent`: resident memory and CPU of an idle real `banhub-agent`, and the binary sizes.
//! * `drift`: a drift check of N online agents (1,000) against their profile (each agent answers
//!   `GetConfigFiles`): hub CPU time and wall time of a pass that finds every host drifted, one
//!   that finds every host in sync, and one that finds nothing changed.
//! * `rollout`: a profile rolled out to N online agents (100) in batches with no watch, beside the
//!   same changes applied batch by batch through `config-changes` (`rollout.rs`).
//! * `simulate`: just run N agents producing `--rate` events per second against an existing hub
//!   (`--hub-http`, `--token`), until interrupted.
//!
//! `cargo build --release -p banhub -p banhub-agent -p banhub-bench`, then
//! `target/release/fleet --profile release --scenario sessions --agents 10000`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use banhub_bench::measure;
use banhub_proto::token::EnrollmentToken;
use banhub_proto::v1::agent_gateway_client::AgentGatewayClient;
use banhub_proto::v1::enrollment_client::EnrollmentClient;
use banhub_proto::v1::{
    AgentFrame, EnrollRequest, Event, EventBatch, EventKind, EventSource, Heartbeat, Hello,
    HubFrame, SpoolHead, agent_frame, command, hub_frame,
};
use banhub_tests::agent::AgentProcess;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::postgres::PostgresServer;
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use sim_host::{SIMULATED_JAIL, SimHost};

mod rollout;
mod sim_host;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Sessions,
    FleetBan,
    Share,
    Replicas,
    Agent,
    Simulate,
    Drift,
    Rollout,
}

#[derive(Debug, Parser)]
#[command(
    about = "Fleet simulator: many real mTLS agent sessions in one process, and scale figures"
)]
struct Args {
    /// What to measure; repeat for several.
    #[arg(long, value_enum, default_values_t = [Scenario::Sessions, Scenario::FleetBan, Scenario::Replicas, Scenario::Agent])]
    scenario: Vec<Scenario>,
    /// Agents for `sessions` and `simulate`.
    #[arg(long, default_value_t = 10_000)]
    agents: usize,
    /// Agents for `fleet-ban`, `share` and `drift`.
    #[arg(long, default_value_t = 1000)]
    ban_agents: usize,
    /// Agents for `rollout`.
    #[arg(long, default_value_t = 100)]
    rollout_agents: usize,
    /// Hosts per batch of `rollout` (and of its floor).
    #[arg(long, default_value_t = 10)]
    rollout_batch: usize,
    /// Hosts in the first batch of `rollout`.
    #[arg(long, default_value_t = 10)]
    rollout_canary: usize,
    /// The agents' commit-confirm window in `rollout` and its floor, in seconds (10 to 3600).
    #[arg(long, default_value_t = 10)]
    confirm_secs: u32,
    /// Fleet-wide bans timed by `fleet-ban`, and origin bans timed by `share`.
    #[arg(long, default_value_t = 30)]
    ban_rounds: usize,
    /// Agents for `replicas`.
    #[arg(long, default_value_t = 64)]
    ingest_agents: usize,
    /// Events per batch in `replicas`.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Seconds of ingest per phase of `replicas`.
    #[arg(long, default_value_t = 20)]
    ingest_secs: u64,
    /// Database connections of each hub (`database.max_connections`).
    #[arg(long, default_value_t = 32)]
    db_connections: u32,
    /// Seconds over which idle CPU is measured.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Heartbeat interval the hub gives agents, in milliseconds (the default configuration's).
    #[arg(long, default_value_t = 10_000)]
    heartbeat_ms: u32,
    /// Which build of banhub and banhub-agent to drive: `debug` or `release`.
    #[arg(long, default_value = "debug")]
    profile: String,
    /// `simulate`: the hub's API, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    hub_http: Option<String>,
    /// `simulate`: an admin API token for it.
    #[arg(long)]
    token: Option<String>,
    /// `simulate`: the hub's CA certificate (PEM), e.g. `<data_dir>/ca/ca.pem`.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// `simulate`: enroll the agents for these registered servers (names or ids, comma-separated)
    /// instead of creating `--agents` new ones.
    #[arg(long, value_delimiter = ',')]
    enroll_existing: Vec<String>,
    /// `simulate`: ban events per second over the whole fleet.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

/// Lifts this process's open-file limit to the hard limit; hubs started from here inherit it.
fn raise_fd_limit() -> anyhow::Result<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    setrlimit(Resource::Nofile, limit).context("raising the open-file limit")?;
    Ok(limit.current.unwrap_or(u64::MAX))
}

// ----- process figures -----

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// CPU time (user + system) the process used so far.
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; fields resume after its closing parenthesis.
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    let ticks = rustix::param::clock_ticks_per_second();
    Ok(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks as f64,
    ))
}

fn pid_of(hub: &HubProcess) -> anyhow::Result<u32> {
    hub.pid().context("the hub is not running")
}

// ----- enrollment -----

/// A simulated agent's credentials.
#[derive(Clone)]
struct Credentials {
    name: String,
    cert_pem: String,
    key_pem: String,
}

/// Creates `n` servers through the API and enrolls one simulated agent for each, `parallel` at a time.
async fn enroll_many(
    http: &reqwest::Client,
    api: &str,
    grpc: SocketAddr,
    ca_pem: &str,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Vec<Credentials>> {
    let names = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
    enroll(http, api, grpc, ca_pem, names, Servers::Create).await
}

/// Whether [`enroll`] creates the servers it enrolls agents for or finds them registered already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Servers {
    Create,
    Existing,
}

/// Enrolls one simulated agent for each server in `names`, 16 at a time; an existing server's
/// enrollment replaces (and revokes) its current agent, as after a host's rebuild.
async fn enroll(
    http: &reqwest::Client,
    api: &str,
    grpc: SocketAddr,
    ca_pem: &str,
    names: Vec<String>,
    servers: Servers,
) -> anyhow::Result<Vec<Credentials>> {
    let n = names.len();
    let channel = Endpoint::from_shared(format!("https://{grpc}"))?
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca_pem))
                .domain_name(banhub_proto::HUB_TLS_NAME),
        )?
        .connect()
        .await
        .context("connecting for enrollment")?;
    let started = Instant::now();
    let done = AtomicUsize::new(0);
    let results: Vec<anyhow::Result<Credentials>> = futures::stream::iter(names)
        .map(|name| {
            let channel = channel.clone();
            let done = &done;
            async move {
                let request = match servers {
                    Servers::Create => {
                        let prefix = name.rsplit_once('-').map_or(name.as_str(), |(p, _)| p);
                        http.post(format!("{api}/api/servers"))
                            .json(&json!({"name": name, "labels": {"sim": prefix}}))
                    }
                    Servers::Existing => {
                        http.post(format!("{api}/api/servers/{name}/enrollment-token"))
                    }
                };
                let answer: Value = request.send().await?.error_for_status()?.json().await?;
                let token = match servers {
                    Servers::Create => &answer["enrollment"]["token"],
                    Servers::Existing => &answer["token"],
                }
                .as_str()
                .context("no token")?;
                let token = EnrollmentToken::decode(token).map_err(|e| anyhow::anyhow!("{e}"))?;
                let key = rcgen::KeyPair::generate()?;
                let csr = rcgen::CertificateParams::new(Vec::<String>::new())?
                    .serialize_request(&key)?
                    .pem()?;
                let response = EnrollmentClient::new(channel)
                    .enroll(EnrollRequest {
                        token_id: token.token_id,
                        secret: token.secret,
                        csr_pem: csr,
                        hostname: name.clone(),
                        agent_version: "sim".into(),
                    })
                    .await?
                    .into_inner();
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished.is_multiple_of(1000) {
                    eprintln!(
                        "  enrolled {finished}/{n} ({:.0}/s)",
                        finished as f64 / started.elapsed().as_secs_f64()
                    );
                }
                Ok(Credentials {
                    name,
                    cert_pem: response.certificate_pem,
                    key_pem: key.serialize_pem(),
                })
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

// ----- simulated agents -----

/// Counters shared by every simulated agent.
#[derive(Default)]
struct Counters {
    connected: AtomicUsize,
    sessions: AtomicU64,
    commands: AtomicU64,
    events_sent: AtomicU64,
    events_acked: AtomicU64,
    failures: AtomicU64,
    /// Each shared ban received (`SyncSharedBans`), with when.
    shared: std::sync::Mutex<Vec<(String, Instant)>>,
}

/// How a simulated agent reports events.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// None: heartbeats and commands only.
    Idle,
    /// One event every this often.
    Every(Duration),
    /// Batches of this many events, the next sent as soon as the previous one is acknowledged.
    Flood(usize),
}

struct Agent {
    creds: Credentials,
    ca: Certificate,
    hub: SocketAddr,
    counters: Arc<Counters>,
    load: watch::Receiver<Load>,
    /// Addresses this agent reports a ban of at once (the origin of `share`).
    origin: Option<mpsc::UnboundedReceiver<String>>,
    /// The host's files and config changes, kept across sessions.
    host: SimHost,
    stop: tokio_util::sync::CancellationToken,
}

impl Agent {
    async fn channel(&self) -> anyhow::Result<Channel> {
        Ok(Endpoint::from_shared(format!("https://{}", self.hub))?
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(self.ca.clone())
                    .identity(Identity::from_pem(
                        &self.creds.cert_pem,
                        &self.creds.key_pem,
                    ))
                    .domain_name(banhub_proto::HUB_TLS_NAME),
            )?
            .connect_timeout(Duration::from_secs(30))
            .connect()
            .await?)
    }

    /// Keeps a session up (reconnecting after a second) until stopped; `ready` fires at the first
    /// welcome.
    async fn run(mut self, ready: oneshot::Sender<()>) {
        let mut ready = Some(ready);
        let epoch: u64 = rand::random::<u64>() >> 1;
        let mut spool = Spool {
            epoch,
            next_seq: 1,
            unacked: VecDeque::new(),
        };
        while !self.stop.is_cancelled() {
            match self.session(&mut spool, &mut ready).await {
                Ok(()) => {}
                Err(e) => {
                    self.counters.failures.fetch_add(1, Ordering::Relaxed);
                    if std::env::var_os("FLEET_SIM_VERBOSE").is_some() {
                        eprintln!("{}: {e:#}", self.creds.name);
                    }
                }
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    async fn session(
        &mut self,
        spool: &mut Spool,
        ready: &mut Option<oneshot::Sender<()>>,
    ) -> anyhow::Result<()> {
        let channel = self.channel().await?;
        let (tx, rx) = mpsc::channel::<AgentFrame>(16);
        let send = |body| AgentFrame { body: Some(body) };
        tx.send(send(agent_frame::Body::Hello(Hello {
            protocol_version: banhub_proto::PROTOCOL_VERSION,
            agent_version: "sim".into(),
            hostname: self.creds.name.clone(),
            fail2ban_version: "1.0.2".into(),
            capabilities: sim_host::CAPABILITIES
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
            spool: Some(SpoolHead {
                epoch: spool.epoch,
                last_seq: spool.next_seq - 1,
                acked_seq: spool.acked(),
                depth: spool.unacked.len() as u64,
                oldest_unacked_unix_ms: 0,
            }),
        })))
        .await?;
        let mut inbound = AgentGatewayClient::new(channel)
            .session(ReceiverStream::new(rx))
            .await?
            .into_inner();
        let welcome = match inbound.message().await?.and_then(|f| f.body) {
            Some(hub_frame::Body::Welcome(w)) => w,
            other => bail!("expected a welcome, got {other:?}"),
        };
        spool.acked_through(welcome.committed_seq);
        // Whatever the hub has not committed is sent again, as the real agent does.
        let resend: Vec<Event> = spool.unacked.iter().cloned().collect();
        if !resend.is_empty() {
            tx.send(send(agent_frame::Body::Events(EventBatch {
                epoch: spool.epoch,
                events: resend,
            })))
            .await?;
        }
        self.counters.connected.fetch_add(1, Ordering::Relaxed);
        self.counters.sessions.fetch_add(1, Ordering::Relaxed);
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        let result = self
            .serve(&tx, &mut inbound, spool, welcome.heartbeat_interval_ms)
            .await;
        self.counters.connected.fetch_sub(1, Ordering::Relaxed);
        result
    }

    async fn serve(
        &mut self,
        tx: &mpsc::Sender<AgentFrame>,
        inbound: &mut tonic::Streaming<HubFrame>,
        spool: &mut Spool,
        heartbeat_ms: u32,
    ) -> anyhow::Result<()> {
        let send = |body| AgentFrame { body: Some(body) };
        let mut beat =
            tokio::time::interval(Duration::from_millis(u64::from(heartbeat_ms.max(100))));
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = 0;
        // Spread the fleet's events over the period rather than all agents at once.
        let mut load = *self.load.borrow();
        let mut next_event = tokio::time::Instant::now() + jitter(&load);
        let mut in_flight = false;
        loop {
            let event_due = match load {
                Load::Every(_) => Some(next_event),
                Load::Flood(_) if !in_flight => Some(tokio::time::Instant::now()),
                _ => None,
            };
            tokio::select! {
                () = self.stop.cancelled() => return Ok(()),
                changed = self.load.changed() => {
                    if changed.is_err() { return Ok(()); }
                    load = *self.load.borrow();
                    next_event = tokio::time::Instant::now() + jitter(&load);
                }
                frame = inbound.message() => {
                    let Some(frame) = frame? else { bail!("the hub closed the stream") };
                    match frame.body {
                        Some(hub_frame::Body::Command(command)) => {
                            self.counters.commands.fetch_add(1, Ordering::Relaxed);
                            if let Some(command::Kind::SyncSharedBans(sync)) = &command.kind {
                                let at = Instant::now();
                                let mut shared = self.counters.shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                                shared.extend(sync.bans.iter().map(|b| (b.ip.clone(), at)));
                            }
                            tx.send(send(agent_frame::Body::Result(self.host.answer(command)))).await?;
                        }
                        Some(hub_frame::Body::Ack(ack)) if ack.epoch == spool.epoch => {
                            let before = spool.unacked.len();
                            spool.acked_through(ack.seq);
                            let acked = (before - spool.unacked.len()) as u64;
                            self.counters.events_acked.fetch_add(acked, Ordering::Relaxed);
                            in_flight = !spool.unacked.is_empty();
                        }
                        Some(hub_frame::Body::Drain(drain)) => bail!("drained: {}", drain.reason),
                        _ => {}
                    }
                }
                _ = beat.tick() => {
                    seq += 1;
                    tx.send(send(agent_frame::Body::Heartbeat(Heartbeat {
                        seq,
                        sent_at_unix_ms: chrono::Utc::now().timestamp_millis(),
                    }))).await?;
                }
                Some(ip) = next_origin(&mut self.origin) => {
                    let event = spool.write_ip(&self.creds.name, &ip);
                    self.counters.events_sent.fetch_add(1, Ordering::Relaxed);
                    tx.send(send(agent_frame::Body::Events(EventBatch { epoch: spool.epoch, events: vec![event] }))).await?;
                }
                () = sleep_until(event_due) => {
                    let count = match load { Load::Flood(n) => n, _ => 1 };
                    let events: Vec<Event> = (0..count).map(|_| spool.write(&self.creds.name)).collect();
                    self.counters.events_sent.fetch_add(events.len() as u64, Ordering::Relaxed);
                    tx.send(send(agent_frame::Body::Events(EventBatch { epoch: spool.epoch, events }))).await?;
                    in_flight = true;
                    if let Load::Every(period) = load {
                        next_event += period;
                    }
                }
            }
        }
    }
}

/// The next address the origin agent is to report; never, for the others.
async fn next_origin(origin: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match origin {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn jitter(load: &Load) -> Duration {
    match load {
        Load::Every(period) => period.mul_f64(rand::random::<f64>()),
        _ => Duration::ZERO,
    }
}

/// The simulated agent's spool: numbered events kept until acknowledged.
struct Spool {
    epoch: u64,
    next_seq: u64,
    unacked: VecDeque<Event>,
}

impl Spool {
    fn acked(&self) -> u64 {
        self.unacked
            .front()
            .map_or(self.next_seq - 1, |e| e.seq - 1)
    }

    fn acked_through(&mut self, seq: u64) {
        while self.unacked.front().is_some_and(|e| e.seq <= seq) {
            self.unacked.pop_front();
        }
    }

    fn write(&mut self, host: &str) -> Event {
        let n = rand::random::<u32>();
        let ip = format!(
            "10.{}.{}.{}",
            (n >> 16) & 0xff,
            (n >> 8) & 0xff,
            (n & 0xfe) + 1
        );
        self.write_ip(host, &ip)
    }

    fn write_ip(&mut self, host: &str, ip: &str) -> Event {
        let seq = self.next_seq;
        self.next_seq += 1;
        let event = Event {
            seq,
            kind: EventKind::Ban.into(),
            ip: ip.to_owned(),
            jail: "sshd".into(),
            hostname: host.into(),
            failures: 5,
            logs: vec![format!(
                "sshd[1234]: Failed password for root from {ip} port 22"
            )],
            ban_time_unix: Some(chrono::Utc::now().timestamp()),
            ban_duration_secs: Some(600),
            ban_count: Some(1),
            received_at_unix_ms: chrono::Utc::now().timestamp_millis(),
            source: EventSource::Action.into(),
            ..Event::default()
        };
        self.unacked.push_back(event.clone());
        event
    }
}

/// A fleet of simulated agents in this process.
struct Fleet {
    counters: Arc<Counters>,
    load: watch::Sender<Load>,
    /// Makes the first agent report a ban of an address.
    origin: mpsc::UnboundedSender<String>,
    stop: tokio_util::sync::CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    /// Starts one agent per credential, agent `i` dialing `hubs[i % hubs.len()]`, and waits until
    /// every one has had a session.
    async fn start(
        creds: Vec<Credentials>,
        ca_pem: &str,
        hubs: &[SocketAddr],
        load: Load,
    ) -> anyhow::Result<Self> {
        let counters = Arc::new(Counters::default());
        let (load_tx, load_rx) = watch::channel(load);
        let stop = tokio_util::sync::CancellationToken::new();
        let ca = Certificate::from_pem(ca_pem);
        let n = creds.len();
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(n);
        // Connecting is CPU-bound (TLS handshakes on both sides): a few at a time.
        let connecting = Arc::new(Semaphore::new(64));
        let (origin_tx, origin_rx) = mpsc::unbounded_channel();
        let mut origin_rx = Some(origin_rx);
        for (i, creds) in creds.into_iter().enumerate() {
            let agent = Agent {
                creds,
                ca: ca.clone(),
                hub: hubs[i % hubs.len()],
                counters: counters.clone(),
                load: load_rx.clone(),
                origin: origin_rx.take(),
                host: SimHost::default(),
                stop: stop.clone(),
            };
            let connecting = connecting.clone();
            tasks.push(tokio::spawn(async move {
                let permit = connecting.acquire_owned().await;
                let (tx, rx) = oneshot::channel();
                let running = tokio::spawn(agent.run(tx));
                // The next agent may start connecting once this one is in (or gave up for now).
                let _ = tokio::time::timeout(Duration::from_secs(60), rx).await;
                drop(permit);
                let _ = running.await;
            }));
        }
        let mut last_report = Instant::now();
        loop {
            let have = counters.connected.load(Ordering::Relaxed);
            if have >= n {
                break;
            }
            if last_report.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "  {have}/{n} agents connected ({:.0}/s, {} failures)",
                    have as f64 / started.elapsed().as_secs_f64(),
                    counters.failures.load(Ordering::Relaxed)
                );
                last_report = Instant::now();
            }
            if started.elapsed() > Duration::from_secs(1800) {
                bail!("only {have} of {n} agents connected in 30 minutes");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "  {n} agents connected in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(Self {
            counters,
            load: load_tx,
            origin: origin_tx,
            stop,
            tasks,
        })
    }

    /// Prints how many commands the simulated agents answered, then stops them: how a scenario
    /// that sent the fleet commands ends.
    async fn stop_reporting_commands(self) {
        println!(
            "commands answered by the simulated agents: {}",
            self.counters.commands.load(Ordering::Relaxed)
        );
        self.stop().await;
    }

    async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

// ----- scenarios -----

fn hub_with(
    args: &Args,
    env: &[(&str, String)],
    database_url: Option<&str>,
    ca: &Path,
) -> anyhow::Result<HubProcess> {
    let mut builder = HubProcess::builder()
        .binary(measure::binary(&args.profile, "banhub")?)
        .ca_dir(ca)
        .env(
            "BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS",
            args.heartbeat_ms.to_string(),
        )
        .env(
            "BANHUB_DATABASE__MAX_CONNECTIONS",
            args.db_connections.to_string(),
        )
        .env("BANHUB_LOG__FILTER", "warn")
        .start_timeout(Duration::from_secs(60));
    for (k, v) in env {
        builder = builder.env(*k, v);
    }
    if let Some(url) = database_url {
        builder = builder.database_url(url);
    }
    builder.start()
}

fn ca_pem(ca: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(ca.join("ca.pem")).context("reading the hub's CA")
}

/// One hub (SQLite, `env` added to [`hub_with`]'s) with `n` simulated agents enrolled as
/// `<prefix>…`, idle and online. The CA's directory comes first so that it outlives the hub.
async fn simulated_fleet(
    args: &Args,
    env: &[(&str, String)],
    prefix: &str,
    n: usize,
) -> anyhow::Result<(tempfile::TempDir, HubProcess, Fleet)> {
    let ca = tempfile::tempdir()?;
    let hub = hub_with(args, env, None, ca.path())?;
    let pem = ca_pem(ca.path())?;
    let creds = enroll_many(
        &hub.client(),
        &hub.http_url(),
        hub.grpc_addr(),
        &pem,
        prefix,
        n,
    )
    .await?;
    let fleet = Fleet::start(creds, &pem, &[hub.grpc_addr()], Load::Idle).await?;
    wait_online(&hub, n).await?;
    Ok((ca, hub, fleet))
}

async fn sessions(args: &Args) -> anyhow::Result<()> {
    let n = args.agents;
    println!(
        "== sessions: {n} agents on one hub (SQLite), heartbeat every {} ms",
        args.heartbeat_ms
    );
    let ca = tempfile::tempdir()?;
    let hub = hub_with(args, &[], None, ca.path())?;
    let pem = ca_pem(ca.path())?;
    let api = hub.http_url();
    let enrolled_at = Instant::now();
    let creds = enroll_many(&hub.client(), &api, hub.grpc_addr(), &pem, "s", n).await?;
    println!(
        "enrolled {n} agents in {:.1} s ({:.0}/s)",
        enrolled_at.elapsed().as_secs_f64(),
        n as f64 / enrolled_at.elapsed().as_secs_f64()
    );
    let pid = pid_of(&hub)?;
    // Settle after the enrollment burst, then the baseline.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let base = rss_kib(pid)?;
    let fleet = Fleet::start(creds, &pem, &[hub.grpc_addr()], Load::Idle).await?;
    let online = wait_online(&hub, n).await?;
    // Let allocations settle over a few heartbeats.
    tokio::time::sleep(Duration::from_millis(u64::from(args.heartbeat_ms) * 2)).await;
    let with = rss_kib(pid)?;
    let cpu0 = cpu_time(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let cpu = cpu_time(pid)? - cpu0;
    let wall = t0.elapsed();
    let with_after = rss_kib(pid)?;
    let me = rss_kib(std::process::id())?;
    println!("hub RSS before sessions: {:.1} MiB", base as f64 / 1024.0);
    println!(
        "hub RSS with {online} sessions: {:.1} MiB (after the idle window: {:.1} MiB)",
        with as f64 / 1024.0,
        with_after as f64 / 1024.0
    );
    println!(
        "hub memory per session: {:.1} KiB",
        (with_after.max(with) - base) as f64 / online as f64
    );
    println!(
        "hub CPU at idle with {online} sessions: {:.2}% of one core ({:.2} s CPU over {:.0} s)",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        cpu.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "simulator RSS: {:.1} MiB; session failures: {}",
        me as f64 / 1024.0,
        fleet.counters.failures.load(Ordering::Relaxed)
    );
    fleet.stop().await;
    Ok(())
}

/// Waits until the hub's `/metrics` says `n` agents are connected; returns the count.
async fn wait_online(hub: &HubProcess, n: usize) -> anyhow::Result<usize> {
    let started = Instant::now();
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
            return Ok(connected);
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the hub reports {connected} of {n} agents connected");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let last = sorted.len().saturating_sub(1);
    sorted
        .get(((last as f64) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

async fn fleet_ban(args: &Args) -> anyhow::Result<()> {
    let n = args.ban_agents;
    println!("== fleet-ban: fleet-wide bans over {n} online agents (one hub, SQLite)");
    let (_ca, hub, fleet) = simulated_fleet(args, &[], "b", n).await?;
    let client = hub.client();
    let mut samples = Vec::with_capacity(args.ban_rounds);
    for round in 0..args.ban_rounds + 2 {
        // TEST-NET-2: the hub refuses to ban its own addresses, and sandboxed machines are often
        // numbered in TEST-NET-1.
        let ip = format!("198.51.100.{}", round % 250 + 1);
        let started = Instant::now();
        let response = client
            .post(hub.url("/api/fleet/bans"))
            .json(&json!({"ip": ip, "jail": "sshd", "all": true}))
            .send()
            .await?;
        let elapsed = started.elapsed();
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() || body["counts"]["done"].as_u64() != Some(n as u64) {
            bail!("fleet ban {round}: {status} {}", body["counts"]);
        }
        // The first two warm caches up; they are not counted.
        if round >= 2 {
            samples.push(elapsed);
        }
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "fleet ban over {n} agents, all acks back: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms (n={})",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(percentile(&samples, 0.99)),
        ms(percentile(&samples, 1.0)),
        samples.len()
    );
    fleet.stop_reporting_commands().await;
    Ok(())
}

/// A sharing policy (every server to every other) over `ban_agents` simulated agents: the first one
/// reports a ban, and each other one's `SyncSharedBans` with it is timed from the report.
async fn share(args: &Args) -> anyhow::Result<()> {
    let n = args.ban_agents;
    println!(
        "== share: origin ban to shared ban on {} targets (one hub, SQLite)",
        n - 1
    );
    // One origin ban makes a shared ban per target; the storm breaker's limit is raised past the
    // rounds' total so the bench times propagation, not the breaker.
    let env = [(
        "BANHUB_DEFENCE__STORM_LIMIT_PER_MINUTE",
        "1000000".to_owned(),
    )];
    let (_ca, hub, fleet) = simulated_fleet(args, &env, "h", n).await?;
    let client = hub.client();
    let policy = client
        .post(hub.url("/api/sharing/policies"))
        .json(
            &json!({"name": "bench", "sources": {"all": true}, "targets": {"all": true},
                      "duration": {"mode": "fixed", "seconds": 3600}}),
        )
        .send()
        .await?;
    if !policy.status().is_success() {
        bail!(
            "creating the policy: {} {}",
            policy.status(),
            policy.text().await?
        );
    }
    let targets = n - 1;
    let (mut each, mut last) = (Vec::new(), Vec::new());
    for round in 0..args.ban_rounds + 2 {
        let ip = format!("198.51.100.{}", round % 250 + 1);
        let started = Instant::now();
        fleet.origin.send(ip.clone())?;
        let arrivals = loop {
            let arrivals: Vec<Duration> = {
                let shared = fleet
                    .counters
                    .shared
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                shared
                    .iter()
                    .filter(|(shared_ip, _)| *shared_ip == ip)
                    .map(|(_, at)| at.saturating_duration_since(started))
                    .collect()
            };
            if arrivals.len() >= targets {
                break arrivals;
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "round {round}: {} of {targets} targets got the shared ban",
                    arrivals.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        // The first two warm caches up; they are not counted.
        if round >= 2 {
            last.push(arrivals.iter().copied().max().unwrap_or_default());
            each.extend(arrivals);
        }
    }
    each.sort();
    last.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "origin ban event to SyncSharedBans on each target ({targets} targets x {} bans): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        last.len(),
        ms(percentile(&each, 0.5)),
        ms(percentile(&each, 0.9)),
        ms(percentile(&each, 0.99)),
        ms(percentile(&each, 1.0)),
    );
    println!(
        "origin ban event to the last target's SyncSharedBans: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        ms(percentile(&last, 0.5)),
        ms(percentile(&last, 0.99)),
        ms(percentile(&last, 1.0)),
    );
    fleet.stop().await;
    Ok(())
}

/// Ingest with the agents split over `hubs`; returns (events per second, hub CPU seconds).
/// What one ingest phase measured.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    events: u64,
    wall: f64,
    /// CPU seconds over the window: the hubs, PostgreSQL (server and backends), this simulator, and
    /// whatever else ran on the machine (busy time not accounted to those three).
    hub: f64,
    postgres: f64,
    simulator: f64,
    other: f64,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.events as f64 / self.wall.max(f64::EPSILON)
    }

    /// Milliseconds of CPU per 1,000 events.
    fn per_k(&self, cpu: f64) -> f64 {
        1e6 * cpu / self.events.max(1) as f64
    }

    fn add(&mut self, other: &Phase) {
        self.events += other.events;
        self.wall += other.wall;
        self.hub += other.hub;
        self.postgres += other.postgres;
        self.simulator += other.simulator;
        self.other += other.other;
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name}: {:.0} events/s; CPU ms per 1,000 events: hub {:.1}, PostgreSQL {:.1}, simulator {:.1}, other processes {:.1}",
            self.rate(),
            self.per_k(self.hub),
            self.per_k(self.postgres),
            self.per_k(self.simulator),
            self.per_k(self.other)
        )
    }
}

/// CPU time of PostgreSQL: the postmaster, its living children, and the children it has reaped
/// (so a backend that ends inside a window still counts).
fn postgres_cpu(pg: &PostgresServer) -> anyhow::Result<Duration> {
    let pid_file = std::fs::read_to_string(pg.dir().join("data").join("postmaster.pid"))?;
    let postmaster: u32 = pid_file
        .lines()
        .next()
        .context("postmaster.pid")?
        .trim()
        .parse()?;
    let stat = std::fs::read_to_string(format!("/proc/{postmaster}/stat"))?;
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field =
        |i: usize| -> anyhow::Result<u64> { Ok(fields.get(i).context("stat field")?.parse()?) };
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    // utime, stime, cutime, cstime.
    let mut total = (field(11)? + field(12)? + field(13)? + field(14)?) as f64 / ticks;
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(postmaster) {
            let utime: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
            let stime: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
            total += (utime + stime) as f64 / ticks;
        }
    }
    Ok(Duration::from_secs_f64(total))
}

/// Busy CPU time of the whole machine so far (all cores; idle and I/O wait excluded).
fn machine_busy() -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let busy: u64 = v.iter().take(8).sum::<u64>() - v.get(3).unwrap_or(&0) - v.get(4).unwrap_or(&0);
    Ok(Duration::from_secs_f64(
        busy as f64 / rustix::param::clock_ticks_per_second() as f64,
    ))
}

/// CPU seconds of (hubs, PostgreSQL, this process, the whole machine) so far.
fn cpu_sample(pids: &[u32], pg: &PostgresServer) -> anyhow::Result<[f64; 4]> {
    let hubs = pids
        .iter()
        .map(|p| cpu_time(*p).map(|c| c.as_secs_f64()))
        .sum::<Result<f64, _>>()?;
    Ok([
        hubs,
        postgres_cpu(pg)?.as_secs_f64(),
        cpu_time(std::process::id())?.as_secs_f64(),
        machine_busy()?.as_secs_f64(),
    ])
}

async fn ingest_phase(
    args: &Args,
    hubs: &[&HubProcess],
    pg: &PostgresServer,
    pem: &str,
    creds: Vec<Credentials>,
) -> anyhow::Result<Phase> {
    let addrs: Vec<SocketAddr> = hubs.iter().map(|h| h.grpc_addr()).collect();
    let fleet = Fleet::start(creds, pem, &addrs, Load::Idle).await?;
    let pids: Vec<u32> = hubs.iter().map(|h| pid_of(h)).collect::<Result<_, _>>()?;
    // Warm up, then measure a window.
    let _ = fleet.load.send(Load::Flood(args.batch));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let acked0 = fleet.counters.events_acked.load(Ordering::Relaxed);
    let cpu0 = cpu_sample(&pids, pg)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.ingest_secs)).await;
    let acked = fleet.counters.events_acked.load(Ordering::Relaxed) - acked0;
    let wall = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_sample(&pids, pg)?;
    let _ = fleet.load.send(Load::Idle);
    fleet.stop().await;
    let [hub, postgres, simulator, busy] = [0, 1, 2, 3].map(|i| cpu1[i] - cpu0[i]);
    Ok(Phase {
        events: acked,
        wall,
        hub,
        postgres,
        simulator,
        other: (busy - hub - postgres - simulator).max(0.0),
    })
}

async fn replicas(args: &Args) -> anyhow::Result<()> {
    let n = args.ingest_agents;
    println!(
        "== replicas: ingest by {n} agents sending batches of {} as fast as acks come, {} s per phase, on PostgreSQL",
        args.batch, args.ingest_secs
    );
    let pg = PostgresServer::start()?;
    let ca = tempfile::tempdir()?;

    // The two replicas share this machine's cores the way they would each have their own: one
    // runtime worker each, where the single replica has the usual one per core.
    // Phases alternate one replica, two replicas on their own database (the agents split between
    // them), one, two, one: the machine's load drifts (other work, the databases growing), and
    // comparing the two-replica phases with the one-replica phases around them cancels most of it.
    // Every hub stays up for the whole run; a hub without agents costs next to nothing, and the
    // CPU of everything else on the machine is reported as "other processes".
    let one_url = pg.create_database("fleet_one")?;
    let solo = hub_with(
        args,
        &[("BANHUB_CLUSTER__REPLICA_ID", "solo".into())],
        Some(&one_url),
        ca.path(),
    )?;
    let pem = ca_pem(ca.path())?;
    let creds = enroll_many(
        &solo.client(),
        &solo.http_url(),
        solo.grpc_addr(),
        &pem,
        "one",
        n,
    )
    .await?;
    let two_url = pg.create_database("fleet_two")?;
    let replica = |id: &str| {
        hub_with(
            args,
            &[
                ("BANHUB_CLUSTER__REPLICA_ID", id.into()),
                ("TOKIO_WORKER_THREADS", "1".into()),
            ],
            Some(&two_url),
            ca.path(),
        )
    };
    let (a, b) = (replica("a")?, replica("b")?);
    let two_creds = enroll_many(&a.client(), &a.http_url(), a.grpc_addr(), &pem, "two", n).await?;

    let (mut one, mut two) = (Phase::default(), Phase::default());
    for round in 0..5 {
        let phase = if round % 2 == 0 {
            let p = ingest_phase(args, &[&solo], &pg, &pem, creds.clone()).await?;
            one.add(&p);
            p.line(&format!("  phase {}: one replica ", round + 1))
        } else {
            let p = ingest_phase(args, &[&a, &b], &pg, &pem, two_creds.clone()).await?;
            two.add(&p);
            p.line(&format!("  phase {}: two replicas", round + 1))
        };
        println!("{phase} (load average {})", measure::load_average());
    }
    println!("{}", one.line("one replica "));
    println!("{}", two.line("two replicas"));
    println!("two / one: {:.2}x", two.rate() / one.rate());
    let total = |p: &Phase| p.per_k(p.hub + p.postgres + p.simulator);
    println!(
        "CPU of the path (hub + PostgreSQL + simulator) per 1,000 events: one {:.1} ms, two {:.1} ms",
        total(&one),
        total(&two)
    );
    drop((a, b, solo));
    drop(pg);
    Ok(())
}

async fn agent(args: &Args) -> anyhow::Result<()> {
    println!(
        "== agent: an idle real banhub-agent ({}) beside fail2ban",
        args.profile
    );
    let ca = tempfile::tempdir()?;
    let hub = hub_with(args, &[], None, ca.path())?;
    let sandbox = Fail2banSandbox::start("footprint")?;
    let created: Value = hub
        .client()
        .post(hub.url("/api/servers"))
        .json(&json!({"name": "footprint"}))
        .send()
        .await?
        .json()
        .await?;
    let token = created["enrollment"]["token"].as_str().context("token")?;
    let state = tempfile::tempdir()?;
    let dir = state.path().join("agent");
    let agent_bin = measure::binary(&args.profile, "banhub-agent")?;
    let out = std::process::Command::new(&agent_bin)
        .args(["enroll", token, "--state-dir"])
        .arg(&dir)
        .output()?;
    if !out.status.success() {
        bail!("enroll: {}", String::from_utf8_lossy(&out.stderr));
    }
    let agent = AgentProcess::start_binary(
        agent_bin.clone(),
        &dir,
        &sandbox.socket_path(),
        &sandbox.conf_dir(),
        &[],
    )?;
    wait_online(&hub, 1).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pid = agent.pid().context("agent pid")?;
    let cpu0 = cpu_time(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let cpu = cpu_time(pid)? - cpu0;
    println!("idle agent RSS: {:.1} MiB", rss_kib(pid)? as f64 / 1024.0);
    println!(
        "idle agent CPU: {:.3}% of one core ({:.3} s over {:.0} s)",
        100.0 * cpu.as_secs_f64() / t0.elapsed().as_secs_f64(),
        cpu.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    for name in ["banhub", "banhub-agent"] {
        let path = measure::binary(&args.profile, name)?;
        println!(
            "binary {name} ({}): {:.1} MiB",
            args.profile,
            std::fs::metadata(&path)?.len() as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}

/// `GetConfigFiles` answered `ok` so far, from the hub's `/metrics`.
async fn config_reads(hub: &HubProcess) -> anyhow::Result<u64> {
    let text = hub
        .client()
        .get(hub.url("/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| {
            l.strip_prefix("banhub_commands_total{kind=\"get_config_files\",outcome=\"ok\"} ")
        })
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64)
}

/// Sends `request`, then waits until the hub read every host's files once more and `/api/drift`
/// counts `want` servers as `state`; prints the pass's wall and hub CPU time.
async fn drift_pass(
    hub: &HubProcess,
    pid: u32,
    label: &str,
    request: reqwest::RequestBuilder,
    n: u64,
    (state, want): (&str, u64),
) -> anyhow::Result<()> {
    let reads = config_reads(hub).await?;
    let cpu0 = cpu_time(pid)?;
    let started = Instant::now();
    let response = request.send().await?;
    if !response.status().is_success() {
        bail!("{label}: {} {}", response.status(), response.text().await?);
    }
    loop {
        let summary: Value = hub
            .client()
            .get(hub.url("/api/drift"))
            .send()
            .await?
            .json()
            .await?;
        if config_reads(hub).await? >= reads + n && summary["counts"][state].as_u64() == Some(want)
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("{label}: not done after 300 s: {}", summary["counts"]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wall = started.elapsed();
    let cpu = cpu_time(pid)? - cpu0;
    println!(
        "{label}: {n} hosts compared in {:.2} s wall, hub CPU {:.2} s ({:.2} ms per host)",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1000.0 / n as f64
    );
    Ok(())
}

/// A profile over `ban_agents` simulated agents, and three full drift checks of them.
async fn drift(args: &Args) -> anyhow::Result<()> {
    let n = args.ban_agents;
    println!(
        "== drift: drift check of {n} simulated agents against their profile (one hub, SQLite)"
    );
    // The schedule stays out of the way; each pass is started by a change of the profile.
    let env = [("BANHUB_PROFILES__DRIFT_INTERVAL_SECS", "86400".to_owned())];
    let (_ca, hub, fleet) = simulated_fleet(args, &env, "d", n).await?;
    let pid = pid_of(&hub)?;
    let client = hub.client();
    let n = n as u64;
    let drifted = SIMULATED_JAIL.replace("maxretry = 3", "maxretry = 5");
    drift_pass(
        &hub,
        pid,
        "every host drifted (first comparison)",
        client.post(hub.url("/api/profiles")).json(&json!({
            "name": "sim", "labels": {"sim": "d"},
            "files": [{"path": "jail.d/sshd.local", "content": drifted}]})),
        n,
        ("drifted", n),
    )
    .await?;
    drift_pass(
        &hub,
        pid,
        "every host in sync (new version)",
        client
            .post(hub.url("/api/profiles/sim/versions"))
            .json(&json!({"files": [{"path": "jail.d/sshd.local", "content": SIMULATED_JAIL}]})),
        n,
        ("in_sync", n),
    )
    .await?;
    drift_pass(
        &hub,
        pid,
        "nothing changed (same assignment saved again)",
        client
            .put(hub.url("/api/profiles/sim"))
            .json(&json!({"labels": {"sim": "d"}})),
        n,
        ("in_sync", n),
    )
    .await?;
    fleet.stop_reporting_commands().await;
    Ok(())
}

async fn simulate(args: &Args) -> anyhow::Result<()> {
    let api = args.hub_http.clone().context("--hub-http is required")?;
    let token = args.token.clone().context("--token is required")?;
    let ca = args.ca.clone().context("--ca is required")?;
    let pem = std::fs::read_to_string(&ca)?;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))?,
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()?;
    let view: Value = http
        .get(format!("{api}/api/cluster"))
        .send()
        .await?
        .json()
        .await?;
    let grpc: SocketAddr = std::env::var("FLEET_SIM_GRPC")
        .context("set FLEET_SIM_GRPC to the hub's gRPC address")?
        .parse()?;
    let creds = if args.enroll_existing.is_empty() {
        println!("simulating {} agents against {api} ({view})", args.agents);
        enroll_many(&http, &api, grpc, &pem, "sim", args.agents).await?
    } else {
        println!(
            "simulating the agents of {} registered servers against {api} ({view})",
            args.enroll_existing.len()
        );
        let names = args.enroll_existing.clone();
        enroll(&http, &api, grpc, &pem, names, Servers::Existing).await?
    };
    let agents = creds.len();
    let load = if args.rate > 0.0 {
        Load::Every(Duration::from_secs_f64(agents as f64 / args.rate))
    } else {
        Load::Idle
    };
    let fleet = Fleet::start(creds, &pem, &[grpc], load).await?;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let c = &fleet.counters;
        println!(
            "connected {} sessions {} events sent {} acked {} commands {} failures {}",
            c.connected.load(Ordering::Relaxed),
            c.sessions.load(Ordering::Relaxed),
            c.events_sent.load(Ordering::Relaxed),
            c.events_acked.load(Ordering::Relaxed),
            c.commands.load(Ordering::Relaxed),
            c.failures.load(Ordering::Relaxed)
        );
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let limit = raise_fd_limit()?;
    eprintln!("open-file limit: {limit}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for scenario in &args.scenario {
            match scenario {
                Scenario::Sessions => sessions(&args).await?,
                Scenario::FleetBan => fleet_ban(&args).await?,
                Scenario::Share => share(&args).await?,
                Scenario::Replicas => replicas(&args).await?,
                Scenario::Agent => agent(&args).await?,
                Scenario::Simulate => simulate(&args).await?,
                Scenario::Drift => drift(&args).await?,
                Scenario::Rollout => rollout::rollout(&args).await?,
            }
        }
        Ok(())
    })
}
