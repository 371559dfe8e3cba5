//! The set of shared bans this host holds, and how a sync from the hub or the passing of time
//! changes it: pure logic with no file and no fail2ban, so every rule is a unit test.

use std::collections::{BTreeMap, BTreeSet};

use banhub_proto::rules::IpOrCidr;

/// Longest reason kept (the rest is cut): it is only for logs and the state file.
pub const MAX_REASON_CHARS: usize = 200;

/// One shared ban held: when the agent lifts it and why it is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Unix time in milliseconds at which the agent lifts it; `None`: when the hub says so.
    pub expires_ms: Option<i64>,
    pub reason: String,
}

impl Held {
    /// Whether its time has come at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_ms.is_some_and(|at| at <= now_ms)
    }
}

/// A ban the hub asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub ip: IpOrCidr,
    pub held: Held,
}

impl Wanted {
    /// Checks one entry with the rules of a manual ban (an address or network, never every
    /// address, never the broadcast address: a shared ban carries no admin override). The error
    /// is the reason, for the report's `refused` list.
    pub fn parse(ip: &str, expires_unix_ms: i64, reason: &str) -> Result<Self, String> {
        let ip = lift_address(ip)?;
        if ip.is_broadcast() {
            return Err(
                "is (or covers) the broadcast address 255.255.255.255, which a shared \
                        ban never covers"
                    .to_owned(),
            );
        }
        if expires_unix_ms < 0 {
            return Err(format!(
                "expires at {expires_unix_ms}, before 1970; send 0 for no expiry"
            ));
        }
        Ok(Self {
            ip,
            held: Held {
                expires_ms: (expires_unix_ms != 0).then_some(expires_unix_ms),
                reason: clean_reason(reason),
            },
        })
    }
}

/// Checks an address to lift: any address or network a ban could have named.
pub fn lift_address(raw: &str) -> Result<IpOrCidr, String> {
    IpOrCidr::parse(raw).map_err(|e| e.to_string())
}

/// The reason without line breaks or other control characters, cut to [`MAX_REASON_CHARS`].
fn clean_reason(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect()
}

/// What a sync asks for, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// `bans` is the whole set; everything else is lifted (`lift` is ignored).
    pub full: bool,
    pub bans: Vec<Wanted>,
    pub lift: Vec<IpOrCidr>,
}

/// What fail2ban must be told after a change, and the counts of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Addresses to ban that the set did not hold before.
    pub ban: Vec<IpOrCidr>,
    /// Addresses the set held and no longer holds.
    pub unban: Vec<IpOrCidr>,
    /// Bans of the sync whose expiry had already passed (dropped).
    pub expired: u32,
    /// Bans lifted because the sync said so (`lift`, or absent from a full set).
    pub lifted: u32,
}

/// The shared bans held, by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BanSet {
    bans: BTreeMap<IpOrCidr, Held>,
}

impl BanSet {
    /// A set of these bans (a later entry for an address replaces an earlier one).
    pub fn from_entries(entries: impl IntoIterator<Item = (IpOrCidr, Held)>) -> Self {
        Self {
            bans: entries.into_iter().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.bans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bans.is_empty()
    }

    pub fn contains(&self, ip: &IpOrCidr) -> bool {
        self.bans.contains_key(ip)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&IpOrCidr, &Held)> {
        self.bans.iter()
    }

    /// The earliest expiry of a held ban.
    pub fn next_expiry(&self) -> Option<i64> {
        self.bans.values().filter_map(|h| h.expires_ms).min()
    }

    /// Drops every ban whose time has come; their addresses, to unban.
    pub fn expire(&mut self, now_ms: i64) -> Vec<IpOrCidr> {
        let due: Vec<IpOrCidr> = self
            .bans
            .iter()
            .filter(|(_, held)| held.expired(now_ms))
            .map(|(ip, _)| *ip)
            .collect();
        for ip in &due {
            self.bans.remove(ip);
        }
        due
    }

    /// Applies a sync at `now_ms` and says what fail2ban must be told. Bans held past their
    /// expiry go first (unbanned, not counted); an entry of the sync that has already expired is
    /// dropped, and lifts the address if it was held.
    pub fn apply(&mut self, change: Change, now_ms: i64) -> Plan {
        let mut unban = self.expire(now_ms);
        let before: BTreeSet<IpOrCidr> = self.bans.keys().copied().collect();
        let mut expired = 0;
        let mut expired_ips = BTreeSet::new();
        if change.full {
            self.bans.clear();
        } else {
            for ip in &change.lift {
                self.bans.remove(ip);
            }
        }
        for wanted in change.bans {
            if wanted.held.expired(now_ms) {
                expired += 1;
                expired_ips.insert(wanted.ip);
                self.bans.remove(&wanted.ip);
            } else {
                expired_ips.remove(&wanted.ip);
                self.bans.insert(wanted.ip, wanted.held);
            }
        }
        let ban = self
            .bans
            .keys()
            .filter(|ip| !before.contains(ip))
            .copied()
            .collect();
        let gone: Vec<IpOrCidr> = before
            .iter()
            .filter(|ip| !self.bans.contains_key(ip))
            .copied()
            .collect();
        let lifted = gone.iter().filter(|ip| !expired_ips.contains(ip)).count();
        unban.extend(gone);
        Plan {
            ban,
            unban,
            expired,
            lifted: u32::try_from(lifted).unwrap_or(u32::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn ip(raw: &str) -> IpOrCidr {
        IpOrCidr::parse(raw).expect("address")
    }

    fn wanted(raw: &str, expires_ms: i64) -> Wanted {
        Wanted::parse(raw, expires_ms, "test").expect("wanted")
    }

    fn set(entries: &[(&str, i64)]) -> BanSet {
        let mut set = BanSet::default();
        set.apply(
            Change {
                full: true,
                bans: entries.iter().map(|(raw, at)| wanted(raw, *at)).collect(),
                lift: Vec::new(),
            },
            NOW,
        );
        set
    }

    fn ips(list: &[IpOrCidr]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    fn held(set: &BanSet) -> Vec<String> {
        set.iter().map(|(ip, _)| ip.to_string()).collect()
    }

    #[test]
    fn a_delta_adds_replaces_and_lifts() {
        let mut s = set(&[("198.51.100.1", 0), ("198.51.100.2", NOW + 10)]);
        let plan = s.apply(
            Change {
                full: false,
                bans: vec![
                    wanted("198.51.100.2", NOW + 99),
                    wanted("203.0.113.0/24", 0),
                ],
                lift: vec![ip("198.51.100.1"), ip("192.0.2.9")],
            },
            NOW,
        );
        assert_eq!(ips(&plan.ban), ["203.0.113.0/24"]);
        assert_eq!(ips(&plan.unban), ["198.51.100.1"]);
        assert_eq!((plan.lifted, plan.expired), (1, 0));
        assert_eq!(held(&s), ["198.51.100.2", "203.0.113.0/24"]);
        assert_eq!(s.next_expiry(), Some(NOW + 99), "the expiry was replaced");
    }

    #[test]
    fn a_full_set_replaces_everything_and_ignores_lift() {
        let mut s = set(&[("198.51.100.1", 0), ("198.51.100.2", 0)]);
        let plan = s.apply(
            Change {
                full: true,
                bans: vec![wanted("198.51.100.2", 0), wanted("2001:db8::7", 0)],
                lift: vec![ip("198.51.100.2")],
            },
            NOW,
        );
        assert_eq!(ips(&plan.ban), ["2001:db8::7"]);
        assert_eq!(ips(&plan.unban), ["198.51.100.1"]);
        assert_eq!((plan.lifted, plan.expired), (1, 0));
        assert_eq!(held(&s), ["198.51.100.2", "2001:db8::7"]);
    }

    #[test]
    fn expired_entries_are_dropped_counted_and_lift_what_was_held() {
        let mut s = set(&[("198.51.100.1", 0)]);
        let plan = s.apply(
            Change {
                full: false,
                bans: vec![wanted("198.51.100.1", NOW - 1), wanted("198.51.100.3", NOW)],
                lift: Vec::new(),
            },
            NOW,
        );
        assert!(plan.ban.is_empty());
        assert_eq!(ips(&plan.unban), ["198.51.100.1"]);
        assert_eq!((plan.lifted, plan.expired), (0, 2));
        assert!(s.is_empty());
    }

    #[test]
    fn held_bans_expire_at_their_time() {
        let mut s = set(&[("198.51.100.1", NOW + 5), ("198.51.100.2", 0)]);
        assert_eq!(s.next_expiry(), Some(NOW + 5));
        assert!(s.expire(NOW + 4).is_empty());
        assert_eq!(ips(&s.expire(NOW + 5)), ["198.51.100.1"]);
        assert_eq!(held(&s), ["198.51.100.2"]);
        assert_eq!(s.next_expiry(), None);
        // A sync after the time unbans what is still held past it, without counting it.
        let mut s = set(&[("198.51.100.1", NOW + 5)]);
        let plan = s.apply(Change::default(), NOW + 6);
        assert_eq!(ips(&plan.unban), ["198.51.100.1"]);
        assert_eq!((plan.lifted, plan.expired), (0, 0));
    }

    #[test]
    fn the_same_address_twice_keeps_the_last() {
        let mut s = BanSet::default();
        let plan = s.apply(
            Change {
                full: false,
                bans: vec![wanted("198.51.100.1", NOW + 1), wanted("198.51.100.1", 0)],
                lift: Vec::new(),
            },
            NOW,
        );
        assert_eq!(ips(&plan.ban), ["198.51.100.1"]);
        assert_eq!(s.next_expiry(), None);
    }

    #[test]
    fn entries_are_checked_like_a_manual_ban() {
        let refused = |raw: &str| Wanted::parse(raw, 0, "").expect_err(raw);
        assert!(refused("0.0.0.0/0").contains("every address"));
        assert!(refused("::/0").contains("every address"));
        assert!(refused("255.255.255.255").contains("broadcast"));
        assert!(refused("10.0.0.1/8").contains("host bits"));
        assert!(refused("127.0.0.1").contains("loopback"));
        assert!(refused("not an address").contains("not an IPv4"));
        assert!(
            Wanted::parse("198.51.100.1", -5, "")
                .expect_err("negative")
                .contains("before 1970")
        );
        let ok = Wanted::parse("::ffff:198.51.100.1", 0, "a\nb").expect("mapped");
        assert_eq!(ok.ip.to_string(), "198.51.100.1");
        assert_eq!(ok.held.reason, "a b");
        assert_eq!(ok.held.expires_ms, None);
        let long = "x".repeat(MAX_REASON_CHARS + 10);
        let cut = Wanted::parse("198.51.100.1", 1, &long).expect("long reason");
        assert_eq!(cut.held.reason.chars().count(), MAX_REASON_CHARS);
    }
}
