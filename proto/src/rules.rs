//! The rules every name and address must pass before it travels between hub and agent, shared so both
//! ends check exactly the same thing: the hub at its HTTP edge, the agent again before fail2ban sees it.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// Longest name accepted for a server, jail, filter or action.
pub const MAX_NAME_LEN: usize = 64;

/// The jail `banhub-agent install-action` adds for the end-to-end probe. Its events prove that
/// delivery works; the hub keeps them out of lists, stats and insights unless asked for this jail.
pub const PROBE_JAIL: &str = "banhub-probe";

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
}

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

/// Declares a validated name type: a value of it has passed [`check_name`].
macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Checks `raw` against the shared name rule.
            pub fn parse(raw: &str) -> Result<Self, NameError> {
                check_name(raw)?;
                Ok(Self(raw.to_owned()))
            }

            /// [`Self::parse`] of an owned string, kept rather than copied; a refused string comes
            /// back with the reason.
            pub fn parse_owned(raw: String) -> Result<Self, (NameError, String)> {
                match check_name(&raw) {
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
                check_name(&raw)?;
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
    /// The name of a fail2ban jail.
    JailName
);
name_type!(
    /// The name of a fail2ban filter (`filter.d/<name>.conf`).
    FilterName
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
            let net = IpNet::from_str(raw).map_err(|_| AddressError::Syntax)?;
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
            Self::Ip(IpAddr::from_str(raw).map_err(|_| AddressError::Syntax)?)
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
        match self {
            Self::Ip(own) => *own == ip,
            Self::Net(net) => net.contains(&ip),
        }
    }
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
