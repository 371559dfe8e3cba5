//! `AuthError`: why a request or a login was refused. `ApiError` turns it into a problem document
//! with a stable code (`unauthenticated`, `forbidden`, `cross_origin`, …).

use axum::http::StatusCode;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No valid session or token (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but the role does not allow this (403).
    #[error("{0}")]
    Forbidden(String),
    /// The route exists, but not with this method (405); `allowed` goes into the `Allow` header.
    #[error("{method} is not served at {route}; it serves {}", .allowed.join(", "))]
    MethodNotAllowed {
        method: String,
        route: String,
        allowed: Vec<String>,
    },
    /// A cookie-authenticated change from another origin, or without saying its origin (403).
    #[error("{0}")]
    CrossOrigin(String),
    /// The provider vouched for the user, but no claim value maps to a role (403).
    #[error("{0}")]
    NoRole(String),
    /// Wrong user name or password (401).
    #[error("wrong user name or password")]
    BadCredentials,
    /// Too many failed logins (429).
    #[error("too many failed logins; try again in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// The callback's `state` is missing, unknown, expired, used, or not this browser's (400).
    #[error("{0}")]
    LoginState(String),
    /// The provider refused, or its answer did not verify (nonce, signature, audience…) (401).
    #[error("{0}")]
    LoginFailed(String),
    /// The provider could not be reached or its discovery document is unusable (502).
    #[error("{0}")]
    ProviderUnavailable(String),
    /// The endpoint belongs to the other login mode (400).
    #[error("{0}")]
    WrongMode(String),
    /// A handler's capability and its route's documented role disagree: a bug, refused (500).
    #[error("{0}")]
    PolicyMismatch(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

impl AuthError {
    /// Status, stable code and title.
    pub fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::Unauthenticated(_) => (
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "Authentication required",
            ),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            Self::MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            Self::CrossOrigin(_) => (
                StatusCode::FORBIDDEN,
                "cross_origin",
                "Cross-origin request refused",
            ),
            Self::NoRole(_) => (StatusCode::FORBIDDEN, "no_role", "No role for this user"),
            Self::BadCredentials => (
                StatusCode::UNAUTHORIZED,
                "invalid_credentials",
                "Wrong user name or password",
            ),
            Self::RateLimited { .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "Too many failed logins",
            ),
            Self::LoginState(_) => (
                StatusCode::BAD_REQUEST,
                "login_state_invalid",
                "Login could not be completed",
            ),
            Self::LoginFailed(_) => (StatusCode::UNAUTHORIZED, "login_failed", "Login failed"),
            Self::ProviderUnavailable(_) => (
                StatusCode::BAD_GATEWAY,
                "oidc_unavailable",
                "The identity provider is unavailable",
            ),
            Self::WrongMode(_) => (
                StatusCode::BAD_REQUEST,
                "wrong_auth_mode",
                "Not available in this login mode",
            ),
            Self::PolicyMismatch(_) | Self::Store(_) | Self::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
        }
    }
}
