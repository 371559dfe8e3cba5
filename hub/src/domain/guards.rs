//! Guard rails for bans and allowlists: what needs an admin's explicit override (a network wider
//! than the configured limits, the broadcast address) and what nothing lifts (a ban of a protected
//! network: the hub's own addresses, the networks an admin protected, the addresses operators
//! work from; an allowlist entry that covers every address).
//!
//! The protected networks change while the hub runs: `Guards` keeps the current set behind a lock,
//! and the service that follows them swaps it, so every holder of the shared `Guards` sees the
//! change at its next check.

use std::net::IpAddr;
use std::sync::{PoisonError, RwLock};

use banhub_proto::rules::{IpOrCidr, covers_everything, unmapped_ip, unmapped_net};
use ipnet::IpNet;

use super::protected::{ProtectedEntry, ProtectionKind};

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
    #[error(
        "{target} covers the protected network {} ({}{}), which nothing in banhub bans",
        entry.network,
        entry.kind,
        note(&entry.note)
    )]
    Protected {
        target: String,
        entry: ProtectedEntry,
    },
}

fn note(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
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
            Self::Protected { .. } => "protected_network",
        }
    }

    /// The protected entry that refused a ban, if a protected network did.
    pub fn protected_by(&self) -> Option<ProtectedEntry> {
        match self {
            Self::HubAddress { own, .. } => Some(ProtectedEntry::address(
                *own,
                ProtectionKind::HubAddress,
                "an address of this hub",
            )),
            Self::Protected { entry, .. } => Some(entry.clone()),
            _ => None,
        }
    }
}

/// The limits and the protected networks, checked against every ban and allowlist entry.
#[derive(Debug)]
pub struct Guards {
    limits: PrefixLimits,
    hub_addresses: Vec<IpAddr>,
    live: RwLock<Live>,
}

/// The protected networks that change while the hub runs, each list sorted and without repeats.
#[derive(Debug, Default)]
struct Live {
    configured: Vec<ProtectedEntry>,
    operators: Vec<ProtectedEntry>,
}

impl Guards {
    pub fn new(limits: PrefixLimits, hub_addresses: Vec<IpAddr>) -> Self {
        let mut hub_addresses: Vec<IpAddr> = hub_addresses.into_iter().map(unmapped_ip).collect();
        hub_addresses.sort();
        hub_addresses.dedup();
        Self {
            limits,
            hub_addresses,
            live: RwLock::default(),
        }
    }

    /// The addresses a ban may never cover.
    pub fn hub_addresses(&self) -> &[IpAddr] {
        &self.hub_addresses
    }

    /// Replaces the networks an admin protected; `true` when that changed them.
    pub fn set_configured(&self, entries: Vec<ProtectedEntry>) -> bool {
        let entries = tidy(entries);
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        let changed = live.configured != entries;
        live.configured = entries;
        changed
    }

    /// Replaces the addresses operators work from; `true` when that changed them.
    pub fn set_operators(&self, entries: Vec<ProtectedEntry>) -> bool {
        let entries = tidy(entries);
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        let changed = live.operators != entries;
        live.operators = entries;
        changed
    }

    /// Protects one more operator address at once (a login), until the next
    /// [`set_operators`](Self::set_operators); `true` when it was not protected yet.
    pub fn add_operator(&self, ip: IpAddr, name: &str) -> bool {
        let entry = ProtectedEntry::address(ip, ProtectionKind::OperatorSession, name);
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if live.operators.iter().any(|e| e.network == entry.network) {
            return false;
        }
        live.operators.push(entry);
        live.operators.sort();
        true
    }

    /// Every protected network with why it is protected: the hub's own addresses, the configured
    /// networks, the operators' addresses.
    pub fn protected_entries(&self) -> Vec<ProtectedEntry> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        self.hub_entries()
            .chain(live.configured.iter().cloned())
            .chain(live.operators.iter().cloned())
            .collect()
    }

    /// The networks nothing in banhub bans, for the paths that subtract them (feeds) and the
    /// hosts' `ignoreip`: the hub's own addresses, the configured networks and the operators'
    /// addresses, each network once.
    pub fn protected_networks(&self) -> Vec<IpNet> {
        let mut networks: Vec<IpNet> = self
            .protected_entries()
            .into_iter()
            .map(|e| e.network)
            .collect();
        networks.sort();
        networks.dedup();
        networks
    }

    /// The protected entry a ban of `ip` would cover, if any: the hub's addresses first, then the
    /// configured networks, then the operators' addresses.
    pub fn protecting(&self, ip: &IpOrCidr) -> Option<ProtectedEntry> {
        if let Some(own) = self.hub_addresses.iter().find(|own| ip.contains(**own)) {
            return Some(ProtectedEntry::address(
                *own,
                ProtectionKind::HubAddress,
                "an address of this hub",
            ));
        }
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        live.configured
            .iter()
            .chain(live.operators.iter())
            .find(|entry| entry.overlaps(ip))
            .cloned()
    }

    /// Checks a ban. A ban covering a protected network is refused even with `overridden`: an
    /// address of the hub (a host that banned it could no longer reach the hub), a network an admin
    /// protected, an address an operator works from. Otherwise a network wider than the limits or
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
        if let Some(entry) = self.protecting(ip) {
            return Err(GuardViolation::Protected { target, entry });
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

    /// Checks a network an admin wants to protect: one covering every address is refused, a
    /// network wider than the limits or covering the broadcast address needs the override.
    /// Returns the rail the override lifted, if any.
    pub fn check_protect(
        &self,
        net: IpNet,
        overridden: bool,
    ) -> Result<Option<GuardViolation>, GuardViolation> {
        let net = unmapped_net(net).trunc();
        let target = net.to_string();
        if covers_everything(net) {
            return Err(GuardViolation::CoversEverything { target });
        }
        let broadcast = IpNet::from(IpAddr::from([255, 255, 255, 255]));
        let rail =
            if let Some(wide) = self.too_wide(&target, net.addr().is_ipv4(), net.prefix_len()) {
                Some(wide)
            } else if net.contains(&broadcast) {
                Some(GuardViolation::Broadcast { target })
            } else {
                None
            };
        lift(rail, overridden)
    }

    fn hub_entries(&self) -> impl Iterator<Item = ProtectedEntry> + '_ {
        self.hub_addresses.iter().map(|own| {
            ProtectedEntry::address(*own, ProtectionKind::HubAddress, "an address of this hub")
        })
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

fn tidy(mut entries: Vec<ProtectedEntry>) -> Vec<ProtectedEntry> {
    entries.sort();
    entries.dedup_by(|a, b| a.network == b.network);
    entries
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

    fn configured(raw: &str, note: &str) -> ProtectedEntry {
        ProtectedEntry {
            network: raw.parse().expect("network"),
            kind: ProtectionKind::Configured,
            note: note.to_owned(),
        }
    }

    fn refusal(g: &Guards, raw: &str, overridden: bool) -> Option<(String, ProtectionKind)> {
        let ip = IpOrCidr::parse(raw).expect("address");
        match g.check_ban(&ip, overridden) {
            Err(GuardViolation::Protected { entry, .. }) => {
                Some((entry.network.to_string(), entry.kind))
            }
            Err(other) => panic!("{raw}: refused by {other}, not by a protected network"),
            Ok(_) => None,
        }
    }

    #[test]
    fn configured_networks_refuse_every_ban_they_overlap_even_with_the_override() {
        let g = guards();
        assert!(g.set_configured(vec![configured("203.0.113.0/24", "office VPN")]));
        assert!(!g.set_configured(vec![configured("203.0.113.0/24", "office VPN")]));
        let office = Some(("203.0.113.0/24".to_owned(), ProtectionKind::Configured));
        for raw in [
            "203.0.113.9",
            "::ffff:203.0.113.9",
            "203.0.113.128/25",
            "203.0.0.0/16",
        ] {
            assert_eq!(refusal(&g, raw, false), office, "{raw}");
            assert_eq!(refusal(&g, raw, true), office, "{raw}");
        }
        assert_eq!(refusal(&g, "203.0.114.9", false), None);
        let ip = IpOrCidr::parse("203.0.113.9").expect("ip");
        let refused = g.check_ban(&ip, false).expect_err("protected");
        assert_eq!(refused.rule(), "protected_network");
        assert!(refused.to_string().contains("office VPN"), "{refused}");
        assert!(!refused.overridable());

        assert!(g.set_configured(Vec::new()), "a removal is a change");
        assert_eq!(refusal(&g, "203.0.113.9", false), None);
    }

    #[test]
    fn an_operator_address_is_protected_while_it_is_listed() {
        let g = guards();
        let ip: IpAddr = "198.51.100.77".parse().expect("ip");
        assert!(g.add_operator(ip, "alice"));
        assert!(!g.add_operator(ip, "alice"), "once");
        let alice = Some((
            "198.51.100.77/32".to_owned(),
            ProtectionKind::OperatorSession,
        ));
        assert_eq!(refusal(&g, "198.51.100.77", false), alice);
        assert_eq!(refusal(&g, "198.51.100.64/26", true), alice);
        assert!(g.set_operators(Vec::new()), "the session ended");
        assert_eq!(refusal(&g, "198.51.100.77", false), None);
    }

    #[test]
    fn protected_networks_list_every_kind_once() {
        let g = guards();
        g.set_configured(vec![
            configured("203.0.113.0/24", "office"),
            configured("203.0.113.0/24", "again"),
        ]);
        g.add_operator("198.51.100.77".parse().expect("ip"), "alice");
        let networks: Vec<String> = g
            .protected_networks()
            .iter()
            .map(ToString::to_string)
            .collect();
        for expected in [
            "127.0.0.1/32",
            "198.51.100.20/32",
            "2001:db8:5::1/128",
            "203.0.113.0/24",
            "198.51.100.77/32",
        ] {
            assert!(
                networks.iter().any(|n| n == expected),
                "{expected} in {networks:?}"
            );
        }
        assert_eq!(networks.len(), 5, "{networks:?}");
        let kinds: Vec<ProtectionKind> = g.protected_entries().iter().map(|e| e.kind).collect();
        assert!(kinds.contains(&ProtectionKind::HubAddress));
        assert!(kinds.contains(&ProtectionKind::Configured));
        assert!(kinds.contains(&ProtectionKind::OperatorSession));
    }

    #[test]
    fn protecting_a_network_follows_the_limits_and_never_everything() {
        let g = guards();
        let check = |raw: &str, overridden: bool| {
            g.check_protect(raw.parse().expect("network"), overridden)
                .map(|r| r.map(|r| r.rule()))
                .map_err(|e| e.rule())
        };
        assert_eq!(check("203.0.113.0/24", false), Ok(None));
        assert_eq!(check("10.0.0.0/8", false), Err("wide_network"));
        assert_eq!(check("10.0.0.0/8", true), Ok(Some("wide_network")));
        assert_eq!(check("255.255.255.255/32", false), Err("broadcast"));
        assert_eq!(check("255.255.255.255/32", true), Ok(Some("broadcast")));
        assert_eq!(check("2001:db8::/48", false), Ok(None));
        assert_eq!(check("2000::/3", false), Err("wide_network"));
        assert_eq!(check("0.0.0.0/0", true), Err("covers_everything"));
        assert_eq!(check("::/0", true), Err("covers_everything"));
    }
}
