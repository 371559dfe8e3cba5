//! Which jails fail2ban runs, so that the relay refuses a callback naming a jail that does not exist
//! (a mistyped manual `curl`, a copied action file on the wrong host) instead of storing it forever.
//!
//! The list is cached and refreshed from fail2ban's `status` only when a callback names a jail the
//! cache does not know, so the common case costs one hash lookup. Two rules keep real events from
//! being refused:
//! - A jail stays known for [`REMEMBER`] after fail2ban last listed it: when a reload removes a jail,
//!   fail2ban flushes its bans and the unban callbacks arrive after the jail left `status`.
//! - When fail2ban cannot be asked (stopped, restarting, socket gone), the callback is accepted: a
//!   stopping fail2ban is exactly when its flush callbacks arrive, and losing them would be worse
//!   than storing a misnamed jail. Attempts are then spaced by [`RETRY_UNREACHABLE`] so a burst does
//!   not hammer a dead socket.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::fail2ban::{Fail2banError, Fail2banSocket};

/// How long a jail fail2ban no longer lists is still accepted.
pub const REMEMBER: Duration = Duration::from_secs(600);
/// How long after a failed attempt to reach fail2ban the next one is made.
pub const RETRY_UNREACHABLE: Duration = Duration::from_secs(1);

/// Asks fail2ban for the names of its running jails.
pub type ListJails =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<String>, Fail2banError>> + Send + Sync>;

/// What the catalog says about a jail named in a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// fail2ban runs it, or did within [`REMEMBER`].
    Known,
    /// fail2ban answered and does not run it.
    Unknown,
    /// fail2ban could not be asked; the callback is let through.
    Unverified,
}

/// The cached jail list of the local fail2ban.
#[derive(Clone)]
pub struct JailCatalog {
    list: ListJails,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for JailCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JailCatalog").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Jail name → when fail2ban last listed it.
    seen: HashMap<String, Instant>,
    /// When fail2ban last answered `status`.
    refreshed_at: Option<Instant>,
    /// When the last attempt to reach fail2ban failed.
    unreachable_at: Option<Instant>,
}

impl JailCatalog {
    /// A catalog that asks `list` whenever a callback names a jail it does not know.
    pub fn new(list: ListJails) -> Self {
        Self {
            list,
            state: Arc::default(),
        }
    }

    /// A catalog asking the fail2ban server behind `socket`.
    pub fn from_socket(socket: PathBuf, timeout: Duration) -> Self {
        Self::new(Arc::new(move || {
            let socket = socket.clone();
            Box::pin(async move {
                Fail2banSocket::connect(&socket, timeout)
                    .await?
                    .jail_names()
                    .await
            })
        }))
    }

    /// Whether a callback for `jail` may be stored.
    pub async fn check(&self, jail: &str) -> Verdict {
        let asked_at = Instant::now();
        // One refresh at a time: callbacks that miss together share it. The lock is held across
        // the call to fail2ban on purpose, so that a burst makes one call, not one each.
        let mut state = self.state.lock().await;
        if state.knows(jail, asked_at) {
            return Verdict::Known;
        }
        // A refresh that started after this callback arrived already reflects fail2ban's jails.
        if state.refreshed_at.is_some_and(|at| at > asked_at) {
            return Verdict::Unknown;
        }
        if state
            .unreachable_at
            .is_some_and(|at| asked_at.duration_since(at) < RETRY_UNREACHABLE)
        {
            return Verdict::Unverified;
        }
        let started = Instant::now();
        match (self.list)().await {
            Ok(names) => {
                state.refreshed_at = Some(started);
                state.unreachable_at = None;
                for name in names {
                    state.seen.insert(name, started);
                }
                state
                    .seen
                    .retain(|_, at| started.duration_since(*at) < REMEMBER);
                if state.knows(jail, started) {
                    Verdict::Known
                } else {
                    Verdict::Unknown
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, jail, "cannot ask fail2ban for its jails; accepting the callback unverified");
                state.unreachable_at = Some(Instant::now());
                Verdict::Unverified
            }
        }
    }
}

impl State {
    fn knows(&self, jail: &str, now: Instant) -> bool {
        self.seen
            .get(jail)
            .is_some_and(|at| now.saturating_duration_since(*at) < REMEMBER)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A fake fail2ban whose jail list the test sets; `None` means unreachable.
    fn fake(
        jails: Arc<std::sync::Mutex<Option<Vec<&'static str>>>>,
        calls: Arc<AtomicUsize>,
    ) -> JailCatalog {
        JailCatalog::new(Arc::new(move || {
            calls.fetch_add(1, Ordering::SeqCst);
            let answer = jails.lock().expect("lock").clone();
            Box::pin(async move {
                answer
                    .map(|names| names.into_iter().map(str::to_owned).collect())
                    .ok_or_else(|| Fail2banError::Unavailable {
                        path: PathBuf::from("/nonexistent/fail2ban.sock"),
                        source: std::io::Error::from(std::io::ErrorKind::NotFound),
                    })
            })
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn known_jails_pass_unknown_ones_are_refused_after_one_refresh() {
        let jails = Arc::new(std::sync::Mutex::new(Some(vec!["sshd", "nginx"])));
        let calls = Arc::new(AtomicUsize::new(0));
        let catalog = fake(jails.clone(), calls.clone());
        assert_eq!(catalog.check("sshd").await, Verdict::Known);
        assert_eq!(catalog.check("nginx").await, Verdict::Known);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the second jail came from the cache"
        );
        assert_eq!(catalog.check("sshd-typo").await, Verdict::Unknown);
        // A jail added later is found by the refresh its first callback triggers.
        jails
            .lock()
            .expect("lock")
            .replace(vec!["sshd", "nginx", "postfix"]);
        assert_eq!(catalog.check("postfix").await, Verdict::Known);
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_jail_is_remembered_for_its_flush_then_forgotten() {
        let jails = Arc::new(std::sync::Mutex::new(Some(vec!["sshd", "old"])));
        let catalog = fake(jails.clone(), Arc::default());
        assert_eq!(catalog.check("old").await, Verdict::Known);
        jails.lock().expect("lock").replace(vec!["sshd"]);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(catalog.check("nope").await, Verdict::Unknown);
        assert_eq!(
            catalog.check("old").await,
            Verdict::Known,
            "within REMEMBER"
        );
        tokio::time::advance(REMEMBER).await;
        assert_eq!(catalog.check("nope").await, Verdict::Unknown);
        assert_eq!(
            catalog.check("old").await,
            Verdict::Unknown,
            "after REMEMBER"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_fail2ban_lets_callbacks_through_and_is_not_hammered() {
        let jails = Arc::new(std::sync::Mutex::new(None));
        let calls = Arc::new(AtomicUsize::new(0));
        let catalog = fake(jails.clone(), calls.clone());
        for _ in 0..100 {
            assert_eq!(catalog.check("sshd").await, Verdict::Unverified);
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one attempt per RETRY_UNREACHABLE"
        );
        jails.lock().expect("lock").replace(vec!["sshd"]);
        tokio::time::advance(RETRY_UNREACHABLE).await;
        assert_eq!(catalog.check("sshd").await, Verdict::Known);
        assert_eq!(catalog.check("ssh").await, Verdict::Unknown);
    }
}
