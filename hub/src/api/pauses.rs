//! `/api/sharing/pauses`: the source servers whose sharing the storm breaker paused, and resuming
//! one. While paused, a server's events are stored as always, but none of its bans is shared.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::recidive::defence_error;
use super::target::ServerPath;
use crate::auth::{Admin, Viewer};
use crate::domain::breaker::SourcePause;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_pauses))
        .routes(routes!(resume))
}

/// A source server whose sharing was paused.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseDto {
    /// The server's id.
    server: String,
    paused_at: DateTime<Utc>,
    /// Shared bans its last minute would have held when the breaker tripped.
    shared_bans: u64,
    reason: String,
    /// Set once resumed.
    resumed_at: Option<DateTime<Utc>>,
    resumed_by: Option<String>,
}

impl From<SourcePause> for PauseDto {
    fn from(p: SourcePause) -> Self {
        Self {
            server: p.server.to_string(),
            paused_at: p.paused_at,
            shared_bans: p.shared_bans,
            reason: p.reason,
            resumed_at: p.resumed_at,
            resumed_by: p.resumed_by,
        }
    }
}

/// The source servers paused now, oldest pause first.
#[utoipa::path(get, path = "/api/sharing/pauses", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<PauseDto>)))]
async fn list_pauses(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<PauseDto>>, ApiError> {
    let pauses = state.defence.pauses().await.map_err(defence_error)?;
    Ok(ApiJson(pauses.into_iter().map(Into::into).collect()))
}

/// Lets a paused source server share again, from an empty window.
#[utoipa::path(post, path = "/api/sharing/pauses/{server}/resume", tag = "sharing",
    extensions(("x-required-role" = json!("admin"))),
    params(("server" = String, Path, description = "Server id or name")),
    responses((status = 200, description = "The ended pause", body = PauseDto),
              (status = 404, description = "No such server, or its sharing is not paused", body = Problem)))]
async fn resume(
    caller: Admin,
    State(state): State<AppState>,
    ServerPath(server): ServerPath,
) -> Result<ApiJson<PauseDto>, ApiError> {
    let pause = state
        .defence
        .resume(server, &caller.requested_by())
        .await
        .map_err(defence_error)?;
    Ok(ApiJson(pause.into()))
}
