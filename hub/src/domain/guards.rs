//! Guard rails for bans and allowlists: what needs an admin's explicit override (a network wider
//! than the configured limits, the broadcast address) and what nothing lifts (a ban of the hub's
//! own addresses, an allowlist entry that covers every address).

use std::net::IpAddr;

use banhub_proto::rules::{IpOrCidr, covers_everything, unmapped_ip, unmapped_net};
use ipnet::IpNet;

/// The shortest prefixes a ban or an allowlist entry may have without an override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixLimits {
    pub v4: u8,
    pub v6: u8,
}

/// A guard rail a ban or an allowlist entry runs into.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardViolation {
    #[error(
        "{target} is wider than /{min}, the widest {family} network banned or allowlisted \
         without an override (guards.ban_min_prefix_{suffix})"
    )]
    TooWide {
        target: String,
        min: u8,
        family: &'static str,
        suffix: &'static str,
    },
    #[error(
        "{target} is the broadcast address 255.255.255.255 (or covers it), which no client sends from"
    )]
    Broadcast { target: String },
    #[error("{target} covers every address: as an allowlist entry it would switch banning off")]
    CoversEverything { target: String },
    #[error("{target} covers {own}, an address of this hub: the host could no longer reach it")]
    HubAddress { target: String, own: IpAddr },
}

impl GuardViolation {
    /// Whether an admin's override lifts this rail.
    pub fn overridable(&self) -> bool {
        matches!(self, Self::TooWide { .. } | Self::Broadcast { .. })
    }

    /// The rail's name, stable for clients and the audit log.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::TooWide { .. } => "wide_network",
            Self::Broadcast { .. } => "broadcast",
            Self::CoversEverything { .. } => "covers_everything",
            Self::HubAddress { .. } => "hub_address",
        }
    }
}

/// The limits and the hub's own addresses, checked against every ban and allowlist entry.
#[derive(Debug, Clone)]
pub struct Guards {
    limits: PrefixLimits,
    hub_addresses: Vec<IpAddr>,
}

impl Guards {
    pub fn new(limits: PrefixLimits, hub_addresses: Vec<IpAddr>) -> Self {
        let mut hub_addresses: Vec<IpAddr> = hub_addresses.into_iter().map(unmapped_ip).collect();
        hub_addresses.sort();
        hub_addresses.dedup();
        Self {
            limits,
            hub_addresses,
        }
    }

    /// The addresses a ban may never cover.
    pub fn hub_addresses(&self) -> &[IpAddr] {
        &self.hub_addresses
    }

    /// The networks nothing in banhub bans, for the paths that subtract them (feeds): the hub's
    /// own addresses, each as a host network.
    pub fn protected_networks(&self) -> Vec<IpNet> {
        self.hub_addresses.iter().map(|a| IpNet::from(*a)).collect()
    }

    /// Checks a ban. A ban covering an address of the hub is refused even with `overridden`: a host
    /// that banned it could no longer reach the hub. Otherwise a network wider than the limits or
    /// the broadcast address needs the override. Returns the rail the override lifted, if any.
    pub fn check_ban(
        &self,
        ip: &IpOrCidr,
        overridden: bool,
    ) -> Result<Option<GuardViolation>, GuardViolation> {
        let target = ip.to_string();
        if let Some(own) = self.hub_addresses.iter().find(|own| ip.contains(**own)) {
            return Err(GuardViolation::HubAddress { target, own: *own });
        }
        let rail = if let Some(wide) = self.too_wide(&target, is_v4(ip), ip.prefix_len()) {
            Some(wide)
        } else if ip.is_broadcast() {
            Some(GuardViolation::Broadcast { target })
        } else {
            None
        };
        lift(rail, overridden)
    }

    /// Checks a network of an allowlist: one covering every address is refused, a network wider
    /// than the limits needs the override unless it lies inside a range no internet client comes
    /// from (loopback, private, link-local, unique local: `127.0.0.1/8` and `10.0.0.0/8` are
    /// ordinary entries). Returns the rail the override lifted, if any.
    pub fn check_allow(
        &self,
        net: IpNet,
        overridden: bool,
    ) -> Result<Option<GuardViolation>, GuardViolation> {
        let net = unmapped_net(net).trunc();
        let target = net.to_string();
        if covers_everything(net) {
            return Err(GuardViolation::CoversEverything { target });
        }
        let rail = if is_non_global(net) {
            None
        } else {
            self.too_wide(&target, net.addr().is_ipv4(), net.prefix_len())
        };
        lift(rail, overridden)
    }

    fn too_wide(&self, target: &str, v4: bool, prefix: u8) -> Option<GuardViolation> {
        let (min, family, suffix) = if v4 {
            (self.limits.v4, "IPv4", "v4")
        } else {
            (self.limits.v6, "IPv6", "v6")
        };
        (prefix < min).then(|| GuardViolation::TooWide {
            target: target.to_owned(),
            min,
            family,
            suffix,
        })
    }
}

fn lift(
    rail: Option<GuardViolation>,
    overridden: bool,
) -> Result<Option<GuardViolation>, GuardViolation> {
    match rail {
        Some(rail) if overridden => Ok(Some(rail)),
        Some(rail) => Err(rail),
        None => Ok(None),
    }
}

fn is_v4(ip: &IpOrCidr) -> bool {
    match ip {
        IpOrCidr::Ip(addr) => addr.is_ipv4(),
        IpOrCidr::Net(net) => net.addr().is_ipv4(),
    }
}

/// Whether every address of `net` lies in a range no internet client comes from.
fn is_non_global(net: IpNet) -> bool {
    const RANGES: [&str; 8] = [
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    ];
    RANGES
        .iter()
        .filter_map(|r| r.parse::<IpNet>().ok())
        .any(|range| range.contains(&net))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guards() -> Guards {
        Guards::new(
            PrefixLimits { v4: 16, v6: 32 },
            vec![
                "127.0.0.1".parse().expect("ip"),
                "::ffff:198.51.100.20".parse().expect("ip"),
                "2001:db8:5::1".parse().expect("ip"),
            ],
        )
    }

    /// `None`: accepted without a rail; `Some(Ok(rule))`: needs (and takes) the override;
    /// `Some(Err(rule))`: refused even with it.
    fn ban(raw: &str, expected: Option<Result<&str, &str>>) {
        let ip = IpOrCidr::parse(raw).expect("address");
        let g = guards();
        let plain = g.check_ban(&ip, false);
        let forced = g.check_ban(&ip, true);
        match expected {
            None => {
                assert_eq!(plain, Ok(None), "{raw}");
                assert_eq!(forced, Ok(None), "{raw}");
            }
            Some(Ok(rule)) => {
                assert_eq!(plain.map_err(|e| e.rule()), Err(rule), "{raw}");
                assert_eq!(forced.map(|r| r.map(|r| r.rule())), Ok(Some(rule)), "{raw}");
            }
            Some(Err(rule)) => {
                assert_eq!(plain.map_err(|e| e.rule()), Err(rule), "{raw}");
                assert_eq!(forced.map_err(|e| e.rule()), Err(rule), "{raw}");
            }
        }
    }

    #[test]
    fn bans_within_the_limits_pass() {
        ban("192.0.2.7", None);
        ban("192.0.2.0/24", None);
        ban("203.0.0.0/16", None);
        ban("2001:db8::7", None);
        ban("2001:db8:1::/48", None);
        ban("192.0.2.255", None);
    }

    #[test]
    fn wide_networks_and_broadcast_need_the_override() {
        ban("160.0.0.0/3", Some(Ok("wide_network")));
        ban("203.0.0.0/15", Some(Ok("wide_network")));
        ban("8000::/1", Some(Ok("wide_network")));
        ban("3000::/4", Some(Ok("wide_network")));
        ban("2001:e00::/24", Some(Ok("wide_network")));
        ban("255.255.255.255", Some(Ok("broadcast")));
        ban("::ffff:255.255.255.255", Some(Ok("broadcast")));
        ban("255.255.255.0/24", Some(Ok("broadcast")));
    }

    #[test]
    fn the_hubs_addresses_are_never_banned() {
        ban("198.51.100.20", Some(Err("hub_address")));
        ban("::ffff:198.51.100.20", Some(Err("hub_address")));
        ban("198.51.100.0/24", Some(Err("hub_address")));
        ban("198.51.0.0/16", Some(Err("hub_address")));
        ban("2001:db8:5::1", Some(Err("hub_address")));
        ban("2001:db8::/32", Some(Err("hub_address")));
    }

    #[test]
    fn a_wide_network_covering_a_hub_address_is_refused_even_with_the_override() {
        ban("64.0.0.0/2", Some(Err("hub_address")));
        ban("96.0.0.0/3", Some(Err("hub_address")));
        ban("128.0.0.0/1", Some(Err("hub_address")));
        ban("2000::/3", Some(Err("hub_address")));
        ban("2001::/16", Some(Err("hub_address")));
    }

    fn allow(raw: &str, expected: Option<Result<&str, &str>>) {
        let net: IpNet = raw
            .parse()
            .or_else(|_| raw.parse::<IpAddr>().map(IpNet::from))
            .expect("network");
        let g = guards();
        let plain = g.check_allow(net, false).map_err(|e| e.rule());
        let forced = g.check_allow(net, true);
        match expected {
            None => assert_eq!((plain, forced), (Ok(None), Ok(None)), "{raw}"),
            Some(Ok(rule)) => {
                assert_eq!(plain, Err(rule), "{raw}");
                assert_eq!(forced.map(|r| r.map(|r| r.rule())), Ok(Some(rule)), "{raw}");
            }
            Some(Err(rule)) => {
                assert_eq!(plain, Err(rule), "{raw}");
                assert_eq!(forced.map_err(|e| e.rule()), Err(rule), "{raw}");
            }
        }
    }

    #[test]
    fn allowlists_refuse_everything_and_ask_for_wide_public_networks() {
        allow("192.0.2.7", None);
        allow("192.0.2.0/24", None);
        allow("127.0.0.1/8", None);
        allow("10.0.0.0/8", None);
        allow("fc00::/7", None);
        allow("::1", None);
        allow("198.51.100.20", None);
        allow("0.0.0.0/0", Some(Err("covers_everything")));
        allow("::/0", Some(Err("covers_everything")));
        allow("::ffff:0:0/96", Some(Err("covers_everything")));
        allow("64.0.0.0/2", Some(Ok("wide_network")));
        allow("::ffff:64.0.0.0/98", Some(Ok("wide_network")));
        allow("2000::/3", Some(Ok("wide_network")));
        allow("8.0.0.0/7", Some(Ok("wide_network")));
    }
}
