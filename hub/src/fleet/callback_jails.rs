//! Whether a direct callback (`POST /api/ban`, `/api/unban`) names a jail its server runs. The
//! server's agent, when it has one and it answers, lists the jails of fail2ban's effective
//! configuration; the bookkeeping (remembering removed jails, letting callbacks through when the
//! list cannot be had) is shared with the agent's relay in [`banhub_proto::jails`]. A server
//! without an agent cannot be asked, so its callbacks are accepted with any well-formed jail name.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use banhub_proto::jails::{JailNames, Verdict};

use super::{Fleet, FleetError};
use crate::domain::ServerId;

/// How long a callback waits for the agent's jail list before it is let through unverified; the
/// action calling the hub has its own timeout, and a slow agent must not make it fail.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// Who the jail listing is attributed to in the agent's log.
const ASKED_BY: &str = "banhub (callback jail check)";

/// Per server, the jails last listed by its agent.
#[derive(Debug, Default)]
pub(super) struct CallbackJails {
    servers: std::sync::Mutex<HashMap<ServerId, Arc<tokio::sync::Mutex<JailNames>>>>,
}

impl CallbackJails {
    fn of(&self, server: ServerId) -> Arc<tokio::sync::Mutex<JailNames>> {
        let mut servers = self
            .servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(servers.entry(server).or_default())
    }

    /// Drops what was remembered of a deleted server. (Another replica keeps its small entry until
    /// it restarts; a deleted server's callbacks are refused before their jail is looked at.)
    pub(super) fn forget(&self, server: ServerId) {
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&server);
    }
}

impl Fleet {
    /// Whether a direct callback from `server` naming `jail` may be stored.
    pub async fn callback_jail(&self, server: ServerId, jail: &str) -> Verdict {
        let asked_at = Instant::now();
        let names = self.0.callback_jails.of(server);
        // One listing per server at a time: callbacks that miss together share it.
        let mut names = names.lock().await;
        if let Some(verdict) = names.cached(jail, asked_at) {
            return verdict;
        }
        let started = Instant::now();
        match tokio::time::timeout(LIST_TIMEOUT, self.jails(server, ASKED_BY)).await {
            Ok(Ok(list)) => names.listed(list.jails.into_iter().map(|j| j.name), started, jail),
            Ok(Err(FleetError::NotEnrolled)) => Verdict::Unverified,
            Ok(Err(e)) => {
                tracing::debug!(%server, error = %e, "cannot list the server's jails; accepting the callback unverified");
                names.unreachable(Instant::now())
            }
            Err(_) => {
                tracing::debug!(%server, "the agent did not list its jails in time; accepting the callback unverified");
                names.unreachable(Instant::now())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_server_is_forgotten() {
        let jails = CallbackJails::default();
        let (kept, deleted) = (ServerId::new(), ServerId::new());
        let _ = jails.of(kept);
        let _ = jails.of(deleted);
        jails.forget(deleted);
        let servers = jails.servers.lock().expect("lock");
        assert!(servers.contains_key(&kept));
        assert!(!servers.contains_key(&deleted));
    }
}
