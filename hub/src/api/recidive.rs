//! `/api/sharing/recidive`: the fleet recidive rules (list, create, get, replace, delete). A rule
//! bans an address on its target servers once it was banned on enough servers (or for enough
//! failures summed across servers) within its window, longer for repeat offenders.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::{Admin, Viewer};
use crate::defence::DefenceError;
use crate::domain::recidive::{RecidiveSpec, StoredRule};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rules, create_rule))
        .routes(routes!(get_rule, update_rule, delete_rule))
}

/// A recidive rule with its id.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecidiveRuleDto {
    id: i64,
    #[serde(flatten)]
    spec: RecidiveSpec,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<StoredRule> for RecidiveRuleDto {
    fn from(stored: StoredRule) -> Self {
        Self {
            id: stored.id,
            spec: stored.rule.spec().clone(),
            created_at: stored.created_at,
            updated_at: stored.updated_at,
        }
    }
}

/// The answer a defence failure gets.
pub(super) fn defence_error(e: DefenceError) -> ApiError {
    match e {
        DefenceError::Invalid(e) => ApiError::invalid(e.field, e.message),
        DefenceError::NameTaken(_) => ApiError::Conflict(e.to_string()),
        DefenceError::NoRule(_) | DefenceError::NotPaused(_) => ApiError::NotFound(e.to_string()),
        DefenceError::Store(e) => e.into(),
    }
}

fn rule_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id)
        .map_err(|rejection| ApiError::Malformed {
            status: StatusCode::BAD_REQUEST,
            detail: rejection.body_text(),
        })
}

/// Every recidive rule, by name.
#[utoipa::path(get, path = "/api/sharing/recidive", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<RecidiveRuleDto>)))]
async fn list_rules(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<RecidiveRuleDto>>, ApiError> {
    let rules = state.defence.rules().await.map_err(defence_error)?;
    Ok(ApiJson(rules.into_iter().map(Into::into).collect()))
}

/// Adds a recidive rule.
#[utoipa::path(post, path = "/api/sharing/recidive", tag = "sharing", request_body = RecidiveSpec,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = RecidiveRuleDto),
              (status = 409, description = "Another rule has this name", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn create_rule(
    _caller: Admin,
    State(state): State<AppState>,
    ApiJson(spec): ApiJson<RecidiveSpec>,
) -> Result<(StatusCode, ApiJson<RecidiveRuleDto>), ApiError> {
    let stored = state
        .defence
        .create_rule(spec)
        .await
        .map_err(defence_error)?;
    Ok((StatusCode::CREATED, ApiJson(stored.into())))
}

/// One recidive rule.
#[utoipa::path(get, path = "/api/sharing/recidive/{id}", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = i64, Path, description = "Rule id")),
    responses((status = 200, body = RecidiveRuleDto),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem)))]
async fn get_rule(
    _caller: Viewer,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<ApiJson<RecidiveRuleDto>, ApiError> {
    let stored = state
        .defence
        .rule(rule_id(id)?)
        .await
        .map_err(defence_error)?;
    Ok(ApiJson(stored.into()))
}

/// Replaces a recidive rule. What it remembers of addresses it fired for stays.
#[utoipa::path(put, path = "/api/sharing/recidive/{id}", tag = "sharing", request_body = RecidiveSpec,
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = i64, Path, description = "Rule id")),
    responses((status = 200, body = RecidiveRuleDto),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem),
              (status = 409, description = "Another rule has this name", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn update_rule(
    _caller: Admin,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    ApiJson(spec): ApiJson<RecidiveSpec>,
) -> Result<ApiJson<RecidiveRuleDto>, ApiError> {
    let stored = state
        .defence
        .update_rule(rule_id(id)?, spec)
        .await
        .map_err(defence_error)?;
    Ok(ApiJson(stored.into()))
}

/// Deletes a recidive rule and what it remembers. Bans it already shared run their course.
#[utoipa::path(delete, path = "/api/sharing/recidive/{id}", tag = "sharing",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = i64, Path, description = "Rule id")),
    responses((status = 204),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem)))]
async fn delete_rule(
    _caller: Admin,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    state
        .defence
        .delete_rule(rule_id(id)?)
        .await
        .map_err(defence_error)?;
    Ok(StatusCode::NO_CONTENT)
}
