//! The target server of a control request: the `X-BanDaemon-Server` header (a server id, or its
//! name), or the default server (the oldest) when the header is absent.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::app::AppState;
use crate::auth::AuditHandle;
use crate::domain::{ServerId, ServerName};
use crate::fleet::FleetError;

/// The header the UI sends to pick a server.
pub const SERVER_HEADER: &str = "x-bandaemon-server";

/// The server a request is about; it exists (it may be offline).
#[derive(Debug, Clone, Copy)]
pub struct Target(pub ServerId);

async fn resolve(parts: &Parts, state: &AppState) -> Result<Target, ApiError> {
    {
        let store = &state.store;
        let Some(value) = parts.headers.get(SERVER_HEADER) else {
            return match store.default_server().await? {
                Some(server) => Ok(Target(server.id)),
                None => Err(ApiError::NotFound(
                    "no server is registered yet; add one with POST /api/servers".to_owned(),
                )),
            };
        };
        let raw = value.to_str().map_err(|_| {
            ApiError::invalid("X-BanDaemon-Server", "must be a server id or name in ASCII")
        })?;
        let server = if let Ok(id) = ServerId::parse(raw) {
            store.get_server(id).await?
        } else if let Ok(name) = ServerName::parse(raw) {
            store.server_by_name(&name).await?
        } else {
            None
        };
        server
            .map(|s| Target(s.id))
            .ok_or(ApiError::Fleet(FleetError::UnknownServer))
    }
}

impl FromRequestParts<AppState> for Target {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let target = resolve(parts, state).await?;
        // The audit entry of a change names the server it was about.
        if let Some(audit) = parts.extensions.get::<AuditHandle>() {
            audit.server(target.0);
        }
        Ok(target)
    }
}
