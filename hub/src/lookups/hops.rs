//! The rule every request of a lookup passes before it leaves the hub, the first one and each
//! redirect after it (bootstrap → registry → referral): an `http` or `https` URL whose host is one
//! of the operator's configured base URLs, or else resolves only to public addresses; at most
//! [`MAX_HOPS`] redirects. Pure, apart from [`PublicOnly`], the HTTP client's resolver, which
//! applies the same rule to the addresses it connects to, so a name that changes its answer
//! between the check and the connection is refused as well.

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::scope::{AddressScope, classify};

/// Redirects followed at most in one lookup.
pub const MAX_HOPS: usize = 3;

/// Why a hop is not taken; nothing is sent to its target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    #[error("{url} is not an http or https URL")]
    Scheme { url: String },
    #[error("{url} has no host")]
    NoHost { url: String },
    #[error("{host} is {addr}, {scope}: the hub sends nothing outside the public internet")]
    NotPublic {
        host: String,
        addr: IpAddr,
        scope: String,
    },
    #[error("{host} cannot be resolved: {reason}")]
    Unresolved { host: String, reason: String },
    #[error("more than {max} redirects")]
    TooManyHops { max: usize },
    #[error("a redirect without a usable Location ({location:?})")]
    BadLocation { location: String },
}

/// The origins (scheme, host, port) of the operator's configured base URLs: trusted as they
/// are, whatever their addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trusted(Vec<(String, String, u16)>);

fn origin(url: &Url) -> Option<(String, String, u16)> {
    Some((
        url.scheme().to_owned(),
        url.host_str()?.to_ascii_lowercase(),
        url.port_or_known_default()?,
    ))
}

impl Trusted {
    /// The origins of these configured URLs; one that does not parse trusts nothing.
    pub fn of<'a>(urls: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            urls.into_iter()
                .filter_map(|u| Url::parse(u).ok())
                .filter_map(|u| origin(&u))
                .collect(),
        )
    }

    fn contains(&self, url: &Url) -> bool {
        origin(url).is_some_and(|o| self.0.contains(&o))
    }

    /// Whether a name is the host of a configured URL (the resolver's side of the rule).
    fn names(&self, host: &str) -> bool {
        self.0.iter().any(|(_, h, _)| h.eq_ignore_ascii_case(host))
    }
}

/// What is left to check of a hop's target once its URL passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A configured origin, or a public address written in the URL: nothing left.
    Checked,
    /// A name whose addresses must all be public ([`check_resolved`]).
    Name(String),
}

/// The check of a hop's URL: scheme, host, a literal address's scope, trust.
pub fn check_url(url: &Url, trusted: &Trusted) -> Result<Target, HopError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HopError::Scheme {
            url: url.to_string(),
        });
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| HopError::NoHost {
            url: url.to_string(),
        })?;
    if trusted.contains(url) {
        return Ok(Target::Checked);
    }
    // An IPv6 host is written in brackets; a name never parses as an address.
    match host.trim_start_matches('[').trim_end_matches(']').parse() {
        Ok(addr) => public(host, addr).map(|()| Target::Checked),
        Err(_) => Ok(Target::Name(host.to_owned())),
    }
}

/// The check of the addresses a name resolved to: every one public.
pub fn check_resolved(host: &str, addrs: &[IpAddr]) -> Result<(), HopError> {
    if addrs.is_empty() {
        return Err(HopError::Unresolved {
            host: host.to_owned(),
            reason: "no address".to_owned(),
        });
    }
    addrs.iter().try_for_each(|addr| public(host, *addr))
}

fn public(host: &str, addr: IpAddr) -> Result<(), HopError> {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    match classify(addr) {
        AddressScope::Public => Ok(()),
        scope => Err(HopError::NotPublic {
            host: host.to_owned(),
            addr,
            scope: scope_name(scope).to_owned(),
        }),
    }
}

fn scope_name(scope: AddressScope) -> &'static str {
    match scope {
        AddressScope::Public => "public",
        AddressScope::Private => "a private address",
        AddressScope::UniqueLocal => "a unique local address",
        AddressScope::SharedAddressSpace => "in the shared address space",
        AddressScope::Loopback => "a loopback address",
        AddressScope::LinkLocal => "a link-local address",
        AddressScope::Documentation => "a documentation address",
        AddressScope::Benchmarking => "a benchmarking address",
        AddressScope::Multicast => "a multicast address",
        AddressScope::Broadcast => "the broadcast address",
        AddressScope::Unspecified => "the unspecified address",
        AddressScope::Reserved => "a reserved address",
    }
}

/// The target of a redirect from `from` (a relative `Location` is read against it), as hop
/// number `hop` (the first redirect is 1).
pub fn next_hop(from: &Url, location: Option<&str>, hop: usize) -> Result<Url, HopError> {
    if hop > MAX_HOPS {
        return Err(HopError::TooManyHops { max: MAX_HOPS });
    }
    let location = location.unwrap_or_default();
    from.join(location).map_err(|_| HopError::BadLocation {
        location: location.to_owned(),
    })
}

/// The HTTP client's resolver: the system's answer for a name, refused unless every address is
/// public or the name is a configured host. `trusted` is read at each resolution, so a change
/// of the settings applies at once.
pub struct PublicOnly<F>(pub F);

impl<F> Resolve for PublicOnly<F>
where
    F: Fn() -> Trusted + Send + Sync + 'static,
{
    fn resolve(&self, name: Name) -> Resolving {
        let trusted = (self.0)().names(name.as_str());
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !trusted {
                let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
                check_resolved(&host, &ips)?;
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The system's addresses of `host`, checked by [`check_resolved`].
pub async fn resolve_checked(host: &str) -> Result<(), HopError> {
    let addrs: Vec<IpAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| HopError::Unresolved {
            host: host.to_owned(),
            reason: e.to_string(),
        })?
        .map(|a| a.ip())
        .collect();
    check_resolved(host, &addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(raw: &str) -> Url {
        Url::parse(raw).expect("url")
    }

    fn trusted() -> Trusted {
        Trusted::of([
            "http://127.0.0.1:8081/bootstrap/",
            "https://data.iana.org/rdap/",
        ])
    }

    #[test]
    fn each_url_is_checked_by_scheme_literal_address_and_trust() {
        let check = |raw: &str| check_url(&url(raw), &trusted());
        // The configured origins, whatever their address.
        assert_eq!(
            check("http://127.0.0.1:8081/rdap/ip/8.8.8.8"),
            Ok(Target::Checked)
        );
        assert_eq!(
            check("https://data.iana.org/rdap/ipv4.json"),
            Ok(Target::Checked)
        );
        // Public literal addresses; names are left to the resolution.
        assert_eq!(check("https://8.8.8.8/ip/1"), Ok(Target::Checked));
        assert_eq!(check("https://[2a00:1450::1]/ip/1"), Ok(Target::Checked));
        assert_eq!(
            check("https://rdap.arin.net/registry/ip/8.8.8.8"),
            Ok(Target::Name("rdap.arin.net".into()))
        );
        // The same host on another port or scheme is not the configured origin.
        for raw in [
            "http://127.0.0.1:8082/rdap/",
            "https://127.0.0.1:8081/rdap/",
            "http://10.0.0.1/rdap/ip/1.2.3.4",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8081/",
            "http://[fe80::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://0.0.0.0/",
        ] {
            assert!(
                matches!(check(raw), Err(HopError::NotPublic { .. })),
                "{raw}: {:?}",
                check(raw)
            );
        }
        for raw in ["ftp://8.8.8.8/", "file:///etc/passwd", "gopher://8.8.8.8/"] {
            assert!(
                matches!(
                    check(raw),
                    Err(HopError::Scheme { .. } | HopError::NoHost { .. })
                ),
                "{raw}: {:?}",
                check(raw)
            );
        }
    }

    #[test]
    fn a_name_passes_only_when_every_address_is_public() {
        let v4 = |s: &str| s.parse::<IpAddr>().expect("address");
        assert_eq!(
            check_resolved("a", &[v4("8.8.8.8"), v4("2a00:1450::1")]),
            Ok(())
        );
        assert!(matches!(
            check_resolved("a", &[v4("8.8.8.8"), v4("127.0.0.1")]),
            Err(HopError::NotPublic { .. })
        ));
        assert!(matches!(
            check_resolved("a", &[]),
            Err(HopError::Unresolved { .. })
        ));
        let refused = check_resolved("intranet", &[v4("10.1.2.3")]).expect_err("private");
        assert_eq!(
            refused.to_string(),
            "intranet is 10.1.2.3, a private address: the hub sends nothing outside the public internet"
        );
    }

    #[test]
    fn redirects_are_read_against_their_origin_and_bounded() {
        let from = url("http://127.0.0.1:8081/rdap/ip/8.8.8.8");
        assert_eq!(
            next_hop(&from, Some("/other/ip/8.8.8.8"), 1),
            Ok(url("http://127.0.0.1:8081/other/ip/8.8.8.8"))
        );
        assert_eq!(
            next_hop(&from, Some("http://10.0.0.1/x"), MAX_HOPS),
            Ok(url("http://10.0.0.1/x"))
        );
        assert_eq!(
            next_hop(&from, Some("/x"), MAX_HOPS + 1),
            Err(HopError::TooManyHops { max: MAX_HOPS })
        );
        assert!(matches!(
            next_hop(&from, Some("http://[::1"), 1),
            Err(HopError::BadLocation { .. })
        ));
    }
}
