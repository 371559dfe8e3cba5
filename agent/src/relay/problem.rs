//! RFC 9457 problem details: the relay's only error response, in the hub's vocabulary
//! ([`banhub_proto::problem`]: `type` `urn:banhub:problem:<code>`, snake_case codes).

use banhub_proto::problem::{self, code};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;

use super::payload::PayloadError;

/// fail2ban runs no jail of the callback's name.
pub(super) const UNKNOWN_JAIL: &str = "unknown_jail";
/// The event could not be made durable.
pub(super) const SPOOL_UNAVAILABLE: &str = "spool_unavailable";

/// An error answer: status, a stable machine-readable `code`, and a sentence for people.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    /// The request field at fault, for `invalid_field`.
    pub field: Option<&'static str>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            field: None,
        }
    }

    pub fn unauthorized(detail: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, detail)
    }

    pub fn too_large(max: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!("the body exceeds {max} bytes"),
        )
    }

    pub fn bad_body(detail: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code::BAD_REQUEST, detail)
    }

    pub fn unknown_jail(jail: &str) -> Self {
        Self {
            field: Some("jail"),
            ..Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                UNKNOWN_JAIL,
                format!("fail2ban on this host runs no jail named {jail:?}; nothing was stored"),
            )
        }
    }

    pub fn spool_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            SPOOL_UNAVAILABLE,
            "the agent could not store the event durably; nothing was stored",
        )
    }
}

impl From<PayloadError> for Problem {
    fn from(error: PayloadError) -> Self {
        let field = error.field();
        let code = if field.is_some() {
            code::INVALID_FIELD
        } else {
            code::BAD_REQUEST
        };
        Self {
            status: StatusCode::BAD_REQUEST,
            code,
            detail: error.to_string(),
            field,
        }
    }
}

impl Problem {
    /// The problem as the relay's answer.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let mut body = problem::Problem::new(
            self.status.as_u16(),
            self.code,
            self.status.canonical_reason().unwrap_or("Error"),
            self.detail,
        );
        body.field = self.field.map(str::to_owned);
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(Full::new(Bytes::from(json)));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(problem::MEDIA_TYPE),
        );
        response
    }
}
