//! The bans the feeds choose from, kept in memory: per address, server and jail, how many bans the
//! hub recorded, the newest, and whether one is in force (banned, not unbanned, its ban time not
//! over). Built from the histories of the addresses whose ban may be in force, then kept up by the
//! newer events, each address's history read the first time a ban names it; an address never
//! banned since it was last in force is never read, and what the index says of every address it
//! holds is what reading every event in id order would say.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use ipnet::IpNet;

use crate::domain::ServerId;
use crate::domain::feeds::BanChange;

/// A server or a jail, numbered once so the keys stay small.
#[derive(Debug, Default)]
struct Names<T> {
    index: HashMap<T, u32>,
    names: Vec<T>,
}

impl<T: Clone + Eq + std::hash::Hash> Names<T> {
    fn number(&mut self, name: &T) -> u32 {
        if let Some(n) = self.index.get(name) {
            return *n;
        }
        let n = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.index.insert(name.clone(), n);
        self.names.push(name.clone());
        n
    }
}

/// What the index knows of one address on one server in one jail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanState {
    /// Bans recorded.
    pub bans: u32,
    /// When the newest ban began.
    pub last_ban: DateTime<Utc>,
    /// Whether a ban is in force, unless its end has passed.
    pub active: bool,
    /// When the ban in force ends; `None`: at the unban.
    pub until: Option<DateTime<Utc>>,
}

impl BanState {
    /// Whether the ban is in force at `now`.
    pub fn in_force(&self, now: DateTime<Utc>) -> bool {
        self.active && self.until.is_none_or(|t| t > now)
    }
}

/// The index, and how far into the events it has read.
#[derive(Debug, Default)]
pub struct BanIndex {
    servers: Names<ServerId>,
    jails: Names<String>,
    states: HashMap<(IpNet, u32, u32), BanState>,
    /// The addresses whose history up to the cursor is applied.
    known: HashSet<IpNet>,
    /// The id of the last event applied.
    pub cursor: i64,
}

impl BanIndex {
    /// Whether the history of `net` is applied.
    pub fn knows(&self, net: &IpNet) -> bool {
        self.known.contains(net)
    }

    /// Applies the history up to the cursor of `nets` (their bans and unbans, oldest first); the
    /// cursor stays where it is.
    pub fn learn(&mut self, nets: &[IpNet], history: &[BanChange]) {
        let cursor = self.cursor;
        for change in history {
            self.apply(change);
        }
        self.cursor = cursor;
        self.known.extend(nets.iter().copied());
    }

    /// The addresses banned in `page` whose history is not applied yet, each once.
    pub fn unknown_in(&self, page: &[BanChange]) -> Vec<IpNet> {
        let mut seen = HashSet::new();
        page.iter()
            .filter(|c| c.ban && !self.knows(&c.net))
            .map(|c| c.net)
            .filter(|net| seen.insert(*net))
            .collect()
    }

    /// Applies one ban or unban; `true` if what is in force may have changed.
    pub fn apply(&mut self, change: &BanChange) -> bool {
        self.cursor = self.cursor.max(change.event_id);
        let key = (
            change.net,
            self.servers.number(&change.server_id),
            self.jails.number(&change.jail),
        );
        if change.ban {
            let state = self.states.entry(key).or_insert(BanState {
                bans: 0,
                last_ban: change.banned_at,
                active: false,
                until: None,
            });
            state.bans = state.bans.saturating_add(1);
            state.last_ban = state.last_ban.max(change.banned_at);
            state.active = true;
            state.until = change.until;
            true
        } else {
            match self.states.get_mut(&key) {
                Some(state) if state.active => {
                    state.active = false;
                    true
                }
                _ => false,
            }
        }
    }

    /// Every known (address, server, jail) with its state.
    pub fn iter(&self) -> impl Iterator<Item = (IpNet, &ServerId, &str, &BanState)> {
        self.states
            .iter()
            .filter_map(|((net, server, jail), state)| {
                let server = self.servers.names.get(*server as usize)?;
                let jail = self.jails.names.get(*jail as usize)?;
                Some((*net, server, jail.as_str(), state))
            })
    }

    /// The jails the index has seen, numbered as [`Self::iter_numbered`] numbers them.
    pub fn jails(&self) -> &[String] {
        &self.jails.names
    }

    /// The servers the index has seen, numbered as [`Self::iter_numbered`] numbers them.
    pub fn servers(&self) -> &[ServerId] {
        &self.servers.names
    }

    /// Every known (address, server number, jail number) with its state.
    pub fn iter_numbered(&self) -> impl Iterator<Item = (IpNet, u32, u32, &BanState)> {
        self.states
            .iter()
            .map(|((net, server, jail), state)| (*net, *server, *jail, state))
    }

    /// The earliest end after `now` of a ban in force: when the feeds must look again.
    pub fn next_expiry(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.states
            .values()
            .filter(|s| s.active)
            .filter_map(|s| s.until)
            .filter(|t| *t > now)
            .min()
    }

    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: i64, ip: &str, ban: bool, until: Option<i64>) -> BanChange {
        BanChange {
            event_id: id,
            server_id: ServerId::from_uuid(uuid::Uuid::nil()),
            jail: "sshd".to_owned(),
            net: IpNet::from(ip.parse::<std::net::IpAddr>().expect("ip")),
            ban,
            banned_at: DateTime::from_timestamp(1_000, 0).unwrap_or_default(),
            until: until.and_then(|s| DateTime::from_timestamp(s, 0)),
        }
    }

    #[test]
    fn a_ban_is_in_force_until_its_unban_or_its_end() {
        let mut index = BanIndex::default();
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap_or_default();
        assert!(index.apply(&change(1, "192.0.2.1", true, Some(2_000))));
        assert!(index.apply(&change(2, "192.0.2.2", true, None)));
        let state = |index: &BanIndex, ip: &str| {
            index
                .iter()
                .find(|(net, ..)| net.addr().to_string() == ip)
                .map(|(.., s)| *s)
                .expect("state")
        };
        assert!(state(&index, "192.0.2.1").in_force(at(1_999)));
        assert!(!state(&index, "192.0.2.1").in_force(at(2_000)));
        assert!(state(&index, "192.0.2.2").in_force(at(1_000_000)));
        assert_eq!(index.next_expiry(at(1_500)), Some(at(2_000)));
        assert!(index.apply(&change(3, "192.0.2.2", false, None)));
        assert!(!state(&index, "192.0.2.2").in_force(at(1_500)));
        // A second unban changes nothing; a new ban counts again.
        assert!(!index.apply(&change(4, "192.0.2.2", false, None)));
        index.apply(&change(5, "192.0.2.2", true, Some(9_000)));
        assert_eq!(state(&index, "192.0.2.2").bans, 2);
        assert_eq!(index.cursor, 5);
    }

    /// Starting from the histories of the addresses in force at the head, then reading the newer
    /// events (each new address's history first), says what replaying every event says.
    #[test]
    fn starting_from_the_bans_in_force_equals_replaying_every_event() {
        let head = [
            change(1, "192.0.2.1", true, Some(1_500)),
            change(2, "192.0.2.2", true, Some(9_000)),
            change(3, "192.0.2.3", true, None),
            change(4, "192.0.2.3", false, None),
            change(5, "192.0.2.1", true, Some(1_800)),
            change(6, "192.0.2.2", true, Some(9_500)),
        ];
        let newer = [
            change(7, "192.0.2.1", true, Some(9_000)),
            change(8, "192.0.2.3", true, Some(9_000)),
            change(9, "192.0.2.4", true, None),
            change(10, "192.0.2.2", false, None),
        ];
        let mut replayed = BanIndex::default();
        for c in head.iter().chain(&newer) {
            replayed.apply(c);
        }
        // At 2,000 only 192.0.2.2's ban is in force at the head.
        let in_force = vec![IpNet::from(
            "192.0.2.2".parse::<std::net::IpAddr>().expect("ip"),
        )];
        let history: Vec<BanChange> = head
            .iter()
            .filter(|c| in_force.contains(&c.net))
            .cloned()
            .collect();
        let mut started = BanIndex::default();
        started.learn(&in_force, &history);
        started.cursor = 6;
        let unknown = started.unknown_in(&newer);
        assert_eq!(unknown.len(), 3, "{unknown:?}");
        let older: Vec<BanChange> = head
            .iter()
            .filter(|c| unknown.contains(&c.net))
            .cloned()
            .collect();
        started.learn(&unknown, &older);
        for c in &newer {
            started.apply(c);
        }
        let states = |index: &BanIndex| {
            let mut all: Vec<(String, BanState)> = index
                .iter()
                .map(|(net, .., s)| (net.to_string(), *s))
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        };
        assert_eq!(states(&started), states(&replayed));
        assert_eq!(started.cursor, 10);
    }
}
