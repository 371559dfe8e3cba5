//! The login and logout use cases as the HTTP edge calls them: each runs its step and writes the
//! audit entry of the attempt, so a handler only turns the result into an answer.

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};
use chrono::Utc;
use openidconnect::url::Url;

use super::{
    AuditRecord, Auth, AuthError, Callback, Credential, External, NewSession, Outcome, Principal,
};

impl Auth {
    /// Local mode: logs the administrator in with a password and records the attempt. A request in
    /// the wrong mode is no login attempt, and is not recorded.
    pub async fn login_local(
        &self,
        username: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<NewSession, AuthError> {
        let result = match self.open_local_session(username, password, client).await {
            Err(e @ AuthError::WrongMode(_)) => return Err(e),
            other => other,
        };
        if let Ok(session) = &result {
            self.note_address(&session.principal, client).await;
        }
        let (outcome, status, kind) = match &result {
            Ok(_) => (Outcome::Ok, StatusCode::OK, "session"),
            Err(e) => (Outcome::Denied, e.parts().0, "anonymous"),
        };
        self.record(login_entry(
            (username, username, kind),
            "login",
            status,
            outcome,
            client,
            serde_json::Map::new(),
        ))
        .await;
        result
    }

    /// OIDC mode: finishes the login the provider sends back (see `redeem_oidc_callback`) and
    /// records it, with the role granted or the reason it was refused. Returns the session and
    /// where to send the browser.
    pub async fn finish_oidc(
        &self,
        callback: &Callback,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Result<(NewSession, String), AuthError> {
        let result = self.redeem_oidc_callback(callback, headers).await;
        if let Ok((session, _)) = &result {
            self.note_address(&session.principal, client).await;
        }
        let entry = match &result {
            Ok((session, _)) => {
                let principal = &session.principal;
                login_entry(
                    (&principal.subject, &principal.name, "session"),
                    "login",
                    StatusCode::FOUND,
                    Outcome::Ok,
                    client,
                    serde_json::Map::from_iter([(
                        "role".to_owned(),
                        principal.role.as_str().into(),
                    )]),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "OIDC login refused");
                login_entry(
                    ("anonymous", "anonymous", "anonymous"),
                    "login",
                    e.parts().0,
                    Outcome::Denied,
                    client,
                    serde_json::Map::from_iter([("reason".to_owned(), e.to_string().into())]),
                )
            }
        };
        self.record(entry).await;
        result
    }

    /// Ends the session of `principal` (if it is a session) and records the logout. Returns the
    /// provider's end-session URL when the session came from OIDC and the provider has one.
    pub async fn logout(
        &self,
        principal: Option<&Principal>,
        external: Option<&External>,
        client: Option<IpAddr>,
    ) -> Result<Option<Url>, AuthError> {
        let provider = self.end_session(principal, external).await?;
        if let Some(
            principal @ Principal {
                credential: Credential::Session(_),
                ..
            },
        ) = principal
        {
            self.record(login_entry(
                (&principal.subject, &principal.name, "session"),
                "logout",
                StatusCode::FOUND,
                Outcome::Ok,
                client,
                serde_json::Map::new(),
            ))
            .await;
        }
        Ok(provider)
    }
}

/// An audit entry for a login or logout; `actor` is (subject, name, kind).
fn login_entry(
    (actor, name, kind): (&str, &str, &str),
    action: &str,
    status: StatusCode,
    outcome: Outcome,
    client: Option<IpAddr>,
    detail: serde_json::Map<String, serde_json::Value>,
) -> AuditRecord {
    AuditRecord {
        id: 0,
        at: Utc::now(),
        actor: actor.to_owned(),
        actor_name: name.to_owned(),
        actor_kind: kind.to_owned(),
        action: action.to_owned(),
        path: format!("/auth/{action}"),
        server_id: None,
        status: status.as_u16(),
        outcome,
        detail,
        client_addr: client.map(|ip| ip.to_string()),
    }
}
