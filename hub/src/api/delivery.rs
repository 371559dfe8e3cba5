//! `/api/servers/{id}/delivery` and `/api/servers/{id}/probe`: how a server's ban events reach
//! the hub, and an end-to-end probe of that path.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target::ServerPath;
use crate::auth::{Operator, Viewer};
use crate::fleet::{DeliveryReport, ProbeResult};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(delivery_status))
        .routes(routes!(run_probe))
}

/// Delivery diagnostics: the agent's relay (listening, last callback), its spool (depth, oldest
/// unacknowledged event), whether each running jail runs the banhub action, when the hub last
/// stored an event of this server, and the last end-to-end probe.
#[utoipa::path(get, path = "/api/servers/{id}/delivery", tag = "servers",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = DeliveryReport),
              (status = 404, description = "No such server", body = Problem),
              (status = 503, description = "Agent offline or not enrolled", body = Problem),
              (status = 504, description = "Agent did not answer in time", body = Problem)))]
async fn delivery_status(
    caller: Viewer,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<DeliveryReport>, ApiError> {
    let report = state
        .fleet
        .delivery_status(id, &caller.requested_by())
        .await?;
    Ok(ApiJson(report))
}

/// End-to-end probe: the agent bans a documentation address (192.0.2.0/24) in its probe jail
/// `banhub-probe`, and the hub waits until the ban event has come back through fail2ban's action,
/// the agent's relay and spool, the session and the store; then the same for the unban. A probe
/// that ran and failed answers 200 with `ok: false` and `failure` (`probe_jail_missing`,
/// `action_missing`, `relay_down`, `ban_timeout`, ...). Probe events stay out of event lists,
/// stats and insights unless `jail=banhub-probe` is asked for.
#[utoipa::path(post, path = "/api/servers/{id}/probe", tag = "servers",
    extensions(("x-required-role" = json!("operator"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = ProbeResult),
              (status = 404, description = "No such server", body = Problem),
              (status = 409, description = "A probe of this server is already running", body = Problem),
              (status = 503, description = "Agent offline or not enrolled", body = Problem)))]
async fn run_probe(
    caller: Operator,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<ProbeResult>, ApiError> {
    let result = state.fleet.probe(id, false, &caller.requested_by()).await?;
    Ok(ApiJson(result))
}
