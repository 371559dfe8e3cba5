//! The values a ban event carries between fail2ban, the agent and the hub, and the callback body that
//! brings them in: one definition, so the agent's relay and the hub's direct callback accept exactly
//! the same thing and cap log lines the same way.
//!
//! Every value of these types has passed its rules: log lines are capped and free of control
//! characters, a host name is cleaned, a ban duration follows fail2ban's convention, and a callback's
//! address and jail passed [`crate::rules`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::rules::{IpOrCidr, JailName};

/// At most this many log lines are kept per event; the newest are kept when there are more.
pub const MAX_LOG_LINES: usize = 50;
/// Each log line is cut to at most this many bytes (at a character boundary).
pub const MAX_LOG_LINE_BYTES: usize = 1024;
/// All log lines of one event together hold at most this many bytes.
pub const MAX_LOG_BYTES: usize = 16 * 1024;
/// A host name is cut to this many bytes (the DNS limit).
pub const MAX_HOSTNAME_BYTES: usize = 253;

/// Log lines that came with an event: at most [`MAX_LOG_LINES`] lines of at most
/// [`MAX_LOG_LINE_BYTES`] bytes, [`MAX_LOG_BYTES`] in all, without control characters other than tab.
///
/// Whoever attacks a host writes this text, so it is data only: capped so one event cannot fill the
/// spool or swell the database, and cleaned so it cannot move a terminal's cursor or split a CSV row
/// when shown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Logs {
    lines: Vec<String>,
    /// Whether lines were dropped or cut to fit the caps.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

impl Logs {
    /// Cleans and caps `lines`. Lines that are empty after cleaning are dropped. When there are too
    /// many, the newest (last) ones are kept: they are the ones that tipped the ban.
    pub fn capped<I, S>(lines: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::cleaned(lines, |line| {
            clean(line.as_ref(), MAX_LOG_LINE_BYTES, |c| c == '\t')
        })
    }

    /// [`Logs::capped`] of lines already owned, as decoded from the agent's frames: a line that
    /// needs no cleaning (nearly all) is kept as it is rather than copied, and the vector too.
    pub fn capped_owned(lines: Vec<String>) -> Self {
        // `filter_map` over the vector's own iterator collects into the same allocation.
        Self::cleaned(lines, |line| {
            clean_owned(line, MAX_LOG_LINE_BYTES, |c| c == '\t')
        })
    }

    /// Each of `lines` through `clean_line` (the line and whether it was cut), the empty ones
    /// dropped, then capped by [`Logs::newest`].
    fn cleaned<I: IntoIterator>(
        lines: I,
        mut clean_line: impl FnMut(I::Item) -> (String, bool),
    ) -> Self {
        let mut truncated = false;
        let cleaned: Vec<String> = lines
            .into_iter()
            .filter_map(|line| {
                let (line, cut) = clean_line(line);
                truncated |= cut;
                (!line.is_empty()).then_some(line)
            })
            .collect();
        Self::newest(cleaned, truncated)
    }

    /// Keeps the newest of the `cleaned` lines within the caps. When there are too many, the
    /// newest (last) ones are kept: they are the ones that tipped the ban.
    fn newest(mut cleaned: Vec<String>, mut truncated: bool) -> Self {
        // Walk from the newest line back, keeping lines while they fit.
        let mut total = 0usize;
        let mut keep = 0usize;
        for line in cleaned.iter().rev() {
            if keep == MAX_LOG_LINES || total + line.len() > MAX_LOG_BYTES {
                truncated = true;
                break;
            }
            total += line.len();
            keep += 1;
        }
        // Drop the oldest lines in place (`split_off` would allocate a second vector).
        cleaned.drain(..cleaned.len() - keep);
        Self {
            lines: cleaned,
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

    pub fn into_lines(self) -> Vec<String> {
        self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Whether lines were dropped or cut to fit the caps.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The same lines, marked as cut: for reading back a stored record whose lines were cut
    /// when it was first received.
    pub fn with_truncated(mut self) -> Self {
        self.truncated = true;
        self
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

/// Drops control characters (but those `keep` allows) and cuts to `max` bytes at a character
/// boundary; says whether it had to cut.
fn clean(raw: &str, max: usize, keep: impl Fn(char) -> bool) -> (String, bool) {
    if is_clean(raw, max) {
        return (raw.to_owned(), false);
    }
    clean_chars(raw, max, keep)
}

/// [`clean`] of an owned string, returned as it is when it needs no cleaning.
fn clean_owned(raw: String, max: usize, keep: impl Fn(char) -> bool) -> (String, bool) {
    if is_clean(&raw, max) {
        return (raw, false);
    }
    clean_chars(&raw, max, keep)
}

/// Whether `raw` is printable ASCII that fits in `max` bytes: what [`clean`] returns unchanged.
/// Nearly every line is, and is then copied whole rather than a character at a time (that loop was
/// the largest single cost of a callback). A fold without an early exit, so the compiler checks
/// many bytes at a time; a line with a tab (or anything else) takes the loop.
fn is_clean(raw: &str, max: usize) -> bool {
    let printable_ascii = |ok: bool, b: u8| ok & (0x20..0x7f).contains(&b);
    raw.len() <= max && raw.bytes().fold(true, printable_ascii)
}

/// [`clean`], a character at a time.
fn clean_chars(raw: &str, max: usize, keep: impl Fn(char) -> bool) -> (String, bool) {
    let mut out = String::with_capacity(raw.len().min(max));
    for c in raw.chars().filter(|&c| keep(c) || !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            return (out, true);
        }
        out.push(c);
    }
    (out, false)
}

/// A host name as reported: control characters and surrounding blanks removed, cut to
/// [`MAX_HOSTNAME_BYTES`]. It only informs (the hub knows each server by its agent's certificate or
/// its callback secret), so anything printable is kept rather than refused.
pub fn clean_hostname(raw: &str) -> String {
    let (cleaned, _) = clean(raw.trim(), MAX_HOSTNAME_BYTES, |_| false);
    // Dropped characters or the cut can leave blanks at either end; usually there are none, and
    // the cleaned string is kept rather than copied again.
    if cleaned.trim().len() == cleaned.len() {
        cleaned
    } else {
        cleaned.trim().to_owned()
    }
}

/// [`clean_hostname`] of an owned string, returned as it is when it needs no cleaning (the usual
/// case: a host name as the agent already cleaned it).
pub fn clean_hostname_owned(raw: String) -> String {
    if raw.trim().len() == raw.len() && is_clean(&raw, MAX_HOSTNAME_BYTES) {
        raw
    } else {
        clean_hostname(&raw)
    }
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

/// Sequence numbers `first..=last` of one agent epoch.
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

/// Why an agent lost events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GapReason {
    /// The spool reached its size bound with the hub unreachable; the oldest unacknowledged events
    /// made room for new ones.
    Overflow,
    /// A spool segment was damaged on disk and these records could not be read back.
    Corruption,
    /// A reason this build does not know (a newer agent). Never written by an agent.
    #[serde(other)]
    Other,
}

impl GapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Overflow => "overflow",
            Self::Corruption => "corruption",
            Self::Other => "other",
        }
    }

    /// Reads a reason; one this build does not know is [`GapReason::Other`].
    pub fn parse(raw: &str) -> Self {
        match raw {
            "overflow" => Self::Overflow,
            "corruption" => Self::Corruption,
            _ => Self::Other,
        }
    }
}

/// A callback body (`POST /api/ban` or `/api/unban`, to the agent's relay or to the hub) that
/// passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    pub ip: IpOrCidr,
    pub jail: JailName,
    /// As reported and cleaned; `None` when absent or empty after cleaning.
    pub hostname: Option<String>,
    /// Failures that led to the ban (0 when the action did not say).
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
pub enum CallbackError {
    #[error("the body is not a JSON object: {0}")]
    NotJson(String),
    #[error("field `{field}` {reason}")]
    Field { field: &'static str, reason: String },
}

impl CallbackError {
    /// The field to name in the problem response, if the error is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Field { field, .. } => Some(field),
            Self::NotJson(_) => None,
        }
    }
}

impl Callback {
    /// Parses and checks a callback body: the spec's fields (`serverId, ip, jail, hostname,
    /// failures, logs`) plus the ban time, duration and count.
    ///
    /// Lenient in form, strict in content. A fail2ban action fills a JSON template with whatever its
    /// tags expand to, so numbers may come as numbers or numeric strings, `logs` as one string or a
    /// list, and the time, duration and count under fail2ban's tag names (`time`, `bantime`,
    /// `bancount`) or ours (`banTime`, `banDuration`, `banCount`; ours wins). But the address and the
    /// jail must pass the shared rules and anything present must make sense, or the whole callback
    /// is refused with the offending field named. `serverId` and unknown fields are ignored: the
    /// receiver knows which server it is, whatever the body claims.
    ///
    /// The body is read in one pass into [`Fields`], whose strings borrow from `body` (this runs
    /// for every ban, so it allocates no map of owned values per body). The
    /// whole document is read before any field is checked, so malformed JSON anywhere is
    /// `NotJson` even when a field before it is wrong, and a field named twice counts with its
    /// last value, as a JSON map would have it.
    pub fn parse(body: &[u8]) -> Result<Self, CallbackError> {
        // One UTF-8 check of the whole body costs less than serde_json's check of each string
        // (keys included). A body that is not UTF-8 is read from bytes, which refuses it in the
        // same words as before (the position of the first bad string); for UTF-8 the two readers
        // behave alike.
        let fields = match std::str::from_utf8(body) {
            Ok(text) => serde_json::from_str::<Fields<'_>>(text),
            Err(_) => serde_json::from_slice::<Fields<'_>>(body),
        }
        .map_err(|e| CallbackError::NotJson(e.to_string()))?;
        let get = |name: Field| fields.get(name);

        let ip_text = required_str(get(Field::Ip), "ip")?;
        let ip =
            IpOrCidr::parse(ip_text.trim()).map_err(|e| field("ip", format!("{ip_text:?} {e}")))?;
        let jail_text = required_str(get(Field::Jail), "jail")?;
        let jail = JailName::parse(jail_text.trim())
            .map_err(|e| field("jail", format!("{jail_text:?} {e}")))?;
        let hostname = match get(Field::Hostname) {
            None => None,
            Some(Raw::Str(s)) => Some(clean_hostname(s)).filter(|h| !h.is_empty()),
            Some(_) => return Err(field("hostname", "must be a string")),
        };
        let failures = number(get(Field::Failures), "failures")?
            .map(|n| whole(n, "failures"))
            .transpose()?
            .unwrap_or(0);
        Ok(Self {
            ip,
            jail,
            hostname,
            failures,
            logs: logs(get(Field::Logs))?,
            ban_time: first_of(
                &get,
                [(Field::BanTime, "banTime"), (Field::Time, "time")],
                unix_seconds,
            )?,
            ban_duration: first_of(
                &get,
                [
                    (Field::BanDuration, "banDuration"),
                    (Field::Bantime, "bantime"),
                ],
                duration,
            )?,
            ban_count: first_of(
                &get,
                [(Field::BanCount, "banCount"), (Field::Bancount, "bancount")],
                whole,
            )?,
        })
    }
}

fn field(field: &'static str, reason: impl Into<String>) -> CallbackError {
    CallbackError::Field {
        field,
        reason: reason.into(),
    }
}

/// The value under the first name present, converted.
fn first_of<'a, 'b: 'a, T>(
    get: &impl Fn(Field) -> Option<&'a Raw<'b>>,
    names: [(Field, &'static str); 2],
    convert: fn(f64, &'static str) -> Result<T, CallbackError>,
) -> Result<Option<T>, CallbackError> {
    for (key, name) in names {
        if let Some(n) = number(get(key), name)? {
            return convert(n, name).map(Some);
        }
    }
    Ok(None)
}

fn required_str<'a>(
    value: Option<&'a Raw<'_>>,
    name: &'static str,
) -> Result<&'a str, CallbackError> {
    match value {
        Some(Raw::Str(s)) => Ok(s),
        Some(_) => Err(field(name, "must be a string")),
        None => Err(field(name, "is required")),
    }
}

/// A JSON number or a numeric string; `None` when absent, null or an empty string (what an action
/// sends when a tag expands to nothing).
fn number(value: Option<&Raw<'_>>, name: &'static str) -> Result<Option<f64>, CallbackError> {
    let parsed = match value {
        None => return Ok(None),
        Some(Raw::Str(s)) if s.trim().is_empty() => return Ok(None),
        Some(Raw::Number(n)) => Some(*n),
        Some(Raw::Str(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    parsed
        .filter(|n| n.is_finite())
        .map(Some)
        .ok_or_else(|| field(name, "must be a number or a numeric string"))
}

/// A whole number from 0 to `u32::MAX`.
fn whole(n: f64, name: &'static str) -> Result<u32, CallbackError> {
    if n.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&n) {
        return Err(field(
            name,
            format!("must be a whole number from 0 to {}", u32::MAX),
        ));
    }
    // Whole and in range, so the conversion is exact.
    Ok(n as u32)
}

/// Unix seconds; fail2ban's `<time>` carries a fraction, which is dropped.
fn unix_seconds(n: f64, name: &'static str) -> Result<i64, CallbackError> {
    // Up to the year 9999: anything later is a unit mix-up (milliseconds), not a time.
    const MAX: f64 = 253_402_300_799.0;
    if !(0.0..=MAX).contains(&n) {
        return Err(field(name, "must be Unix seconds between 1970 and 9999"));
    }
    Ok(n.trunc() as i64)
}

/// Whole seconds, or `-1` for a permanent ban.
fn duration(n: f64, name: &'static str) -> Result<BanDuration, CallbackError> {
    let refuse = || {
        field(
            name,
            "must be a whole number of seconds, or -1 for a permanent ban",
        )
    };
    if n.fract() != 0.0 || !(-1.0..=9.0e15).contains(&n) {
        return Err(refuse());
    }
    BanDuration::from_seconds(n as i64).ok_or_else(refuse)
}

/// `logs` as one string (a line per match) or a list of strings.
fn logs(value: Option<&Raw<'_>>) -> Result<Logs, CallbackError> {
    match value {
        None => Ok(Logs::default()),
        Some(Raw::Str(text)) => Ok(Logs::from_text(text)),
        Some(Raw::Strings(items)) => Ok(Logs::capped(items.iter().flat_map(|text| text.lines()))),
        Some(_) => Err(field("logs", "must be a string or a list of strings")),
    }
}

/// The members of a callback body that [`Callback::parse`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Ip,
    Jail,
    Hostname,
    Failures,
    Logs,
    BanTime,
    Time,
    BanDuration,
    Bantime,
    BanCount,
    Bancount,
}

impl Field {
    const COUNT: usize = 11;

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "ip" => Self::Ip,
            "jail" => Self::Jail,
            "hostname" => Self::Hostname,
            "failures" => Self::Failures,
            "logs" => Self::Logs,
            "banTime" => Self::BanTime,
            "time" => Self::Time,
            "banDuration" => Self::BanDuration,
            "bantime" => Self::Bantime,
            "banCount" => Self::BanCount,
            "bancount" => Self::Bancount,
            _ => return None,
        })
    }
}

/// A member's value as far as the checks look at it. Strings borrow from the body unless JSON
/// escapes in them made a copy necessary.
#[derive(Debug, Clone, PartialEq)]
enum Raw<'a> {
    Null,
    Number(f64),
    Str(Cow<'a, str>),
    /// An array whose items are all strings (an empty one included).
    Strings(Vec<Cow<'a, str>>),
    /// A boolean, an object, or an array holding something other than a string.
    Other,
}

/// A callback body read in one pass: the value of each member [`Callback::parse`] reads, the last
/// one when a name repeats. Every other member is read through (so malformed JSON anywhere is
/// refused exactly as a full parse would refuse it) and dropped.
#[derive(Debug, Default)]
struct Fields<'a> {
    values: [Option<Raw<'a>>; Field::COUNT],
}

impl<'a> Fields<'a> {
    /// The value under `name`; `None` when absent or null.
    fn get(&self, name: Field) -> Option<&Raw<'a>> {
        self.values[name as usize]
            .as_ref()
            .filter(|v| !matches!(v, Raw::Null))
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(FieldsVisitor)
    }
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields<'de>;

    // What serde_json's own map says, so a body that is not an object is refused in the same words.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key {
                Some(name) => fields.values[name as usize] = Some(map.next_value_seed(RawSeed)?),
                None => map.next_value_seed(Skip)?,
            }
        }
        Ok(fields)
    }
}

/// A member name: which [`Field`] it is, if any.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<Field>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Option<Field>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok(Field::from_name(name))
    }
}

/// Reads any value into a [`Raw`].
struct RawSeed;

impl<'de> DeserializeSeed<'de> for RawSeed {
    type Value = Raw<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RawSeed {
    type Value = Raw<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Raw::Other)
    }

    // As `serde_json::Number::as_f64` converts them.
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Raw::Number(n as f64))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(Raw::Number(n as f64))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        Ok(Raw::Number(n))
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Raw::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Raw::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
        Ok(Raw::Str(Cow::Owned(s)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Raw::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Raw::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut strings = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        let mut all_strings = true;
        while let Some(item) = seq.next_element_seed(ItemSeed)? {
            match item {
                Some(s) if all_strings => strings.push(s),
                Some(_) => {}
                None => {
                    all_strings = false;
                    strings = Vec::new();
                }
            }
        }
        Ok(if all_strings {
            Raw::Strings(strings)
        } else {
            Raw::Other
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Skip.visit_map(map)?;
        Ok(Raw::Other)
    }
}

/// An array item: the string, or `None` for anything else (read through).
struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        Ok(match RawSeed.deserialize(deserializer)? {
            Raw::Str(s) => Some(s),
            _ => None,
        })
    }
}

/// Reads through any value, checking it as fully as parsing it into a `serde_json::Value` would
/// (`deserialize_any`, not `deserialize_ignored_any`, which lets invalid UTF-8 and out-of-range
/// numbers pass), without keeping anything.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Skip)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Callback {
        Callback::parse(body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn refused(body: &str, expected_field: Option<&str>) {
        let err = Callback::parse(body.as_bytes()).expect_err(body);
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
        for (body, name) in [
            (r#""failures":-1"#, "failures"),
            (r#""failures":"three""#, "failures"),
            (r#""failures":2.5"#, "failures"),
            (r#""logs":[1]"#, "logs"),
            (r#""logs":{}"#, "logs"),
            (r#""hostname":1"#, "hostname"),
            (r#""time":-5"#, "time"),
            (r#""banTime":1790000000000"#, "banTime"),
            (r#""bantime":-2"#, "bantime"),
            (r#""banDuration":"NaN""#, "banDuration"),
            (r#""banCount":true"#, "banCount"),
        ] {
            refused(
                &format!(r#"{{"ip":"192.0.2.1","jail":"j",{body}}}"#),
                Some(name),
            );
        }
    }

    #[test]
    fn callback_log_lines_are_capped_and_cleaned() {
        let many: Vec<String> = (0..200).map(|i| format!("l{i}\u{1b}[31m")).collect();
        let body = serde_json::json!({"ip": "192.0.2.1", "jail": "j", "logs": many}).to_string();
        let cb = ok(&body);
        assert_eq!(cb.logs.lines().len(), MAX_LOG_LINES);
        assert_eq!(cb.logs.lines()[0], "l150[31m");
        assert!(cb.logs.truncated());
    }

    /// The parser as it was before it read bodies in one borrowed pass: a `serde_json::Map` per
    /// body, then the same checks. Kept to show that the rewrite accepts and refuses exactly the
    /// same bodies with the same errors.
    mod reference {
        use serde_json::{Map, Value};

        use super::super::{
            Callback, CallbackError, Logs, clean_hostname, duration, field, unix_seconds, whole,
        };
        use crate::rules::{IpOrCidr, JailName};

        pub fn parse(body: &[u8]) -> Result<Callback, CallbackError> {
            let object: Map<String, Value> =
                serde_json::from_slice(body).map_err(|e| CallbackError::NotJson(e.to_string()))?;
            let get = |name: &str| object.get(name).filter(|v| !v.is_null());
            let ip_text = required_str(get("ip"), "ip")?;
            let ip = IpOrCidr::parse(ip_text.trim())
                .map_err(|e| field("ip", format!("{ip_text:?} {e}")))?;
            let jail_text = required_str(get("jail"), "jail")?;
            let jail = JailName::parse(jail_text.trim())
                .map_err(|e| field("jail", format!("{jail_text:?} {e}")))?;
            let hostname = match get("hostname") {
                None => None,
                Some(Value::String(s)) => Some(clean_hostname(s)).filter(|h| !h.is_empty()),
                Some(_) => return Err(field("hostname", "must be a string")),
            };
            let failures = number(get("failures"), "failures")?
                .map(|n| whole(n, "failures"))
                .transpose()?
                .unwrap_or(0);
            Ok(Callback {
                ip,
                jail,
                hostname,
                failures,
                logs: logs(get("logs"))?,
                ban_time: first_of(&get, ["banTime", "time"], unix_seconds)?,
                ban_duration: first_of(&get, ["banDuration", "bantime"], duration)?,
                ban_count: first_of(&get, ["banCount", "bancount"], whole)?,
            })
        }

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

        fn required_str<'a>(
            value: Option<&'a Value>,
            name: &'static str,
        ) -> Result<&'a str, CallbackError> {
            match value {
                Some(Value::String(s)) => Ok(s),
                Some(_) => Err(field(name, "must be a string")),
                None => Err(field(name, "is required")),
            }
        }

        fn number(value: Option<&Value>, name: &'static str) -> Result<Option<f64>, CallbackError> {
            let parsed = match value {
                None => return Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
                Some(Value::Number(n)) => n.as_f64(),
                Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
                Some(_) => None,
            };
            parsed
                .filter(|n| n.is_finite())
                .map(Some)
                .ok_or_else(|| field(name, "must be a number or a numeric string"))
        }

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
    }

    /// Bodies that probe every way the parser can accept or refuse.
    fn tricky_bodies() -> Vec<Vec<u8>> {
        let deep = format!(
            r#"{{"ip":"192.0.2.1","jail":"j","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let shallow = format!(
            r#"{{"ip":"192.0.2.1","jail":"j","x":{}1{}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        let mut bodies: Vec<Vec<u8>> = [
            "",
            " ",
            "not json",
            "{",
            r#"{"ip":"#,
            "[1,2]",
            r#""a string""#,
            "null",
            "1",
            "{}",
            "{} x",
            " {\"ip\":\"192.0.2.1\",\"jail\":\"j\"} \n",
            r#"{"ip":"192.0.2.1","jail":"j",}"#,
            r#"{"ip":"192.0.2.1" "jail":"j"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","ip":"bad"}"#,
            r#"{"ip":"bad","ip":"192.0.2.1","jail":"j"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","jail":null}"#,
            r#"{"\u0069p":"192.0.2.1","jail":"\u0073shd"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":["say \"hi\"\n\tx","\u001b[2J"]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":"\ud800"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":"\q"}"#,
            "{\"ip\":\"192.0.2.1\",\"jail\":\"j\",\"x\":\"a\nb\"}",
            r#"{"ip":"192.0.2.1","jail":"j","x":1e400}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":-1e400}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":1e400}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":01}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":{"a":[1,{"b":null}],"c":true}}"#,
            r#"{"ip":"192.0.2.1","jail":"j","x":{"a":1,}}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":[]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":["a",1]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":[["a"]]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":[null]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":{"a":1}}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":true}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":"a\nb\r\n"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","logs":["a",1,"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":1e20}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":"1e3"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":" 7 "}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":"0x10"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":-0}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":-0.0}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":4294967295}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":4294967296}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":18446744073709551616}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":-9223372036854775809}"#,
            r#"{"ip":"192.0.2.1","jail":"j","failures":[1]}"#,
            r#"{"ip":"192.0.2.1","jail":"j","banTime":1.5,"time":"x"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","banTime":"","time":"x"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","banTime":null,"time":"17"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","time":"inf"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","banDuration":-1,"bancount":"2"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","bantime":"-1.0"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","bantime":9e15}"#,
            r#"{"ip":"192.0.2.1","jail":"j","bantime":9.1e15}"#,
            r#"{"ip":"192.0.2.1","jail":"j","hostname":null}"#,
            r#"{"ip":"192.0.2.1","jail":"j","hostname":"  "}"#,
            r#"{"ip":"192.0.2.1","jail":"j","hostname":"a\u0000b\u001bc"}"#,
            r#"{"ip":"192.0.2.1","jail":"j","hostname":["a"]}"#,
            r#"{"ip":["192.0.2.1"],"jail":"j"}"#,
            r#"{"ip":null,"jail":"j"}"#,
            r#"{"ip":"192.0.2.1","jail":7}"#,
            r#"{"ip":"192.0.2.1","jail":{}}"#,
            r#"{"ip":"192.0.2.1","jail":"j","serverId":{"nested":[1,2,3]},"extra":"é"}"#,
            r#"{"ip":"198.51.100.0/24","jail":"j","logs":"l\u00e9\u0085x"}"#,
            r#"{"ip":"192.0.2.1","jail":"j"}{"#,
            &deep,
            &shallow,
        ]
        .iter()
        .map(|b| b.as_bytes().to_vec())
        .collect();
        bodies.push(b"{\"ip\":\"192.0.2.1\xff\",\"jail\":\"j\"}".to_vec());
        bodies.push(b"{\"ip\":\"192.0.2.1\",\"jail\":\"j\",\"x\":\"\xff\xfe\"}".to_vec());
        bodies.push(b"{\"ip\":\"192.0.2.1\",\"jail\":\"j\",\"\xc3\":1}".to_vec());
        bodies.push(b"{\"ip\":\"192.0.2.1\",\"jail\":\"j\",\"logs\":[\"\xed\xa0\x80\"]}".to_vec());
        let big: Vec<String> = (0..300)
            .map(|i| format!("{i:04}{}", "y".repeat(200)))
            .collect();
        bodies.push(
            serde_json::json!({"ip": "192.0.2.1", "jail": "j", "logs": big})
                .to_string()
                .into_bytes(),
        );
        bodies.push(
            serde_json::json!({"ip": "192.0.2.1", "jail": "j", "logs": big.join("\n")})
                .to_string()
                .into_bytes(),
        );
        bodies
    }

    fn same_as_reference(body: &[u8]) {
        let new = Callback::parse(body);
        let old = reference::parse(body);
        assert_eq!(new, old, "body {:?}", String::from_utf8_lossy(body));
    }

    #[test]
    fn parses_exactly_as_a_json_map_did() {
        for body in tricky_bodies() {
            same_as_reference(&body);
        }
    }

    #[test]
    fn damaged_bodies_are_refused_exactly_as_a_json_map_did() {
        // Every byte of a full body replaced by each of a few troublemakers, and every cut.
        let body = br#"{"serverId":"x","ip":"192.0.2.7","jail":"sshd","hostname":"web-1","failures":"3","logs":["a \"b\"","c\\d"],"time":1790000000.5,"banDuration":600,"bancount":2,"z":[{"q":null},true,-1.5e3]}"#;
        for at in 0..body.len() {
            same_as_reference(&body[..at]);
            for byte in [
                b'"', b'}', b']', b',', b'\\', b'1', b'n', b' ', b'\n', 0xff, 0xc3,
            ] {
                let mut damaged = body.to_vec();
                damaged[at] = byte;
                same_as_reference(&damaged);
            }
        }
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let body = br#"{"ip":"192.0.2.1","jail":"j","logs":["plain","with \"quote\""]}"#;
        let fields: Fields<'_> = serde_json::from_slice(body).expect("valid");
        let Some(Raw::Strings(lines)) = fields.get(Field::Logs) else {
            panic!("logs: {:?}", fields.get(Field::Logs));
        };
        assert!(matches!(lines[0], Cow::Borrowed("plain")));
        assert!(matches!(&lines[1], Cow::Owned(s) if s == "with \"quote\""));
        assert!(matches!(
            fields.get(Field::Ip),
            Some(Raw::Str(Cow::Borrowed(_)))
        ));
    }

    #[test]
    fn refusals_keep_their_fields_and_words() {
        let reason = |body: &str| {
            Callback::parse(body.as_bytes())
                .expect_err(body)
                .to_string()
        };
        assert_eq!(
            reason("[1,2]"),
            "the body is not a JSON object: invalid type: sequence, expected a map at line 1 column 0"
        );
        assert_eq!(
            reason("{\"ip\":\"192.0.2.1\",\"jail\":\"j\",\"x\":"),
            "the body is not a JSON object: EOF while parsing a value at line 1 column 33"
        );
        assert_eq!(reason(r#"{"jail":"j"}"#), "field `ip` is required");
        assert_eq!(
            reason(r#"{"ip":7,"jail":"j"}"#),
            "field `ip` must be a string"
        );
        assert_eq!(
            reason(r#"{"ip":"192.0.2.1","jail":"j","logs":["a",1]}"#),
            "field `logs` must be a string or a list of strings"
        );
        assert_eq!(
            reason(r#"{"ip":"192.0.2.1","jail":"j","failures":true}"#),
            "field `failures` must be a number or a numeric string"
        );
        // Malformed JSON wins over a field that is wrong before it.
        assert!(matches!(
            Callback::parse(b"{\"ip\":7,\"x\":\"\xff\"}"),
            Err(CallbackError::NotJson(_))
        ));
    }

    fn check_logs(input: &[&str], expected: &[&str], truncated: bool) {
        let logs = Logs::capped(input);
        assert_eq!(logs.lines(), expected, "input {input:?}");
        assert_eq!(logs.truncated(), truncated, "input {input:?}");
    }

    #[test]
    fn cleaning_copies_printable_lines_whole_and_loops_over_the_rest() {
        // The character loop alone, as `clean` was before its fast path.
        fn by_char(raw: &str, max: usize, keep: impl Fn(char) -> bool) -> (String, bool) {
            let mut out = String::new();
            for c in raw.chars().filter(|&c| keep(c) || !c.is_control()) {
                if out.len() + c.len_utf8() > max {
                    return (out, true);
                }
                out.push(c);
            }
            (out, false)
        }
        let samples = [
            "",
            "plain",
            "tab\there",
            "del\u{7f}",
            "nul\0",
            "esc\u{1b}[2J",
            "c1\u{85}x",
            "é",
            "a\u{9f}b",
            "~ !",
            "\r\n",
            "x\u{200b}y",
        ];
        for sample in samples {
            for max in [0, 1, 2, 3, 4, 5, 6, 64] {
                for keep_tab in [false, true] {
                    let keep = |c: char| keep_tab && c == '\t';
                    assert_eq!(
                        clean(sample, max, keep),
                        by_char(sample, max, keep),
                        "{sample:?} max {max} keep tab {keep_tab}"
                    );
                }
            }
        }
    }

    #[test]
    fn logs_are_cleaned_and_capped() {
        check_logs(&[], &[], false);
        check_logs(&["a\tb", "c"], &["a\tb", "c"], false);
        check_logs(&["a\rb\0c\u{7f}d\u{85}e"], &["abcde"], false);
        check_logs(&["a\u{1b}[2Jd"], &["a[2Jd"], false);
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
    fn owned_logs_and_hostnames_are_capped_the_same() {
        let long = "é".repeat(MAX_LOG_LINE_BYTES);
        let many: Vec<String> = (0..80).map(|i| format!("line {i}")).collect();
        let big: Vec<String> = (0..40)
            .map(|i| format!("{i:04}{}", "x".repeat(1000)))
            .collect();
        let cases: Vec<Vec<String>> = vec![
            Vec::new(),
            vec!["a\tb".into(), "c".into()],
            vec!["a\rb\0c\u{7f}d\u{85}e".into()],
            vec!["".into(), "\r".into(), "x".into()],
            vec![long, "plain".into()],
            vec!["x".repeat(MAX_LOG_LINE_BYTES + 1)],
            many,
            big,
        ];
        for lines in cases {
            assert_eq!(Logs::capped_owned(lines.clone()), Logs::capped(&lines));
        }
        for name in [
            "web-1",
            "  web-1\n",
            "a\u{1b}b",
            "\u{1b} web-2 \t",
            "",
            "hôte",
            &"h".repeat(300),
        ] {
            assert_eq!(clean_hostname_owned(name.to_owned()), clean_hostname(name));
        }
    }

    #[test]
    fn logs_deserialize_through_the_caps() {
        let json = serde_json::json!({"lines": vec!["x\u{1b}[2Jy"; 60]});
        let logs: Logs = serde_json::from_value(json).expect("valid");
        assert_eq!(logs.lines().len(), MAX_LOG_LINES);
        assert_eq!(logs.lines()[0], "x[2Jy");
        assert!(logs.truncated());
        let round: Logs = serde_json::from_str(
            &serde_json::to_string(&Logs::capped(["a", "b"])).expect("serialize"),
        )
        .expect("back");
        assert_eq!(round, Logs::capped(["a", "b"]));
    }

    #[test]
    fn hostnames_are_cleaned() {
        assert_eq!(clean_hostname("  web-1\n"), "web-1");
        assert_eq!(clean_hostname("a\u{1b}b"), "ab");
        assert_eq!(clean_hostname("\u{1b} web-2 \t"), "web-2");
        assert_eq!(clean_hostname(&"h".repeat(300)).len(), MAX_HOSTNAME_BYTES);
    }

    #[test]
    fn ranges_coalesce() {
        let r = |first, last| SeqRange { first, last };
        assert_eq!(
            SeqRange::coalesce(vec![r(10, 12), r(1, 3), r(4, 5), r(11, 20), r(30, 30)]),
            [r(1, 5), r(10, 20), r(30, 30)]
        );
        assert_eq!(r(4, 6).count(), 3);
        assert!(r(4, 6).contains(6) && !r(4, 6).contains(7));
    }

    #[test]
    fn ban_durations_follow_fail2ban() {
        assert_eq!(BanDuration::from_seconds(-1), Some(BanDuration::Permanent));
        assert_eq!(BanDuration::from_seconds(0), Some(BanDuration::Seconds(0)));
        assert_eq!(BanDuration::from_seconds(-5), None);
        assert_eq!(BanDuration::Seconds(600).as_seconds(), 600);
        assert_eq!(
            serde_json::to_string(&BanDuration::Permanent)
                .ok()
                .as_deref(),
            Some("-1")
        );
        assert!(serde_json::from_str::<BanDuration>("-2").is_err());
    }

    #[test]
    fn gap_reasons_read_unknown_as_other() {
        for reason in [GapReason::Overflow, GapReason::Corruption] {
            assert_eq!(GapReason::parse(reason.as_str()), reason);
            let json = serde_json::to_string(&reason).expect("serialize");
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        assert_eq!(GapReason::parse("meteor"), GapReason::Other);
        assert_eq!(
            serde_json::from_str::<GapReason>("\"meteor\"").ok(),
            Some(GapReason::Other)
        );
    }
}
