//! Applied means running: what the files say a jail runs with, set beside what fail2ban reports
//! it runs with, and the differences between the two.
//!
//! The files' side is read from the [`EffectiveConfig`] the way fail2ban's `JailReader` turns it
//! into commands: action names from `action` (an `actname=` option names the action, a `.py`
//! file is named without its extension), `ignoreip` split on white space and commas,
//! `findtime`/`bantime` through `MyTime.str2seconds`, and log paths that exist (fail2ban skips
//! missing ones). The filter is compared by its failure expressions: fail2ban's own reading of
//! the files (`fail2ban-client -d`) against the ones it runs, whose `<HOST>`-like tags it has
//! expanded, so the text between the tags must match. A setting the files give in a form this module cannot evaluate (a glob, an
//! arithmetic time) is not compared rather than reported as a difference.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;

use super::content;
use super::reader::EffectiveConfig;
use crate::fail2ban::RunningJail;

/// The compared settings, by the name fail2ban's `get` uses.
pub const ACTIONS: &str = "actions";
pub const IGNORE_IP: &str = "ignoreip";
pub const IGNORE_COMMAND: &str = "ignorecommand";
pub const MAX_RETRY: &str = "maxretry";
pub const FIND_TIME: &str = "findtime";
pub const BAN_TIME: &str = "bantime";
pub const LOG_PATH: &str = "logpath";
pub const FAIL_REGEX: &str = "failregex";

/// fail2ban's own values of the thresholds a jail starts with when no file sets them.
const DEFAULT_MAX_RETRY: i64 = 3;
const DEFAULT_FIND_TIME: i64 = 600;
const DEFAULT_BAN_TIME: i64 = 600;

/// What the files say a jail runs with; `None` where the value is not compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileJail {
    pub actions: Option<BTreeSet<String>>,
    pub ignore_ip: Option<BTreeSet<String>>,
    pub ignore_command: Option<Option<String>>,
    pub max_retry: Option<i64>,
    pub find_time: Option<i64>,
    pub ban_time: Option<i64>,
    pub log_paths: Option<BTreeSet<String>>,
    /// The filter's failure expressions as fail2ban reads the files, tags not expanded; `None`
    /// when fail2ban could not read them (set by the caller from fail2ban's dump).
    pub fail_regex: Option<Vec<String>>,
}

/// One setting fail2ban runs differently from what the files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub jail: String,
    pub setting: &'static str,
    /// The files' value, in the same normalized form as `running`.
    pub file: String,
    pub running: String,
}

/// A running jail beside its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailState {
    pub jail: String,
    pub running: RunningJail,
    /// Empty when fail2ban runs what the files say (or no file defines the jail).
    pub drift: Vec<Drift>,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "jail {}: {} is {:?} in the files but fail2ban runs {:?}",
            self.jail, self.setting, self.file, self.running
        )
    }
}

impl FileJail {
    /// The jail as the files configure it; `None` when no file defines it.
    pub fn from_config(config: &EffectiveConfig, jail: &str) -> Option<Self> {
        let info = config.jail(jail)?;
        let value = |key: &str| -> Result<Option<String>, ()> {
            match config.get(jail, key) {
                None => Ok(None),
                Some(setting) => setting.value.map(Some).map_err(drop),
            }
        };
        let systemd = info.backend.trim().starts_with("systemd");
        Some(Self {
            actions: value("action")
                .ok()
                .map(|v| action_names(v.as_deref().unwrap_or_default())),
            ignore_ip: value("ignoreip")
                .ok()
                .and_then(|v| ignore_entries(&v.unwrap_or_default())),
            ignore_command: value("ignorecommand")
                .ok()
                .map(|v| v.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty())),
            max_retry: number(value("maxretry"), DEFAULT_MAX_RETRY, |v| {
                v.trim().parse().ok()
            }),
            find_time: number(value("findtime"), DEFAULT_FIND_TIME, seconds),
            ban_time: number(value("bantime"), DEFAULT_BAN_TIME, seconds),
            log_paths: if systemd {
                Some(BTreeSet::new())
            } else {
                value("logpath")
                    .ok()
                    .and_then(|v| existing_log_paths(v.as_deref().unwrap_or_default()))
            },
            fail_regex: None,
        })
    }
}

/// The running values in the form [`compare`] reports them, by setting.
pub fn running_values(running: &RunningJail) -> BTreeMap<String, String> {
    [
        (ACTIONS, join(running.actions.iter().cloned().collect())),
        (IGNORE_IP, join(ignore_set(&running.ignore_ip))),
        (
            IGNORE_COMMAND,
            running.ignore_command.clone().unwrap_or_default(),
        ),
        (MAX_RETRY, running.max_retry.to_string()),
        (FIND_TIME, running.find_time.to_string()),
        (BAN_TIME, running.ban_time.to_string()),
        (LOG_PATH, join(running.log_paths.iter().cloned().collect())),
        (FAIL_REGEX, running.fail_regex.join("\n")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Every compared setting whose running value differs from the files' value.
pub fn compare(jail: &str, files: &FileJail, running: &RunningJail) -> Vec<Drift> {
    let mut drift = Vec::new();
    let mut check = |setting: &'static str, file: Option<String>, run: String| {
        if let Some(file) = file
            && file != run
        {
            drift.push(Drift {
                jail: jail.to_owned(),
                setting,
                file,
                running: run,
            });
        }
    };
    check(
        ACTIONS,
        files.actions.clone().map(join),
        join(running.actions.iter().cloned().collect()),
    );
    check(
        IGNORE_IP,
        files.ignore_ip.clone().map(join),
        join(ignore_set(&running.ignore_ip)),
    );
    check(
        IGNORE_COMMAND,
        files.ignore_command.clone().map(Option::unwrap_or_default),
        running.ignore_command.clone().unwrap_or_default(),
    );
    check(
        MAX_RETRY,
        files.max_retry.map(|n| n.to_string()),
        running.max_retry.to_string(),
    );
    check(
        FIND_TIME,
        files.find_time.map(|n| n.to_string()),
        running.find_time.to_string(),
    );
    check(
        BAN_TIME,
        files.ban_time.map(|n| n.to_string()),
        running.ban_time.to_string(),
    );
    check(
        LOG_PATH,
        files.log_paths.clone().map(join),
        join(running.log_paths.iter().cloned().collect()),
    );
    if let Some(expected) = &files.fail_regex {
        let same = expected.len() == running.fail_regex.len()
            && expected
                .iter()
                .zip(&running.fail_regex)
                .all(|(e, r)| regex_matches(e, r));
        if !same {
            drift.push(Drift {
                jail: jail.to_owned(),
                setting: FAIL_REGEX,
                file: expected.join("\n"),
                running: running.fail_regex.join("\n"),
            });
        }
    }
    drift
}

/// Whether `running` is `expected` with its tags (`<HOST>`, `<F-USER>`, `</F-USER>`,
/// `{^LN-BEG}`, …) expanded: the text between the tags appears in order, anchored at both ends
/// (a tag stands for any text, so the filter's identity is checked, not each expansion).
fn regex_matches(expected: &str, running: &str) -> bool {
    let chunks = untagged(expected);
    let last = chunks.len().saturating_sub(1);
    let mut position = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        if chunk.is_empty() {
            continue;
        }
        if i == 0 {
            if !running.starts_with(chunk) {
                return false;
            }
            position = chunk.len();
        } else if i == last {
            return running.ends_with(chunk) && running.len() - chunk.len() >= position;
        } else {
            match running[position..].find(chunk) {
                Some(at) => position += at + chunk.len(),
                None => return false,
            }
        }
    }
    true
}

/// The text of a failure expression between its tags: a tag is `<NAME>` or `</NAME>` (letters,
/// digits, `_-./`) or `{^LN-…}`.
fn untagged(regex: &str) -> Vec<&str> {
    let bytes = regex.as_bytes();
    let mut chunks = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let end = match bytes[i] {
            b'<' => {
                let name_start = i + 1 + usize::from(bytes.get(i + 1) == Some(&b'/'));
                let len = bytes[name_start..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || b"_-./".contains(b))
                    .count();
                (len > 0 && bytes.get(name_start + len) == Some(&b'>'))
                    .then_some(name_start + len + 1)
            }
            b'{' if regex[i..].starts_with("{^LN-") => regex[i..].find('}').map(|e| i + e + 1),
            _ => None,
        };
        match end {
            Some(end) => {
                chunks.push(&regex[start..i]);
                start = end;
                i = end;
            }
            None => i += 1,
        }
    }
    chunks.push(&regex[start..]);
    chunks
}

/// A number the files set (parsed), or fail2ban's default when they do not; `None` when the
/// value cannot be resolved or parsed.
fn number(
    value: Result<Option<String>, ()>,
    default: i64,
    parse: impl Fn(&str) -> Option<i64>,
) -> Option<i64> {
    match value {
        Ok(None) => Some(default),
        Ok(Some(text)) => parse(&text),
        Err(()) => None,
    }
}

fn join(set: BTreeSet<String>) -> String {
    set.into_iter().collect::<Vec<_>>().join(" ")
}

/// The `ignoreip` entries, normalized; `None` when one reads a file (`file:/path`), whose
/// addresses fail2ban lists instead of the entry.
fn ignore_entries(value: &str) -> Option<BTreeSet<String>> {
    let entries: Vec<&str> = value
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .collect();
    if entries.iter().any(|e| e.starts_with("file:")) {
        return None;
    }
    Some(entries.into_iter().map(normalize_ip).collect())
}

fn ignore_set(entries: &[String]) -> BTreeSet<String> {
    entries.iter().map(|e| normalize_ip(e)).collect()
}

/// An address or network as fail2ban's `IPAddr` prints it: a network by its first address
/// (`127.0.0.1/8` → `127.0.0.0/8`), a single-host network as the address; names unchanged.
fn normalize_ip(entry: &str) -> String {
    if let Ok(net) = entry.parse::<IpNet>() {
        return if net.prefix_len() == net.max_prefix_len() {
            net.addr().to_string()
        } else {
            net.trunc().to_string()
        };
    }
    match entry.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => entry.to_owned(),
    }
}

/// Action names of an `action` value, as fail2ban names the actions it adds.
fn action_names(value: &str) -> BTreeSet<String> {
    content::action_entries(value)
        .iter()
        .filter_map(|entry| content::split_entry(entry))
        .map(|(name, options)| {
            option(options, "actname").unwrap_or_else(|| {
                name.strip_suffix(".py")
                    .map_or_else(|| name.to_owned(), str::to_owned)
            })
        })
        .collect()
}

/// The value of `key=` in an action's options, the bracketed groups after its name
/// (`[key="v"]`, `key='v'` or `key=v` up to `,` or the group's end).
fn option(options: &str, key: &str) -> Option<String> {
    let mut rest = options;
    loop {
        rest = rest.trim_start_matches(|c: char| matches!(c, ',' | '[' | ']') || c.is_whitespace());
        if rest.is_empty() {
            return None;
        }
        let (k, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, tail) = match after.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let body = &after[1..];
                let end = body.find(q)?;
                (&body[..end], &body[end + 1..])
            }
            _ => match after.find([',', ']']) {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        if k.trim() == key {
            return Some(value.trim().to_owned());
        }
        rest = tail;
    }
}

/// `MyTime.str2seconds` for sums of `<number><unit>` terms (`1h 30m`, `1d+2h`, `600`); `None`
/// for anything else it would evaluate.
pub(crate) fn seconds(text: &str) -> Option<i64> {
    const UNITS: [(&[&str], f64); 7] = [
        (&["days", "day", "da", "dd", "d"], 86_400.0),
        (&["weeks", "week", "wee", "we", "ww", "w"], 604_800.0),
        (&["months", "month", "mon", "mo"], 2_629_800.0),
        (&["years", "year", "yea", "ye", "yy", "y"], 31_557_600.0),
        (&["seconds", "second", "sec", "se", "ss", "s"], 1.0),
        (&["minutes", "minute", "min", "mi", "mm", "m"], 60.0),
        (&["hours", "hour", "hou", "ho", "hh", "h"], 3_600.0),
    ];
    let text = text.trim();
    if let Ok(n) = text.parse::<i64>() {
        return Some(n);
    }
    let mut total = 0.0f64;
    let mut terms = 0;
    for term in text
        .split(|c: char| c.is_whitespace() || c == '+')
        .filter(|t| !t.is_empty())
    {
        let split = term
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(term.len());
        let number: f64 = term[..split].parse().ok()?;
        let unit = term[split..].to_ascii_lowercase();
        let factor = if unit.is_empty() {
            1.0
        } else {
            UNITS
                .iter()
                .find(|(names, _)| names.contains(&unit.as_str()))?
                .1
        };
        total += number * factor;
        terms += 1;
    }
    // Whole seconds, as fail2ban stores them.
    (terms > 0).then_some(total as i64)
}

/// The log paths of a file backend that exist, without the `head`/`tail` option; `None` when a
/// path is a glob (fail2ban expands it at start).
fn existing_log_paths(value: &str) -> Option<BTreeSet<String>> {
    let mut paths = BTreeSet::new();
    for line in value.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = line
            .strip_suffix(" head")
            .or_else(|| line.strip_suffix(" tail"))
            .unwrap_or(line)
            .trim();
        if path.contains(['*', '?', '[']) {
            return None;
        }
        if Path::new(path).exists() {
            paths.insert(path.to_owned());
        }
    }
    Some(paths)
}

#[cfg(test)]
mod tests;
