//! The rules every name and address must pass before it travels between hub and agent, shared so both
//! ends check exactly the same thing: the hub at its HTTP edge, the agent again before fail2ban sees it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// Longest name accepted for a server, jail, filter or action.
pub const MAX_NAME_LEN: usize = 64;

/// The jail `banhub-agent install-action` adds for the end-to-end probe. Its events prove that
/// delivery works; the hub keeps them out of lists, stats and insights unless asked for this jail.
pub const PROBE_JAIL: &str = "banhub-probe";

/// The jail `banhub-agent install-action` adds for shared bans (bans a sharing policy or a fleet
/// recidive rule asks for on behalf of another host). Its events are never origins of new shared
/// bans (no echo); the hub shows them as shared, with their origin.
pub const SHARED_JAIL: &str = "banhub-shared";

/// banhub's own jails: `install-action` alone writes them and the agent alone drives them, so no
/// configuration write, allowlist change, switch or manual ban from the hub names them.
pub const BANHUB_JAILS: [&str; 2] = [PROBE_JAIL, SHARED_JAIL];

/// Whether `jail` is one of [`BANHUB_JAILS`].
pub fn is_banhub_jail(jail: &str) -> bool {
    BANHUB_JAILS
        .iter()
        .any(|own| jail.eq_ignore_ascii_case(own))
}

/// Whether `ip` is a single address of a documentation range (RFC 5737 TEST-NET-1/2/3, RFC 3849
/// `2001:db8::/32`): the only addresses the probe may ban, since no real client has one.
pub fn is_probe_address(ip: &IpOrCidr) -> bool {
    let IpOrCidr::Ip(addr) = ip else {
        return false;
    };
    match addr {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            matches!((a, b, c), (192, 0, 2) | (198, 51, 100) | (203, 0, 113))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[0] == 0x2001 && s[1] == 0x0db8
        }
    }
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {max} characters long")]
    TooLong { max: usize },
    #[error(
        "must start with a letter or digit and contain only letters, digits, '.', '_', '@' and '-'"
    )]
    BadCharacters,
    #[error("must not be '.' or '..'")]
    DotName,
    #[error("is a reserved section name of fail2ban's jail files, not a jail")]
    Reserved,
}

/// Section names of fail2ban's jail files that are not jails, and the stem of the agent's own
/// defaults file (`jail.d/banhub-defaults.local`): a "jail" of one of these names would make its
/// override change every jail (`DEFAULT`), read any file (`INCLUDES`) or replace banhub's defaults.
/// Compared without regard to case.
pub const RESERVED_JAIL_NAMES: [&str; 4] = ["DEFAULT", "INCLUDES", "KNOWN", "banhub-defaults"];

/// Checks the name rule shared by servers, jails and filters: `^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`,
/// never `.` or `..`. Such a name is safe as a file name component and as a fail2ban argument.
pub fn check_name(raw: &str) -> Result<(), NameError> {
    if raw.is_empty() {
        return Err(NameError::Empty);
    }
    if raw.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { max: MAX_NAME_LEN });
    }
    if raw == "." || raw == ".." {
        return Err(NameError::DotName);
    }
    let mut chars = raw.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(NameError::BadCharacters)
    }
}

/// Checks the jail name rule: [`check_name`], and none of [`RESERVED_JAIL_NAMES`]. Every route that
/// takes a jail name and the agent check it through [`JailName`].
pub fn check_jail_name(raw: &str) -> Result<(), NameError> {
    check_name(raw)?;
    if RESERVED_JAIL_NAMES
        .iter()
        .any(|reserved| raw.eq_ignore_ascii_case(reserved))
    {
        return Err(NameError::Reserved);
    }
    Ok(())
}

/// Declares a validated name type: a value of it has passed `$check`.
macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Checks `raw` against the type's name rule.
            pub fn parse(raw: &str) -> Result<Self, NameError> {
                $check(raw)?;
                Ok(Self(raw.to_owned()))
            }

            /// [`Self::parse`] of an owned string, kept rather than copied; a refused string comes
            /// back with the reason.
            pub fn parse_owned(raw: String) -> Result<Self, (NameError, String)> {
                match $check(&raw) {
                    Ok(()) => Ok(Self(raw)),
                    Err(e) => Err((e, raw)),
                }
            }

            /// The name as text; safe as one file name component and as one fail2ban argument.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                Self::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(raw: String) -> Result<Self, NameError> {
                $check(&raw)?;
                Ok(Self(raw))
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        // Read back from JSON (a spool record, a request body) through the same rule.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::try_from(raw).map_err(serde::de::Error::custom)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
    };
}

name_type!(
    /// The name of a fail2ban jail: the name rule, never a reserved section name.
    JailName,
    check_jail_name
);
name_type!(
    /// The name of a fail2ban filter (`filter.d/<name>.conf`).
    FilterName,
    check_name
);

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error(
        "is not an IPv4 or IPv6 address or a CIDR network (e.g. 192.0.2.7, 2001:db8::1, 198.51.100.0/24)"
    )]
    Syntax,
    #[error("has host bits set below the prefix; did you mean {suggestion}?")]
    HostBits { suggestion: String },
    #[error("covers every address; refusing to ban the whole internet")]
    Everything,
    #[error("is an unspecified, loopback or multicast address, which cannot be a client")]
    NotAClient,
}

/// An IPv4/IPv6 address or a CIDR network, in canonical text form (`192.0.2.7`, `2001:db8::/32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpOrCidr {
    Ip(IpAddr),
    Net(IpNet),
}

impl IpOrCidr {
    /// Parses and checks an address as an operator or a callback wrote it. A `/32` or `/128` network
    /// is the single address it names.
    pub fn parse(raw: &str) -> Result<Self, AddressError> {
        if raw.is_empty() || raw.len() > 64 || raw.trim() != raw {
            return Err(AddressError::Syntax);
        }
        let parsed = if raw.contains('/') {
            let net = unmapped_net(IpNet::from_str(raw).map_err(|_| AddressError::Syntax)?);
            if net.prefix_len() == 0 {
                return Err(AddressError::Everything);
            }
            if net.trunc() != net {
                return Err(AddressError::HostBits {
                    suggestion: net.trunc().to_string(),
                });
            }
            if net.prefix_len() == net.max_prefix_len() {
                Self::Ip(net.addr())
            } else {
                Self::Net(net)
            }
        } else {
            Self::Ip(unmapped_ip(
                IpAddr::from_str(raw).map_err(|_| AddressError::Syntax)?,
            ))
        };
        let addr = match parsed {
            Self::Ip(ip) => ip,
            Self::Net(net) => net.addr(),
        };
        if addr.is_unspecified() || addr.is_loopback() || addr.is_multicast() {
            return Err(AddressError::NotAClient);
        }
        Ok(parsed)
    }

    /// Whether `ip` is this address or lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped_ip(ip);
        match self {
            Self::Ip(own) => *own == ip,
            Self::Net(net) => net.contains(&ip),
        }
    }

    /// The prefix length: 32 or 128 for a single address.
    pub fn prefix_len(&self) -> u8 {
        match self {
            Self::Ip(IpAddr::V4(_)) => 32,
            Self::Ip(IpAddr::V6(_)) => 128,
            Self::Net(net) => net.prefix_len(),
        }
    }

    /// Whether this is (or covers) IPv4's limited broadcast address, `255.255.255.255`, which no
    /// client sends from: banning it is a mistake unless an admin says otherwise. The broadcast
    /// address of a subnet (`x.y.z.255` of a /24) is not refused: without the subnet's size, it
    /// is an ordinary address of a wider network.
    pub fn is_broadcast(&self) -> bool {
        self.contains(IpAddr::V4(Ipv4Addr::BROADCAST))
    }
}

/// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:192.0.2.7`) stands for, else `ip`. fail2ban
/// bans the IPv4 address either way, so both spellings must name one entry.
pub fn unmapped_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 network an IPv4-mapped IPv6 network stands for (`::ffff:192.0.2.0/120` is
/// `192.0.2.0/24`; only prefixes of 96 bits or more lie inside the mapped range), else `net`.
pub fn unmapped_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(v4_net) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(v4_net);
    }
    net
}

/// Whether a network covers every address of its family (`0.0.0.0/0`, `::/0`, and the mapped
/// `::ffff:0:0/96`): in an allowlist it switches banning off.
pub fn covers_everything(net: IpNet) -> bool {
    unmapped_net(net).prefix_len() == 0
}

impl fmt::Display for IpOrCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(ip) => ip.fmt(f),
            Self::Net(net) => net.fmt(f),
        }
    }
}

impl FromStr for IpOrCidr {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, AddressError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_addresses_are_documentation_addresses_only() {
        let check = |raw: &str, expected: bool| {
            let ip = IpOrCidr::parse(raw).expect("address");
            assert_eq!(is_probe_address(&ip), expected, "{raw}");
        };
        check("192.0.2.77", true);
        check("198.51.100.1", true);
        check("203.0.113.254", true);
        check("2001:db8::7", true);
        check("192.0.3.1", false);
        check("10.0.0.1", false);
        check("2001:db9::1", false);
        check("192.0.2.0/24", false);
    }

    fn name(input: &str, expected: Result<(), NameError>) {
        assert_eq!(check_name(input), expected, "input {input:?}");
    }

    #[test]
    fn names_follow_the_rule() {
        name("web-1", Ok(()));
        name("a", Ok(()));
        name("sshd", Ok(()));
        name("nginx.http-auth_2@x", Ok(()));
        name(&"a".repeat(64), Ok(()));
        name("", Err(NameError::Empty));
        name(&"a".repeat(65), Err(NameError::TooLong { max: 64 }));
        name(".", Err(NameError::DotName));
        name("..", Err(NameError::DotName));
        name("../etc", Err(NameError::BadCharacters));
        name("-x", Err(NameError::BadCharacters));
        name(".hidden", Err(NameError::BadCharacters));
        name("a/b", Err(NameError::BadCharacters));
        name("a b", Err(NameError::BadCharacters));
        name("a\nb", Err(NameError::BadCharacters));
        name("[sshd]", Err(NameError::BadCharacters));
        name("jäil", Err(NameError::BadCharacters));
    }

    fn addr(input: &str, expected: Result<&str, AddressError>) {
        let got = IpOrCidr::parse(input).map(|a| a.to_string());
        assert_eq!(got, expected.map(str::to_owned), "input {input:?}");
    }

    #[test]
    fn addresses_are_checked_and_canonical() {
        addr("192.0.2.7", Ok("192.0.2.7"));
        addr("2001:db8::1", Ok("2001:db8::1"));
        addr("2001:DB8:0:0::1", Ok("2001:db8::1"));
        addr("198.51.100.0/24", Ok("198.51.100.0/24"));
        addr("198.51.100.9/32", Ok("198.51.100.9"));
        addr("2001:db8::/32", Ok("2001:db8::/32"));
        addr("not-an-ip", Err(AddressError::Syntax));
        addr("", Err(AddressError::Syntax));
        addr(" 192.0.2.7", Err(AddressError::Syntax));
        addr("192.0.2.7; rm -rf /", Err(AddressError::Syntax));
        addr("01.2.3.4", Err(AddressError::Syntax));
        addr("1.2.3.4/33", Err(AddressError::Syntax));
        addr("0.0.0.0/0", Err(AddressError::Everything));
        addr("::/0", Err(AddressError::Everything));
        addr(
            "198.51.100.9/24",
            Err(AddressError::HostBits {
                suggestion: "198.51.100.0/24".to_owned(),
            }),
        );
        addr("127.0.0.1", Err(AddressError::NotAClient));
        addr("::1", Err(AddressError::NotAClient));
        addr("0.0.0.0", Err(AddressError::NotAClient));
        addr("224.0.0.1", Err(AddressError::NotAClient));
    }

    #[test]
    fn mapped_ipv6_is_the_ipv4_address() {
        addr("::ffff:192.0.2.7", Ok("192.0.2.7"));
        addr("::FFFF:c000:207", Ok("192.0.2.7"));
        addr("::ffff:192.0.2.0/120", Ok("192.0.2.0/24"));
        addr("::ffff:192.0.2.7/128", Ok("192.0.2.7"));
        addr("::ffff:0:0/96", Err(AddressError::Everything));
        addr("::ffff:127.0.0.1", Err(AddressError::NotAClient));
        addr(
            "::ffff:192.0.2.7/120",
            Err(AddressError::HostBits {
                suggestion: "192.0.2.0/24".to_owned(),
            }),
        );
        // Below 96 bits a network is not inside the mapped range; it stays IPv6.
        addr("::fffe:0:0/95", Ok("::fffe:0:0/95"));
        addr(
            "::ffff:0:0/95",
            Err(AddressError::HostBits {
                suggestion: "::fffe:0:0/95".to_owned(),
            }),
        );
        let ip = IpOrCidr::parse("192.0.2.7").expect("ip");
        assert!(ip.contains("::ffff:192.0.2.7".parse().expect("mapped")));
    }

    #[test]
    fn broadcast_and_everything() {
        let broadcast = |raw: &str, expected: bool| {
            let ip = IpOrCidr::parse(raw).expect("address");
            assert_eq!(ip.is_broadcast(), expected, "{raw}");
        };
        broadcast("255.255.255.255", true);
        broadcast("::ffff:255.255.255.255", true);
        broadcast("255.255.255.0/24", true);
        broadcast("192.0.2.255", false);
        broadcast("2001:db8::ffff", false);
        let everything = |raw: &str, expected: bool| {
            let net: IpNet = raw.parse().expect("network");
            assert_eq!(covers_everything(net), expected, "{raw}");
        };
        everything("0.0.0.0/0", true);
        everything("::/0", true);
        everything("::ffff:0:0/96", true);
        everything("128.0.0.0/1", false);
        everything("::/1", false);
        everything("::ffff:0:0/97", false);
        let prefix = |raw: &str, expected: u8| {
            assert_eq!(
                IpOrCidr::parse(raw).expect("address").prefix_len(),
                expected,
                "{raw}"
            );
        };
        prefix("192.0.2.7", 32);
        prefix("2001:db8::1", 128);
        prefix("64.0.0.0/2", 2);
    }

    #[test]
    fn reserved_section_names_are_not_jails() {
        for reserved in [
            "DEFAULT",
            "default",
            "INCLUDES",
            "Includes",
            "KNOWN",
            "banhub-defaults",
        ] {
            assert_eq!(
                JailName::parse(reserved),
                Err(NameError::Reserved),
                "{reserved}"
            );
            assert!(serde_json::from_str::<JailName>(&format!("{reserved:?}")).is_err());
        }
        for fine in ["Definition", "default-web", "includes2", "sshd"] {
            assert!(JailName::parse(fine).is_ok(), "{fine}");
        }
        // Filters have no such sections: the plain name rule.
        assert!(FilterName::parse("DEFAULT").is_ok());
    }

    #[test]
    fn owned_names_follow_the_rule() {
        for raw in ["sshd", "nginx.http-auth_2@x", "", "../etc", "a b", "jäil"] {
            let owned = JailName::parse_owned(raw.to_owned());
            assert_eq!(
                owned.clone().map_err(|(e, _)| e),
                JailName::parse(raw),
                "{raw:?}"
            );
            if let Err((_, back)) = owned {
                assert_eq!(back, raw);
            }
        }
    }

    #[test]
    fn names_deserialize_through_the_rule() {
        let jail: JailName = serde_json::from_str("\"sshd\"").expect("valid");
        assert_eq!(jail.as_str(), "sshd");
        assert_eq!(serde_json::to_string(&jail).expect("json"), "\"sshd\"");
        assert!(serde_json::from_str::<JailName>("\"../etc\"").is_err());
        assert!(serde_json::from_str::<FilterName>("\"a\\nb\"").is_err());
    }

    #[test]
    fn networks_contain_their_addresses() {
        let net = IpOrCidr::parse("198.51.100.0/24").expect("valid");
        assert!(net.contains("198.51.100.77".parse().expect("ip")));
        assert!(!net.contains("198.51.101.1".parse().expect("ip")));
    }
}
