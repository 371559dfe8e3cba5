//! Reconnect delays: full-jitter exponential backoff, so a fleet that lost its hub does not come back
//! in lockstep.

use std::time::Duration;

use rand::Rng;

/// Past this many doublings the ceiling is pinned at the maximum anyway; stopping here keeps the
/// arithmetic far from overflow.
const MAX_DOUBLINGS: u32 = 32;

/// Full-jitter exponential backoff: attempt `n` sleeps uniformly in `[0, min(max, initial·2ⁿ)]`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The ceiling of the next delay.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32 << self.attempt.min(MAX_DOUBLINGS - 1);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay before the next attempt, with the thread's random generator.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(&mut rand::rng())
    }

    /// The delay before the next attempt; counts the attempt.
    pub fn next_delay_with(&mut self, rng: &mut impl Rng) -> Duration {
        let ceiling = u64::try_from(self.ceiling().as_millis()).unwrap_or(u64::MAX);
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_millis(rng.random_range(0..=ceiling))
    }

    /// Failed attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Starts over from the initial delay, after a session that worked.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ceiling_doubles_up_to_the_maximum() {
        let mut backoff = Backoff::new(ms(500), ms(30_000));
        let mut rng = StdRng::seed_from_u64(1);
        let mut ceilings = Vec::new();
        for _ in 0..10 {
            ceilings.push(backoff.ceiling().as_millis());
            backoff.next_delay_with(&mut rng);
        }
        assert_eq!(
            ceilings,
            [
                500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000
            ]
        );
    }

    #[test]
    fn full_jitter_never_exceeds_the_ceiling_and_spreads_out() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 0..200u32 {
            let mut backoff = Backoff::new(ms(500), ms(30_000));
            for _ in 0..attempt.min(40) {
                backoff.next_delay_with(&mut rng);
            }
            let ceiling = backoff.ceiling();
            let delay = backoff.next_delay_with(&mut rng);
            assert!(
                delay <= ceiling,
                "attempt {attempt}: {delay:?} > {ceiling:?}"
            );
            assert!(delay <= ms(30_000));
        }
        // At the cap, delays cover the whole range rather than clustering at the top.
        let mut backoff = Backoff::new(ms(500), ms(30_000));
        for _ in 0..10 {
            backoff.next_delay_with(&mut rng);
        }
        let delays: Vec<Duration> = (0..500)
            .map(|_| backoff.next_delay_with(&mut rng))
            .collect();
        assert!(delays.iter().any(|d| *d < ms(5_000)));
        assert!(delays.iter().any(|d| *d > ms(25_000)));
    }

    #[test]
    fn reset_starts_over_and_huge_attempts_do_not_overflow() {
        let mut backoff = Backoff::new(ms(500), ms(30_000));
        for _ in 0..10_000 {
            backoff.next_delay();
        }
        assert_eq!(backoff.ceiling(), ms(30_000));
        assert_eq!(backoff.attempts(), 10_000);
        backoff.reset();
        assert_eq!(backoff.ceiling(), ms(500));
        assert!(backoff.next_delay() <= ms(500));
    }

    #[test]
    fn maximum_below_initial_is_raised_to_it() {
        let backoff = Backoff::new(ms(500), ms(100));
        assert_eq!(backoff.ceiling(), ms(500));
    }
}
