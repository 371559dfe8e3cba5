//! The agent's own checks of what the hub sends, before any of it reaches fail2ban or a file:
//! names, addresses, ignore-list entries, searches and size caps. A refusal is an
//! INVALID_ARGUMENT failure that quotes the input (escaped and shortened).

use std::net::IpAddr;
use std::str::FromStr;

use banhub_proto::rules::{IpOrCidr, covers_everything, is_banhub_jail, unmapped_ip, unmapped_net};
use ipnet::IpNet;

use super::failure::Failure;
use crate::fail2ban_files::{FilterName, JailName};

/// Most jails one SetJailsEnabled may change.
pub const MAX_TOGGLES: usize = 256;
/// Most entries of one ignore list.
pub const MAX_IGNORE_ENTRIES: usize = 512;
/// Longest ignore-list entry (a DNS name is at most 253 characters).
pub const MAX_IGNORE_ENTRY: usize = 253;
/// Largest page of banned addresses.
pub const MAX_PAGE: u32 = 1_000;
/// Page size when the hub asks for none.
pub const DEFAULT_PAGE: u32 = 50;
/// Longest search text (an IPv6 network is at most 43 characters).
pub const MAX_SEARCH: usize = 64;
/// Most lines of fail2ban's log one LogTail returns.
pub const MAX_LOG_LINES: u32 = 1_000;
/// Lines of fail2ban's log when the hub asks for none.
pub const DEFAULT_LOG_LINES: u32 = 100;

/// The input for a message: escaped (no line breaks reach a log or a UI) and shortened.
pub fn quoted(raw: &str) -> String {
    const SHOWN: usize = 80;
    let mut shown: String = raw.chars().take(SHOWN).collect();
    if shown.len() < raw.len() {
        shown.push('…');
    }
    format!("{shown:?}")
}

/// A jail name from the hub, through the jail name rule the hub's routes share: reserved section
/// names (`DEFAULT`, `INCLUDES`, the stem of `jail.d/banhub-defaults.local`, ...) are refused.
pub fn jail(raw: &str) -> Result<JailName, Failure> {
    JailName::parse(raw)
        .map_err(|e| Failure::invalid(format!("jail name {} is refused: it {e}", quoted(raw))))
}

/// A jail whose configuration the hub may change: [`jail`], and none of banhub's own jails
/// (`banhub-probe`, `banhub-shared`), which `install-action` alone writes and the agent alone
/// drives. Their bans and status stay readable through [`jail`].
pub fn writable_jail(raw: &str) -> Result<JailName, Failure> {
    let name = jail(raw)?;
    if is_banhub_jail(name.as_str()) {
        return Err(Failure::invalid(format!(
            "jail {} is refused: it is banhub's own jail, written only by `banhub-agent \
             install-action` on the host",
            quoted(raw)
        )));
    }
    Ok(name)
}

/// A filter name from the hub.
pub fn filter(raw: &str) -> Result<FilterName, Failure> {
    FilterName::parse(raw)
        .map_err(|e| Failure::invalid(format!("filter name {} is refused: it {e}", quoted(raw))))
}

/// An address or network to ban or unban (IPv4-mapped IPv6 is the IPv4 address).
pub fn address(raw: &str) -> Result<IpOrCidr, Failure> {
    IpOrCidr::parse(raw)
        .map_err(|e| Failure::invalid(format!("address {} is refused: it {e}", quoted(raw))))
}

/// An address or network to ban: [`address`], and not the broadcast address unless the hub says
/// an admin overrode its guard rails. (How wide a network may be is the hub's configuration; the
/// agent refuses what no limit allows: every address, which [`address`] already refuses.)
pub fn ban_address(raw: &str, guard_override: bool) -> Result<IpOrCidr, Failure> {
    let ip = address(raw)?;
    if ip.is_broadcast() && !guard_override {
        return Err(Failure::invalid(format!(
            "address {} is refused: it is (or covers) the broadcast address 255.255.255.255, \
             which takes an admin's override at the hub",
            quoted(raw)
        )));
    }
    Ok(ip)
}

/// One entry of an ignore list: an IPv4/IPv6 address, a network (`127.0.0.1/8` is fine: fail2ban
/// keeps the network), or a DNS host name. Nothing else: no spaces, commas or line breaks (they
/// would split or end the value), no `%` (interpolation), no `file:` lists.
pub fn ignore_entry(raw: &str) -> Result<String, Failure> {
    let refuse =
        |why: &str| Failure::invalid(format!("ignore entry {} is refused: {why}", quoted(raw)));
    if raw.is_empty() {
        return Err(refuse("it is empty"));
    }
    if raw.len() > MAX_IGNORE_ENTRY {
        return Err(refuse(&format!(
            "it is longer than {MAX_IGNORE_ENTRY} characters"
        )));
    }
    if let Ok(ip) = IpAddr::from_str(raw) {
        return Ok(unmapped_ip(ip).to_string());
    }
    if let Some((addr, prefix)) = raw.split_once('/') {
        let ip =
            IpAddr::from_str(addr).map_err(|_| refuse("the part before '/' is not an address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max && !prefix.starts_with('+'))
            .ok_or_else(|| refuse(&format!("the prefix is not a number from 0 to {max}")))?;
        let net = IpNet::new(ip, prefix)
            .map(unmapped_net)
            .map_err(|_| refuse(&format!("the prefix is not a number from 0 to {max}")))?;
        if covers_everything(net) {
            return Err(refuse(
                "it covers every address, which would switch banning off",
            ));
        }
        // fail2ban keeps the network of an address with host bits (`127.0.0.1/8`), so they stay.
        return Ok(format!("{}/{}", net.addr(), net.prefix_len()));
    }
    if is_host_name(raw) {
        return Ok(raw.to_ascii_lowercase());
    }
    Err(refuse(
        "it is not an IP address, a network (address/prefix) or a DNS host name",
    ))
}

/// RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 1–63 each,
/// the last one not all digits (so `1.2.3` is not taken for a name).
fn is_host_name(raw: &str) -> bool {
    let labels: Vec<&str> = raw.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    labels.iter().all(label_ok)
        && labels
            .last()
            .is_some_and(|l| !l.chars().all(|c| c.is_ascii_digit()))
}

/// What ListBanned looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search {
    All,
    /// Addresses containing this text (lower case).
    Text(String),
    /// Addresses (or banned networks) inside this network.
    Network(IpNet),
}

impl Search {
    /// Whether a banned entry (an address, or a network fail2ban bans as a whole) matches.
    pub fn matches(&self, entry: &str) -> bool {
        match self {
            Self::All => true,
            Self::Text(text) => entry.contains(text.as_str()),
            Self::Network(net) => match IpAddr::from_str(entry) {
                Ok(ip) => net.contains(&ip),
                Err(_) => IpNet::from_str(entry).is_ok_and(|banned| net.contains(&banned)),
            },
        }
    }
}

/// A search: empty (everything), a network when it holds a '/', else a piece of an address.
pub fn search(raw: &str) -> Result<Search, Failure> {
    let refuse = |why: &str| Failure::invalid(format!("search {} is refused: {why}", quoted(raw)));
    if raw.is_empty() {
        return Ok(Search::All);
    }
    if raw.len() > MAX_SEARCH {
        return Err(refuse(&format!(
            "it is longer than {MAX_SEARCH} characters"
        )));
    }
    if !raw
        .chars()
        .all(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/'))
    {
        return Err(refuse(
            "search for digits, hex digits, '.' and ':' (part of an address), or a network like \
             198.51.100.0/24",
        ));
    }
    if raw.contains('/') {
        let net =
            IpNet::from_str(raw).map_err(|_| refuse("it is not a network like 198.51.100.0/24"))?;
        return Ok(Search::Network(net.trunc()));
    }
    Ok(Search::Text(raw.to_ascii_lowercase()))
}

/// A page size: 0 means the default.
pub fn page_limit(limit: u32) -> Result<u32, Failure> {
    match limit {
        0 => Ok(DEFAULT_PAGE),
        n if n > MAX_PAGE => Err(Failure::invalid(format!(
            "a page holds at most {MAX_PAGE} addresses, not {n}"
        ))),
        n => Ok(n),
    }
}

/// A number of log lines: 0 means the default.
pub fn log_lines(lines: u32) -> Result<u32, Failure> {
    match lines {
        0 => Ok(DEFAULT_LOG_LINES),
        n if n > MAX_LOG_LINES => Err(Failure::invalid(format!(
            "at most {MAX_LOG_LINES} log lines can be asked for, not {n}"
        ))),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use banhub_proto::v1::ErrorCode;

    fn refused<T: std::fmt::Debug>(result: Result<T, Failure>) -> String {
        let failure = result.expect_err("refused");
        assert_eq!(failure.code(), ErrorCode::InvalidArgument);
        failure.0.message
    }

    #[test]
    fn names_are_checked_with_reserved_sections_refused() {
        for good in ["sshd", "nginx-http-auth", "default-web", "a.b_c@d"] {
            assert_eq!(jail(good).map(|j| j.to_string()), Ok(good.to_owned()));
            assert!(filter(good).is_ok());
        }
        for bad in [
            "",
            "../x",
            "/etc/passwd",
            "a\nb",
            "[DEFAULT]",
            "DEFAULT",
            "default",
            "INCLUDES",
            "Includes",
            "banhub-defaults",
            ".",
            "..",
            "sshd ",
            &"a".repeat(65),
        ] {
            let message = refused(jail(bad));
            assert!(!message.contains('\n'), "{message}");
        }
        let message = refused(filter("a\nb"));
        assert!(message.contains("\"a\\nb\""), "{message}");
    }

    #[test]
    fn addresses_use_the_shared_rule() {
        assert_eq!(
            address("2001:DB8::1").map(|a| a.to_string()),
            Ok("2001:db8::1".to_owned())
        );
        assert_eq!(
            address("198.51.100.0/24").map(|a| a.to_string()),
            Ok("198.51.100.0/24".to_owned())
        );
        for bad in [
            "not-an-ip",
            "1.2.3.4 ",
            "1.2.3.4\n5",
            "0.0.0.0/0",
            "198.51.100.1/24",
            "",
        ] {
            refused(address(bad));
        }
        assert_eq!(
            address("::ffff:198.51.100.7").map(|a| a.to_string()),
            Ok("198.51.100.7".to_owned())
        );
    }

    #[test]
    fn the_broadcast_address_is_banned_only_with_the_override() {
        // A network covering it counts: the agent does not know the hub's width limits.
        for broadcast in [
            "255.255.255.255",
            "::ffff:255.255.255.255",
            "255.255.255.0/24",
            "128.0.0.0/1",
        ] {
            refused(ban_address(broadcast, false));
            assert!(ban_address(broadcast, true).is_ok(), "{broadcast}");
        }
        assert!(ban_address("192.0.2.255", false).is_ok());
        assert!(ban_address("64.0.0.0/2", false).is_ok());
    }

    #[test]
    fn ignore_entries() {
        let check = |raw: &str, expected: Option<&str>| {
            assert_eq!(ignore_entry(raw).ok().as_deref(), expected, "{raw:?}");
        };
        check("192.0.2.1", Some("192.0.2.1"));
        check("127.0.0.1/8", Some("127.0.0.1/8"));
        check("::1", Some("::1"));
        check("2001:DB8::/32", Some("2001:db8::/32"));
        check("::ffff:192.0.2.1", Some("192.0.2.1"));
        check("::ffff:192.0.2.0/120", Some("192.0.2.0/24"));
        check("128.0.0.0/1", Some("128.0.0.0/1"));
        check("Trusted.Example.org", Some("trusted.example.org"));
        check("localhost", Some("localhost"));
        check("my-host-1", Some("my-host-1"));
        for bad in [
            "",
            "1.2.3",
            "192.0.2.1/33",
            "0.0.0.0/0",
            "::/0",
            "::ffff:0.0.0.0/96",
            "10.0.0.1/0",
            "192.0.2.1/+8",
            "192.0.2.1/",
            "a b",
            "a,b",
            "a\nb",
            "[DEFAULT]",
            "%(x)s",
            "file:/etc/shadow",
            "-host",
            "host-",
            "a..b",
            "under_score",
            &"a".repeat(254),
        ] {
            check(bad, None);
        }
    }

    #[test]
    fn searches() {
        assert_eq!(search(""), Ok(Search::All));
        assert_eq!(search("198.51"), Ok(Search::Text("198.51".to_owned())));
        assert_eq!(search("2001:DB8"), Ok(Search::Text("2001:db8".to_owned())));
        let net = search("198.51.100.7/24").expect("network");
        assert_eq!(
            net,
            Search::Network("198.51.100.0/24".parse().expect("net"))
        );
        assert!(net.matches("198.51.100.200"));
        assert!(net.matches("198.51.100.128/25"));
        assert!(!net.matches("198.51.101.1"));
        assert!(!net.matches("198.51.0.0/16"));
        assert!(Search::Text("51.1".to_owned()).matches("198.51.100.1"));
        for bad in ["x", "1 2", "1/", "192.0.2.0/99", &"1".repeat(65), "a\n"] {
            refused(search(bad));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(page_limit(0), Ok(DEFAULT_PAGE));
        assert_eq!(page_limit(1_000), Ok(1_000));
        refused(page_limit(1_001));
        assert_eq!(log_lines(0), Ok(DEFAULT_LOG_LINES));
        refused(log_lines(1_001));
        assert_eq!(quoted(&"x".repeat(100)).chars().count(), 83);
    }
}
