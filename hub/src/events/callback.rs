//! Reads the body of a direct callback (`POST /api/ban`, `POST /api/unban`): the spec's fields
//! (`serverId, ip, jail, hostname, failures, logs`) plus the ban time, duration and count.
//!
//! Lenient in form, strict in content, like the agent's relay. A fail2ban action fills a JSON
//! template with whatever its tags expand to, so numbers may come as numbers or numeric strings,
//! `logs` as one string or a list, and the time, duration and count under fail2ban's tag names
//! (`time`, `bantime`, `bancount`) or ours (`banTime`, `banDuration`, `banCount`). But the address
//! and jail must pass the shared rules and anything present must make sense, or the callback is
//! refused naming the field. `serverId` is ignored: the server is the one whose secret was sent.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::domain::events::{
    BanDuration, BanFacts, EventBody, EventKind, EventSource, IpOrCidr, JailName, Logs, NewEvent,
    clean_hostname,
};

/// Why a callback body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    #[error("the body is not a JSON object: {0}")]
    NotJson(String),
    #[error("{reason}")]
    Field { field: &'static str, reason: String },
}

fn field(field: &'static str, reason: impl Into<String>) -> CallbackError {
    CallbackError::Field {
        field,
        reason: reason.into(),
    }
}

/// Parses a callback body into a ban or unban received `now`.
pub fn parse(kind: EventKind, body: &[u8], now: DateTime<Utc>) -> Result<NewEvent, CallbackError> {
    let object: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| CallbackError::NotJson(e.to_string()))?;
    let get = |name: &str| object.get(name).filter(|v| !v.is_null());

    let ip_text = text(get("ip"), "ip")?;
    let ip =
        IpOrCidr::parse(ip_text.trim()).map_err(|e| field("ip", format!("{ip_text:?} {e}")))?;
    let jail_text = text(get("jail"), "jail")?;
    let jail = JailName::parse(jail_text.trim())
        .map_err(|e| field("jail", format!("{jail_text:?} {e}")))?;
    let hostname = match get("hostname") {
        None => String::new(),
        Some(Value::String(s)) => clean_hostname(s),
        Some(_) => return Err(field("hostname", "must be a string")),
    };
    let failures = number(get("failures"), "failures")?
        .map(|n| whole(n, "failures"))
        .transpose()?
        .unwrap_or(0);
    let logs = logs(get("logs"))?;
    let ban_time = first_of(&get, ["banTime", "time"], unix_seconds)?;
    let ban_duration = first_of(&get, ["banDuration", "bantime"], duration)?;
    let ban_count = first_of(&get, ["banCount", "bancount"], whole)?;
    let facts = BanFacts {
        ip,
        jail,
        hostname,
        failures,
        logs,
        ban_time,
        ban_duration,
        ban_count,
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

/// The value under the first name present, converted; our name wins over fail2ban's tag name.
fn first_of<'a, T>(
    get: &impl Fn(&str) -> Option<&'a Value>,
    names: [&'static str; 2],
    convert: fn(f64, &'static str) -> Result<T, CallbackError>,
) -> Result<Option<T>, CallbackError> {
    for name in names {
        if let Some(n) = number(get(name), name)? {
            return convert(n, name).map(Some);
        }
    }
    Ok(None)
}

fn text<'a>(value: Option<&'a Value>, name: &'static str) -> Result<&'a str, CallbackError> {
    match value {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(field(name, "must be a string")),
        None => Err(field(name, "is required")),
    }
}

/// A JSON number or a numeric string; `None` when absent, null or an empty string (a tag that
/// expanded to nothing).
fn number(value: Option<&Value>, name: &'static str) -> Result<Option<f64>, CallbackError> {
    let parsed = match value {
        None => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match parsed {
        Some(n) if n.is_finite() => Ok(Some(n)),
        _ => Err(field(name, "must be a number or a numeric string")),
    }
}

/// A whole number from 0 to `u32::MAX`.
fn whole(n: f64, name: &'static str) -> Result<u32, CallbackError> {
    if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(field(
            name,
            format!("must be a whole number from 0 to {}", u32::MAX),
        ));
    }
    // Whole and in range, so exact.
    Ok(n as u32)
}

/// Unix seconds from 1970 to 9999 (a larger number is milliseconds by mistake); fail2ban's `<time>`
/// has a fraction, which is dropped.
fn unix_seconds(n: f64, name: &'static str) -> Result<i64, CallbackError> {
    if !(0.0..=253_402_300_799.0).contains(&n) {
        return Err(field(name, "must be Unix seconds between 1970 and 9999"));
    }
    Ok(n.trunc() as i64)
}

/// Whole seconds, or `-1` for a permanent ban.
fn duration(n: f64, name: &'static str) -> Result<BanDuration, CallbackError> {
    let refuse = || field(name, "must be whole seconds, or -1 for a permanent ban");
    if n.fract() != 0.0 || !(-1.0..=9.0e15).contains(&n) {
        return Err(refuse());
    }
    BanDuration::from_seconds(n as i64).ok_or_else(refuse)
}

/// `logs` as one string (a line per match) or a list of strings.
fn logs(value: Option<&Value>) -> Result<Logs, CallbackError> {
    match value {
        None => Ok(Logs::default()),
        Some(Value::String(text)) => Ok(Logs::from_text(text)),
        Some(Value::Array(items)) => {
            let mut lines = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(text) = item else {
                    return Err(field("logs", "must be a string or a list of strings"));
                };
                lines.extend(text.lines());
            }
            Ok(Logs::capped(lines))
        }
        Some(_) => Err(field("logs", "must be a string or a list of strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> BanFacts {
        match parse(EventKind::Ban, body.as_bytes(), Utc::now()) {
            Ok(NewEvent {
                body: EventBody::Ban(facts),
                source: EventSource::Direct,
                ..
            }) => facts,
            other => panic!("{body}: {other:?}"),
        }
    }

    fn refused(body: &str, want: Option<&str>) {
        let err = parse(EventKind::Ban, body.as_bytes(), Utc::now()).expect_err(body);
        let got = match &err {
            CallbackError::Field { field, .. } => Some(*field),
            CallbackError::NotJson(_) => None,
        };
        assert_eq!(got, want, "{body}: {err}");
    }

    #[test]
    fn spec_fields_and_extras() {
        let f = ok(
            r#"{"serverId":"x","ip":"192.0.2.7","jail":"sshd","hostname":"web-1",
            "failures":3,"logs":["a","b"],"banTime":1790000000,"banDuration":600,"banCount":2}"#,
        );
        assert_eq!(f.ip.to_string(), "192.0.2.7");
        assert_eq!(f.jail.as_str(), "sshd");
        assert_eq!(f.hostname, "web-1");
        assert_eq!(f.failures, 3);
        assert_eq!(f.logs.lines(), ["a", "b"]);
        assert_eq!(f.ban_time, Some(1_790_000_000));
        assert_eq!(f.ban_duration, Some(BanDuration::Seconds(600)));
        assert_eq!(f.ban_count, Some(2));
    }

    #[test]
    fn fail2ban_tag_values() {
        let f = ok(
            r#"{"ip":"2001:db8::1","jail":"nginx-http-auth","failures":"5",
            "logs":"one\ntwo","time":"1790000000.81","bantime":"-1","bancount":"1","serverId":17}"#,
        );
        assert_eq!(f.failures, 5);
        assert_eq!(f.logs.lines(), ["one", "two"]);
        assert_eq!(f.ban_time, Some(1_790_000_000));
        assert_eq!(f.ban_duration, Some(BanDuration::Permanent));
        assert_eq!(f.ban_count, Some(1));
        let f = ok(r#"{"ip":" 198.51.100.0/24 ","jail":"sshd","failures":"","logs":null}"#);
        assert_eq!(f.ip.to_string(), "198.51.100.0/24");
        assert_eq!((f.failures, f.ban_time), (0, None));
        let f = ok(r#"{"ip":"192.0.2.1","jail":"j","time":5,"banTime":6}"#);
        assert_eq!(f.ban_time, Some(6));
    }

    #[test]
    fn bad_input_names_the_field() {
        refused("not json", None);
        refused("[1]", None);
        refused(r#"{"jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"not-an-ip","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"127.0.0.1","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":7,"jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"192.0.2.1"}"#, Some("jail"));
        refused(r#"{"ip":"192.0.2.1","jail":"../etc"}"#, Some("jail"));
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","failures":-1}"#,
            Some("failures"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","failures":"x"}"#,
            Some("failures"),
        );
        refused(r#"{"ip":"192.0.2.1","jail":"j","logs":[1]}"#, Some("logs"));
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","hostname":1}"#,
            Some("hostname"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","banTime":1790000000000}"#,
            Some("banTime"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","bantime":-2}"#,
            Some("bantime"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","banCount":true}"#,
            Some("banCount"),
        );
    }
}
