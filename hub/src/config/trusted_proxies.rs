//! `TrustedProxies`: the reverse proxies whose `X-Forwarded-For` the hub believes
//! (`http.trusted_proxies`, networks in CIDR form or single addresses). `serve::forwarded` takes
//! the client address from the header only when the peer is one of them.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The trusted proxies' networks; empty (the default): no header is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ProxyList", into = "Vec<String>")]
pub struct TrustedProxies(Vec<IpNet>);

/// How the setting may be written: a TOML list, or one string with the entries separated by commas
/// (an environment variable).
#[derive(Deserialize)]
#[serde(untagged)]
enum ProxyList {
    Many(Vec<String>),
    One(String),
}

/// An entry that is neither an address nor a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "http.trusted_proxies: {0:?} is not an address or a network; write addresses or CIDRs such as \
     10.0.0.5 or 10.0.0.0/24 (a list, or one string separated by commas)"
)]
pub struct TrustedProxiesError(String);

impl TrustedProxies {
    /// Parses each entry: an address (`10.0.0.5`) or a network (`10.0.0.0/24`, host bits ignored).
    pub fn parse<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, TrustedProxiesError> {
        let mut nets = Vec::new();
        for raw in entries {
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            let net = match raw.parse::<IpNet>() {
                Ok(net) => net.trunc(),
                Err(_) => raw
                    .parse::<IpAddr>()
                    .map(IpNet::from)
                    .map_err(|_| TrustedProxiesError(raw.to_owned()))?,
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }

    /// Whether `peer` is a trusted proxy (an IPv4-mapped IPv6 peer is read as IPv4).
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|net| net.contains(&peer))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl TryFrom<ProxyList> for TrustedProxies {
    type Error = TrustedProxiesError;

    fn try_from(list: ProxyList) -> Result<Self, Self::Error> {
        match list {
            ProxyList::Many(entries) => Self::parse(entries.iter().map(String::as_str)),
            ProxyList::One(text) => Self::parse(text.split(',')),
        }
    }
}

impl From<TrustedProxies> for Vec<String> {
    fn from(proxies: TrustedProxies) -> Self {
        proxies.0.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&entries.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_addresses_or_networks() {
        let proxies = TrustedProxies::parse(["10.0.0.5", " 192.0.2.77/24", "::1"]).expect("valid");
        assert_eq!(
            Vec::<String>::from(proxies.clone()),
            ["10.0.0.5/32", "192.0.2.0/24", "::1/128"]
        );
        assert!(proxies.trusts("192.0.2.200".parse().expect("ip")));
        assert!(proxies.trusts("::ffff:10.0.0.5".parse().expect("ip")));
        assert!(!proxies.trusts("10.0.0.6".parse().expect("ip")));
        assert!(TrustedProxies::default().is_empty());
        let err = TrustedProxies::parse(["10.0.0.0/33"]).expect_err("invalid");
        assert!(err.to_string().contains("\"10.0.0.0/33\""), "{err}");
        assert!(TrustedProxies::parse(["proxy.local"]).is_err());
    }

    #[test]
    fn one_string_separates_entries_with_commas() {
        let list: TrustedProxies =
            serde_json::from_str("\"10.0.0.1, 10.0.1.0/24\"").expect("string");
        assert_eq!(Vec::<String>::from(list), ["10.0.0.1/32", "10.0.1.0/24"]);
        let list: TrustedProxies = serde_json::from_str("[\"10.0.0.1\"]").expect("list");
        assert_eq!(Vec::<String>::from(list), ["10.0.0.1/32"]);
        assert!(serde_json::from_str::<TrustedProxies>("\"10.0.0.1, nope\"").is_err());
    }
}
