//! The storm breaker: per source server, what its bans shared within the last minute, counted in
//! origin bans (its ban events that caused at least one shared ban to deliver) and, when a limit
//! of them is configured, in shared bans. A source whose count would pass a limit trips: it is
//! paused, and nothing it reports is shared (by a policy or a recidive rule) until an admin
//! resumes it. Ingest is no business of the breaker: only sharing from the source stops.
//!
//! Counting origin bans keeps the limit independent of the fleet's size: one ban shared with a
//! thousand hosts is one origin ban, while a poisoned log makes hundreds a minute. Pure: the
//! window's counts (read from the store, so every replica sees one count) and the paused sources
//! are passed in, and one [`StormBreaker`] judges one batch of events.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::ServerId;
use super::events::EventId;

/// The breaker's window.
pub const WINDOW: TimeDelta = TimeDelta::minutes(1);

/// The default of `defence.storm_origin_bans_per_minute`.
pub const DEFAULT_ORIGIN_BANS_PER_MINUTE: u32 = 300;

/// A source server's sharing paused by the breaker, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePause {
    pub id: i64,
    pub server: ServerId,
    pub paused_at: DateTime<Utc>,
    /// The shared bans its last minute would have held when it tripped.
    pub shared_bans: u64,
    pub reason: String,
    pub resumed_at: Option<DateTime<Utc>>,
    /// Who resumed it.
    pub resumed_by: Option<String>,
}

/// When the breaker trips a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StormLimits {
    /// Origin bans of one source that caused sharing within the window.
    pub origin_bans: u32,
    /// Shared bans one source's bans caused within the window; `None`: no such limit.
    pub shared_bans: Option<u32>,
}

impl StormLimits {
    /// Limits no source ever passes.
    pub const UNLIMITED: Self = Self {
        origin_bans: u32::MAX,
        shared_bans: None,
    };

    /// Why a source with `count` in its window trips, or `None` when it stays within the limits.
    pub fn passed_by(&self, count: WindowCount) -> Option<String> {
        if count.origin_bans > u64::from(self.origin_bans) {
            return Some(format!(
                "storm: {} origin bans shared within a minute, over the limit of {} \
                 (defence.storm_origin_bans_per_minute)",
                count.origin_bans, self.origin_bans
            ));
        }
        match self.shared_bans {
            Some(limit) if count.shared_bans > u64::from(limit) => Some(format!(
                "storm: {} shared bans within a minute, over the limit of {limit} \
                 (defence.storm_limit_per_minute)",
                count.shared_bans
            )),
            _ => None,
        }
    }
}

/// What one source shared within the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCount {
    pub origin_bans: u64,
    pub shared_bans: u64,
}

/// An origin ban that shared, as the breaker counts it (stored with the shared bans, so every
/// replica and the next batch count it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginShare {
    pub event: EventId,
    pub server: ServerId,
    /// The shared bans to deliver it caused.
    pub shared_bans: u32,
}

/// A source the breaker tripped: its pause, to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    pub server: ServerId,
    /// What its window would have held.
    pub count: WindowCount,
    pub reason: String,
}

/// What the breaker says to a source's shared bans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Share them.
    Admitted,
    /// These would pass a limit: the source is paused from now on, and these are not shared.
    /// `count` is what the window would have held with them.
    Tripped { count: WindowCount },
    /// The source was already paused.
    Paused,
}

/// The breaker of one batch of events: the windows' counts when the batch began, plus what the
/// batch admitted.
#[derive(Debug)]
pub struct StormBreaker {
    limits: StormLimits,
    counts: HashMap<ServerId, WindowCount>,
    paused: HashSet<ServerId>,
    shares: HashMap<EventId, OriginShare>,
    trips: Vec<Trip>,
}

impl StormBreaker {
    /// A breaker under `limits` whose sources shared `counts` within the window and of which
    /// `paused` are paused.
    pub fn new(
        limits: StormLimits,
        counts: HashMap<ServerId, WindowCount>,
        paused: HashSet<ServerId>,
    ) -> Self {
        Self {
            limits,
            counts,
            paused,
            shares: HashMap::new(),
            trips: Vec::new(),
        }
    }

    /// A breaker that admits everything.
    pub fn unlimited() -> Self {
        Self::new(StormLimits::UNLIMITED, HashMap::new(), HashSet::new())
    }

    /// Asks to share `bans` shared bans to deliver, caused by `source`'s ban `event`. An event
    /// counts once as an origin ban however many policies and rules share it. Admitted ones are
    /// counted in the source's window.
    pub fn admit(&mut self, source: ServerId, event: EventId, bans: u32) -> Admission {
        if self.paused.contains(&source) {
            return Admission::Paused;
        }
        if bans == 0 {
            return Admission::Admitted;
        }
        let counted = self.shares.contains_key(&event);
        let before = self.counts.get(&source).copied().unwrap_or_default();
        let count = WindowCount {
            origin_bans: before.origin_bans + u64::from(!counted),
            shared_bans: before.shared_bans + u64::from(bans),
        };
        if let Some(reason) = self.limits.passed_by(count) {
            self.paused.insert(source);
            self.trips.push(Trip {
                server: source,
                count,
                reason,
            });
            return Admission::Tripped { count };
        }
        self.counts.insert(source, count);
        self.shares
            .entry(event)
            .or_insert(OriginShare {
                event,
                server: source,
                shared_bans: 0,
            })
            .shared_bans += bans;
        Admission::Admitted
    }

    pub fn is_paused(&self, source: ServerId) -> bool {
        self.paused.contains(&source)
    }

    /// The origin bans admitted, by event id.
    pub fn shares(&self) -> Vec<OriginShare> {
        let mut shares: Vec<OriginShare> = self.shares.values().copied().collect();
        shares.sort_by_key(|s| s.event);
        shares
    }

    /// The sources tripped, in the order they tripped.
    pub fn trips(&self) -> &[Trip] {
        &self.trips
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(origin_bans: u32, shared_bans: Option<u32>) -> StormLimits {
        StormLimits {
            origin_bans,
            shared_bans,
        }
    }

    fn breaker(limits: StormLimits) -> StormBreaker {
        StormBreaker::new(limits, HashMap::new(), HashSet::new())
    }

    fn count(origin_bans: u64, shared_bans: u64) -> WindowCount {
        WindowCount {
            origin_bans,
            shared_bans,
        }
    }

    /// The default limits, with no shared-ban limit (the default of
    /// `defence.storm_limit_per_minute`).
    fn defaults() -> StormLimits {
        limits(DEFAULT_ORIGIN_BANS_PER_MINUTE, None)
    }

    #[test]
    fn one_origin_ban_shared_with_a_thousand_hosts_does_not_trip() {
        let mut b = breaker(defaults());
        let a = ServerId::new();
        assert_eq!(b.admit(a, EventId(1), 999), Admission::Admitted);
        assert_eq!(b.shares()[0].shared_bans, 999);
    }

    #[test]
    fn ordinary_traffic_to_a_thousand_hosts_does_not_trip() {
        // A busy host: a ban every second for a minute, each shared with 999 hosts, on top of a
        // minute that already held as many.
        let a = ServerId::new();
        let mut b = StormBreaker::new(
            defaults(),
            HashMap::from([(a, count(60, 60 * 999))]),
            HashSet::new(),
        );
        for id in 0..60 {
            assert_eq!(b.admit(a, EventId(id), 999), Admission::Admitted);
        }
        assert!(!b.is_paused(a));
    }

    #[test]
    fn a_poisoned_log_trips_its_source() {
        let mut b = breaker(defaults());
        let (a, other) = (ServerId::new(), ServerId::new());
        let limit = i64::from(DEFAULT_ORIGIN_BANS_PER_MINUTE);
        for id in 1..=limit {
            assert_eq!(b.admit(a, EventId(id), 2), Admission::Admitted);
        }
        assert_eq!(
            b.admit(a, EventId(limit + 1), 2),
            Admission::Tripped {
                count: count(301, 602)
            }
        );
        assert_eq!(b.admit(a, EventId(limit + 2), 2), Admission::Paused);
        // Sources are counted apart.
        assert_eq!(b.admit(other, EventId(limit + 3), 2), Admission::Admitted);
        assert_eq!(b.trips().len(), 1);
        assert_eq!(b.trips()[0].server, a);
        assert!(b.trips()[0].reason.contains("storm_origin_bans_per_minute"));
        // What tripped is not counted as shared.
        assert_eq!(b.shares().len(), 301);
    }

    #[test]
    fn the_stored_window_counts() {
        let a = ServerId::new();
        let mut b = StormBreaker::new(
            limits(10, None),
            HashMap::from([(a, count(9, 9))]),
            HashSet::new(),
        );
        assert_eq!(b.admit(a, EventId(1), 1), Admission::Admitted);
        assert_eq!(
            b.admit(a, EventId(2), 1),
            Admission::Tripped {
                count: count(11, 11)
            }
        );
    }

    #[test]
    fn an_event_is_one_origin_ban_however_many_sources_share_it() {
        let mut b = breaker(limits(1, None));
        let a = ServerId::new();
        assert_eq!(b.admit(a, EventId(1), 2), Admission::Admitted);
        // A second policy and a recidive rule sharing the same ban.
        assert_eq!(b.admit(a, EventId(1), 3), Admission::Admitted);
        assert_eq!(b.admit(a, EventId(1), 1), Admission::Admitted);
        assert_eq!(
            b.shares(),
            vec![OriginShare {
                event: EventId(1),
                server: a,
                shared_bans: 6
            }]
        );
        assert_eq!(
            b.admit(a, EventId(2), 1),
            Admission::Tripped { count: count(2, 7) }
        );
    }

    #[test]
    fn a_configured_shared_ban_limit_still_trips() {
        // `defence.storm_limit_per_minute = 5`: the third ban shared with two hosts passes it.
        let mut b = breaker(limits(DEFAULT_ORIGIN_BANS_PER_MINUTE, Some(5)));
        let a = ServerId::new();
        assert_eq!(b.admit(a, EventId(1), 2), Admission::Admitted);
        assert_eq!(b.admit(a, EventId(2), 2), Admission::Admitted);
        assert_eq!(
            b.admit(a, EventId(3), 2),
            Admission::Tripped { count: count(3, 6) }
        );
        assert!(b.trips()[0].reason.contains("storm_limit_per_minute"));
        // One event causing more than the limit trips at once.
        let mut b = breaker(limits(DEFAULT_ORIGIN_BANS_PER_MINUTE, Some(5)));
        assert_eq!(
            b.admit(a, EventId(1), 6),
            Admission::Tripped { count: count(1, 6) }
        );
    }

    #[test]
    fn a_paused_source_shares_nothing() {
        let a = ServerId::new();
        let mut b = StormBreaker::new(defaults(), HashMap::new(), HashSet::from([a]));
        assert_eq!(b.admit(a, EventId(1), 1), Admission::Paused);
        // Even an event that causes no shared ban is refused while paused.
        assert_eq!(b.admit(a, EventId(2), 0), Admission::Paused);
        assert!(b.shares().is_empty());
        assert!(b.trips().is_empty());
    }

    #[test]
    fn bans_to_nobody_are_not_counted() {
        let mut b = breaker(limits(1, None));
        let a = ServerId::new();
        assert_eq!(b.admit(a, EventId(1), 0), Admission::Admitted);
        assert!(b.shares().is_empty());
        assert_eq!(b.admit(a, EventId(2), 1), Admission::Admitted);
    }

    #[test]
    fn unlimited_admits_everything() {
        let mut b = StormBreaker::unlimited();
        let a = ServerId::new();
        for id in 0..1000 {
            assert_eq!(b.admit(a, EventId(id), 1000), Admission::Admitted);
        }
    }
}
