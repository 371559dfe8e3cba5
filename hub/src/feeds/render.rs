//! A feed's entries in the formats edge firewalls read: plain text (one address or network per line,
//! pfSense and OPNsense URL tables), an nftables script (`nft -f`), an `ipset restore` file and a
//! MikroTik RouterOS script. Each file replaces what an earlier load of the same feed left, and
//! gives every entry that has an end the time left as its timeout. Pure functions.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};

use super::cidr::Entry;
use crate::domain::feeds::{FeedFormat, FeedName};

/// The longest timeout ipset and RouterOS take (2^31 milliseconds, in seconds); an entry that
/// ends later is loaded without one and leaves at the next load after its end.
pub const MAX_TIMEOUT_SECS: i64 = 2_147_483;
/// nftables elements per `add element` statement.
const NFT_CHUNK: usize = 1024;

/// The `Content-Type` of a format.
pub fn content_type(_format: FeedFormat) -> &'static str {
    // Every format is a text file its consumer reads as such.
    "text/plain; charset=utf-8"
}

/// A strong entity tag of the listed set: the same entries with the same ends give the same tag,
/// whenever the body was rendered.
pub fn etag(format: FeedFormat, entries: &[Entry]) -> String {
    let mut hash = Sha256::new();
    hash.update(format.as_str().as_bytes());
    for entry in entries {
        hash.update(entry.net.to_string().as_bytes());
        hash.update(entry.until.map_or(-1, |t| t.timestamp()).to_le_bytes());
    }
    let digest = hash.finalize();
    format!("\"{}\"", hex::encode(&digest[..12]))
}

/// The body of `entries` in `format`, with timeouts counted from `now`.
pub fn render(
    format: FeedFormat,
    name: &FeedName,
    entries: &[Entry],
    now: DateTime<Utc>,
) -> String {
    let mut out = String::with_capacity(entries.len() * 40 + 256);
    let stamp = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    // Writing into a String cannot fail.
    let _ = writeln!(
        out,
        "# banhub feed {name}: {} entries at {stamp}",
        entries.len()
    );
    let (v4, v6): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| e.net.addr().is_ipv4());
    match format {
        FeedFormat::Txt => {
            for entry in entries {
                let _ = writeln!(out, "{}", shown(entry));
            }
        }
        FeedFormat::Nft => {
            let base = format!("bh_{}", name.as_str().replace('-', "_"));
            out.push_str("add table inet banhub\n");
            for (family, list) in [("ipv4_addr", &v4), ("ipv6_addr", &v6)] {
                let set = format!("{base}_{}", if family == "ipv4_addr" { "v4" } else { "v6" });
                let _ = writeln!(
                    out,
                    "add set inet banhub {set} {{ type {family}; flags interval, timeout; }}"
                );
                let _ = writeln!(out, "flush set inet banhub {set}");
                for chunk in list.chunks(NFT_CHUNK) {
                    let _ = write!(out, "add element inet banhub {set} {{ ");
                    for (i, entry) in chunk.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        out.push_str(&shown(entry));
                        if let Some(secs) = timeout(entry, now) {
                            let _ = write!(out, " timeout {secs}s");
                        }
                    }
                    out.push_str(" }\n");
                }
            }
        }
        FeedFormat::Ipset => {
            for (family, suffix, list) in [("inet", "4", &v4), ("inet6", "6", &v6)] {
                let set = format!("bh-{name}-{suffix}");
                let maxelem = list.len().next_power_of_two().max(65_536);
                let _ = writeln!(
                    out,
                    "create {set} hash:net family {family} timeout 0 maxelem {maxelem} -exist"
                );
                let _ = writeln!(out, "flush {set}");
                for entry in list.iter() {
                    let _ = write!(out, "add {set} {}", shown(entry));
                    if let Some(secs) = timeout(entry, now) {
                        let _ = write!(out, " timeout {secs}");
                    }
                    out.push_str(" -exist\n");
                }
            }
        }
        FeedFormat::Rsc => {
            let list = format!("banhub-{name}");
            for (menu, entries) in [("/ip", &v4), ("/ipv6", &v6)] {
                let _ = writeln!(out, "{menu} firewall address-list");
                let _ = writeln!(out, "remove [find list=\"{list}\"]");
                for entry in entries.iter() {
                    let _ = write!(out, "add list=\"{list}\" address={}", shown(entry));
                    if let Some(secs) = timeout(entry, now) {
                        let _ = write!(out, " timeout={}", routeros_time(secs));
                    }
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// An address without its `/32` or `/128`, a network with its prefix.
fn shown(entry: &Entry) -> String {
    let net = entry.net;
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// The whole seconds left of an entry's ban (at least one), if it ends within what the firewalls
/// take.
fn timeout(entry: &Entry, now: DateTime<Utc>) -> Option<i64> {
    let until = entry.until?;
    let millis = (until - now).num_milliseconds().max(1);
    let secs = (millis + 999) / 1000;
    (secs <= MAX_TIMEOUT_SECS).then_some(secs)
}

/// RouterOS's time: `1d02:03:04`.
fn routeros_time(secs: i64) -> String {
    let (d, rest) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    if d > 0 {
        format!("{d}d{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::IpNet;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    fn entries() -> Vec<Entry> {
        let e = |raw: &str, until: Option<i64>| Entry {
            net: raw
                .parse()
                .or_else(|_| raw.parse::<std::net::IpAddr>().map(IpNet::from))
                .expect(raw),
            until: until.map(at),
        };
        vec![
            e("192.0.2.7", Some(1_600)),
            e("198.51.100.0/24", None),
            e("2001:db8::1", Some(1_000 + 90_061)),
        ]
    }

    fn body(format: FeedFormat) -> Vec<String> {
        let name = FeedName::parse("edge-1").expect("name");
        render(format, &name, &entries(), at(1_000))
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn plain_text_is_one_entry_per_line_under_a_comment() {
        let name = FeedName::parse("edge-1").expect("name");
        let text = render(FeedFormat::Txt, &name, &entries(), at(1_000));
        assert!(text.starts_with("# banhub feed edge-1: 3 entries at 1970-01-01T00:16:40Z\n"));
        assert_eq!(
            body(FeedFormat::Txt),
            ["192.0.2.7", "198.51.100.0/24", "2001:db8::1"]
        );
    }

    #[test]
    fn nftables_replaces_both_sets_with_timeouts() {
        assert_eq!(
            body(FeedFormat::Nft),
            [
                "add table inet banhub",
                "add set inet banhub bh_edge_1_v4 { type ipv4_addr; flags interval, timeout; }",
                "flush set inet banhub bh_edge_1_v4",
                "add element inet banhub bh_edge_1_v4 { 192.0.2.7 timeout 600s, 198.51.100.0/24 }",
                "add set inet banhub bh_edge_1_v6 { type ipv6_addr; flags interval, timeout; }",
                "flush set inet banhub bh_edge_1_v6",
                "add element inet banhub bh_edge_1_v6 { 2001:db8::1 timeout 90061s }",
            ]
        );
    }

    #[test]
    fn ipset_creates_flushes_and_adds_with_timeouts() {
        assert_eq!(
            body(FeedFormat::Ipset),
            [
                "create bh-edge-1-4 hash:net family inet timeout 0 maxelem 65536 -exist",
                "flush bh-edge-1-4",
                "add bh-edge-1-4 192.0.2.7 timeout 600 -exist",
                "add bh-edge-1-4 198.51.100.0/24 -exist",
                "create bh-edge-1-6 hash:net family inet6 timeout 0 maxelem 65536 -exist",
                "flush bh-edge-1-6",
                "add bh-edge-1-6 2001:db8::1 timeout 90061 -exist",
            ]
        );
    }

    #[test]
    fn routeros_replaces_both_address_lists() {
        assert_eq!(
            body(FeedFormat::Rsc),
            [
                "/ip firewall address-list",
                "remove [find list=\"banhub-edge-1\"]",
                "add list=\"banhub-edge-1\" address=192.0.2.7 timeout=00:10:00",
                "add list=\"banhub-edge-1\" address=198.51.100.0/24",
                "/ipv6 firewall address-list",
                "remove [find list=\"banhub-edge-1\"]",
                "add list=\"banhub-edge-1\" address=2001:db8::1 timeout=1d01:01:01",
            ]
        );
    }

    #[test]
    fn empty_feeds_still_load() {
        let name = FeedName::parse("e").expect("name");
        let nft = render(FeedFormat::Nft, &name, &[], at(0));
        assert!(!nft.contains("add element"));
        assert!(nft.contains("flush set inet banhub bh_e_v6"));
    }

    #[test]
    fn the_tag_follows_the_set_not_the_time_of_rendering() {
        let a = etag(FeedFormat::Txt, &entries());
        assert_eq!(a, etag(FeedFormat::Txt, &entries()));
        assert_ne!(a, etag(FeedFormat::Nft, &entries()));
        assert_ne!(a, etag(FeedFormat::Txt, &entries()[1..]));
        let far = [Entry {
            until: Some(at(1_000 + MAX_TIMEOUT_SECS + 1)),
            ..entries()[0]
        }];
        assert_eq!(body_of(&far), ["192.0.2.7"]);
    }

    fn body_of(entries: &[Entry]) -> Vec<String> {
        let name = FeedName::parse("e").expect("name");
        render(FeedFormat::Rsc, &name, entries, at(1_000))
            .lines()
            .filter_map(|l| l.strip_prefix("add list=\"banhub-e\" address="))
            .map(str::to_owned)
            .collect()
    }

    /// Reads a RouterOS time (`[<d>d]HH:MM:SS`, hours below 24) strictly; its seconds.
    fn routeros_seconds(text: &str) -> Result<i64, String> {
        let (days, clock) = match text.split_once('d') {
            Some((d, rest)) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => {
                (d.parse::<i64>().map_err(|e| e.to_string())?, rest)
            }
            Some(_) => return Err(format!("bad days in {text:?}")),
            None => (0, text),
        };
        let parts: Vec<&str> = clock.split(':').collect();
        let [h, m, s] = parts.as_slice() else {
            return Err(format!("not HH:MM:SS: {text:?}"));
        };
        let field = |part: &str, below: i64| -> Result<i64, String> {
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("not two digits: {part:?} in {text:?}"));
            }
            let n: i64 = part
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())?;
            if n >= below {
                return Err(format!("{n} out of range in {text:?}"));
            }
            Ok(n)
        };
        Ok(days * 86_400 + field(h, 24)? * 3600 + field(m, 60)? * 60 + field(s, 60)?)
    }

    /// The script read with RouterOS's grammar for what it may hold, strictly (a unit test: no
    /// RouterOS runs here): comments; a menu line, `/ip` then `/ipv6`; in each, the `remove` of the
    /// list, then `add` commands whose list is a quoted string without a character RouterOS would
    /// read inside quotes (`"`, `\`, `$`), whose address is of the menu's family, and whose optional
    /// `timeout=` is a RouterOS time. Returns (menu, address, timeout seconds) per `add`.
    fn parse_routeros(script: &str, list: &str) -> Vec<(String, String, Option<i64>)> {
        let quoted = format!("\"{list}\"");
        assert!(
            !list.contains(['"', '\\', '$', '\n']),
            "the list name needs escaping: {list:?}"
        );
        let mut menu: Option<&str> = None;
        let mut menus = Vec::new();
        let mut removed = false;
        let mut adds = Vec::new();
        for (n, line) in script.lines().enumerate() {
            let fail = |why: &str| panic!("line {}: {why}: {line:?}", n + 1);
            if line.starts_with('#') {
                continue;
            }
            if line.trim() != line || line.is_empty() {
                fail("stray white space or an empty line");
            }
            if let Some(rest) = line.strip_suffix(" firewall address-list") {
                if !matches!(rest, "/ip" | "/ipv6") {
                    fail("unknown menu");
                }
                menu = Some(if rest == "/ip" { "/ip" } else { "/ipv6" });
                menus.push(rest.to_owned());
                removed = false;
                continue;
            }
            let Some(current) = menu else {
                fail("a command before any menu");
                continue;
            };
            if line == format!("remove [find list={quoted}]") {
                if removed {
                    fail("a second remove");
                }
                removed = true;
                continue;
            }
            let Some(args) = line.strip_prefix("add ") else {
                fail("neither remove nor add");
                continue;
            };
            if !removed {
                fail("an add before the list's remove");
            }
            let mut words = args.split(' ');
            if words.next() != Some(format!("list={quoted}").as_str()) {
                fail("the add names another list");
            }
            let Some(address) = words.next().and_then(|w| w.strip_prefix("address=")) else {
                fail("no address");
                continue;
            };
            let (ip, prefix) = match address.split_once('/') {
                Some((ip, prefix)) => (ip, Some(prefix)),
                None => (address, None),
            };
            let ip: std::net::IpAddr = ip
                .parse()
                .unwrap_or_else(|_| panic!("line {}: bad address {address:?}", n + 1));
            if ip.is_ipv4() != (current == "/ip") {
                fail("an address of the other family");
            }
            if let Some(prefix) = prefix {
                let bits: u8 = prefix
                    .parse()
                    .unwrap_or_else(|_| panic!("bad prefix in {line:?}"));
                let net = IpNet::new(ip, bits).unwrap_or_else(|_| panic!("bad prefix in {line:?}"));
                if net.trunc() != net || bits == net.max_prefix_len() {
                    fail("host bits set, or a host written as a network");
                }
            }
            let timeout = match words.next() {
                None => None,
                Some(word) => {
                    let Some(time) = word.strip_prefix("timeout=") else {
                        fail("an unknown argument");
                        continue;
                    };
                    Some(routeros_seconds(time).unwrap_or_else(|e| panic!("line {}: {e}", n + 1)))
                }
            };
            if words.next().is_some() {
                fail("trailing arguments");
            }
            adds.push((current.to_owned(), address.to_owned(), timeout));
        }
        assert_eq!(menus, ["/ip", "/ipv6"], "both menus, IPv4 first");
        adds
    }

    #[test]
    fn the_routeros_script_follows_routeros_grammar_strictly() {
        let e = |raw: &str, until: Option<i64>| Entry {
            net: raw
                .parse()
                .or_else(|_| raw.parse::<std::net::IpAddr>().map(IpNet::from))
                .expect(raw),
            until: until.map(at),
        };
        let now = 1_000;
        let entries = vec![
            e("192.0.2.7", Some(now + 1)),
            e("192.0.2.8", Some(now + 59)),
            e("192.0.2.9", Some(now + 86_399)),
            e("192.0.2.10", Some(now + 86_400)),
            e("198.51.100.0/24", None),
            e("203.0.113.0/25", Some(now + MAX_TIMEOUT_SECS)),
            // Past the longest timeout: loaded without one.
            e("203.0.113.200", Some(now + MAX_TIMEOUT_SECS + 1)),
            e("2001:db8::1", Some(now + 90_061)),
            e("2001:db8:1::/48", None),
            e("2001:db8:2::/64", Some(now + 3_600)),
        ];
        let name = FeedName::parse("edge_1-fw").expect("name");
        let script = render(FeedFormat::Rsc, &name, &entries, at(now));
        let adds = parse_routeros(&script, "banhub-edge_1-fw");
        let want: Vec<(String, String, Option<i64>)> = [
            ("/ip", "192.0.2.7", Some(1)),
            ("/ip", "192.0.2.8", Some(59)),
            ("/ip", "192.0.2.9", Some(86_399)),
            ("/ip", "192.0.2.10", Some(86_400)),
            ("/ip", "198.51.100.0/24", None),
            ("/ip", "203.0.113.0/25", Some(MAX_TIMEOUT_SECS)),
            ("/ip", "203.0.113.200", None),
            ("/ipv6", "2001:db8:2::/64", Some(3_600)),
            ("/ipv6", "2001:db8::1", Some(90_061)),
            ("/ipv6", "2001:db8:1::/48", None),
        ]
        .iter()
        .map(|(m, a, t)| ((*m).to_owned(), (*a).to_owned(), *t))
        .collect();
        let mut got = adds.clone();
        got.sort();
        let mut want_sorted = want.clone();
        want_sorted.sort();
        assert_eq!(got, want_sorted, "{script}");
        // The time grammar itself refuses what RouterOS would not read.
        for bad in [
            "1:00:00",
            "00:60:00",
            "24:00:00",
            "d00:00:01",
            "1d1:00:00",
            "00:00",
        ] {
            assert!(routeros_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(routeros_seconds("24d20:31:23"), Ok(MAX_TIMEOUT_SECS));
        // An empty feed is still both menus with their removes.
        assert!(
            parse_routeros(
                &render(FeedFormat::Rsc, &name, &[], at(now)),
                "banhub-edge_1-fw"
            )
            .is_empty()
        );
    }
}
