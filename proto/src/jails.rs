//! The cached list of a fail2ban server's jails that both the agent's relay and the hub's direct
//! callbacks consult before storing a ban event, so that a callback naming a jail that does not
//! exist is refused instead of stored forever. This is only the bookkeeping; each side asks
//! fail2ban (or the agent) in its own way and reports the answer here.
//!
//! Two rules keep real events from being refused:
//! - A jail stays known for [`REMEMBER`] after it was last listed: when a reload removes a jail,
//!   fail2ban flushes its bans and the unban callbacks arrive after the jail left the list.
//! - When the list cannot be had (fail2ban stopped or restarting, agent offline), the callback is
//!   let through [`Verdict::Unverified`]: a stopping fail2ban is exactly when its flush callbacks
//!   arrive, and losing them would be worse than storing a misnamed jail. The next attempt waits
//!   [`RETRY_UNREACHABLE`], so a burst does not hammer a dead socket.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a jail that is no longer listed is still accepted.
pub const REMEMBER: Duration = Duration::from_secs(600);
/// How long after a failed attempt to get the list the next one is made.
pub const RETRY_UNREACHABLE: Duration = Duration::from_secs(1);

/// What the list says about a jail named in a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Listed now, or within [`REMEMBER`].
    Known,
    /// The list was had after the callback arrived, and the jail is not in it.
    Unknown,
    /// The list could not be had; the callback is let through.
    Unverified,
}

/// The jails of one fail2ban server, as last listed.
#[derive(Debug, Default)]
pub struct JailNames {
    /// Jail name → when it was last listed.
    seen: HashMap<String, Instant>,
    /// When the last successful listing started.
    refreshed_at: Option<Instant>,
    /// When the last attempt to list failed.
    unreachable_at: Option<Instant>,
}

impl JailNames {
    /// The verdict for a callback that arrived at `asked_at`, if it can be given without listing
    /// the jails again; `None` means: list them and call [`Self::listed`] or [`Self::unreachable`].
    pub fn cached(&self, jail: &str, asked_at: Instant) -> Option<Verdict> {
        if self.knows(jail, asked_at) {
            return Some(Verdict::Known);
        }
        // A listing that started after this callback arrived already shows every jail that could
        // have sent it.
        if self.refreshed_at.is_some_and(|at| at > asked_at) {
            return Some(Verdict::Unknown);
        }
        if self
            .unreachable_at
            .is_some_and(|at| asked_at.saturating_duration_since(at) < RETRY_UNREACHABLE)
        {
            return Some(Verdict::Unverified);
        }
        None
    }

    /// Records a listing that started at `started`, and gives the verdict for `jail`.
    pub fn listed(
        &mut self,
        names: impl IntoIterator<Item = String>,
        started: Instant,
        jail: &str,
    ) -> Verdict {
        self.refreshed_at = Some(started);
        self.unreachable_at = None;
        for name in names {
            self.seen.insert(name, started);
        }
        self.seen
            .retain(|_, at| started.saturating_duration_since(*at) < REMEMBER);
        if self.knows(jail, started) {
            Verdict::Known
        } else {
            Verdict::Unknown
        }
    }

    /// Records a failed attempt to list the jails at `at`.
    pub fn unreachable(&mut self, at: Instant) -> Verdict {
        self.unreachable_at = Some(at);
        Verdict::Unverified
    }

    fn knows(&self, jail: &str, now: Instant) -> bool {
        self.seen
            .get(jail)
            .is_some_and(|at| now.saturating_duration_since(*at) < REMEMBER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_listing_answers_for_later_callbacks_but_not_for_earlier_ones() {
        let t0 = Instant::now();
        let mut jails = JailNames::default();
        assert_eq!(jails.cached("sshd", t0), None, "nothing listed yet");
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(jails.listed(names(&["sshd"]), t1, "sshd"), Verdict::Known);
        assert_eq!(jails.cached("sshd", t1), Some(Verdict::Known));
        // Arrived before the listing started: the listing speaks for it.
        assert_eq!(jails.cached("nginx", t0), Some(Verdict::Unknown));
        // Arrived after: the jail may have started since, so list again.
        assert_eq!(jails.cached("nginx", t1 + Duration::from_millis(1)), None);
    }

    #[test]
    fn removed_jails_are_remembered_then_forgotten_and_failures_back_off() {
        let t0 = Instant::now();
        let mut jails = JailNames::default();
        jails.listed(names(&["sshd", "old"]), t0, "sshd");
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(jails.listed(names(&["sshd"]), t1, "old"), Verdict::Known);
        let t2 = t0 + REMEMBER + Duration::from_secs(1);
        assert_eq!(jails.listed(names(&["sshd"]), t2, "old"), Verdict::Unknown);
        let t3 = t2 + Duration::from_millis(1);
        assert_eq!(jails.unreachable(t3), Verdict::Unverified);
        assert_eq!(
            jails.cached("other", t3 + RETRY_UNREACHABLE / 2),
            Some(Verdict::Unverified)
        );
        assert_eq!(jails.cached("other", t3 + RETRY_UNREACHABLE), None);
    }
}
