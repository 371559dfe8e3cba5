//! What one feed lists at a moment: the addresses with a ban in force on a selected server and jail
//! (never the probe jail), that reach the feed's thresholds, whose newest ban is recent enough;
//! protected networks subtracted; entries inside others dropped, or everything aggregated. A feed
//! naming sharing policies chooses among those policies' shared bans instead ([`policy_index`]):
//! the server is the one shared to, the jail the origin's.

use std::collections::HashMap;

use banhub_proto::rules::PROBE_JAIL;
use chrono::{DateTime, TimeDelta, Utc};
use ipnet::IpNet;

use super::bans::BanIndex;
use super::cidr::{self, Entry};
use crate::domain::Server;
use crate::domain::feeds::{BanChange, FeedServers, FeedSpec, PolicyShare};

/// One address's tally over the selected servers and jails.
struct Tally {
    bans: u64,
    servers: Vec<u32>,
    last_ban: DateTime<Utc>,
    in_force: bool,
    until: Option<DateTime<Utc>>,
}

/// The entries of `spec` at `now`, in address order.
pub fn select(
    spec: &FeedSpec,
    index: &BanIndex,
    servers: &[Server],
    protected: &[IpNet],
    now: DateTime<Utc>,
) -> Vec<Entry> {
    let server_ok: Vec<bool> = index
        .servers()
        .iter()
        .map(|id| selects_server(spec, servers, id))
        .collect();
    let jail_ok: Vec<bool> = index
        .jails()
        .iter()
        .map(|jail| {
            jail != PROBE_JAIL
                && (spec.jails.is_empty() || spec.jails.iter().any(|p| p.matches(jail)))
        })
        .collect();
    let oldest = spec
        .max_age_secs
        .and_then(|s| i64::try_from(s).ok())
        .map(|s| now - TimeDelta::seconds(s));
    let mut tallies: HashMap<IpNet, Tally> = HashMap::new();
    for (net, server, jail, state) in index.iter_numbered() {
        if !server_ok.get(server as usize).copied().unwrap_or(false)
            || !jail_ok.get(jail as usize).copied().unwrap_or(false)
        {
            continue;
        }
        let in_force = state.in_force(now);
        let tally = tallies.entry(net).or_insert(Tally {
            bans: 0,
            servers: Vec::new(),
            last_ban: state.last_ban,
            in_force: false,
            until: Some(now),
        });
        tally.bans += u64::from(state.bans);
        if !tally.servers.contains(&server) {
            tally.servers.push(server);
        }
        tally.last_ban = tally.last_ban.max(state.last_ban);
        if in_force {
            tally.until = if tally.in_force {
                match (tally.until, state.until) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                }
            } else {
                state.until
            };
            tally.in_force = true;
        }
    }
    let entries = tallies
        .into_iter()
        .filter(|(_, t)| {
            t.in_force
                && t.bans >= u64::from(spec.min_bans)
                && t.servers.len() as u64 >= u64::from(spec.min_servers)
                && oldest.is_none_or(|oldest| t.last_ban >= oldest)
        })
        .flat_map(|(net, t)| {
            cidr::subtract(net, protected)
                .into_iter()
                .map(move |net| Entry {
                    net,
                    until: t.until,
                })
        })
        .collect();
    if spec.aggregate {
        cidr::aggregate(entries)
    } else {
        cidr::normalize(entries)
    }
}

/// The shared bans of `spec`'s policies as an index [`select`] reads: one ban per shared ban, on
/// the server it was shared to, in the origin's jail, from its recording to its expiry.
pub fn policy_index(spec: &FeedSpec, shares: &[PolicyShare]) -> BanIndex {
    let mut index = BanIndex::default();
    for share in shares
        .iter()
        .filter(|s| spec.policies.contains(&s.policy_id))
    {
        index.apply(&BanChange {
            event_id: 0,
            server_id: share.target,
            jail: share.origin_jail.clone(),
            net: share.net,
            ban: true,
            banned_at: share.created_at,
            until: share.until,
        });
    }
    index
}

fn selects_server(spec: &FeedSpec, servers: &[Server], id: &crate::domain::ServerId) -> bool {
    match &spec.servers {
        FeedServers::All => true,
        FeedServers::Ids(ids) => ids.contains(id),
        FeedServers::Labels(wanted) => servers.iter().find(|s| s.id == *id).is_some_and(|s| {
            wanted
                .iter()
                .all(|(k, v)| s.labels.as_map().get(k) == Some(v))
        }),
    }
}

/// When the newest end among the entries passes: the earliest `until` after `now`.
pub fn next_change(entries: &[Entry], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    entries
        .iter()
        .filter_map(|e| e.until)
        .filter(|t| *t > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ServerId;
    use crate::domain::feeds::FeedDraft;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    fn server(n: u128) -> ServerId {
        ServerId::from_uuid(uuid::Uuid::from_u128(n))
    }

    fn ban(id: i64, server_n: u128, jail: &str, ip: &str, until: Option<i64>) -> BanChange {
        BanChange {
            event_id: id,
            server_id: server(server_n),
            jail: jail.to_owned(),
            net: ip
                .parse()
                .or_else(|_| ip.parse::<std::net::IpAddr>().map(IpNet::from))
                .expect(ip),
            ban: true,
            banned_at: at(1_000 + id),
            until: until.map(at),
        }
    }

    fn spec(edit: impl FnOnce(&mut FeedDraft)) -> FeedSpec {
        let mut draft = FeedDraft {
            name: "edge".into(),
            all_servers: true,
            ..FeedDraft::default()
        };
        edit(&mut draft);
        FeedSpec::parse(draft).expect("spec")
    }

    fn listed(spec: &FeedSpec, index: &BanIndex, protected: &[&str], now: i64) -> Vec<String> {
        let protected: Vec<IpNet> = protected.iter().map(|p| p.parse().expect(p)).collect();
        select(spec, index, &[], &protected, at(now))
            .into_iter()
            .map(|e| e.net.to_string())
            .collect()
    }

    fn index() -> BanIndex {
        let mut index = BanIndex::default();
        for change in [
            ban(1, 1, "sshd", "192.0.2.1", Some(5_000)),
            ban(2, 2, "sshd", "192.0.2.1", Some(6_000)),
            ban(3, 1, "nginx", "192.0.2.2", None),
            ban(4, 1, PROBE_JAIL, "192.0.2.99", None),
            ban(5, 1, "sshd", "198.51.100.0/30", Some(1_500)),
        ] {
            index.apply(&change);
        }
        index
    }

    #[test]
    fn lists_bans_in_force_and_never_the_probe_jail() {
        let index = index();
        assert_eq!(
            listed(&spec(|_| {}), &index, &[], 1_200),
            ["192.0.2.1/32", "192.0.2.2/32", "198.51.100.0/30"]
        );
        // The network's ban time is over at 1,500.
        assert_eq!(
            listed(&spec(|_| {}), &index, &[], 1_500),
            ["192.0.2.1/32", "192.0.2.2/32"]
        );
        // At 6,000 only the permanent ban is left.
        assert_eq!(listed(&spec(|_| {}), &index, &[], 6_000), ["192.0.2.2/32"]);
    }

    #[test]
    fn thresholds_jails_servers_and_age_filter() {
        let index = index();
        let two_servers = spec(|d| d.min_servers = Some(2));
        assert_eq!(listed(&two_servers, &index, &[], 1_200), ["192.0.2.1/32"]);
        let two_bans = spec(|d| d.min_bans = Some(2));
        assert_eq!(listed(&two_bans, &index, &[], 1_200), ["192.0.2.1/32"]);
        let nginx = spec(|d| d.jails = vec!["ng*".into()]);
        assert_eq!(listed(&nginx, &index, &[], 1_200), ["192.0.2.2/32"]);
        let second = spec(|d| {
            d.all_servers = false;
            d.server_ids = vec![server(2).to_string()];
        });
        assert_eq!(listed(&second, &index, &[], 1_200), ["192.0.2.1/32"]);
        // Newest bans at 1,002..1,005; a minute of age at 1,063 keeps those from 1,003 on.
        let young = spec(|d| d.max_age_secs = Some(60));
        assert_eq!(
            listed(&young, &index, &[], 1_063),
            ["192.0.2.2/32", "198.51.100.0/30"]
        );
    }

    #[test]
    fn protected_networks_are_subtracted() {
        let index = index();
        assert_eq!(
            listed(
                &spec(|_| {}),
                &index,
                &["192.0.2.0/24", "198.51.100.1/32"],
                1_200
            ),
            ["198.51.100.0/32", "198.51.100.2/31"]
        );
    }

    #[test]
    fn an_address_ends_with_its_last_ban_in_force() {
        let index = index();
        let entries = select(&spec(|_| {}), &index, &[], &[], at(1_200));
        let first = entries.first().expect("entry");
        assert_eq!(first.until, Some(at(6_000)));
        assert_eq!(next_change(&entries, at(1_200)), Some(at(1_500)));
    }

    fn share(ip: &str, target: u128, policy: &str, until: Option<i64>) -> PolicyShare {
        PolicyShare {
            net: ip.parse::<std::net::IpAddr>().map(IpNet::from).expect(ip),
            target: server(target),
            origin_jail: "sshd".to_owned(),
            policy_id: policy.to_owned(),
            created_at: at(1_000),
            until: until.map(at),
        }
    }

    #[test]
    fn a_feed_of_policies_lists_their_shared_bans_on_its_servers() {
        let (p, q) = (
            "00000000-0000-0000-0000-000000000001".to_owned(),
            "00000000-0000-0000-0000-000000000002".to_owned(),
        );
        let shares = [
            share("192.0.2.1", 2, &p, Some(5_000)),
            share("192.0.2.2", 3, &p, None),
            share("192.0.2.3", 2, &q, None),
            share("192.0.2.4", 2, &p, Some(1_100)),
        ];
        let on = |policies: &[&String], servers: Option<u128>| {
            let feed = spec(|d| {
                d.policies = policies.iter().map(|p| (*p).clone()).collect();
                if let Some(n) = servers {
                    d.all_servers = false;
                    d.server_ids = vec![server(n).to_string()];
                }
            });
            let index = policy_index(&feed, &shares);
            listed(&feed, &index, &[], 1_200)
        };
        // 192.0.2.4's shared ban has expired.
        assert_eq!(on(&[&p], None), ["192.0.2.1/32", "192.0.2.2/32"]);
        assert_eq!(on(&[&q], None), ["192.0.2.3/32"]);
        assert_eq!(
            on(&[&p, &q], None),
            ["192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32"]
        );
        // Only the shared bans on the feed's servers.
        assert_eq!(on(&[&p], Some(3)), ["192.0.2.2/32"]);
        assert!(on(&[&p], Some(1)).is_empty());
    }
}
