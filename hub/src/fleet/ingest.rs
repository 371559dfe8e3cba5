//! Event batches from an agent's spool, turned into domain events. Every field is parsed again here:
//! the agent validated it, but the hub trusts no string that crossed the network.

use banhub_proto::event::clean_hostname_owned;
use banhub_proto::v1::{self as pb, EventKind as PbKind, EventSource as PbSource};
use chrono::{DateTime, Utc};

use crate::domain::events::{
    BanDuration, BanFacts, EventBody, EventSource, GapFacts, GapReason, IpOrCidr, JailName, Logs,
    NewEvent, SeqRange,
};

/// Converts one protocol event; `Err` says why it cannot be stored. The event's strings are moved
/// into the domain event where they pass their rules as they are (nearly always), not copied.
pub fn to_new_event(event: pb::Event) -> Result<(u64, NewEvent), String> {
    let seq = event.seq;
    if seq == 0 {
        return Err("sequence number 0".to_owned());
    }
    let occurred_at = DateTime::<Utc>::from_timestamp_millis(event.received_at_unix_ms)
        .filter(|_| event.received_at_unix_ms > 0)
        .ok_or_else(|| format!("seq {seq}: no receive time"))?;
    let source = match event.source() {
        PbSource::Observed => EventSource::Observed,
        PbSource::Action | PbSource::Unspecified => EventSource::Action,
    };
    let kind = event.kind();
    let body = match kind {
        PbKind::Gap => EventBody::Gap(GapFacts {
            reason: GapReason::parse(&event.gap_reason),
            lost: event.gap_lost,
            ranges: event
                .gap_ranges
                .iter()
                .filter(|r| r.first <= r.last)
                .map(|r| SeqRange {
                    first: r.first,
                    last: r.last,
                })
                .collect(),
        }),
        PbKind::Ban | PbKind::Unban => {
            let pb::Event {
                ip,
                jail,
                hostname,
                failures,
                logs,
                ban_time_unix,
                ban_duration_secs,
                ban_count,
                ..
            } = event;
            let facts = BanFacts {
                ip: IpOrCidr::parse(&ip).map_err(|e| format!("seq {seq}: ip {ip:?} {e}"))?,
                jail: JailName::parse_owned(jail)
                    .map_err(|(e, jail)| format!("seq {seq}: jail {jail:?} {e}"))?,
                hostname: clean_hostname_owned(hostname),
                failures,
                logs: Logs::capped_owned(logs),
                ban_time: ban_time_unix,
                ban_duration: ban_duration_secs.and_then(BanDuration::from_seconds),
                ban_count,
            };
            if kind == PbKind::Ban {
                EventBody::Ban(facts)
            } else {
                EventBody::Unban(facts)
            }
        }
        PbKind::Unspecified => return Err(format!("seq {seq}: no kind")),
    };
    Ok((
        seq,
        NewEvent {
            occurred_at,
            source,
            body,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ban(seq: u64, ip: &str, jail: &str) -> pb::Event {
        pb::Event {
            seq,
            kind: PbKind::Ban.into(),
            ip: ip.to_owned(),
            jail: jail.to_owned(),
            hostname: "web-1\n".to_owned(),
            failures: 3,
            logs: vec!["line one".to_owned(), "bad\u{7}bell".to_owned()],
            ban_time_unix: Some(1_700_000_000),
            ban_duration_secs: Some(-1),
            ban_count: Some(2),
            received_at_unix_ms: 1_700_000_000_123,
            source: PbSource::Action.into(),
            ..pb::Event::default()
        }
    }

    #[test]
    fn converts_and_cleans_a_ban() {
        let (seq, event) = to_new_event(ban(7, "192.0.2.7", "sshd")).expect("valid");
        assert_eq!(seq, 7);
        let EventBody::Ban(facts) = event.body else {
            panic!("not a ban")
        };
        assert_eq!(facts.ip.to_string(), "192.0.2.7");
        assert_eq!(facts.hostname, "web-1");
        assert_eq!(facts.logs.lines(), ["line one", "badbell"]);
        assert_eq!(facts.ban_duration, Some(BanDuration::Permanent));
        assert_eq!(event.source, EventSource::Action);
    }

    #[test]
    fn refuses_what_breaks_the_rules() {
        assert!(to_new_event(ban(1, "not-an-ip", "sshd")).is_err());
        assert!(to_new_event(ban(1, "192.0.2.7", "../etc")).is_err());
        assert!(to_new_event(ban(0, "192.0.2.7", "sshd")).is_err());
        let mut no_time = ban(1, "192.0.2.7", "sshd");
        no_time.received_at_unix_ms = 0;
        assert!(to_new_event(no_time).is_err());
        let mut no_kind = ban(1, "192.0.2.7", "sshd");
        no_kind.kind = PbKind::Unspecified.into();
        assert!(to_new_event(no_kind).is_err());
    }

    #[test]
    fn converts_a_gap() {
        let gap = pb::Event {
            seq: 9,
            kind: PbKind::Gap.into(),
            gap_lost: 4,
            gap_ranges: vec![pb::SeqRange { first: 3, last: 6 }],
            gap_reason: "overflow".to_owned(),
            received_at_unix_ms: 1_700_000_000_000,
            ..pb::Event::default()
        };
        let (_, event) = to_new_event(gap).expect("valid");
        let EventBody::Gap(facts) = event.body else {
            panic!("not a gap")
        };
        assert_eq!(facts.lost, 4);
        assert_eq!(facts.reason, GapReason::Overflow);
        assert_eq!(facts.ranges, vec![SeqRange { first: 3, last: 6 }]);
    }
}
