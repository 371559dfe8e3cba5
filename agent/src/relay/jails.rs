//! Which jails the local fail2ban runs, so that the relay refuses a callback naming a jail that
//! does not exist (a mistyped manual `curl`, an action file copied to the wrong host) instead of
//! storing it forever. The list is asked from fail2ban's `status` only when a callback names a jail
//! the cache does not know, so the common case costs one lookup; the rules that keep real events
//! from being refused are in [`banhub_proto::jails`].
//!
//! fail2ban runs the actions of a ban made over its socket (`set <jail> banip`, as the hub's ban
//! does) inside the socket's command handler, and that handler serves one command at a time: while
//! the action waits for the relay, fail2ban cannot answer `status`. So a callback never waits
//! longer than [`ASK_DEADLINE`] for the list (after that it is let through unverified), and a
//! background task ([`JailCatalog::keep_fresh`]) lists the jails ahead of time, outside the lock,
//! so that callbacks rarely need to ask at all.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use banhub_proto::jails::{JailNames, REMEMBER, RETRY_UNREACHABLE, Verdict};
use futures::future::BoxFuture;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::fail2ban::{Fail2banError, Fail2banSocket};

/// The longest a callback waits for fail2ban's jail list; see the module documentation.
pub const ASK_DEADLINE: Duration = Duration::from_millis(250);
/// How often [`JailCatalog::keep_fresh`] lists the jails.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// Asks fail2ban for the names of its running jails.
pub type ListJails =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Vec<String>, Fail2banError>> + Send + Sync>;

/// The cached jail list of the local fail2ban.
#[derive(Clone)]
pub struct JailCatalog {
    list: ListJails,
    /// Read by every callback; written only when a listing ends (never held across an await).
    names: Arc<RwLock<JailNames>>,
    /// Held while fail2ban is asked, so callbacks that miss together share one listing.
    asking: Arc<Mutex<()>>,
}

impl std::fmt::Debug for JailCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JailCatalog").finish_non_exhaustive()
    }
}

impl JailCatalog {
    /// A catalog that asks `list` whenever a callback names a jail it does not know.
    pub fn new(list: ListJails) -> Self {
        Self {
            list,
            names: Arc::default(),
            asking: Arc::default(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, JailNames> {
        self.names.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, JailNames> {
        self.names.write().unwrap_or_else(|e| e.into_inner())
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
        let asked_at = Instant::now().into_std();
        // The common case: the cache answers, under a read lock that callbacks share.
        if let Some(verdict) = self.read().cached(jail, asked_at) {
            return verdict;
        }
        // One listing at a time: callbacks that miss together share it. The asking lock is held
        // across the call to fail2ban on purpose, so that a burst makes one call, not one each;
        // who waited for it finds the answer in the cache.
        let _asking = self.asking.lock().await;
        if let Some(verdict) = self.read().cached(jail, asked_at) {
            return verdict;
        }
        let started = Instant::now().into_std();
        match tokio::time::timeout(ASK_DEADLINE, (self.list)()).await {
            Ok(Ok(listed)) => self.write().listed(listed, started, jail),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, jail, "cannot ask fail2ban for its jails; accepting the callback unverified");
                self.write().unreachable(Instant::now().into_std())
            }
            Err(_) => {
                tracing::info!(
                    jail,
                    "fail2ban is busy (probably running this very ban's action); accepting the callback unverified"
                );
                self.write().unreachable(Instant::now().into_std())
            }
        }
    }

    /// Lists the jails now, without holding up callbacks while fail2ban answers.
    pub async fn refresh(&self) {
        let started = Instant::now().into_std();
        match (self.list)().await {
            Ok(listed) => {
                self.write().listed(listed, started, "");
            }
            Err(e) => tracing::debug!(error = %e, "cannot list fail2ban's jails"),
        }
    }

    /// Lists the jails at once and then every [`REFRESH_INTERVAL`] until `shutdown`.
    pub async fn keep_fresh(self, shutdown: tokio_util::sync::CancellationToken) {
        let mut ticks = tokio::time::interval(REFRESH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => self.refresh().await,
            }
        }
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

    #[tokio::test(start_paused = true)]
    async fn a_busy_fail2ban_delays_a_callback_by_at_most_the_deadline() {
        let catalog = JailCatalog::new(Arc::new(|| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(vec!["sshd".to_owned()])
            })
        }));
        let before = Instant::now();
        assert_eq!(catalog.check("sshd").await, Verdict::Unverified);
        assert_eq!(before.elapsed(), ASK_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_background_refresh_fills_the_cache_ahead_of_callbacks() {
        let jails = Arc::new(std::sync::Mutex::new(Some(vec!["sshd"])));
        let calls = Arc::new(AtomicUsize::new(0));
        let catalog = fake(jails, calls.clone());
        catalog.refresh().await;
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(catalog.check("sshd").await, Verdict::Known);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the callback did not ask");
    }
}
