//! Events in the store: idempotent batch ingest with the rollups kept up to date in the same
//! transaction, retention, and the servers' callback secrets. Reading them back (pages, stats and
//! insights) is in `event_reads`.
//!
//! The hot paths are hand-written multi-row SQL that SQLite and PostgreSQL both accept (`INSERT … ON
//! CONFLICT … RETURNING`, row-value comparisons); only the placeholders differ, which [`Sql`] handles.
//! Rollup rows are written in sorted key order so concurrent transactions on PostgreSQL lock them in
//! the same order and cannot deadlock.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use sea_orm::sqlx::sqlite::SqliteConnectOptions;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, FromQueryResult,
    QueryResult, Statement, TransactionTrait, Value,
};
use subtle::ConstantTimeEq;

use super::entities::{agent_cursor, event};
use super::sqlite_ingest::{self, IngestTxn};
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::events::{
    BanDuration, BanFacts, EventBody, EventId, EventKind, EventSource, GapFacts, GapReason,
    IpOrCidr, JailName, Logs, NewEvent, SeqRange, SpoolPosition, StoredEvent, ip_key,
};
use crate::domain::{AgentId, Server, ServerId};

/// Rows per multi-row statement. A batch is cut greedily into statements of these sizes, so each
/// table is written by at most five distinct statement texts, which the driver prepares once per
/// connection and reuses (a statement per batch length would be prepared anew almost every batch).
/// 256 rows of the widest table (19 values) stay well under SQLite's 32,766 parameters.
pub(super) const CHUNK_SIZES: [usize; 5] = [256, 64, 16, 4, 1];
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// SQLite page cache of a connection that writes events, in KiB. The default (2 MiB) is far smaller
/// than what one batch touches (the events, five indexes, the per-address rollups), so a
/// transaction would spill pages to the WAL and rewrite them many times over.
pub(super) const SQLITE_WRITER_CACHE_KIB: u32 = 32 * 1024;
/// WAL pages after which a committing event writer checkpoints (SQLite's default is 1,000). One
/// batch of 1,000 events changes ≈ 2,500 pages (the rows, five indexes, per-address rollups spread
/// over the whole key range), so with the default every commit was followed by a checkpoint that
/// copied all of them into the database file again. With a larger WAL a page changed by several
/// batches in a row is copied once.
pub(super) const SQLITE_WRITER_AUTOCHECKPOINT_PAGES: u32 = 16 * 1024;
/// Bans from which an address is in the partial ranking index of `ip_stats` (`ip_stats_hot`), and
/// of `ip_servers` (`ip_servers_hot`); the numbers are those of migration M0002.
pub(super) const HOT_IP_BANS: i64 = 8;
pub(super) const HOT_IP_SERVER_BANS: i64 = 4;
/// Newest events a network filter looks through before it falls back to the address index (see
/// `Store::list_events`): enough for a full page when ≥ 2.5 % of the events are in the network.
pub(super) const NETWORK_WINDOW: i64 = 2_000;
/// The largest second window, sized from the matches in the first (≈ 0.1 % density for a page of 50).
pub(super) const NETWORK_WINDOW_MAX: i64 = 80_000;
/// `event_totals` row counting distinct banned addresses in `ip_stats`.
pub(super) const DISTINCT_IPS: &str = "distinct_ips";
/// SQLite: `event_totals` row holding the event id up to which the per-address rollups are written
/// (see [`DeferredRollups`]).
const ROLLUPS_APPLIED_TO: &str = "rollups_applied_to";
/// How often PostgreSQL's pending rollup rows are applied.
const PG_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often SQLite's deferred per-address rollups are written. Each write upserts every address
/// banned since the last one, at random places in two tables keyed by address, so nearly every
/// page of those tables is rewritten whatever the number of addresses: fewer, larger writes cost
/// less per address on the writer every ingest transaction waits for. A read flushes first anyway,
/// so only how much a start re-derives (and a read during a burst waits for) grows.
const SQLITE_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// PostgreSQL: the transaction-level advisory lock of the rollup applier ("banhub_r"; the jobs'
/// keys are below 2^60, so never this one).
const ROLLUP_APPLIER_LOCK: i64 = 0x6261_6e68_7562_5f72;
/// PostgreSQL: pending rollup rows merged per applier transaction.
const PENDING_ROWS_PER_APPLY: i64 = 20_000;
/// Events read per transaction when the per-address rollups are derived again at start.
const REDERIVE_PAGE: i64 = 5_000;

pub(super) const EVENT_COLUMNS: &str = "id, server_id, agent_id, epoch, seq, kind, source, ip, ip_key, jail, \
    hostname, failures, logs, ban_time, ban_duration, ban_count, lost, detail, occurred_at, stored_at";

/// The granularity of a rollup table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grain {
    Hour,
    Day,
}

impl Grain {
    pub fn millis(self) -> i64 {
        match self {
            Self::Hour => HOUR_MS,
            Self::Day => DAY_MS,
        }
    }

    pub(super) fn table(self) -> &'static str {
        match self {
            Self::Hour => "event_counts_hourly",
            Self::Day => "event_counts_daily",
        }
    }

    /// The start of the bucket holding `ms`.
    pub fn floor(self, ms: i64) -> i64 {
        ms.div_euclid(self.millis()) * self.millis()
    }
}

/// What one ingest transaction did.
#[derive(Debug, Clone)]
pub struct IngestOutcome {
    /// The highest sequence number committed for the agent's epoch, this batch included.
    pub committed_seq: u64,
    /// The events this batch stored, in id order; re-sent ones are not in it.
    pub stored: Vec<StoredEvent>,
}

/// An agent's batch made ready for its transaction (see [`Store::prepare_batch`]): events are
/// added as they arrive, and on SQLite each one's row values are built right then, so an agent's
/// session builds the rows of its next transaction while the previous one commits and the
/// transaction itself only binds them.
#[derive(Debug)]
pub struct PreparedBatch {
    server: ServerId,
    agent: AgentId,
    epoch: u64,
    server_text: String,
    agent_text: String,
    /// When the batch's events count as stored: when its preparation started, a transaction's
    /// commit wait earlier than its commit.
    stored_at: i64,
    /// Sequence number → event; a number repeated is stored once, the first wins.
    slots: HashMap<u64, NewEvent>,
    /// The sequence numbers in arrival order, repeats left out.
    order: Vec<u64>,
    /// SQLite: the rows of `order`'s events; empty on PostgreSQL, whose insert builds them itself.
    rows: Vec<EventRow>,
    build_rows: bool,
    seqs: Option<(u64, u64)>,
}

impl PreparedBatch {
    /// Adds one event at `seq` of the batch's epoch; a sequence number already in the batch is
    /// skipped.
    pub fn add(&mut self, seq: u64, event: NewEvent) -> Result<(), StoreError> {
        let std::collections::hash_map::Entry::Vacant(slot) = self.slots.entry(seq) else {
            return Ok(());
        };
        to_i64(seq, "sequence number")?;
        if self.build_rows {
            self.rows.push(EventRow::new(&event)?);
        }
        slot.insert(event);
        self.order.push(seq);
        self.seqs = Some(match self.seqs {
            None => (seq, seq),
            Some((min, max)) => (min.min(seq), max.max(seq)),
        });
        Ok(())
    }

    /// Events in the batch (repeats counted once).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The spool epoch the batch belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// One count read from a rollup table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow<K> {
    pub key: K,
    pub kind: EventKind,
    pub count: u64,
}

/// SQL text with its bound values and the right placeholders for the backend.
pub(super) struct Sql {
    backend: DbBackend,
    text: String,
    values: Vec<Value>,
}

impl Sql {
    pub(super) fn new(backend: DbBackend, text: &str) -> Self {
        Self {
            backend,
            text: text.to_owned(),
            values: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub(super) fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.values.push(value.into());
        if self.backend == DbBackend::Postgres {
            // Writing into a String cannot fail.
            let _ = write!(self.text, "${}", self.values.len());
        } else {
            self.text.push('?');
        }
        self
    }

    /// `(?, ?, …)` with one placeholder per value.
    pub(super) fn tuple<I: IntoIterator<Item = Value>>(&mut self, values: I) -> &mut Self {
        self.text.push('(');
        for (i, value) in values.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.bind(value);
        }
        self.text.push(')');
        self
    }

    pub(super) fn backend(&self) -> DbBackend {
        self.backend
    }

    pub(super) fn build(self) -> Statement {
        Statement::from_sql_and_values(self.backend, self.text, self.values)
    }

    /// The text and the values, for a driver other than sea-orm's (see `sqlite_ingest`).
    pub(super) fn into_parts(self) -> (String, Vec<Value>) {
        (self.text, self.values)
    }
}

/// `items` cut into consecutive slices of the [`CHUNK_SIZES`], largest first.
fn fixed_chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        let size = CHUNK_SIZES
            .iter()
            .copied()
            .find(|size| *size <= rest.len())?;
        let (chunk, tail) = rest.split_at(size);
        rest = tail;
        Some(chunk)
    })
}

fn to_i64(n: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(n)
        .map_err(|_| StoreError::Corrupt(format!("{what} {n} does not fit the database")))
}

pub(super) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(super) fn get<T: sea_orm::TryGetable>(
    row: &QueryResult,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get_by_index(index).map_err(StoreError::from)
}

/// An event's own columns of its `events` row: all but the id and the columns a batch shares
/// (server, agent, epoch, time stored) and the sequence number. Built once per event.
#[derive(Debug)]
pub(super) struct EventRow {
    pub kind: &'static str,
    pub source: &'static str,
    pub ip: Option<String>,
    pub ip_key: Option<Vec<u8>>,
    pub jail: Option<String>,
    pub hostname: String,
    pub failures: i64,
    pub logs: String,
    pub ban_time: Option<i64>,
    pub ban_duration: Option<i64>,
    pub ban_count: Option<i64>,
    pub lost: Option<i64>,
    pub detail: Option<String>,
    pub occurred_at: i64,
}

impl EventRow {
    pub(super) fn new(event: &NewEvent) -> Result<Self, StoreError> {
        let facts = event.body.facts();
        let logs = match facts {
            Some(f) => serde_json::to_string(f.logs.lines())
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            None => "[]".to_owned(),
        };
        let (lost, detail) = match &event.body {
            EventBody::Gap(gap) => (
                Some(to_i64(gap.lost, "lost count")?),
                Some(
                    serde_json::json!({"reason": gap.reason.as_str(), "ranges": gap.ranges})
                        .to_string(),
                ),
            ),
            _ => (None, None),
        };
        Ok(Self {
            kind: event.kind().as_str(),
            source: event.source.as_str(),
            ip: facts.map(|f| f.ip.to_string()),
            ip_key: facts.map(|f| ip_key(&f.ip).to_vec()),
            jail: facts.map(|f| f.jail.as_str().to_owned()),
            hostname: facts.map(|f| f.hostname.clone()).unwrap_or_default(),
            failures: i64::from(facts.map(|f| f.failures).unwrap_or(0)),
            logs,
            ban_time: facts.and_then(|f| f.ban_time),
            ban_duration: facts
                .and_then(|f| f.ban_duration)
                .map(BanDuration::as_seconds),
            ban_count: facts.and_then(|f| f.ban_count).map(i64::from),
            lost,
            detail,
            occurred_at: event.occurred_at.timestamp_millis(),
        })
    }
}

/// The values of one `events` row, in [`EVENT_COLUMNS`] order without the id.
fn event_values(
    server: &str,
    agent: Option<&str>,
    position: Option<(i64, i64)>,
    event: &NewEvent,
    stored_at: i64,
) -> Result<Vec<Value>, StoreError> {
    let row = EventRow::new(event)?;
    Ok(vec![
        server.to_owned().into(),
        agent.map(str::to_owned).into(),
        position.map(|p| p.0).into(),
        position.map(|p| p.1).into(),
        row.kind.into(),
        row.source.into(),
        row.ip.into(),
        row.ip_key.into(),
        row.jail.into(),
        row.hostname.into(),
        row.failures.into(),
        row.logs.into(),
        row.ban_time.into(),
        row.ban_duration.into(),
        row.ban_count.into(),
        row.lost.into(),
        row.detail.into(),
        row.occurred_at.into(),
        stored_at.into(),
    ])
}

const INSERT_EVENTS: &str = "INSERT INTO events (server_id, agent_id, epoch, seq, kind, source, ip, \
    ip_key, jail, hostname, failures, logs, ban_time, ban_duration, ban_count, lost, detail, \
    occurred_at, stored_at) VALUES ";

fn to_event(row: event::Model) -> Result<StoredEvent, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("event {}: {what}", row.id));
    let kind = EventKind::parse(&row.kind).ok_or_else(|| corrupt("kind"))?;
    let source = EventSource::parse(&row.source).ok_or_else(|| corrupt("source"))?;
    let body = match kind {
        EventKind::Ban | EventKind::Unban => {
            let ip = row
                .ip
                .as_deref()
                .and_then(|ip| IpOrCidr::parse(ip).ok())
                .ok_or_else(|| corrupt("ip"))?;
            let jail = row
                .jail
                .as_deref()
                .and_then(|j| JailName::parse(j).ok())
                .ok_or_else(|| corrupt("jail"))?;
            let lines: Vec<String> =
                serde_json::from_str(&row.logs).map_err(|_| corrupt("logs"))?;
            let facts = BanFacts {
                ip,
                jail,
                hostname: row.hostname.clone(),
                failures: u32::try_from(row.failures).unwrap_or(0),
                logs: Logs::capped(lines),
                ban_time: row.ban_time,
                ban_duration: row.ban_duration.and_then(BanDuration::from_seconds),
                ban_count: row.ban_count.and_then(|c| u32::try_from(c).ok()),
            };
            if kind == EventKind::Ban {
                EventBody::Ban(facts)
            } else {
                EventBody::Unban(facts)
            }
        }
        EventKind::Gap => {
            #[derive(serde::Deserialize)]
            struct Detail {
                reason: String,
                ranges: Vec<SeqRange>,
            }
            let detail: Detail = row
                .detail
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok())
                .ok_or_else(|| corrupt("gap detail"))?;
            EventBody::Gap(GapFacts {
                reason: GapReason::parse(&detail.reason),
                lost: to_u64(row.lost.unwrap_or(0)),
                ranges: detail.ranges,
            })
        }
    };
    Ok(StoredEvent {
        id: EventId(row.id),
        server_id: ServerId::parse(&row.server_id).map_err(|_| corrupt("server id"))?,
        agent_id: row
            .agent_id
            .as_deref()
            .map(AgentId::parse)
            .transpose()
            .map_err(|_| corrupt("agent id"))?,
        position: match (row.epoch, row.seq) {
            (Some(epoch), Some(seq)) => Some(SpoolPosition {
                epoch: to_u64(epoch),
                seq: to_u64(seq),
            }),
            _ => None,
        },
        occurred_at: to_time(row.occurred_at),
        stored_at: to_time(row.stored_at),
        source,
        body,
    })
}

pub(super) fn read_events(rows: Vec<QueryResult>) -> Result<Vec<StoredEvent>, StoreError> {
    rows.iter()
        .map(|row| to_event(event::Model::from_query_result(row, "")?))
        .collect()
}

/// Bans of one address on one server within a batch.
#[derive(Debug, Clone)]
struct IpAgg {
    bans: i64,
    first: i64,
    last: i64,
    last_jail: String,
}

impl IpAgg {
    fn add(&mut self, other: &IpAgg) {
        self.bans += other.bans;
        self.first = self.first.min(other.first);
        if other.last >= self.last {
            self.last = other.last;
            self.last_jail.clone_from(&other.last_jail);
        }
    }
}

/// The per-address rollups' map: (address, server) → bans. Keyed by the values, not their texts:
/// every ban of a burst is added to SQLite's pending rollups, and a map keyed by two owned texts
/// would cost two allocations per ban and string comparisons down a tree of up to 100,000 pairs.
/// The texts, in their order, are made when the rows are written.
type IpServers = HashMap<(IpOrCidr, ServerId), IpAgg, foldhash::fast::RandomState>;

/// What a batch adds to the rollups; the counts keyed in sorted order.
#[derive(Debug, Default)]
struct Rollups {
    /// (grain, server or "", jail or "", bucket, kind) → count.
    counts: BTreeMap<(Grain, String, String, i64, &'static str), i64>,
    /// (ip, server) → bans.
    ip_servers: IpServers,
    /// The highest event id added (0 before the first).
    upto: i64,
}

/// A `rollup_pending` row (PostgreSQL): fleet-wide counts `(day?, server, jail, bucket, kind,
/// count)` and per-address bans `(ip, server, bans, first, last, last jail)`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PendingBody {
    c: Vec<(bool, String, String, i64, String, i64)>,
    a: Vec<(String, String, i64, i64, i64, String)>,
}

/// Rollups of events stored by [`Store::import_batch`], accumulated in memory and written once
/// by [`Store::apply_rollups`]: for loading a large history quickly (the bench's seeding), with the
/// very aggregation ingest uses.
#[derive(Debug, Default)]
pub struct PendingRollups(Rollups);

impl PendingRollups {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `events` (stored ones, as returned by the import).
    pub fn add(&mut self, events: &[StoredEvent]) {
        self.0.add(events);
    }
}

impl Rollups {
    fn of(events: &[StoredEvent]) -> Self {
        let mut rollups = Self::default();
        rollups.add(events);
        rollups
    }

    fn add(&mut self, events: &[StoredEvent]) {
        // Counted first under borrowed keys, then added to the owned map once per distinct key: a
        // batch has few distinct (server, jail, bucket, kind) among its events, and building the
        // owned keys for every event was most of the rollups' cost in the hub. The keys are hashed
        // eight times per event, with a fast seeded hash (SipHash took most of the rest).
        type Key<'a> = (Grain, Option<ServerId>, &'a str, i64, &'static str);
        let mut counts: HashMap<Key<'_>, i64, foldhash::fast::RandomState> = HashMap::default();
        let mut server_texts: HashMap<ServerId, String> = HashMap::new();
        let mut server_text = |id: ServerId| {
            server_texts
                .entry(id)
                .or_insert_with(|| id.to_string())
                .clone()
        };
        for event in events {
            self.upto = self.upto.max(event.id.0);
            // The end-to-end probe proves delivery; it is not traffic to count.
            if event.is_probe() {
                continue;
            }
            let at = event.occurred_at.timestamp_millis();
            let server = event.server_id;
            let kind = event.kind().as_str();
            let jail = event.body.facts().map(|f| f.jail.as_str());
            for grain in [Grain::Hour, Grain::Day] {
                let bucket = grain.floor(at);
                let jails: &[&str] = match jail {
                    Some(jail) => &["", jail],
                    None => &[""],
                };
                for &jail in jails {
                    for server in [Some(server), None] {
                        *counts
                            .entry((grain, server, jail, bucket, kind))
                            .or_default() += 1;
                    }
                }
            }
            if let EventBody::Ban(facts) = &event.body {
                let agg = IpAgg {
                    bans: 1,
                    first: at,
                    last: at,
                    last_jail: facts.jail.as_str().to_owned(),
                };
                self.add_address((facts.ip, server), agg);
            }
        }
        for ((grain, server, jail, bucket, kind), count) in counts {
            let server = server.map_or_else(String::new, &mut server_text);
            *self
                .counts
                .entry((grain, server, jail.to_owned(), bucket, kind))
                .or_default() += count;
        }
    }

    /// Adds the per-address part of `other` (its counts are left out: those are written by the
    /// ingest transaction itself) and its ids.
    fn merge_addresses(&mut self, other: Rollups) {
        for (key, agg) in other.ip_servers {
            self.add_address(key, agg);
        }
        self.upto = self.upto.max(other.upto);
    }

    /// Adds `agg` to the bans of an (address, server) pair.
    fn add_address(&mut self, key: (IpOrCidr, ServerId), agg: IpAgg) {
        self.ip_servers
            .entry(key)
            .and_modify(|a| a.add(&agg))
            .or_insert(agg);
    }

    /// Takes everything out, leaving empty rollups that keep the highest event id (the pending
    /// rollups' watermark-to-be).
    fn take(&mut self) -> Rollups {
        let upto = self.upto;
        std::mem::replace(
            self,
            Rollups {
                upto,
                ..Rollups::default()
            },
        )
    }

    /// Adds all of `other`.
    fn merge(&mut self, mut other: Rollups) {
        for (key, count) in std::mem::take(&mut other.counts) {
            *self.counts.entry(key).or_default() += count;
        }
        self.merge_addresses(other);
    }

    /// Takes out what other agents' batches add to as well: the per-address rollups and the
    /// fleet-wide counts (server ""). The per-server counts stay.
    fn take_shared(&mut self) -> Rollups {
        let (fleet, own) = std::mem::take(&mut self.counts)
            .into_iter()
            .partition(|(key, _)| key.1.is_empty());
        self.counts = own;
        Rollups {
            counts: fleet,
            ip_servers: std::mem::take(&mut self.ip_servers),
            upto: self.upto,
        }
    }

    /// The text of a `rollup_pending` row.
    fn to_body(&self) -> Result<String, StoreError> {
        let body = PendingBody {
            c: self
                .counts
                .iter()
                .map(|((grain, server, jail, bucket, kind), count)| {
                    (
                        matches!(grain, Grain::Day),
                        server.clone(),
                        jail.clone(),
                        *bucket,
                        (*kind).to_owned(),
                        *count,
                    )
                })
                .collect(),
            a: self
                .ip_servers
                .iter()
                .map(|((ip, server), agg)| {
                    (
                        ip.to_string(),
                        server.to_string(),
                        agg.bans,
                        agg.first,
                        agg.last,
                        agg.last_jail.clone(),
                    )
                })
                .collect(),
        };
        serde_json::to_string(&body).map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    fn from_body(text: &str) -> Result<Self, StoreError> {
        let body: PendingBody = serde_json::from_str(text)
            .map_err(|e| StoreError::Corrupt(format!("rollup_pending: {e}")))?;
        let mut rollups = Self::default();
        for (day, server, jail, bucket, kind, count) in body.c {
            let kind = EventKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("rollup_pending: kind {kind:?}")))?
                .as_str();
            let grain = if day { Grain::Day } else { Grain::Hour };
            *rollups
                .counts
                .entry((grain, server, jail, bucket, kind))
                .or_default() += count;
        }
        for (ip, server, bans, first, last, last_jail) in body.a {
            let corrupt = |what: &str| StoreError::Corrupt(format!("rollup_pending: {what}"));
            let ip = IpOrCidr::parse(&ip).map_err(|_| corrupt(&format!("address {ip:?}")))?;
            let server =
                ServerId::parse(&server).map_err(|_| corrupt(&format!("server {server:?}")))?;
            let agg = IpAgg {
                bans,
                first,
                last,
                last_jail,
            };
            rollups.add_address((ip, server), agg);
        }
        Ok(rollups)
    }

    /// Writes the per-address rollups and moves the SQLite watermark to [`Rollups::upto`], in
    /// `txn`: the bans of every event up to there are then in the tables, exactly once.
    async fn apply_deferred(&self, txn: &DatabaseTransaction) -> Result<(), StoreError> {
        let new_ips = self.apply_addresses(txn).await?;
        if new_ips > 0 {
            add_total(txn, DISTINCT_IPS, new_ips).await?;
        }
        let mut sql = Sql::new(
            txn.get_database_backend(),
            "INSERT INTO event_totals (name, value) VALUES ",
        );
        sql.tuple([ROLLUPS_APPLIED_TO.into(), self.upto.into()])
            .push(" ON CONFLICT (name) DO UPDATE SET value = excluded.value");
        txn.execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Adds the batch to the rollup tables. Only one row per statement chunk comes back (the
    /// count of known addresses): a returned row costs a hand-off between SQLite's worker thread
    /// and the async side, and rows per address were most of a batch's round trips before. The
    /// rows every batch touches (the fleet-wide counts of the current hour and day, the distinct
    /// address total) are written last, so on PostgreSQL concurrent batches hold their locks only
    /// from there to the commit.
    async fn apply(self, txn: &DatabaseTransaction) -> Result<(), StoreError> {
        let backend = txn.get_database_backend();
        let new_ips = self.apply_addresses(txn).await?;
        for sql in self.count_statements(backend) {
            txn.execute_raw(sql.build()).await?;
        }
        if new_ips > 0 {
            add_total(txn, DISTINCT_IPS, new_ips).await?;
        }
        Ok(())
    }

    /// The upserts that add the counts to the hourly and daily tables.
    fn count_statements(&self, backend: DbBackend) -> Vec<Sql> {
        let mut statements = Vec::new();
        for grain in [Grain::Hour, Grain::Day] {
            let rows: Vec<_> = self.counts.iter().filter(|(k, _)| k.0 == grain).collect();
            let table = grain.table();
            let head =
                format!("INSERT INTO {table} (server_id, jail, bucket, kind, count) VALUES ");
            let tail = format!(
                " ON CONFLICT (server_id, jail, bucket, kind) \
                 DO UPDATE SET count = {table}.count + excluded.count"
            );
            for chunk in fixed_chunks(&rows) {
                let mut sql = Sql::new(backend, &head);
                for (i, ((_, server, jail, bucket, kind), count)) in chunk.iter().enumerate() {
                    if i > 0 {
                        sql.push(", ");
                    }
                    sql.tuple([
                        server.clone().into(),
                        jail.clone().into(),
                        (*bucket).into(),
                        (*kind).into(),
                        (**count).into(),
                    ]);
                }
                sql.push(&tail);
                statements.push(sql);
            }
        }
        statements
    }

    /// Adds the batch's bans to `ip_servers` and `ip_stats`; returns how many addresses were new.
    async fn apply_addresses(&self, txn: &DatabaseTransaction) -> Result<i64, StoreError> {
        if self.ip_servers.is_empty() {
            return Ok(0);
        }
        let backend = txn.get_database_backend();
        // SQLite has one writer at a time, so what this transaction reads is what it updates:
        // the new addresses and servers are counted in the database and nothing is read back per
        // row. PostgreSQL's concurrent writers need what each upsert returns (see below).
        let serial = backend == DbBackend::Sqlite;
        let mut new_pairs: HashMap<&str, i64> = HashMap::new();
        // As stored, in the order of the tables' keys: neighbouring upserts share pages, and
        // PostgreSQL's writers lock rows in one order. A batch has few servers, each written once.
        let mut server_texts: HashMap<ServerId, String> = HashMap::new();
        let mut pairs: Vec<((String, String), &IpAgg)> = self
            .ip_servers
            .iter()
            .map(|((ip, server), agg)| {
                let server = server_texts
                    .entry(*server)
                    .or_insert_with(|| server.to_string())
                    .clone();
                ((ip.to_string(), server), agg)
            })
            .collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        // Per address and server. Written before `ip_stats`, whose server count is read from it.
        for chunk in fixed_chunks(&pairs) {
            let mut sql = Sql::new(
                backend,
                "INSERT INTO ip_servers (ip, server_id, bans, first_seen, last_seen) VALUES ",
            );
            for (i, ((ip, server), agg)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple([
                    ip.clone().into(),
                    server.clone().into(),
                    agg.bans.into(),
                    agg.first.into(),
                    agg.last.into(),
                ]);
            }
            sql.push(
                " ON CONFLICT (ip, server_id) DO UPDATE SET \
                 bans = ip_servers.bans + excluded.bans, \
                 first_seen = CASE WHEN excluded.first_seen < ip_servers.first_seen \
                     THEN excluded.first_seen ELSE ip_servers.first_seen END, \
                 last_seen = CASE WHEN excluded.last_seen > ip_servers.last_seen \
                     THEN excluded.last_seen ELSE ip_servers.last_seen END",
            );
            if serial {
                txn.execute_raw(sql.build()).await?;
                continue;
            }
            // A returned count equal to the batch's means the row is new, so the address was
            // banned on one more server. The returned row is the one after any concurrent
            // transaction that held it committed, which a count read in this statement's
            // snapshot would not see.
            sql.push(" RETURNING ip, server_id, bans");
            for row in txn.query_all_raw(sql.build()).await? {
                let ip: String = get(&row, 0)?;
                let server: String = get(&row, 1)?;
                let bans: i64 = get(&row, 2)?;
                let key = (ip, server);
                if let Ok(at) = pairs.binary_search_by(|pair| pair.0.cmp(&key))
                    && let ((ip, _), agg) = &pairs[at]
                    && agg.bans == bans
                {
                    *new_pairs.entry(ip.as_str()).or_default() += 1;
                }
            }
        }

        // Per address: the batch's bans over every server, the server of the latest ban, and on
        // how many servers the batch banned it.
        let mut per_ip: BTreeMap<&str, (IpAgg, &str, i64)> = BTreeMap::new();
        for ((ip, server), agg) in &pairs {
            match per_ip.get_mut(ip.as_str()) {
                None => {
                    per_ip.insert(ip, ((*agg).clone(), server, 1));
                }
                Some(entry) => {
                    if agg.last >= entry.0.last {
                        entry.1 = server;
                    }
                    entry.0.add(agg);
                    entry.2 += 1;
                }
            }
        }
        if !serial {
            // On PostgreSQL `servers` is the number of servers new for the address.
            for (ip, entry) in per_ip.iter_mut() {
                entry.2 = new_pairs.get(ip).copied().unwrap_or(0);
            }
        }
        let rows: Vec<_> = per_ip.into_iter().collect();
        let mut new_ips = 0i64;
        for chunk in fixed_chunks(&rows) {
            if serial {
                // Addresses not in `ip_stats` yet are new distinct addresses: one count per chunk.
                let mut sql = Sql::new(backend, "SELECT COUNT(*) FROM ip_stats WHERE ip IN ");
                sql.tuple(chunk.iter().map(|(ip, _)| (*ip).to_owned().into()));
                let known: i64 = match txn.query_one_raw(sql.build()).await? {
                    Some(row) => get(&row, 0)?,
                    None => 0,
                };
                new_ips += i64::try_from(chunk.len()).unwrap_or(i64::MAX) - known;
            }

            // A new address is on the servers this batch banned it on. SQLite: a known one on as
            // many servers as `ip_servers` (already updated above) has rows for it; `ip_servers`
            // rows only go together with their `ip_stats` row (retention), so the two agree.
            // PostgreSQL: on as many more as it is new on.
            let mut sql = Sql::new(
                backend,
                "INSERT INTO ip_stats (ip, bans, servers, first_seen, last_seen, last_jail, \
                 last_server_id) VALUES ",
            );
            for (i, (ip, (agg, server, servers))) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple([
                    (*ip).to_owned().into(),
                    agg.bans.into(),
                    (*servers).into(),
                    agg.first.into(),
                    agg.last.into(),
                    agg.last_jail.clone().into(),
                    (*server).to_owned().into(),
                ]);
            }
            sql.push(if serial {
                " ON CONFLICT (ip) DO UPDATE SET \
                 bans = ip_stats.bans + excluded.bans, \
                 servers = (SELECT COUNT(*) FROM ip_servers WHERE ip_servers.ip = excluded.ip), "
            } else {
                " ON CONFLICT (ip) DO UPDATE SET \
                 bans = ip_stats.bans + excluded.bans, \
                 servers = ip_stats.servers + excluded.servers, "
            });
            sql.push(
                "first_seen = CASE WHEN excluded.first_seen < ip_stats.first_seen \
                     THEN excluded.first_seen ELSE ip_stats.first_seen END, \
                 last_jail = CASE WHEN excluded.last_seen >= ip_stats.last_seen \
                     THEN excluded.last_jail ELSE ip_stats.last_jail END, \
                 last_server_id = CASE WHEN excluded.last_seen >= ip_stats.last_seen \
                     THEN excluded.last_server_id ELSE ip_stats.last_server_id END, \
                 last_seen = CASE WHEN excluded.last_seen > ip_stats.last_seen \
                     THEN excluded.last_seen ELSE ip_stats.last_seen END",
            );
            if serial {
                txn.execute_raw(sql.build()).await?;
                continue;
            }
            // A returned total equal to the batch's means the address is new (see above).
            sql.push(" RETURNING ip, bans");
            let batch: HashMap<&str, i64> = chunk.iter().map(|(ip, e)| (*ip, e.0.bans)).collect();
            for row in txn.query_all_raw(sql.build()).await? {
                let ip: String = get(&row, 0)?;
                let bans: i64 = get(&row, 1)?;
                if batch.get(ip.as_str()) == Some(&bans) {
                    new_ips += 1;
                }
            }
        }
        Ok(new_ips)
    }
}

/// SQLite: the per-address rollups (`ip_servers`, `ip_stats`, the distinct-address total) of
/// committed events that are not written yet. Writing them in every ingest transaction was about
/// half of the store's cost per event (an upsert into two tables keyed all over the address range,
/// per batch); they are gathered here and written every few seconds in one transaction by
/// [`Store::flush_rollups`], and by any read of those tables first, so a read never sees them late.
///
/// The transaction that writes them also moves a watermark (`event_totals.rollups_applied_to`, an
/// event id): the bans of every event up to it are in the tables, of none after it. A hub that stops
/// with rollups pending loses only memory: at start the bans of the events after the watermark are
/// read back from `events` and written (see [`Store::rederive_rollups`]). This holds because event
/// ids on SQLite follow the commit order (one writer), and an ingest holds [`Self::pending`] from
/// before its commit until its bans are in it, so a flush never takes a watermark past an event whose
/// bans it does not have. PostgreSQL (several writers, several replicas) keeps them in the ingest
/// transaction.
#[derive(Debug)]
pub(super) struct DeferredRollups {
    /// The store's writer connection (SQLite; the pool on PostgreSQL), for the task that flushes
    /// (which holds only a weak reference, so it ends with the last handle on the store).
    db: DatabaseConnection,
    /// The bans of committed events not written yet; `upto` is the highest event id committed.
    pending: tokio::sync::Mutex<Rollups>,
    /// Held across a flush, so watermarks commit in order; holds the watermark last committed.
    flushing: tokio::sync::Mutex<i64>,
    /// Events whose bans the start wrote again (a stop had left them pending).
    rederived: u64,
    /// PostgreSQL: what an ingest adds to the shared rollups is a row of `rollup_pending`
    /// (M0011), not memory; `pending` and `flushing` are unused.
    rows: bool,
    /// The store's write gate (see [`Store::write_gate`]), which a flush queues on like ingest.
    write_gate: Arc<tokio::sync::Mutex<()>>,
}

impl DeferredRollups {
    /// PostgreSQL's deferred rollups: rows of `rollup_pending`.
    fn rows(db: DatabaseConnection, write_gate: Arc<tokio::sync::Mutex<()>>) -> Self {
        Self {
            rows: true,
            ..Self::new(db, write_gate, 0, 0)
        }
    }

    /// The deferred rollups of a SQLite store whose watermark is `applied`.
    fn new(
        db: DatabaseConnection,
        write_gate: Arc<tokio::sync::Mutex<()>>,
        applied: i64,
        rederived: u64,
    ) -> Self {
        Self {
            db,
            write_gate,
            rederived,
            rows: false,
            pending: tokio::sync::Mutex::new(Rollups {
                upto: applied,
                ..Rollups::default()
            }),
            flushing: tokio::sync::Mutex::new(applied),
        }
    }

    /// PostgreSQL: merges the committed `rollup_pending` rows, writes them to the rollups and
    /// deletes them, in transactions of at most [`PENDING_ROWS_PER_APPLY`] rows, one applier at a
    /// time across replicas. `wait`: wait for a running applier (a read must see what was
    /// committed before it) rather than leave the work to it (the periodic pass).
    async fn apply_pending_rows(&self, wait: bool) -> Result<(), StoreError> {
        loop {
            let txn = self.db.begin().await?;
            let lock = if wait {
                "SELECT true FROM pg_advisory_xact_lock($1)"
            } else {
                "SELECT pg_try_advisory_xact_lock($1)"
            };
            let locked: bool = match txn
                .query_one_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    lock,
                    [ROLLUP_APPLIER_LOCK.into()],
                ))
                .await?
            {
                Some(row) => get(&row, 0)?,
                None => false,
            };
            if !locked {
                return Ok(());
            }
            // Rows committed from here on are not in this snapshot's reads, and are deleted by
            // id only: they are left for the next pass, never deleted unapplied.
            let mut sql = Sql::new(
                DbBackend::Postgres,
                "SELECT id, body FROM rollup_pending ORDER BY id LIMIT ",
            );
            sql.bind(PENDING_ROWS_PER_APPLY);
            let rows = txn.query_all_raw(sql.build()).await?;
            if rows.is_empty() {
                txn.commit().await?;
                return Ok(());
            }
            let full = rows.len() as i64 >= PENDING_ROWS_PER_APPLY;
            let mut merged = Rollups::default();
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(get::<i64>(row, 0)?);
                merged.merge(Rollups::from_body(&get::<String>(row, 1)?)?);
            }
            merged.apply(&txn).await?;
            for chunk in ids.chunks(1_000) {
                let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
                txn.execute_unprepared(&format!(
                    "DELETE FROM rollup_pending WHERE id IN ({})",
                    list.join(", ")
                ))
                .await?;
            }
            txn.commit().await?;
            if !full {
                return Ok(());
            }
        }
    }

    /// SQLite: writes the pending per-address rollups and moves the watermark (see
    /// [`Store::flush_rollups`]).
    async fn flush_pending(&self) -> Result<(), StoreError> {
        let mut applied = self.flushing.lock().await;
        let rollups = {
            let mut pending = self.pending.lock().await;
            if pending.upto <= *applied && pending.ip_servers.is_empty() {
                return Ok(());
            }
            pending.take()
        };
        let result = async {
            // SQLite only: behind the write gate like every heavy writer.
            let _gate = Arc::clone(&self.write_gate).lock_owned().await;
            let txn = self.db.begin().await?;
            rollups.apply_deferred(&txn).await?;
            txn.commit().await?;
            Ok::<_, StoreError>(())
        }
        .await;
        match result {
            Ok(()) => {
                *applied = rollups.upto;
                Ok(())
            }
            Err(e) => {
                self.pending.lock().await.merge_addresses(rollups);
                Err(e)
            }
        }
    }
}

/// The task that writes the deferred rollups every [`SQLITE_FLUSH_EVERY`] (SQLite) or
/// [`PG_FLUSH_EVERY`] (PostgreSQL); it ends with the
/// last handle on the store.
fn spawn_flusher(deferred: &Arc<DeferredRollups>) {
    let every = if deferred.rows {
        PG_FLUSH_EVERY
    } else {
        SQLITE_FLUSH_EVERY
    };
    let weak = Arc::downgrade(deferred);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(deferred) = weak.upgrade() else {
                return;
            };
            // On PostgreSQL a replica already applying does this replica's rows too.
            let result = if deferred.rows {
                deferred.apply_pending_rows(false).await
            } else {
                // In its own task, like every flush (see `Store::flush_rollups`).
                let flushing = Arc::clone(&deferred);
                tokio::spawn(async move { flushing.flush_pending().await })
                    .await
                    .map_err(|e| StoreError::Corrupt(format!("the rollup flush failed: {e}")))
                    .and_then(|r| r)
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "cannot write the deferred rollups; retrying");
            }
        }
    });
}

/// This hub's ingest transactions: how many run now and when (Unix ms) the last one ended. A
/// transaction can take longer than the window in which the text indexer counts ingest as busy, so
/// the running ones count too.
#[derive(Debug, Default)]
pub(super) struct IngestActivity {
    running: AtomicUsize,
    ended_ms: AtomicI64,
}

/// One running ingest transaction, counted in [`IngestActivity`] until dropped (however it ends).
struct IngestRunning<'a>(&'a IngestActivity);

impl<'a> IngestRunning<'a> {
    fn start(activity: &'a IngestActivity) -> Self {
        activity.running.fetch_add(1, Ordering::Relaxed);
        Self(activity)
    }
}

impl Drop for IngestRunning<'_> {
    fn drop(&mut self) {
        self.0.ended_ms.store(now_ms(), Ordering::Relaxed);
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The write gate's guard (see [`Store::write_gate`]); `None` on PostgreSQL.
pub(super) type WriteGuard = Option<tokio::sync::OwnedMutexGuard<()>>;

/// The settings of SQLite's writer connection (see `Store::writer`), on top of every connection's;
/// applied each time it connects.
pub(super) fn sqlite_writer_settings(sqlite: SqliteConnectOptions) -> SqliteConnectOptions {
    sqlite
        .pragma("cache_size", format!("-{SQLITE_WRITER_CACHE_KIB}"))
        .pragma(
            "wal_autocheckpoint",
            SQLITE_WRITER_AUTOCHECKPOINT_PAGES.to_string(),
        )
        // A multi-row insert or upsert inside a transaction keeps a statement journal (the pages
        // it changed, to undo the statement alone if it fails halfway). With files for temporary
        // storage a journal over 64 KiB spills to a temporary file, and every batch's inserts
        // would. In memory it is only ever as large as one statement's pages.
        .pragma("temp_store", "MEMORY")
}

/// The upsert of an agent's cursor for a batch of `epoch` up to `max_seq`; returns the cursor.
fn cursor_upsert(backend: DbBackend, agent: &str, epoch: i64, max_seq: i64, stored_at: i64) -> Sql {
    let mut sql = Sql::new(
        backend,
        "INSERT INTO agent_cursors (agent_id, epoch, last_seq, updated_at) VALUES ",
    );
    sql.tuple([
        agent.to_owned().into(),
        epoch.into(),
        max_seq.into(),
        stored_at.into(),
    ])
    .push(
        " ON CONFLICT (agent_id, epoch) DO UPDATE SET \
         last_seq = CASE WHEN excluded.last_seq > agent_cursors.last_seq \
             THEN excluded.last_seq ELSE agent_cursors.last_seq END, \
         updated_at = excluded.updated_at \
         RETURNING last_seq",
    );
    sql
}

/// The events a batch stored, taken out of `slots`, from what its insert returned: `(id, seq)`
/// in id order.
fn stored_events(
    (server, agent, epoch): (ServerId, AgentId, u64),
    stored_at: i64,
    slots: &mut HashMap<u64, NewEvent>,
    inserted: Vec<(i64, u64)>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut stored = Vec::with_capacity(inserted.len());
    for (id, seq) in inserted {
        let event = slots.remove(&seq).ok_or_else(|| {
            StoreError::Corrupt(format!("the insert returned sequence number {seq} twice"))
        })?;
        stored.push(StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: Some(agent),
            position: Some(SpoolPosition { epoch, seq }),
            // As stored (milliseconds), so the live stream and the alert worker see what a read
            // returns, to the edge of a window.
            occurred_at: to_time(event.occurred_at.timestamp_millis()),
            stored_at: to_time(stored_at),
            source: event.source,
            body: event.body,
        });
    }
    Ok(stored)
}

/// Commits a SQLite ingest transaction (`commit`), releases the write gate and hands the batch's
/// per-address rollups to the pending ones (see [`DeferredRollups`]). The commit and the
/// hand-over run in their own task: a caller that gives up (a session ending) must not leave a
/// committed batch whose bans never reach the pending rollups, which a later watermark would then
/// pass.
async fn hand_over(
    deferred: &Arc<DeferredRollups>,
    commit: impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
    gate: WriteGuard,
    addresses: Rollups,
) -> Result<(), StoreError> {
    let deferred = Arc::clone(deferred);
    tokio::spawn(async move {
        let mut pending = deferred.pending.lock().await;
        commit.await?;
        drop(gate);
        pending.merge_addresses(addresses);
        Ok::<_, StoreError>(())
    })
    .await
    .map_err(|e| StoreError::Corrupt(format!("the commit task failed: {e}")))?
}

async fn add_total(txn: &DatabaseTransaction, name: &str, delta: i64) -> Result<(), StoreError> {
    let mut sql = Sql::new(
        txn.get_database_backend(),
        "INSERT INTO event_totals (name, value) VALUES ",
    );
    sql.tuple([name.to_owned().into(), delta.into()])
        .push(" ON CONFLICT (name) DO UPDATE SET value = event_totals.value + excluded.value");
    txn.execute_raw(sql.build()).await?;
    Ok(())
}

impl Store {
    pub(super) fn backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    /// Waits for this hub's other heavy SQLite writers (ingest, the deferred rollups, the text
    /// indexer) to finish; `None` on PostgreSQL. SQLite allows one writer: a second one that
    /// starts meanwhile gets SQLITE_BUSY, and its busy handler then sleeps in steps of up to
    /// 100 ms, well past the moment the lock is free. Queued here, each starts as soon as the
    /// previous one commits.
    pub(super) async fn write_gate(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        if self.backend() == DbBackend::Sqlite {
            Some(Arc::clone(&self.write_gate).lock_owned().await)
        } else {
            None
        }
    }

    /// Whether an ingest transaction is running or ended in the last `window` (ingest is busy):
    /// background writers that may wait (the text indexer) keep off the gate meanwhile.
    pub fn ingest_active_within(&self, window: std::time::Duration) -> bool {
        let activity = &self.ingest_activity;
        if activity.running.load(Ordering::Relaxed) > 0 {
            return true;
        }
        let ended = activity.ended_ms.load(Ordering::Relaxed);
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        ended > 0 && now_ms().saturating_sub(ended) < window
    }

    /// Begins a transaction that writes events and rollups on the writer connection, behind the
    /// write gate (see [`Store::write_gate`]); the guard is to be held until the commit.
    pub(super) async fn begin_writer(
        &self,
    ) -> Result<(DatabaseTransaction, WriteGuard), StoreError> {
        let gate = self.write_gate().await;
        Ok((self.writer.begin().await?, gate))
    }

    /// An empty batch of `agent`'s spool `epoch` to add events to, then store with
    /// [`Store::ingest_prepared`].
    pub fn prepare_batch(&self, server: ServerId, agent: AgentId, epoch: u64) -> PreparedBatch {
        PreparedBatch {
            server,
            agent,
            epoch,
            server_text: server.to_string(),
            agent_text: agent.to_string(),
            stored_at: now_ms(),
            slots: HashMap::new(),
            order: Vec::new(),
            rows: Vec::new(),
            build_rows: self.backend() == DbBackend::Sqlite,
            seqs: None,
        }
    }

    fn prepared(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<PreparedBatch, StoreError> {
        let mut batch = self.prepare_batch(server, agent, epoch);
        batch.slots.reserve(events.len());
        for (seq, event) in events {
            batch.add(seq, event)?;
        }
        Ok(batch)
    }

    /// Stores an agent's batch in one transaction: events already stored (same agent, epoch and
    /// sequence number) are skipped, the rollups count only the new ones, and the agent's cursor
    /// moves to the highest sequence number seen.
    pub async fn ingest_batch(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<IngestOutcome, StoreError> {
        let batch = self.prepared(server, agent, epoch, events)?;
        self.ingest_prepared(batch).await
    }

    /// [`Store::ingest_batch`] of a batch prepared ahead (see [`PreparedBatch`]).
    pub async fn ingest_prepared(&self, batch: PreparedBatch) -> Result<IngestOutcome, StoreError> {
        let _running = IngestRunning::start(&self.ingest_activity);
        // The limit is never closed; an error here would be a bug, reported rather than panicked on.
        let _slot = self
            .ingest_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Corrupt("the ingest limit was closed".to_owned()))?;
        let stored = self.store_batch(batch, true).await;
        self.noting(stored)
    }

    /// [`Store::ingest_batch`] without the rollups: for loading a large history, whose rollups the
    /// caller adds up in [`PendingRollups`] and writes once with [`Store::apply_rollups`]. Until
    /// then stats and insights do not count these events.
    pub async fn import_batch(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<IngestOutcome, StoreError> {
        let batch = self.prepared(server, agent, epoch, events)?;
        self.store_batch(batch, false).await
    }

    /// Writes rollups gathered over imported batches, in one transaction. On SQLite the pending
    /// per-address rollups are written with them and the watermark moves past the imported events
    /// (call it after the imports, not during them).
    pub async fn apply_rollups(&self, rollups: PendingRollups) -> Result<(), StoreError> {
        let Some(deferred) = self.deferred.as_ref().filter(|d| !d.rows) else {
            let (txn, _gate) = self.begin_writer().await?;
            rollups.0.apply(&txn).await?;
            txn.commit().await?;
            return Ok(());
        };
        let mut imported = rollups.0;
        let mut applied = deferred.flushing.lock().await;
        let mut all = {
            let mut pending = deferred.pending.lock().await;
            pending.upto = pending.upto.max(imported.upto);
            pending.take()
        };
        let counts = Rollups {
            counts: std::mem::take(&mut imported.counts),
            ..Rollups::default()
        };
        all.merge_addresses(imported);
        let (txn, _gate) = self.begin_writer().await?;
        counts.apply(&txn).await?;
        all.apply_deferred(&txn).await?;
        txn.commit().await?;
        *applied = all.upto;
        Ok(())
    }

    async fn store_batch(
        &self,
        batch: PreparedBatch,
        rollups: bool,
    ) -> Result<IngestOutcome, StoreError> {
        if self.backend() == DbBackend::Sqlite {
            return self.store_batch_sqlite(batch, rollups).await;
        }
        let PreparedBatch {
            server,
            agent,
            epoch,
            server_text,
            agent_text,
            stored_at,
            mut slots,
            order,
            rows: _,
            build_rows: _,
            seqs,
        } = batch;
        let epoch_db = to_i64(epoch, "epoch")?;
        let Some((_, max_seq)) = seqs else {
            return self.nothing_stored(agent, epoch).await;
        };
        let max_seq_db = to_i64(max_seq, "sequence number")?;

        let (txn, gate) = self.begin_writer().await?;
        // The cursor first: its row lock orders two transactions of one agent.
        let sql = cursor_upsert(self.backend(), &agent_text, epoch_db, max_seq_db, stored_at);
        let committed: i64 = match txn.query_one_raw(sql.build()).await? {
            Some(row) => get(&row, 0)?,
            None => max_seq_db,
        };
        let inserted = self
            .insert_batch_returning(
                &txn,
                &slots,
                &order,
                (&server_text, &agent_text, epoch_db),
                stored_at,
            )
            .await?;
        // The text index's pending range of this transaction (see `event_text_pg`).
        if let (Some(first), Some(last)) = (inserted.first(), inserted.last()) {
            super::event_text_pg::note_pending(&txn, first.0, last.0).await?;
        }
        let stored = stored_events((server, agent, epoch), stored_at, &mut slots, inserted)?;
        if rollups {
            self.commit_with_rollups(txn, gate, Rollups::of(&stored))
                .await?;
        } else {
            txn.commit().await?;
        }
        Ok(IngestOutcome {
            committed_seq: to_u64(committed),
            stored,
        })
    }

    /// The outcome of a batch without events.
    async fn nothing_stored(
        &self,
        agent: AgentId,
        epoch: u64,
    ) -> Result<IngestOutcome, StoreError> {
        Ok(IngestOutcome {
            committed_seq: self.committed_seq(agent, epoch).await?,
            stored: Vec::new(),
        })
    }

    /// SQLite's [`Store::store_batch`], on the writer connection through sqlx (see
    /// `sqlite_ingest`). The transaction holds SQLite's write lock, so nobody else inserts
    /// meanwhile: the stored sequence numbers of the batch's range are read once, and the new
    /// events get explicit ids following the table's highest id ever (AUTOINCREMENT's counter, so
    /// ids are still never reused), without reading a row back per event. Should the check ever
    /// miss one, the unique index on `(agent_id, epoch, seq)` fails the transaction instead of
    /// storing it twice. The per-address rollups go to the pending ones once committed (see
    /// [`DeferredRollups`]).
    async fn store_batch_sqlite(
        &self,
        batch: PreparedBatch,
        rollups: bool,
    ) -> Result<IngestOutcome, StoreError> {
        let PreparedBatch {
            server,
            agent,
            epoch,
            server_text,
            agent_text,
            stored_at,
            mut slots,
            order,
            rows,
            build_rows: _,
            seqs,
        } = batch;
        if rows.len() != order.len() {
            return Err(StoreError::Corrupt(
                "a batch prepared for PostgreSQL was stored on SQLite".to_owned(),
            ));
        }
        let epoch_db = to_i64(epoch, "epoch")?;
        let Some((min_seq, max_seq)) = seqs else {
            return self.nothing_stored(agent, epoch).await;
        };
        let max_seq_db = to_i64(max_seq, "sequence number")?;
        let backend = DbBackend::Sqlite;

        let gate = self.write_gate().await;
        let mut txn = IngestTxn::begin(self.writer.get_sqlite_connection_pool()).await?;
        // The cursor first: the first statement writes, so SQLite takes its write lock at once
        // (waiting out its busy timeout) rather than failing a read transaction that later wants
        // to write.
        let sql = cursor_upsert(backend, &agent_text, epoch_db, max_seq_db, stored_at);
        let committed = txn
            .column(sql)
            .await?
            .first()
            .copied()
            .unwrap_or(max_seq_db);

        let mut sql = Sql::new(backend, "SELECT seq FROM events WHERE agent_id = ");
        sql.bind(agent_text.clone())
            .push(" AND epoch = ")
            .bind(epoch_db)
            .push(" AND seq BETWEEN ")
            .bind(to_i64(min_seq, "sequence number")?)
            .push(" AND ")
            .bind(max_seq_db);
        let existing: std::collections::HashSet<i64> = txn.column(sql).await?.into_iter().collect();
        let mut new = Vec::with_capacity(order.len());
        for (seq, row) in order.into_iter().zip(rows) {
            let seq_db = to_i64(seq, "sequence number")?;
            if !existing.contains(&seq_db) {
                new.push((seq_db, row));
            }
        }
        let mut inserted = Vec::with_capacity(new.len());
        if !new.is_empty() {
            let sql = Sql::new(
                backend,
                "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), \
                 COALESCE((SELECT MAX(id) FROM events), 0))",
            );
            let mut id = txn.column(sql).await?.first().copied().unwrap_or(0);
            let shared = sqlite_ingest::Shared {
                server: server_text.as_str().into(),
                agent: agent_text.as_str().into(),
                epoch: epoch_db,
                stored_at,
            };
            let sizes: Vec<usize> = fixed_chunks(&new).map(<[_]>::len).collect();
            let mut new = new.into_iter();
            for size in sizes {
                let mut chunk = Vec::with_capacity(size);
                for (seq, row) in new.by_ref().take(size) {
                    id += 1;
                    inserted.push((id, to_u64(seq)));
                    chunk.push((id, seq, row));
                }
                txn.insert_events(&shared, chunk).await?;
            }
        }
        let stored = stored_events((server, agent, epoch), stored_at, &mut slots, inserted)?;
        if !rollups {
            txn.commit().await?;
            return Ok(IngestOutcome {
                committed_seq: to_u64(committed),
                stored,
            });
        }
        let deferred = self.deferred.as_ref().filter(|d| !d.rows).ok_or_else(|| {
            StoreError::Corrupt("the SQLite store's pending rollups are not started".to_owned())
        })?;
        let mut counts = Rollups::of(&stored);
        let addresses = Rollups {
            ip_servers: std::mem::take(&mut counts.ip_servers),
            upto: counts.upto,
            ..Rollups::default()
        };
        for sql in counts.count_statements(backend) {
            txn.execute(sql).await?;
        }
        hand_over(deferred, txn.commit(), gate, addresses).await?;
        Ok(IngestOutcome {
            committed_seq: to_u64(committed),
            stored,
        })
    }

    /// Writes `rollups` in `txn` and commits it; on SQLite the per-address part is only added to
    /// the pending rollups, once committed (see [`DeferredRollups`]).
    async fn commit_with_rollups(
        &self,
        txn: DatabaseTransaction,
        gate: WriteGuard,
        mut rollups: Rollups,
    ) -> Result<(), StoreError> {
        let Some(deferred) = &self.deferred else {
            rollups.apply(&txn).await?;
            txn.commit().await?;
            return Ok(());
        };
        if deferred.rows {
            // PostgreSQL: only rows of this agent's server are updated; what is shared goes into
            // a row of its own.
            let shared = rollups.take_shared();
            rollups.apply(&txn).await?;
            if !shared.counts.is_empty() || !shared.ip_servers.is_empty() {
                let mut sql = Sql::new(self.backend(), "INSERT INTO rollup_pending (body) VALUES ");
                sql.tuple([shared.to_body()?.into()]);
                txn.execute_raw(sql.build()).await?;
            }
            txn.commit().await?;
            return Ok(());
        }
        let addresses = Rollups {
            ip_servers: std::mem::take(&mut rollups.ip_servers),
            upto: rollups.upto,
            ..Rollups::default()
        };
        rollups.apply(&txn).await?;
        let commit = async move { txn.commit().await.map_err(StoreError::from) };
        hand_over(deferred, commit, gate, addresses).await
    }

    /// How many events' bans the start of this store wrote to the per-address rollups again
    /// because a stop had left them pending (SQLite; always 0 on PostgreSQL).
    pub fn rollups_rederived_at_start(&self) -> u64 {
        self.deferred.as_ref().map_or(0, |d| d.rederived)
    }

    /// Writes the pending per-address rollups (SQLite; on PostgreSQL they are always written).
    /// Runs every few seconds by itself (every second on PostgreSQL); a read of `ip_stats`,
    /// `ip_servers` or the distinct address total calls it first, so it sees every committed event.
    pub async fn flush_rollups(&self) -> Result<(), StoreError> {
        let Some(deferred) = &self.deferred else {
            return Ok(());
        };
        if deferred.rows {
            return deferred.apply_pending_rows(true).await;
        }
        // In its own task, like the ingest's commit: a reader that gives up halfway must not drop
        // the rollups it took out of the pending ones.
        let deferred = Arc::clone(deferred);
        tokio::spawn(async move { deferred.flush_pending().await })
            .await
            .map_err(|e| StoreError::Corrupt(format!("the rollup flush failed: {e}")))?
    }

    /// PostgreSQL: the fleet-wide counts may be pending too; a read of them calls this first.
    /// Nothing to do on SQLite, where ingest writes them.
    pub async fn flush_counts(&self) -> Result<(), StoreError> {
        match &self.deferred {
            Some(deferred) if deferred.rows => deferred.apply_pending_rows(true).await,
            _ => Ok(()),
        }
    }

    /// The bans of `ips` still pending (SQLite), added to `counts` (read from `ip_stats` by
    /// `read`) under the flush lock, so a flush cannot move them between the two reads.
    pub(super) async fn with_pending_bans<F>(
        &self,
        ips: &[String],
        read: F,
    ) -> Result<HashMap<String, u64>, StoreError>
    where
        F: std::future::Future<Output = Result<HashMap<String, u64>, StoreError>>,
    {
        let Some(deferred) = &self.deferred else {
            return read.await;
        };
        if deferred.rows {
            deferred.apply_pending_rows(true).await?;
            return read.await;
        }
        let _flushing = deferred.flushing.lock().await;
        let mut counts = read.await?;
        let pending = deferred.pending.lock().await;
        // The addresses as the pending rollups key them (the texts are as stored, which is how
        // an address writes itself); a text that is not an address has no pending bans.
        let mut wanted: HashMap<IpOrCidr, (&String, i64)> = ips
            .iter()
            .filter_map(|ip| Some((IpOrCidr::parse(ip).ok()?, (ip, 0))))
            .collect();
        if !wanted.is_empty() {
            for ((ip, _), agg) in &pending.ip_servers {
                if let Some((_, bans)) = wanted.get_mut(ip) {
                    *bans += agg.bans;
                }
            }
        }
        for (ip, bans) in wanted.into_values() {
            if bans > 0 {
                *counts.entry(ip.clone()).or_default() += to_u64(bans);
            }
        }
        Ok(counts)
    }

    /// SQLite, at start: the deferred rollups, with the bans of events after the watermark that
    /// a stop left unwritten written now (in pages, each with its watermark), and the task that
    /// flushes them every few seconds. A database without a watermark had its rollups written by
    /// every ingest so far: its watermark is its newest event.
    pub(super) async fn start_deferred_rollups(&self) -> Result<Arc<DeferredRollups>, StoreError> {
        if self.backend() == DbBackend::Postgres {
            // The pending rows of a stopped replica are still there: nothing to derive again.
            let deferred = Arc::new(DeferredRollups::rows(
                self.db.clone(),
                Arc::clone(&self.write_gate),
            ));
            spawn_flusher(&deferred);
            return Ok(deferred);
        }
        let mut sql = Sql::new(
            self.backend(),
            "SELECT value FROM event_totals WHERE name = ",
        );
        sql.bind(ROLLUPS_APPLIED_TO);
        let stored: Option<i64> = match self.db.query_one_raw(sql.build()).await? {
            Some(row) => Some(get(&row, 0)?),
            None => None,
        };
        let mut applied = match stored {
            Some(applied) => applied,
            None => {
                let newest: i64 = match self
                    .db
                    .query_one_raw(
                        Sql::new(self.backend(), "SELECT COALESCE(MAX(id), 0) FROM events").build(),
                    )
                    .await?
                {
                    Some(row) => get(&row, 0)?,
                    None => 0,
                };
                let start = Rollups {
                    upto: newest,
                    ..Rollups::default()
                };
                let txn = self.db.begin().await?;
                start.apply_deferred(&txn).await?;
                txn.commit().await?;
                newest
            }
        };
        let mut rederived = 0u64;
        loop {
            let mut sql = Sql::new(
                self.backend(),
                &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id > "),
            );
            sql.bind(applied)
                .push(" ORDER BY id LIMIT ")
                .bind(REDERIVE_PAGE);
            let events = read_events(self.db.query_all_raw(sql.build()).await?)?;
            if events.is_empty() {
                break;
            }
            rederived += events.len() as u64;
            let mut rollups = Rollups::of(&events);
            rollups.counts.clear();
            let (txn, _gate) = self.begin_writer().await?;
            rollups.apply_deferred(&txn).await?;
            txn.commit().await?;
            applied = rollups.upto;
        }
        if rederived > 0 {
            tracing::info!(
                events = rederived,
                upto = applied,
                "per-address rollups written again for events a stop left unwritten"
            );
        }
        let deferred = Arc::new(DeferredRollups::new(
            self.writer.clone(),
            Arc::clone(&self.write_gate),
            applied,
            rederived,
        ));
        spawn_flusher(&deferred);
        Ok(deferred)
    }

    /// PostgreSQL: inserts the batch, skipping events already stored, and returns the `(id, seq)`
    /// of those inserted in id order. Two replicas may race on one agent's batch (a lease moving),
    /// so the insert itself decides what is new.
    async fn insert_batch_returning(
        &self,
        txn: &DatabaseTransaction,
        slots: &HashMap<u64, NewEvent>,
        order: &[u64],
        (server, agent, epoch): (&str, &str, i64),
        stored_at: i64,
    ) -> Result<Vec<(i64, u64)>, StoreError> {
        let mut inserted: Vec<(i64, u64)> = Vec::with_capacity(order.len());
        for chunk in fixed_chunks(order) {
            let mut sql = Sql::new(self.backend(), INSERT_EVENTS);
            for (i, seq) in chunk.iter().enumerate() {
                let event = slots.get(seq).ok_or_else(|| {
                    StoreError::Corrupt(format!("sequence number {seq} is not in the batch"))
                })?;
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple(event_values(
                    server,
                    Some(agent),
                    Some((epoch, to_i64(*seq, "sequence number")?)),
                    event,
                    stored_at,
                )?);
            }
            sql.push(" ON CONFLICT (agent_id, epoch, seq) DO NOTHING RETURNING id, seq");
            for row in txn.query_all_raw(sql.build()).await? {
                inserted.push((get(&row, 0)?, to_u64(get(&row, 1)?)));
            }
        }
        inserted.sort_unstable();
        Ok(inserted)
    }

    /// Stores one event that a host without an agent sent to the hub, with its rollups; returns
    /// once it is committed.
    pub async fn insert_direct_event(
        &self,
        server: ServerId,
        event: NewEvent,
    ) -> Result<StoredEvent, StoreError> {
        let stored = self.store_direct_event(server, event).await;
        self.noting(stored)
    }

    async fn store_direct_event(
        &self,
        server: ServerId,
        event: NewEvent,
    ) -> Result<StoredEvent, StoreError> {
        let stored_at = now_ms();
        let mut sql = Sql::new(self.backend(), INSERT_EVENTS);
        sql.tuple(event_values(
            &server.to_string(),
            None,
            None,
            &event,
            stored_at,
        )?)
        .push(" RETURNING id");
        let (txn, gate) = self.begin_writer().await?;
        let row = txn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| StoreError::Corrupt("the insert returned no id".to_owned()))?;
        let id: i64 = get(&row, 0)?;
        if self.backend() == DbBackend::Postgres {
            // The text index's pending range (see `event_text_pg`).
            super::event_text_pg::note_pending(&txn, id, id).await?;
        }
        let stored = StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: None,
            position: None,
            // As stored (milliseconds): see `ingest_prepared`.
            occurred_at: to_time(event.occurred_at.timestamp_millis()),
            stored_at: to_time(stored_at),
            source: event.source,
            body: event.body,
        };
        self.commit_with_rollups(txn, gate, Rollups::of(std::slice::from_ref(&stored)))
            .await?;
        Ok(stored)
    }

    /// The highest sequence number committed for `agent`'s spool `epoch` (0 before the first).
    pub async fn committed_seq(&self, agent: AgentId, epoch: u64) -> Result<u64, StoreError> {
        use sea_orm::EntityTrait as _;
        let row = agent_cursor::Entity::find_by_id((agent.to_string(), to_i64(epoch, "epoch")?))
            .one(&self.db)
            .await?;
        Ok(row.map_or(0, |r| to_u64(r.last_seq)))
    }

    /// Deletes up to `chunk` events that occurred before `cutoff_ms`, oldest first; returns how
    /// many. Small chunks keep each write transaction short, so ingest is never held up for long.
    pub async fn delete_events_before(
        &self,
        cutoff_ms: i64,
        chunk: usize,
    ) -> Result<u64, StoreError> {
        // The bans of the events going away are written first: after a stop they could not be
        // read back from `events` any more.
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE occurred_at < ",
        );
        sql.bind(cutoff_ms)
            .push(" ORDER BY occurred_at LIMIT ")
            .bind(i64::try_from(chunk).unwrap_or(i64::MAX))
            .push(")");
        Ok(self.db.execute_raw(sql.build()).await?.rows_affected())
    }

    /// Drops count buckets that start before `cutoff_ms` and addresses last banned before it.
    /// `cutoff_ms` should be a whole day, so no bucket straddles it. Returns the buckets and
    /// addresses dropped.
    pub async fn prune_rollups_before(&self, cutoff_ms: i64) -> Result<(u64, u64), StoreError> {
        self.flush_rollups().await?;
        let txn = self.db.begin().await?;
        let mut buckets = 0;
        for grain in [Grain::Hour, Grain::Day] {
            let mut sql = Sql::new(
                self.backend(),
                &format!("DELETE FROM {} WHERE bucket < ", grain.table()),
            );
            sql.bind(cutoff_ms);
            buckets += txn.execute_raw(sql.build()).await?.rows_affected();
        }
        // An address's last ban is its latest on any server, so every per-server row of an
        // address going away is older than the cutoff too.
        let mut sql = Sql::new(self.backend(), "DELETE FROM ip_servers WHERE last_seen < ");
        sql.bind(cutoff_ms)
            .push(" AND ip IN (SELECT ip FROM ip_stats WHERE last_seen < ")
            .bind(cutoff_ms)
            .push(")");
        txn.execute_raw(sql.build()).await?;
        let mut sql = Sql::new(self.backend(), "DELETE FROM ip_stats WHERE last_seen < ");
        sql.bind(cutoff_ms);
        let ips = txn.execute_raw(sql.build()).await?.rows_affected();
        if ips > 0 {
            add_total(&txn, DISTINCT_IPS, -to_i64(ips, "count")?).await?;
        }
        txn.commit().await?;
        Ok((buckets, ips))
    }

    /// Sets (or, with `None`, clears) the SHA-256 hex of the server's callback secret. Returns
    /// whether the server exists.
    pub async fn set_callback_secret(
        &self,
        server: ServerId,
        hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut sql = Sql::new(self.backend(), "UPDATE servers SET callback_secret_hash = ");
        sql.bind(hash.map(str::to_owned))
            .push(" WHERE id = ")
            .bind(server.to_string());
        Ok(self.db.execute_raw(sql.build()).await?.rows_affected() == 1)
    }

    /// The server whose callback secret hashes to `hash` (SHA-256 hex), if any.
    pub async fn server_by_callback_secret_hash(
        &self,
        hash: &str,
    ) -> Result<Option<Server>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "SELECT id, callback_secret_hash FROM servers WHERE callback_secret_hash = ",
        );
        sql.bind(hash.to_owned());
        let Some(row) = self.db.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        let id: String = get(&row, 0)?;
        let stored: String = get(&row, 1)?;
        // The lookup went by hash; the comparison that decides is constant-time all the same.
        if !bool::from(stored.as_bytes().ct_eq(hash.as_bytes())) {
            return Ok(None);
        }
        let id =
            ServerId::parse(&id).map_err(|_| StoreError::Corrupt(format!("server id {id:?}")))?;
        self.get_server(id).await
    }
}
