//! Who may call which route, and the audit log of every state-changing request.
//!
//! The single source of truth is the `x-required-role` extension of each route's OpenAPI operation
//! (`viewer`, `operator`, `admin`, or `public` for routes that authenticate by other means):
//! [`Policy::from_openapi`] builds the enforcement table from the generated document, and
//! [`document`] turns the same extension into the document's security requirements. A route under
//! `/api` without the extension is refused, not open.
//!
//! Two middlewares: [`authenticate`] (on everything) finds the principal and checks that a
//! cookie-authenticated change comes from the hub's own origin; [`authorize`] (a route layer, so it
//! sees the matched route) enforces the route's role and records every state-changing request in
//! the audit log: who, what, which server, the status. Handlers add details through [`AuditHandle`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Map, Value};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{OpenApi, PathItem};

use super::cookie::SESSION_COOKIE;
use super::{AuditRecord, Auth, AuthError, Authn, Credential, Outcome, Principal, Role};
use crate::api::ApiError;
use crate::api::target::SERVER_HEADER;

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

    fn take(&self) -> (Option<String>, Map<String, Value>) {
        let mut notes = self.lock();
        (notes.server.take(), std::mem::take(&mut notes.detail))
    }
}

/// At most this many characters of a server header that is not an id go into a refusal's audit row.
const MAX_NOTED_HEADER: usize = 64;

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

/// Finds the principal (bearer token or session cookie) and puts it, with the [`Authn`], into the
/// request's extensions; refuses cookie-authenticated changes from another origin.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let authn = match auth.authenticate(request.headers()).await {
        Ok(authn) => authn,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let method = request.method().clone();
    if changes_state(&method) {
        let by_cookie = matches!(
            authn.principal,
            Some(Principal {
                credential: Credential::Session(_),
                ..
            })
        );
        // A login form posted from elsewhere (login CSRF) is refused when its origin shows.
        let login = request.uri().path() == "/auth/login";
        if by_cookie || login {
            let external = auth.external(request.headers());
            if let Err(e) = check_same_origin(
                request.headers(),
                external.as_ref().map(|e| e.origin.as_str()),
                by_cookie,
            ) {
                tracing::warn!(method = %method, path = request.uri().path(), error = %e, "cross-origin request refused");
                return ApiError::from(e).into_response();
            }
        }
    }
    if let Some(principal) = &authn.principal {
        request.extensions_mut().insert(principal.clone());
    }
    let clear_cookie = authn.clear_cookie;
    request.extensions_mut().insert(authn);
    let mut response = next.run(request).await;
    // A dead session cookie is deleted, unless the answer sets a new one (a login).
    let sets_session = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| {
            v.as_bytes()
                .starts_with(format!("{SESSION_COOKIE}=").as_bytes())
        });
    if clear_cookie && !sets_session {
        response
            .headers_mut()
            .append(header::SET_COOKIE, auth.clear_session_cookie());
    }
    response
}

/// What [`authorize`] needs.
#[derive(Debug, Clone)]
pub struct Authorizer {
    pub auth: Auth,
    pub policy: Arc<Policy>,
}

/// Enforces the matched route's role and records state-changing requests in the audit log.
pub async fn authorize(
    State(authorizer): State<Authorizer>,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| path.clone());
    let access = match authorizer.policy.lookup(&method, &template) {
        Some(access) => access,
        // A route served with other methods: the method is wrong, whoever asks.
        None if !authorizer.policy.allowed(&template).is_empty() => {
            return method_not_allowed(&authorizer.policy, &method, &template);
        }
        None if path == "/api" || path.starts_with("/api/") => {
            tracing::error!(%method, route = %template, "route without {ROLE_EXTENSION} refused");
            return ApiError::from(AuthError::Forbidden(format!(
                "{method} {template} declares no required role, so nobody may call it (a bug: \
                 its OpenAPI operation needs `{ROLE_EXTENSION}`)"
            )))
            .into_response();
        }
        None => return next.run(request).await,
    };
    let Access::Role(required) = access else {
        return next.run(request).await;
    };
    let authn = request
        .extensions()
        .get::<Authn>()
        .cloned()
        .unwrap_or_default();
    let Some(principal) = authn.principal else {
        let detail = authn.refusal.unwrap_or_else(|| {
            "log in (GET /auth/login) or send `Authorization: Bearer <token>`".to_owned()
        });
        let mut response = ApiError::from(AuthError::Unauthenticated(detail)).into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"banhub\""),
        );
        return response;
    };
    let audited = changes_state(&method);
    let handle = AuditHandle::default();
    if let Some(server) = server_in_path(&template, &path) {
        handle.server(server);
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string());
    let entry = |status: u16, outcome: Outcome| {
        let (server_id, detail) = handle.take();
        AuditRecord {
            id: 0,
            at: Utc::now(),
            actor: principal.subject.clone(),
            actor_name: principal.name.clone(),
            actor_kind: principal.credential.kind().to_owned(),
            action: format!("{method} {template}"),
            path: path.clone(),
            server_id,
            status,
            outcome,
            detail,
            client_addr: client.clone(),
        }
    };
    if principal.role < required {
        // The handler, which resolves the target server of the `X-BanDaemon-Server` header, does
        // not run: the refusal names the server the header gave.
        if let Some(target) = request
            .headers()
            .get(SERVER_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            match crate::domain::ServerId::parse(target) {
                Ok(id) => handle.server(id),
                Err(_) => handle.note(
                    "serverHeader",
                    target.chars().take(MAX_NOTED_HEADER).collect::<String>(),
                ),
            }
        }
        let response = ApiError::from(AuthError::Forbidden(format!(
            "{method} {template} needs the {required} role; {} has the {} role",
            principal.name, principal.role
        )))
        .into_response();
        if audited {
            authorizer
                .auth
                .record(entry(response.status().as_u16(), Outcome::Denied))
                .await;
        }
        return response;
    }
    request.extensions_mut().insert(RouteRole(required));
    request.extensions_mut().insert(handle.clone());
    let response = next.run(request).await;
    if audited {
        let status = response.status();
        let outcome = if status.is_success() || status.is_redirection() {
            Outcome::Ok
        } else if status.as_u16() == 401 || status.as_u16() == 403 {
            Outcome::Denied
        } else {
            Outcome::Failed
        };
        authorizer
            .auth
            .record(entry(status.as_u16(), outcome))
            .await;
    }
    response
}

/// A 405 problem whose `Allow` header lists the methods the route serves.
fn method_not_allowed(policy: &Policy, method: &Method, template: &str) -> Response {
    let allowed: Vec<String> = policy
        .allowed(template)
        .iter()
        .map(|m| m.as_str().to_owned())
        .collect();
    let allow = allowed.join(", ");
    let mut response = ApiError::from(AuthError::MethodNotAllowed {
        method: method.to_string(),
        route: template.to_owned(),
        allowed,
    })
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

/// The server id of a `/api/servers/{id}…` route.
fn server_in_path(template: &str, path: &str) -> Option<String> {
    let mut template = template.split('/');
    let mut path = path.split('/');
    let mut previous = "";
    loop {
        let (t, p) = (template.next()?, path.next()?);
        if previous == "servers" && t == "{id}" {
            return Some(p.to_owned());
        }
        previous = t;
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
    fn server_ids_come_from_server_routes() {
        assert_eq!(
            server_in_path("/api/servers/{id}", "/api/servers/abc").as_deref(),
            Some("abc")
        );
        assert_eq!(
            server_in_path("/api/servers/{id}/test", "/api/servers/abc/test").as_deref(),
            Some("abc")
        );
        assert_eq!(server_in_path("/api/servers", "/api/servers"), None);
        assert_eq!(
            server_in_path("/api/jails/{name}/ban", "/api/jails/x/ban"),
            None
        );
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
