//! Set arithmetic on the networks a feed lists, each with the time its ban ends: protected networks
//! subtracted (a listed network that overlaps one is split around it), entries inside another
//! dropped, and, on request, neighbours merged into the smallest set of CIDRs that covers exactly
//! the same addresses. Pure functions.

use chrono::{DateTime, Utc};
use ipnet::IpNet;

/// One listed network and when its ban ends (`None`: it lasts until an unban).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub net: IpNet,
    pub until: Option<DateTime<Utc>>,
}

/// The later of two ends, `None` (no end) winning.
fn later(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    }
}

/// `net` without the addresses of `protected`: `net` itself when they do not overlap, nothing when
/// a protected network covers it, otherwise the CIDRs of `net` around the protected ones.
pub fn subtract(net: IpNet, protected: &[IpNet]) -> Vec<IpNet> {
    let overlapping: Vec<IpNet> = protected
        .iter()
        .copied()
        .filter(|p| p.contains(&net) || net.contains(p))
        .collect();
    let mut out = Vec::new();
    split_around(net, &overlapping, &mut out);
    out
}

fn split_around(net: IpNet, protected: &[IpNet], out: &mut Vec<IpNet>) {
    if protected.iter().any(|p| p.contains(&net)) {
        return;
    }
    if !protected.iter().any(|p| net.contains(p)) {
        out.push(net);
        return;
    }
    // A protected network lies strictly inside: halve and look again.
    let prefix = net.prefix_len() + 1;
    if let Ok(halves) = net.subnets(prefix) {
        for half in halves {
            split_around(half, protected, out);
        }
    }
}

/// Sorts entries, merges duplicates and drops every entry that lies inside another (keeping the
/// later end), so an nftables interval set takes them all.
pub fn normalize(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(|a, b| {
        (a.net.addr(), a.net.prefix_len()).cmp(&(b.net.addr(), b.net.prefix_len()))
    });
    let mut out: Vec<Entry> = Vec::with_capacity(entries.len());
    for entry in entries {
        match out.last_mut() {
            Some(last) if last.net.contains(&entry.net) => {
                last.until = later(last.until, entry.until);
            }
            _ => out.push(entry),
        }
    }
    out
}

/// The smallest set of CIDRs covering exactly the addresses of `entries`; a merged network ends
/// when the last of its parts ends. Input in any order.
pub fn aggregate(entries: Vec<Entry>) -> Vec<Entry> {
    let mut stack: Vec<Entry> = Vec::with_capacity(entries.len());
    for entry in normalize(entries) {
        stack.push(entry);
        // Two siblings on top (the two halves of one network) become that network.
        while stack.len() >= 2 {
            let (a, b) = (stack[stack.len() - 2], stack[stack.len() - 1]);
            let prefix = a.net.prefix_len();
            if prefix == 0 || prefix != b.net.prefix_len() {
                break;
            }
            let (Some(pa), Some(pb)) = (a.net.supernet(), b.net.supernet()) else {
                break;
            };
            if pa != pb || a.net == b.net {
                break;
            }
            stack.truncate(stack.len() - 2);
            stack.push(Entry {
                net: pa,
                until: later(a.until, b.until),
            });
        }
    }
    stack
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(raw: &str) -> IpNet {
        raw.parse()
            .or_else(|_| raw.parse::<std::net::IpAddr>().map(IpNet::from))
            .expect(raw)
    }

    fn nets(raw: &[&str]) -> Vec<IpNet> {
        raw.iter().map(|r| net(r)).collect()
    }

    fn entries(raw: &[&str]) -> Vec<Entry> {
        raw.iter()
            .map(|r| Entry {
                net: net(r),
                until: None,
            })
            .collect()
    }

    fn shown(entries: &[Entry]) -> Vec<String> {
        entries.iter().map(|e| e.net.to_string()).collect()
    }

    #[test]
    fn subtraction_splits_a_network_around_a_protected_one() {
        assert_eq!(
            subtract(net("192.0.2.0/30"), &nets(&["192.0.2.1/32"])),
            nets(&["192.0.2.0/32", "192.0.2.2/31"])
        );
        assert_eq!(
            subtract(net("192.0.2.0/24"), &nets(&["192.0.2.128/25"])),
            nets(&["192.0.2.0/25"])
        );
        assert_eq!(
            subtract(net("2001:db8::/126"), &nets(&["2001:db8::3/128"])),
            nets(&["2001:db8::/127", "2001:db8::2/128"])
        );
    }

    #[test]
    fn subtraction_drops_what_a_protected_network_covers_and_keeps_the_rest() {
        assert!(subtract(net("192.0.2.7/32"), &nets(&["192.0.2.0/24"])).is_empty());
        assert!(subtract(net("192.0.2.0/24"), &nets(&["192.0.2.0/24"])).is_empty());
        assert_eq!(
            subtract(
                net("198.51.100.7/32"),
                &nets(&["192.0.2.0/24", "2001:db8::/32"])
            ),
            nets(&["198.51.100.7/32"])
        );
    }

    #[test]
    fn subtraction_of_two_protected_addresses_leaves_the_fewest_networks() {
        let left = subtract(net("10.0.0.0/29"), &nets(&["10.0.0.0/32", "10.0.0.7/32"]));
        assert_eq!(
            left,
            nets(&["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"])
        );
    }

    #[test]
    fn normalizing_drops_entries_inside_others() {
        let out = normalize(entries(&[
            "192.0.2.7",
            "192.0.2.0/24",
            "192.0.2.9",
            "198.51.100.1",
            "198.51.100.1",
            "2001:db8::1",
        ]));
        assert_eq!(
            shown(&out),
            ["192.0.2.0/24", "198.51.100.1/32", "2001:db8::1/128"]
        );
    }

    #[test]
    fn aggregation_merges_siblings_into_the_smallest_cover() {
        let out = aggregate(entries(&[
            "192.0.2.0",
            "192.0.2.1",
            "192.0.2.2",
            "192.0.2.3",
        ]));
        assert_eq!(shown(&out), ["192.0.2.0/30"]);
        let out = aggregate(entries(&["192.0.2.1", "192.0.2.2"]));
        assert_eq!(shown(&out), ["192.0.2.1/32", "192.0.2.2/32"]);
        let out = aggregate(entries(&[
            "192.0.2.0/25",
            "192.0.2.128/26",
            "192.0.2.192/26",
            "192.0.2.5",
        ]));
        assert_eq!(shown(&out), ["192.0.2.0/24"]);
        let out = aggregate(entries(&[
            "2001:db8::",
            "2001:db8::1",
            "10.0.0.0",
            "10.0.0.1",
        ]));
        assert_eq!(shown(&out), ["10.0.0.0/31", "2001:db8::/127"]);
    }

    #[test]
    fn a_merged_network_ends_with_its_last_part() {
        let t = |s: i64| DateTime::from_timestamp(s, 0);
        let merged = aggregate(vec![
            Entry {
                net: net("192.0.2.0"),
                until: t(100),
            },
            Entry {
                net: net("192.0.2.1"),
                until: t(200),
            },
        ]);
        assert_eq!(
            merged,
            vec![Entry {
                net: net("192.0.2.0/31"),
                until: t(200)
            }]
        );
        let forever = aggregate(vec![
            Entry {
                net: net("192.0.2.0"),
                until: t(100),
            },
            Entry {
                net: net("192.0.2.1"),
                until: None,
            },
        ]);
        assert_eq!(forever[0].until, None);
    }
}
