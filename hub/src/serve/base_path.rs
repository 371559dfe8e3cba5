//! The router layer that mounts the hub under its `http.base_path` (`crate::config::BasePath`, e.g.
//! `/banhub` behind a reverse proxy).
//!
//! The application is written as if it were served at the root. [`mount`] nests it under the prefix
//! and then does what a reverse proxy's `proxy_redirect` / `proxy_cookie_path` would do: a `Location`
//! that is an absolute path gets the prefix, and so does a cookie's `Path`. So no handler needs to
//! know the prefix, except where it writes URLs into a body (the OpenAPI `servers` entry, the UI's
//! `<base href>`).

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use tower::ServiceExt as _;

use crate::config::BasePath;

/// Serves `app` (written for the root) under `base`: requests under the prefix reach it with the
/// prefix stripped (`<base>/` is the app's `/`), `<base>` itself redirects to `<base>/`, and
/// everything else is a 404 problem naming the prefix. At the root, `app` is returned unchanged.
///
/// This is not `Router::nest`, which serves a nested `/` at `<base>` but not at `<base>/`, the
/// address a browser needs for the UI's relative URLs.
pub fn mount(app: Router, base: &BasePath) -> Router {
    if base.is_root() {
        return app;
    }
    let app = app.layer(middleware::from_fn_with_state(
        base.clone(),
        prefix_response,
    ));
    let base = base.clone();
    Router::new().fallback(move |request: Request| {
        let app = app.clone();
        let base = base.clone();
        async move { route_under(app, &base, request).await }
    })
}

async fn route_under(app: Router, base: &BasePath, mut request: Request) -> Response {
    let Some(rest) = request.uri().path().strip_prefix(base.as_str()) else {
        return outside_base_path(base);
    };
    if rest.is_empty() {
        return Redirect::permanent(&base.home()).into_response();
    }
    if !rest.starts_with('/') {
        // `/banhubx`: another path that merely starts with the same letters.
        return outside_base_path(base);
    }
    let inner = match request.uri().query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_owned(),
    };
    let mut parts = request.uri().clone().into_parts();
    match inner.parse() {
        Ok(path_and_query) => parts.path_and_query = Some(path_and_query),
        Err(_) => return outside_base_path(base),
    }
    match Uri::from_parts(parts) {
        Ok(uri) => *request.uri_mut() = uri,
        Err(_) => return outside_base_path(base),
    }
    // The router's error type is `Infallible`.
    match app.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn outside_base_path(base: &BasePath) -> Response {
    super::problem::problem(
        StatusCode::NOT_FOUND,
        "not_found",
        "Not found",
        format!("this hub is served under {base}/; nothing is served outside it"),
        None,
    )
}

/// Adds the prefix to an absolute-path `Location` and to cookie `Path`s of a response from the app.
async fn prefix_response(State(base): State<BasePath>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Some(location) = headers.get(header::LOCATION).and_then(|v| v.to_str().ok())
        && let Some(prefixed) = prefix_location(&base, location)
        && let Ok(value) = HeaderValue::from_str(&prefixed)
    {
        headers.insert(header::LOCATION, value);
    }
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| {
            value
                .to_str()
                .ok()
                .map(|text| prefix_cookie_path(&base, text))
                .and_then(|text| HeaderValue::from_str(&text).ok())
                .unwrap_or_else(|| value.clone())
        })
        .collect();
    if !cookies.is_empty() {
        headers.remove(header::SET_COOKIE);
        for cookie in cookies {
            headers.append(header::SET_COOKIE, cookie);
        }
    }
    response.into_response()
}

/// `/x` → `<base>/x`; absolute URLs (`https://…`), scheme-relative ones (`//host/…`) and relative
/// ones are left alone.
fn prefix_location(base: &BasePath, location: &str) -> Option<String> {
    (location.starts_with('/') && !location.starts_with("//")).then(|| base.join(location))
}

/// `…; Path=/x; …` → `…; Path=<base>/x; …` (`Path=/` becomes `Path=<base>/`).
fn prefix_cookie_path(base: &BasePath, cookie: &str) -> String {
    cookie
        .split(';')
        .map(|part| {
            let trimmed = part.trim_start();
            match trimmed.split_once('=') {
                Some((name, value))
                    if name.eq_ignore_ascii_case("path") && value.starts_with('/') =>
                {
                    let lead = &part[..part.len() - trimmed.len()];
                    format!("{lead}{name}={}", base.join(value))
                }
                _ => part.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;

    #[test]
    fn location_and_cookie_paths_get_the_prefix() {
        let base = BasePath::parse("/banhub").expect("valid");
        assert_eq!(prefix_location(&base, "/").as_deref(), Some("/banhub/"));
        assert_eq!(
            prefix_location(&base, "/api/docs/").as_deref(),
            Some("/banhub/api/docs/")
        );
        assert_eq!(prefix_location(&base, "//evil.example/"), None);
        assert_eq!(prefix_location(&base, "https://idp.example/auth"), None);
        assert_eq!(prefix_location(&base, "docs/"), None);
        assert_eq!(
            prefix_cookie_path(&base, "sid=abc; Path=/; HttpOnly; SameSite=Lax"),
            "sid=abc; Path=/banhub/; HttpOnly; SameSite=Lax"
        );
        assert_eq!(
            prefix_cookie_path(&base, "sid=abc;path=/auth;Secure"),
            "sid=abc;path=/banhub/auth;Secure"
        );
        assert_eq!(prefix_cookie_path(&base, "sid=abc"), "sid=abc");
    }

    async fn status_and_location(router: &Router, uri: &str) -> (StatusCode, Option<String>) {
        let response = router
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        let location = response
            .headers()
            .get(header::LOCATION)
            .map(|v| v.to_str().expect("ascii").to_owned());
        (response.status(), location)
    }

    #[tokio::test]
    async fn mount_serves_only_under_the_prefix() {
        let app = Router::new()
            .route("/", get(|| async { "home" }))
            .route("/api/x", get(|| async { "x" }))
            .route("/go", get(|| async { Redirect::to("/api/x") }));
        let base = BasePath::parse("/banhub").expect("valid");
        let router = mount(app, &base);
        assert_eq!(
            status_and_location(&router, "/banhub/api/x").await,
            (StatusCode::OK, None)
        );
        assert_eq!(
            status_and_location(&router, "/banhub/").await,
            (StatusCode::OK, None)
        );
        assert_eq!(
            status_and_location(&router, "/banhub").await,
            (StatusCode::PERMANENT_REDIRECT, Some("/banhub/".to_owned()))
        );
        assert_eq!(
            status_and_location(&router, "/banhub/go").await,
            (StatusCode::SEE_OTHER, Some("/banhub/api/x".to_owned()))
        );
        for outside in ["/api/x", "/", "/banhubx/api/x", "/other/banhub/api/x"] {
            assert_eq!(
                status_and_location(&router, outside).await.0,
                StatusCode::NOT_FOUND,
                "{outside}"
            );
        }
    }
}
