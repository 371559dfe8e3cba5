//! The hub's own addresses, which no ban may cover: its listeners' addresses (when not the
//! unspecified address), the literal IP of `grpc.advertise` and of `auth.public_url`, the loopback
//! addresses, and the machine's interface addresses as the kernel lists them in
//! `/proc/net/fib_trie` (IPv4) and `/proc/net/if_inet6` (IPv6). Read once at start-up.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::config::Config;

/// Every address of this hub known at start-up; `advertise` is the address agents dial.
pub fn discover(config: &Config, advertise: &str) -> Vec<IpAddr> {
    let mut found = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    for listen in [config.http.listen, config.grpc.listen] {
        if !listen.ip().is_unspecified() {
            found.push(listen.ip());
        }
    }
    found.extend(authority_ip(&config.grpc.advertise));
    found.extend(authority_ip(advertise));
    found.extend(url_ip(&config.auth.public_url));
    if let Ok(text) = std::fs::read_to_string("/proc/net/fib_trie") {
        found.extend(fib_trie_locals(&text).into_iter().map(IpAddr::V4));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/if_inet6") {
        found.extend(if_inet6_addresses(&text).into_iter().map(IpAddr::V6));
    }
    found.sort();
    found.dedup();
    found
}

/// The IP of a `host:port` (or `[v6]:port`) when the host is a literal address.
fn authority_ip(authority: &str) -> Option<IpAddr> {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.0,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.parse().ok()
}

/// The IP of a URL's host when it is a literal address.
fn url_ip(url: &str) -> Option<IpAddr> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The machine's own IPv4 addresses: the `/32 host LOCAL` entries of `/proc/net/fib_trie`, each
/// on the line after the address it belongs to.
fn fib_trie_locals(text: &str) -> Vec<Ipv4Addr> {
    let mut found = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            last = addr.parse().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(addr) = last
            && !found.contains(&addr)
        {
            found.push(addr);
        }
    }
    found
}

/// The machine's own IPv6 addresses: the first column (32 hex digits) of `/proc/net/if_inet6`.
fn if_inet6_addresses(text: &str) -> Vec<Ipv6Addr> {
    text.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|hex| {
            u128::from_str_radix(hex, 16)
                .ok()
                .filter(|_| hex.len() == 32)
        })
        .map(Ipv6Addr::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_addresses_of_the_configuration() {
        let check = |raw: &str, expected: Option<&str>| {
            let expected = expected.map(|e| e.parse::<IpAddr>().expect("ip"));
            assert_eq!(authority_ip(raw), expected, "{raw}");
        };
        check("203.0.113.9:50051", Some("203.0.113.9"));
        check("[2001:db8::9]:50051", Some("2001:db8::9"));
        check("hub.example.com:50051", None);
        check("", None);
        let url = |raw: &str, expected: Option<&str>| {
            let expected = expected.map(|e| e.parse::<IpAddr>().expect("ip"));
            assert_eq!(url_ip(raw), expected, "{raw}");
        };
        url("https://203.0.113.9/banhub", Some("203.0.113.9"));
        url("http://[2001:db8::9]:8080", Some("2001:db8::9"));
        url("https://hub.example.com", None);
        url("", None);
    }

    #[test]
    fn interface_addresses_from_proc() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                    \x20    +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.1\n              /32 host LOCAL\n\
                    \x20       |-- 127.255.255.255\n           /32 link BROADCAST\n\
                    \x20          |-- 192.0.2.2\n              /32 host LOCAL\n\
                    Local:\n           |-- 192.0.2.2\n              /32 host LOCAL\n";
        assert_eq!(
            fib_trie_locals(trie),
            [Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(192, 0, 2, 2)]
        );
        let inet6 = "fd000000000000000000000000000002 04 40 00 82     eth0\n\
                     00000000000000000000000000000001 01 80 10 80       lo\n\
                     nonsense\n";
        assert_eq!(
            if_inet6_addresses(inet6),
            [
                "fd00::2".parse::<Ipv6Addr>().expect("ip"),
                Ipv6Addr::LOCALHOST
            ]
        );
    }

    #[test]
    fn the_configured_addresses_are_the_hubs() {
        let mut config = Config::default();
        config.http.listen = "198.51.100.5:8080".parse().expect("addr");
        config.grpc.advertise = "203.0.113.9:50051".to_owned();
        config.auth.public_url = "https://[2001:db8::9]/".to_owned();
        let found = discover(&config, "192.0.2.44:50051");
        for own in [
            "198.51.100.5",
            "192.0.2.44",
            "203.0.113.9",
            "2001:db8::9",
            "127.0.0.1",
            "::1",
        ] {
            assert!(
                found.contains(&own.parse().expect("ip")),
                "{own}: {found:?}"
            );
        }
        assert!(
            !found.contains(&"0.0.0.0".parse().expect("ip")),
            "{found:?}"
        );
    }
}
