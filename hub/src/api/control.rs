//! Service control: reload or restart fail2ban on the target server, and fleet-wide unban.

use axum::extract::State;
use banhub_proto::rules::IpOrCidr;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, optional_json};
use super::target::Target;
use crate::auth::{Admin, Operator};
use crate::fleet::{RestartKind, RestartResult, ServerActionResult};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(restart))
        .routes(routes!(unban_everywhere))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartBody {
    /// `reload` (the default) re-reads the configuration; `restart` also restarts every jail.
    mode: Option<RestartKind>,
}

/// Reloads fail2ban's configuration or restarts its jails; reports the jails that failed to start.
#[utoipa::path(post, path = "/api/bandaemon/restart", tag = "control",
    request_body(content = Option<RestartBody>, content_type = "application/json",
                 description = "Optional: an empty body reloads"),
    extensions(("x-required-role" = json!("admin"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = RestartResult),
              (status = 400, description = "The body is not JSON", body = Problem),
              (status = 404, description = "No such server", body = Problem),
              (status = 422, description = "The body does not fit its shape", body = Problem),
              (status = 503, body = Problem)))]
async fn restart(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    body: axum::body::Bytes,
) -> Result<ApiJson<RestartResult>, ApiError> {
    // The body is optional: an empty POST reloads.
    let body: RestartBody = optional_json(&body)?;
    let mode = body.mode.unwrap_or(RestartKind::Reload);
    Ok(ApiJson(
        state
            .fleet
            .restart(server, mode, &caller.requested_by())
            .await?,
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnbanEverywhereBody {
    #[schema(value_type = super::schemas::Address)]
    ip: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnbanEverywhereResult {
    ip: String,
    servers: Vec<ServerActionResult>,
}

/// Lifts the ban of one address in every jail of every server; one result per server.
#[utoipa::path(post, path = "/api/bans/unban-everywhere", tag = "control", request_body = UnbanEverywhereBody,
    extensions(("x-required-role" = json!("operator"))),
    responses((status = 200, body = UnbanEverywhereResult), (status = 422, body = Problem)))]
async fn unban_everywhere(
    caller: Operator,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<UnbanEverywhereBody>,
) -> Result<ApiJson<UnbanEverywhereResult>, ApiError> {
    let ip = IpOrCidr::parse(&body.ip).map_err(|e| ApiError::invalid("ip", e))?;
    // Shared bans of the address are lifted too, or their hosts' agents would hold them still.
    super::sharing::lift_everywhere(&state, ip).await?;
    let servers = state
        .timed_bans
        .unban_everywhere(ip, &caller.requested_by())
        .await?;
    Ok(ApiJson(UnbanEverywhereResult {
        ip: ip.to_string(),
        servers,
    }))
}
