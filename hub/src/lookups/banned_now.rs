//! Where an address is banned now, read from what the hub stored: per server, jail and address,
//! the newest ban or unban event decides, a ban counting until its time ran out; shared bans the
//! hub holds for a server count too, before their event arrives. Pure, over domain values.

use std::collections::BTreeMap;

use banhub_proto::rules::SHARED_JAIL;
use chrono::{DateTime, Duration, TimeZone, Utc};

use crate::domain::ServerId;
use crate::domain::events::{BanDuration, EventBody, StoredEvent};
use crate::domain::sharing::{SharedBan, SharedBanStatus};

/// One ban in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanInForce {
    pub server_id: ServerId,
    pub jail: String,
    pub ip: String,
    /// A shared ban (the fleet's defence), not the server's own.
    pub shared: bool,
    pub since: DateTime<Utc>,
    /// When it ends; `None` when permanent or not known.
    pub until: Option<DateTime<Utc>>,
    pub permanent: bool,
}

/// The bans in force at `now`, by server, jail and address. `events` are the address's stored ban
/// and unban events in any order; `shared` its shared bans.
pub fn banned_now(
    events: &[StoredEvent],
    shared: &[SharedBan],
    now: DateTime<Utc>,
) -> Vec<BanInForce> {
    let mut newest: BTreeMap<(ServerId, String, String), &StoredEvent> = BTreeMap::new();
    for event in events {
        let Some(facts) = event.body.facts() else {
            continue;
        };
        let key = (
            event.server_id,
            facts.jail.as_str().to_owned(),
            facts.ip.to_string(),
        );
        match newest.get(&key) {
            Some(seen) if seen.id >= event.id => {}
            _ => {
                newest.insert(key, event);
            }
        }
    }
    let mut out: BTreeMap<(ServerId, String, String), BanInForce> = BTreeMap::new();
    for (key, event) in &newest {
        let key = key.clone();
        let EventBody::Ban(facts) = &event.body else {
            continue;
        };
        let since = facts
            .ban_time
            .and_then(|secs| Utc.timestamp_opt(secs, 0).single())
            .unwrap_or(event.occurred_at);
        let (until, permanent) = match facts.ban_duration {
            Some(BanDuration::Permanent) => (None, true),
            Some(BanDuration::Seconds(secs)) => (
                i64::try_from(secs)
                    .ok()
                    .and_then(Duration::try_seconds)
                    .and_then(|d| since.checked_add_signed(d)),
                false,
            ),
            None => (None, false),
        };
        if until.is_some_and(|end| end <= now) {
            continue;
        }
        let ban = BanInForce {
            server_id: event.server_id,
            jail: key.1.clone(),
            ip: key.2.clone(),
            shared: key.1 == SHARED_JAIL,
            since,
            until,
            permanent,
        };
        out.insert(key, ban);
    }
    for ban in shared {
        if !matches!(
            ban.status_at(now),
            SharedBanStatus::Pending | SharedBanStatus::Delivered
        ) {
            continue;
        }
        let key = (ban.target, SHARED_JAIL.to_owned(), ban.ip.clone());
        // An unban reported after the shared ban was made lifted it on the host.
        if newest
            .get(&key)
            .is_some_and(|event| event.occurred_at >= ban.created_at)
        {
            continue;
        }
        out.entry(key).or_insert_with(|| BanInForce {
            server_id: ban.target,
            jail: SHARED_JAIL.to_owned(),
            ip: ban.ip.clone(),
            shared: true,
            since: ban.created_at,
            until: ban.expires_at,
            permanent: ban.expires_at.is_none(),
        });
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::events::{BanFacts, EventId, EventSource, IpOrCidr, JailName, Logs};
    use crate::domain::sharing::{ShareSource, SourceKind};

    fn event(
        id: i64,
        server: ServerId,
        jail: &str,
        ban: bool,
        at: DateTime<Utc>,
        secs: Option<i64>,
    ) -> StoredEvent {
        let facts = BanFacts {
            ip: IpOrCidr::parse("8.8.8.8").expect("ip"),
            jail: JailName::parse(jail).expect("jail"),
            hostname: String::new(),
            failures: 3,
            logs: Logs::default(),
            ban_time: Some(at.timestamp()),
            ban_duration: secs.and_then(BanDuration::from_seconds),
            ban_count: None,
        };
        StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: None,
            position: None,
            occurred_at: at,
            stored_at: at,
            source: EventSource::Direct,
            body: if ban {
                EventBody::Ban(facts)
            } else {
                EventBody::Unban(facts)
            },
        }
    }

    fn shared(
        target: ServerId,
        created: DateTime<Utc>,
        expires: Option<DateTime<Utc>>,
    ) -> SharedBan {
        SharedBan {
            id: 1,
            ip: "8.8.8.8".to_owned(),
            target,
            origin_server: ServerId::new(),
            origin_jail: "sshd".to_owned(),
            origin_event: None,
            source: ShareSource {
                kind: SourceKind::Policy,
                id: "p".to_owned(),
                name: "p".to_owned(),
            },
            step: 0,
            created_at: created,
            expires_at: expires,
            status: SharedBanStatus::Delivered,
            skip_reason: None,
            delivered_at: Some(created),
            lifted_at: None,
        }
    }

    #[test]
    fn the_newest_event_per_server_and_jail_decides_until_its_time_runs_out() {
        let now = Utc::now();
        let hour = Duration::hours(1);
        let (a, b, c, d) = (
            ServerId::new(),
            ServerId::new(),
            ServerId::new(),
            ServerId::new(),
        );
        let events = [
            // a: banned for two hours, an hour ago → in force for one more.
            event(1, a, "sshd", true, now - hour, Some(7200)),
            // b: banned then unbanned (listed out of order) → not banned.
            event(3, b, "sshd", false, now - hour / 2, Some(7200)),
            event(2, b, "sshd", true, now - hour, Some(7200)),
            // c: a ten-minute ban an hour ago → over; a permanent one in another jail.
            event(4, c, "sshd", true, now - hour, Some(600)),
            event(5, c, "nginx", true, now - hour, Some(-1)),
        ];
        let bans = banned_now(&events, &[shared(d, now - hour, Some(now + hour))], now);
        let found: Vec<(ServerId, &str, bool, bool)> = bans
            .iter()
            .map(|b| (b.server_id, b.jail.as_str(), b.shared, b.permanent))
            .collect();
        assert_eq!(found.len(), 3, "{bans:?}");
        assert!(found.contains(&(a, "sshd", false, false)));
        assert!(found.contains(&(c, "nginx", false, true)));
        assert!(found.contains(&(d, SHARED_JAIL, true, false)));
        let on_a = bans.iter().find(|x| x.server_id == a).expect("a");
        // fail2ban's ban time is in whole seconds.
        let until = Utc
            .timestamp_opt((now - hour).timestamp() + 7200, 0)
            .single();
        assert_eq!(on_a.until, until);
    }

    #[test]
    fn a_shared_ban_unbanned_on_its_host_later_is_not_in_force() {
        let now = Utc::now();
        let target = ServerId::new();
        let events = [event(7, target, SHARED_JAIL, false, now, Some(600))];
        let lifted = shared(target, now - Duration::minutes(5), None);
        assert!(banned_now(&events, &[lifted], now).is_empty());
        let expired = shared(
            target,
            now - Duration::hours(2),
            Some(now - Duration::hours(1)),
        );
        assert!(banned_now(&[], &[expired], now).is_empty());
    }
}
