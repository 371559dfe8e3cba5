//! Matching ban events against alert rules: scope (servers by id or by a label selector, the
//! profiles' rule of `domain::profiles`; jails; countries), repeat offenders
//! (from the per-address rollup) and ban-rate spikes (a sliding window per rule). Pure functions
//! over what the worker read; the worker persists the result.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};

use super::geoip::GeoIp;
use crate::domain::alerts::{MatchSample, RuleMatches};
use crate::domain::events::{EventBody, StoredEvent};
use crate::domain::profiles::selector_matches;
use crate::domain::{Server, ServerId};
use crate::settings::model::{AlertRule, Alerts};

/// The servers by id, for the rules that select servers by their labels.
pub type ServersById = HashMap<ServerId, Server>;

/// Whether any enabled rule selects servers by their labels (then the worker reads the servers).
pub fn needs_servers(alerts: &Alerts) -> bool {
    alerts
        .rules
        .iter()
        .any(|r| r.enabled && !r.labels.is_empty())
}

/// What matching keeps between batches: the recent in-scope bans of each spike rule.
#[derive(Debug, Default)]
pub struct State {
    spikes: HashMap<uuid::Uuid, VecDeque<i64>>,
}

impl State {
    /// The windows of the spike rules as they were after the event `cursor`, rebuilt from stored
    /// `events` (any order; those after `cursor` are ignored): what a restarted worker, or one that
    /// follows a cursor another hub moved, would otherwise have lost. Only the last `bans`
    /// in-scope times of each rule matter; older ones drop out at the next match anyway.
    pub fn seed(
        alerts: &Alerts,
        events: &[StoredEvent],
        cursor: i64,
        geoip: Option<&GeoIp>,
        servers: &ServersById,
    ) -> Self {
        let mut state = Self::default();
        let rules: Vec<&AlertRule> = alerts
            .rules
            .iter()
            .filter(|r| r.enabled && r.spike.is_some())
            .collect();
        if rules.is_empty() {
            return state;
        }
        let mut ordered: Vec<&StoredEvent> = events.iter().filter(|e| e.id.0 <= cursor).collect();
        ordered.sort_by_key(|e| e.id.0);
        let needs_country = rules.iter().any(|r| !r.countries.is_empty());
        for event in ordered {
            let EventBody::Ban(facts) = &event.body else {
                continue;
            };
            let country = if needs_country {
                geoip.and_then(|g| g.country(&facts.ip))
            } else {
                None
            };
            for rule in &rules {
                let Some(spike) = rule.spike else { continue };
                if !in_scope(rule, event, country.as_deref(), servers) {
                    continue;
                }
                let window = state.spikes.entry(rule.id).or_default();
                window.push_back(event.occurred_at.timestamp_millis());
                while window.len() > spike.bans as usize {
                    window.pop_front();
                }
            }
        }
        state
    }

    /// Forgets the windows of rules that are gone (or no longer spike rules).
    pub fn forget_removed_rules(&mut self, alerts: &Alerts) {
        self.spikes.retain(|id, _| {
            alerts
                .rules
                .iter()
                .any(|r| &r.id == id && r.spike.is_some())
        });
    }

    /// The longest window of the enabled spike rules, if any.
    pub fn longest_window(alerts: &Alerts) -> Option<std::time::Duration> {
        alerts
            .rules
            .iter()
            .filter(|r| r.enabled)
            .filter_map(|r| r.spike.map(|s| s.window))
            .max()
    }
}

/// How many of `events` (ids after `cursor`, in order) can be matched now: all of them, unless a
/// hole in the ids may still fill (a transaction that took a smaller id and has not committed). A
/// hole is waited for until the event after it is `grace_ms` old.
pub fn ready_prefix<E: Borrow<StoredEvent>>(
    cursor: i64,
    events: &[E],
    now_ms: i64,
    grace_ms: i64,
) -> usize {
    let mut previous = cursor;
    for (i, event) in events.iter().enumerate() {
        let event = event.borrow();
        let hole = event.id.0 > previous + 1;
        if hole && now_ms - event.stored_at.timestamp_millis() < grace_ms {
            return i;
        }
        previous = event.id.0;
    }
    events.len()
}

/// The addresses of the bans among `events`.
pub fn ban_ips<E: Borrow<StoredEvent>>(events: &[E]) -> Vec<String> {
    let mut ips: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.borrow().body {
            EventBody::Ban(facts) => Some(facts.ip.to_string()),
            _ => None,
        })
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

fn in_scope(
    rule: &AlertRule,
    event: &StoredEvent,
    country: Option<&str>,
    servers: &ServersById,
) -> bool {
    let jail = match &event.body {
        EventBody::Ban(facts) => facts.jail.as_str(),
        _ => "",
    };
    server_in_scope(rule, event.server_id, servers)
        && (rule.jails.is_empty() || rule.jails.iter().any(|j| j.as_str() == jail))
        && (rule.countries.is_empty() || country.is_some_and(|c| rule.countries.contains(c)))
}

/// Whether a rule's servers include `id`: listed, or carrying every label of its selector; a
/// rule with neither takes every server.
fn server_in_scope(rule: &AlertRule, id: ServerId, servers: &ServersById) -> bool {
    (rule.servers.is_empty() && rule.labels.is_empty())
        || rule.servers.contains(&id)
        || servers
            .get(&id)
            .is_some_and(|server| selector_matches(&rule.labels, server))
}

/// Whether any event can match: alerts are on and a rule is enabled. Otherwise [`evaluate`] finds
/// nothing and changes no window, whatever the events.
pub fn can_match(alerts: &Alerts) -> bool {
    alerts.enabled && alerts.rules.iter().any(|r| r.enabled)
}

/// The matches of every enabled rule among `events`, grouped by rule.
pub fn evaluate<E: Borrow<StoredEvent>>(
    alerts: &Alerts,
    events: &[E],
    state: &mut State,
    geoip: Option<&GeoIp>,
    ban_counts: &HashMap<String, u64>,
    servers: &ServersById,
) -> Vec<RuleMatches> {
    state.forget_removed_rules(alerts);
    if !can_match(alerts) {
        return Vec::new();
    }
    let mut out: Vec<RuleMatches> = alerts
        .rules
        .iter()
        .filter(|r| r.enabled)
        .map(|r| RuleMatches {
            rule_id: r.id.to_string(),
            rule_name: r.name.clone(),
            window_ms: i64::try_from(alerts.digest_window.as_millis()).unwrap_or(i64::MAX),
            matches: Vec::new(),
        })
        .collect();
    let rules: Vec<&AlertRule> = alerts.rules.iter().filter(|r| r.enabled).collect();
    let needs_country = rules.iter().any(|r| !r.countries.is_empty());
    for event in events {
        let event = event.borrow();
        let EventBody::Ban(facts) = &event.body else {
            continue;
        };
        let country = if needs_country || geoip.is_some() {
            geoip.and_then(|g| g.country(&facts.ip))
        } else {
            None
        };
        let ip = facts.ip.to_string();
        let at = event.occurred_at.timestamp_millis();
        for (rule, matched) in rules.iter().zip(out.iter_mut()) {
            if !in_scope(rule, event, country.as_deref(), servers) {
                continue;
            }
            if let Some(spike) = rule.spike {
                let window = state.spikes.entry(rule.id).or_default();
                window.push_back(at);
                let span = i64::try_from(spike.window.as_millis()).unwrap_or(i64::MAX);
                while window.front().is_some_and(|&t| t < at - span) {
                    window.pop_front();
                }
                // Only the last `bans` times matter.
                while window.len() > spike.bans as usize {
                    window.pop_front();
                }
                if window.len() < spike.bans as usize {
                    continue;
                }
            }
            if let Some(min) = rule.repeat_offender {
                // The rollup includes this ban; an address missing from it is seen for the first
                // time.
                if ban_counts.get(&ip).copied().unwrap_or(1) < u64::from(min) {
                    continue;
                }
            }
            matched.matches.push(MatchSample {
                event_id: event.id.0,
                ip: ip.clone(),
                jail: facts.jail.as_str().to_owned(),
                server_id: event.server_id.to_string(),
                hostname: facts.hostname.clone(),
                occurred_at: event.occurred_at,
                failures: facts.failures,
                country: country.clone(),
            });
        }
    }
    out.retain(|m| !m.matches.is_empty());
    out
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::domain::ServerId;
    use crate::domain::events::{BanFacts, EventId, EventSource, IpOrCidr, JailName, Logs};
    use crate::settings::model::Spike;

    /// A direct ban of `ip` in `jail` on `server`, stored at `at_ms` (also the alert worker's tests').
    pub(in crate::alerts) fn ban(
        id: i64,
        server: ServerId,
        jail: &str,
        ip: &str,
        at_ms: i64,
    ) -> StoredEvent {
        let at = DateTime::from_timestamp_millis(at_ms).expect("time");
        StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: None,
            position: None,
            occurred_at: at,
            stored_at: at,
            source: EventSource::Direct,
            body: EventBody::Ban(BanFacts {
                ip: IpOrCidr::parse(ip).expect("ip"),
                jail: JailName::parse(jail).expect("jail"),
                hostname: String::new(),
                failures: 3,
                logs: Logs::default(),
                ban_time: None,
                ban_duration: None,
                ban_count: None,
            }),
        }
    }

    fn rule(name: &str) -> AlertRule {
        AlertRule {
            id: uuid::Uuid::now_v7(),
            name: name.to_owned(),
            enabled: true,
            servers: Default::default(),
            labels: Default::default(),
            jails: Default::default(),
            countries: Default::default(),
            repeat_offender: None,
            spike: None,
            email: true,
            webhooks: Vec::new(),
        }
    }

    fn alerts(rules: Vec<AlertRule>) -> Alerts {
        Alerts {
            rules,
            ..Alerts::default()
        }
    }

    /// The matches without GeoIP, repeat counts or servers.
    fn eval(alerts: &Alerts, events: &[StoredEvent], state: &mut State) -> Vec<RuleMatches> {
        evaluate(
            alerts,
            events,
            state,
            None,
            &HashMap::new(),
            &ServersById::new(),
        )
    }

    fn counts(found: &[RuleMatches], name: &str) -> usize {
        found
            .iter()
            .find(|m| m.rule_name == name)
            .map_or(0, |m| m.matches.len())
    }

    #[test]
    fn scope_by_labels_besides_listed_servers() {
        let web = Server::example("web-1", &[("role", "web"), ("site", "fra")]);
        let db = Server::example("db-1", &[("role", "db"), ("site", "fra")]);
        let bare = Server::example("bare", &[]);
        let servers: ServersById = [&web, &db, &bare]
            .into_iter()
            .map(|s| (s.id, s.clone()))
            .collect();
        let mut webs = rule("webs");
        webs.labels.insert("role".into(), "web".into());
        let mut fra_db = rule("fra and bare");
        fra_db.labels = [("site".into(), "fra".into()), ("role".into(), "db".into())].into();
        fra_db.servers.insert(bare.id);
        let events = vec![
            ban(1, web.id, "sshd", "192.0.2.1", 0),
            ban(2, db.id, "sshd", "192.0.2.2", 0),
            ban(3, bare.id, "sshd", "192.0.2.3", 0),
            ban(4, ServerId::new(), "sshd", "192.0.2.4", 0),
        ];
        let found = evaluate(
            &alerts(vec![webs, fra_db, rule("all")]),
            &events,
            &mut State::default(),
            None,
            &HashMap::new(),
            &servers,
        );
        let ips = |name: &str| -> Vec<String> {
            found
                .iter()
                .find(|m| m.rule_name == name)
                .map(|m| m.matches.iter().map(|s| s.ip.clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(ips("webs"), ["192.0.2.1"]);
        assert_eq!(ips("fra and bare"), ["192.0.2.2", "192.0.2.3"]);
        assert_eq!(ips("all").len(), 4);
    }

    #[test]
    fn scope_by_server_and_jail() {
        let (a, b) = (ServerId::new(), ServerId::new());
        let mut on_a = rule("a");
        on_a.servers.insert(a);
        let mut ssh = rule("ssh");
        ssh.jails
            .insert(banhub_proto::rules::JailName::parse("sshd").expect("jail"));
        let mut nothing = rule("nginx on b");
        nothing.servers.insert(b);
        nothing
            .jails
            .insert(banhub_proto::rules::JailName::parse("nginx").expect("jail"));
        let events = vec![
            ban(1, a, "sshd", "192.0.2.1", 0),
            ban(2, a, "nginx", "192.0.2.2", 0),
            ban(3, b, "sshd", "192.0.2.3", 0),
        ];
        let found = evaluate(
            &alerts(vec![on_a, ssh, nothing]),
            &events,
            &mut State::default(),
            None,
            &HashMap::new(),
            &ServersById::new(),
        );
        assert_eq!(counts(&found, "a"), 2);
        assert_eq!(counts(&found, "ssh"), 2);
        assert_eq!(counts(&found, "nginx on b"), 0);
        assert!(found.iter().all(|m| !m.matches.is_empty()));
    }

    #[test]
    fn nothing_can_match_without_an_enabled_rule_or_with_alerts_off() {
        let s = ServerId::new();
        let events = vec![ban(1, s, "sshd", "192.0.2.1", 0)];
        let mut off = rule("off");
        off.enabled = false;
        let mut disabled = alerts(vec![rule("any")]);
        disabled.enabled = false;
        for (settings, expected) in [
            (alerts(Vec::new()), false),
            (alerts(vec![off.clone()]), false),
            (disabled, false),
            (alerts(vec![off, rule("any")]), true),
        ] {
            assert_eq!(can_match(&settings), expected, "{settings:?}");
            // What the worker passes over unmatched would have matched nothing.
            let found = evaluate(
                &settings,
                &events,
                &mut State::default(),
                None,
                &HashMap::new(),
                &ServersById::new(),
            );
            assert_eq!(!found.is_empty(), expected, "{settings:?}");
        }
    }

    #[test]
    fn repeat_offenders_by_the_rollup() {
        let s = ServerId::new();
        let mut repeat = rule("repeat");
        repeat.repeat_offender = Some(3);
        let events = vec![
            ban(1, s, "sshd", "192.0.2.1", 0),
            ban(2, s, "sshd", "192.0.2.2", 0),
        ];
        let counts_by_ip =
            HashMap::from([("192.0.2.1".to_owned(), 3), ("192.0.2.2".to_owned(), 2)]);
        let found = evaluate(
            &alerts(vec![repeat]),
            &events,
            &mut State::default(),
            None,
            &counts_by_ip,
            &ServersById::new(),
        );
        assert_eq!(found[0].matches.len(), 1);
        assert_eq!(found[0].matches[0].ip, "192.0.2.1");
    }

    #[test]
    fn spikes_match_once_the_rate_is_reached_and_carry_across_batches() {
        let s = ServerId::new();
        let mut spike = rule("spike");
        spike.spike = Some(Spike {
            bans: 3,
            window: Duration::from_secs(10),
        });
        let settings = alerts(vec![spike]);
        let mut state = State::default();
        // Two bans 20 s apart: never three within 10 s.
        let slow = vec![
            ban(1, s, "j", "192.0.2.1", 0),
            ban(2, s, "j", "192.0.2.2", 20_000),
        ];
        assert!(eval(&settings, &slow, &mut state).is_empty());
        // Then two more within 10 s of the second (in a later batch): the second of them is the
        // third ban in 10 s, the first match; a fifth right after matches too.
        let fast = vec![
            ban(3, s, "j", "192.0.2.3", 21_000),
            ban(4, s, "j", "192.0.2.4", 22_000),
            ban(5, s, "j", "192.0.2.5", 22_500),
        ];
        let found = eval(&settings, &fast, &mut state);
        let ids: Vec<i64> = found[0].matches.iter().map(|m| m.event_id).collect();
        assert_eq!(ids, [4, 5]);
    }

    #[test]
    fn a_seeded_state_carries_a_spike_across_a_restart() {
        let s = ServerId::new();
        let mut spike = rule("spike");
        spike.spike = Some(Spike {
            bans: 3,
            window: Duration::from_secs(10),
        });
        let settings = alerts(vec![spike]);
        // Two bans were matched before the restart (cursor 2); event 3 is not yet.
        let stored = vec![
            ban(2, s, "j", "192.0.2.2", 1_000),
            ban(1, s, "j", "192.0.2.1", 0),
            ban(3, s, "j", "192.0.2.3", 2_000),
        ];
        let mut seeded = State::seed(&settings, &stored, 2, None, &ServersById::new());
        let next = vec![ban(3, s, "j", "192.0.2.3", 2_000)];
        let found = eval(&settings, &next, &mut seeded);
        assert_eq!(found[0].matches.len(), 1, "the third ban in 10 s matches");
        // Without the seed the restart would have lost the first two.
        assert!(
            evaluate(
                &settings,
                &next,
                &mut State::default(),
                None,
                &HashMap::new(),
                &ServersById::new()
            )
            .is_empty()
        );
        assert_eq!(
            State::longest_window(&settings),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn disabled_rules_and_unbans_do_not_match() {
        let s = ServerId::new();
        let mut off = rule("off");
        off.enabled = false;
        let mut settings = alerts(vec![off, rule("on")]);
        let mut unban = ban(1, s, "j", "192.0.2.1", 0);
        if let EventBody::Ban(facts) = unban.body.clone() {
            unban.body = EventBody::Unban(facts);
        }
        let events = vec![unban, ban(2, s, "j", "192.0.2.2", 0)];
        let found = evaluate(
            &settings,
            &events,
            &mut State::default(),
            None,
            &HashMap::new(),
            &ServersById::new(),
        );
        assert_eq!((found.len(), found[0].rule_name.as_str()), (1, "on"));
        assert_eq!(found[0].matches.len(), 1);
        settings.enabled = false;
        assert!(
            evaluate(
                &settings,
                &events,
                &mut State::default(),
                None,
                &HashMap::new(),
                &ServersById::new()
            )
            .is_empty()
        );
    }

    #[test]
    fn holes_in_the_ids_are_waited_for_until_they_are_old() {
        let s = ServerId::new();
        let now = Utc::now().timestamp_millis();
        let events = vec![
            ban(11, s, "j", "192.0.2.1", now),
            ban(13, s, "j", "192.0.2.2", now),
        ];
        assert_eq!(ready_prefix(10, &events, now, 5_000), 1);
        assert_eq!(ready_prefix(10, &events, now + 6_000, 5_000), 2);
        assert_eq!(ready_prefix(9, &events, now, 5_000), 0);
    }
}
