//! `POST /api/ban` and `POST /api/unban`: fail2ban's action on a host without an agent reports to
//! the hub directly. The server is the one whose callback secret comes in `X-Callback-Secret`
//! (never the `serverId` of the body); the body is read leniently but checked strictly
//! (`events::callback`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, problem};
use banhub_proto::jails::Verdict;

use crate::domain::Server;
use crate::domain::events::{EventBody, EventKind};
use crate::events::EventsError;
use crate::events::callback::{self, CallbackError};

/// The header that carries the server's callback secret.
pub const SECRET_HEADER: &str = "x-callback-secret";
/// Largest callback body, the same as the agent's relay accepts. Log lines beyond the caps are cut
/// anyway; this bounds what is read at all.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ban))
        .routes(routes!(unban))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The stored event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackAccepted {
    /// Id of the stored event (as in `/api/events/bans`).
    id: i64,
    /// The server the secret belongs to.
    server_id: String,
}

/// fail2ban banned an address on a host without an agent.
///
/// JSON body: `ip` and `jail` (required), `hostname`, `failures`, `logs` (a string or a list of
/// strings), `banTime`/`time` (Unix seconds), `banDuration`/`bantime` (seconds, -1 permanent),
/// `banCount`/`bancount`; numbers may be numeric strings. `serverId` is ignored.
#[utoipa::path(post, path = "/api/ban", tag = "callbacks",
    extensions(("x-required-role" = json!("public"))),
    params(("X-Callback-Secret" = String, Header, description = "The server's callback secret")),
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, body = CallbackAccepted),
              (status = 400, description = "Not a JSON object", body = Problem),
              (status = 401, description = "Missing or unknown callback secret", body = Problem),
              (status = 403, description = "Direct callbacks are turned off (`callbacks.directEnabled`)", body = Problem),
              (status = 413, description = "Body over 64 KiB", body = Problem),
              (status = 422, description = "A field breaks its rule; `field` names it", body = Problem),
              (status = 503, description = "The database cannot take the event just now; nothing was stored: send it again after `Retry-After`", body = Problem)))]
async fn ban(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    accept(&state, EventKind::Ban, &headers, body).await
}

/// fail2ban lifted a ban on a host without an agent. Same body as `/api/ban`.
#[utoipa::path(post, path = "/api/unban", tag = "callbacks",
    extensions(("x-required-role" = json!("public"))),
    params(("X-Callback-Secret" = String, Header, description = "The server's callback secret")),
    request_body(content = Object, content_type = "application/json"),
    responses((status = 200, body = CallbackAccepted),
              (status = 400, description = "Not a JSON object", body = Problem),
              (status = 401, description = "Missing or unknown callback secret", body = Problem),
              (status = 403, description = "Direct callbacks are turned off (`callbacks.directEnabled`)", body = Problem),
              (status = 413, description = "Body over 64 KiB", body = Problem),
              (status = 422, description = "A field breaks its rule; `field` names it", body = Problem),
              (status = 503, description = "The database cannot take the event just now; nothing was stored: send it again after `Retry-After`", body = Problem)))]
async fn unban(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    accept(&state, EventKind::Unban, &headers, body).await
}

async fn accept(
    state: &AppState,
    kind: EventKind,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // The callback secret policy can turn direct callbacks off altogether (agents are unaffected).
    if !state.settings.current().settings.callbacks.direct_enabled {
        return problem(
            StatusCode::FORBIDDEN,
            "direct_callbacks_disabled",
            "Direct callbacks are turned off",
            "this hub accepts no direct callbacks (settings: callbacks.directEnabled); report \
             through an agent, or have an admin turn them on"
                .to_owned(),
            None,
        );
    }
    // The secret is checked first: a caller without one learns nothing about its body.
    let server = match authenticate(state, headers).await {
        Ok(Some(server)) => server,
        Ok(None) => return unauthorized(),
        Err(e) => return e.into_response(),
    };
    let result = async {
        let body = body.map_err(|rejection| ApiError::Malformed {
            status: rejection.status(),
            detail: match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => {
                    format!("the callback body is larger than {MAX_BODY_BYTES} bytes")
                }
                _ => rejection.body_text(),
            },
        })?;
        let event = callback::parse(kind, &body, Utc::now()).map_err(|e| match e {
            CallbackError::NotJson(detail) => ApiError::Malformed {
                status: StatusCode::BAD_REQUEST,
                detail: format!("the body is not a JSON object: {detail}"),
            },
            CallbackError::Field { field, reason } => ApiError::invalid(field, reason),
        })?;
        if let EventBody::Ban(facts) | EventBody::Unban(facts) = &event.body
            && state
                .fleet
                .callback_jail(server.id, facts.jail.as_str())
                .await
                == Verdict::Unknown
        {
            return Err(ApiError::invalid(
                "jail",
                format!(
                    "the server's fail2ban runs no jail named {:?}; nothing was stored",
                    facts.jail.as_str()
                ),
            ));
        }
        // 200 only once the event is committed; a store that cannot take it answers 503, so the
        // sender keeps the event and sends it again.
        let stored = state
            .events
            .ingest_direct(server.id, event)
            .await
            .map_err(unstored)?;
        Ok::<_, ApiError>(ApiJson(CallbackAccepted {
            id: stored.id.0,
            server_id: server.id.to_string(),
        }))
    };
    match result.await {
        Ok(accepted) => accepted.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Option<Server>, ApiError> {
    let Some(secret) = headers.get(SECRET_HEADER).and_then(|v| v.to_str().ok()) else {
        return Ok(None);
    };
    let secret = secret.trim();
    let server = match state
        .events
        .callback_server(secret)
        .await
        .map_err(unstored)?
    {
        Some(server) => Some(server),
        // While a rotation's overlap lasts, the previous secret still counts.
        None => state
            .settings
            .previous_callback_server(secret)
            .await
            .map_err(ApiError::StoreUnavailable)?,
    };
    if server.is_none() {
        tracing::warn!("callback refused: unknown callback secret");
    }
    Ok(server)
}

/// A callback the store could not take: 503 with `Retry-After`, whatever the store's error.
fn unstored(e: EventsError) -> ApiError {
    match e {
        EventsError::Store(e) => ApiError::StoreUnavailable(e),
        other => other.into(),
    }
}

fn unauthorized() -> Response {
    problem(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "Unauthorized",
        "send the server's callback secret in the X-Callback-Secret header".to_owned(),
        None,
    )
}
