//! The storm breaker: per source server, a sliding one-minute count of the shared bans its events
//! would cause. A source whose count would pass the limit trips: it is paused, and nothing it
//! reports is shared (by a policy or a recidive rule) until an admin resumes it. Ingest is no
//! business of the breaker: only sharing from the source stops. Pure; the caller passes the time.

use std::collections::{HashMap, HashSet, VecDeque};

use chrono::{DateTime, TimeDelta, Utc};

use super::ServerId;

/// The breaker's window.
pub const WINDOW: TimeDelta = TimeDelta::minutes(1);

/// The shared bans one source caused within the window, oldest first.
#[derive(Debug, Default)]
struct Window {
    entries: VecDeque<(DateTime<Utc>, u32)>,
    total: u64,
}

impl Window {
    fn slide(&mut self, now: DateTime<Utc>) {
        while let Some(&(at, n)) = self.entries.front() {
            if at > now - WINDOW {
                break;
            }
            self.entries.pop_front();
            self.total -= u64::from(n);
        }
    }
}

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

/// What the breaker says to a source's shared bans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Share them.
    Admitted,
    /// These would pass the limit: the source is paused from now on, and these are not shared.
    /// `count` is what the window would have held with them.
    Tripped { count: u64 },
    /// The source was already paused.
    Paused,
}

/// The per-source windows and the paused sources.
#[derive(Debug)]
pub struct StormBreaker {
    limit: u32,
    windows: HashMap<ServerId, Window>,
    paused: HashSet<ServerId>,
}

impl StormBreaker {
    /// A breaker that trips a source past `limit` shared bans within a minute.
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            windows: HashMap::new(),
            paused: HashSet::new(),
        }
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Asks to share `bans` shared bans caused by `source`'s events at `now`. Admitted ones are
    /// counted in the source's window.
    pub fn admit(&mut self, source: ServerId, bans: u32, now: DateTime<Utc>) -> Admission {
        if self.paused.contains(&source) {
            return Admission::Paused;
        }
        if bans == 0 {
            return Admission::Admitted;
        }
        let window = self.windows.entry(source).or_default();
        window.slide(now);
        let count = window.total + u64::from(bans);
        if count > u64::from(self.limit) {
            self.windows.remove(&source);
            self.paused.insert(source);
            return Admission::Tripped { count };
        }
        window.entries.push_back((now, bans));
        window.total = count;
        Admission::Admitted
    }

    pub fn is_paused(&self, source: ServerId) -> bool {
        self.paused.contains(&source)
    }

    /// Makes the paused sources exactly `paused` (as stored, e.g. after an admin resumed one on
    /// another replica). A resumed source starts from an empty window.
    pub fn set_paused(&mut self, paused: HashSet<ServerId>) {
        for resumed in self.paused.difference(&paused) {
            self.windows.remove(resumed);
        }
        for now_paused in &paused {
            self.windows.remove(now_paused);
        }
        self.paused = paused;
    }

    /// Lets `source` share again, from an empty window.
    pub fn resume(&mut self, source: ServerId) {
        self.paused.remove(&source);
        self.windows.remove(&source);
    }

    /// Forgets the windows that hold nothing any more, so sources that fell silent cost nothing.
    pub fn prune(&mut self, now: DateTime<Utc>) {
        self.windows.retain(|_, window| {
            window.slide(now);
            window.total > 0
        });
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).expect("a time")
    }

    #[test]
    fn a_source_trips_when_its_minute_would_pass_the_limit() {
        let mut breaker = StormBreaker::new(10);
        let a = ServerId::new();
        for i in 0..5 {
            assert_eq!(breaker.admit(a, 2, t(i * 1000)), Admission::Admitted);
        }
        // Exactly at the limit is fine; one more is not.
        assert_eq!(
            breaker.admit(a, 1, t(5000)),
            Admission::Tripped { count: 11 }
        );
        assert!(breaker.is_paused(a));
        assert_eq!(breaker.admit(a, 1, t(120_000)), Admission::Paused);
        // Even an event that causes no shared ban is refused while paused.
        assert_eq!(breaker.admit(a, 0, t(120_000)), Admission::Paused);
    }

    #[test]
    fn the_window_slides() {
        let mut breaker = StormBreaker::new(10);
        let a = ServerId::new();
        assert_eq!(breaker.admit(a, 10, t(0)), Admission::Admitted);
        assert_eq!(
            breaker.admit(a, 1, t(59_999)),
            Admission::Tripped { count: 11 }
        );
        let b = ServerId::new();
        assert_eq!(breaker.admit(b, 10, t(0)), Admission::Admitted);
        // A minute later the first ten have left the window.
        assert_eq!(breaker.admit(b, 10, t(60_000)), Admission::Admitted);
        assert_eq!(
            breaker.admit(b, 1, t(60_001)),
            Admission::Tripped { count: 11 }
        );
    }

    #[test]
    fn sources_are_counted_apart() {
        let mut breaker = StormBreaker::new(3);
        let (a, b) = (ServerId::new(), ServerId::new());
        assert_eq!(breaker.admit(a, 3, t(0)), Admission::Admitted);
        assert_eq!(breaker.admit(b, 3, t(0)), Admission::Admitted);
        assert_eq!(breaker.admit(a, 1, t(1)), Admission::Tripped { count: 4 });
        assert!(!breaker.is_paused(b));
    }

    #[test]
    fn one_event_causing_more_than_the_limit_trips_at_once() {
        let mut breaker = StormBreaker::new(5);
        let a = ServerId::new();
        assert_eq!(breaker.admit(a, 6, t(0)), Admission::Tripped { count: 6 });
    }

    #[test]
    fn a_resumed_source_starts_from_an_empty_window() {
        let mut breaker = StormBreaker::new(3);
        let a = ServerId::new();
        assert_eq!(breaker.admit(a, 3, t(0)), Admission::Admitted);
        assert_eq!(breaker.admit(a, 1, t(1)), Admission::Tripped { count: 4 });
        breaker.resume(a);
        assert!(!breaker.is_paused(a));
        assert_eq!(breaker.admit(a, 3, t(2)), Admission::Admitted);
    }

    #[test]
    fn the_stored_pauses_replace_the_known_ones() {
        let mut breaker = StormBreaker::new(3);
        let (a, b) = (ServerId::new(), ServerId::new());
        assert_eq!(breaker.admit(a, 4, t(0)), Admission::Tripped { count: 4 });
        assert_eq!(breaker.admit(b, 3, t(0)), Admission::Admitted);
        // Another replica's admin resumed a and the store says b is paused.
        breaker.set_paused(HashSet::from([b]));
        assert!(!breaker.is_paused(a));
        assert!(breaker.is_paused(b));
        assert_eq!(breaker.admit(a, 3, t(1)), Admission::Admitted);
        assert_eq!(breaker.admit(b, 1, t(1)), Admission::Paused);
        // When b is resumed, its window starts empty.
        breaker.set_paused(HashSet::new());
        assert_eq!(breaker.admit(b, 3, t(2)), Admission::Admitted);
    }

    #[test]
    fn silent_sources_are_forgotten() {
        let mut breaker = StormBreaker::new(100);
        for _ in 0..50 {
            assert_eq!(breaker.admit(ServerId::new(), 1, t(0)), Admission::Admitted);
        }
        breaker.prune(t(30_000));
        assert_eq!(breaker.tracked(), 50);
        breaker.prune(t(60_000));
        assert_eq!(breaker.tracked(), 0);
    }
}
