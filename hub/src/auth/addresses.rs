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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, SessionKind, SessionRecord, Site};
    use crate::store::Store;

    async fn auth(dir: &std::path::Path) -> Auth {
        let url = format!("sqlite://{}?mode=rwc", dir.join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        Auth::new(
            &crate::config::AuthConfig::default(),
            dir,
            Site::default(),
            store,
        )
        .await
        .expect("auth")
    }

    fn session(id: &str, expires_in: TimeDelta) -> SessionRecord {
        let now = Utc::now();
        SessionRecord {
            id: id.to_owned(),
            secret_hash: String::new(),
            kind: SessionKind::Local,
            subject: "alice".to_owned(),
            name: "alice".to_owned(),
            email: None,
            role: Role::Operator,
            id_token: None,
            created_at: now,
            last_seen_at: now,
            expires_at: now + expires_in,
            revoked_at: None,
        }
    }

    fn principal(credential: Credential) -> Principal {
        Principal {
            subject: "alice".to_owned(),
            name: "alice".to_owned(),
            email: None,
            role: Role::Operator,
            credential,
        }
    }

    fn ips(addresses: &[OperatorAddress]) -> Vec<String> {
        let mut ips: Vec<String> = addresses.iter().map(|a| a.ip.to_string()).collect();
        ips.sort();
        ips
    }

    #[tokio::test]
    async fn an_address_is_live_while_its_session_or_recent_token_is() {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let auth = auth(dir.path()).await;
        let store = &auth.inner.store;
        let ip = |raw: &str| Some(raw.parse::<IpAddr>().expect("ip"));
        store
            .insert_session(&session("live", TimeDelta::hours(1)))
            .await
            .expect("session");
        store
            .insert_session(&session("ended", TimeDelta::hours(1)))
            .await
            .expect("session");
        let (token, _) = auth
            .create_token("ci", Role::Operator, None, "admin")
            .await
            .expect("token");
        auth.note_address(
            &principal(Credential::Session("live".into())),
            ip("198.51.100.1"),
        )
        .await;
        auth.note_address(
            &principal(Credential::Session("ended".into())),
            ip("198.51.100.2"),
        )
        .await;
        auth.note_address(
            &principal(Credential::Token(token.id.clone())),
            ip("198.51.100.3"),
        )
        .await;
        auth.note_address(&principal(Credential::Bootstrap), ip("198.51.100.4"))
            .await;
        auth.revoke_session("ended").await.expect("logout");

        let window = TimeDelta::hours(24);
        let live = auth.operator_addresses(window).await.expect("addresses");
        assert_eq!(ips(&live), ["198.51.100.1", "198.51.100.3"]);
        let sessions_only = auth
            .operator_addresses(TimeDelta::zero())
            .await
            .expect("addresses");
        assert_eq!(
            ips(&sessions_only),
            ["198.51.100.1"],
            "a zero window protects no token"
        );

        auth.revoke_token(&token.id).await.expect("revoke");
        auth.revoke_session("live").await.expect("logout");
        let none = auth.operator_addresses(window).await.expect("addresses");
        assert!(none.is_empty(), "{none:?}");
    }
}
