//! `banhub-bench queries`: the events API over a large history. Seeds a realistic history (many
//! servers, jails and addresses with power-law weights, spread over 90 days) straight through the
//! hub's store — the rollups are built as ingest builds them — then starts the real hub on that
//! database and times `GET /api/events/bans` (first, following and deep pages, every filter, text
//! search), `/stats` and `/insights` over HTTP. A seeded SQLite file is kept in `--data` and reused.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use banhub::domain::events::{Cursor, EventId, IpOrCidr, NewEvent};
use banhub::domain::{AgentId, Labels, NewServer, ServerId, ServerName};
use banhub::store::Store;
use banhub::store::events::PendingRollups;
use banhub_tests::hub::HubProcess;
use sea_orm::ConnectionTrait as _;

use crate::measure::{self, Summary, ms};
use crate::workload::{self, COMMON_TEXT, Fleet, Generator, RARE_TEXT};
use crate::{Backend, Databases};

const DAY_MS: i64 = 24 * 3_600_000;

/// Options of `banhub-bench queries`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Events in the seeded history.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Days the history spans, ending at the time of seeding.
    #[arg(long, default_value_t = 90)]
    pub days: i64,
    #[arg(long, value_enum, default_value = "sqlite")]
    pub backend: Backend,
    /// Directory that keeps the seeded SQLite database for later runs (seeded when missing).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Timed runs per query (after 3 warm-up runs); a query slower than a second gets 3.
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Events per seeding transaction (with more than 50 servers, proportionally fewer, so that
    /// the batches being filled stay as large in all).
    #[arg(long, default_value_t = 5_000)]
    pub seed_batch: usize,
    /// Servers the history comes from, registered as the hub registers them, with labels and a
    /// mix of states (see [`server_states`]); a history of other than 50 is kept under its own
    /// file name.
    #[arg(long, default_value_t = 50)]
    pub servers: usize,
    /// Build of banhub to query: `release` (for figures) or `debug`.
    #[arg(long, default_value = "release")]
    pub profile: String,
    /// Instead of timing queries: seed this many events through ingest and in bulk into two
    /// SQLite files and check that both hold the same events and rollups.
    #[arg(long)]
    pub check_seed: Option<u64>,
    /// Seed the history in `--data` (when missing) and stop, without timing queries: seeding
    /// needs no quiet machine, the queries do.
    #[arg(long)]
    pub seed_only: bool,
    /// Time only the queries whose label contains one of these (comma-separated, e.g.
    /// `text,CIDR`), and skip the first insights request and its wait for the places count.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// The hub binary to query (a copy kept aside while others rebuild the tree); default: the
    /// `--profile` build of this tree.
    #[arg(long)]
    pub hub_bin: Option<PathBuf>,
    /// An existing, empty or previously seeded PostgreSQL database to use instead of a throwaway
    /// server (with `--backend postgres`): the history is seeded once and kept, with a marker in
    /// `--data`, so that 10 million events are seeded once for several runs.
    #[arg(long)]
    pub postgres_url: Option<String>,
    /// A lock file (e.g. `/work/notes/bench.lock`) held exclusively only while the queries are
    /// timed, so a long seeding of PostgreSQL (not kept between runs) runs without it.
    #[arg(long)]
    pub lock: Option<PathBuf>,
}

/// What a seeded database holds, written next to it once seeding finished.
#[derive(Debug)]
struct Seeded {
    events: u64,
    days: i64,
    /// The newest event's time: queries are relative to it, not to the clock.
    end_ms: i64,
    servers: Vec<String>,
    seconds: f64,
}

impl Seeded {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "events": self.events, "days": self.days, "endMs": self.end_ms,
            "servers": self.servers, "seconds": self.seconds,
        })
    }

    fn from_json(v: &serde_json::Value) -> anyhow::Result<Self> {
        Ok(Self {
            events: v["events"].as_u64().context("events")?,
            days: v["days"].as_i64().context("days")?,
            end_ms: v["endMs"].as_i64().context("endMs")?,
            servers: v["servers"]
                .as_array()
                .context("servers")?
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            seconds: v["seconds"].as_f64().unwrap_or(0.0),
        })
    }
}

pub async fn run(args: QueryArgs) -> anyhow::Result<()> {
    if let Some(events) = args.check_seed {
        return check_seed(events, &args).await;
    }
    println!(
        "== banhub-bench queries: {} events over {} days, {} build; load average {} ==",
        args.events,
        args.days,
        args.profile,
        measure::load_average()
    );
    let hub_bin = match &args.hub_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub")?,
    };
    for backend in args.backend.each() {
        println!("\n--- {} ---", backend.name());
        let external = args
            .postgres_url
            .clone()
            .filter(|_| backend == Backend::Postgres);
        let databases = match external {
            Some(_) => None,
            None => Some(Databases::start(backend)?),
        };
        let (url, seeded) = match (backend, &args.data) {
            (Backend::Postgres, Some(dir)) if external.is_some() => {
                let url = external.clone().unwrap_or_default();
                std::fs::create_dir_all(dir)?;
                let marker = dir.join(format!("postgres-events-{}.json", args.events));
                let seeded = match std::fs::read(&marker) {
                    Ok(bytes) => {
                        let seeded = Seeded::from_json(&serde_json::from_slice(&bytes)?)?;
                        println!(
                            "reusing {url} ({} events seeded in {:.0} s)",
                            seeded.events, seeded.seconds
                        );
                        seeded
                    }
                    Err(_) => {
                        let seeded =
                            seed(&url, args.events, &args, SeedMode::Bulk, now_ms()).await?;
                        index_text(&url).await?;
                        vacuum(&url).await?;
                        std::fs::write(&marker, serde_json::to_vec_pretty(&seeded.to_json())?)?;
                        seeded
                    }
                };
                (url, seeded)
            }
            (Backend::Sqlite, Some(dir)) => {
                std::fs::create_dir_all(dir)?;
                let stem = history_stem(args.events, args.servers);
                let file = dir.join(format!("{stem}.db"));
                let marker = dir.join(format!("{stem}.json"));
                let url = format!("sqlite://{}?mode=rwc", file.display());
                let seeded = match std::fs::read(&marker) {
                    Ok(bytes) => {
                        let seeded = Seeded::from_json(&serde_json::from_slice(&bytes)?)?;
                        println!(
                            "reusing {} ({} events seeded in {:.0} s)",
                            file.display(),
                            seeded.events,
                            seeded.seconds
                        );
                        seeded
                    }
                    Err(_) => {
                        let _ = std::fs::remove_file(&file);
                        let seeded =
                            seed(&url, args.events, &args, SeedMode::Bulk, now_ms()).await?;
                        std::fs::write(&marker, serde_json::to_vec_pretty(&seeded.to_json())?)?;
                        seeded
                    }
                };
                (url, seeded)
            }
            _ => {
                let databases = databases
                    .as_ref()
                    .context("--postgres-url needs --data for its marker")?;
                let url = match databases.hub_url()? {
                    Some(url) => url,
                    None => databases.fresh("events")?,
                };
                let seeded = seed(&url, args.events, &args, SeedMode::Bulk, now_ms()).await?;
                (url, seeded)
            }
        };
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .and_then(|u| u.split('?').next())
        {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            println!("database file: {:.0} MiB", size as f64 / 1_048_576.0);
        }
        index_text(&url).await?;
        if args.seed_only {
            continue;
        }
        // Held until the queries are timed; dropped (unlocked) with the file.
        let _lock = match &args.lock {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                let waiting = Instant::now();
                file.lock()?;
                println!(
                    "holding {} (waited {:.0} s); load average {}",
                    path.display(),
                    waiting.elapsed().as_secs_f64(),
                    measure::load_average()
                );
                Some(file)
            }
            None => None,
        };
        queries(&url, &seeded, &args, &hub_bin).await?;
    }
    Ok(())
}

/// The kept SQLite history's file name without its extension.
pub fn history_stem(events: u64, servers: usize) -> String {
    if servers == Fleet::default().servers {
        format!("events-{events}")
    } else {
        format!("events-{events}-servers-{servers}")
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How a history is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SeedMode {
    /// Through `Store::ingest_batch`, as agents' batches arrive: the reference, and slow.
    Ingest,
    /// Bulk: `Store::import_batch` with the paging indexes dropped and built again at the end,
    /// and the rollups added up in memory by the store's own aggregation and written once.
    Bulk,
}

/// Loads `events` events, one agent per server, oldest first.
async fn seed(
    url: &str,
    events: u64,
    args: &QueryArgs,
    mode: SeedMode,
    end_ms: i64,
) -> anyhow::Result<Seeded> {
    let store = Store::connect(url, 4).await?;
    let fleet = Fleet {
        servers: args.servers.max(1),
        ..Fleet::default()
    };
    let mut servers: Vec<ServerId> = Vec::with_capacity(fleet.servers);
    for i in 0..fleet.servers {
        let server = store
            .create_server(NewServer {
                name: ServerName::parse(&format!("host-{i:02}"))?,
                description: String::new(),
                labels: server_labels(i)?,
            })
            .await?;
        servers.push(server.id);
    }
    let hostnames: Vec<String> = (0..fleet.servers)
        .map(|i| format!("host-{i:02}.example.net"))
        .collect();
    let start_ms = end_ms - args.days * DAY_MS;
    let total = events;
    let batch = (args.seed_batch * Fleet::default().servers / fleet.servers).max(100);
    let indexes = match mode {
        SeedMode::Bulk => drop_paging_indexes(url).await?,
        SeedMode::Ingest => Vec::new(),
    };

    // One task draws the events (its own core), this one stores them.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, Vec<(u64, NewEvent)>)>(8);
    let producer = tokio::task::spawn_blocking(move || {
        let mut generator = Generator::new(fleet, 10);
        let mut pending: Vec<Vec<(u64, NewEvent)>> = vec![Vec::new(); fleet.servers];
        let mut seqs = vec![0u64; fleet.servers];
        let step = (end_ms - start_ms) as f64 / total as f64;
        for i in 0..total {
            let at = start_ms + (i as f64 * step) as i64;
            let sample = generator.sample(at);
            let s = sample.server;
            seqs[s] += 1;
            pending[s].push((seqs[s], sample.new_event(&hostnames[s])));
            if pending[s].len() >= batch
                && tx
                    .blocking_send((s, std::mem::take(&mut pending[s])))
                    .is_err()
            {
                return;
            }
        }
        for (s, rest) in pending.into_iter().enumerate() {
            if !rest.is_empty() && tx.blocking_send((s, rest)).is_err() {
                return;
            }
        }
    });
    let agents: Vec<AgentId> = servers.iter().map(|_| AgentId::new()).collect();
    server_states(url, &servers, &agents, end_ms).await?;
    let started = Instant::now();
    let mut stored = 0u64;
    let mut next_report = total / 10;
    let mut rollups = PendingRollups::new();
    while let Some((s, events)) = rx.recv().await {
        stored += events.len() as u64;
        match mode {
            SeedMode::Ingest => {
                store.ingest_batch(servers[s], agents[s], 1, events).await?;
            }
            SeedMode::Bulk => {
                let outcome = store.import_batch(servers[s], agents[s], 1, events).await?;
                rollups.add(&outcome.stored);
            }
        }
        if stored >= next_report {
            eprintln!(
                "  stored {stored} events in {:.0} s ({:.0}/s)",
                started.elapsed().as_secs_f64(),
                stored as f64 / started.elapsed().as_secs_f64()
            );
            next_report += total / 10;
        }
    }
    producer.await?;
    let rows_seconds = started.elapsed().as_secs_f64();
    if mode == SeedMode::Bulk {
        let at = Instant::now();
        store.apply_rollups(rollups).await?;
        let rollup_seconds = at.elapsed().as_secs_f64();
        let at = Instant::now();
        create_indexes(url, &indexes).await?;
        println!(
            "bulk seeding: rows {rows_seconds:.0} s, rollups {rollup_seconds:.0} s, {} paging \
             indexes built again in {:.0} s",
            indexes.len(),
            at.elapsed().as_secs_f64()
        );
    }
    drop(store);
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "seeded {stored} events ({}, {batch} per transaction) in {seconds:.0} s = {:.0} events/s",
        match mode {
            SeedMode::Ingest => "through Store::ingest_batch",
            SeedMode::Bulk => "bulk: Store::import_batch + Store::apply_rollups",
        },
        stored as f64 / seconds
    );
    Ok(Seeded {
        events: stored,
        days: args.days,
        end_ms,
        servers: servers.iter().map(ToString::to_string).collect(),
        seconds,
    })
}

/// Labels of seeded server `i`: an environment, a region and a role, as operators group servers.
fn server_labels(i: usize) -> anyhow::Result<Labels> {
    const ENVS: [&str; 3] = ["prod", "prod", "staging"];
    const REGIONS: [&str; 4] = ["eu-west", "eu-central", "us-east", "ap-south"];
    const ROLES: [&str; 5] = ["web", "mail", "db", "edge", "vpn"];
    Ok(Labels::parse(
        [
            ("env", ENVS[i % ENVS.len()]),
            ("region", REGIONS[i / 3 % REGIONS.len()]),
            ("role", ROLES[i / 12 % ROLES.len()]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    )?)
}

/// Gives the seeded servers the states the hub knows besides online (which takes a live
/// session): of every ten, seven enrolled with the agent that sent their events and last seen
/// between an hour and a week before the history's end (offline), one reporting through direct
/// callbacks, and two never connected.
async fn server_states(
    url: &str,
    servers: &[ServerId],
    agents: &[AgentId],
    end_ms: i64,
) -> anyhow::Result<()> {
    let db = sea_orm::Database::connect(url).await?;
    let backend = db.get_database_backend();
    for (i, (server, agent)) in servers.iter().zip(agents).enumerate() {
        let seen = end_ms - 3_600_000 * (1 + (i as i64 * 7) % 168);
        let sql = match i % 10 {
            0..7 => sea_orm::Statement::from_sql_and_values(
                backend,
                match backend {
                    sea_orm::DbBackend::Postgres => {
                        "UPDATE servers SET agent_id = $1, enrolled_at = $2, last_seen_at = $3, \
                         agent_version = '0.1.0', fail2ban_version = '1.0.2', hostname = $4 \
                         WHERE id = $5"
                    }
                    _ => {
                        "UPDATE servers SET agent_id = ?, enrolled_at = ?, last_seen_at = ?, \
                         agent_version = '0.1.0', fail2ban_version = '1.0.2', hostname = ? \
                         WHERE id = ?"
                    }
                },
                [
                    agent.to_string().into(),
                    (seen - 30 * DAY_MS).into(),
                    seen.into(),
                    format!("host-{i:02}.example.net").into(),
                    server.to_string().into(),
                ],
            ),
            7 => sea_orm::Statement::from_sql_and_values(
                backend,
                match backend {
                    sea_orm::DbBackend::Postgres => {
                        "UPDATE servers SET last_seen_at = $1 WHERE id = $2"
                    }
                    _ => "UPDATE servers SET last_seen_at = ? WHERE id = ?",
                },
                [seen.into(), server.to_string().into()],
            ),
            _ => continue,
        };
        db.execute_raw(sql).await?;
    }
    db.close().await?;
    Ok(())
}

/// Drops the indexes of `events` that only paging reads (every one but the primary key and the
/// unique `(agent_id, epoch, seq)` that import checks); returns the statements that create them.
async fn drop_paging_indexes(url: &str) -> anyhow::Result<Vec<String>> {
    let db = sea_orm::Database::connect(url).await?;
    let backend = db.get_database_backend();
    let sql = match backend {
        sea_orm::DbBackend::Postgres => {
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'events' \
             AND indexname NOT IN ('events_pkey', 'events_agent_position')"
        }
        _ => {
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' \
             AND sql IS NOT NULL AND name <> 'events_agent_position'"
        }
    };
    let mut creates = Vec::new();
    for row in db
        .query_all_raw(sea_orm::Statement::from_string(backend, sql))
        .await?
    {
        let name: String = row.try_get_by_index(0)?;
        let create: String = row.try_get_by_index(1)?;
        db.execute_unprepared(&format!("DROP INDEX {name}")).await?;
        creates.push(create);
    }
    db.close().await?;
    Ok(creates)
}

async fn create_indexes(url: &str, creates: &[String]) -> anyhow::Result<()> {
    let db = sea_orm::Database::connect(url).await?;
    for create in creates {
        db.execute_unprepared(create).await?;
    }
    db.close().await?;
    Ok(())
}

/// Seeds `events` events both ways into two fresh SQLite files and compares what the API reads:
/// the events and every rollup table, with servers named instead of their random ids.
pub async fn check_seed(events: u64, args: &QueryArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("banhub-bench-seed-check-")
        .tempdir()?;
    // The same history both times: the same generator and the same end.
    let end_ms = now_ms();
    let mut dumps = Vec::new();
    for (mode, name) in [(SeedMode::Ingest, "ingest"), (SeedMode::Bulk, "bulk")] {
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join(format!("{name}.db")).display()
        );
        seed(&url, events, args, mode, end_ms).await?;
        dumps.push(dump(&url).await?);
    }
    let (ingest, bulk) = (&dumps[0], &dumps[1]);
    let mut differ = 0;
    for ((table, a), (_, b)) in ingest.iter().zip(bulk) {
        let same = a == b;
        println!(
            "  {table}: {} rows through ingest, {} rows bulk: {}",
            a.len(),
            b.len(),
            if same { "identical" } else { "DIFFERENT" }
        );
        if !same {
            differ += 1;
            if let Some((x, y)) = a.iter().zip(b).find(|(x, y)| x != y) {
                println!("    first difference:\n      ingest {x}\n      bulk   {y}");
            }
        }
    }
    if differ > 0 {
        bail!("bulk seeding differs from ingest in {differ} tables");
    }
    println!("bulk seeding of {events} events matches ingest in every table");
    Ok(())
}

/// Every row of the tables the API reads, as text, in key order.
async fn dump(url: &str) -> anyhow::Result<Vec<(&'static str, Vec<String>)>> {
    let db = sea_orm::Database::connect(url).await?;
    let backend = db.get_database_backend();
    let name = "(SELECT name FROM servers s WHERE s.id = t.server_id)";
    let tables: [(&str, String); 7] = [
        (
            "events",
            format!(
                "SELECT quote({name}) || quote(t.epoch) || quote(t.seq) || quote(t.kind) || \
                 quote(t.source) || quote(t.ip) || quote(t.ip_key) || quote(t.jail) || \
                 quote(t.hostname) || quote(t.failures) || quote(t.logs) || quote(t.ban_time) || \
                 quote(t.ban_duration) || quote(t.ban_count) || quote(t.lost) || quote(t.detail) \
                 || quote(t.occurred_at) FROM events t ORDER BY t.id"
            ),
        ),
        (
            "event_counts_hourly",
            format!(
                "SELECT quote({name}) || quote(t.jail) || quote(t.bucket) || quote(t.kind) || \
                 quote(t.count) FROM event_counts_hourly t ORDER BY 1"
            ),
        ),
        (
            "event_counts_daily",
            format!(
                "SELECT quote({name}) || quote(t.jail) || quote(t.bucket) || quote(t.kind) || \
                 quote(t.count) FROM event_counts_daily t ORDER BY 1"
            ),
        ),
        (
            "ip_servers",
            format!(
                "SELECT quote(t.ip) || quote({name}) || quote(t.bans) || quote(t.first_seen) || \
                 quote(t.last_seen) FROM ip_servers t ORDER BY 1"
            ),
        ),
        (
            "ip_stats",
            "SELECT quote(t.ip) || quote(t.bans) || quote(t.servers) || quote(t.first_seen) || \
             quote(t.last_seen) || quote(t.last_jail) || \
             quote((SELECT name FROM servers s WHERE s.id = t.last_server_id)) \
             FROM ip_stats t ORDER BY 1"
                .to_owned(),
        ),
        (
            "event_totals",
            "SELECT quote(name) || quote(value) FROM event_totals ORDER BY 1".to_owned(),
        ),
        (
            "agent_cursors",
            "SELECT quote((SELECT name FROM servers s WHERE s.agent_id = t.agent_id)) || \
             quote(t.epoch) || quote(t.last_seq) FROM agent_cursors t ORDER BY 1"
                .to_owned(),
        ),
    ];
    let mut out = Vec::new();
    for (table, sql) in tables {
        let rows = db
            .query_all_raw(sea_orm::Statement::from_string(backend, sql))
            .await?
            .iter()
            .map(|row| {
                row.try_get_by_index::<Option<String>>(0)
                    .map(Option::unwrap_or_default)
            })
            .collect::<Result<Vec<String>, _>>()?;
        out.push((table, rows));
    }
    db.close().await?;
    Ok(out)
}

/// One timed request: a label and the path with its query string.
struct Query {
    label: String,
    path: String,
}

fn q(label: impl Into<String>, path: impl Into<String>) -> Query {
    Query {
        label: label.into(),
        path: path.into(),
    }
}

/// `?cursor=` text for a page starting just older than `at_ms`.
fn cursor_at(at_ms: i64) -> String {
    Cursor {
        occurred_at_ms: at_ms,
        id: EventId(i64::MAX),
    }
    .encode()
}

/// The address network of `ip` with `prefix` bits.
fn network(ip: IpOrCidr, prefix: u8) -> anyhow::Result<String> {
    let IpOrCidr::Ip(addr) = ip else {
        bail!("not a single address")
    };
    let net = ipnet_of(addr, prefix)?;
    Ok(net)
}

fn ipnet_of(addr: std::net::IpAddr, prefix: u8) -> anyhow::Result<String> {
    match addr {
        std::net::IpAddr::V4(v4) => {
            let bits = u32::from(v4) & (u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0));
            Ok(format!("{}/{prefix}", std::net::Ipv4Addr::from(bits)))
        }
        std::net::IpAddr::V6(v6) => {
            let bits =
                u128::from(v6) & (u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0));
            Ok(format!("{}/{prefix}", std::net::Ipv6Addr::from(bits)))
        }
    }
}

/// PostgreSQL after a bulk load: what autovacuum would do in the background before long (the
/// visibility map that index-only reads need, and the planner's statistics).
async fn vacuum(url: &str) -> anyhow::Result<()> {
    let at = Instant::now();
    let db = sea_orm::Database::connect(url).await?;
    db.execute_unprepared("VACUUM (ANALYZE)").await?;
    db.close().await?;
    println!(
        "VACUUM (ANALYZE) after the load: {:.0} s",
        at.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Brings the text index of log lines (SQLite) up to date before the hub starts, as the hub's
/// background indexer would after an upgrade, and reports how long that took: the searches are
/// then timed on a caught-up index, with a tail of only what the hub ingests meanwhile (nothing).
async fn index_text(url: &str) -> anyhow::Result<()> {
    let store = Store::connect(url, 2).await?;
    let Some(before) = store.event_text_indexed_to().await? else {
        if store.event_text_pending().await? > 0 {
            // PostgreSQL: the pending ranges of the load, copied and indexed in one go (as the
            // hub's indexer would over time, in passes).
            let at = Instant::now();
            let copied = store.index_event_text_pg_bulk().await?;
            println!(
                "text index (PostgreSQL, bulk): {copied} events copied and indexed in {:.0} s",
                at.elapsed().as_secs_f64()
            );
        }
        match store.text_index().await? {
            Some(index) => println!("text index: {index} (made with the table)"),
            None => println!("text index: none on this backend (text search scans)"),
        }
        return Ok(());
    };
    let started = Instant::now();
    let mut indexed = 0u64;
    const BATCH: usize = 50_000;
    loop {
        let n = store.index_event_text(BATCH).await?;
        indexed += n;
        if n < BATCH as u64 {
            break;
        }
        if indexed % 1_000_000 < BATCH as u64 {
            println!(
                "text index: {indexed} events in {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "text index: {indexed} events added in {secs:.1} s ({:.0} events/s; was complete up to id \
         {before})",
        indexed as f64 / secs.max(1e-9)
    );
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .and_then(|u| u.split('?').next())
    {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!(
            "database file with the text index: {:.0} MiB",
            size as f64 / 1_048_576.0
        );
    }
    Ok(())
}

async fn queries(
    url: &str,
    seeded: &Seeded,
    args: &QueryArgs,
    hub_bin: &std::path::Path,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut builder = HubProcess::builder()
        .binary(hub_bin)
        .database_url(url)
        .env("BANHUB_LOG__FILTER", "warn")
        // The seeded history is older than nothing the hub would prune, but keep it all anyway.
        .env("BANHUB_EVENTS__RETENTION_DAYS", "0")
        .start_timeout(Duration::from_secs(600));
    if let (Some(_), Some(dir)) = (&args.postgres_url, &args.data) {
        // A kept PostgreSQL database remembers the CA of the first hub on it: every run's hub
        // uses the same one, kept next to the marker.
        builder = builder.env("BANHUB_CLUSTER__CA_DIR", dir.join("ca"));
    }
    let hub = builder.start()?;
    println!(
        "hub started on the seeded database in {:.1} s (migrations included)",
        started.elapsed().as_secs_f64()
    );
    let client = hub.client();
    let end = seeded.end_ms;
    // Countries and networks of the insights: the first request finds no tally and must not wait
    // for the count over every address; how long the count behind it takes.
    if args.only.is_empty() {
        let url = hub.url(&format!(
            "/api/events/bans/insights?from={}&to={}",
            end - 30 * DAY_MS,
            end + 1
        ));
        let t = Instant::now();
        let body = get(&client, &url).await?;
        let first = t.elapsed();
        let waited = !body["placesCountedAt"].is_null();
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut counted = None;
        while counted.is_none() && Instant::now() < deadline {
            let body = get(&client, &url).await?;
            if !body["placesCountedAt"].is_null() {
                counted = Some(t.elapsed());
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        println!(
            "insights, first request (no places tally yet): {:.1} ms{}; places counted after {}",
            ms(first),
            if waited {
                " (waited for the count)"
            } else {
                ""
            },
            counted.map_or("— (not within 600 s)".to_owned(), |d| format!(
                "{:.1} s",
                d.as_secs_f64()
            ))
        );
    }
    let busy = seeded.servers.first().context("no servers")?;
    let quiet = seeded.servers.last().context("no servers")?;
    let hot = workload::address(0);
    let cold = workload::address(3_000_001);
    let never = "198.18.0.1";
    let range = |from: i64, to: i64| format!("from={from}&to={to}");
    let day = |d: i64| end - d * DAY_MS;

    let mut list: Vec<Query> = vec![
        q("page 1 (50 newest)", "/api/events/bans?limit=50".to_owned()),
        q(
            "deep page, 30 days back",
            format!("/api/events/bans?cursor={}", cursor_at(day(30))),
        ),
        q(
            "deep page, 60 days back",
            format!("/api/events/bans?cursor={}", cursor_at(day(60))),
        ),
        q(
            "deep page, 89 days back (the oldest)",
            format!("/api/events/bans?cursor={}", cursor_at(day(89))),
        ),
        q(
            "server (busiest), page 1",
            format!("/api/events/bans?serverId={busy}"),
        ),
        q(
            "server (busiest), deep page 60 d",
            format!(
                "/api/events/bans?serverId={busy}&cursor={}",
                cursor_at(day(60))
            ),
        ),
        q(
            "server (quietest), page 1",
            format!("/api/events/bans?serverId={quiet}"),
        ),
        q(
            "server (quietest), deep page 60 d",
            format!(
                "/api/events/bans?serverId={quiet}&cursor={}",
                cursor_at(day(60))
            ),
        ),
        q("jail sshd, page 1", "/api/events/bans?jail=sshd".to_owned()),
        q(
            "jail sshd, deep page 60 d",
            format!("/api/events/bans?jail=sshd&cursor={}", cursor_at(day(60))),
        ),
        q(
            "jail portsentry (rare), page 1",
            "/api/events/bans?jail=portsentry".to_owned(),
        ),
        q(
            "jail portsentry (rare), deep page 60 d",
            format!(
                "/api/events/bans?jail=portsentry&cursor={}",
                cursor_at(day(60))
            ),
        ),
        q(
            "server (quietest) + rare jail, page 1",
            format!("/api/events/bans?serverId={quiet}&jail=portsentry"),
        ),
        q(
            "server (busiest) + sshd, deep page 60 d",
            format!(
                "/api/events/bans?serverId={busy}&jail=sshd&cursor={}",
                cursor_at(day(60))
            ),
        ),
        q(
            "ip (most banned address), page 1",
            format!("/api/events/bans?ip={hot}"),
        ),
        q(
            "ip (most banned), deep page 60 d",
            format!("/api/events/bans?ip={hot}&cursor={}", cursor_at(day(60))),
        ),
        q(
            "ip (rarely banned), page 1",
            format!("/api/events/bans?ip={cold}"),
        ),
        q(
            "ip (never banned), page 1",
            format!("/api/events/bans?ip={never}"),
        ),
        q(
            "CIDR /24 of the most banned",
            format!("/api/events/bans?ip={}", network(hot, 24)?),
        ),
        q(
            "CIDR /16 of the most banned",
            format!("/api/events/bans?ip={}", network(hot, 16)?),
        ),
        q(
            "CIDR /8 of the most banned",
            format!("/api/events/bans?ip={}", network(hot, 8)?),
        ),
        q(
            "CIDR 2001:db8::/32 (every IPv6, 10%)",
            "/api/events/bans?ip=2001:db8::/32".to_owned(),
        ),
        q(
            "CIDR /8, deep page 60 d",
            format!(
                "/api/events/bans?ip={}&cursor={}",
                network(hot, 8)?,
                cursor_at(day(60))
            ),
        ),
        q("kind=unban", "/api/events/bans?kind=unban".to_owned()),
        q(
            "source=observed",
            "/api/events/bans?source=observed".to_owned(),
        ),
        q(
            "kind=unban&source=observed, deep 60 d",
            format!(
                "/api/events/bans?kind=unban&source=observed&cursor={}",
                cursor_at(day(60))
            ),
        ),
        q(
            "kind=gap (none stored)",
            "/api/events/bans?kind=gap".to_owned(),
        ),
        q(
            "time range: 1 hour, 45 days back",
            format!("/api/events/bans?{}", range(day(45), day(45) + 3_600_000)),
        ),
        q(
            "time range: 1 day, 45 days back, jail sshd",
            format!("/api/events/bans?jail=sshd&{}", range(day(45), day(44))),
        ),
        q(
            "time range + rare jail + quiet server",
            format!(
                "/api/events/bans?serverId={quiet}&jail=portsentry&{}",
                range(day(45), day(44))
            ),
        ),
        q(
            format!("text {COMMON_TEXT:?}, page 1"),
            format!("/api/events/bans?q={}", COMMON_TEXT.replace(' ', "%20")),
        ),
        q(
            format!("text {RARE_TEXT:?} (1 in 100k), page 1"),
            format!("/api/events/bans?q={RARE_TEXT}"),
        ),
        q(
            format!("text {RARE_TEXT:?}, last 7 days"),
            format!("/api/events/bans?q={RARE_TEXT}&{}", range(day(7), end + 1)),
        ),
        q(
            "text \"no-such-text\" (no match), whole history",
            "/api/events/bans?q=no-such-text".to_owned(),
        ),
        q(
            "text \"no-such-text\", last 24 hours",
            format!("/api/events/bans?q=no-such-text&{}", range(day(1), end + 1)),
        ),
        q(
            "text \"oracle\" + server (quietest)",
            format!("/api/events/bans?q=oracle&serverId={quiet}"),
        ),
        q(
            "limit=1000, page 1",
            "/api/events/bans?limit=1000".to_owned(),
        ),
    ];
    for (label, days) in [
        ("24 hours", 1),
        ("7 days", 7),
        ("30 days", 30),
        ("90 days", 90),
    ] {
        list.push(q(
            format!("stats, {label}"),
            format!("/api/events/bans/stats?{}", range(day(days), end + 1)),
        ));
    }
    list.push(q(
        "stats, 30 days, one server",
        format!(
            "/api/events/bans/stats?serverId={busy}&{}",
            range(day(30), end + 1)
        ),
    ));
    list.push(q(
        "stats, 30 days, jail sshd",
        format!(
            "/api/events/bans/stats?jail=sshd&{}",
            range(day(30), end + 1)
        ),
    ));
    list.push(q(
        "stats, 90 days, one server + sshd",
        format!(
            "/api/events/bans/stats?serverId={busy}&jail=sshd&{}",
            range(day(90), end + 1)
        ),
    ));
    list.push(q(
        "insights, 30 days",
        format!("/api/events/bans/insights?{}", range(day(30), end + 1)),
    ));
    list.push(q(
        "insights, 90 days",
        format!("/api/events/bans/insights?{}", range(day(90), end + 1)),
    ));
    list.push(q(
        "insights, 30 days, one server",
        format!(
            "/api/events/bans/insights?serverId={busy}&{}",
            range(day(30), end + 1)
        ),
    ));
    list.push(q(
        "insights, 30 days, jail sshd",
        format!(
            "/api/events/bans/insights?jail=sshd&{}",
            range(day(30), end + 1)
        ),
    ));
    list.push(q(
        "insights + one address in detail",
        format!(
            "/api/events/bans/insights?ip={hot}&{}",
            range(day(30), end + 1)
        ),
    ));
    list.push(q(
        "insights, limit 100",
        format!(
            "/api/events/bans/insights?limit=100&{}",
            range(day(30), end + 1)
        ),
    ));

    if !args.only.is_empty() {
        list.retain(|query| {
            args.only
                .iter()
                .any(|only| query.label.contains(only.as_str()))
        });
    }
    println!(
        "over {} events; {} timed runs per query after 3 warm-up runs (3 when slower than 1 s); \
         load average {}",
        seeded.events,
        args.runs,
        measure::load_average()
    );
    println!(
        "{:<48} {:>9} {:>9} {:>9} {:>7} {:>9}",
        "query", "median ms", "p99 ms", "max ms", "rows", "first ms"
    );
    for query in &list {
        let url = hub.url(&query.path);
        let mut warm = Duration::ZERO;
        let mut rows = 0usize;
        // The first run of each query: a cold cache (stats and insights keep past days).
        let mut first = None;
        for _ in 0..3 {
            let t = Instant::now();
            let body = get(&client, &url).await?;
            warm = warm.max(t.elapsed());
            first.get_or_insert(t.elapsed());
            rows = count_rows(&body);
        }
        let runs = if warm > Duration::from_secs(1) {
            3
        } else {
            args.runs
        };
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            get(&client, &url).await?;
            samples.push(t.elapsed());
        }
        let s = Summary::of(samples);
        println!(
            "{:<48} {:>9.2} {:>9.2} {:>9.2} {:>7} {:>9.2}",
            query.label,
            ms(s.p50),
            ms(s.p99),
            ms(s.max),
            rows,
            ms(first.unwrap_or_default())
        );
    }

    if !args.only.is_empty() {
        println!("load average after: {}", measure::load_average());
        return Ok(());
    }
    // Paging as a person does: follow nextCursor from the newest page, 200 pages of 50.
    let mut samples = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..200 {
        let url = match &next {
            Some(c) => hub.url(&format!("/api/events/bans?cursor={c}")),
            None => hub.url("/api/events/bans"),
        };
        let t = Instant::now();
        let body = get(&client, &url).await?;
        samples.push(t.elapsed());
        next = body["nextCursor"].as_str().map(str::to_owned);
        if next.is_none() {
            break;
        }
    }
    let s = Summary::of(samples);
    println!(
        "{:<48} {:>9.2} {:>9.2} {:>9.2} {:>7}",
        "following nextCursor, pages 1..200",
        ms(s.p50),
        ms(s.p99),
        ms(s.max),
        s.n
    );
    println!("load average after: {}", measure::load_average());
    Ok(())
}

async fn get(client: &reqwest::Client, url: &str) -> anyhow::Result<serde_json::Value> {
    let response = client.get(url).send().await?;
    let status = response.status();
    let body: serde_json::Value = response.json().await?;
    if !status.is_success() {
        bail!("GET {url}: {status} {body}");
    }
    Ok(body)
}

/// Events on a page, or entries in a stats/insights answer (series points).
fn count_rows(body: &serde_json::Value) -> usize {
    if let Some(events) = body["events"].as_array() {
        return events.len();
    }
    if let Some(series) = body["series"].as_array() {
        return series.len();
    }
    body["topIps"].as_array().map_or(0, Vec::len)
}
