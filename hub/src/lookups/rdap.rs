//! RDAP, the successor of whois: the bootstrap files that say which registry serves which
//! network (IANA's `ipv4.json`/`ipv6.json`, RFC 9224), and a registry's answer about an IP network
//! (RFC 9083), read into the few facts the address page shows. Both parsers are pure.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Entities kept from one answer (the rest are dropped).
const MAX_ENTITIES: usize = 20;
/// How deep nested entities (a registrant's abuse contact) are followed.
const MAX_ENTITY_DEPTH: usize = 3;
/// Events and CIDRs kept from one answer.
const MAX_ITEMS: usize = 20;
/// Longest text kept from a field, in characters.
const MAX_TEXT: usize = 300;

/// One bootstrap file: networks and the registries' base URLs that serve them.
#[derive(Debug, Clone, Default)]
pub struct Bootstrap {
    services: Vec<(IpNet, Vec<String>)>,
}

impl Bootstrap {
    /// Reads a bootstrap file: `{"services": [[["1.0.0.0/8", …], ["https://rdap.apnic.net/", …]], …]}`.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let doc: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let services = doc
            .get("services")
            .and_then(Value::as_array)
            .ok_or("no `services` array")?;
        let mut out = Vec::new();
        for service in services {
            let (Some(nets), Some(urls)) = (
                service.get(0).and_then(Value::as_array),
                service.get(1).and_then(Value::as_array),
            ) else {
                return Err("a service is not [[networks], [urls]]".to_owned());
            };
            let urls: Vec<String> = urls
                .iter()
                .filter_map(Value::as_str)
                .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
                .map(str::to_owned)
                .collect();
            for net in nets.iter().filter_map(Value::as_str) {
                if let Ok(net) = net.parse::<IpNet>() {
                    out.push((net, urls.clone()));
                }
            }
        }
        Ok(Self { services: out })
    }

    /// The base URL of the registry serving `addr`: the longest network that holds it, its https
    /// URL first. Ends with `/`.
    pub fn registry_for(&self, addr: IpAddr) -> Option<String> {
        let (_, urls) = self
            .services
            .iter()
            .filter(|(net, urls)| net.contains(&addr) && !urls.is_empty())
            .max_by_key(|(net, _)| net.prefix_len())?;
        let url = urls
            .iter()
            .find(|u| u.starts_with("https://"))
            .or_else(|| urls.first())?;
        Some(if url.ends_with('/') {
            url.clone()
        } else {
            format!("{url}/")
        })
    }
}

/// Someone the registry names for the network: the registrant, its abuse desk, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdapEntity {
    pub handle: Option<String>,
    /// e.g. `registrant`, `abuse`, `technical`.
    pub roles: Vec<String>,
    /// The vCard's `fn` (formatted name).
    pub name: Option<String>,
    /// The vCard's `email`.
    pub email: Option<String>,
}

/// A registry event: `registration`, `last changed`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdapEvent {
    pub action: String,
    /// As the registry wrote it (RFC 3339).
    pub date: String,
}

/// What a registry says about the network holding an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdapNetwork {
    pub handle: Option<String>,
    pub name: Option<String>,
    /// e.g. `DIRECT ALLOCATION`, `ASSIGNED PA`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub start_address: Option<String>,
    pub end_address: Option<String>,
    /// The network as CIDR blocks (from the `cidr0` extension, else from its first and last
    /// address).
    pub cidrs: Vec<String>,
    pub country: Option<String>,
    pub parent_handle: Option<String>,
    pub entities: Vec<RdapEntity>,
    /// The first e-mail of an entity with the `abuse` role.
    pub abuse_email: Option<String>,
    pub events: Vec<RdapEvent>,
    /// The registry's base URL the answer came from.
    pub registry: String,
}

fn text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(|s| {
        s.chars()
            .filter(|c| !c.is_control())
            .take(MAX_TEXT)
            .collect()
    })
}

/// A vCard property's text (`["fn", {}, "text", "Google LLC"]`) out of a jCard
/// (`["vcard", [[…], …]]`, RFC 7095).
fn vcard(entity: &Value, property: &str) -> Option<String> {
    entity
        .get("vcardArray")?
        .get(1)?
        .as_array()?
        .iter()
        .find(|p| p.get(0).and_then(Value::as_str) == Some(property))?
        .get(3)?
        .as_str()
        .map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(MAX_TEXT)
                .collect()
        })
}

fn collect_entities(list: &Value, depth: usize, out: &mut Vec<RdapEntity>) {
    let Some(list) = list.as_array() else {
        return;
    };
    for entity in list {
        if out.len() >= MAX_ENTITIES {
            return;
        }
        out.push(RdapEntity {
            handle: text(entity, "handle"),
            roles: entity
                .get("roles")
                .and_then(Value::as_array)
                .map(|roles| {
                    roles
                        .iter()
                        .filter_map(Value::as_str)
                        .take(MAX_ITEMS)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            name: vcard(entity, "fn"),
            email: vcard(entity, "email"),
        });
        if depth + 1 < MAX_ENTITY_DEPTH
            && let Some(nested) = entity.get("entities")
        {
            collect_entities(nested, depth + 1, out);
        }
    }
}

/// The CIDR blocks of the `cidr0` extension: `[{"v4prefix": "8.8.8.0", "length": 24}, …]`.
fn cidr0(doc: &Value) -> Vec<String> {
    doc.get("cidr0_cidrs")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|c| {
                    let prefix = c
                        .get("v4prefix")
                        .or_else(|| c.get("v6prefix"))
                        .and_then(Value::as_str)?;
                    let length = c.get("length").and_then(Value::as_u64)?;
                    format!("{prefix}/{length}").parse::<IpNet>().ok()
                })
                .take(MAX_ITEMS)
                .map(|n| n.to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The fewest CIDR blocks covering `start` to `end` (same family, start ≤ end).
fn range_cidrs(start: IpAddr, end: IpAddr) -> Vec<String> {
    let (bits, mut lo, hi) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (32u32, u128::from(u32::from(a)), u128::from(u32::from(b)))
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (128u32, u128::from(a), u128::from(b)),
        _ => return Vec::new(),
    };
    let last_of = |lo: u128, size: u32| {
        if size >= 128 {
            u128::MAX
        } else {
            lo.saturating_add((1u128 << size) - 1)
        }
    };
    let mut out = Vec::new();
    while lo <= hi && out.len() < MAX_ITEMS {
        // The largest block aligned at `lo` that stays within `hi`.
        let mut size = lo.trailing_zeros().min(bits);
        while size > 0 && last_of(lo, size) > hi {
            size -= 1;
        }
        let addr = if bits == 32 {
            IpAddr::from(std::net::Ipv4Addr::from(
                u32::try_from(lo).unwrap_or(u32::MAX),
            ))
        } else {
            IpAddr::from(std::net::Ipv6Addr::from(lo))
        };
        out.push(format!("{addr}/{}", bits - size));
        match last_of(lo, size).checked_add(1) {
            Some(next) => lo = next,
            None => break,
        }
    }
    out
}

/// Reads a registry's answer to `/ip/{addr}` (an RFC 9083 `ip network` object).
pub fn parse_network(body: &[u8], registry: &str) -> Result<RdapNetwork, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !doc.is_object() {
        return Err("the answer is not a JSON object".to_owned());
    }
    if let Some(class) = doc.get("objectClassName").and_then(Value::as_str)
        && class != "ip network"
    {
        return Err(format!("the answer is an {class:?}, not an \"ip network\""));
    }
    let start_address = text(&doc, "startAddress");
    let end_address = text(&doc, "endAddress");
    let mut cidrs = cidr0(&doc);
    if cidrs.is_empty()
        && let (Some(Ok(start)), Some(Ok(end))) = (
            start_address.as_deref().map(str::parse::<IpAddr>),
            end_address.as_deref().map(str::parse::<IpAddr>),
        )
        && start <= end
    {
        cidrs = range_cidrs(start, end);
    }
    let mut entities = Vec::new();
    if let Some(list) = doc.get("entities") {
        collect_entities(list, 0, &mut entities);
    }
    let abuse_email = entities
        .iter()
        .filter(|e| e.roles.iter().any(|r| r == "abuse"))
        .find_map(|e| e.email.clone());
    let events = doc
        .get("events")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|e| {
                    Some(RdapEvent {
                        action: text(e, "eventAction")?,
                        date: text(e, "eventDate")?,
                    })
                })
                .take(MAX_ITEMS)
                .collect()
        })
        .unwrap_or_default();
    Ok(RdapNetwork {
        handle: text(&doc, "handle"),
        name: text(&doc, "name"),
        kind: text(&doc, "type"),
        start_address,
        end_address,
        cidrs,
        country: text(&doc, "country"),
        parent_handle: text(&doc, "parentHandle"),
        entities,
        abuse_email,
        events,
        registry: registry.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOTSTRAP: &str = r#"{
      "version": "1.0", "publication": "2024-05-01T20:00:01Z",
      "description": "RDAP bootstrap file for IPv4 address allocations",
      "services": [
        [["41.0.0.0/8", "102.0.0.0/8"], ["https://rdap.afrinic.net/rdap/", "http://rdap.afrinic.net/rdap/"]],
        [["8.0.0.0/8"], ["https://rdap.arin.net/registry/", "http://rdap.arin.net/registry/"]],
        [["8.8.0.0/16"], ["http://rdap.example.net/more-specific"]]
      ]
    }"#;

    #[test]
    fn the_bootstrap_picks_the_longest_network_and_https() {
        let b = Bootstrap::parse(BOOTSTRAP.as_bytes()).expect("parses");
        let at = |ip: &str| b.registry_for(ip.parse().expect("ip"));
        assert_eq!(
            at("41.1.2.3").as_deref(),
            Some("https://rdap.afrinic.net/rdap/")
        );
        assert_eq!(
            at("8.1.2.3").as_deref(),
            Some("https://rdap.arin.net/registry/")
        );
        assert_eq!(
            at("8.8.8.8").as_deref(),
            Some("http://rdap.example.net/more-specific/")
        );
        assert_eq!(at("9.9.9.9"), None);
        assert!(Bootstrap::parse(b"{}").is_err());
        assert!(Bootstrap::parse(b"not json").is_err());
    }

    /// ARIN's answer for 8.8.8.0/24, shortened (the shape of RFC 9083 with the cidr0 extension).
    const ARIN: &str = r#"{
      "rdapConformance": ["nro_rdap_profile_0", "rdap_level_0", "cidr0", "arin_originas0"],
      "objectClassName": "ip network",
      "handle": "NET-8-8-8-0-2", "startAddress": "8.8.8.0", "endAddress": "8.8.8.255",
      "ipVersion": "v4", "name": "GOGL", "type": "DIRECT ALLOCATION",
      "parentHandle": "NET-8-0-0-0-0",
      "cidr0_cidrs": [{"v4prefix": "8.8.8.0", "length": 24}],
      "status": ["active"], "port43": "whois.arin.net",
      "events": [{"eventAction": "last changed", "eventDate": "2023-12-28T17:24:56-05:00"},
                 {"eventAction": "registration", "eventDate": "2023-12-28T17:24:33-05:00"}],
      "entities": [{
        "objectClassName": "entity", "handle": "GOGL", "roles": ["registrant"],
        "vcardArray": ["vcard", [["version", {}, "text", "4.0"], ["fn", {}, "text", "Google LLC"],
                                 ["kind", {}, "text", "org"]]],
        "entities": [{
          "objectClassName": "entity", "handle": "ABUSE5250-ARIN", "roles": ["abuse"],
          "vcardArray": ["vcard", [["version", {}, "text", "4.0"], ["fn", {}, "text", "Abuse"],
                                   ["kind", {}, "text", "group"],
                                   ["email", {}, "text", "network-abuse@google.com"]]]
        }]
      }]
    }"#;

    #[test]
    fn a_registry_answer_gives_its_network_entities_and_abuse_address() {
        let n = parse_network(ARIN.as_bytes(), "https://rdap.arin.net/registry/").expect("parses");
        assert_eq!(n.handle.as_deref(), Some("NET-8-8-8-0-2"));
        assert_eq!(n.name.as_deref(), Some("GOGL"));
        assert_eq!(n.kind.as_deref(), Some("DIRECT ALLOCATION"));
        assert_eq!(n.cidrs, ["8.8.8.0/24"]);
        assert_eq!(n.entities.len(), 2);
        assert_eq!(n.entities[0].name.as_deref(), Some("Google LLC"));
        assert_eq!(n.entities[0].roles, ["registrant"]);
        assert_eq!(n.abuse_email.as_deref(), Some("network-abuse@google.com"));
        assert_eq!(n.events[1].action, "registration");
        assert_eq!(n.country, None);
    }

    #[test]
    fn without_cidr0_the_range_becomes_blocks() {
        let body = r#"{"objectClassName": "ip network", "handle": "RIPE-X", "country": "DE",
                       "startAddress": "193.0.0.0", "endAddress": "193.0.7.255"}"#;
        let n = parse_network(body.as_bytes(), "r/").expect("parses");
        assert_eq!(n.cidrs, ["193.0.0.0/21"]);
        assert_eq!(n.country.as_deref(), Some("DE"));
        let odd = range_cidrs(
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.6".parse().expect("ip"),
        );
        assert_eq!(
            odd,
            ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
        let v6 = range_cidrs(
            "2001:db8::".parse().expect("ip"),
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"
                .parse()
                .expect("ip"),
        );
        assert_eq!(v6, ["2001:db8::/32"]);
    }

    #[test]
    fn answers_that_are_not_networks_are_refused() {
        assert!(parse_network(b"[]", "r/").is_err());
        assert!(parse_network(br#"{"objectClassName": "entity"}"#, "r/").is_err());
        assert!(parse_network(b"<html>", "r/").is_err());
    }
}
