//! The events the agent records in its spool: bans and unbans as fail2ban reported them (or as the
//! agent observed them), and the gap record that stands in for events the agent had to give up.
//!
//! Every field is parsed on the way in, both from a callback and from disk, so a value of these types
//! always passes the shared rules: an address is an [`IpOrCidr`], a jail a [`JailName`], and log lines
//! are capped and free of control characters.

use banhub_proto::rules::IpOrCidr;
pub use banhub_proto::rules::JailName;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// At most this many log lines are kept per event; the newest are kept when there are more.
pub const MAX_LOG_LINES: usize = 50;
/// Each log line is cut to at most this many bytes (at a character boundary).
pub const MAX_LOG_LINE_BYTES: usize = 1024;
/// All log lines of one event together hold at most this many bytes.
pub const MAX_LOG_BYTES: usize = 16 * 1024;
/// A host name is cut to this many bytes (the DNS limit).
pub const MAX_HOSTNAME_BYTES: usize = 253;

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

/// Sequence numbers `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeqRange {
    pub first: u64,
    pub last: u64,
}

impl SeqRange {
    /// Sorts `ranges` and joins the ones that overlap or touch.
    pub fn coalesce(mut ranges: Vec<Self>) -> Vec<Self> {
        ranges.sort();
        let mut out: Vec<Self> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match out.last_mut() {
                Some(last) if range.first <= last.last.saturating_add(1) => {
                    last.last = last.last.max(range.last);
                }
                _ => out.push(range),
            }
        }
        out
    }

    /// How many numbers the range holds.
    pub fn count(self) -> u64 {
        self.last - self.first + 1
    }

    pub fn contains(self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq)
    }
}

/// Why events were lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GapReason {
    /// The spool reached its size bound with the hub unreachable; the oldest unacknowledged events
    /// made room for new ones.
    Overflow,
    /// A spool segment was damaged on disk and these records could not be read back.
    Corruption,
}

/// How long a ban lasts. fail2ban writes a permanent ban's time as `-1`, and so does the JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanDuration {
    Seconds(u64),
    Permanent,
}

impl BanDuration {
    /// Reads fail2ban's convention: `-1` is permanent, any other negative number is not a duration.
    pub fn from_seconds(seconds: i64) -> Option<Self> {
        match seconds {
            -1 => Some(Self::Permanent),
            s => u64::try_from(s).ok().map(Self::Seconds),
        }
    }

    /// fail2ban's number: seconds, or `-1` for permanent.
    pub fn as_seconds(self) -> i64 {
        match self {
            Self::Permanent => -1,
            Self::Seconds(s) => i64::try_from(s).unwrap_or(i64::MAX),
        }
    }
}

impl Serialize for BanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.as_seconds())
    }
}

impl<'de> Deserialize<'de> for BanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let seconds = i64::deserialize(deserializer)?;
        Self::from_seconds(seconds).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "ban duration {seconds} is neither -1 (permanent) nor a number of seconds"
            ))
        })
    }
}

/// Log lines that came with an event: at most [`MAX_LOG_LINES`] lines of at most
/// [`MAX_LOG_LINE_BYTES`] bytes, [`MAX_LOG_BYTES`] in all, without control characters other than tab.
///
/// The text is written by whoever attacks the host, so it is treated as data only: capped so one
/// event cannot fill the spool, and cleaned so it cannot move a terminal's cursor when printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Logs {
    lines: Vec<String>,
    /// Whether lines were dropped or cut to fit the caps.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

impl Logs {
    /// Cleans and caps `lines`. Lines that are empty after cleaning are dropped. When there are
    /// too many, the newest (last) ones are kept: they are the ones that tipped the ban.
    pub fn capped<I, S>(lines: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut truncated = false;
        let mut cleaned: Vec<String> = Vec::new();
        for line in lines {
            let (line, cut) = clean_line(line.as_ref());
            truncated |= cut;
            if !line.is_empty() {
                cleaned.push(line);
            }
        }
        // Walk from the newest line back, keeping lines while they fit.
        let mut kept = Vec::new();
        let mut total = 0usize;
        for line in cleaned.iter().rev() {
            if kept.len() == MAX_LOG_LINES || total + line.len() > MAX_LOG_BYTES {
                truncated = true;
                break;
            }
            total += line.len();
            kept.push(line.clone());
        }
        kept.reverse();
        Self {
            lines: kept,
            truncated,
        }
    }

    /// Splits a block of text (fail2ban's `<matches>`: one match per line) and caps it.
    pub fn from_text(text: &str) -> Self {
        Self::capped(text.lines())
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Whether lines were dropped or cut to fit the caps.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl<'de> Deserialize<'de> for Logs {
    /// Applies the caps again, so a record edited on disk cannot smuggle in what a callback could not.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            lines: Vec<String>,
            #[serde(default)]
            truncated: bool,
        }
        let raw = Raw::deserialize(deserializer)?;
        let mut logs = Self::capped(raw.lines);
        logs.truncated |= raw.truncated;
        Ok(logs)
    }
}

/// Removes control characters other than tab and cuts the line to [`MAX_LOG_LINE_BYTES`] at a
/// character boundary; says whether it had to cut.
fn clean_line(raw: &str) -> (String, bool) {
    let mut out = String::with_capacity(raw.len().min(MAX_LOG_LINE_BYTES));
    for c in raw.chars().filter(|&c| c == '\t' || !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_LOG_LINE_BYTES {
            return (out, true);
        }
        out.push(c);
    }
    (out, false)
}

/// A host name as reported: control characters and surrounding blanks removed, cut to
/// [`MAX_HOSTNAME_BYTES`]. It is informational (the hub knows each agent by its certificate), so
/// anything printable is kept rather than refused.
pub fn clean_hostname(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.trim().chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_HOSTNAME_BYTES {
            break;
        }
        out.push(c);
    }
    out
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

    fn check_logs(input: &[&str], expected: &[&str], truncated: bool) {
        let logs = Logs::capped(input);
        assert_eq!(logs.lines(), expected, "input {input:?}");
        assert_eq!(logs.truncated(), truncated, "input {input:?}");
    }

    #[test]
    fn logs_are_cleaned_and_capped() {
        check_logs(&[], &[], false);
        check_logs(&["a\tb", "c"], &["a\tb", "c"], false);
        check_logs(&["a\rb\0c\u{7f}d\u{85}e"], &["abcde"], false);
        check_logs(&["", "\r", "x"], &["x"], false);
        let long = "é".repeat(MAX_LOG_LINE_BYTES);
        let logs = Logs::capped([long.as_str()]);
        assert_eq!(logs.lines()[0].len(), MAX_LOG_LINE_BYTES);
        assert!(logs.truncated());

        let many: Vec<String> = (0..80).map(|i| format!("line {i}")).collect();
        let logs = Logs::capped(&many);
        assert_eq!(logs.lines().len(), MAX_LOG_LINES);
        assert_eq!(logs.lines()[0], "line 30");
        assert_eq!(logs.lines()[49], "line 79");
        assert!(logs.truncated());

        let big: Vec<String> = (0..40)
            .map(|i| format!("{i:04}{}", "x".repeat(1000)))
            .collect();
        let logs = Logs::capped(&big);
        let total: usize = logs.lines().iter().map(String::len).sum();
        assert!(total <= MAX_LOG_BYTES, "{total}");
        assert_eq!(logs.lines().len(), MAX_LOG_BYTES / 1004);
        assert!(logs.lines().last().expect("kept").starts_with("0039"));
        assert!(logs.truncated());

        assert_eq!(Logs::from_text("a\nb\r\n\nc").lines(), ["a", "b", "c"]);
    }

    #[test]
    fn ranges_coalesce() {
        let r = |first, last| SeqRange { first, last };
        assert_eq!(
            SeqRange::coalesce(vec![r(10, 12), r(1, 3), r(4, 5), r(11, 20), r(30, 30)]),
            [r(1, 5), r(10, 20), r(30, 30)]
        );
        assert_eq!(r(4, 6).count(), 3);
    }

    #[test]
    fn hostnames_are_cleaned() {
        assert_eq!(clean_hostname("  web-1\n"), "web-1");
        assert_eq!(clean_hostname("a\u{1b}b"), "ab");
        assert_eq!(clean_hostname(&"h".repeat(300)).len(), MAX_HOSTNAME_BYTES);
    }

    #[test]
    fn ban_durations_follow_fail2ban() {
        assert_eq!(BanDuration::from_seconds(-1), Some(BanDuration::Permanent));
        assert_eq!(BanDuration::from_seconds(0), Some(BanDuration::Seconds(0)));
        assert_eq!(BanDuration::from_seconds(-5), None);
        assert_eq!(BanDuration::Seconds(600).as_seconds(), 600);
    }
}
