//! `banhub-bench ingest`: the whole event path under load. A real hub and a real enrolled agent (its
//! mTLS session and loopback relay); concurrent clients post callbacks to the relay as fail2ban's
//! action would; a poller reads the agent's cursor in the hub's database to see when each event is
//! committed (the API confirms afterwards that every event is stored once). Reports the
//! sustained rate from the first POST to the last commit and the latency from the relay's 200 to the
//! commit, next to the limits of the same database in the same run: the same rows through the hub's
//! store with no network, and into a bare table with no index.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use banhub::domain::events::NewEvent;
use banhub::domain::{AgentId, Labels, NewServer, ServerId, ServerName};
use banhub::store::Store;
use banhub_tests::agent::{AgentProcess, relay_addr, relay_secret};
use banhub_tests::hub::HubProcess;
use sea_orm::{
    ConnectOptions, ConnectionTrait as _, Database, DatabaseConnection, DbBackend, Statement, Value,
};

use crate::measure::{self, Summary, ms};
use crate::workload::{Fleet, Generator, Sample};
use crate::{Backend, Databases};

/// Options of `banhub-bench ingest`.
#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    /// Callbacks posted through the relay in the measured run.
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Concurrent clients posting callbacks (each one keeps a connection).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Rows for the database-only limits (through the store, and into a bare table).
    #[arg(long, default_value_t = 200_000)]
    pub ceiling_events: usize,
    /// Events per transaction for the database-only limits; the agent's batch size by default.
    #[arg(long, default_value_t = banhub_agent_batch())]
    pub batch: usize,
    #[arg(long, value_enum, default_value = "both")]
    pub backend: Backend,
    /// Build of banhub and banhub-agent to drive: `release` (for figures) or `debug`.
    #[arg(long, default_value = "release")]
    pub profile: String,
    /// Only the database-only limits (no hub, no agent): for comparing store changes quickly.
    #[arg(long)]
    pub ceiling_only: bool,
    /// Only the full path (no database-only limits): for comparing hub or agent builds quickly.
    #[arg(long, conflicts_with = "ceiling_only")]
    pub full_path_only: bool,
    /// The hub binary to drive instead of the `--profile` build (e.g. a copy kept as "before").
    #[arg(long)]
    pub hub_bin: Option<std::path::PathBuf>,
    /// The agent binary to drive instead of the `--profile` build.
    #[arg(long)]
    pub agent_bin: Option<std::path::PathBuf>,
    /// PostgreSQL: hold the text indexer's advisory lock through the full path, so the hub's
    /// background indexer of log lines stays idle (ingest without it, for comparison).
    #[arg(long)]
    pub hold_text_indexer: bool,
}

/// The PostgreSQL text indexer's advisory lock ("banhub_t", `TEXT_INDEXER_LOCK` in
/// `hub/src/store/events/text_pg.rs`). The run checks that nothing was indexed while it held it.
const TEXT_INDEXER_LOCK: i64 = 0x6261_6e68_7562_5f74;

/// `(pending ranges, events indexed)` of PostgreSQL's text index.
async fn text_index_state(db: &DatabaseConnection) -> anyhow::Result<(i64, i64)> {
    let row = db
        .query_one_raw(Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT (SELECT COUNT(*) FROM event_text_pending), (SELECT COUNT(*) FROM event_text_pg)",
        ))
        .await?
        .context("no row")?;
    Ok((row.try_get_by_index(0)?, row.try_get_by_index(1)?))
}

/// What the agent sends per batch.
const fn banhub_agent_batch() -> usize {
    banhub_proto::pipeline::BATCH_EVENTS
}

/// How long the measured run may take before it is called failed.
const DEADLINE: Duration = Duration::from_secs(600);
/// How often the poller reads the hub's database: the resolution of the commit times.
const POLL: Duration = Duration::from_millis(2);

pub async fn run(args: IngestArgs) -> anyhow::Result<()> {
    println!(
        "== banhub-bench ingest: {} callbacks, {} clients, {} build; load average {} ==",
        args.events,
        args.clients,
        args.profile,
        measure::load_average()
    );
    let hub_bin = match &args.hub_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub")?,
    };
    let agent_bin = match &args.agent_bin {
        Some(path) => path.clone(),
        None => measure::binary(&args.profile, "banhub-agent")?,
    };
    if !args.ceiling_only {
        println!(
            "hub {} ({}), agent {} ({})",
            hub_bin.display(),
            measure::modified(&hub_bin),
            agent_bin.display(),
            measure::modified(&agent_bin)
        );
    }
    for backend in args.backend.each() {
        let databases = Databases::start(backend)?;
        println!("\n--- {} ---", backend.name());
        if !args.full_path_only {
            ceiling(&databases, &args).await?;
        }
        if !args.ceiling_only {
            full_path(&databases, &args, &hub_bin, &agent_bin).await?;
        }
    }
    Ok(())
}

/// The same kind of rows as the callbacks, for the database-only runs.
fn samples(n: usize, seed: u64) -> Vec<Sample> {
    let mut generator = Generator::new(Fleet::default(), seed);
    let start = chrono::Utc::now().timestamp_millis() - 3_600_000;
    (0..n)
        .map(|i| generator.sample(start + (i as i64) / 20))
        .collect()
}

/// A store on a fresh database `name`, with the one server the ceiling runs store for.
async fn ceiling_store(databases: &Databases, name: &str) -> anyhow::Result<(Store, ServerId)> {
    let store = Store::connect(&databases.fresh(name)?, 4).await?;
    let server = store
        .create_server(NewServer {
            name: ServerName::parse("ceiling")?,
            description: String::new(),
            labels: Labels::default(),
        })
        .await?;
    Ok((store, server.id))
}

async fn ceiling(databases: &Databases, args: &IngestArgs) -> anyhow::Result<()> {
    let rows = samples(args.ceiling_events, 1);
    let events: Vec<NewEvent> = rows.iter().map(|s| s.new_event("web-1")).collect();

    // Through the hub's store: the events, their indexes, the rollups and the agent's cursor in one
    // transaction per batch, as ingest does.
    let (store, server) = ceiling_store(databases, "ceiling_store").await?;
    let agent = AgentId::new();
    let load = measure::load_average();
    let cpu = measure::cpu_seconds("self");
    let db_cpu = databases.server_cpu();
    let started = Instant::now();
    for batch in numbered_batches(&events, args.batch) {
        let seq = batch.last().map_or(0, |(seq, _)| *seq);
        let outcome = store.ingest_batch(server, agent, 1, batch).await?;
        if outcome.committed_seq != seq {
            bail!("the store committed {} of {seq}", outcome.committed_seq);
        }
    }
    let elapsed = started.elapsed();
    println!(
        "database only, through the store (Store::ingest_batch: events + indexes + rollups + \
         cursor, one transaction per {} events): {} events in {:.2} s = {:.0} events/s; CPU {:.1} s \
         in this process{}; load average before {load}",
        args.batch,
        events.len(),
        elapsed.as_secs_f64(),
        events.len() as f64 / elapsed.as_secs_f64(),
        measure::cpu_seconds("self") - cpu,
        databases.server_cpu_note(db_cpu),
    );
    drop(store);

    // The same through the store without the rollups (`Store::import_batch`): what the per-event
    // rollups cost, as the difference.
    let (store, server) = ceiling_store(databases, "ceiling_store_no_rollups").await?;
    let cpu = measure::cpu_seconds("self");
    let db_cpu = databases.server_cpu();
    let started = Instant::now();
    for batch in numbered_batches(&events, args.batch) {
        store.import_batch(server, agent, 1, batch).await?;
    }
    let elapsed = started.elapsed();
    println!(
        "database only, through the store without rollups (Store::import_batch): {} events in \
         {:.2} s = {:.0} events/s; CPU {:.1} s in this process{}",
        events.len(),
        elapsed.as_secs_f64(),
        events.len() as f64 / elapsed.as_secs_f64(),
        measure::cpu_seconds("self") - cpu,
        databases.server_cpu_note(db_cpu),
    );
    drop(store);

    // A bare table shaped like `events`, no index, no rollup: what the database takes at best.
    let url = databases.fresh("ceiling_bare")?;
    let db = connect(&url, false).await?;
    let backend = db.get_database_backend();
    db.execute_unprepared(
        "CREATE TABLE bare_events (server_id VARCHAR(36) NOT NULL, agent_id VARCHAR(36), \
         epoch BIGINT, seq BIGINT, kind VARCHAR(8) NOT NULL, source VARCHAR(16) NOT NULL, \
         ip VARCHAR(64), jail VARCHAR(64), hostname VARCHAR(255) NOT NULL, failures BIGINT NOT NULL, \
         logs TEXT NOT NULL, ban_time BIGINT, ban_duration BIGINT, ban_count BIGINT, \
         occurred_at BIGINT NOT NULL, stored_at BIGINT NOT NULL)",
    )
    .await?;
    let server = server.to_string();
    let agent = agent.to_string();
    let cpu = measure::cpu_seconds("self");
    let db_cpu = databases.server_cpu();
    let started = Instant::now();
    let mut seq = 0i64;
    for chunk in rows.chunks(args.batch) {
        // At most 16 values a row: keep each statement under SQLite's 32,766 parameters.
        for part in chunk.chunks(1000) {
            let mut sql = String::from(
                "INSERT INTO bare_events (server_id, agent_id, epoch, seq, kind, source, ip, jail, \
                 hostname, failures, logs, ban_time, ban_duration, ban_count, occurred_at, \
                 stored_at) VALUES ",
            );
            let mut values: Vec<Value> = Vec::with_capacity(part.len() * 16);
            for (r, s) in part.iter().enumerate() {
                seq += 1;
                let row: [Value; 16] = [
                    server.clone().into(),
                    agent.clone().into(),
                    1i64.into(),
                    seq.into(),
                    (if s.unban { "unban" } else { "ban" }).into(),
                    "action".into(),
                    s.ip.to_string().into(),
                    s.jail.as_str().to_owned().into(),
                    "web-1".into(),
                    i64::from(s.failures).into(),
                    serde_json::to_string(&s.logs)?.into(),
                    (s.at_ms / 1000).into(),
                    600i64.into(),
                    i64::from(s.ban_count).into(),
                    s.at_ms.into(),
                    s.at_ms.into(),
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
    }
    let elapsed = started.elapsed();
    println!(
        "database only, bare table (no index, no rollup, one statement per {} rows): {} rows in \
         {:.2} s = {:.0} rows/s; CPU {:.1} s in this process{}",
        args.batch.min(1000),
        rows.len(),
        elapsed.as_secs_f64(),
        rows.len() as f64 / elapsed.as_secs_f64(),
        measure::cpu_seconds("self") - cpu,
        databases.server_cpu_note(db_cpu),
    );
    db.close().await?;
    Ok(())
}

/// A connection with the hub's SQLite settings (WAL, synchronous=NORMAL), read-only if asked.
async fn connect(url: &str, read_only: bool) -> anyhow::Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    // No test query before each use: the poller's one connection runs a query every 2 ms, and a
    // ping per query doubled its cost.
    options
        .max_connections(1)
        .sqlx_logging(false)
        .test_before_acquire(false);
    options.map_sqlx_sqlite_opts(move |sqlite| {
        use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
        let sqlite = sqlite.read_only(read_only);
        if read_only {
            sqlite
        } else {
            sqlite
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
        }
    });
    Ok(Database::connect(options).await?)
}

/// One enrolled agent of a running hub, with its relay.
struct Host {
    hub: HubProcess,
    agent: AgentProcess,
    state: tempfile::TempDir,
    relay: String,
    secret: String,
}

async fn start_host(
    databases: &Databases,
    hub_bin: &Path,
    agent_bin: &Path,
) -> anyhow::Result<Host> {
    let mut builder = HubProcess::builder()
        .binary(hub_bin)
        .env("BANHUB_LOG__FILTER", "warn");
    if let Some(url) = databases.hub_url()? {
        builder = builder.database_url(url);
    }
    let hub = builder.start()?;
    let client = hub.client();
    let created: serde_json::Value = client
        .post(hub.url("/api/servers"))
        .json(&serde_json::json!({"name": "bench-web-1"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let server_id = created["server"]["id"]
        .as_str()
        .context("no server id")?
        .to_owned();
    let token = created["enrollment"]["token"]
        .as_str()
        .context("no enrollment token")?;
    let state = tempfile::Builder::new()
        .prefix("banhub-bench-agent-")
        .tempdir()?;
    let dir = state.path().join("agent");
    let mut enroll = std::process::Command::new(agent_bin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BANHUB_") {
            enroll.env_remove(key);
        }
    }
    let out = enroll
        .arg("enroll")
        .arg(token)
        .arg("--state-dir")
        .arg(&dir)
        .output()?;
    if !out.status.success() {
        bail!("enroll failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    // No fail2ban: the relay, the spool and the session are what is measured. Reconciliation
    // (which would ask fail2ban) is off.
    let agent = AgentProcess::start_binary(
        agent_bin.to_owned(),
        &dir,
        &state.path().join("no-fail2ban.sock"),
        state.path(),
        &[
            ("BANHUB_AGENT_RECONCILE__INTERVAL_SECS", "0"),
            ("BANHUB_AGENT_LOG__FILTER", "warn"),
        ],
    )?;
    let url = hub.url(&format!("/api/servers/{server_id}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Option<serde_json::Value> = match client.get(&url).send().await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        if status.is_some_and(|s| s["status"] == "online") && dir.join("relay.json").exists() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the agent did not come online\n{}\n{}",
                hub.logs(),
                agent.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let relay = format!("http://{}/api/ban", relay_addr(&dir)?);
    let secret = relay_secret(&dir)?;
    Ok(Host {
        hub,
        agent,
        state,
        relay,
        secret,
    })
}

/// The relay's address and each body as a whole HTTP/1.1 request, serialized before the clock
/// starts.
fn prepare_requests(host: &Host, bodies: &[String]) -> anyhow::Result<(String, Vec<Vec<u8>>)> {
    let url = reqwest::Url::parse(&host.relay)?;
    let addr = format!(
        "{}:{}",
        url.host_str().context("no relay host")?,
        url.port_or_known_default().context("no relay port")?
    );
    let requests = bodies
        .iter()
        .map(|body| {
            let mut request = format!(
                "POST {} HTTP/1.1\r\nHost: {addr}\r\nX-Callback-Secret: {}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                url.path(),
                host.secret,
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(body.as_bytes());
            request
        })
        .collect();
    Ok((addr, requests))
}

/// Posts the prepared `requests` with `clients` concurrent keep-alive connections, one request in
/// flight on each (as many callbacks at once as there are clients, never more); returns each
/// accepted event (see [`Accepted`]).
///
/// The load generator shares the two cores with the relay, the agent and the hub, so every
/// microsecond it spends per request is taken from what is measured (a general-purpose client cost
/// ≈ 45–96 µs of CPU per callback). So the clients are a minimal HTTP/1.1 writer and reader, and
/// they all run on one thread of their own (a current-thread runtime): one `epoll_wait` serves
/// every connection whose answer arrived, and no wake-up crosses between worker threads.
async fn post_all(
    addr: &str,
    requests: Arc<Vec<Vec<u8>>>,
    clients: usize,
) -> anyhow::Result<Vec<Accepted>> {
    let addr = addr.to_owned();
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-clients".to_owned())
        .spawn(move || {
            let outcome = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(run_clients(addr, requests, clients)));
            let _ = done.send(outcome);
        })?;
    result.await.context("the client thread panicked")?
}

async fn run_clients(
    addr: String,
    requests: Arc<Vec<Vec<u8>>>,
    clients: usize,
) -> anyhow::Result<Vec<Accepted>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (next, requests, addr) = (next.clone(), requests.clone(), addr.clone());
        tasks.push(tokio::spawn(async move {
            let mut connection = RawClient::connect(&addr).await?;
            let mut accepted = Vec::with_capacity(requests.len() / clients + 1);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(request) = requests.get(i) else {
                    break;
                };
                let sent = Instant::now();
                let seq = connection.post(request).await?;
                let answered = Instant::now();
                accepted.push(Accepted {
                    seq,
                    answered,
                    round_trip: answered - sent,
                });
            }
            anyhow::Ok(accepted)
        }));
    }
    let mut all = Vec::with_capacity(requests.len());
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}

/// One callback the relay accepted: its sequence number, when its 200 arrived, and how long after
/// the request was sent (the relay's answer waits for the spool's `fsync`, so with one request in
/// flight per client this round trip bounds what the clients can post).
struct Accepted {
    seq: u64,
    answered: Instant,
    round_trip: Duration,
}

/// One keep-alive HTTP/1.1 connection to the relay, reading answers into one reused buffer.
struct RawClient {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    async fn connect(addr: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Sends one prepared request and returns the `seq` of the relay's 200 answer.
    async fn post(&mut self, request: &[u8]) -> anyhow::Result<u64> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        self.stream.write_all(request).await?;
        self.buf.clear();
        loop {
            if let Some((status, body)) = parse_answer(&self.buf)? {
                if status != 200 {
                    bail!(
                        "the relay answered {status}: {}",
                        String::from_utf8_lossy(body)
                    );
                }
                return seq_of(body);
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(4096);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                bail!("the relay closed the connection");
            }
        }
    }
}

/// The status and body of the answer in `bytes`, once it is complete. One request is in flight
/// per connection, so nothing follows the answer.
fn parse_answer(bytes: &[u8]) -> anyhow::Result<Option<(u16, &[u8])>> {
    let Some(head_len) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..head_len])?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .context("no status line in the relay's answer")?;
    let mut length = 0usize;
    for line in lines {
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let body_start = head_len + 4;
    Ok(bytes
        .get(body_start..body_start + length)
        .map(|body| (status, body)))
}

/// The `seq` of the relay's `{"epoch":…,"seq":…}`.
fn seq_of(body: &[u8]) -> anyhow::Result<u64> {
    let text = std::str::from_utf8(body)?;
    let digits = text
        .split_once("\"seq\":")
        .map(|(_, rest)| rest.trim_start())
        .map(|rest| {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .with_context(|| format!("no seq in the answer {text}"))?;
    Ok(digits.parse()?)
}

/// Reads the agent's ingest cursor from the hub's database until it reaches `above + wanted`;
/// returns when each sequence number in between became committed. The hub stores a session's
/// batches one after the other and moves the cursor in the same transaction as the events, so the
/// cursor passing a sequence number means that event is committed; reading one row per poll keeps
/// the poller's own cost out of the figures (reading every new row cost ≈ 20 µs per event).
/// Whether every event really is stored once is checked after the run through the API.
async fn poll_commits(
    db: DatabaseConnection,
    above: u64,
    wanted: usize,
    stop: Instant,
) -> anyhow::Result<HashMap<u64, Instant>> {
    let backend = db.get_database_backend();
    let mut seen: HashMap<u64, Instant> = HashMap::with_capacity(wanted);
    let target = above + wanted as u64;
    let mut reached = above;
    while reached < target {
        if Instant::now() > stop {
            bail!(
                "only {} of {wanted} events were committed in time",
                reached - above
            );
        }
        let row = db
            .query_one_raw(Statement::from_string(
                backend,
                "SELECT CAST(MAX(last_seq) AS BIGINT) FROM agent_cursors",
            ))
            .await?;
        let at = Instant::now();
        let cursor: Option<i64> = match row {
            Some(row) => row.try_get_by_index(0)?,
            None => None,
        };
        let cursor = cursor.and_then(|c| u64::try_from(c).ok()).unwrap_or(0);
        if cursor > reached {
            for seq in reached.max(above) + 1..=cursor.min(target) {
                seen.insert(seq, at);
            }
            reached = cursor;
        } else {
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(seen)
}

async fn full_path(
    databases: &Databases,
    args: &IngestArgs,
    hub_bin: &Path,
    agent_bin: &Path,
) -> anyhow::Result<()> {
    let host = start_host(databases, hub_bin, agent_bin).await?;
    let poll_url = match databases.hub_url()? {
        Some(url) => url,
        None => format!(
            "sqlite://{}?mode=ro",
            host.hub.data_dir().join("banhub.db").display()
        ),
    };
    let hostname = "bench-web-1";
    let mut generator = Generator::new(Fleet::default(), 2);
    let now = chrono::Utc::now().timestamp_millis();

    // Warm-up: connections, the session, the database's caches.
    let warm = 2_000.min(args.events);
    let bodies: Vec<String> = (0..warm)
        .map(|_| generator.sample(now).callback_json(hostname))
        .collect();
    let poller = connect(&poll_url, true).await?;
    let (addr, requests) = prepare_requests(&host, &bodies)?;
    let accepted = post_all(&addr, Arc::new(requests), args.clients).await?;
    poll_commits(poller.clone(), 0, accepted.len(), Instant::now() + DEADLINE).await?;
    let above = accepted.iter().map(|one| one.seq).max().unwrap_or(0);

    let bodies: Vec<String> = (0..args.events)
        .map(|_| generator.sample(now).callback_json(hostname))
        .collect();
    let requests = Arc::new(prepare_requests(&host, &bodies)?.1);
    drop(bodies);
    let pids = [
        host.hub.pid().map(|p| p.to_string()),
        host.agent.pid().map(|p| p.to_string()),
    ];
    let cpu_before: Vec<f64> = pids
        .iter()
        .map(|p| p.as_deref().map_or(0.0, measure::cpu_seconds))
        .collect();
    let postgres = databases.hub_url()?.is_some();
    let held = if postgres && args.hold_text_indexer {
        let db = connect(&poll_url, false).await?;
        db.execute_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT pg_advisory_lock($1)",
            [TEXT_INDEXER_LOCK.into()],
        ))
        .await?;
        Some(db)
    } else {
        None
    };
    let text_before = if postgres {
        Some(text_index_state(&poller).await?)
    } else {
        None
    };
    let self_cpu = measure::cpu_seconds("self");
    let db_cpu = databases.server_cpu();
    let load_before = measure::load_average();
    let commits = tokio::spawn(poll_commits(
        poller,
        above,
        args.events,
        Instant::now() + DEADLINE,
    ));
    let started = Instant::now();
    let accepted = post_all(&addr, requests, args.clients).await?;
    let posted = started.elapsed();
    let commits = commits.await??;
    let last_commit = commits.values().max().copied().unwrap_or(started);
    let elapsed = last_commit - started;
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, before)| p.as_deref().map_or(0.0, measure::cpu_seconds) - before)
        .collect();

    let mut latencies = Vec::with_capacity(accepted.len());
    for one in &accepted {
        let committed = commits
            .get(&one.seq)
            .with_context(|| format!("seq {} was accepted but never committed", one.seq))?;
        latencies.push(committed.saturating_duration_since(one.answered));
    }
    let latency = Summary::of(latencies);
    let round_trip = Summary::of(accepted.iter().map(|one| one.round_trip).collect());
    let n = args.events as f64;
    println!(
        "full path (relay → spool → session → hub → {}): {} callbacks from {} clients",
        databases.name(),
        args.events,
        args.clients
    );
    println!(
        "  sustained: first POST to last commit {:.2} s = {:.0} events/s (relay accepted all in \
         {:.2} s = {:.0}/s)",
        elapsed.as_secs_f64(),
        n / elapsed.as_secs_f64(),
        posted.as_secs_f64(),
        n / posted.as_secs_f64()
    );
    println!(
        "  POST → 200 at the clients: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms",
        ms(round_trip.p50),
        ms(round_trip.p99),
        ms(round_trip.max)
    );
    println!(
        "  relay 200 → committed at the hub: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (poll every \
         {} ms)",
        ms(latency.p50),
        ms(latency.p99),
        ms(latency.max),
        POLL.as_millis()
    );
    // Each poll that saw the cursor move saw one commit or more (two within a poll look like one,
    // so the mean per transaction is an upper bound).
    let mut per_poll: HashMap<Instant, u64> = HashMap::new();
    for at in commits.values() {
        *per_poll.entry(*at).or_default() += 1;
    }
    let mut sizes: Vec<u64> = per_poll.into_values().collect();
    sizes.sort_unstable();
    let size_at = |q: f64| {
        sizes
            .get((sizes.len().saturating_sub(1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "  commits seen by the poller: {} (≤ {:.0} events per transaction on average; events per \
         commit seen p10 {}, p50 {}, p90 {}, max {})",
        sizes.len(),
        n / sizes.len().max(1) as f64,
        size_at(0.1),
        size_at(0.5),
        size_at(0.9),
        size_at(1.0)
    );
    println!(
        "  CPU seconds: hub {:.1}, agent {:.1}, clients+poller {:.1}{}; load average {} before, {} \
         after",
        cpu[0],
        cpu[1],
        measure::cpu_seconds("self") - self_cpu,
        databases.server_cpu_note(db_cpu),
        load_before,
        measure::load_average()
    );
    if let Some((pending_before, indexed_before)) = text_before {
        let state_db = connect(&poll_url, false).await?;
        let (pending, indexed) = text_index_state(&state_db).await?;
        println!(
            "  text index (PostgreSQL) at the last commit: {pending} pending ranges, {} events \
             indexed during the run{}",
            indexed - indexed_before,
            if held.is_some() {
                " (indexer held off by its lock)"
            } else {
                ""
            }
        );
        if held.is_some() {
            if indexed != indexed_before || pending <= pending_before {
                bail!("the text indexer ran although its lock was held");
            }
        } else {
            // The indexer's catch-up after the burst, and what it cost PostgreSQL.
            let at = Instant::now();
            let cpu = databases.server_cpu();
            let mut state = (pending, indexed);
            while state.0 > 0 && at.elapsed() < Duration::from_secs(300) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                state = text_index_state(&state_db).await?;
            }
            println!(
                "  text index caught up {:.1} s after the last commit ({} pending left), {} events \
                 indexed in all{}",
                at.elapsed().as_secs_f64(),
                state.0,
                state.1,
                databases.server_cpu_note(cpu)
            );
        }
    }
    drop(held);
    check_stored(&host, args.events + warm).await?;
    drop(host.state);
    Ok(())
}

/// The API agrees: every callback is stored once.
async fn check_stored(host: &Host, expected: usize) -> anyhow::Result<()> {
    let stats: serde_json::Value = host
        .hub
        .client()
        .get(host.hub.url("/api/events/bans/stats"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let totals = &stats["totals"];
    let stored = totals["bans"].as_u64().unwrap_or(0) + totals["unbans"].as_u64().unwrap_or(0);
    println!("  stored per /api/events/bans/stats (24 h): {stored} (expected {expected})");
    if stored != expected as u64 {
        bail!("the hub holds {stored} events, {expected} were posted");
    }
    Ok(())
}

/// `events` in batches of `size`, numbered 1, 2, … across the batches as one spool would.
fn numbered_batches(
    events: &[NewEvent],
    size: usize,
) -> impl Iterator<Item = Vec<(u64, NewEvent)>> + '_ {
    events.chunks(size).enumerate().map(move |(i, chunk)| {
        let first = (i * size) as u64;
        chunk
            .iter()
            .enumerate()
            .map(|(j, e)| (first + j as u64 + 1, e.clone()))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_only_once_complete() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 23\r\n\r\n{\"epoch\":7,\"seq\":12345}";
        for cut in 0..answer.len() {
            assert_eq!(parse_answer(&answer[..cut]).expect("parse"), None, "{cut}");
        }
        let (status, body) = parse_answer(answer).expect("parse").expect("complete");
        assert_eq!(status, 200);
        assert_eq!(seq_of(body).expect("seq"), 12345);
        let refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(
            parse_answer(refused).expect("parse").map(|a| a.0),
            Some(401)
        );
        assert!(seq_of(b"{\"epoch\":7}").is_err());
    }
}
