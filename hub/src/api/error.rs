//! `ApiError`, the only error type that becomes an HTTP response: every failure is an RFC 9457
//! `application/problem+json` body with a stable `code`. 5xx details are logged here, never sent.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Query, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use banhub_proto::problem::type_of;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::alerts::mail::MailError;
use crate::auth::AuthError;
use crate::domain::GuardViolation;
use crate::fleet::{AgentErrorKind, FILTER_TEST_RETRY_AFTER_SECS, FleetError};
use crate::lookups::LookupError;
pub use crate::serve::problem::{Problem, problem};
use crate::serve::problem::{ProtectedBy, problem_response};
use crate::store::StoreError;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    NotFound(String),
    /// A field that parsed but breaks a rule (422).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A body or parameter that could not be read at all.
    #[error("{detail}")]
    Malformed { status: StatusCode, detail: String },
    /// A guard rail stopped a ban or an allowlist entry (422); the detail says whether an admin's
    /// `"override": true` lifts it.
    #[error("{field}: {violation}; {}", override_hint(violation))]
    Guarded {
        field: String,
        violation: GuardViolation,
    },
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// Authentication or authorization refused the request (401, 403, 429…).
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The database is unreachable or takes no writes just now (503 with `Retry-After`): nothing
    /// was stored, and the same request sent again later may succeed.
    #[error(transparent)]
    StoreUnavailable(StoreError),
    /// The settings were saved by someone else since they were read (409, with the version now
    /// as `ETag`).
    #[error("{message}")]
    SettingsConflict { current: u64, message: String },
    /// The mail server did not take the test e-mail (502; `code` says why).
    #[error(transparent)]
    Mail(#[from] MailError),
    /// The same request came too soon after the last one (429 with `Retry-After`).
    #[error("{message}")]
    TooSoon {
        code: &'static str,
        message: String,
        retry_after_secs: u64,
    },
    /// The hub takes no direct callbacks (403).
    #[error(
        "this hub accepts no direct callbacks (settings: callbacks.directEnabled); report through \
         an agent, or have an admin turn them on"
    )]
    DirectCallbacksOff,
    /// A direct callback without a known callback secret (401).
    #[error("send the server's callback secret in the X-Callback-Secret header")]
    NoCallbackSecret,
    /// An RDAP or AbuseIPDB lookup gave no answer (429 over the hub's limit, 504 on its time
    /// bound, 502 for what the service did).
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error("{0}")]
    Internal(String),
}

/// Seconds a client is asked to wait before sending a request again that failed for want of the
/// database.
pub const STORE_RETRY_AFTER_SECS: u32 = 5;

impl ApiError {
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::Invalid {
            field: field.to_owned(),
            message: message.to_string(),
        }
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use AgentErrorKind as K;
        match self {
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", "Not found"),
            Self::Invalid { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_field",
                "Invalid field",
            ),
            Self::Malformed { status, .. } => match *status {
                StatusCode::PAYLOAD_TOO_LARGE => {
                    (*status, "payload_too_large", "Request body too large")
                }
                StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                    (*status, "unsupported_media_type", "Unsupported media type")
                }
                _ => (StatusCode::BAD_REQUEST, "bad_request", "Malformed request"),
            },
            Self::Guarded { violation, .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                match violation {
                    GuardViolation::TooWide { .. } => "guard_wide_network",
                    GuardViolation::Broadcast { .. } => "guard_broadcast",
                    GuardViolation::CoversEverything { .. } => "guard_covers_everything",
                    GuardViolation::HubAddress { .. } => "guard_hub_address",
                    GuardViolation::Protected { .. } => "guard_protected_network",
                },
                "Refused by a guard rail",
            ),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict", "Conflict"),
            Self::Fleet(e) => match e {
                FleetError::UnknownServer(_) => {
                    (StatusCode::NOT_FOUND, "unknown_server", "Unknown server")
                }
                FleetError::NotEnrolled => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "agent_not_enrolled",
                    "No agent enrolled",
                ),
                FleetError::Offline | FleetError::SessionEnded => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "agent_offline",
                    "Agent offline",
                ),
                FleetError::Timeout(_) => (
                    StatusCode::GATEWAY_TIMEOUT,
                    "agent_timeout",
                    "Agent did not answer in time",
                ),
                FleetError::Agent { kind, .. } => match kind {
                    K::Fail2banUnavailable => (
                        StatusCode::BAD_GATEWAY,
                        "fail2ban_unavailable",
                        "fail2ban unreachable on the host",
                    ),
                    K::Fail2banError => (
                        StatusCode::BAD_GATEWAY,
                        "fail2ban_error",
                        "fail2ban refused the command",
                    ),
                    K::InvalidArgument => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "agent_refused_argument",
                        "The agent refused an argument",
                    ),
                    K::Unsupported => (
                        StatusCode::NOT_IMPLEMENTED,
                        "agent_unsupported",
                        "The agent is too old for this command",
                    ),
                    K::Expired => (
                        StatusCode::GATEWAY_TIMEOUT,
                        "agent_timeout",
                        "Agent did not answer in time",
                    ),
                    K::Conflict => (
                        StatusCode::CONFLICT,
                        "config_conflict",
                        "The file changed since it was read",
                    ),
                    K::ValidationFailed => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "config_invalid",
                        "fail2ban refused the configuration",
                    ),
                    K::NotFound => (
                        StatusCode::NOT_FOUND,
                        "not_found_on_host",
                        "No such jail or filter on the host",
                    ),
                    K::PolicyRefused => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "host_policy",
                        "The host's policy refuses this change",
                    ),
                    K::Internal => (StatusCode::BAD_GATEWAY, "agent_error", "The agent failed"),
                },
                FleetError::FilterTestsBusy => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "filter_tests_busy",
                    "Too many filter tests on this server",
                ),
                FleetError::Protocol(_) => {
                    (StatusCode::BAD_GATEWAY, "agent_error", "The agent failed")
                }
                FleetError::Store(StoreError::NameTaken(_)) => {
                    (StatusCode::CONFLICT, "name_taken", "Name already in use")
                }
                FleetError::Store(e) if e.is_unavailable() => STORE_UNAVAILABLE,
                FleetError::Store(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                ),
            },
            Self::Auth(e) => e.parts(),
            Self::StoreUnavailable(_) => STORE_UNAVAILABLE,
            Self::SettingsConflict { .. } => (
                StatusCode::CONFLICT,
                "settings_conflict",
                "The settings changed since they were read",
            ),
            Self::Mail(e) => (
                StatusCode::BAD_GATEWAY,
                e.code(),
                "The test e-mail was not accepted",
            ),
            Self::TooSoon { code, .. } => (StatusCode::TOO_MANY_REQUESTS, code, "Too soon"),
            Self::DirectCallbacksOff => (
                StatusCode::FORBIDDEN,
                "direct_callbacks_disabled",
                "Direct callbacks are turned off",
            ),
            Self::NoCallbackSecret => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            Self::Lookup(e) => match e {
                LookupError::RateLimited { .. } => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "lookup_rate_limited",
                    "Too many lookups",
                ),
                LookupError::Timeout { .. } => (
                    StatusCode::GATEWAY_TIMEOUT,
                    "lookup_timeout",
                    "The lookup took too long",
                ),
                LookupError::Refused { .. } => (
                    StatusCode::BAD_GATEWAY,
                    "lookup_refused",
                    "A request of the lookup was refused",
                ),
                LookupError::Secret(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                ),
                _ => (
                    StatusCode::BAD_GATEWAY,
                    "lookup_failed",
                    "The lookup failed",
                ),
            },
            Self::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
        }
    }
}

const STORE_UNAVAILABLE: (StatusCode, &str, &str) = (
    StatusCode::SERVICE_UNAVAILABLE,
    "store_unavailable",
    "Database unavailable",
);

fn override_hint(violation: &GuardViolation) -> &'static str {
    if violation.overridable() {
        "an admin may send `\"override\": true` in the request body to go ahead anyway"
    } else {
        "no override lifts this rule"
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        Self::Fleet(FleetError::Store(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, title) = self.parts();
        // Internal failures are logged in full and described only vaguely: their details may
        // name tables, paths or secrets. Agent and fail2ban failures are the operator's business.
        let detail = if code == "internal" {
            tracing::error!(error = %self, "request failed");
            "the hub could not complete this request; the details are in its log".to_owned()
        } else if code == STORE_UNAVAILABLE.1 {
            tracing::warn!(error = %self, "request failed: the database is unavailable");
            format!(
                "the hub's database is unreachable or takes no writes just now; send the \
                 request again in {STORE_RETRY_AFTER_SECS} seconds"
            )
        } else {
            self.to_string()
        };
        let mut body = Problem {
            kind: type_of(code),
            title: title.to_owned(),
            status: status.as_u16(),
            detail,
            code: code.to_owned(),
            field: None,
            details: Vec::new(),
            current_version: None,
            protected_by: None,
        };
        let retry_after = match &self {
            Self::Auth(AuthError::RateLimited { retry_after_secs }) => Some(*retry_after_secs),
            _ if code == STORE_UNAVAILABLE.1 => Some(u64::from(STORE_RETRY_AFTER_SECS)),
            Self::Fleet(FleetError::FilterTestsBusy) => Some(FILTER_TEST_RETRY_AFTER_SECS),
            Self::TooSoon {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Self::Lookup(LookupError::RateLimited {
                retry_after_secs, ..
            }) => Some(*retry_after_secs),
            _ => None,
        };
        let etag = match &self {
            Self::SettingsConflict { current, .. } => {
                HeaderValue::from_str(&format!("\"{current}\"")).ok()
            }
            _ => None,
        };
        match self {
            Self::Invalid { field, .. } => body.field = Some(field),
            Self::Guarded { field, violation } => {
                body.field = Some(field);
                body.protected_by = violation.protected_by().map(|entry| ProtectedBy {
                    network: entry.network.to_string(),
                    kind: entry.kind.as_str().to_owned(),
                    note: entry.note,
                });
            }
            Self::SettingsConflict { .. } => body.field = Some("version".to_owned()),
            Self::Fleet(FleetError::Agent {
                details,
                current_version,
                ..
            }) => {
                body.details = details;
                body.current_version = current_version;
            }
            _ => {}
        }
        let mut response = problem_response(status, body);
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(etag) = etag {
            response.headers_mut().insert(header::ETAG, etag);
        }
        response
    }
}

/// `axum::Json` whose rejections are problem documents too.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// JSON that does not parse is a 400; JSON that parses but does not fit the body's shape (a field
/// missing, unknown or of the wrong type) is a 422, like every other field rule.
fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let detail = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            "the request body is larger than this hub accepts".to_owned()
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            "send the body as JSON with `Content-Type: application/json`".to_owned()
        }
        _ => rejection.body_text(),
    };
    match rejection {
        JsonRejection::JsonDataError(_) => shape_error(&detail),
        _ => ApiError::Malformed { status, detail },
    }
}

/// The 422 of a JSON body that does not fit its shape; `field` is the field at fault when the
/// message names one (`a.b: …`, ``missing field `a` `` or ``unknown field `a` ``), else `body`.
fn shape_error(message: &str) -> ApiError {
    let message = message
        .strip_prefix("Failed to deserialize the JSON body into the target type: ")
        .unwrap_or(message);
    let (path, reason) = match message.split_once(": ") {
        Some((path, reason))
            if !path.is_empty()
                && path != "."
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']')) =>
        {
            (Some(path), reason)
        }
        _ => (None, message),
    };
    let missing = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|prefix| reason.strip_prefix(prefix))
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    let field = match (path, missing) {
        // An unknown field is the last step of its own path already.
        (Some(path), Some(name)) if path == name || path.ends_with(&format!(".{name}")) => {
            path.to_owned()
        }
        (Some(path), Some(name)) => format!("{path}.{name}"),
        (Some(path), None) => path.to_owned(),
        (None, Some(name)) => name.to_owned(),
        (None, None) => "body".to_owned(),
    };
    ApiError::invalid(&field, reason)
}

/// A query string that does not even parse (unknown parameter, bad encoding) is a 400.
pub(super) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|rejection| ApiError::Malformed {
            status: StatusCode::BAD_REQUEST,
            detail: rejection.body_text(),
        })
}

/// An optional JSON body: empty (or only whitespace) is `T::default()`; otherwise it is read
/// like [`ApiJson`]: not JSON is a 400, the wrong shape a 422.
pub fn optional_json<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let not_json = |e: serde_json::Error| ApiError::Malformed {
        status: StatusCode::BAD_REQUEST,
        detail: format!("the body is not valid JSON: {e}"),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if !inner.is_data() {
            not_json(inner)
        } else if path == "." {
            shape_error(&inner.to_string())
        } else {
            shape_error(&format!("{path}: {inner}"))
        }
    })?;
    de.end().map_err(not_json)?;
    Ok(value)
}

impl<T: Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        mode: Option<u8>,
    }

    /// The status and field an optional body is refused with.
    fn refused(body: &str) -> (StatusCode, Option<String>) {
        let Err(error) = optional_json::<Body>(body.as_bytes()) else {
            panic!("{body} was accepted");
        };
        let status = error.parts().0;
        let field = match error {
            ApiError::Invalid { field, .. } => Some(field),
            _ => None,
        };
        (status, field)
    }

    #[test]
    fn optional_bodies_are_400_when_not_json_and_422_when_misshapen() {
        assert!(optional_json::<Body>(b"").is_ok());
        assert!(optional_json::<Body>(b" \n").is_ok());
        assert_eq!(refused("{\"name\": "), (StatusCode::BAD_REQUEST, None));
        assert_eq!(refused("not json"), (StatusCode::BAD_REQUEST, None));
        assert_eq!(
            refused("{}"),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name".to_owned()))
        );
        assert_eq!(
            refused("{\"name\": 7}"),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name".to_owned()))
        );
        assert_eq!(
            refused("{\"name\": \"a\"} x"),
            (StatusCode::BAD_REQUEST, None)
        );
        assert_eq!(
            refused("{\"name\": \"a\", \"nom\": 1}"),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("nom".to_owned()))
        );
        assert_eq!(
            refused("\"text\""),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("body".to_owned()))
        );
    }

    #[test]
    fn shape_errors_name_their_field() {
        let field = |message: &str| match shape_error(message) {
            ApiError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(
                "Failed to deserialize the JSON body into the target type: missing field `name` at line 1 column 2"
            ),
            "name"
        );
        assert_eq!(
            field(
                "Failed to deserialize the JSON body into the target type: name: invalid type: integer `7`, expected a string at line 1 column 10"
            ),
            "name"
        );
        assert_eq!(
            field(
                "Failed to deserialize the JSON body into the target type: labels: missing field `key` at line 1 column 2"
            ),
            "labels.key"
        );
        assert_eq!(field("unknown field `nom`, expected `name`"), "nom");
        assert_eq!(
            field("labels.nom: unknown field `nom`, expected `name`"),
            "labels.nom"
        );
        assert_eq!(
            field("invalid type: sequence, expected struct Body"),
            "body"
        );
    }

    /// The problem an agent's refusal of `kind` becomes: status, code and type.
    fn check(kind: AgentErrorKind, status: StatusCode, code: &str) {
        let error = ApiError::Fleet(FleetError::Agent {
            kind,
            message: "the host policy refuses actionban: …".to_owned(),
            details: Vec::new(),
            current_version: None,
        });
        let (got_status, got_code, _) = error.parts();
        assert_eq!((got_status, got_code), (status, code), "{kind:?}");
        let response = error.into_response();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }

    #[test]
    fn agent_refusals_map_to_problems() {
        check(
            AgentErrorKind::PolicyRefused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "host_policy",
        );
        check(
            AgentErrorKind::ValidationFailed,
            StatusCode::UNPROCESSABLE_ENTITY,
            "config_invalid",
        );
        check(
            AgentErrorKind::Conflict,
            StatusCode::CONFLICT,
            "config_conflict",
        );
    }
}
