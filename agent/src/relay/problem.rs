//! RFC 9457 problem details: the relay's only error response.

use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;
use serde::Serialize;

use super::payload::PayloadError;

/// An error answer: status, a stable machine-readable `code`, and a sentence for people.
#[derive(Debug, Clone)]
pub(super) struct Problem {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    /// The request field at fault, for `invalid-field`.
    pub field: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: &'a str,
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'static str>,
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
        Self::new(StatusCode::UNAUTHORIZED, "bad-callback-secret", detail)
    }

    pub fn too_large(max: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("the body exceeds {max} bytes"),
        )
    }

    pub fn bad_body(detail: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid-json", detail)
    }

    pub fn unknown_jail(jail: &str) -> Self {
        Self {
            field: Some("jail"),
            ..Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown-jail",
                format!("fail2ban on this host runs no jail named {jail:?}; nothing was stored"),
            )
        }
    }

    pub fn spool_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "spool-unavailable",
            "the agent could not store the event durably; nothing was stored",
        )
    }
}

impl From<PayloadError> for Problem {
    fn from(error: PayloadError) -> Self {
        let field = error.field();
        let code = if field.is_some() {
            "invalid-field"
        } else {
            "invalid-json"
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
        let body = Body {
            // `about:blank`: the status says it all, so the title is the status phrase (RFC 9457 4.2.1).
            kind: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
            field: self.field,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(Full::new(Bytes::from(json)));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}
