//! `banhub-bench`: measures the hub's event path on SQLite and PostgreSQL. It loads a realistic
//! history (20 servers, 50 jails, a long tail of addresses, 30 days) through
//! `Events::ingest_batch` as agents would, reports the ingest rate next to the raw multi-row insert
//! rate of the same database, then times the event queries the UI makes (pages, deep pages, stats,
//! insights) over the loaded table. Figures and the commands that produced them: `bench/README.md`.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use banhub::config::EventsConfig;
use banhub::domain::events::{
    BanDuration, BanFacts, Cursor, EventBody, EventFilter, EventId, EventSource, InsightsQuery,
    IpOrCidr, JailName, Logs, NewEvent, StatsQuery,
};
use banhub::domain::{AgentId, Labels, NewServer, ServerId, ServerName};
use banhub::events::Events;
use banhub::store::Store;
use chrono::{DateTime, Utc};
use clap::{Parser, ValueEnum};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use sea_orm::{ConnectOptions, ConnectionTrait as _, Database, DbBackend, Statement, Value};
use tokio_util::sync::CancellationToken;

const SERVERS: usize = 20;
const JAILS: usize = 50;
/// Distinct addresses to draw from; a few are drawn very often, most rarely.
const ADDRESSES: u64 = 400_000;
const DAYS: i64 = 30;
const DAY_MS: i64 = 24 * 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Sqlite,
    Postgres,
    Both,
}

/// Ingest and query benchmark of the hub's event store.
#[derive(Debug, Parser)]
struct Args {
    /// Events to load through `Events::ingest_batch`.
    #[arg(long, default_value_t = 1_000_000)]
    events: u64,
    #[arg(long, value_enum, default_value = "both")]
    backend: Backend,
    /// Events per agent batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Concurrent agents ingesting (the servers are split between them).
    #[arg(long, default_value_t = 1)]
    writers: usize,
    /// Rows for the raw insert measurement.
    #[arg(long, default_value_t = 200_000)]
    raw_events: u64,
    /// Timed runs per query.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Directory for the SQLite file (default: a temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Use this PostgreSQL database instead of starting a throwaway server.
    #[arg(long)]
    postgres_url: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if matches!(args.backend, Backend::Sqlite | Backend::Both) {
        let temp = tempfile::tempdir()?;
        let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("bench.db");
        let _ = std::fs::remove_file(&file);
        let url = format!("sqlite://{}?mode=rwc", file.display());
        run("SQLite", &url, &args).await?;
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        println!("SQLite file: {:.0} MiB", size as f64 / 1048576.0);
    }
    if matches!(args.backend, Backend::Postgres | Backend::Both) {
        let (url, _server) = match &args.postgres_url {
            Some(url) => (url.clone(), None),
            None => {
                let server = banhub_tests::PostgresServer::start()
                    .context("starting a throwaway PostgreSQL")?;
                let url = server.create_database("banhub_bench")?;
                (url, Some(server))
            }
        };
        run("PostgreSQL", &url, &args).await?;
    }
    Ok(())
}

async fn run(name: &str, url: &str, args: &Args) -> anyhow::Result<()> {
    println!(
        "\n=== {name}: {} events, batches of {}, {} writer(s) ===",
        args.events, args.batch, args.writers
    );
    raw_insert_rate(url, args).await?;

    let store = Store::connect(url, 8).await?;
    let config = EventsConfig {
        retention_days: 0,
        prune_interval_secs: 3600,
    };
    let events = Events::new(store.clone(), &config, CancellationToken::new());
    let mut servers = Vec::with_capacity(SERVERS);
    for i in 0..SERVERS {
        let server = store
            .create_server(NewServer {
                name: ServerName::parse(&format!("host-{i:02}"))?,
                description: String::new(),
                labels: Labels::default(),
            })
            .await?;
        servers.push(server.id);
    }

    let end = Utc::now().timestamp_millis();
    let start = end - DAYS * DAY_MS;
    let loaded = load(url, &events, &servers, start, end, args).await?;
    queries(&events, &servers, start, end, loaded, args).await?;
    Ok(())
}

/// A jail name, the first ones the common ones (and drawn most often).
fn jail_name(i: usize) -> String {
    const COMMON: [&str; 10] = [
        "sshd",
        "nginx-http-auth",
        "nginx-botsearch",
        "postfix",
        "postfix-sasl",
        "dovecot",
        "recidive",
        "apache-auth",
        "vsftpd",
        "wordpress",
    ];
    COMMON
        .get(i)
        .map_or_else(|| format!("app-{i:02}"), |n| (*n).to_owned())
}

/// Address number `k`: mostly IPv4 spread over the public space, one in ten IPv6.
fn address(k: u64) -> String {
    let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    if k % 10 == 9 {
        return format!(
            "2001:db8:{:x}:{:x}::{:x}",
            (h >> 48) & 0xffff,
            (h >> 32) & 0xffff,
            k & 0xffff
        );
    }
    let v4 = (h >> 32) as u32;
    // First octet 11..=222 but 127: no loopback, private 10/8, multicast or reserved space.
    let first = match 11 + (v4 >> 24) % 212 {
        127 => 128,
        other => other,
    };
    format!(
        "{first}.{}.{}.{}",
        (v4 >> 16) & 0xff,
        (v4 >> 8) & 0xff,
        v4 & 0xff
    )
}

/// A skewed pick in `0..n`: low numbers far more often, like offenders and jails in real logs.
fn skewed(rng: &mut StdRng, n: u64, power: f64) -> u64 {
    let u: f64 = rng.random();
    ((n as f64) * u.powf(power)) as u64 % n
}

fn event(rng: &mut StdRng, at_ms: i64) -> anyhow::Result<NewEvent> {
    let ip = address(skewed(rng, ADDRESSES, 3.0));
    let jail = jail_name(skewed(rng, JAILS as u64, 2.0) as usize);
    let when = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_default();
    let facts = BanFacts {
        ip: IpOrCidr::parse(&ip).map_err(|e| anyhow::anyhow!("{ip}: {e}"))?,
        jail: JailName::parse(&jail)?,
        hostname: "mail-03.example.net".to_owned(),
        failures: rng.random_range(3..10),
        logs: Logs::capped([
            format!(
                "{} sshd[{}]: Failed password for invalid user admin from {ip} port {} ssh2",
                when.format("%b %e %T"),
                rng.random_range(1000..60000),
                rng.random_range(1024..65535)
            ),
            format!(
                "{} sshd[{}]: Connection closed by authenticating user root {ip} port {} [preauth]",
                when.format("%b %e %T"),
                rng.random_range(1000..60000),
                rng.random_range(1024..65535)
            ),
        ]),
        ban_time: Some(at_ms / 1000),
        ban_duration: Some(BanDuration::Seconds(600)),
        ban_count: Some(rng.random_range(1..5)),
    };
    let body = if rng.random_bool(0.6) {
        EventBody::Ban(facts)
    } else {
        EventBody::Unban(facts)
    };
    let source = if rng.random_bool(0.03) {
        EventSource::Observed
    } else {
        EventSource::Action
    };
    Ok(NewEvent {
        occurred_at: when,
        source,
        body,
    })
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort_unstable();
    let n = samples.len();
    if n == 0 {
        return (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    }
    let p99 = samples[((n * 99) / 100).min(n - 1)];
    (samples[n / 2], p99, samples[n - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Multi-row inserts into a bare table shaped like `events` (no index, no rollup): what the
/// database can take at best with these batches.
async fn raw_insert_rate(url: &str, args: &Args) -> anyhow::Result<()> {
    if args.raw_events == 0 {
        return Ok(());
    }
    // The same SQLite settings as the hub's store: WAL, synchronous=NORMAL.
    let mut options = ConnectOptions::new(url.to_owned());
    options.max_connections(1).sqlx_logging(false);
    options.map_sqlx_sqlite_opts(|sqlite| {
        use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
        sqlite
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
    });
    let db = Database::connect(options).await?;
    let backend = db.get_database_backend();
    db.execute_unprepared("DROP TABLE IF EXISTS bench_raw")
        .await?;
    db.execute_unprepared(
        "CREATE TABLE bench_raw (server_id VARCHAR(36) NOT NULL, agent_id VARCHAR(36), epoch BIGINT, \
         seq BIGINT, kind VARCHAR(8) NOT NULL, source VARCHAR(16) NOT NULL, ip VARCHAR(64), \
         jail VARCHAR(64), hostname VARCHAR(255) NOT NULL, failures BIGINT NOT NULL, logs TEXT NOT NULL, \
         ban_time BIGINT, ban_duration BIGINT, ban_count BIGINT, occurred_at BIGINT NOT NULL, \
         stored_at BIGINT NOT NULL)",
    )
    .await?;
    let mut rng = StdRng::seed_from_u64(1);
    let server = ServerId::new().to_string();
    let agent = AgentId::new().to_string();
    let now = Utc::now().timestamp_millis();
    let started = Instant::now();
    let cpu = cpu_seconds();
    let mut seq = 0i64;
    while (seq as u64) < args.raw_events {
        let rows = args.batch.min((args.raw_events - seq as u64) as usize);
        let mut sql = String::from(
            "INSERT INTO bench_raw (server_id, agent_id, epoch, seq, kind, source, ip, jail, hostname, \
             failures, logs, ban_time, ban_duration, ban_count, occurred_at, stored_at) VALUES ",
        );
        let mut values: Vec<Value> = Vec::with_capacity(rows * 16);
        for r in 0..rows {
            seq += 1;
            let e = event(&mut rng, now)?;
            let Some(f) = e.body.facts() else { continue };
            let row: [Value; 16] = [
                server.clone().into(),
                agent.clone().into(),
                1i64.into(),
                seq.into(),
                e.body.kind().as_str().into(),
                e.source.as_str().into(),
                f.ip.to_string().into(),
                f.jail.to_string().into(),
                f.hostname.clone().into(),
                i64::from(f.failures).into(),
                format!("{:?}", f.logs.lines()).into(),
                f.ban_time.into(),
                600i64.into(),
                1i64.into(),
                now.into(),
                now.into(),
            ];
            sql.push_str(if r == 0 { "(" } else { ", (" });
            for (i, value) in row.into_iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                values.push(value);
                if backend == DbBackend::Postgres {
                    sql.push_str(&format!("${}", values.len()));
                } else {
                    sql.push('?');
                }
            }
            sql.push(')');
        }
        db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    let elapsed = started.elapsed();
    let cpu = cpu_seconds() - cpu;
    println!(
        "raw insert (bare table, no index, no rollup, one transaction per batch of {}): {} rows in \
         {:.1} s = {:.0} rows/s; {:.1} CPU-s of this process = {:.0} rows per CPU-second{}",
        args.batch,
        args.raw_events,
        elapsed.as_secs_f64(),
        args.raw_events as f64 / elapsed.as_secs_f64(),
        cpu,
        args.raw_events as f64 / cpu.max(0.001),
        cpu_note(url),
    );
    db.execute_unprepared("DROP TABLE bench_raw").await?;
    db.close().await?;
    Ok(())
}

/// Loads `args.events` events over `[start, end)` through `ingest_batch`, the servers split between
/// `args.writers` concurrent agents. Returns the id of the newest event.
async fn load(
    url: &str,
    events: &Events,
    servers: &[ServerId],
    start: i64,
    end: i64,
    args: &Args,
) -> anyhow::Result<u64> {
    let writers = args.writers.clamp(1, servers.len());
    let per_writer = args.events / writers as u64;
    let started = Instant::now();
    let cpu = cpu_seconds();
    let load_before = load_average();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let events = events.clone();
        let owned: Vec<ServerId> = servers.iter().copied().skip(w).step_by(writers).collect();
        let batch = args.batch;
        let report = w == 0;
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(42 + w as u64);
            let agents: Vec<AgentId> = owned.iter().map(|_| AgentId::new()).collect();
            let mut pending: Vec<Vec<(u64, NewEvent)>> = vec![Vec::new(); owned.len()];
            let mut seqs = vec![0u64; owned.len()];
            let mut latencies = Vec::new();
            let step = (end - start) as f64 / per_writer as f64;
            for i in 0..per_writer {
                let at = start + (i as f64 * step) as i64;
                let s = rng.random_range(0..owned.len());
                seqs[s] += 1;
                pending[s].push((seqs[s], event(&mut rng, at)?));
                if pending[s].len() >= batch {
                    let taken = std::mem::take(&mut pending[s]);
                    let t = Instant::now();
                    events.ingest_batch(owned[s], agents[s], 1, taken).await?;
                    latencies.push(t.elapsed());
                }
                if report && i > 0 && i % (per_writer / 10).max(1) == 0 {
                    eprintln!("  loaded {}%", i * 100 / per_writer);
                }
            }
            for (s, rest) in pending.into_iter().enumerate() {
                if !rest.is_empty() {
                    events.ingest_batch(owned[s], agents[s], 1, rest).await?;
                }
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let cpu = cpu_seconds() - cpu;
    let total = per_writer * writers as u64;
    let mut sorted = latencies.clone();
    sorted.sort_unstable();
    let p10 = sorted.get(sorted.len() / 10).copied().unwrap_or_default();
    let (p50, p99, max) = percentiles(latencies);
    println!(
        "ingest via Events::ingest_batch (events + rollups + cursor, one transaction per batch): \
         {total} events in {:.1} s = {:.0} events/s; batch commit p10 {:.1} ms, p50 {:.1} ms, \
         p99 {:.1} ms, max {:.1} ms; {:.1} CPU-s of this process = {:.0} events per CPU-second{}; \
         load average {load_before} before, {} after",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        ms(p10),
        ms(p50),
        ms(p99),
        ms(max),
        cpu,
        total as f64 / cpu.max(0.001),
        cpu_note(url),
        load_average(),
    );
    Ok(total)
}

async fn time_query<F, Fut, T>(label: &str, runs: usize, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    for _ in 0..3 {
        f().await?;
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f().await?;
        samples.push(t.elapsed());
    }
    let (p50, p99, max) = percentiles(samples);
    println!(
        "  {label:<46} median {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
        ms(p50),
        ms(p99),
        ms(max)
    );
    Ok(())
}

async fn queries(
    events: &Events,
    servers: &[ServerId],
    start: i64,
    end: i64,
    loaded: u64,
    args: &Args,
) -> anyhow::Result<()> {
    println!(
        "queries over {loaded} events ({} runs each, after 3 warm-up runs):",
        args.runs
    );
    let runs = args.runs;
    let now = DateTime::<Utc>::from_timestamp_millis(end).unwrap_or_default();
    let deep = Some(Cursor {
        occurred_at_ms: start + 3 * DAY_MS,
        id: EventId(i64::MAX),
    });
    let server = servers[3];
    let jail = JailName::parse("postfix")?;
    let all = EventFilter::default();
    let by_server_jail = EventFilter {
        server: Some(server),
        jail: Some(jail.clone()),
        ..EventFilter::default()
    };
    let hot_ip = EventFilter {
        ip: Some(IpOrCidr::parse(&address(0)).map_err(|e| anyhow::anyhow!("{e}"))?),
        ..EventFilter::default()
    };
    let net = IpOrCidr::parse(&address(1)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let IpOrCidr::Ip(first) = net else {
        anyhow::bail!("address 1 is not a single address");
    };
    let cidr = EventFilter {
        ip: Some(
            IpOrCidr::parse(&format!("{}/16", mask16(first)))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        ..EventFilter::default()
    };
    let page = |filter: EventFilter, after: Option<Cursor>| {
        let events = events.clone();
        move || {
            let events = events.clone();
            let filter = filter.clone();
            async move { Ok(events.list(&filter, after, 50).await?) }
        }
    };
    time_query("page 1 (50 newest)", runs, page(all.clone(), None)).await?;
    time_query("deep page (27 days back)", runs, page(all.clone(), deep)).await?;
    time_query(
        "page 1, one server + one jail",
        runs,
        page(by_server_jail.clone(), None),
    )
    .await?;
    time_query(
        "deep page, one server + one jail",
        runs,
        page(by_server_jail, deep),
    )
    .await?;
    time_query("page 1, one (hot) address", runs, page(hot_ip, None)).await?;
    time_query("page 1, a /16 network", runs, page(cidr, None)).await?;
    time_query(
        "page 1, kind=unban source=observed",
        runs,
        page(
            EventFilter {
                kinds: vec![banhub::domain::events::EventKind::Unban],
                sources: vec![EventSource::Observed],
                ..EventFilter::default()
            },
            None,
        ),
    )
    .await?;

    let stats = |days: i64, server: Option<ServerId>, jail: Option<JailName>| {
        let events = events.clone();
        move || {
            let events = events.clone();
            let query = StatsQuery {
                server,
                jail: jail.clone(),
                from: Some(now - chrono::Duration::days(days)),
                to: Some(now),
            };
            async move { Ok(events.stats(&query, now).await?) }
        }
    };
    time_query("stats, 24 hours", runs, stats(1, None, None)).await?;
    time_query("stats, 7 days", runs, stats(7, None, None)).await?;
    time_query("stats, 30 days", runs, stats(30, None, None)).await?;
    time_query(
        "stats, 30 days, one server",
        runs,
        stats(30, Some(server), None),
    )
    .await?;
    time_query(
        "stats, 30 days, one jail",
        runs,
        stats(30, None, Some(jail.clone())),
    )
    .await?;

    let insights = |server: Option<ServerId>, ip: Option<IpOrCidr>| {
        let events = events.clone();
        move || {
            let events = events.clone();
            let query = InsightsQuery {
                server,
                jail: None,
                from: None,
                to: None,
                limit: 10,
                ip,
            };
            async move { Ok(events.insights(&query, now).await?) }
        }
    };
    time_query("insights, 30 days", runs, insights(None, None)).await?;
    time_query(
        "insights, 30 days, one server",
        runs,
        insights(Some(server), None),
    )
    .await?;
    let hot = IpOrCidr::parse(&address(0)).map_err(|e| anyhow::anyhow!("{e}"))?;
    time_query(
        "insights + one address in detail",
        runs,
        insights(None, Some(hot)),
    )
    .await?;
    Ok(())
}

/// User plus system CPU time of this process so far, from `/proc/self/stat` (Linux, 100 ticks/s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// The 1-minute load average: other work on this 2-core machine slows every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

/// PostgreSQL works in its own processes, so this process's CPU time leaves most of it out.
fn cpu_note(url: &str) -> &'static str {
    if url.starts_with("postgres") {
        " (the PostgreSQL server's own CPU time is not included)"
    } else {
        ""
    }
}

fn mask16(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let o = v4.octets();
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(o[0], o[1], 0, 0))
        }
        std::net::IpAddr::V6(v6) => {
            let s = v6.segments();
            std::net::IpAddr::V6(std::net::Ipv6Addr::new(s[0], 0, 0, 0, 0, 0, 0, 0))
        }
    }
}
