//! `/api/servers/{id}/callback-secret`: the secret a host without an agent sends with fail2ban's
//! direct callbacks (`POST /api/ban|unban`), under the callback secret policy of the settings
//! (`callbacks`): read its state, issue or rotate it (shown once; the previous one keeps working
//! for `callbacks.rotationOverlapSecs` unless revoked at once), or revoke it. Admins only; every
//! change is audited like any other state-changing request.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, optional_json};
use super::target::ServerPath;
use crate::auth::Admin;
use crate::domain::ServerId;
use crate::fleet::FleetError;
use crate::settings::{CallbackSecretError, SecretStatus};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(
        get_callback_secret,
        rotate_callback_secret,
        revoke_callback_secret
    ))
}

/// A server's callback secret, without the secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackSecretDto {
    /// Whether the server has a secret (else its direct callbacks are refused).
    set: bool,
    /// When the current secret was set.
    set_at: Option<DateTime<Utc>>,
    /// Until when the previous secret is still accepted, while a rotation's overlap lasts.
    previous_valid_until: Option<DateTime<Utc>>,
    /// Older than `callbacks.maxAgeDays`: rotate it.
    rotation_due: bool,
    /// Whether direct callbacks are accepted at all (`callbacks.directEnabled`).
    direct_enabled: bool,
}

impl From<SecretStatus> for CallbackSecretDto {
    fn from(s: SecretStatus) -> Self {
        Self {
            set: s.set,
            set_at: s.set_at,
            previous_valid_until: s.previous_valid_until,
            rotation_due: s.rotation_due,
            direct_enabled: s.direct_enabled,
        }
    }
}

/// A new secret: shown this once; the hub keeps only its hash.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedSecretDto {
    /// Send it as `X-Callback-Secret` from the host's fail2ban action.
    secret: String,
    #[serde(flatten)]
    status: CallbackSecretDto,
}

/// What to rotate to. An empty body generates a secret and keeps the previous one for the
/// policy's overlap.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RotateBody {
    /// A secret of your choosing, at least `callbacks.minSecretLength` visible ASCII characters;
    /// absent: the hub generates one (recommended).
    #[serde(default)]
    secret: Option<String>,
    /// End the previous secret now instead of after `callbacks.rotationOverlapSecs` (it leaked).
    #[serde(default)]
    revoke_previous: bool,
}

/// A server removed while the request ran.
fn no_server(id: ServerId) -> ApiError {
    ApiError::Fleet(FleetError::UnknownServer(id.to_string()))
}

/// The state of a server's callback secret (never the secret).
#[utoipa::path(get, path = "/api/servers/{id}/callback-secret", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = CallbackSecretDto), (status = 404, body = Problem)))]
async fn get_callback_secret(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<CallbackSecretDto>, ApiError> {
    let status = state
        .settings
        .callback_secret_status(id)
        .await?
        .ok_or_else(|| no_server(id))?;
    Ok(ApiJson(status.into()))
}

/// Issues a new callback secret for the server (or its first). The previous one is still
/// accepted for `callbacks.rotationOverlapSecs` (`previousValidUntil` says until when), so the
/// host can be switched over without losing bans; `revokePrevious` ends it at once.
#[utoipa::path(post, path = "/api/servers/{id}/callback-secret", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    request_body(content = Option<RotateBody>, content_type = "application/json"),
    responses((status = 201, body = IssuedSecretDto),
              (status = 400, description = "Not a JSON object", body = Problem),
              (status = 404, body = Problem),
              (status = 422, description = "A chosen secret breaks the policy; `field` is `secret`", body = Problem)))]
async fn rotate_callback_secret(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
    body: Bytes,
) -> Result<(StatusCode, ApiJson<IssuedSecretDto>), ApiError> {
    let body: RotateBody = optional_json(&body)?;
    let issued = state
        .settings
        .rotate_callback_secret(id, body.secret, body.revoke_previous)
        .await
        .map_err(|e| match e {
            CallbackSecretError::NoServer(id) => no_server(id),
            CallbackSecretError::Invalid(reason) => ApiError::invalid("secret", reason),
            CallbackSecretError::Store(e) => e.into(),
        })?;
    Ok((
        StatusCode::CREATED,
        ApiJson(IssuedSecretDto {
            secret: issued.secret,
            status: issued.status.into(),
        }),
    ))
}

/// Revokes the server's callback secrets, current and previous: its direct callbacks are refused
/// until a new one is issued.
#[utoipa::path(delete, path = "/api/servers/{id}/callback-secret", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn revoke_callback_secret(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<StatusCode, ApiError> {
    if !state.settings.revoke_callback_secrets(id).await? {
        return Err(no_server(id));
    }
    Ok(StatusCode::NO_CONTENT)
}
