//! Reads the callback body of `POST /api/ban` and `/api/unban`: the spec's fields (`serverId, ip,
//! jail, hostname, failures, logs`) plus the ban time, duration and count.
//!
//! Lenient in form, strict in content. fail2ban actions fill a JSON template with whatever its tags
//! expand to, so numbers may arrive as numbers or as numeric strings, `logs` as one string or a list,
//! and the time and duration under either of two names. But the address and the jail must pass the
//! shared rules, and anything present must make sense, or the whole callback is refused with the
//! offending field named.

use banhub_proto::rules::IpOrCidr;
use serde_json::{Map, Value};

use crate::spool::{BanDuration, JailName, Logs, clean_hostname};

/// A callback that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    pub ip: IpOrCidr,
    pub jail: JailName,
    /// As reported; `None` when absent or empty after cleaning.
    pub hostname: Option<String>,
    pub failures: u32,
    pub logs: Logs,
    /// Unix seconds (`banTime`, or `time` as fail2ban's `<time>` tag calls it).
    pub ban_time: Option<i64>,
    /// `banDuration`, or `bantime` as fail2ban's `<bantime>` tag calls it.
    pub ban_duration: Option<BanDuration>,
    /// `banCount`, or `bancount` as fail2ban's `<bancount>` tag calls it.
    pub ban_count: Option<u32>,
}

/// Why a callback body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("the body is not a JSON object: {0}")]
    NotJson(String),
    #[error("field `{field}` {reason}")]
    Field { field: &'static str, reason: String },
}

impl PayloadError {
    /// The field to name in the problem response, if the error is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Field { field, .. } => Some(field),
            Self::NotJson(_) => None,
        }
    }
}

/// Parses and checks a callback body. `serverId` and unknown fields are ignored: the agent knows
/// which server it is, whatever the body claims.
pub fn parse(body: &[u8]) -> Result<Callback, PayloadError> {
    let object: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| PayloadError::NotJson(e.to_string()))?;
    let get = |name: &str| object.get(name).filter(|v| !v.is_null());

    let ip_text = required_str(get("ip"), "ip")?;
    let ip =
        IpOrCidr::parse(ip_text.trim()).map_err(|e| field("ip", format!("{ip_text:?} {e}")))?;
    let jail_text = required_str(get("jail"), "jail")?;
    let jail = JailName::parse(jail_text.trim())
        .map_err(|e| field("jail", format!("{jail_text:?} {e}")))?;
    let hostname = match get("hostname") {
        None => None,
        Some(Value::String(s)) => Some(clean_hostname(s)).filter(|h| !h.is_empty()),
        Some(_) => return Err(field("hostname", "must be a string")),
    };
    let failures = number(get("failures"), "failures")?
        .map(|n| count(n, "failures"))
        .transpose()?
        .unwrap_or(0);
    let logs = logs(get("logs"))?;
    let ban_time = match number(get("banTime"), "banTime")? {
        Some(n) => Some(unix_seconds(n, "banTime")?),
        None => number(get("time"), "time")?
            .map(|n| unix_seconds(n, "time"))
            .transpose()?,
    };
    let ban_duration = match number(get("banDuration"), "banDuration")? {
        Some(n) => Some(duration(n, "banDuration")?),
        None => number(get("bantime"), "bantime")?
            .map(|n| duration(n, "bantime"))
            .transpose()?,
    };
    let ban_count = match number(get("banCount"), "banCount")? {
        Some(n) => Some(count(n, "banCount")?),
        None => number(get("bancount"), "bancount")?
            .map(|n| count(n, "bancount"))
            .transpose()?,
    };
    Ok(Callback {
        ip,
        jail,
        hostname,
        failures,
        logs,
        ban_time,
        ban_duration,
        ban_count,
    })
}

fn field(field: &'static str, reason: impl Into<String>) -> PayloadError {
    PayloadError::Field {
        field,
        reason: reason.into(),
    }
}

fn required_str<'a>(value: Option<&'a Value>, name: &'static str) -> Result<&'a str, PayloadError> {
    match value {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(field(name, "must be a string")),
        None => Err(field(name, "is required")),
    }
}

/// A number given as a JSON number or a numeric string; `None` for absent, null or an empty string
/// (what an action sends when a tag expands to nothing).
fn number(value: Option<&Value>, name: &'static str) -> Result<Option<f64>, PayloadError> {
    let parsed = match value {
        None => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    parsed
        .filter(|n| n.is_finite())
        .map(Some)
        .ok_or_else(|| field(name, "must be a number or a numeric string"))
}

/// A non-negative whole count.
fn count(n: f64, name: &'static str) -> Result<u32, PayloadError> {
    if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(field(
            name,
            format!("must be a whole number from 0 to {}", u32::MAX),
        ));
    }
    // In range and whole, so the conversion is exact.
    Ok(n as u32)
}

/// Unix seconds; fail2ban's `<time>` carries a fraction, which is dropped.
fn unix_seconds(n: f64, name: &'static str) -> Result<i64, PayloadError> {
    // Up to the year 9999: anything later is a unit mix-up (milliseconds), not a time.
    const MAX: f64 = 253_402_300_799.0;
    if !(0.0..=MAX).contains(&n) {
        return Err(field(name, "must be Unix seconds between 1970 and 9999"));
    }
    Ok(n.trunc() as i64)
}

/// Seconds, or `-1` for a permanent ban.
fn duration(n: f64, name: &'static str) -> Result<BanDuration, PayloadError> {
    let bad = || {
        field(
            name,
            "must be a whole number of seconds, or -1 for a permanent ban",
        )
    };
    if n.fract() != 0.0 || !(-1.0..=9.0e15).contains(&n) {
        return Err(bad());
    }
    BanDuration::from_seconds(n as i64).ok_or_else(bad)
}

/// `logs` as one string (lines separated by newlines) or a list of strings.
fn logs(value: Option<&Value>) -> Result<Logs, PayloadError> {
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

    fn ok(body: &str) -> Callback {
        parse(body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn refused(body: &str, expected_field: Option<&str>) {
        let err = parse(body.as_bytes()).expect_err(body);
        assert_eq!(err.field(), expected_field, "{body}: {err}");
    }

    #[test]
    fn spec_fields_and_extras() {
        let cb = ok(
            r#"{"serverId":"x","ip":"192.0.2.7","jail":"sshd","hostname":"web-1",
            "failures":3,"logs":["a","b"],"banTime":1790000000,"banDuration":600,"banCount":2}"#,
        );
        assert_eq!(cb.ip.to_string(), "192.0.2.7");
        assert_eq!(cb.jail.as_str(), "sshd");
        assert_eq!(cb.hostname.as_deref(), Some("web-1"));
        assert_eq!(cb.failures, 3);
        assert_eq!(cb.logs.lines(), ["a", "b"]);
        assert_eq!(cb.ban_time, Some(1_790_000_000));
        assert_eq!(cb.ban_duration, Some(BanDuration::Seconds(600)));
        assert_eq!(cb.ban_count, Some(2));
    }

    #[test]
    fn fail2ban_style_values() {
        // What an action that pastes tags into a string template sends.
        let cb = ok(
            r#"{"ip":"2001:db8::1","jail":"nginx-http-auth","failures":"5",
            "logs":"line one\nline two","time":"1790000000.8153","bantime":"-1","bancount":"1",
            "banCount":"3","serverId":17}"#,
        );
        assert_eq!(cb.ip.to_string(), "2001:db8::1");
        assert_eq!(cb.failures, 5);
        assert_eq!(cb.logs.lines(), ["line one", "line two"]);
        assert_eq!(cb.ban_time, Some(1_790_000_000));
        assert_eq!(cb.ban_duration, Some(BanDuration::Permanent));
        assert_eq!(cb.ban_count, Some(3));
        assert_eq!(cb.hostname, None);
    }

    #[test]
    fn minimal_and_empty_values() {
        let cb = ok(
            r#"{"ip":" 198.51.100.0/24 ","jail":"sshd","failures":"","logs":null,
            "hostname":"","time":null}"#,
        );
        assert_eq!(cb.ip.to_string(), "198.51.100.0/24");
        assert_eq!(cb.failures, 0);
        assert!(cb.logs.is_empty());
        assert_eq!(
            (cb.hostname, cb.ban_time, cb.ban_duration),
            (None, None, None)
        );
    }

    #[test]
    fn the_precise_name_wins_over_the_tag_name() {
        let cb =
            ok(r#"{"ip":"192.0.2.1","jail":"j","time":5,"banTime":6,"bantime":7,"banDuration":8}"#);
        assert_eq!(cb.ban_time, Some(6));
        assert_eq!(cb.ban_duration, Some(BanDuration::Seconds(8)));
    }

    #[test]
    fn bad_input_names_the_field() {
        refused("not json", None);
        refused("[1,2]", None);
        refused(r#"{"jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"not-an-ip","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"192.0.2.1; rm -rf /","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"127.0.0.1","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"0.0.0.0/0","jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":7,"jail":"sshd"}"#, Some("ip"));
        refused(r#"{"ip":"192.0.2.1"}"#, Some("jail"));
        refused(r#"{"ip":"192.0.2.1","jail":"../etc"}"#, Some("jail"));
        refused(r#"{"ip":"192.0.2.1","jail":"a b"}"#, Some("jail"));
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","failures":-1}"#,
            Some("failures"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","failures":"three"}"#,
            Some("failures"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","failures":2.5}"#,
            Some("failures"),
        );
        refused(r#"{"ip":"192.0.2.1","jail":"j","logs":[1]}"#, Some("logs"));
        refused(r#"{"ip":"192.0.2.1","jail":"j","logs":{}}"#, Some("logs"));
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","hostname":1}"#,
            Some("hostname"),
        );
        refused(r#"{"ip":"192.0.2.1","jail":"j","time":-5}"#, Some("time"));
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","banTime":1790000000000}"#,
            Some("banTime"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","bantime":-2}"#,
            Some("bantime"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","banDuration":"NaN"}"#,
            Some("banDuration"),
        );
        refused(
            r#"{"ip":"192.0.2.1","jail":"j","banCount":true}"#,
            Some("banCount"),
        );
    }

    #[test]
    fn log_lines_are_capped_and_cleaned() {
        let many: Vec<String> = (0..200).map(|i| format!("l{i}\u{1b}[31m")).collect();
        let body = serde_json::json!({"ip": "192.0.2.1", "jail": "j", "logs": many}).to_string();
        let cb = ok(&body);
        assert_eq!(cb.logs.lines().len(), crate::spool::event::MAX_LOG_LINES);
        assert_eq!(cb.logs.lines()[0], "l150[31m");
        assert!(cb.logs.truncated());
    }
}
