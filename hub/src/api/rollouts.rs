//! Rollouts: `/api/rollouts` (start one, list them), `/api/rollouts/{id}` (one with its hosts)
//! and `/api/rollouts/{id}/stop`. A rollout applies a profile version to many servers, a canary
//! batch first, each batch watched and confirmed before the next; a failure or a stop rolls back
//! every host it changed.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target;
use crate::auth::{Admin, Viewer};
use crate::domain::profiles::ProfileName;
use crate::domain::rollouts::{
    Check, CheckName, HostState, Rollout, RolloutHost, RolloutPlan, RolloutState,
};
use crate::rollouts::{MAX_LIST, NewRollout, RolloutError};

/// Rollouts a listing returns unless `limit` says otherwise.
const DEFAULT_LIST: u64 = 50;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rollouts, start_rollout))
        .routes(routes!(get_rollout))
        .routes(routes!(stop_rollout))
}

impl From<RolloutError> for ApiError {
    fn from(e: RolloutError) -> Self {
        match e {
            RolloutError::Invalid(e) => Self::invalid(e.field, e.message),
            RolloutError::NoServers(message) => Self::invalid("servers", message),
            RolloutError::NotFound(_) => Self::NotFound(e.to_string()),
            RolloutError::Running { .. } | RolloutError::NotRunning { .. } => {
                Self::Conflict(e.to_string())
            }
            RolloutError::Profile(e) => e.into(),
            RolloutError::Change(e) => e.into(),
            RolloutError::Fleet(e) => Self::Fleet(e),
            RolloutError::Store(e) => e.into(),
        }
    }
}

fn canary() -> u32 {
    RolloutPlan::default().canary
}
fn batch_size() -> u32 {
    RolloutPlan::default().batch_size
}
fn watch_secs() -> u32 {
    RolloutPlan::default().watch_secs
}
fn confirm_secs() -> u32 {
    RolloutPlan::default().confirm_secs
}
fn max_ban_rate_factor() -> f64 {
    RolloutPlan::default().max_ban_rate_factor
}

/// Body of `POST /api/rollouts`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartBody {
    /// The profile.
    #[schema(value_type = super::schemas::Name)]
    profile: String,
    /// The version of the profile to roll out.
    #[schema(minimum = 1)]
    version: i64,
    /// The servers (ids or names), in rollout order; absent: every server the profile is
    /// assigned to by label, by name.
    #[schema(min_items = 1, value_type = Option<Vec<super::schemas::ServerRef>>)]
    servers: Option<Vec<String>>,
    /// Hosts in the first batch, the canary (default 1).
    #[serde(default = "canary")]
    #[schema(minimum = 1, default = 1)]
    canary: u32,
    /// Hosts in each later batch, 1 to 100 (default 10).
    #[serde(default = "batch_size")]
    #[schema(minimum = 1, maximum = 100, default = 10)]
    batch_size: u32,
    /// Seconds each batch is watched before its changes are confirmed, 0 to 3600 (default 60);
    /// shorter than `confirmSecs`.
    #[serde(default = "watch_secs")]
    #[schema(minimum = 0, maximum = 3600, default = 60)]
    watch_secs: u32,
    /// The agent puts the previous files back by itself unless the hub confirms within this
    /// many seconds after the reload, 10 to 3600 (default 120).
    #[serde(default = "confirm_secs")]
    #[schema(minimum = 10, maximum = 3600, default = 120)]
    confirm_secs: u32,
    /// A host fails its watch when its bans over the watch exceed this many times its baseline
    /// (the day before; at least one ban expected), at least 1 (default 3).
    #[serde(default = "max_ban_rate_factor")]
    #[schema(minimum = 1, default = 3)]
    max_ban_rate_factor: f64,
}

/// The outcome of one check of a watched host.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckDto {
    /// `jailsRunning`, `noErrors`, `connected` or `banRate`.
    name: CheckName,
    ok: bool,
    /// What was seen.
    detail: String,
}

impl From<Check> for CheckDto {
    fn from(c: Check) -> Self {
        Self {
            name: c.name,
            ok: c.ok,
            detail: c.detail,
        }
    }
}

/// One host of a rollout.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHostDto {
    server_id: String,
    server_name: String,
    /// 0 is the canary batch.
    batch: u32,
    state: HostState,
    /// The checks at the end of its watch; empty before.
    checks: Vec<CheckDto>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The host's config change (`/api/servers/{id}/config-changes/{change}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    change_id: Option<String>,
    updated_at: DateTime<Utc>,
}

impl From<RolloutHost> for RolloutHostDto {
    fn from(h: RolloutHost) -> Self {
        Self {
            server_id: h.server.to_string(),
            server_name: h.server_name,
            batch: h.batch,
            state: h.state,
            checks: h.checks.into_iter().map(Into::into).collect(),
            error: h.error,
            change_id: h.change_id,
            updated_at: h.updated_at,
        }
    }
}

/// A rollout without its hosts.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSummaryDto {
    id: String,
    profile: String,
    version: i64,
    /// `running`; `succeeded` (every host confirmed); `stopped` (by an operator, changed hosts
    /// rolled back); `rolledBack` (a check or an apply failed, changed hosts rolled back);
    /// `failed` (a host could not be rolled back).
    state: RolloutState,
    canary: u32,
    batch_size: u32,
    watch_secs: u32,
    confirm_secs: u32,
    max_ban_rate_factor: f64,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<DateTime<Utc>>,
    /// Why it stopped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl From<&Rollout> for RolloutSummaryDto {
    fn from(r: &Rollout) -> Self {
        Self {
            id: r.id.clone(),
            profile: r.profile.to_string(),
            version: r.version,
            state: r.state,
            canary: r.plan.canary,
            batch_size: r.plan.batch_size,
            watch_secs: r.plan.watch_secs,
            confirm_secs: r.plan.confirm_secs,
            max_ban_rate_factor: r.plan.max_ban_rate_factor,
            created_by: r.created_by.clone(),
            created_at: r.created_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
            reason: r.reason.clone(),
        }
    }
}

/// A rollout with its hosts in rollout order.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutDto {
    #[serde(flatten)]
    summary: RolloutSummaryDto,
    hosts: Vec<RolloutHostDto>,
}

impl From<Rollout> for RolloutDto {
    fn from(r: Rollout) -> Self {
        Self {
            summary: RolloutSummaryDto::from(&r),
            hosts: r.hosts.into_iter().map(Into::into).collect(),
        }
    }
}

/// The rollouts, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutListDto {
    items: Vec<RolloutSummaryDto>,
}

/// Paging of `GET /api/rollouts`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Rollouts to return, 1 to 500 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    limit: Option<String>,
}

/// Starts a rollout of a profile version: the canary batch first, each batch applied with
/// commit-confirm, watched for `watchSecs` (the version's jails running, no fail2ban errors, the
/// agent connected, the ban rate near its baseline) and confirmed, then the next. A failure stops
/// it and rolls back every host it changed.
#[utoipa::path(post, path = "/api/rollouts", tag = "profiles",
    request_body = StartBody,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 202, description = "Started; follow it at `/api/rollouts/{id}`", body = RolloutDto),
              (status = 404, description = "Unknown profile, version or server", body = Problem),
              (status = 409, description = "Another rollout of the profile is running", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn start_rollout(
    caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<StartBody>,
) -> Result<(StatusCode, ApiJson<RolloutDto>), ApiError> {
    let profile = ProfileName::parse(&body.profile)
        .map_err(|_| ApiError::NotFound(format!("no profile is named {:?}", body.profile)))?;
    let servers = match body.servers {
        Some(raw) => {
            let mut ids = Vec::with_capacity(raw.len());
            for one in &raw {
                ids.push(target::server(&state, one).await?);
            }
            Some(ids)
        }
        None => None,
    };
    let new = NewRollout {
        profile,
        version: body.version,
        servers,
        plan: RolloutPlan {
            canary: body.canary,
            batch_size: body.batch_size,
            watch_secs: body.watch_secs,
            confirm_secs: body.confirm_secs,
            max_ban_rate_factor: body.max_ban_rate_factor,
        },
        by: caller.requested_by(),
    };
    let rollout = state.rollouts.start(new).await?;
    Ok((StatusCode::ACCEPTED, ApiJson(rollout.into())))
}

/// The rollouts without their hosts, newest first.
#[utoipa::path(get, path = "/api/rollouts", tag = "profiles", params(ListParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = RolloutListDto),
              (status = 400, description = "Unknown parameter", body = Problem),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn list_rollouts(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<ApiJson<RolloutListDto>, ApiError> {
    let params = super::error::query(params)?;
    let limit = match params.limit.as_deref() {
        None => DEFAULT_LIST,
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=MAX_LIST).contains(n))
            .ok_or_else(|| ApiError::invalid("limit", format!("must be 1 to {MAX_LIST}")))?,
    };
    let items = state.rollouts.list(limit).await?;
    Ok(ApiJson(RolloutListDto {
        items: items.iter().map(Into::into).collect(),
    }))
}

/// One rollout with each host's batch, state, checks and config change.
#[utoipa::path(get, path = "/api/rollouts/{id}", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "The rollout's id")),
    responses((status = 200, body = RolloutDto), (status = 404, body = Problem)))]
async fn get_rollout(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<RolloutDto>, ApiError> {
    Ok(ApiJson(state.rollouts.get(&id).await?.into()))
}

/// Stops a running rollout and rolls back every host it changed; answers once the rollback is
/// done (or after a minute, still `running`, when it takes longer).
#[utoipa::path(post, path = "/api/rollouts/{id}/stop", tag = "profiles",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "The rollout's id")),
    responses((status = 200, body = RolloutDto),
              (status = 404, body = Problem),
              (status = 409, description = "The rollout is not running", body = Problem)))]
async fn stop_rollout(
    caller: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<RolloutDto>, ApiError> {
    let stopped = state.rollouts.stop(&id, &caller.requested_by()).await?;
    Ok(ApiJson(stopped.into()))
}
