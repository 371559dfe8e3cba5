//! Protected networks, which nothing in banhub bans: the networks an admin configured (management
//! ranges), the hub's own addresses and each operator's client address while their session lives.
//! Each entry says why it is protected, so a refusal can name it.

use std::fmt;
use std::net::IpAddr;

use banhub_proto::rules::{IpOrCidr, unmapped_ip, unmapped_net};
use chrono::{DateTime, Utc};
use ipnet::IpNet;

/// Why a network is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtectionKind {
    /// An admin added it to the list of protected networks.
    Configured,
    /// An address of this hub: a host that banned it could no longer reach the hub.
    HubAddress,
    /// The client address of a live operator session or a recently used API token.
    OperatorSession,
}

impl ProtectionKind {
    /// The kind's name, stable for clients: `configured`, `hub_address`, `operator_session`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::HubAddress => "hub_address",
            Self::OperatorSession => "operator_session",
        }
    }
}

impl fmt::Display for ProtectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One protected network and why it is protected.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtectedEntry {
    pub network: IpNet,
    pub kind: ProtectionKind,
    /// The admin's note for a configured network; who or what it is for the automatic kinds.
    pub note: String,
}

impl ProtectedEntry {
    /// An entry for one address (a host network).
    pub fn address(ip: IpAddr, kind: ProtectionKind, note: impl Into<String>) -> Self {
        Self {
            network: IpNet::from(unmapped_ip(ip)),
            kind,
            note: note.into(),
        }
    }

    /// Whether a ban of `target` would cover any address of this entry.
    pub fn overlaps(&self, target: &IpOrCidr) -> bool {
        let target = match target {
            IpOrCidr::Ip(ip) => IpNet::from(unmapped_ip(*ip)),
            IpOrCidr::Net(net) => unmapped_net(*net),
        };
        overlaps(self.network, target)
    }
}

/// A network an admin protected, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedNetwork {
    pub id: i64,
    /// Normalized: host bits cleared, IPv4-mapped IPv6 written as IPv4.
    pub network: IpNet,
    /// Why it is protected ("office VPN").
    pub note: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

impl ProtectedNetwork {
    pub fn entry(&self) -> ProtectedEntry {
        ProtectedEntry {
            network: self.network,
            kind: ProtectionKind::Configured,
            note: self.note.clone(),
        }
    }
}

/// The client address an operator's credential was last used from, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorAddress {
    /// `session:<id>` or `token:<id>`.
    pub credential: String,
    pub ip: IpAddr,
    /// Who the credential belongs to.
    pub name: String,
    pub seen_at: DateTime<Utc>,
}

/// Whether two networks share an address: for prefix networks, one contains the other.
pub fn overlaps(a: IpNet, b: IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Parses a network to protect: an address (a host network) or a CIDR network, normalized (host
/// bits cleared, IPv4-mapped IPv6 written as IPv4).
pub fn parse_network(raw: &str) -> Option<IpNet> {
    let raw = raw.trim();
    if raw.is_empty() || raw.len() > 64 {
        return None;
    }
    let net = match raw.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => IpNet::from(raw.parse::<IpAddr>().ok()?),
    };
    Some(unmapped_net(net).trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(raw: &str) -> IpNet {
        parse_network(raw).expect("network")
    }

    #[test]
    fn networks_are_normalized() {
        let check = |raw: &str, expected: Option<&str>| {
            assert_eq!(
                parse_network(raw).map(|n| n.to_string()).as_deref(),
                expected,
                "{raw}"
            );
        };
        check("192.0.2.7", Some("192.0.2.7/32"));
        check("192.0.2.7/24", Some("192.0.2.0/24"));
        check("::ffff:192.0.2.0/120", Some("192.0.2.0/24"));
        check("::ffff:192.0.2.9", Some("192.0.2.9/32"));
        check("2001:db8::1/48", Some("2001:db8::/48"));
        check("", None);
        check("office", None);
        check("192.0.2.0/33", None);
    }

    #[test]
    fn an_entry_overlaps_bans_inside_it_and_networks_around_it() {
        let entry = ProtectedEntry {
            network: net("192.0.2.0/24"),
            kind: ProtectionKind::Configured,
            note: "office".to_owned(),
        };
        let covers = |raw: &str| entry.overlaps(&IpOrCidr::parse(raw).expect("ip"));
        assert!(covers("192.0.2.7"));
        assert!(covers("::ffff:192.0.2.7"));
        assert!(covers("192.0.2.128/25"));
        assert!(covers("192.0.0.0/16"));
        assert!(!covers("192.0.3.7"));
        assert!(!covers("192.0.3.0/24"));
        assert!(!covers("2001:db8::1"));
    }
}
