//! The HTTP API: one `router()` per resource under `/api`, the health and metrics endpoints, and the
//! OpenAPI document generated from the handlers (`/api/openapi.json`, browsable at `/api/docs`).

mod access;
mod addresses;
mod alerts;
mod audit;
mod auth;
mod callback_secrets;
mod callbacks;
mod config_changes;
mod control;
mod delivery;
mod drift;
mod error;
mod events;
mod feeds;
mod filter_create;
mod filters;
mod fleet;
mod fleet_jails;
mod guards;
mod health;
mod jail_create;
mod jails;
mod openapi;
mod pauses;
mod previews;
mod profiles;
mod protected;
mod recidive;
mod rollouts;
mod schemas;
mod servers;
mod settings;
mod shared_origin;
mod sharing;
mod state;
pub(crate) mod target;
mod timed_bans;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::MethodRouter;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

pub use error::{ApiError, ApiJson, Problem, problem};
pub use state::AppState;

use crate::auth::policy::Policy;
use crate::metrics::HttpLabels;
use crate::serve::headers::{self, SecurityHeaders};
use crate::serve::unread_body;
use access::Authorizer;

/// The OpenAPI document of every route, with each operation's security requirement (from its
/// `x-required-role`) and every error answer it can give.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = api_routes().split_for_parts().1;
    openapi::finish(&mut doc);
    doc
}

fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(servers::router())
        .merge(config_changes::router())
        .merge(delivery::router())
        .merge(jails::router())
        .merge(filters::router())
        .merge(jail_create::router())
        .merge(filter_create::router())
        .merge(previews::router())
        .merge(control::router())
        .merge(fleet::router())
        .merge(fleet_jails::router())
        .merge(timed_bans::router())
        .merge(protected::router())
        .merge(sharing::router())
        .merge(addresses::router())
        .merge(recidive::router())
        .merge(pauses::router())
        .merge(events::router())
        .merge(callbacks::router())
        .merge(callback_secrets::router())
        .merge(settings::router())
        .merge(alerts::router())
        .merge(auth::router())
        .merge(audit::router())
        .merge(feeds::router())
        .merge(profiles::router())
        .merge(rollouts::router())
        .merge(drift::router())
        .merge(health::router())
}

/// The whole HTTP surface of the hub: the API, and `fallback` (the web UI) for every path no route
/// matched, both behind the same layers.
pub fn router(state: AppState, fallback: MethodRouter<AppState>) -> Router {
    let body_limit = state.config.http.body_limit_bytes;
    let (routes, mut doc) = api_routes().split_for_parts();
    // The roles are read from the generated document before it is decorated; a route with an
    // unknown role value is a bug that must stop the hub rather than open the route.
    let policy = match Policy::from_openapi(&doc) {
        Ok(policy) => Arc::new(policy),
        Err(e) => panic!("the API's x-required-role declarations are invalid: {e}"),
    };
    openapi::finish(&mut doc);
    let authorizer = Authorizer {
        auth: state.auth.clone(),
        policy,
    };
    // Under `http.base_path` the paths in the document are relative to that prefix, and Swagger UI in
    // the browser must fetch the document from under it too.
    let base = &state.config.http.base_path;
    doc.servers = Some(vec![utoipa::openapi::Server::new(base.to_string())]);
    let swagger = SwaggerUi::new("/api/docs")
        .url("/api/openapi.json", doc)
        .config(utoipa_swagger_ui::Config::new([
            base.join("/api/openapi.json")
        ]));
    routes
        .merge(swagger)
        // A route layer sees the matched route, whose role the policy knows.
        .route_layer(middleware::from_fn_with_state(
            authorizer,
            access::authorize,
        ))
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(
            state.auth.clone(),
            access::authenticate,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(TraceLayer::new_for_http().make_span_with(crate::serve::trace::request_span))
        .layer(middleware::from_fn(unread_body::close_if_unread))
        .layer(middleware::from_fn_with_state(
            SecurityHeaders::new(
                state.config.http.tls.paths().is_some(),
                &state.config.auth.public_url,
            ),
            headers::add,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::new(state.config.http.trusted_proxies.clone()),
            crate::serve::forwarded::rewrite,
        ))
        .with_state(state)
}

async fn count_requests(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    state
        .metrics
        .http_requests
        .get_or_create(&HttpLabels {
            method,
            status: response.status().as_u16(),
        })
        .inc();
    response
}
