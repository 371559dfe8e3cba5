//! The operator web UI: the single-page app built into `hub/ui/dist`, embedded in the binary, served
//! for every path outside `/api` and `/auth`.
//!
//! Hashed assets (`/assets/…`) are cached for a year; `index.html` is never cached, carries the
//! hub's base path in its `<base href>` (so every relative URL of the app, API calls included,
//! resolves under `http.base_path`), and is the answer for any other path (the app routes in the
//! browser). An unknown `/api/…` or `/auth/…` path stays a problem+json 404, and a missing asset is a
//! 404 too: answering it with HTML would only hide the fault.

use std::borrow::Cow;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any};

/// `hub/ui/dist`, built by `npm run build` in `hub/ui` and committed, so `cargo build` needs no Node.
/// `debug-embed` makes debug builds embed it too, so tests run what ships.
#[derive(rust_embed::Embed)]
#[folder = "ui/dist/"]
struct Dist;

/// What `hub/ui/index.html` has in its `<base href>`, replaced at start-up.
const BASE_PLACEHOLDER: &str = "__BANHUB_BASE_HREF__";

/// Hashed file names change with their content: cache them for good.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// The page that names the current assets must be revalidated every time.
const NO_CACHE: &str = "no-cache";

/// The app talks to this hub only: no script, style, font or request to any other host. Inline
/// style attributes are allowed because the chart library and Svelte set them from script.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; \
                   base-uri 'self'; form-action 'self'; frame-ancestors 'none'";

/// The embedded UI with `index.html` rendered for one base path.
#[derive(Debug, Clone)]
pub struct Ui {
    /// The rendered page and its entity tag, or why there is none (a broken build).
    index: Result<(Bytes, HeaderValue), String>,
}

/// The router's fallback for every path no route matched: the UI for `base_href` (the URL path the
/// app lives at, ending in `/`). A broken embedded build is logged once and answered with a 500
/// problem on the app's pages; `/api` and `/auth` paths still get their 404.
pub fn fallback<S>(base_href: &str) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    let ui = Ui::new(base_href).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the web UI is not served");
        Ui {
            index: Err(e.to_string()),
        }
    });
    any(move |method: Method, uri: Uri, headers: HeaderMap| {
        let ui = ui.clone();
        async move { ui.respond(&method, &uri, &headers) }
    })
}

/// Why the UI could not be prepared: the embedded build is broken.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error(
        "the embedded web UI has no index.html; build hub/ui (npm run build) and rebuild the hub"
    )]
    NoIndex,
    #[error("the embedded index.html has no <base href=\"{BASE_PLACEHOLDER}\">; rebuild hub/ui")]
    NoPlaceholder,
}

impl Ui {
    /// Renders `index.html` for `base_href`, the URL path the app lives at, ending in `/`
    /// (`/`, or `/banhub/` behind a proxy).
    pub fn new(base_href: &str) -> Result<Self, UiError> {
        let file = Dist::get("index.html").ok_or(UiError::NoIndex)?;
        let text = String::from_utf8_lossy(&file.data);
        if !text.contains(BASE_PLACEHOLDER) {
            return Err(UiError::NoPlaceholder);
        }
        let html = text.replace(BASE_PLACEHOLDER, &escape_attribute(base_href));
        let etag = format!("\"{}\"", hex::encode(&sha2_digest(html.as_bytes())[..16]));
        let etag = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"0\""));
        Ok(Self {
            index: Ok((Bytes::from(html), etag)),
        })
    }

    /// The router's fallback: everything no API route matched.
    pub fn respond(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response {
        let path = uri.path();
        if is_hub_path(path) {
            return crate::serve::problem::problem(
                StatusCode::NOT_FOUND,
                "not_found",
                "Not found",
                "no such endpoint; the API is described at /api/openapi.json".to_owned(),
                None,
            );
        }
        if method != Method::GET && method != Method::HEAD {
            let mut response = crate::serve::problem::problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
                format!("{path} is a page of the web UI; it only answers GET and HEAD"),
                None,
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let file = path.trim_start_matches('/');
        if file.starts_with("assets/") {
            return match Dist::get(file) {
                Some(asset) => asset_response(asset, headers),
                None => plain_not_found(path),
            };
        }
        if file != "index.html"
            && let Some(asset) = Dist::get(file)
        {
            // Other files at the top of dist/ (none today) are not hashed: revalidate them.
            let mut response = asset_response(asset, headers);
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
            return response;
        }
        self.index_response(headers)
    }

    fn index_response(&self, request: &HeaderMap) -> Response {
        let (page, etag) = match &self.index {
            Ok(index) => index,
            Err(reason) => {
                return crate::serve::problem::problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "ui_unavailable",
                    "Web UI unavailable",
                    reason.clone(),
                    None,
                );
            }
        };
        let mut response = if etag_matches(request, etag) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            Body::from(page.clone()).into_response()
        };
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static(NO_CACHE));
        h.insert(header::ETAG, etag.clone());
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        response
    }
}

/// `/api`, `/auth` and everything under them belong to the hub, never to the app.
fn is_hub_path(path: &str) -> bool {
    ["/api", "/auth"].iter().any(|p| {
        path == *p
            || path
                .strip_prefix(p)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

fn asset_response(asset: rust_embed::EmbeddedFile, request: &HeaderMap) -> Response {
    let etag = format!("\"{}\"", hex::encode(&asset.metadata.sha256_hash()[..16]));
    let etag = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"0\""));
    let mut response = if etag_matches(request, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let body = match asset.data {
            Cow::Borrowed(bytes) => Body::from(bytes),
            Cow::Owned(bytes) => Body::from(bytes),
        };
        body.into_response()
    };
    let h = response.headers_mut();
    let mime = asset.metadata.mimetype();
    // Text types say their charset; the build writes UTF-8.
    let content_type = if mime.starts_with("text/") || mime == "application/javascript" {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_owned()
    };
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        h.insert(header::CONTENT_TYPE, value);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    h.insert(header::ETAG, etag);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn plain_not_found(path: &str) -> Response {
    crate::serve::problem::problem(
        StatusCode::NOT_FOUND,
        "not_found",
        "Not found",
        format!(
            "{path} is not a file of this hub's web UI (an old page may name assets of an earlier version: reload it)"
        ),
        None,
    )
}

fn etag_matches(request: &HeaderMap, etag: &HeaderValue) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag.to_str().unwrap_or(""))
}

fn sha2_digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}

/// The base path goes into an HTML attribute; it is already restricted to URL-safe characters,
/// but the page must not depend on that rule staying as it is.
fn escape_attribute(text: &str) -> Cow<'_, str> {
    if text.contains(['&', '"', '<', '>', '\'']) {
        Cow::Owned(
            text.replace('&', "&amp;")
                .replace('"', "&quot;")
                .replace('\'', "&#39;")
                .replace('<', "&lt;")
                .replace('>', "&gt;"),
        )
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(ui: &Ui, path: &str) -> Response {
        ui.respond(&Method::GET, &path.parse().expect("uri"), &HeaderMap::new())
    }

    fn header(response: &Response, name: header::HeaderName) -> &str {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 4 << 20)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    /// The `src` of the script tag of the rendered index: the hashed bundle.
    fn script_path(index: &str) -> String {
        let start = index.find("src=\"./assets/").expect("script tag") + "src=\"./".len();
        let end = start + index[start..].find('"').expect("quote");
        index[start..end].to_owned()
    }

    #[tokio::test]
    async fn index_carries_the_base_path_and_is_not_cached() {
        let ui = Ui::new("/banhub/").expect("embedded ui");
        for path in [
            "/",
            "/jails/sshd",
            "/login?return_to=%2Fevents",
            "/index.html",
        ] {
            let response = get(&ui, path);
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            assert_eq!(
                header(&response, header::CONTENT_TYPE),
                "text/html; charset=utf-8"
            );
            assert_eq!(header(&response, header::CACHE_CONTROL), "no-cache");
            assert!(
                header(&response, header::CONTENT_SECURITY_POLICY).contains("default-src 'self'")
            );
            let body = text(response).await;
            assert!(body.contains("<base href=\"/banhub/\""), "{body}");
            assert!(!body.contains(BASE_PLACEHOLDER));
        }
    }

    #[tokio::test]
    async fn hashed_assets_are_cached_for_good_with_their_type() {
        let ui = Ui::new("/").expect("embedded ui");
        let index = text(get(&ui, "/")).await;
        let script = script_path(&index);
        let response = get(&ui, &format!("/{script}"));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header(&response, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header(&response, header::CACHE_CONTROL), IMMUTABLE);
        let etag = header(&response, header::ETAG).to_owned();
        assert!(text(response).await.len() > 1000);

        let mut headers = HeaderMap::new();
        headers.insert(header::IF_NONE_MATCH, etag.parse().expect("etag"));
        let again = ui.respond(
            &Method::GET,
            &format!("/{script}").parse().expect("uri"),
            &headers,
        );
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

        // The stylesheet link (the module preloads before it name scripts).
        let css = index.find("rel=\"stylesheet\"").map(|at| {
            let start = at + index[at..].find("href=\"./").expect("href") + "href=\"./".len();
            index[start..start + index[start..].find('"').expect("quote")].to_owned()
        });
        let css = get(&ui, &format!("/{}", css.expect("stylesheet link")));
        assert_eq!(
            header(&css, header::CONTENT_TYPE),
            "text/css; charset=utf-8"
        );
    }

    #[tokio::test]
    async fn every_chunk_of_the_build_is_served_and_cached_for_good() {
        let ui = Ui::new("/").expect("embedded ui");
        let assets: Vec<_> = Dist::iter().filter(|f| f.starts_with("assets/")).collect();
        // The pages and the locales are chunks of their own, loaded when first needed.
        assert!(assets.len() > 10, "{assets:?}");
        for file in assets {
            let response = get(&ui, &format!("/{file}"));
            assert_eq!(response.status(), StatusCode::OK, "{file}");
            assert_eq!(
                header(&response, header::CACHE_CONTROL),
                IMMUTABLE,
                "{file}"
            );
            let expected = if file.ends_with(".js") {
                "text/javascript; charset=utf-8"
            } else if file.ends_with(".css") {
                "text/css; charset=utf-8"
            } else {
                continue;
            };
            assert_eq!(header(&response, header::CONTENT_TYPE), expected, "{file}");
        }
    }

    #[tokio::test]
    async fn api_auth_and_missing_assets_are_problem_404s() {
        let ui = Ui::new("/").expect("embedded ui");
        for path in [
            "/api",
            "/api/nope",
            "/auth",
            "/auth/nope",
            "/assets/gone-123.js",
        ] {
            let response = get(&ui, path);
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            assert_eq!(
                header(&response, header::CONTENT_TYPE),
                "application/problem+json",
                "{path}"
            );
        }
        // Paths that merely start with the same letters are pages of the app.
        for path in ["/apiary", "/authors"] {
            assert_eq!(get(&ui, path).status(), StatusCode::OK, "{path}");
        }
    }

    #[test]
    fn only_get_and_head_reach_the_app() {
        let ui = Ui::new("/").expect("embedded ui");
        let response = ui.respond(
            &Method::POST,
            &"/jails".parse().expect("uri"),
            &HeaderMap::new(),
        );
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(header(&response, header::ALLOW), "GET, HEAD");
        let head = ui.respond(
            &Method::HEAD,
            &"/jails".parse().expect("uri"),
            &HeaderMap::new(),
        );
        assert_eq!(head.status(), StatusCode::OK);
    }

    #[test]
    fn a_broken_build_is_a_500_on_pages_and_still_a_404_under_the_api() {
        let ui = Ui {
            index: Err("the embedded web UI has no index.html".to_owned()),
        };
        assert_eq!(
            get(&ui, "/jails").status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(get(&ui, "/api/x").status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn base_href_is_escaped() {
        assert_eq!(escape_attribute("/a\"b/"), "/a&quot;b/");
        assert_eq!(escape_attribute("/banhub/"), "/banhub/");
    }
}
