//! `GET /api/alerts/deliveries` (every e-mail and webhook delivery with its status, attempts and
//! last error) and `GET /api/alerts/digests[/{id}]` (what each digest grouped). Rules themselves
//! are part of the settings.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::query;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::Viewer;
use crate::domain::alerts::{Delivery, DeliveryFilter, DeliveryStatus, Digest};

/// Largest page.
const MAX_LIMIT: u64 = 500;
const DEFAULT_LIMIT: u64 = 100;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(deliveries))
        .routes(routes!(digests))
        .routes(routes!(digest))
}

fn limit(raw: Option<u64>) -> Result<u64, ApiError> {
    match raw {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        )),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// `pending`, `sending`, `delivered` or `failed`.
    #[param(value_type = Option<DeliveryStatus>)]
    status: Option<String>,
    /// Only deliveries of this alert rule.
    rule_id: Option<String>,
    digest_id: Option<i64>,
    /// Only deliveries older than this id (the `next` of the previous page).
    before: Option<i64>,
    /// 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryPage {
    deliveries: Vec<Delivery>,
    /// Pass as `before` for the next page; absent on the last.
    next: Option<i64>,
}

/// Alert deliveries, newest first: each e-mail or webhook post of a digest with its status,
/// attempts, next retry, last error and the server's answer.
#[utoipa::path(get, path = "/api/alerts/deliveries", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))), params(DeliveryParams),
    responses((status = 200, body = DeliveryPage), (status = 422, body = Problem)))]
async fn deliveries(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<DeliveryParams>, QueryRejection>,
) -> Result<ApiJson<DeliveryPage>, ApiError> {
    let filter = query(params)?.parse()?;
    let deliveries = state.alerts.deliveries(&filter).await?;
    let next = (deliveries.len() as u64 == filter.limit)
        .then(|| deliveries.last().map(|d| d.id))
        .flatten();
    Ok(ApiJson(DeliveryPage { deliveries, next }))
}

impl DeliveryParams {
    fn parse(self) -> Result<DeliveryFilter, ApiError> {
        let status = self
            .status
            .as_deref()
            .map(|raw| {
                DeliveryStatus::parse(raw).ok_or_else(|| {
                    ApiError::invalid("status", "must be pending, sending, delivered or failed")
                })
            })
            .transpose()?;
        Ok(DeliveryFilter {
            status,
            rule_id: self.rule_id,
            digest_id: self.digest_id,
            before: self.before,
            limit: limit(self.limit)?,
        })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DigestParams {
    /// 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestList {
    digests: Vec<Digest>,
}

/// Alert digests, newest first: the matches of one rule within its window, summed up.
#[utoipa::path(get, path = "/api/alerts/digests", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))), params(DigestParams),
    responses((status = 200, body = DigestList), (status = 422, body = Problem)))]
async fn digests(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<DigestParams>, QueryRejection>,
) -> Result<ApiJson<DigestList>, ApiError> {
    let params = query(params)?;
    let digests = state.alerts.digests(limit(params.limit)?).await?;
    Ok(ApiJson(DigestList { digests }))
}

/// One alert digest.
#[utoipa::path(get, path = "/api/alerts/digests/{id}", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = i64, Path, description = "Digest id")),
    responses((status = 200, body = Digest),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem)))]
async fn digest(
    _caller: Viewer,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<ApiJson<Digest>, ApiError> {
    let Path(id) = id.map_err(|rejection| ApiError::Malformed {
        status: axum::http::StatusCode::BAD_REQUEST,
        detail: rejection.body_text(),
    })?;
    state
        .alerts
        .digest(id)
        .await?
        .map(ApiJson)
        .ok_or_else(|| ApiError::NotFound(format!("no alert digest has the id {id}")))
}
