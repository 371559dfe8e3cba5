//! What a spool frame's payload holds: one [`Event`], in one of two versioned encodings told apart
//! by the payload's first byte.
//!
//! * `{`: JSON (serde's form of [`Event`]). Every record of agents up to 0.1 (Nov 2026) is JSON,
//!   and gap records still are: they are rare, and the store recognises a gap by its JSON prefix
//!   without decoding it.
//! * [`BINARY_V1`]: a ban or unban, packed: a few length-prefixed copies, where JSON would escape
//!   every log line of every ban.
//!
//! ```text
//! binary_v1 = 0x01 kind:u8 source:u8 flags:u8 received_at_ms:i64 failures:u32
//!             [ban_time:i64] [ban_duration:i64] [ban_count:u32]     (present as flags say)
//!             ip jail:str hostname:str lines:u16 line:str*
//! ip        = 0x04 octets:4 | 0x06 octets:16 | 0x44 octets:4 prefix:u8 | 0x66 octets:16 prefix:u8
//! str       = len:u16 utf-8 bytes                                   (integers little endian)
//! kind      = 0 ban, 1 unban          source = 0 action, 1 observed
//! flags     = bit 0 ban_time, bit 1 ban_duration, bit 2 ban_count, bit 3 logs truncated
//! ```
//!
//! Either way every field is parsed with the same rules on the way back in (address, jail name,
//! host name cleaning, log caps, ban duration), so a record edited on disk cannot smuggle in what a
//! callback could not. A reader must know every encoding ever written; an unknown first byte is an
//! unreadable record.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use banhub_proto::rules::IpOrCidr;
use ipnet::IpNet;

use super::event::{BanDuration, BanEvent, Event, JailName, Logs, Source, clean_hostname};

/// First byte of a JSON record (every JSON document serde writes for an [`Event`] is an object).
const JSON: u8 = b'{';
/// First byte of a binary ban or unban record, version 1.
pub const BINARY_V1: u8 = 0x01;

const KIND_BAN: u8 = 0;
const KIND_UNBAN: u8 = 1;
const SOURCE_ACTION: u8 = 0;
const SOURCE_OBSERVED: u8 = 1;
const HAS_BAN_TIME: u8 = 1;
const HAS_BAN_DURATION: u8 = 1 << 1;
const HAS_BAN_COUNT: u8 = 1 << 2;
const LOGS_TRUNCATED: u8 = 1 << 3;
const KNOWN_FLAGS: u8 = HAS_BAN_TIME | HAS_BAN_DURATION | HAS_BAN_COUNT | LOGS_TRUNCATED;
const IP_V4: u8 = 4;
const IP_V6: u8 = 6;
const NET_V4: u8 = 0x44;
const NET_V6: u8 = 0x66;

/// Why a payload is not an event.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("JSON record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("binary record: {0}")]
    Binary(&'static str),
    #[error("unknown record encoding {0:#04x}")]
    UnknownEncoding(u8),
    #[error("empty record")]
    Empty,
}

/// Appends the payload of `event` to `out`: binary for bans and unbans, JSON for gaps (and for a
/// ban whose strings would not fit the binary form's 16-bit lengths, which the caps rule out).
pub fn encode(event: &Event, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
    let start = out.len();
    let encoded = match event {
        Event::Ban(ban) => encode_binary(KIND_BAN, ban, out),
        Event::Unban(ban) => encode_binary(KIND_UNBAN, ban, out),
        Event::Gap(_) => None,
    };
    if encoded.is_none() {
        out.truncate(start);
        serde_json::to_writer(&mut *out, event)?;
    }
    Ok(())
}

fn encode_binary(kind: u8, ban: &BanEvent, out: &mut Vec<u8>) -> Option<()> {
    let flag = |set: bool, bit: u8| if set { bit } else { 0 };
    let flags = flag(ban.ban_time.is_some(), HAS_BAN_TIME)
        | flag(ban.ban_duration.is_some(), HAS_BAN_DURATION)
        | flag(ban.ban_count.is_some(), HAS_BAN_COUNT)
        | flag(ban.logs.truncated(), LOGS_TRUNCATED);
    let source = match ban.source {
        Source::Action => SOURCE_ACTION,
        Source::Observed => SOURCE_OBSERVED,
    };
    out.extend_from_slice(&[BINARY_V1, kind, source, flags]);
    out.extend_from_slice(&ban.received_at_ms.to_le_bytes());
    out.extend_from_slice(&ban.failures.to_le_bytes());
    if let Some(time) = ban.ban_time {
        out.extend_from_slice(&time.to_le_bytes());
    }
    if let Some(duration) = ban.ban_duration {
        out.extend_from_slice(&duration.as_seconds().to_le_bytes());
    }
    if let Some(count) = ban.ban_count {
        out.extend_from_slice(&count.to_le_bytes());
    }
    put_ip(out, &ban.ip);
    put_str(out, ban.jail.as_str())?;
    put_str(out, &ban.hostname)?;
    let lines = ban.logs.lines();
    out.extend_from_slice(&u16::try_from(lines.len()).ok()?.to_le_bytes());
    for line in lines {
        put_str(out, line)?;
    }
    Some(())
}

/// The address as its octets, cheaper to write and read than its text.
fn put_ip(out: &mut Vec<u8>, ip: &IpOrCidr) {
    match ip {
        IpOrCidr::Ip(IpAddr::V4(v4)) => {
            out.push(IP_V4);
            out.extend_from_slice(&v4.octets());
        }
        IpOrCidr::Ip(IpAddr::V6(v6)) => {
            out.push(IP_V6);
            out.extend_from_slice(&v6.octets());
        }
        IpOrCidr::Net(IpNet::V4(net)) => {
            out.push(NET_V4);
            out.extend_from_slice(&net.addr().octets());
            out.push(net.prefix_len());
        }
        IpOrCidr::Net(IpNet::V6(net)) => {
            out.push(NET_V6);
            out.extend_from_slice(&net.addr().octets());
            out.push(net.prefix_len());
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Option<()> {
    out.extend_from_slice(&u16::try_from(s.len()).ok()?.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Some(())
}

/// Reads a payload written by [`encode`] (or by an older agent).
pub fn decode(payload: &[u8]) -> Result<Event, DecodeError> {
    match payload.first() {
        None => Err(DecodeError::Empty),
        Some(&JSON) => Ok(serde_json::from_slice(payload)?),
        Some(&BINARY_V1) => decode_binary(&payload[1..]).map_err(DecodeError::Binary),
        Some(&other) => Err(DecodeError::UnknownEncoding(other)),
    }
}

/// Whether a payload is a gap record, without decoding it. Serde writes an internally tagged
/// enum's tag first, so the JSON of a gap starts with exactly these bytes; binary records are
/// never gaps.
pub fn is_gap(payload: &[u8]) -> bool {
    payload.starts_with(br#"{"kind":"gap""#)
}

fn decode_binary(bytes: &[u8]) -> Result<Event, &'static str> {
    let mut r = Reader(bytes);
    let [kind, source, flags] = r.array()?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err("unknown flags");
    }
    let source = match source {
        SOURCE_ACTION => Source::Action,
        SOURCE_OBSERVED => Source::Observed,
        _ => return Err("unknown source"),
    };
    let received_at_ms = i64::from_le_bytes(r.array()?);
    let failures = u32::from_le_bytes(r.array()?);
    let ban_time = (flags & HAS_BAN_TIME != 0)
        .then(|| r.array().map(i64::from_le_bytes))
        .transpose()?;
    let ban_duration = (flags & HAS_BAN_DURATION != 0)
        .then(|| {
            let seconds = i64::from_le_bytes(r.array()?);
            BanDuration::from_seconds(seconds).ok_or("ban duration out of range")
        })
        .transpose()?;
    let ban_count = (flags & HAS_BAN_COUNT != 0)
        .then(|| r.array().map(u32::from_le_bytes))
        .transpose()?;
    let ip = r.ip()?;
    let jail = JailName::parse(r.str()?).map_err(|_| "jail name breaks the rule")?;
    let hostname = clean_hostname(r.str()?);
    let count = u16::from_le_bytes(r.array()?);
    let mut lines = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        lines.push(r.str()?);
    }
    if !r.0.is_empty() {
        return Err("bytes after the record");
    }
    // Capped again, as JSON records are (see `Logs`'s `Deserialize`).
    let mut logs = Logs::capped(lines);
    if flags & LOGS_TRUNCATED != 0 {
        logs = logs.with_truncated();
    }
    let ban = BanEvent {
        ip,
        jail,
        hostname,
        failures,
        logs,
        ban_time,
        ban_duration,
        ban_count,
        received_at_ms,
        source,
    };
    match kind {
        KIND_BAN => Ok(Event::Ban(ban)),
        KIND_UNBAN => Ok(Event::Unban(ban)),
        _ => Err("unknown kind"),
    }
}

/// The unread rest of a binary record.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("cut short");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// An address, through the shared rule: rebuilt, written as text and parsed like a
    /// callback's (only a backlog is read back, so the detour costs little).
    fn ip(&mut self) -> Result<IpOrCidr, &'static str> {
        let text = match self.array::<1>()?[0] {
            IP_V4 => Ipv4Addr::from(self.array::<4>()?).to_string(),
            IP_V6 => Ipv6Addr::from(self.array::<16>()?).to_string(),
            NET_V4 => {
                let addr = Ipv4Addr::from(self.array::<4>()?);
                format!("{addr}/{}", self.array::<1>()?[0])
            }
            NET_V6 => {
                let addr = Ipv6Addr::from(self.array::<16>()?);
                format!("{addr}/{}", self.array::<1>()?[0])
            }
            _ => return Err("unknown address family"),
        };
        IpOrCidr::parse(&text).map_err(|_| "address breaks the rule")
    }

    fn str(&mut self) -> Result<&'a str, &'static str> {
        let len = u16::from_le_bytes(self.array()?);
        std::str::from_utf8(self.take(usize::from(len))?).map_err(|_| "text is not UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use banhub_proto::event::{GapReason, SeqRange};

    use super::*;
    use crate::spool::event::GapEvent;

    fn ban(ip: &str, full: bool) -> BanEvent {
        BanEvent {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse("nginx-http-auth").expect("jail"),
            hostname: if full {
                "wéb-1".to_owned()
            } else {
                String::new()
            },
            failures: if full { u32::MAX } else { 0 },
            logs: if full {
                Logs::capped((0..60).map(|i| format!("line {i} \"quoted\" é\ttab")))
            } else {
                Logs::default()
            },
            ban_time: full.then_some(1_790_000_000),
            ban_duration: full.then_some(BanDuration::Permanent),
            ban_count: full.then_some(7),
            received_at_ms: if full { i64::MIN } else { 1 },
            source: if full {
                Source::Observed
            } else {
                Source::Action
            },
        }
    }

    fn events() -> Vec<Event> {
        vec![
            Event::Ban(ban("192.0.2.7", true)),
            Event::Unban(ban("2001:db8::/48", false)),
            Event::Ban(BanEvent {
                ban_duration: Some(BanDuration::Seconds(600)),
                ..ban("198.51.100.0/24", false)
            }),
            Event::Unban(ban("2001:db8::17", false)),
            Event::Gap(GapEvent {
                reason: GapReason::Overflow,
                ranges: vec![SeqRange { first: 3, last: 9 }],
                lost: 7,
                detected_at_ms: 5,
                oldest_received_at_ms: Some(1),
                newest_received_at_ms: None,
            }),
        ]
    }

    fn encoded(event: &Event) -> Vec<u8> {
        let mut out = Vec::new();
        encode(event, &mut out).expect("encode");
        out
    }

    #[test]
    fn bans_are_binary_gaps_json_and_both_round_trip() {
        for event in events() {
            let payload = encoded(&event);
            let is_gap_event = matches!(event, Event::Gap(_));
            assert_eq!(payload[0], if is_gap_event { JSON } else { BINARY_V1 });
            assert_eq!(is_gap(&payload), is_gap_event);
            assert_eq!(decode(&payload).expect("decode"), event);
            // Appending leaves what the buffer held before alone.
            let mut out = b"prefix".to_vec();
            encode(&event, &mut out).expect("encode");
            assert_eq!(&out[6..], &payload[..]);
        }
        let full = Event::Ban(ban("192.0.2.7", true));
        let json = serde_json::to_vec(&full).expect("json");
        assert!(encoded(&full).len() < json.len());
    }

    #[test]
    fn json_records_of_older_agents_still_read() {
        for event in events() {
            let json = serde_json::to_vec(&event).expect("json");
            assert_eq!(decode(&json).expect("decode"), event);
            assert_eq!(is_gap(&json), matches!(event, Event::Gap(_)));
        }
        // A record exactly as an older agent wrote it, not re-derived from today's types.
        let old = br#"{"kind":"unban","ip":"203.0.113.9","jail":"sshd","hostname":"web-2","failures":5,"logs":{"lines":["Failed password for root"]},"banTime":1790000000,"banDuration":-1,"receivedAtMs":1790000000123,"source":"action"}"#;
        let Event::Unban(unban) = decode(old).expect("decode") else {
            panic!("not an unban");
        };
        assert_eq!(unban.ip.to_string(), "203.0.113.9");
        assert_eq!(unban.ban_duration, Some(BanDuration::Permanent));
        assert_eq!(unban.ban_count, None);
        assert_eq!(unban.logs.lines(), ["Failed password for root"]);
    }

    #[test]
    fn damaged_binary_records_are_errors_not_panics() {
        let payload = encoded(&Event::Ban(ban("192.0.2.7", true)));
        for cut in 0..payload.len() {
            assert!(decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        // Flipped bytes either fail or still read as an event that passes every rule.
        for at in 0..payload.len() {
            let mut flipped = payload.clone();
            flipped[at] ^= 0x41;
            if let Ok(Event::Ban(b) | Event::Unban(b)) = decode(&flipped) {
                assert!(b.logs.lines().len() <= crate::spool::event::MAX_LOG_LINES);
                assert_eq!(b.hostname, clean_hostname(&b.hostname));
            }
        }
        assert!(matches!(
            decode(&[0x02, 0]),
            Err(DecodeError::UnknownEncoding(2))
        ));
        assert!(matches!(decode(&[]), Err(DecodeError::Empty)));
    }

    #[test]
    fn binary_records_go_through_the_rules() {
        // A hand-made record with an address the rules refuse, a dirty host name and too many
        // lines, as an edit on disk could leave it.
        let mut raw = vec![BINARY_V1, KIND_BAN, SOURCE_ACTION, 0];
        raw.extend_from_slice(&1i64.to_le_bytes());
        raw.extend_from_slice(&0u32.to_le_bytes());
        let with = |ip: &[u8]| {
            let mut r = raw.clone();
            r.extend_from_slice(ip);
            for s in ["sshd", "h\u{1b}ost"] {
                put_str(&mut r, s).expect("fits");
            }
            r.extend_from_slice(&60u16.to_le_bytes());
            for i in 0..60 {
                put_str(&mut r, &format!("l{i}\u{7}")).expect("fits");
            }
            r
        };
        assert!(decode(&with(&[IP_V4, 127, 0, 0, 1])).is_err());
        // Host bits set, and a prefix longer than the address: refused as a callback's would be.
        assert!(decode(&with(&[NET_V4, 192, 0, 2, 1, 24])).is_err());
        assert!(decode(&with(&[NET_V4, 192, 0, 2, 0, 33])).is_err());
        assert!(decode(&with(&[9, 192, 0, 2, 1])).is_err());
        // A /32 is the address itself, as `IpOrCidr::parse` has it.
        let Event::Ban(b) = decode(&with(&[NET_V4, 192, 0, 2, 1, 32])).expect("decode") else {
            panic!("not a ban");
        };
        assert_eq!(b.ip, IpOrCidr::parse("192.0.2.1").expect("ip"));
        let Event::Ban(b) = decode(&with(&[IP_V4, 192, 0, 2, 1])).expect("decode") else {
            panic!("not a ban");
        };
        assert_eq!(b.hostname, "host");
        assert_eq!(b.logs.lines().len(), crate::spool::event::MAX_LOG_LINES);
        assert_eq!(b.logs.lines()[0], "l10");
        assert!(b.logs.truncated());
    }
}
