//! The server a request is about, named by its id or its name the same way everywhere: the
//! `X-BanDaemon-Server` header of a control request (the default server, the oldest, when it is
//! absent), the `{id}` of `/api/servers/{id}…` and the `serverId=` filters.

use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::auth::AuditHandle;
use crate::domain::{ServerId, ServerName};
use crate::fleet::FleetError;

/// The header the UI sends to pick a server.
pub const SERVER_HEADER: &str = "x-bandaemon-server";

/// The server a request is about; it exists (it may be offline).
#[derive(Debug, Clone, Copy)]
pub struct Target(pub ServerId);

/// The server a caller names by its id or its name: in a path (`/api/servers/{id}`), the
/// `X-BanDaemon-Server` header or a body. An unknown one is a 404 `unknown_server` that names the
/// value sent.
pub async fn server(state: &AppState, raw: &str) -> Result<ServerId, ApiError> {
    let store = &state.store;
    let server = if let Ok(id) = ServerId::parse(raw) {
        store.get_server(id).await?
    } else if let Ok(name) = ServerName::parse(raw) {
        store.server_by_name(&name).await?
    } else {
        None
    };
    server
        .map(|s| s.id)
        .ok_or_else(|| ApiError::Fleet(FleetError::UnknownServer(raw.to_owned())))
}

/// A `serverId=` filter of a history (events, audit): an id is taken as it is, since the history
/// may name a server removed since; a name must be a server's now.
pub async fn filter(state: &AppState, raw: Option<&str>) -> Result<Option<ServerId>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match ServerId::parse(raw) {
        Ok(id) => Ok(Some(id)),
        Err(_) => server(state, raw).await.map(Some),
    }
}

async fn resolve(parts: &Parts, state: &AppState) -> Result<Target, ApiError> {
    let Some(value) = parts.headers.get(SERVER_HEADER) else {
        return match state.store.default_server().await? {
            Some(server) => Ok(Target(server.id)),
            None => Err(ApiError::NotFound(
                "no server is registered yet; add one with POST /api/servers".to_owned(),
            )),
        };
    };
    let raw = value.to_str().map_err(|_| {
        ApiError::invalid("X-BanDaemon-Server", "must be a server id or name in ASCII")
    })?;
    server(state, raw).await.map(Target)
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

/// The server of a `/api/servers/{id}…` route, named by its id or its name; it exists.
#[derive(Debug, Clone, Copy)]
pub struct ServerPath(pub ServerId);

impl FromRequestParts<AppState> for ServerPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::Malformed {
                status: StatusCode::BAD_REQUEST,
                detail: rejection.body_text(),
            })?;
        let id = server(state, &raw).await?;
        // The audit entry names the server by its id, whichever way the path named it.
        if let Some(audit) = parts.extensions.get::<AuditHandle>() {
            audit.server(id);
        }
        Ok(Self(id))
    }
}
