//! Who may call which route, and the audit log of every state-changing request.
//!
//! The single source of truth is the `x-required-role` extension of each route's OpenAPI operation
//! (`viewer`, `operator`, `admin`, or `public` for routes that authenticate by other means):
//! [`Policy::from_openapi`] builds the enforcement table from the generated document, and
//! [`document`] turns the same extension into the document's security requirements. A route under
//! `/api` without the extension is refused, not open.
//!
//! The middlewares that apply it are `api::access`'s `authenticate` and `authorize`; they use the
//! same-origin checks here, and the [`AuditHandle`] through which handlers add details to a
//! request's audit entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, Method, header};
use serde_json::{Map, Value};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{OpenApi, PathItem};

use super::cookie::SESSION_COOKIE;
use super::{AuthError, Role};

/// The OpenAPI extension naming the role a route needs.
pub const ROLE_EXTENSION: &str = "x-required-role";
/// Names of the security schemes in the OpenAPI document.
pub const SESSION_SCHEME: &str = "session";
pub const BEARER_SCHEME: &str = "bearer";

/// What a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing from this layer (the handler authenticates by other means, e.g. a callback secret).
    Public,
    /// A session or token with at least this role.
    Role(Role),
}

impl Access {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "public" => Some(Self::Public),
            other => Role::parse(other).map(Self::Role),
        }
    }
}

/// The role of a request's route, for the capability extractors to compare with their own.
#[derive(Debug, Clone, Copy)]
pub struct RouteRole(pub Role);

/// The access table: (method, route template) → access.
#[derive(Debug, Default)]
pub struct Policy {
    routes: HashMap<(Method, String), Access>,
}

fn operations(item: &PathItem) -> [(Method, Option<&utoipa::openapi::path::Operation>); 6] {
    [
        (Method::GET, item.get.as_ref()),
        (Method::POST, item.post.as_ref()),
        (Method::PUT, item.put.as_ref()),
        (Method::DELETE, item.delete.as_ref()),
        (Method::PATCH, item.patch.as_ref()),
        (Method::HEAD, item.head.as_ref()),
    ]
}

fn declared(op: &utoipa::openapi::path::Operation) -> Option<&Value> {
    op.extensions.as_ref().and_then(|e| e.get(ROLE_EXTENSION))
}

impl Policy {
    /// The table of every operation that declares `x-required-role`. An unknown value is an error
    /// (a typo must not open a route).
    pub fn from_openapi(doc: &OpenApi) -> Result<Self, String> {
        let mut routes = HashMap::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in operations(item) {
                let Some(value) = op.and_then(declared) else {
                    continue;
                };
                let access = value.as_str().and_then(Access::parse).ok_or_else(|| {
                    format!(
                        "{method} {path}: {ROLE_EXTENSION} is {value}, not one of viewer, \
                         operator, admin, public"
                    )
                })?;
                routes.insert((method, path.clone()), access);
            }
        }
        Ok(Self { routes })
    }

    /// The access of a matched route; `None` if it declares none.
    pub fn lookup(&self, method: &Method, template: &str) -> Option<Access> {
        // HEAD is answered by GET routes.
        let method = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        if let Some(access) = self.routes.get(&(method.clone(), template.to_owned())) {
            return Some(*access);
        }
        // The API's own documentation (served by utoipa-swagger-ui, not part of the document).
        if method == Method::GET
            && (template == "/api/openapi.json" || template.starts_with("/api/docs"))
        {
            return Some(Access::Role(Role::Viewer));
        }
        None
    }

    /// The methods a route template serves, in the order an `Allow` header lists them (HEAD with
    /// GET, as axum answers it); empty for a template the document does not know.
    pub fn allowed(&self, template: &str) -> Vec<Method> {
        let order = [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ];
        order
            .into_iter()
            .filter(|method| self.lookup(method, template).is_some())
            .collect()
    }
}

/// Writes the policy into the document: the two security schemes, and on each operation its
/// security requirement and a sentence naming the role.
pub fn document(doc: &mut OpenApi) {
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        SESSION_SCHEME,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            SESSION_COOKIE,
            "The session cookie set by the login (`/auth/login`). State-changing requests must come \
             from the hub's own origin (`Origin` header).",
        ))),
    );
    components.add_security_scheme(
        BEARER_SCHEME,
        SecurityScheme::Http(
            Http::builder()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some("An API token an admin created (`POST /api/tokens`)."))
                .build(),
        ),
    );
    for item in doc.paths.paths.values_mut() {
        for op in [
            item.get.as_mut(),
            item.post.as_mut(),
            item.put.as_mut(),
            item.delete.as_mut(),
            item.patch.as_mut(),
            item.head.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            let Some(access) = declared(op).and_then(Value::as_str).and_then(Access::parse) else {
                continue;
            };
            let sentence = match access {
                Access::Public => {
                    op.security = Some(vec![SecurityRequirement::default()]);
                    "Needs no session or token.".to_owned()
                }
                Access::Role(role) => {
                    // The token first: a client (and a fuzzer) that sends one is authenticated
                    // by it, whatever cookie comes along.
                    op.security = Some(vec![
                        SecurityRequirement::new(BEARER_SCHEME, [role.as_str()]),
                        SecurityRequirement::new(SESSION_SCHEME, [role.as_str()]),
                    ]);
                    format!("Requires the `{role}` role (or a higher one).")
                }
            };
            op.description = Some(match op.description.take() {
                Some(text) if !text.is_empty() => format!("{text}\n\n{sentence}"),
                _ => sentence,
            });
        }
    }
}

/// Details a handler adds to its request's audit entry.
#[derive(Debug, Clone, Default)]
pub struct AuditHandle(Arc<Mutex<Notes>>);

#[derive(Debug, Default)]
struct Notes {
    server: Option<String>,
    detail: Map<String, Value>,
}

impl AuditHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The server the request is about.
    pub fn server(&self, id: impl std::fmt::Display) {
        self.lock().server = Some(id.to_string());
    }

    /// A detail, e.g. `("ip", "192.0.2.7")`.
    pub fn note(&self, key: &str, value: impl Into<Value>) {
        self.lock().detail.insert(key.to_owned(), value.into());
    }

    /// The server and the details noted so far, leaving none behind: for the request's audit entry.
    pub fn take(&self) -> (Option<String>, Map<String, Value>) {
        let mut notes = self.lock();
        (notes.server.take(), std::mem::take(&mut notes.detail))
    }
}

/// Methods that change state (everything but GET, HEAD, OPTIONS).
pub fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn origin_of(url: &str) -> Option<String> {
    openidconnect::url::Url::parse(url)
        .ok()
        .map(|u| u.origin().ascii_serialization())
}

/// A cookie-authenticated change must say where it comes from (`Origin`, or else `Referer`), and that
/// must be the hub's own origin: a page elsewhere cannot act with the operator's cookie.
pub fn check_same_origin(
    headers: &HeaderMap,
    expected: Option<&str>,
    required: bool,
) -> Result<(), AuthError> {
    let header_text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let claimed = match (header_text(header::ORIGIN), header_text(header::REFERER)) {
        (Some(origin), _) => Some(origin.to_ascii_lowercase()),
        (None, Some(referer)) => origin_of(referer),
        (None, None) if !required => return Ok(()),
        (None, None) => None,
    };
    let Some(claimed) = claimed else {
        return Err(AuthError::CrossOrigin(
            "a request that changes something with a session cookie must carry an Origin (or \
             Referer) header naming this hub"
                .to_owned(),
        ));
    };
    match expected {
        Some(expected) if claimed == expected.to_ascii_lowercase() => Ok(()),
        _ => Err(AuthError::CrossOrigin(format!(
            "this request comes from {claimed}, not from this hub ({}); changes with a session \
             cookie are accepted only from the hub's own pages",
            expected.unwrap_or("unknown origin")
        ))),
    }
}

/// A `GET` that changes something (the logout link) must come from the hub's own pages: refused when
/// the browser says it came from another site (`Sec-Fetch-Site`), or when its `Origin` or `Referer`
/// names another origin. `Sec-Fetch-Site: none` is the operator typing the URL or using a bookmark.
/// A request with none of these headers passes: browsers that omit them all are not in use, and a
/// script could as well post with a bearer token.
pub fn check_same_origin_navigation(
    headers: &HeaderMap,
    expected: Option<&str>,
) -> Result<(), AuthError> {
    match headers.get("sec-fetch-site").map(HeaderValue::to_str) {
        Some(Ok("same-origin" | "none")) => Ok(()),
        Some(site) => Err(AuthError::CrossOrigin(format!(
            "this request comes from another site (Sec-Fetch-Site: {}); it is accepted only from \
             the hub's own pages",
            site.unwrap_or("unreadable")
        ))),
        None => check_same_origin(headers, expected, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_navigation_check() {
        let hub = Some("http://hub.example");
        let check = |pairs: &[(&'static str, &'static str)], allowed: bool| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            assert_eq!(
                check_same_origin_navigation(&headers, hub).is_ok(),
                allowed,
                "{pairs:?}"
            );
        };
        check(&[], true);
        check(&[("sec-fetch-site", "same-origin")], true);
        check(&[("sec-fetch-site", "none")], true);
        check(&[("sec-fetch-site", "cross-site")], false);
        check(&[("sec-fetch-site", "same-site")], false);
        check(&[("referer", "http://hub.example/servers")], true);
        check(&[("referer", "https://evil.example/page")], false);
        check(&[("origin", "https://evil.example")], false);
    }

    #[test]
    fn same_origin_check() {
        let mut headers = HeaderMap::new();
        let hub = Some("http://127.0.0.1:8080");
        assert!(
            check_same_origin(&headers, hub, true).is_err(),
            "no origin at all"
        );
        assert!(check_same_origin(&headers, hub, false).is_ok(), "optional");
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(check_same_origin(&headers, hub, true).is_ok());
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(matches!(
            check_same_origin(&headers, hub, true),
            Err(AuthError::CrossOrigin(_))
        ));
        assert!(
            check_same_origin(&headers, hub, false).is_err(),
            "present and wrong"
        );
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(check_same_origin(&headers, hub, true).is_err());
        headers.remove(header::ORIGIN);
        headers.insert(
            header::REFERER,
            HeaderValue::from_static("http://127.0.0.1:8080/servers?x=1"),
        );
        assert!(check_same_origin(&headers, hub, true).is_ok());
        headers.insert(
            header::REFERER,
            HeaderValue::from_static("http://127.0.0.1:9999/"),
        );
        assert!(check_same_origin(&headers, hub, true).is_err());
        assert!(check_same_origin(&headers, None, true).is_err());
    }

    #[test]
    fn unknown_role_values_are_refused() {
        use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
        use utoipa::openapi::{OpenApiBuilder, PathsBuilder};
        let op = |role: &str| {
            OperationBuilder::new()
                .extensions(Some(
                    utoipa::openapi::extensions::ExtensionsBuilder::new()
                        .add(ROLE_EXTENSION, role)
                        .build(),
                ))
                .build()
        };
        let doc = |role: &str| {
            OpenApiBuilder::new()
                .paths(
                    PathsBuilder::new().path("/api/x", PathItem::new(HttpMethod::Post, op(role))),
                )
                .build()
        };
        let policy = Policy::from_openapi(&doc("operator")).expect("valid");
        assert_eq!(
            policy.lookup(&Method::POST, "/api/x"),
            Some(Access::Role(Role::Operator))
        );
        assert_eq!(policy.lookup(&Method::GET, "/api/x"), None);
        assert_eq!(policy.allowed("/api/x"), vec![Method::POST]);
        assert!(policy.allowed("/api/y").is_empty());
        assert_eq!(
            policy.lookup(&Method::GET, "/api/docs/{*rest}"),
            Some(Access::Role(Role::Viewer))
        );
        assert!(Policy::from_openapi(&doc("operater")).is_err());
    }
}
