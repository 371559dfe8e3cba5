//! The events the agent records in its spool: bans and unbans as fail2ban reported them (or as the
//! agent observed them), and the gap record that stands in for events the agent had to give up.
//!
//! Every field is parsed on the way in, both from a callback and from disk, so a value of these types
//! always passes the shared rules: an address is an [`IpOrCidr`], a jail a [`JailName`], and log lines
//! are capped and free of control characters.

pub use banhub_proto::event::{
    BanDuration, GapReason, Logs, MAX_HOSTNAME_BYTES, MAX_LOG_BYTES, MAX_LOG_LINE_BYTES,
    MAX_LOG_LINES, SeqRange, clean_hostname,
};
use banhub_proto::rules::IpOrCidr;
pub use banhub_proto::rules::JailName;
use serde::{Deserialize, Deserializer, Serialize};

/// One record in the spool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Event {
    /// fail2ban banned an address.
    Ban(BanEvent),
    /// fail2ban lifted a ban.
    Unban(BanEvent),
    /// Events were lost (the spool hit its size bound, or a segment was damaged); says which.
    Gap(GapEvent),
}

impl Event {
    /// The kind as the wire and the hub name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ban(_) => "ban",
            Self::Unban(_) => "unban",
            Self::Gap(_) => "gap",
        }
    }

    /// When the agent received (or, for a gap, noticed) this event, in Unix milliseconds.
    pub fn received_at_ms(&self) -> i64 {
        match self {
            Self::Ban(ban) | Self::Unban(ban) => ban.received_at_ms,
            Self::Gap(gap) => gap.detected_at_ms,
        }
    }
}

/// A ban or unban: what fail2ban's action passed on, plus what the agent adds (receive time, source).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BanEvent {
    #[serde(with = "ip_text")]
    pub ip: IpOrCidr,
    pub jail: JailName,
    /// The reporting host's name as the action saw it (cleaned: see [`clean_hostname`]).
    #[serde(deserialize_with = "hostname_text")]
    pub hostname: String,
    /// Failures that led to the ban (0 when the action did not say).
    pub failures: u32,
    pub logs: Logs,
    /// When fail2ban banned the address, Unix seconds, if the action said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban_time: Option<i64>,
    /// How long the ban lasts, if the action said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban_duration: Option<BanDuration>,
    /// How many times fail2ban has banned this address (its `bancount`), if the action said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ban_count: Option<u32>,
    /// When the agent received the event, Unix milliseconds.
    pub received_at_ms: i64,
    pub source: Source,
}

/// Who told the agent about a ban or unban.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// fail2ban's action called the relay.
    Action,
    /// The agent found it comparing fail2ban's ban list with what it had reported.
    Observed,
}

/// Events the spool no longer has, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GapEvent {
    pub reason: GapReason,
    /// The sequence numbers given up (same epoch as the gap), ascending and disjoint. When an
    /// earlier gap record is itself dropped, its ranges and count are carried into the new one,
    /// and its own number is in the ranges without counting as a lost event.
    pub ranges: Vec<SeqRange>,
    /// How many ban or unban events were lost.
    pub lost: u64,
    /// When the agent dropped or found them, Unix milliseconds.
    pub detected_at_ms: i64,
    /// Receive times of the oldest and newest lost event, when they could still be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_received_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_received_at_ms: Option<i64>,
}

fn hostname_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    String::deserialize(deserializer).map(|raw| clean_hostname(&raw))
}

/// Serde for [`IpOrCidr`] as its canonical text, parsed with the shared rule on the way back in.
mod ip_text {
    use banhub_proto::rules::IpOrCidr;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ip: &IpOrCidr, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(ip)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<IpOrCidr, D::Error> {
        let raw = String::deserialize(deserializer)?;
        IpOrCidr::parse(&raw).map_err(|e| serde::de::Error::custom(format!("address {raw:?} {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BanEvent {
        BanEvent {
            ip: IpOrCidr::parse("192.0.2.7").expect("ip"),
            jail: JailName::parse("sshd").expect("jail"),
            hostname: "web-1".to_owned(),
            failures: 3,
            logs: Logs::capped(["one", "two"]),
            ban_time: Some(1_790_000_000),
            ban_duration: Some(BanDuration::Permanent),
            ban_count: Some(2),
            received_at_ms: 1_790_000_000_123,
            source: Source::Action,
        }
    }

    #[test]
    fn ban_round_trips_as_tagged_json() {
        let event = Event::Ban(sample());
        let json = serde_json::to_value(&event).expect("serialize");
        assert_eq!(json["kind"], "ban");
        assert_eq!(json["ip"], "192.0.2.7");
        assert_eq!(json["jail"], "sshd");
        assert_eq!(json["banDuration"], -1);
        assert_eq!(json["logs"]["lines"][1], "two");
        assert!(json["logs"].get("truncated").is_none());
        assert_eq!(json["source"], "action");
        let back: Event = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, event);
    }

    #[test]
    fn gap_round_trips() {
        let event = Event::Gap(GapEvent {
            reason: GapReason::Overflow,
            ranges: vec![SeqRange { first: 5, last: 9 }],
            lost: 5,
            detected_at_ms: 42,
            oldest_received_at_ms: Some(1),
            newest_received_at_ms: None,
        });
        let json = serde_json::to_string(&event).expect("serialize");
        assert!(json.contains(r#""kind":"gap""#), "{json}");
        assert_eq!(serde_json::from_str::<Event>(&json).expect("back"), event);
        assert_eq!(event.received_at_ms(), 42);
    }

    #[test]
    fn deserializing_reapplies_the_rules() {
        let mut json = serde_json::to_value(Event::Ban(sample())).expect("serialize");
        json["ip"] = "not-an-ip".into();
        assert!(serde_json::from_value::<Event>(json.clone()).is_err());
        json["ip"] = "192.0.2.7".into();
        json["jail"] = "../etc".into();
        assert!(serde_json::from_value::<Event>(json.clone()).is_err());
        json["jail"] = "sshd".into();
        json["banDuration"] = (-2).into();
        assert!(serde_json::from_value::<Event>(json.clone()).is_err());
        json["banDuration"] = 600.into();
        json["logs"]["lines"] = serde_json::Value::from(vec!["x\u{1b}[2Jy"; 60]);
        let Event::Ban(ban) = serde_json::from_value::<Event>(json).expect("valid") else {
            panic!("not a ban");
        };
        assert_eq!(ban.logs.lines().len(), MAX_LOG_LINES);
        assert_eq!(ban.logs.lines()[0], "x[2Jy");
        assert!(ban.logs.truncated());
        assert_eq!(ban.ban_duration, Some(BanDuration::Seconds(600)));
    }
}
