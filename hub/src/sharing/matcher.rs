//! Which bans a policy shares, with whom and for how long; and [`into_shared_bans`], the one place
//! where a match (of a policy, or of any other source such as a fleet recidive rule) becomes the
//! shared bans recorded per target: refused addresses become skips, and the storm breaker of the
//! batch may veto them all. Pure: no store, no clock.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::domain::breaker::{Admission, StormBreaker};
use crate::domain::events::{BanDuration, BanFacts, EventBody, EventId, StoredEvent};
use crate::domain::sharing::{
    NewSharedBan, ORIGIN_UNKNOWN_SECS, OriginLift, PolicySpec, ShareDuration, ShareSource,
};
use crate::domain::{Guards, Server, ServerId};

/// Whether bans of `jail` may start shared bans: never those of banhub's own jails (the shared-ban
/// jail itself, so a shared ban never becomes an origin; and the delivery probe's).
pub fn is_origin_jail(jail: &str) -> bool {
    jail != banhub_proto::rules::SHARED_JAIL && jail != banhub_proto::rules::PROBE_JAIL
}

/// The ban facts of `event` if it is a ban that may be shared.
pub fn origin_ban(event: &StoredEvent) -> Option<&BanFacts> {
    match &event.body {
        EventBody::Ban(facts) if is_origin_jail(facts.jail.as_str()) => Some(facts),
        _ => None,
    }
}

/// The unban facts of `event` if it is an unban at an origin.
pub fn origin_unban(event: &StoredEvent) -> Option<&BanFacts> {
    match &event.body {
        EventBody::Unban(facts) if is_origin_jail(facts.jail.as_str()) => Some(facts),
        _ => None,
    }
}

/// Whether `policy` shares a ban with `facts` reported by `origin`.
pub fn policy_matches(policy: &PolicySpec, origin: &Server, facts: &BanFacts) -> bool {
    policy.enabled
        && is_origin_jail(facts.jail.as_str())
        && policy.sources.matches(origin)
        && (policy.jails.is_empty() || policy.jails.iter().any(|p| p.matches(facts.jail.as_str())))
        && policy.min_failures.is_none_or(|min| facts.failures >= min)
}

/// The servers `policy` shares a ban of `origin` with: its targets with an agent, never the origin.
pub fn targets(policy: &PolicySpec, servers: &[Server], origin: ServerId) -> Vec<ServerId> {
    servers
        .iter()
        .filter(|s| s.id != origin && s.agent_id.is_some() && policy.targets.matches(s))
        .map(|s| s.id)
        .collect()
}

/// When a shared ban made by `duration` ends (`None`: when lifted). `banned_at` is when the
/// origin banned; `step` is the how-many-th time this source shares the address (from 1).
pub fn expires_at(
    duration: &ShareDuration,
    facts: &BanFacts,
    banned_at: DateTime<Utc>,
    step: u32,
) -> Option<DateTime<Utc>> {
    let seconds = match duration {
        ShareDuration::Origin => match facts.ban_duration {
            Some(BanDuration::Permanent) => return None,
            Some(BanDuration::Seconds(s)) => s,
            None => ORIGIN_UNKNOWN_SECS,
        },
        ShareDuration::Fixed { seconds } => *seconds,
        ShareDuration::Ladder { steps } => {
            let index = usize::try_from(step.saturating_sub(1)).unwrap_or(usize::MAX);
            steps
                .get(index)
                .or(steps.last())
                .copied()
                .unwrap_or(ORIGIN_UNKNOWN_SECS)
        }
    };
    let seconds = i64::try_from(seconds).unwrap_or(i64::MAX / 1000);
    Some(banned_at + chrono::Duration::seconds(seconds))
}

/// When the origin banned: the time fail2ban said, else when the event happened.
pub fn banned_at(event: &StoredEvent, facts: &BanFacts) -> DateTime<Utc> {
    facts
        .ban_time
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .unwrap_or(event.occurred_at)
}

/// A ban one source shares: what, where from, with whom, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMatch {
    pub ip: banhub_proto::rules::IpOrCidr,
    pub origin_server: ServerId,
    pub origin_jail: banhub_proto::rules::JailName,
    pub origin_event: EventId,
    pub source: ShareSource,
    pub step: u32,
    pub expires_at: Option<DateTime<Utc>>,
    pub targets: Vec<ServerId>,
}

/// Turns a match into one shared ban per target: an address the lockout guard refuses is recorded
/// skipped with the guard's rule, never sent (and never counted by the breaker); the breaker,
/// asked for the bans to deliver, drops them all when their source is paused or they trip it.
pub fn into_shared_bans(
    m: ShareMatch,
    guards: &Guards,
    breaker: &mut StormBreaker,
) -> Vec<NewSharedBan> {
    if m.targets.is_empty() || breaker.is_paused(m.origin_server) {
        return Vec::new();
    }
    let skipped = guards
        .check_ban(&m.ip, false)
        .err()
        .map(|refusal| format!("{}: {refusal}", refusal.rule()));
    if skipped.is_none() {
        let bans = u32::try_from(m.targets.len()).unwrap_or(u32::MAX);
        if breaker.admit(m.origin_server, m.origin_event, bans) != Admission::Admitted {
            return Vec::new();
        }
    }
    m.targets
        .iter()
        .map(|target| NewSharedBan {
            ip: m.ip,
            target: *target,
            origin_server: m.origin_server,
            origin_jail: m.origin_jail.clone(),
            origin_event: Some(m.origin_event),
            source: m.source.clone(),
            step: m.step,
            expires_at: m.expires_at,
            skipped: skipped.clone(),
        })
        .collect()
}

/// Counts how many times each policy has shared each address, the stored counts plus those of
/// the batch being matched, to pick ladder steps.
#[derive(Debug, Default)]
pub struct Steps(HashMap<(String, String), u32>);

impl Steps {
    pub fn new(stored: HashMap<(String, String), u32>) -> Self {
        Self(stored)
    }

    /// The step of one more share of `ip` by `policy`.
    pub fn next(&mut self, policy: &str, ip: &str) -> u32 {
        let n = self
            .0
            .entry((policy.to_owned(), ip.to_owned()))
            .or_insert(0);
        *n = n.saturating_add(1);
        *n
    }
}

/// Matches one batch of events against `policies`: the shared bans to record, and the origin
/// unbans that may lift shared bans.
pub fn plan(
    policies: &[crate::domain::sharing::Policy],
    servers: &[Server],
    events: &[StoredEvent],
    steps: &mut Steps,
    guards: &Guards,
    breaker: &mut StormBreaker,
) -> (Vec<NewSharedBan>, Vec<OriginLift>) {
    let by_id: HashMap<ServerId, &Server> = servers.iter().map(|s| (s.id, s)).collect();
    let mut bans = Vec::new();
    let mut unbans = Vec::new();
    for event in events {
        if let Some(facts) = origin_unban(event) {
            unbans.push(OriginLift {
                event: event.id,
                ip: facts.ip.to_string(),
                origin_server: event.server_id,
                origin_jail: facts.jail.to_string(),
            });
            continue;
        }
        let Some(facts) = origin_ban(event) else {
            continue;
        };
        let Some(origin) = by_id.get(&event.server_id) else {
            continue;
        };
        for policy in policies {
            if !policy_matches(&policy.spec, origin, facts) {
                continue;
            }
            let step = steps.next(&policy.id, &facts.ip.to_string());
            let m = ShareMatch {
                ip: facts.ip,
                origin_server: event.server_id,
                origin_jail: facts.jail.clone(),
                origin_event: event.id,
                source: ShareSource {
                    kind: crate::domain::sharing::SourceKind::Policy,
                    id: policy.id.clone(),
                    name: policy.spec.name.clone(),
                },
                step,
                expires_at: expires_at(&policy.spec.duration, facts, banned_at(event, facts), step),
                targets: targets(&policy.spec, servers, event.server_id),
            };
            bans.extend(into_shared_bans(m, guards, breaker));
        }
    }
    (bans, unbans)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};
    use std::net::IpAddr;

    use super::*;
    use crate::domain::breaker::StormLimits;
    use crate::domain::events::{EventSource, IpOrCidr, JailName, Logs};
    use crate::domain::sharing::{JailPattern, Policy, ServerSet};
    use crate::domain::{AgentId, PrefixLimits};

    fn server(name: &str, labels: &[(&str, &str)]) -> Server {
        Server {
            agent_id: Some(AgentId::new()),
            ..Server::example(name, labels)
        }
    }

    fn facts(ip: &str, jail: &str, failures: u32, duration: Option<BanDuration>) -> BanFacts {
        BanFacts {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse(jail).expect("jail"),
            hostname: String::new(),
            failures,
            logs: Logs::default(),
            ban_time: None,
            ban_duration: duration,
            ban_count: None,
        }
    }

    fn event(id: i64, server: &Server, body: EventBody) -> StoredEvent {
        let at = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        StoredEvent {
            id: EventId(id),
            server_id: server.id,
            agent_id: None,
            position: None,
            occurred_at: at,
            stored_at: at,
            source: EventSource::Action,
            body,
        }
    }

    fn spec(jails: &[&str]) -> PolicySpec {
        PolicySpec {
            name: "p".to_owned(),
            enabled: true,
            sources: ServerSet::All,
            jails: jails
                .iter()
                .map(|j| JailPattern::parse(j).expect("pattern"))
                .collect(),
            min_failures: None,
            targets: ServerSet::All,
            duration: ShareDuration::Fixed { seconds: 3600 },
            unban_follows_origin: true,
        }
    }

    fn guards() -> Guards {
        let hub: IpAddr = "192.0.2.10".parse().expect("ip");
        Guards::new(PrefixLimits { v4: 16, v6: 32 }, vec![hub])
    }

    #[test]
    fn a_policy_matches_by_source_jail_and_failures() {
        let web = server("web-1", &[("role", "web")]);
        let db = server("db-1", &[("role", "db")]);
        let check = |spec: &PolicySpec, origin: &Server, f: &BanFacts, expected: bool| {
            assert_eq!(policy_matches(spec, origin, f), expected, "{spec:?} {f:?}");
        };
        let ssh = facts("203.0.113.7", "sshd", 5, None);
        let nginx = facts("203.0.113.7", "nginx-http-auth", 5, None);
        check(&spec(&[]), &web, &ssh, true);
        check(&spec(&["ssh*"]), &web, &ssh, true);
        check(&spec(&["ssh*"]), &web, &nginx, false);
        check(&spec(&["ssh*", "nginx-*"]), &web, &nginx, true);
        let only_web = PolicySpec {
            sources: ServerSet::Labels(BTreeMap::from([("role".into(), "web".into())])),
            ..spec(&[])
        };
        check(&only_web, &web, &ssh, true);
        check(&only_web, &db, &ssh, false);
        let min5 = PolicySpec {
            min_failures: Some(5),
            ..spec(&[])
        };
        check(&min5, &web, &ssh, true);
        check(&min5, &web, &facts("203.0.113.7", "sshd", 4, None), false);
        let off = PolicySpec {
            enabled: false,
            ..spec(&[])
        };
        check(&off, &web, &ssh, false);
        // A shared ban or a probe ban is never an origin, whatever the policy says.
        check(
            &spec(&[]),
            &web,
            &facts("203.0.113.7", "banhub-shared", 5, None),
            false,
        );
        check(
            &spec(&["banhub-*"]),
            &web,
            &facts("192.0.2.1", "banhub-probe", 5, None),
            false,
        );
    }

    #[test]
    fn durations_follow_the_origin_a_fixed_time_or_the_ladder() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let secs = |d: Option<DateTime<Utc>>| d.map(|d| (d - at).num_seconds());
        let f = |d| facts("203.0.113.7", "sshd", 5, d);
        let origin = ShareDuration::Origin;
        assert_eq!(
            secs(expires_at(
                &origin,
                &f(Some(BanDuration::Seconds(900))),
                at,
                1
            )),
            Some(900)
        );
        assert_eq!(
            secs(expires_at(&origin, &f(Some(BanDuration::Permanent)), at, 1)),
            None
        );
        assert_eq!(
            secs(expires_at(&origin, &f(None), at, 1)),
            Some(i64::try_from(ORIGIN_UNKNOWN_SECS).expect("fits"))
        );
        let fixed = ShareDuration::Fixed { seconds: 60 };
        assert_eq!(
            secs(expires_at(&fixed, &f(Some(BanDuration::Permanent)), at, 3)),
            Some(60)
        );
        let ladder = ShareDuration::Ladder {
            steps: vec![60, 600, 6000],
        };
        let step = |n| secs(expires_at(&ladder, &f(None), at, n));
        assert_eq!(step(1), Some(60));
        assert_eq!(step(2), Some(600));
        assert_eq!(step(3), Some(6000));
        assert_eq!(step(9), Some(6000), "the last step repeats");
    }

    #[test]
    fn targets_leave_out_the_origin_and_servers_without_an_agent() {
        let a = server("a", &[("env", "prod")]);
        let b = server("b", &[("env", "prod")]);
        let c = server("c", &[("env", "dev")]);
        let no_agent = Server::example("d", &[("env", "prod")]);
        let servers = vec![a.clone(), b.clone(), c.clone(), no_agent];
        assert_eq!(targets(&spec(&[]), &servers, a.id), vec![b.id, c.id]);
        let prod = PolicySpec {
            targets: ServerSet::Labels(BTreeMap::from([("env".into(), "prod".into())])),
            ..spec(&[])
        };
        assert_eq!(targets(&prod, &servers, a.id), vec![b.id]);
    }

    #[test]
    fn a_plan_shares_with_every_target_skips_protected_addresses_and_ignores_echoes() {
        let a = server("a", &[]);
        let b = server("b", &[]);
        let c = server("c", &[]);
        let servers = vec![a.clone(), b.clone(), c.clone()];
        let policy = Policy {
            id: "pol".to_owned(),
            spec: PolicySpec {
                duration: ShareDuration::Ladder {
                    steps: vec![60, 600],
                },
                ..spec(&["sshd"])
            },
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        let events = vec![
            event(1, &a, EventBody::Ban(facts("203.0.113.7", "sshd", 5, None))),
            // B's shared-ban jail reporting the ban it got: no echo.
            event(
                2,
                &b,
                EventBody::Ban(facts("203.0.113.7", "banhub-shared", 0, None)),
            ),
            // The hub's own address: recorded skipped.
            event(3, &a, EventBody::Ban(facts("192.0.2.10", "sshd", 5, None))),
            event(4, &a, EventBody::Ban(facts("203.0.113.7", "sshd", 5, None))),
            event(
                5,
                &a,
                EventBody::Unban(facts("203.0.113.7", "sshd", 0, None)),
            ),
            event(
                6,
                &b,
                EventBody::Unban(facts("203.0.113.7", "banhub-shared", 0, None)),
            ),
        ];
        let mut steps = Steps::new(HashMap::new());
        let (bans, unbans) = plan(
            &[policy],
            &servers,
            &events,
            &mut steps,
            &guards(),
            &mut StormBreaker::unlimited(),
        );
        let rows: Vec<(i64, ServerId, bool, u32)> = bans
            .iter()
            .map(|b| {
                let event = b.origin_event.map_or(0, |e| e.0);
                (event, b.target, b.skipped.is_some(), b.step)
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (1, b.id, false, 1),
                (1, c.id, false, 1),
                (3, b.id, true, 1),
                (3, c.id, true, 1),
                (4, b.id, false, 2),
                (4, c.id, false, 2),
            ]
        );
        assert!(
            bans[2]
                .skipped
                .as_deref()
                .is_some_and(|s| s.starts_with("hub_address"))
        );
        assert_eq!(
            unbans,
            vec![OriginLift {
                event: EventId(5),
                ip: "203.0.113.7".to_owned(),
                origin_server: a.id,
                origin_jail: "sshd".to_owned(),
            }]
        );
    }

    #[test]
    fn a_breaker_drops_every_shared_ban_of_its_source_and_counts_no_skip() {
        let a = server("a", &[]);
        let m = |ip: &str, event: i64| ShareMatch {
            ip: IpOrCidr::parse(ip).expect("ip"),
            origin_server: a.id,
            origin_jail: JailName::parse("sshd").expect("jail"),
            origin_event: EventId(event),
            source: ShareSource {
                kind: crate::domain::sharing::SourceKind::Rule,
                id: "r".to_owned(),
                name: "r".to_owned(),
            },
            step: 1,
            expires_at: None,
            targets: vec![ServerId::new(), ServerId::new()],
        };
        let limits = StormLimits {
            origin_bans: 1,
            shared_bans: None,
        };
        let mut breaker = StormBreaker::new(limits, HashMap::new(), HashSet::new());
        // The hub's own address: recorded skipped, not counted.
        let skipped = into_shared_bans(m("192.0.2.10", 1), &guards(), &mut breaker);
        assert_eq!(skipped.len(), 2);
        assert!(breaker.shares().is_empty());
        assert_eq!(
            into_shared_bans(m("203.0.113.7", 2), &guards(), &mut breaker).len(),
            2
        );
        // The second origin ban passes the limit: nothing of it, and the source is paused.
        assert!(into_shared_bans(m("203.0.113.8", 3), &guards(), &mut breaker).is_empty());
        assert!(breaker.is_paused(a.id));
        assert!(into_shared_bans(m("192.0.2.10", 4), &guards(), &mut breaker).is_empty());
        assert_eq!(breaker.trips().len(), 1);
    }
}
