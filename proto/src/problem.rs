//! The problem+json vocabulary (RFC 9457) both programs answer errors in: the media type, the
//! `type` URN of a code, the codes they share and the body's common members. The hub's `ApiError`
//! and the agent's callback relay build their answers from it, so a client reads one vocabulary.

use serde::{Deserialize, Serialize};

/// The media type of every error answer.
pub const MEDIA_TYPE: &str = "application/problem+json";

/// A problem's `type` is this prefix followed by its code.
pub const TYPE_PREFIX: &str = "urn:banhub:problem:";

/// Codes with the same meaning wherever they are answered.
pub mod code {
    /// 400: the body could not be read at all (not JSON, not an object).
    pub const BAD_REQUEST: &str = "bad_request";
    /// A field that fails its rule; the problem's `field` names it.
    pub const INVALID_FIELD: &str = "invalid_field";
    /// 401: no credential, or one that is not known.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 404: nothing is served at that path.
    pub const NOT_FOUND: &str = "not_found";
    /// 405: the path is served, not with that method; `Allow` lists the ones it is.
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// 413: the body is larger than the endpoint takes.
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
}

/// The `type` URN of `code`.
pub fn type_of(code: &str) -> String {
    format!("{TYPE_PREFIX}{code}")
}

/// Whether `code` is written as codes are: snake_case ASCII, starting with a letter.
pub fn is_code(code: &str) -> bool {
    code.starts_with(|c: char| c.is_ascii_lowercase())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The members every problem carries; an answer may add members of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// [`TYPE_PREFIX`] and the code.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong this time, in words an operator can act on.
    pub detail: String,
    /// Stable machine-readable code, snake_case.
    pub code: String,
    /// The request field at fault, for validation errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl Problem {
    /// A problem of `code`, its `type` derived from the code.
    pub fn new(status: u16, code: &str, title: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: type_of(code),
            title: title.to_owned(),
            status,
            detail: detail.into(),
            code: code.to_owned(),
            field: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_codes_are_snake_case() {
        for code in [
            code::BAD_REQUEST,
            code::INVALID_FIELD,
            code::UNAUTHORIZED,
            code::NOT_FOUND,
            code::METHOD_NOT_ALLOWED,
            code::PAYLOAD_TOO_LARGE,
        ] {
            assert!(is_code(code), "{code}");
        }
        for bad in ["", "Not_found", "not-found", "1st", "not found"] {
            assert!(!is_code(bad), "{bad:?}");
        }
    }

    #[test]
    fn body_carries_the_type_of_its_code() {
        let mut problem = Problem::new(
            400,
            code::INVALID_FIELD,
            "Bad Request",
            "ip: not an address",
        );
        problem.field = Some("ip".to_owned());
        let json = serde_json::to_value(&problem).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "type": "urn:banhub:problem:invalid_field",
                "title": "Bad Request",
                "status": 400,
                "detail": "ip: not an address",
                "code": "invalid_field",
                "field": "ip",
            })
        );
        let back: Problem = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, problem);
    }
}
