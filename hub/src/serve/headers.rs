//! The security headers of every answer: `X-Content-Type-Options: nosniff` everywhere,
//! `Cache-Control: no-store` on the API and the auth routes (errors included; the UI's assets keep
//! their own caching), and `Strict-Transport-Security` when operators reach the hub over HTTPS.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// One year: browsers remember to use HTTPS for this host that long after each answer.
const HSTS: &str = "max-age=31536000";

/// What the headers depend on, fixed at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecurityHeaders {
    /// Whether answers carry `Strict-Transport-Security`.
    pub hsts: bool,
}

impl SecurityHeaders {
    /// HSTS when the listener speaks HTTPS itself (`http.tls`) or the public URL operators use is
    /// `https://` (a TLS-terminating proxy in front). Browsers ignore the header over plain HTTP, so
    /// sending it to a client that reached the listener directly does no harm.
    pub fn new(listener_tls: bool, public_url: &str) -> Self {
        let public_https = public_url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"));
        Self {
            hsts: listener_tls || public_https,
        }
    }
}

/// Adds the headers to the answer of `request` (whose path is relative to `http.base_path`).
pub async fn add(State(headers): State<SecurityHeaders>, request: Request, next: Next) -> Response {
    let private = is_private(request.uri().path());
    let mut response = next.run(request).await;
    let map = response.headers_mut();
    map.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if private {
        map.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if headers.hsts {
        map.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    response
}

/// The API and the auth routes answer per user and per moment: never stored by a cache.
fn is_private(path: &str) -> bool {
    ["/api", "/auth"].iter().any(|prefix| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_and_auth_paths_are_private() {
        let check = |path: &str, private: bool| assert_eq!(is_private(path), private, "{path}");
        check("/api", true);
        check("/api/servers", true);
        check("/auth/logout", true);
        check("/assets/index-1a2b.js", false);
        check("/apical", false);
        check("/", false);
    }

    #[test]
    fn hsts_follows_the_listener_or_the_public_url() {
        let check = |tls: bool, url: &str, hsts: bool| {
            assert_eq!(SecurityHeaders::new(tls, url).hsts, hsts, "{tls} {url}");
        };
        check(true, "", true);
        check(false, "https://hub.example.com/banhub", true);
        check(false, "HTTPS://hub.example.com", true);
        check(false, "http://hub.example.com", false);
        check(false, "", false);
    }
}
