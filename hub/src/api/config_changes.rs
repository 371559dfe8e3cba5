//! `/api/servers/{id}/config-changes`: sets of fail2ban files applied to one server with
//! commit-confirm (admins apply and revert them, every change audited; viewers list them).

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target::{ServerPath, server};
use crate::auth::{Admin, AuditHandle, Viewer};
use crate::config_changes::ChangeError;
use crate::domain::ServerId;
use crate::domain::config_changes::{ChangeState, ConfigChange, SetFile};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_changes, apply_change))
        .routes(routes!(get_change))
        .routes(routes!(revert_change))
}

/// A set of files to apply.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyBody {
    /// 1 to 64 files by logical path.
    files: Vec<SetFile>,
    /// Seconds within which the hub must confirm the change after the reload, else the agent
    /// puts the previous files back by itself: 10 to 3600, or 0 for no confirmation.
    #[schema(minimum = 0, maximum = 3600)]
    confirm_within_secs: u32,
}

/// A file's version after the change.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedFile {
    path: String,
    version: String,
}

/// A config change and where it stands.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChangeDto {
    id: String,
    server_id: String,
    files: Vec<SetFile>,
    confirm_within_secs: u32,
    state: ChangeState,
    /// Why it is in this state, in a sentence.
    reason: String,
    /// When the agent puts the previous files back unless confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline: Option<DateTime<Utc>>,
    applied: Vec<AppliedFile>,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<ConfigChange> for ConfigChangeDto {
    fn from(c: ConfigChange) -> Self {
        Self {
            id: c.id,
            server_id: c.server.to_string(),
            files: c.files,
            confirm_within_secs: c.confirm_within_secs,
            state: c.state,
            reason: c.reason,
            deadline: c.deadline,
            applied: c
                .applied
                .into_iter()
                .map(|(path, version)| AppliedFile { path, version })
                .collect(),
            created_by: c.created_by,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::Invalid(e) => ApiError::invalid(&e.field, e.message),
            ChangeError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ChangeError::Open { .. } | ChangeError::NotRevertible { .. } => {
                ApiError::Conflict(e.to_string())
            }
            ChangeError::Fleet(e) => ApiError::Fleet(e),
            ChangeError::Store(e) => e.into(),
        }
    }
}

/// The server and the change of `/api/servers/{id}/config-changes/{change}`.
pub struct ChangePath(ServerId, String);

impl FromRequestParts<AppState> for ChangePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Path((raw, change)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::Malformed {
                status: StatusCode::BAD_REQUEST,
                detail: rejection.body_text(),
            })?;
        let id = server(state, &raw).await?;
        if let Some(audit) = parts.extensions.get::<AuditHandle>() {
            audit.server(id);
        }
        Ok(Self(id, change))
    }
}

/// The server's config changes, newest first (at most 200).
#[utoipa::path(get, path = "/api/servers/{id}/config-changes", tag = "servers",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = Vec<ConfigChangeDto>)))]
async fn list_changes(
    _caller: Viewer,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<Vec<ConfigChangeDto>>, ApiError> {
    let changes = state.config_changes.list(id).await?;
    Ok(ApiJson(changes.into_iter().map(Into::into).collect()))
}

/// Applies a set of files through the agent's validated editor (all or none, one reload). With
/// `confirmWithinSecs` the change is confirmed by the hub once it hears from the agent after the
/// reload; unconfirmed, the agent restores the previous files by itself at the deadline.
#[utoipa::path(post, path = "/api/servers/{id}/config-changes", tag = "servers",
    request_body = ApplyBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 201, body = ConfigChangeDto),
              (status = 409, description = "Another change of the server is still open (`conflict`), or a file changed since it was read", body = Problem)))]
async fn apply_change(
    caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
    ApiJson(body): ApiJson<ApplyBody>,
) -> Result<(StatusCode, ApiJson<ConfigChangeDto>), ApiError> {
    let change = state
        .config_changes
        .apply(
            id,
            body.files,
            body.confirm_within_secs,
            &caller.requested_by(),
        )
        .await?;
    Ok((StatusCode::CREATED, ApiJson(change.into())))
}

/// One config change of the server.
#[utoipa::path(get, path = "/api/servers/{id}/config-changes/{change}", tag = "servers",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Server id or name"),
           ("change" = String, Path, description = "The change's id")),
    responses((status = 200, body = ConfigChangeDto), (status = 404, body = Problem)))]
async fn get_change(
    _caller: Viewer,
    State(state): State<AppState>,
    ChangePath(id, change): ChangePath,
) -> Result<ApiJson<ConfigChangeDto>, ApiError> {
    Ok(ApiJson(state.config_changes.get(id, &change).await?.into()))
}

/// Has the agent put back the files the change replaced, now (a pending or a confirmed change;
/// a confirmed one only while its files are as the change left them).
#[utoipa::path(post, path = "/api/servers/{id}/config-changes/{change}/revert", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name"),
           ("change" = String, Path, description = "The change's id")),
    responses((status = 200, body = ConfigChangeDto),
              (status = 404, body = Problem),
              (status = 409, description = "The change is not applied (`conflict`), or its files changed since (`config_conflict`)", body = Problem)))]
async fn revert_change(
    caller: Admin,
    State(state): State<AppState>,
    ChangePath(id, change): ChangePath,
) -> Result<ApiJson<ConfigChangeDto>, ApiError> {
    let reverted = state
        .config_changes
        .revert(id, &change, &caller.requested_by())
        .await?;
    Ok(ApiJson(reverted.into()))
}

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse as _;

    use super::*;
    use crate::fleet::{AgentErrorKind, FleetError};

    #[test]
    fn an_agent_too_old_for_config_sets_is_a_501_like_on_every_other_agent_route() {
        let too_old = ChangeError::Fleet(FleetError::Agent {
            kind: AgentErrorKind::Unsupported,
            message: "this server's agent is too old for config sets; upgrade the agent".to_owned(),
            details: Vec::new(),
            current_version: None,
        });
        assert_eq!(
            ApiError::from(too_old).into_response().status(),
            StatusCode::NOT_IMPLEMENTED
        );
    }
}
