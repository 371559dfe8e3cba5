//! The access middlewares of the HTTP surface, and the capability extractors handlers take.
//!
//! [`authenticate`] (on everything) finds the principal and checks that a cookie-authenticated
//! change comes from the hub's own origin; [`authorize`] (a route layer, so it sees the matched
//! route) enforces the route's role from `auth::policy::Policy` and records every state-changing
//! request in the audit log: who, what, which server, the status. `auth` decides; this module turns
//! its refusals (`AuthError`) into `ApiError` answers.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use super::ApiError;
use super::target::SERVER_HEADER;
use crate::auth::policy::{
    Access, AuditHandle, Policy, ROLE_EXTENSION, RouteRole, changes_state, check_same_origin,
};
use crate::auth::{
    Admin, AuditRecord, Auth, AuthError, Authn, Credential, Operator, Outcome, Principal,
    SESSION_COOKIE, Viewer,
};

/// At most this many characters of a server header that is not an id go into a refusal's audit row.
const MAX_NOTED_HEADER: usize = 64;

/// Marks a request whose bearer token is a feed token: it reads its feed (`GET /feeds/{file}`,
/// which checks it) and nothing else, so every route that needs a role refuses it with 403.
#[derive(Debug, Clone, Copy)]
struct FeedBearer;

fn carries_feed_token(request: &Request) -> bool {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .is_some_and(|t| t.trim().starts_with(crate::feeds::FEED_TOKEN_PREFIX))
}

/// Finds the principal (bearer token or session cookie) and puts it, with the [`Authn`], into the
/// request's extensions; refuses cookie-authenticated changes from another origin.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let authn = match auth.authenticate(request.headers(), client).await {
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
    if carries_feed_token(&request) {
        request.extensions_mut().insert(FeedBearer);
    }
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
        if request.extensions().get::<FeedBearer>().is_some() {
            return ApiError::from(AuthError::Forbidden(format!(
                "{method} {template}: a feed token reads its feed (GET /feeds/{{name}}.{{format}}) \
                 and nothing else"
            )))
            .into_response();
        }
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

macro_rules! extractor {
    ($name:ident) => {
        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
                Ok($name::from_parts(parts)?)
            }
        }
    };
}

extractor!(Viewer);
extractor!(Operator);
extractor!(Admin);

#[cfg(test)]
mod tests {
    use super::*;

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
}
