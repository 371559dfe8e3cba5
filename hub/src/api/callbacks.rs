//! `POST /api/ban` and `POST /api/unban`: fail2ban's action on a host without an agent reports to
//! the hub directly. The server is the one whose callback secret comes in `X-Callback-Secret`
//! (never the `serverId` of the body); the body is read leniently but checked strictly. The use
//! case is one fleet call, `Fleet::record_direct_callback`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use crate::domain::events::EventKind;
use crate::events::EventsError;
use crate::events::callback::CallbackError;
use crate::fleet::{DirectCallbackError, UnreadBody};

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
) -> Result<ApiJson<CallbackAccepted>, ApiError> {
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
) -> Result<ApiJson<CallbackAccepted>, ApiError> {
    accept(&state, EventKind::Unban, &headers, body).await
}

async fn accept(
    state: &AppState,
    kind: EventKind,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<ApiJson<CallbackAccepted>, ApiError> {
    let secret = headers.get(SECRET_HEADER).and_then(|v| v.to_str().ok());
    let body = body.as_deref().map_err(|rejection| UnreadBody {
        too_large: rejection.status() == StatusCode::PAYLOAD_TOO_LARGE,
        detail: match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => {
                format!("the callback body is larger than {MAX_BODY_BYTES} bytes")
            }
            _ => rejection.body_text(),
        },
    });
    let recorded = state
        .fleet
        .record_direct_callback(kind, secret, body)
        .await?;
    Ok(ApiJson(CallbackAccepted {
        id: recorded.id,
        server_id: recorded.server.to_string(),
    }))
}

/// A direct callback's refusals as problem documents. A store that cannot take the event answers
/// 503 with `Retry-After` whatever its error, so the sender keeps the event and sends it again.
impl From<DirectCallbackError> for ApiError {
    fn from(e: DirectCallbackError) -> Self {
        match e {
            DirectCallbackError::Off => ApiError::DirectCallbacksOff,
            DirectCallbackError::UnknownSecret => ApiError::NoCallbackSecret,
            DirectCallbackError::Unread(unread) => ApiError::Malformed {
                status: if unread.too_large {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                },
                detail: unread.detail,
            },
            DirectCallbackError::Body(CallbackError::NotJson(detail)) => ApiError::Malformed {
                status: StatusCode::BAD_REQUEST,
                detail: format!("the body is not a JSON object: {detail}"),
            },
            DirectCallbackError::Body(CallbackError::Field { field, reason }) => {
                ApiError::invalid(field, reason)
            }
            DirectCallbackError::UnknownJail(_) => ApiError::invalid("jail", e),
            DirectCallbackError::Events(EventsError::Store(e)) | DirectCallbackError::Store(e) => {
                ApiError::StoreUnavailable(e)
            }
            DirectCallbackError::Events(other) => other.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    /// The status and problem `code` a refusal of a direct callback answers with.
    async fn answer(e: DirectCallbackError) -> (StatusCode, String, Option<String>) {
        let response = axum::response::IntoResponse::into_response(ApiError::from(e));
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
        let field = problem["field"].as_str().map(str::to_owned);
        (
            status,
            problem["code"].as_str().unwrap_or("").to_owned(),
            field,
        )
    }

    #[tokio::test]
    async fn refusals_keep_their_statuses_and_codes() {
        let check = async |e, status: StatusCode, code: &str| {
            let (got_status, got_code, _) = answer(e).await;
            assert_eq!((got_status, got_code.as_str()), (status, code));
        };
        check(
            DirectCallbackError::Off,
            StatusCode::FORBIDDEN,
            "direct_callbacks_disabled",
        )
        .await;
        check(
            DirectCallbackError::UnknownSecret,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
        let unread = |too_large| {
            DirectCallbackError::Unread(UnreadBody {
                too_large,
                detail: "x".to_owned(),
            })
        };
        check(
            unread(true),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        )
        .await;
        check(unread(false), StatusCode::BAD_REQUEST, "bad_request").await;
        check(
            DirectCallbackError::Body(CallbackError::NotJson("eof".to_owned())),
            StatusCode::BAD_REQUEST,
            "bad_request",
        )
        .await;
        // Whatever the store's error, the sender is told to send the event again.
        check(
            DirectCallbackError::Store(StoreError::Corrupt("x".to_owned())),
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
        )
        .await;
        let (status, code, field) =
            answer(DirectCallbackError::UnknownJail("web".to_owned())).await;
        assert_eq!(
            (status, code.as_str(), field.as_deref()),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_field",
                Some("jail")
            )
        );
    }
}
