//! Login rate limiting: at most `max_failures` failed logins per key (client address, user name)
//! within a sliding window. In memory, per hub process: with several replicas each counts its own.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Past this many tracked keys, keys without recent failures are dropped (bounds memory when
/// failures come from very many addresses).
const MAX_KEYS: usize = 10_000;

#[derive(Debug)]
pub struct LoginLimiter {
    max_failures: usize,
    window: Duration,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginLimiter {
    pub fn new(max_failures: u32, window: Duration) -> Self {
        Self {
            max_failures: usize::try_from(max_failures).unwrap_or(usize::MAX).max(1),
            window,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds to wait)` if any of `keys` has used up its failures.
    pub fn check(&self, keys: &[String], now: Instant) -> Result<(), u64> {
        let mut failures = self.lock();
        let mut wait = Duration::ZERO;
        for key in keys {
            if let Some(times) = failures.get_mut(key) {
                expire(times, now, self.window);
                if times.len() >= self.max_failures
                    && let Some(oldest) = times.front()
                {
                    wait = wait.max(self.window.saturating_sub(now - *oldest));
                }
            }
        }
        if wait.is_zero() {
            Ok(())
        } else {
            // Round up: "try again in 0 s" would be a lie.
            Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        }
    }

    /// Counts a failed login against each key.
    pub fn fail(&self, keys: &[String], now: Instant) {
        let mut failures = self.lock();
        if failures.len() > MAX_KEYS {
            let window = self.window;
            failures.retain(|_, times| {
                expire(times, now, window);
                !times.is_empty()
            });
        }
        for key in keys {
            let times = failures.entry(key.clone()).or_default();
            expire(times, now, self.window);
            times.push_back(now);
            while times.len() > self.max_failures {
                times.pop_front();
            }
        }
    }

    /// Forgets the failures of `key` (a user name after a successful login).
    pub fn clear(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Instant>>> {
        // A panic while holding the lock leaves only counters behind; they stay usable.
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn expire(times: &mut VecDeque<Instant>, now: Instant, window: Duration) {
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) >= window)
    {
        times.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_after_max_failures_until_the_window_passes() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60));
        let keys = vec!["ip:192.0.2.1".to_owned(), "user:admin".to_owned()];
        let start = Instant::now();
        for i in 0..3 {
            assert!(limiter.check(&keys, start).is_ok(), "attempt {i}");
            limiter.fail(&keys, start + Duration::from_secs(i));
        }
        let wait = limiter
            .check(&keys, start + Duration::from_secs(10))
            .expect_err("limited");
        assert_eq!(wait, 50);
        // Another address for the same user is limited too; another user from elsewhere is not.
        assert!(
            limiter
                .check(&["ip:192.0.2.9".to_owned(), "user:admin".to_owned()], start)
                .is_err()
        );
        assert!(
            limiter
                .check(&["ip:192.0.2.9".to_owned(), "user:bob".to_owned()], start)
                .is_ok()
        );
        assert!(
            limiter
                .check(&keys, start + Duration::from_secs(61))
                .is_ok()
        );
    }

    #[test]
    fn clearing_a_user_forgets_its_failures() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(60));
        let now = Instant::now();
        limiter.fail(&["user:admin".to_owned()], now);
        assert!(limiter.check(&["user:admin".to_owned()], now).is_err());
        limiter.clear("user:admin");
        assert!(limiter.check(&["user:admin".to_owned()], now).is_ok());
    }
}
