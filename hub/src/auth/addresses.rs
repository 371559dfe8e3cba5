//! The client addresses operators work from, for the lockout guard: each session's and each API
//! token's newest client address (the socket peer the hub sees), and which of them are live: a
//! session's while the session lives, a token's while it is valid and was used within a window.

use std::net::IpAddr;

use chrono::{TimeDelta, Utc};

use super::{Auth, AuthError, Credential, Principal};
use crate::domain::protected::OperatorAddress;

/// The key an address is recorded under: `session:<id>` or `token:<id>`; `None` for the bootstrap
/// token, which has no record to live with.
fn key(credential: &Credential) -> Option<String> {
    match credential {
        Credential::Session(id) => Some(format!("session:{id}")),
        Credential::Token(id) => Some(format!("token:{id}")),
        Credential::Bootstrap => None,
    }
}

impl Auth {
    /// Records the address `principal`'s credential is used from. A failure is logged, not
    /// returned: the request it came with goes on.
    pub(super) async fn note_address(&self, principal: &Principal, client: Option<IpAddr>) {
        let (Some(key), Some(ip)) = (key(&principal.credential), client) else {
            return;
        };
        if let Err(e) = self
            .inner
            .store
            .record_operator_address(&key, ip, &principal.name, Utc::now())
            .await
        {
            tracing::warn!(error = %e, credential = %key, "could not record the operator's address");
        }
    }

    /// The addresses of live operator credentials: every live session's, and every valid API
    /// token's used within `token_window` (none when it is zero).
    pub async fn operator_addresses(
        &self,
        token_window: TimeDelta,
    ) -> Result<Vec<OperatorAddress>, AuthError> {
        let now = Utc::now();
        let oldest = now - self.idle_timeout().max(token_window);
        let store = &self.inner.store;
        // Rows older than any window can no longer protect anything.
        store.prune_operator_addresses(oldest).await?;
        let recorded = store.operator_addresses(oldest).await?;
        if recorded.is_empty() {
            return Ok(recorded);
        }
        let sessions: Vec<String> = self
            .live_sessions()
            .await?
            .into_iter()
            .map(|s| format!("session:{}", s.id))
            .collect();
        let tokens: Vec<String> = if token_window > TimeDelta::zero() {
            store
                .list_api_tokens()
                .await?
                .into_iter()
                .filter(|t| t.revoked_at.is_none() && t.expires_at.is_none_or(|at| at > now))
                .map(|t| format!("token:{}", t.id))
                .collect()
        } else {
            Vec::new()
        };
        Ok(recorded
            .into_iter()
            .filter(|a| {
                sessions.contains(&a.credential)
                    || (tokens.contains(&a.credential) && now - a.seen_at < token_window)
            })
            .collect())
    }
}
