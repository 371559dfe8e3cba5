//! Where on the internet an address lives: public, or one of the special-purpose ranges of the
//! IANA registries (private, loopback, link-local, documentation, shared CGNAT space, multicast…).
//! Only a public address is ever sent to an outside service.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;
use utoipa::ToSchema;

/// The range an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum AddressScope {
    /// Routed on the public internet: the only scope looked up outside.
    Public,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16).
    Private,
    /// IPv6 unique local addresses (fc00::/7).
    UniqueLocal,
    /// 100.64.0.0/10, carrier-grade NAT (RFC 6598).
    SharedAddressSpace,
    Loopback,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18/15, 2001:2::/48.
    Benchmarking,
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 0.0.0.0, ::.
    Unspecified,
    /// Any other special-purpose or unallocated range (0/8, 240/4, 192.0.0/24, 100::/64,
    /// 2001::/23, 64:ff9b::/96, outside 2000::/3).
    Reserved,
}

impl AddressScope {
    pub fn is_public(self) -> bool {
        self == Self::Public
    }
}

fn in_v4(addr: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(addr) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(addr: Ipv6Addr, net: Ipv6Addr, len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(addr) & mask == u128::from(net) & mask
}

/// The scope of an IPv4 address.
fn classify_v4(addr: Ipv4Addr) -> AddressScope {
    use AddressScope as S;
    let table: [([u8; 4], u32, AddressScope); 16] = [
        ([0, 0, 0, 0], 32, S::Unspecified),
        ([255, 255, 255, 255], 32, S::Broadcast),
        ([0, 0, 0, 0], 8, S::Reserved),
        ([10, 0, 0, 0], 8, S::Private),
        ([172, 16, 0, 0], 12, S::Private),
        ([192, 168, 0, 0], 16, S::Private),
        ([100, 64, 0, 0], 10, S::SharedAddressSpace),
        ([127, 0, 0, 0], 8, S::Loopback),
        ([169, 254, 0, 0], 16, S::LinkLocal),
        ([192, 0, 0, 0], 24, S::Reserved),
        ([192, 0, 2, 0], 24, S::Documentation),
        ([198, 51, 100, 0], 24, S::Documentation),
        ([203, 0, 113, 0], 24, S::Documentation),
        ([198, 18, 0, 0], 15, S::Benchmarking),
        ([224, 0, 0, 0], 4, S::Multicast),
        ([240, 0, 0, 0], 4, S::Reserved),
    ];
    table
        .iter()
        .find(|(net, len, _)| in_v4(addr, *net, *len))
        .map_or(S::Public, |(_, _, scope)| *scope)
}

/// The scope of an IPv6 address; an IPv4-mapped one is its IPv4 address's.
fn classify_v6(addr: Ipv6Addr) -> AddressScope {
    use AddressScope as S;
    if let Some(v4) = addr.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let net = |text: &str| text.parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::UNSPECIFIED);
    let table: [(&str, u32, AddressScope); 12] = [
        ("::", 128, S::Unspecified),
        ("::1", 128, S::Loopback),
        ("64:ff9b::", 96, S::Reserved),
        ("100::", 64, S::Reserved),
        ("2001:db8::", 32, S::Documentation),
        ("2001:2::", 48, S::Benchmarking),
        ("2001::", 23, S::Reserved),
        ("3fff::", 20, S::Documentation),
        ("fc00::", 7, S::UniqueLocal),
        ("fe80::", 10, S::LinkLocal),
        ("ff00::", 8, S::Multicast),
        ("2000::", 3, S::Public),
    ];
    table
        .iter()
        .find(|(text, len, _)| in_v6(addr, net(text), *len))
        .map_or(S::Reserved, |(_, _, scope)| *scope)
}

/// The scope of `addr`.
pub fn classify(addr: IpAddr) -> AddressScope {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AddressScope as S;

    fn check(addr: &str, expected: AddressScope) {
        let parsed: IpAddr = addr.parse().expect("an address");
        assert_eq!(classify(parsed), expected, "{addr}");
    }

    #[test]
    fn ipv4_ranges() {
        check("8.8.8.8", S::Public);
        check("1.1.1.1", S::Public);
        check("100.63.255.255", S::Public);
        check("172.32.0.1", S::Public);
        check("10.1.2.3", S::Private);
        check("172.16.0.1", S::Private);
        check("172.31.255.255", S::Private);
        check("192.168.1.1", S::Private);
        check("100.64.0.1", S::SharedAddressSpace);
        check("100.127.255.255", S::SharedAddressSpace);
        check("127.0.0.1", S::Loopback);
        check("169.254.10.1", S::LinkLocal);
        check("192.0.2.7", S::Documentation);
        check("198.51.100.7", S::Documentation);
        check("203.0.113.9", S::Documentation);
        check("198.18.0.1", S::Benchmarking);
        check("198.19.255.1", S::Benchmarking);
        check("224.0.0.251", S::Multicast);
        check("239.1.1.1", S::Multicast);
        check("255.255.255.255", S::Broadcast);
        check("0.0.0.0", S::Unspecified);
        check("0.1.2.3", S::Reserved);
        check("240.0.0.1", S::Reserved);
        check("192.0.0.8", S::Reserved);
    }

    #[test]
    fn ipv6_ranges() {
        check("2606:4700:4700::1111", S::Public);
        check("2a00:1450:4001::1", S::Public);
        check("::", S::Unspecified);
        check("::1", S::Loopback);
        check("fe80::1", S::LinkLocal);
        check("fd12:3456::1", S::UniqueLocal);
        check("fc00::1", S::UniqueLocal);
        check("ff02::1", S::Multicast);
        check("2001:db8::1", S::Documentation);
        check("3fff:1::1", S::Documentation);
        check("2001:2::5", S::Benchmarking);
        check("2001:0::1", S::Reserved);
        check("64:ff9b::808:808", S::Reserved);
        check("100::1", S::Reserved);
        check("4000::1", S::Reserved);
    }

    #[test]
    fn ipv4_mapped_addresses_are_their_ipv4_address() {
        check("::ffff:10.0.0.1", S::Private);
        check("::ffff:8.8.8.8", S::Public);
        check("::ffff:127.0.0.1", S::Loopback);
    }
}
