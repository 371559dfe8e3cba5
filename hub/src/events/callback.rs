//! Turns the body of a direct callback (`POST /api/ban`, `POST /api/unban`) into an event. The body
//! and its checks are the agent relay's, defined once in [`banhub_proto::event::Callback`]; what the
//! hub adds is the receive time and [`EventSource::Direct`]. `serverId` in the body is ignored: the
//! server is the one whose secret was sent.

use banhub_proto::event::Callback;
pub use banhub_proto::event::CallbackError;
use chrono::{DateTime, Utc};

use crate::domain::events::{BanFacts, EventBody, EventKind, EventSource, NewEvent};

/// Parses a callback body into a ban or unban received `now`.
pub fn parse(kind: EventKind, body: &[u8], now: DateTime<Utc>) -> Result<NewEvent, CallbackError> {
    let callback = Callback::parse(body)?;
    let facts = BanFacts {
        ip: callback.ip,
        jail: callback.jail,
        hostname: callback.hostname.unwrap_or_default(),
        failures: callback.failures,
        logs: callback.logs,
        ban_time: callback.ban_time,
        ban_duration: callback.ban_duration,
        ban_count: callback.ban_count,
    };
    let body = match kind {
        EventKind::Unban => EventBody::Unban(facts),
        EventKind::Ban | EventKind::Gap => EventBody::Ban(facts),
    };
    Ok(NewEvent {
        occurred_at: now,
        source: EventSource::Direct,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_becomes_a_direct_event_of_its_kind() {
        let now = Utc::now();
        let body =
            br#"{"serverId":"x","ip":"192.0.2.7","jail":"sshd","logs":"a\nb","bantime":"-1"}"#;
        let event = parse(EventKind::Unban, body, now).expect("valid");
        assert_eq!(event.occurred_at, now);
        assert_eq!(event.source, EventSource::Direct);
        let EventBody::Unban(facts) = event.body else {
            panic!("not an unban: {event:?}");
        };
        assert_eq!(facts.ip.to_string(), "192.0.2.7");
        assert_eq!(facts.hostname, "");
        assert_eq!(facts.logs.lines(), ["a", "b"]);
        assert_eq!(
            facts.ban_duration,
            Some(banhub_proto::event::BanDuration::Permanent)
        );
        assert!(matches!(
            parse(EventKind::Ban, br#"{"ip":"127.0.0.1","jail":"sshd"}"#, now),
            Err(CallbackError::Field { field: "ip", .. })
        ));
    }
}
