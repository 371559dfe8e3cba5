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

/// One hour in ms: the smallest bucket.
pub const HOUR_MS: i64 = 3_600_000;

pub const DAY_MS: i64 = 24 * HOUR_MS;

/// The start of the `step`-long bucket (counted from the Unix epoch) holding `ms`.
pub fn bucket_floor(ms: i64, step: i64) -> i64 {
    ms.div_euclid(step) * step
}

/// The end of the `step`-long bucket holding `ms`, or `ms` itself when a bucket starts there.
pub fn bucket_ceil(ms: i64, step: i64) -> i64 {
    let floor = bucket_floor(ms, step);
    if floor == ms { ms } else { floor + step }
}

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
        bucket_floor(ms, self.millis())
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

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::domain::events::{
        BanFacts, EventId, EventSource, GapFacts, GapReason, JailName, Logs,
    };

    const AT: i64 = 1_790_000_123_456;

    fn event(id: i64, server: ServerId, body: EventBody) -> StoredEvent {
        StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: None,
            position: None,
            occurred_at: DateTime::from_timestamp_millis(AT).unwrap_or_default(),
            stored_at: DateTime::from_timestamp_millis(AT).unwrap_or_default(),
            source: EventSource::Action,
            body,
        }
    }

    fn facts(ip: &str, jail: &str) -> BanFacts {
        BanFacts {
            ip: IpOrCidr::parse(ip).expect("an address"),
            jail: JailName::parse(jail).expect("a jail"),
            hostname: String::new(),
            failures: 3,
            logs: Logs::capped(Vec::<String>::new()),
            ban_time: None,
            ban_duration: None,
            ban_count: None,
        }
    }

    fn ban(id: i64, server: ServerId, ip: &str, jail: &str) -> StoredEvent {
        event(id, server, EventBody::Ban(facts(ip, jail)))
    }

    /// The counts of `rollups` under `(grain, server, jail)`, by kind.
    fn count(rollups: &Rollups, grain: Grain, server: &str, jail: &str, kind: EventKind) -> i64 {
        rollups
            .counts
            .iter()
            .filter(|((g, s, j, _, k), _)| {
                *g == grain && s == server && j == jail && *k == kind.as_str()
            })
            .map(|(_, n)| *n)
            .sum()
    }

    #[test]
    fn a_ban_counts_per_grain_under_its_server_and_the_fleet_for_its_jail_and_all_jails() {
        let server = ServerId::new();
        let rollups = Rollups::of(&[ban(7, server, "192.0.2.1", "sshd")]);
        assert_eq!(rollups.counts.len(), 8, "2 grains × 2 servers × 2 jails");
        for grain in [Grain::Hour, Grain::Day] {
            for who in [server.to_string(), String::new()] {
                for jail in ["sshd", ""] {
                    assert_eq!(count(&rollups, grain, &who, jail, EventKind::Ban), 1);
                }
            }
            let bucket = rollups.counts.keys().find(|k| k.0 == grain).map(|k| k.3);
            assert_eq!(bucket, Some(grain.floor(AT)));
        }
        assert_eq!(rollups.ip_servers.len(), 1);
        let agg = rollups.ip_servers.values().next().expect("the address");
        assert_eq!((agg.bans, agg.first, agg.last), (1, AT, AT));
        assert_eq!(rollups.upto, 7);
    }

    #[test]
    fn an_unban_counts_like_a_ban_but_adds_no_address() {
        let server = ServerId::new();
        let unban = event(1, server, EventBody::Unban(facts("192.0.2.1", "sshd")));
        let rollups = Rollups::of(&[unban]);
        assert_eq!(rollups.counts.len(), 8);
        assert_eq!(count(&rollups, Grain::Day, "", "", EventKind::Unban), 1);
        assert!(rollups.ip_servers.is_empty());
    }

    #[test]
    fn a_gap_counts_under_all_jails_only() {
        let server = ServerId::new();
        let gap = event(
            2,
            server,
            EventBody::Gap(GapFacts {
                reason: GapReason::Overflow,
                lost: 10,
                ranges: Vec::new(),
            }),
        );
        let rollups = Rollups::of(&[gap]);
        assert_eq!(
            rollups.counts.len(),
            4,
            "2 grains × 2 servers, jail \"\" only"
        );
        assert_eq!(count(&rollups, Grain::Hour, "", "", EventKind::Gap), 1);
    }

    #[test]
    fn the_probe_counts_nowhere_but_moves_the_highest_id() {
        let server = ServerId::new();
        let probe = ban(9, server, "192.0.2.1", banhub_proto::rules::PROBE_JAIL);
        let rollups = Rollups::of(&[probe]);
        assert!(rollups.counts.is_empty());
        assert!(rollups.ip_servers.is_empty());
        assert_eq!(rollups.upto, 9);
    }

    #[test]
    fn bans_of_one_address_add_up_with_the_jail_of_the_latest() {
        let server = ServerId::new();
        let mut rollups = Rollups::of(&[ban(1, server, "192.0.2.1", "sshd")]);
        let mut later = ban(2, server, "192.0.2.1", "nginx");
        later.occurred_at = DateTime::from_timestamp_millis(AT + 1_000).unwrap_or_default();
        rollups.merge(Rollups::of(&[later]));
        let agg = rollups.ip_servers.values().next().expect("the address");
        assert_eq!(rollups.ip_servers.len(), 1);
        assert_eq!((agg.bans, agg.first, agg.last), (2, AT, AT + 1_000));
        assert_eq!(agg.last_jail, "nginx");
        assert_eq!(count(&rollups, Grain::Hour, "", "", EventKind::Ban), 2);
        assert_eq!(rollups.upto, 2);
    }

    #[test]
    fn the_shared_part_is_the_fleet_and_the_addresses() {
        let server = ServerId::new();
        let mut own = Rollups::of(&[ban(1, server, "192.0.2.1", "sshd")]);
        let shared = own.take_shared();
        assert!(own.counts.keys().all(|k| k.1 == server.to_string()));
        assert!(own.ip_servers.is_empty());
        assert!(shared.counts.keys().all(|k| k.1.is_empty()));
        assert_eq!((own.counts.len(), shared.counts.len()), (4, 4));
        assert_eq!(shared.ip_servers.len(), 1);
    }

    #[test]
    fn a_pending_row_reads_back_as_written() {
        let server = ServerId::new();
        let rollups = Rollups::of(&[
            ban(1, server, "192.0.2.1", "sshd"),
            ban(2, server, "2001:db8::/64", "sshd"),
        ]);
        let back = Rollups::from_body(&rollups.to_body().expect("a body")).expect("parsed");
        assert_eq!(back.counts, rollups.counts);
        assert_eq!(back.ip_servers.len(), 2);
        for (key, agg) in &rollups.ip_servers {
            let read = back.ip_servers.get(key).expect("the pair");
            assert_eq!(
                (read.bans, read.first, read.last),
                (agg.bans, agg.first, agg.last)
            );
            assert_eq!(read.last_jail, agg.last_jail);
        }
        assert!(
            Rollups::from_body("{\"c\": [[false, \"\", \"\", 0, \"nope\", 1]], \"a\": []}")
                .is_err()
        );
    }

    #[test]
    fn buckets_round_to_their_step() {
        assert_eq!(bucket_floor(5 * HOUR_MS + 1, HOUR_MS), 5 * HOUR_MS);
        assert_eq!(bucket_floor(-1, HOUR_MS), -HOUR_MS);
        assert_eq!(bucket_ceil(5 * HOUR_MS + 1, HOUR_MS), 6 * HOUR_MS);
        assert_eq!(bucket_ceil(5 * HOUR_MS, HOUR_MS), 5 * HOUR_MS);
        assert_eq!(Grain::Day.floor(DAY_MS + 5), DAY_MS);
    }
}
