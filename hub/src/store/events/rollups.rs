//! How events are counted: what each stored event adds to the rollups, as pure data. A ban or
//! unban counts once per grain (hour, day), under its server and under the fleet (server `""`),
//! each both for its jail and for all jails (jail `""`); a gap counts under every jail only; the
//! end-to-end probe counts nowhere. A ban also adds one to its (address, server) pair, with the
//! first and last time and the jail of the latest. Writing these to the tables is in
//! `rollup_writes`; reading them back is in `reads`.

use std::collections::{BTreeMap, HashMap};

use super::super::StoreError;
use crate::domain::ServerId;
use crate::domain::events::{EventBody, EventKind, IpOrCidr, StoredEvent};

pub const HOUR_MS: i64 = 3_600_000;

pub const DAY_MS: i64 = 24 * HOUR_MS;

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

    pub(in crate::store) fn table(self) -> &'static str {
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

/// One count read from a rollup table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow<K> {
    pub key: K,
    pub kind: EventKind,
    pub count: u64,
}

/// Bans of one address on one server within a batch.
#[derive(Debug, Clone)]
pub(super) struct IpAgg {
    pub(super) bans: i64,
    pub(super) first: i64,
    pub(super) last: i64,
    pub(super) last_jail: String,
}

impl IpAgg {
    pub(super) fn add(&mut self, other: &IpAgg) {
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
pub(super) type IpServers = HashMap<(IpOrCidr, ServerId), IpAgg, foldhash::fast::RandomState>;

/// What a batch adds to the rollups; the counts keyed in sorted order.
#[derive(Debug, Default)]
pub(super) struct Rollups {
    /// (grain, server or "", jail or "", bucket, kind) → count.
    pub(super) counts: BTreeMap<(Grain, String, String, i64, &'static str), i64>,
    /// (ip, server) → bans.
    pub(super) ip_servers: IpServers,
    /// The highest event id added (0 before the first).
    pub(super) upto: i64,
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
pub struct PendingRollups(pub(super) Rollups);

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
    pub(super) fn of(events: &[StoredEvent]) -> Self {
        let mut rollups = Self::default();
        rollups.add(events);
        rollups
    }

    pub(super) fn add(&mut self, events: &[StoredEvent]) {
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
    pub(super) fn merge_addresses(&mut self, other: Rollups) {
        for (key, agg) in other.ip_servers {
            self.add_address(key, agg);
        }
        self.upto = self.upto.max(other.upto);
    }

    /// Adds `agg` to the bans of an (address, server) pair.
    pub(super) fn add_address(&mut self, key: (IpOrCidr, ServerId), agg: IpAgg) {
        self.ip_servers
            .entry(key)
            .and_modify(|a| a.add(&agg))
            .or_insert(agg);
    }

    /// Takes everything out, leaving empty rollups that keep the highest event id (the pending
    /// rollups' watermark-to-be).
    pub(super) fn take(&mut self) -> Rollups {
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
    pub(super) fn merge(&mut self, mut other: Rollups) {
        for (key, count) in std::mem::take(&mut other.counts) {
            *self.counts.entry(key).or_default() += count;
        }
        self.merge_addresses(other);
    }

    /// Takes out what other agents' batches add to as well: the per-address rollups and the
    /// fleet-wide counts (server ""). The per-server counts stay.
    pub(super) fn take_shared(&mut self) -> Rollups {
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
    pub(super) fn to_body(&self) -> Result<String, StoreError> {
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

    pub(super) fn from_body(text: &str) -> Result<Self, StoreError> {
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
}
