//! Ban events: what a fail2ban host reported (a ban or an unban) or what an agent had to give up (a
//! gap), the filters and cursors that read them back, and the counts the dashboard shows. Every value
//! of these types has passed its rules; nothing here knows HTTP, gRPC or SQL.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use base64::Engine as _;
use chrono::{DateTime, Utc};

pub use banhub_proto::event::{
    BanDuration, GapReason, Logs, MAX_HOSTNAME_BYTES, MAX_LOG_BYTES, MAX_LOG_LINE_BYTES,
    MAX_LOG_LINES, SeqRange, clean_hostname,
};
pub use banhub_proto::rules::{IpOrCidr, JailName};

use super::{AgentId, ServerId};

/// Longest text search accepted, in characters.
pub const MAX_SEARCH_CHARS: usize = 200;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    Ban,
    Unban,
    /// Events an agent lost (its spool overflowed or was damaged); says how many.
    Gap,
}

impl EventKind {
    pub const ALL: [Self; 3] = [Self::Ban, Self::Unban, Self::Gap];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ban => "ban",
            Self::Unban => "unban",
            Self::Gap => "gap",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == raw)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who told the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventSource {
    /// fail2ban's action called the agent's relay.
    Action,
    /// The agent found it comparing fail2ban's ban list with what it had reported.
    Observed,
    /// fail2ban's action called the hub directly (a host without an agent).
    Direct,
}

impl EventSource {
    pub const ALL: [Self; 3] = [Self::Action, Self::Observed, Self::Direct];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Action => "action",
            Self::Observed => "observed",
            Self::Direct => "direct",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

impl fmt::Display for EventSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What fail2ban's action said about a ban or an unban.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanFacts {
    pub ip: IpOrCidr,
    pub jail: JailName,
    /// The reporting host's name as the action saw it, cleaned with [`clean_hostname`]; may be empty.
    pub hostname: String,
    /// Failures that led to the ban (0 when the action did not say).
    pub failures: u32,
    pub logs: Logs,
    /// When fail2ban banned the address, Unix seconds, if the action said.
    pub ban_time: Option<i64>,
    pub ban_duration: Option<BanDuration>,
    /// How many times fail2ban has banned this address (its `bancount`), if the action said.
    pub ban_count: Option<u32>,
}

/// Events an agent gave up, recorded so the loss is never silent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapFacts {
    pub reason: GapReason,
    /// How many ban or unban events were lost.
    pub lost: u64,
    /// The sequence numbers given up, in the agent's epoch.
    pub ranges: Vec<SeqRange>,
}

/// The kind of an event with what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventBody {
    Ban(BanFacts),
    Unban(BanFacts),
    Gap(GapFacts),
}

impl EventBody {
    pub fn kind(&self) -> EventKind {
        match self {
            Self::Ban(_) => EventKind::Ban,
            Self::Unban(_) => EventKind::Unban,
            Self::Gap(_) => EventKind::Gap,
        }
    }

    /// The address, jail and the rest, for a ban or an unban.
    pub fn facts(&self) -> Option<&BanFacts> {
        match self {
            Self::Ban(facts) | Self::Unban(facts) => Some(facts),
            Self::Gap(_) => None,
        }
    }
}

/// An event on its way into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// When it happened: when the agent (or, for a direct callback, the hub) received it, or when the
    /// agent noticed a gap.
    pub occurred_at: DateTime<Utc>,
    pub source: EventSource,
    pub body: EventBody,
}

impl NewEvent {
    pub fn kind(&self) -> EventKind {
        self.body.kind()
    }
}

/// Identifies a stored event. Rising: a later commit on the same database gets a larger id (on
/// PostgreSQL, concurrent transactions may commit slightly out of id order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub i64);

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where an agent's event sits in its spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolPosition {
    pub epoch: u64,
    pub seq: u64,
}

/// An event as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: EventId,
    pub server_id: ServerId,
    /// The agent that reported it; `None` for a direct callback.
    pub agent_id: Option<AgentId>,
    pub position: Option<SpoolPosition>,
    pub occurred_at: DateTime<Utc>,
    pub stored_at: DateTime<Utc>,
    pub source: EventSource,
    pub body: EventBody,
}

impl StoredEvent {
    pub fn kind(&self) -> EventKind {
        self.body.kind()
    }

    /// Whether the end-to-end probe made this event (in the reserved probe jail). Lists, stats and
    /// insights leave such events out unless a filter names that jail.
    pub fn is_probe(&self) -> bool {
        self.body
            .facts()
            .is_some_and(|f| f.jail.as_str() == banhub_proto::rules::PROBE_JAIL)
    }
}

/// A text search in log lines, case-insensitive (ASCII letters on SQLite, all letters on PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchText(String);

/// Why a search text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_SEARCH_CHARS} characters without control characters")]
    Invalid,
}

impl SearchText {
    pub fn parse(raw: &str) -> Result<Self, SearchError> {
        if raw.is_empty() {
            return Err(SearchError::Empty);
        }
        if raw.chars().count() > MAX_SEARCH_CHARS || raw.chars().any(char::is_control) {
            return Err(SearchError::Invalid);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether any of `lines` contains the text, ignoring case.
    pub fn matches(&self, lines: &[String]) -> bool {
        let needle = self.0.to_lowercase();
        lines.iter().any(|l| l.to_lowercase().contains(&needle))
    }
}

/// Which events to read. Empty lists and `None` mean "any", except that the end-to-end probe's
/// events ([`StoredEvent::is_probe`]) are read only when `jail` names the probe jail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub server: Option<ServerId>,
    pub jail: Option<JailName>,
    /// One address, or every address in a network.
    pub ip: Option<IpOrCidr>,
    pub kinds: Vec<EventKind>,
    pub sources: Vec<EventSource>,
    /// Inclusive.
    pub from: Option<DateTime<Utc>>,
    /// Exclusive.
    pub to: Option<DateTime<Utc>>,
    pub text: Option<SearchText>,
}

impl EventFilter {
    /// Whether `event` passes this filter: the same rule the store applies, for the live stream.
    pub fn matches(&self, event: &StoredEvent) -> bool {
        let facts = event.body.facts();
        (self.jail.is_some() || !event.is_probe())
            && self.server.is_none_or(|s| s == event.server_id)
            && (self.kinds.is_empty() || self.kinds.contains(&event.kind()))
            && (self.sources.is_empty() || self.sources.contains(&event.source))
            && self.from.is_none_or(|from| event.occurred_at >= from)
            && self.to.is_none_or(|to| event.occurred_at < to)
            && self
                .jail
                .as_ref()
                .is_none_or(|jail| facts.is_some_and(|f| &f.jail == jail))
            && self
                .ip
                .as_ref()
                .is_none_or(|want| facts.is_some_and(|f| ip_in(&f.ip, want)))
            && self
                .text
                .as_ref()
                .is_none_or(|text| facts.is_some_and(|f| text.matches(f.logs.lines())))
    }
}

/// Whether an event's address (or the start of its network) lies in `want`.
fn ip_in(event_ip: &IpOrCidr, want: &IpOrCidr) -> bool {
    let (lo, hi) = ip_key_range(want);
    let key = ip_key(event_ip);
    lo <= key && key <= hi
}

/// A 16-byte key that orders addresses: IPv4 is mapped into `::ffff:0:0/96`; a network is keyed by
/// its first address.
pub fn ip_key(ip: &IpOrCidr) -> [u8; 16] {
    match ip {
        IpOrCidr::Ip(addr) => addr_key(*addr),
        IpOrCidr::Net(net) => addr_key(net.network()),
    }
}

/// The first and last key an address or network covers.
pub fn ip_key_range(ip: &IpOrCidr) -> ([u8; 16], [u8; 16]) {
    match ip {
        IpOrCidr::Ip(addr) => (addr_key(*addr), addr_key(*addr)),
        IpOrCidr::Net(net) => (addr_key(net.network()), addr_key(net.broadcast())),
    }
}

fn addr_key(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => Ipv6Addr::octets(&v6),
    }
}

/// Where a page of events ends: the next page starts strictly after (older than) this event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub occurred_at_ms: i64,
    pub id: EventId,
}

/// A cursor that is not one this hub handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is not a cursor this hub handed out; pass `nextCursor` from the previous page unchanged")]
pub struct CursorError;

impl Cursor {
    const PREFIX: &'static str = "v1:";

    pub fn after(event: &StoredEvent) -> Self {
        Self {
            occurred_at_ms: event.occurred_at.timestamp_millis(),
            id: event.id,
        }
    }

    /// Opaque text for `nextCursor`.
    pub fn encode(&self) -> String {
        let raw = format!("{}{}:{}", Self::PREFIX, self.occurred_at_ms, self.id.0);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    }

    pub fn decode(text: &str) -> Result<Self, CursorError> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| CursorError)?;
        let raw = String::from_utf8(bytes).map_err(|_| CursorError)?;
        let rest = raw.strip_prefix(Self::PREFIX).ok_or(CursorError)?;
        let (at, id) = rest.split_once(':').ok_or(CursorError)?;
        Ok(Self {
            occurred_at_ms: at.parse().map_err(|_| CursorError)?,
            id: EventId(id.parse().map_err(|_| CursorError)?),
        })
    }
}

/// One page of events, newest first.
#[derive(Debug, Clone)]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    /// Where the next (older) page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// Event counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub bans: u64,
    pub unbans: u64,
    pub gaps: u64,
}

impl Counts {
    pub fn add(&mut self, kind: EventKind, n: u64) {
        match kind {
            EventKind::Ban => self.bans += n,
            EventKind::Unban => self.unbans += n,
            EventKind::Gap => self.gaps += n,
        }
    }

    pub fn total(&self) -> u64 {
        self.bans + self.unbans + self.gaps
    }
}

/// Which counts to read: optionally one server and one jail, over a time range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsQuery {
    pub server: Option<ServerId>,
    pub jail: Option<JailName>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// One bucket of the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesPoint {
    pub start: DateTime<Utc>,
    pub counts: Counts,
}

/// Counts over time and per server and jail, from the rollups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The range actually counted: the asked range widened to whole buckets.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub bucket: chrono::Duration,
    pub series: Vec<SeriesPoint>,
    /// Per server, most events first.
    pub servers: Vec<(ServerId, Counts)>,
    /// Per jail, most events first.
    pub jails: Vec<(String, Counts)>,
    pub totals: Counts,
}

/// What the hub knows about one address across its whole retained history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpSummary {
    pub ip: String,
    pub bans: u64,
    /// On how many servers it was banned.
    pub servers: u64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub last_jail: Option<String>,
    pub last_server: Option<ServerId>,
}

/// One address on one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpOnServer {
    pub server: ServerId,
    pub bans: u64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
}

/// Which insights to compute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsightsQuery {
    pub server: Option<ServerId>,
    pub jail: Option<JailName>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// How many entries per list.
    pub limit: usize,
    /// Details of one address, if asked.
    pub ip: Option<IpOrCidr>,
}

/// Top offenders, jails and servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insights {
    /// The range of `top_jails` and `top_servers` (whole hours).
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Most banned addresses over the retained history (of one server, if asked).
    pub top_ips: Vec<IpSummary>,
    /// Addresses banned on more than one server, most servers first.
    pub repeat_offenders: Vec<IpSummary>,
    pub top_jails: Vec<(String, Counts)>,
    pub top_servers: Vec<(ServerId, Counts)>,
    /// Distinct addresses banned over the retained history.
    pub distinct_ips: u64,
    /// The asked address, if any: its summary and its servers.
    pub ip: Option<(IpSummary, Vec<IpOnServer>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let cursor = Cursor {
            occurred_at_ms: 1_790_000_000_123,
            id: EventId(42),
        };
        assert_eq!(Cursor::decode(&cursor.encode()), Ok(cursor));
        for bad in ["", "x", "djE6MTIz", "!!!", "djI6MTo1"] {
            assert_eq!(Cursor::decode(bad), Err(CursorError), "{bad}");
        }
    }

    #[test]
    fn ip_keys_order_addresses_and_networks() {
        let ip = |s: &str| IpOrCidr::parse(s).expect("valid");
        let net = ip("198.51.100.0/24");
        assert!(ip_in(&ip("198.51.100.7"), &net));
        assert!(!ip_in(&ip("198.51.101.7"), &net));
        assert!(ip_in(&ip("198.51.100.128/25"), &net));
        assert!(!ip_in(&ip("2001:db8::1"), &net));
        assert!(ip_in(&ip("2001:db8::1"), &ip("2001:db8::/32")));
        assert!(ip_key(&ip("10.0.0.1")) < ip_key(&ip("10.0.0.2")));
    }

    #[test]
    fn kinds_and_sources_parse() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        for source in EventSource::ALL {
            assert_eq!(EventSource::parse(source.as_str()), Some(source));
        }
        assert_eq!(EventKind::parse("observed"), None);
    }
}
