//! Direct callbacks (`POST /api/ban`, `POST /api/unban`): fail2ban's action on a host without an
//! agent reports a ban or an unban to the hub itself. One use case, in this order: the callback
//! policy of the settings (direct callbacks may be off), the server whose callback secret was sent
//! (the current one, or the previous one while a rotation's overlap lasts; never the `serverId` of
//! the body), the body read leniently but checked strictly (`events::callback`), the jail checked
//! against the server's agent when it has one, and the event stored. It lives in the fleet because
//! it needs the settings, the events and the agents' jail lists, and the fleet may use all three.

use banhub_proto::jails::Verdict;
use chrono::Utc;

use super::Fleet;
use crate::domain::events::{EventBody, EventKind};
use crate::domain::{Server, ServerId};
use crate::events::EventsError;
use crate::events::callback::{self, CallbackError};
use crate::store::StoreError;

/// A callback body the HTTP edge could not read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadBody {
    /// The body is over the size the edge accepts.
    pub too_large: bool,
    pub detail: String,
}

/// A stored direct callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCallback {
    /// The stored event's id.
    pub id: i64,
    /// The server whose secret came with the callback.
    pub server: ServerId,
}

/// Why a direct callback was not stored.
#[derive(Debug, thiserror::Error)]
pub enum DirectCallbackError {
    /// The settings turn direct callbacks off (`callbacks.directEnabled`).
    #[error("direct callbacks are turned off")]
    Off,
    /// No callback secret, or one no server has.
    #[error("missing or unknown callback secret")]
    UnknownSecret,
    #[error("{}", .0.detail)]
    Unread(UnreadBody),
    /// The body breaks the callback's rules.
    #[error(transparent)]
    Body(#[from] CallbackError),
    /// The server's agent lists its jails, and this one is not among them.
    #[error("the server's fail2ban runs no jail named {0:?}; nothing was stored")]
    UnknownJail(String),
    /// The events service could not look up the secret or store the event.
    #[error(transparent)]
    Events(#[from] EventsError),
    /// The store could not look up the previous secret.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Fleet {
    /// Records a direct callback of `kind` that came with `secret` and `body`. The secret is
    /// checked before the body, so a caller without one learns nothing about its body; the event
    /// is stored (and `Ok` returned) only once it is committed.
    #[tracing::instrument(skip_all, fields(kind = ?kind), err(level = "info"))]
    pub async fn record_direct_callback(
        &self,
        kind: EventKind,
        secret: Option<&str>,
        body: Result<&[u8], UnreadBody>,
    ) -> Result<RecordedCallback, DirectCallbackError> {
        // The policy can turn direct callbacks off altogether (agents are unaffected).
        if !self.0.settings.current().settings.callbacks.direct_enabled {
            return Err(DirectCallbackError::Off);
        }
        let secret = secret.ok_or(DirectCallbackError::UnknownSecret)?;
        let server = self
            .callback_server(secret.trim())
            .await?
            .ok_or(DirectCallbackError::UnknownSecret)?;
        let body = body.map_err(DirectCallbackError::Unread)?;
        let event = callback::parse(kind, body, Utc::now())?;
        if let EventBody::Ban(facts) | EventBody::Unban(facts) = &event.body
            && self.callback_jail(server.id, facts.jail.as_str()).await == Verdict::Unknown
        {
            return Err(DirectCallbackError::UnknownJail(
                facts.jail.as_str().to_owned(),
            ));
        }
        let stored = self.events().ingest_direct(server.id, event).await?;
        Ok(RecordedCallback {
            id: stored.id.0,
            server: server.id,
        })
    }

    /// The server whose current callback secret `secret` is, or whose previous one while a
    /// rotation's overlap lasts.
    async fn callback_server(&self, secret: &str) -> Result<Option<Server>, DirectCallbackError> {
        if let Some(server) = self.events().callback_server(secret).await? {
            return Ok(Some(server));
        }
        let previous = self.0.settings.previous_callback_server(secret).await?;
        if previous.is_none() {
            tracing::warn!("callback refused: unknown callback secret");
        }
        Ok(previous)
    }
}
