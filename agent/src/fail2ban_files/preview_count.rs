//! The counting of a filter preview, pure: the matches `fail2ban-regex` printed (time and failure
//! id) grouped by address, which addresses reach `maxretry` within `findtime` over a sliding
//! window of their match times, the top addresses, and the `ignoreip` entry covering each.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

/// Most matches one preview keeps; the run stops at this many and says so.
pub const DEFAULT_MAX_MATCHES: usize = 1_000_000;
/// Most addresses listed as would-be bans (the total is always given).
pub const MAX_WOULD_BAN_LISTED: usize = 1_000;
/// Addresses in the top list.
pub const TOP_ADDRESSES: usize = 20;

/// The thresholds a preview counts under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Failures within `findtime_secs` that ban an address (at least 1).
    pub maxretry: u32,
    pub findtime_secs: u64,
}

/// The matches of a preview so far, by failure id.
#[derive(Debug, Default)]
pub struct Tally {
    times: HashMap<String, Vec<i64>>,
    matches: usize,
    first: Option<i64>,
    last: Option<i64>,
}

/// One address (or other failure id) with its counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressCount {
    pub id: String,
    pub matches: u64,
    /// Unix seconds of the match that first reaches `maxretry` within `findtime`.
    pub first_ban: Option<i64>,
    /// The `ignoreip` entry that covers it, as written.
    pub ignored_by: Option<String>,
}

/// What the matches amount to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counted {
    pub matches: u64,
    pub first_match: Option<i64>,
    pub last_match: Option<i64>,
    pub distinct: u64,
    /// Every id reaching `maxretry`, most matches first, at most [`MAX_WOULD_BAN_LISTED`].
    pub would_ban: Vec<AddressCount>,
    pub would_ban_total: u64,
    /// The ids with the most matches, most first, at most [`TOP_ADDRESSES`].
    pub top: Vec<AddressCount>,
}

impl Tally {
    /// Matches recorded.
    pub fn matches(&self) -> usize {
        self.matches
    }

    /// Records one line of `fail2ban-regex -o '<time> <fid>'`: `1795759201.0 192.0.2.10`.
    /// Returns `false` for a line that is not a match (a message of the tool).
    pub fn record_line(&mut self, line: &str) -> bool {
        let Some((time, id)) = line.trim_end().split_once(' ') else {
            return false;
        };
        let Ok(time) = time.parse::<f64>() else {
            return false;
        };
        let id = id.trim();
        if id.is_empty() || !time.is_finite() {
            return false;
        }
        #[allow(clippy::cast_possible_truncation)]
        self.record(time.floor() as i64, id);
        true
    }

    /// Records one match of `id` at `time` (Unix seconds).
    pub fn record(&mut self, time: i64, id: &str) {
        match self.times.get_mut(id) {
            Some(times) => times.push(time),
            None => {
                self.times.insert(id.to_owned(), vec![time]);
            }
        }
        self.matches += 1;
        self.first = Some(self.first.map_or(time, |t| t.min(time)));
        self.last = Some(self.last.map_or(time, |t| t.max(time)));
    }

    /// Counts under `thresholds`, each id checked against `ignoreip`.
    pub fn count(mut self, thresholds: Thresholds, ignoreip: &IgnoreList) -> Counted {
        let mut all: Vec<AddressCount> = self
            .times
            .drain()
            .map(|(id, mut times)| {
                times.sort_unstable();
                AddressCount {
                    ignored_by: ignoreip.covering(&id).map(str::to_owned),
                    matches: times.len() as u64,
                    first_ban: first_ban(&times, thresholds),
                    id,
                }
            })
            .collect();
        all.sort_by(|a, b| b.matches.cmp(&a.matches).then_with(|| a.id.cmp(&b.id)));
        let distinct = all.len() as u64;
        let top = all.iter().take(TOP_ADDRESSES).cloned().collect();
        let reaching: Vec<AddressCount> =
            all.into_iter().filter(|a| a.first_ban.is_some()).collect();
        Counted {
            matches: self.matches as u64,
            first_match: self.first,
            last_match: self.last,
            distinct,
            would_ban_total: reaching.len() as u64,
            would_ban: reaching.into_iter().take(MAX_WOULD_BAN_LISTED).collect(),
            top,
        }
    }
}

/// The time of the match at which `maxretry` matches first fall within `findtime` (sorted
/// `times`), as a sliding window: matches `i..=j` count when `times[j] - times[i] <= findtime`.
pub fn first_ban(times: &[i64], thresholds: Thresholds) -> Option<i64> {
    let needed = usize::try_from(thresholds.maxretry.max(1)).unwrap_or(usize::MAX);
    let findtime = i64::try_from(thresholds.findtime_secs).unwrap_or(i64::MAX);
    let mut start = 0;
    for (end, &time) in times.iter().enumerate() {
        while time.saturating_sub(times[start]) > findtime {
            start += 1;
        }
        if end + 1 - start >= needed {
            return Some(time);
        }
    }
    None
}

/// A jail's `ignoreip`: addresses and networks as fail2ban reads them; host names and other
/// entries that are not addresses are kept as written and cover nothing here.
#[derive(Debug, Clone, Default)]
pub struct IgnoreList {
    entries: Vec<(String, Option<IpNet>)>,
}

impl IgnoreList {
    /// Splits `ignoreip` on white space and commas, as fail2ban does.
    pub fn parse(value: &str) -> Self {
        let entries = value
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|e| !e.is_empty())
            .map(|entry| {
                let network = entry
                    .parse::<IpNet>()
                    .ok()
                    .or_else(|| entry.parse::<IpAddr>().ok().map(IpNet::from))
                    .map(unmapped);
                (entry.to_owned(), network)
            })
            .collect();
        Self { entries }
    }

    /// The entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(e, _)| e.as_str())
    }

    /// The first entry that covers `id`, when `id` is an address.
    pub fn covering(&self, id: &str) -> Option<&str> {
        let ip = id.parse::<IpAddr>().ok()?.to_canonical();
        self.entries
            .iter()
            .find(|(_, net)| net.is_some_and(|n| n.contains(&ip)))
            .map(|(e, _)| e.as_str())
    }
}

/// An IPv4-mapped IPv6 network read as IPv4, as fail2ban compares them.
fn unmapped(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len().saturating_sub(96))
                .unwrap_or(IpNet::V6(v6)),
            None => IpNet::V6(v6),
        },
        IpNet::V4(_) => net,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(times: &[i64], maxretry: u32, findtime_secs: u64, expected: Option<i64>) {
        let thresholds = Thresholds {
            maxretry,
            findtime_secs,
        };
        assert_eq!(
            first_ban(times, thresholds),
            expected,
            "{times:?} maxretry={maxretry} findtime={findtime_secs}"
        );
    }

    #[test]
    fn the_window_slides_over_the_match_times() {
        check(&[], 3, 600, None);
        check(&[0, 1], 3, 600, None);
        check(&[0, 1, 2], 3, 600, Some(2));
        // Spread wider than findtime: never three within it.
        check(&[0, 400, 800, 1200], 3, 600, None);
        // The window moves on: 400, 800 and 1000 fall within 600 s.
        check(&[0, 400, 800, 1000], 3, 600, Some(1000));
        // The edge counts, like fail2ban's own window.
        check(&[0, 300, 600], 3, 600, Some(600));
        check(&[0, 300, 601], 3, 600, None);
        check(&[5], 1, 0, Some(5));
        // maxretry 0 behaves as 1.
        check(&[7], 0, 10, Some(7));
        check(&[10, 10, 10], 3, 0, Some(10));
    }

    #[test]
    fn tool_lines_are_recorded_and_others_skipped() {
        let mut tally = Tally::default();
        assert!(tally.record_line("1795759201.0 192.0.2.10\n"));
        assert!(tally.record_line("1795759202.5 192.0.2.10"));
        assert!(tally.record_line("1795759203.0 2001:db8::7"));
        assert!(tally.record_line("1795759204.0 user@example host"));
        assert!(!tally.record_line("ERROR: No failure-id group"));
        assert!(!tally.record_line(""));
        assert!(!tally.record_line("nan 192.0.2.1"));
        assert_eq!(tally.matches(), 4);
        let counted = tally.count(
            Thresholds {
                maxretry: 2,
                findtime_secs: 10,
            },
            &IgnoreList::default(),
        );
        assert_eq!(counted.matches, 4);
        assert_eq!(counted.distinct, 3);
        assert_eq!(counted.first_match, Some(1_795_759_201));
        assert_eq!(counted.last_match, Some(1_795_759_204));
        assert_eq!(counted.would_ban_total, 1);
        assert_eq!(counted.would_ban[0].id, "192.0.2.10");
        assert_eq!(counted.would_ban[0].first_ban, Some(1_795_759_202));
        assert_eq!(counted.top[0].id, "192.0.2.10");
        assert_eq!(counted.top[0].matches, 2);
        assert_eq!(counted.top.len(), 3);
    }

    #[test]
    fn counts_are_ordered_and_ignoreip_named() {
        let mut tally = Tally::default();
        for (ip, n) in [("192.0.2.1", 5), ("198.51.100.7", 3), ("203.0.113.9", 1)] {
            for t in 0..n {
                tally.record(1_000 + t, ip);
            }
        }
        let ignore = IgnoreList::parse("127.0.0.1/8 ::1, 198.51.100.0/24 trusted.example");
        assert_eq!(
            ignore.entries().collect::<Vec<_>>(),
            ["127.0.0.1/8", "::1", "198.51.100.0/24", "trusted.example"]
        );
        let counted = tally.count(
            Thresholds {
                maxretry: 3,
                findtime_secs: 600,
            },
            &ignore,
        );
        let ids: Vec<&str> = counted.would_ban.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["192.0.2.1", "198.51.100.7"]);
        assert_eq!(counted.would_ban[0].ignored_by, None);
        assert_eq!(
            counted.would_ban[1].ignored_by.as_deref(),
            Some("198.51.100.0/24")
        );
        assert_eq!(counted.top.last().map(|a| a.matches), Some(1));
    }

    #[test]
    fn ignoreip_covers_mapped_and_loopback_addresses() {
        let ignore = IgnoreList::parse("127.0.0.1/8 ::1 ::ffff:192.0.2.0/120");
        assert_eq!(ignore.covering("127.0.0.5"), Some("127.0.0.1/8"));
        assert_eq!(ignore.covering("::1"), Some("::1"));
        assert_eq!(ignore.covering("192.0.2.44"), Some("::ffff:192.0.2.0/120"));
        assert_eq!(ignore.covering("::ffff:127.0.0.9"), Some("127.0.0.1/8"));
        assert_eq!(ignore.covering("198.51.100.1"), None);
        assert_eq!(ignore.covering("not-an-address"), None);
    }
}
