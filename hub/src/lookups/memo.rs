//! What keeps lookups cheap and polite: answers kept in memory for the configured time, and the
//! sliding minute that bounds how many lookups leave the hub.
//!
//! The cache is in memory, per replica, rather than in the database: lookups happen when an
//! operator opens an address, registry data changes over days, and a cold cache after a restart
//! costs one request per address opened again; a table would add writes and a migration for little.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries kept at most; the oldest goes first beyond it.
const MAX_ENTRIES: usize = 4096;

/// Answers by key, each with when it was fetched.
#[derive(Debug)]
pub struct Memo<K, V> {
    entries: HashMap<K, (Instant, V)>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Memo<K, V> {
    /// The answer for `key` and when it was fetched, if younger than `ttl`.
    pub fn get(&self, key: &K, ttl: Duration, now: Instant) -> Option<(Instant, V)> {
        self.entries
            .get(key)
            .filter(|(at, _)| now.duration_since(*at) < ttl)
            .cloned()
    }

    pub fn put(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries
                .retain(|_, (at, _)| now.duration_since(*at) < ttl);
            if self.entries.len() >= MAX_ENTRIES
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now, value));
    }
}

/// The lookups of the last minute.
#[derive(Debug, Default)]
pub struct Minute {
    taken: VecDeque<Instant>,
}

impl Minute {
    /// Takes a turn if fewer than `per_minute` were taken in the last minute; else says how long
    /// until the next turn.
    pub fn take(&mut self, per_minute: u32, now: Instant) -> Result<(), Duration> {
        const MINUTE: Duration = Duration::from_secs(60);
        while self
            .taken
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            self.taken.pop_front();
        }
        if self.taken.len() < per_minute as usize {
            self.taken.push_back(now);
            return Ok(());
        }
        let oldest = self.taken.front().copied().unwrap_or(now);
        Err(MINUTE.saturating_sub(now.duration_since(oldest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_with_their_ttl() {
        let start = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut memo = Memo::default();
        memo.put("a", 1, ttl, start);
        assert_eq!(
            memo.get(&"a", ttl, start + Duration::from_secs(59))
                .map(|(_, v)| v),
            Some(1)
        );
        assert_eq!(memo.get(&"a", ttl, start + Duration::from_secs(60)), None);
        // A shorter TTL set later applies to what is kept.
        assert_eq!(
            memo.get(
                &"a",
                Duration::from_secs(10),
                start + Duration::from_secs(11)
            ),
            None
        );
    }

    #[test]
    fn the_memo_stays_bounded() {
        let start = Instant::now();
        let ttl = Duration::from_secs(600);
        let mut memo = Memo::default();
        for i in 0..=MAX_ENTRIES {
            memo.put(i, i, ttl, start + Duration::from_millis(i as u64));
        }
        assert_eq!(memo.entries.len(), MAX_ENTRIES);
        assert!(memo.get(&0, ttl, start).is_none(), "the oldest went first");
    }

    #[test]
    fn a_minute_holds_its_limit_and_says_when_to_come_back() {
        let start = Instant::now();
        let mut minute = Minute::default();
        assert_eq!(minute.take(2, start), Ok(()));
        assert_eq!(minute.take(2, start + Duration::from_secs(10)), Ok(()));
        assert_eq!(
            minute.take(2, start + Duration::from_secs(20)),
            Err(Duration::from_secs(40))
        );
        assert_eq!(minute.take(2, start + Duration::from_secs(60)), Ok(()));
    }
}
