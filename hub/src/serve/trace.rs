//! The span of every HTTP request: method, the matched route (its template, so spans group by route
//! rather than by id), the path, and the client's `X-Request-Id` when it sent one. Everything a
//! handler logs, and every task it spawns with `in_current_span`, carries it.

use axum::extract::{MatchedPath, Request};
use tracing::Span;

/// The header a client or a proxy may name a request by.
const REQUEST_ID: &str = "x-request-id";
/// At most this many characters of a request id are kept.
const MAX_REQUEST_ID: usize = 64;

/// `tower_http::trace::TraceLayer`'s `make_span_with`.
pub fn request_span(request: &Request) -> Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(|id| id.chars().take(MAX_REQUEST_ID).collect::<String>());
    tracing::info_span!(
        "request",
        method = %request.method(),
        route = route.unwrap_or("-"),
        path = %request.uri().path(),
        request_id = request_id.as_deref().unwrap_or("-"),
    )
}
