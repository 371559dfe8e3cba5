//! RFC 9457 problem documents (`application/problem+json`): the body of every error answer. `ApiError`
//! in `api` builds them for handlers; the serving layers below the API (the base path, the UI's
//! fallback) answer with them directly.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use banhub_proto::problem::{MEDIA_TYPE, type_of};
use serde::Serialize;
use utoipa::ToSchema;

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URI naming the kind of problem: `urn:banhub:problem:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short, human-readable summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong this time, in words an operator can act on.
    pub detail: String,
    /// Stable machine-readable code, e.g. `agent_offline`.
    pub code: String,
    /// The request field at fault, for validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// fail2ban's own messages, line by line, when it refused something.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// For a configuration conflict: the file's version now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// For a ban refused by a protected network: the entry that protects it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected_by: Option<ProtectedBy>,
}

/// The protected network a refused ban would have covered, and why it is protected.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedBy {
    /// The protected network, in CIDR form.
    pub network: String,
    /// Why it is protected: `configured`, `hub_address` or `operator_session`.
    pub kind: String,
    /// The admin's note for a configured network; who or what it is otherwise.
    pub note: String,
}

/// A problem+json response.
pub fn problem(
    status: StatusCode,
    code: &str,
    title: &str,
    detail: String,
    field: Option<String>,
) -> Response {
    let body = Problem {
        kind: type_of(code),
        title: title.to_owned(),
        status: status.as_u16(),
        detail,
        code: code.to_owned(),
        field,
        details: Vec::new(),
        current_version: None,
        protected_by: None,
    };
    problem_response(status, body)
}

pub fn problem_response(status: StatusCode, body: Problem) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    response
}
