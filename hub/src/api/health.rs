//! `/healthz` (the process answers), `/readyz` (and its database takes writes), `/metrics`
//! (Prometheus).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiJson, Problem, STORE_RETRY_AFTER_SECS, problem};
use crate::auth::Viewer;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    status: &'static str,
    version: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    status: &'static str,
    database: &'static str,
    agents_online: usize,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 200, body = Health)))]
async fn healthz() -> ApiJson<Health> {
    ApiJson(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// The hub can serve: its database takes writes (a small write that commits, checked at most
/// every 1.5 seconds and answered within 3).
#[utoipa::path(get, path = "/readyz", tag = "health",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 200, body = Readiness),
              (status = 503, description = "The database does not take writes; `Retry-After` says when to ask again", body = Problem)))]
async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.writable().await {
        Ok(()) => ApiJson(Readiness {
            status: "ready",
            database: state.store.backend_name(),
            agents_online: state.fleet.online_count(),
        })
        .into_response(),
        Err(e) => {
            tracing::debug!(error = %e, "readiness check: the database does not take writes");
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "Database unavailable",
                "the hub's database does not take writes; the reason is in the hub's log"
                    .to_owned(),
                None,
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(STORE_RETRY_AFTER_SECS),
            );
            response
        }
    }
}

/// Metrics in the Prometheus/OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", tag = "health",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, content_type = "application/openmetrics-text", body = String)))]
async fn metrics(_caller: Viewer, State(state): State<AppState>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}
