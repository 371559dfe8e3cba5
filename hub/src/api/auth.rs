//! Login and identity (`/auth/*`: status, user, login, callback, logout) and the credentials admins
//! manage (`/api/tokens`, `/api/sessions`).
//!
//! `return_to` is a path on this hub relative to its root (e.g. `/servers`); the redirects write it
//! as an absolute path, which the base-path layer prefixes.

use std::net::{IpAddr, SocketAddr};

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::query;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::policy::check_same_origin_navigation;
use crate::auth::{
    Admin, ApiTokenRecord, AuthError, AuthMode, Authn, Callback, Credential, NewSession, Principal,
    Role, SessionRecord,
};

const MAX_RETURN_TO: usize = 2048;
const MAX_TOKEN_DAYS: u32 = 3650;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(user))
        .routes(routes!(login_start, login_local))
        .routes(routes!(callback))
        .routes(routes!(logout_get, logout_post))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
        .routes(routes!(list_sessions))
        .routes(routes!(revoke_session))
}

/// The logged-in user (or API token).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserDto {
    /// Stable identifier: the provider's `sub`, the local user name, or `token:<id>`.
    subject: String,
    name: String,
    email: Option<String>,
    /// The highest role.
    role: Role,
    /// Every role held (a role includes the ones below it), lowest first.
    roles: Vec<Role>,
}

impl From<&Principal> for UserDto {
    fn from(p: &Principal) -> Self {
        Self {
            subject: p.subject.clone(),
            name: p.name.clone(),
            email: p.email.clone(),
            role: p.role,
            roles: p.role.implied(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthStatus {
    authenticated: bool,
    /// `oidc` or `local`.
    #[schema(value_type = String, example = "oidc")]
    mode: &'static str,
    user: Option<UserDto>,
}

/// Whether the request is authenticated, how this hub logs in, and who.
#[utoipa::path(get, path = "/auth/status", tag = "auth",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 200, body = AuthStatus)))]
async fn status(
    State(state): State<AppState>,
    Extension(authn): Extension<Authn>,
) -> ApiJson<AuthStatus> {
    ApiJson(AuthStatus {
        authenticated: authn.principal.is_some(),
        mode: state.auth.mode().as_str(),
        user: authn.principal.as_ref().map(UserDto::from),
    })
}

/// The logged-in user: name, e-mail, roles. 401 without a session or token.
#[utoipa::path(get, path = "/auth/user", tag = "auth",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 200, body = UserDto), (status = 401, body = Problem)))]
async fn user(Extension(authn): Extension<Authn>) -> Result<ApiJson<UserDto>, ApiError> {
    match &authn.principal {
        Some(principal) => Ok(ApiJson(principal.into())),
        None => Err(AuthError::Unauthenticated(
            authn
                .refusal
                .unwrap_or_else(|| "not logged in; GET /auth/login".to_owned()),
        )
        .into()),
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoginParams {
    /// Where to go after the login: a path on this hub (e.g. `/servers`), default `/`.
    #[param(
        max_length = 2048,
        pattern = "^(/([^/\\\\\\x00-\\x1f\\x7f-\\x9f][^\\\\\\x00-\\x1f\\x7f-\\x9f]*)?)?$"
    )]
    return_to: Option<String>,
}

/// A path on this hub, or an error: no scheme, no host, no `//`, no backslash, no control
/// characters (an open redirect must not be possible).
fn return_to(raw: Option<&str>) -> Result<String, ApiError> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Ok("/".to_owned());
    };
    let ok = raw.starts_with('/')
        && !raw.starts_with("//")
        && raw.len() <= MAX_RETURN_TO
        && !raw.contains('\\')
        && !raw.chars().any(char::is_control);
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(ApiError::invalid(
            "return_to",
            "must be a path on this hub starting with a single '/'",
        ))
    }
}

fn found(location: &str) -> Response {
    match HeaderValue::from_str(location) {
        Ok(value) => (StatusCode::FOUND, [(header::LOCATION, value)]).into_response(),
        Err(_) => ApiError::Internal(format!("redirect target {location:?}")).into_response(),
    }
}

fn encode(text: &str) -> String {
    openidconnect::url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Starts a login. OIDC: 302 to the provider (authorization code flow with PKCE, state and nonce).
/// Local: 302 to the UI's login page, which posts the password to `POST /auth/login`.
#[utoipa::path(get, path = "/auth/login", tag = "auth", params(LoginParams),
    extensions(("x-required-role" = json!("public"))),
    responses((status = 302, description = "To the provider, or to the UI's login page"),
              (status = 422, description = "return_to is not a path on this hub", body = Problem),
              (status = 502, description = "The provider cannot be reached", body = Problem)))]
async fn login_start(
    State(state): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<LoginParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    let target = return_to(params.return_to.as_deref())?;
    match state.auth.mode() {
        AuthMode::Local => Ok(found(&format!("/login?return_to={}", encode(&target)))),
        AuthMode::Oidc => {
            let external = state.auth.external(&headers).ok_or_else(|| {
                ApiError::invalid(
                    "Host",
                    "the request names no usable host; set auth.public_url",
                )
            })?;
            let (url, cookie) = state.auth.begin_oidc(&external, &target).await?;
            let mut response = found(url.as_str());
            response.headers_mut().append(header::SET_COOKIE, cookie);
            Ok(response)
        }
    }
}

/// Body of `POST /auth/login`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalLogin {
    username: String,
    password: String,
}

/// The client's address, when the listener knows it.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

fn session_response(session: NewSession, body: Option<UserDto>) -> Response {
    let mut response = match body {
        Some(user) => ApiJson(user).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    };
    response
        .headers_mut()
        .append(header::SET_COOKIE, session.set_cookie);
    response
}

/// Local mode: logs in the administrator with a password; sets the session cookie. Failed logins
/// are limited per client address and per user name (429 with `Retry-After`).
#[utoipa::path(post, path = "/auth/login", tag = "auth", request_body = LocalLogin,
    extensions(("x-required-role" = json!("public"))),
    responses((status = 200, description = "Logged in; the session cookie is set", body = UserDto),
              (status = 400, description = "This hub logs in through OIDC", body = Problem),
              (status = 401, description = "Wrong user name or password", body = Problem),
              (status = 429, description = "Too many failed logins", body = Problem)))]
async fn login_local(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    ApiJson(body): ApiJson<LocalLogin>,
) -> Result<Response, ApiError> {
    let session = state
        .auth
        .login_local(&body.username, &body.password, client)
        .await?;
    let user = UserDto::from(&session.principal);
    Ok(session_response(session, Some(user)))
}

/// Whether the client is a browser navigating (it asks for HTML), rather than a program.
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

/// OIDC mode: the provider's redirect back. Checks the state against this browser's login, redeems
/// the code, verifies the ID token (nonce included), maps the role; sets the session cookie and
/// sends the browser to where the login started. A refused login is a problem document, or, for a
/// browser (`Accept: text/html`), a redirect to the UI's login page, which shows `error`.
#[utoipa::path(get, path = "/auth/callback", tag = "auth", params(Callback),
    extensions(("x-required-role" = json!("public"))),
    responses((status = 302, description = "Logged in; to return_to. Refused, for a browser: to /login?error=…"),
              (status = 400, description = "Unknown, used, expired or foreign state", body = Problem),
              (status = 401, description = "The provider refused, or its answer did not verify", body = Problem),
              (status = 403, description = "No role for this user", body = Problem)))]
async fn callback(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    headers: HeaderMap,
    params: Result<Query<Callback>, QueryRejection>,
) -> Response {
    let params = match query(params) {
        Ok(params) => params,
        Err(e) => return e.into_response(),
    };
    let mut response = match state.auth.finish_oidc(&params, &headers, client).await {
        Ok((session, target)) => {
            let mut response = found(&target);
            response
                .headers_mut()
                .append(header::SET_COOKIE, session.set_cookie);
            response
        }
        // A person is looking at this: the login page says what went wrong.
        Err(e) if wants_html(&headers) => {
            found(&format!("/login?error={}", encode(&refusal_words(&e))))
        }
        Err(e) => ApiError::from(e).into_response(),
    };
    // The login cookie has done its work either way.
    response
        .headers_mut()
        .append(header::SET_COOKIE, state.auth.clear_login_cookie());
    response
}

/// A refused login in words for the login page: internal failures by their title only.
fn refusal_words(e: &AuthError) -> String {
    let (status, _, title) = e.parts();
    if status.is_server_error() {
        title.to_owned()
    } else {
        e.to_string()
    }
}

async fn logout(
    state: &AppState,
    authn: &Authn,
    headers: &HeaderMap,
    client: Option<IpAddr>,
) -> Result<Response, ApiError> {
    let auth = &state.auth;
    let provider = auth
        .logout(
            authn.principal.as_ref(),
            auth.external(headers).as_ref(),
            client,
        )
        .await?;
    let mut response = found(provider.as_ref().map_or("/", |u| u.as_str()));
    response
        .headers_mut()
        .append(header::SET_COOKIE, auth.clear_session_cookie());
    Ok(response)
}

/// Ends the session here and, for an OIDC session whose provider supports it, at the provider:
/// 302 to its end-session endpoint (which returns to the hub's root), else to `/`. Only from the
/// hub's own pages: a link or image on another site gets a 403 and the session stays.
#[utoipa::path(get, path = "/auth/logout", tag = "auth",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 302, description = "To the provider's end-session endpoint, or to /"),
              (status = 403, description = "From another site; the session was not ended", body = Problem)))]
async fn logout_get(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    Extension(authn): Extension<Authn>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let external = state.auth.external(&headers);
    if let Err(e) =
        check_same_origin_navigation(&headers, external.as_ref().map(|e| e.origin.as_str()))
    {
        tracing::warn!(error = %e, "cross-site logout refused");
        return Err(e.into());
    }
    logout(&state, &authn, &headers, client).await
}

/// As `GET /auth/logout` (for forms; same-origin checked like every change made with a cookie).
#[utoipa::path(post, path = "/auth/logout", tag = "auth",
    extensions(("x-required-role" = json!("public"))),
    responses((status = 302, description = "To the provider's end-session endpoint, or to /"),
              (status = 403, description = "Posted from another origin", body = Problem)))]
async fn logout_post(
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    Extension(authn): Extension<Authn>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    logout(&state, &authn, &headers, client).await
}

/// An API token (never its secret).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenDto {
    id: String,
    name: String,
    role: Role,
    /// Who created it.
    created_by: String,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiTokenRecord> for TokenDto {
    fn from(r: ApiTokenRecord) -> Self {
        Self {
            id: r.id,
            name: r.name,
            role: r.role,
            created_by: r.created_by,
            created_at: r.created_at,
            last_used_at: r.last_used_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        }
    }
}

/// Body of `POST /api/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateToken {
    /// What it is for, 1 to 64 characters (not only spaces), no control characters.
    #[schema(
        max_length = 64,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\x00-\\x1f\\x7f-\\x9f\\s][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    name: String,
    role: Role,
    /// Days until it stops working (1 to 3650); absent: until revoked.
    #[schema(minimum = 1, maximum = 3650)]
    expires_in_days: Option<u32>,
}

/// A new token: shown once, here; the hub keeps only a hash of it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    /// Send as `Authorization: Bearer <token>`.
    token: String,
    #[serde(flatten)]
    details: TokenDto,
}

/// Every API token, revoked ones included, newest first.
#[utoipa::path(get, path = "/api/tokens", tag = "auth",
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = Vec<TokenDto>)))]
async fn list_tokens(
    State(state): State<AppState>,
    _admin: Admin,
) -> Result<ApiJson<Vec<TokenDto>>, ApiError> {
    let tokens = state.auth.list_tokens().await?;
    Ok(ApiJson(tokens.into_iter().map(TokenDto::from).collect()))
}

/// Creates an API token with a role, for automation.
#[utoipa::path(post, path = "/api/tokens", tag = "auth", request_body = CreateToken,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = CreatedToken), (status = 422, body = Problem)))]
async fn create_token(
    State(state): State<AppState>,
    admin: Admin,
    ApiJson(body): ApiJson<CreateToken>,
) -> Result<(StatusCode, ApiJson<CreatedToken>), ApiError> {
    let token = body.parse()?;
    let (record, secret) = state
        .auth
        .create_token(
            &token.name,
            token.role,
            token.expires_at,
            &admin.principal().subject,
        )
        .await?;
    admin.note("tokenId", record.id.clone());
    admin.note("role", token.role.as_str());
    Ok((
        StatusCode::CREATED,
        ApiJson(CreatedToken {
            token: secret,
            details: record.into(),
        }),
    ))
}

/// A [`CreateToken`] whose name and lifetime keep their rules.
struct NewToken {
    name: String,
    role: Role,
    expires_at: Option<DateTime<Utc>>,
}

impl CreateToken {
    fn parse(self) -> Result<NewToken, ApiError> {
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "name",
                "must be 1 to 64 characters without control characters",
            ));
        }
        let expires_at = match self.expires_in_days {
            None => None,
            Some(days) if (1..=MAX_TOKEN_DAYS).contains(&days) => {
                Some(Utc::now() + TimeDelta::days(i64::from(days)))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "expiresInDays",
                    format!("must be between 1 and {MAX_TOKEN_DAYS}"),
                ));
            }
        };
        Ok(NewToken {
            name: name.to_owned(),
            role: self.role,
            expires_at,
        })
    }
}

/// Revokes an API token: requests with it are refused (401) from now on.
#[utoipa::path(delete, path = "/api/tokens/{id}", tag = "auth",
    params(("id" = String, Path, description = "Token id")),
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 204), (status = 404, body = Problem)))]
async fn revoke_token(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.auth.revoke_token(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no unrevoked API token {id:?}")))
    }
}

/// A live login session.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDto {
    id: String,
    /// `oidc` or `local`.
    kind: String,
    subject: String,
    name: String,
    email: Option<String>,
    role: Role,
    created_at: DateTime<Utc>,
    last_seen_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    /// The session making this request.
    current: bool,
}

fn session_dto(r: SessionRecord, current: Option<&str>) -> SessionDto {
    SessionDto {
        current: current == Some(r.id.as_str()),
        id: r.id,
        kind: r.kind.as_str().to_owned(),
        subject: r.subject,
        name: r.name,
        email: r.email,
        role: r.role,
        created_at: r.created_at,
        last_seen_at: r.last_seen_at,
        expires_at: r.expires_at,
    }
}

/// Every session that can still be used, newest first.
#[utoipa::path(get, path = "/api/sessions", tag = "auth",
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = Vec<SessionDto>)))]
async fn list_sessions(
    State(state): State<AppState>,
    admin: Admin,
) -> Result<ApiJson<Vec<SessionDto>>, ApiError> {
    let current = match &admin.principal().credential {
        Credential::Session(id) => Some(id.as_str()),
        _ => None,
    };
    let sessions = state.auth.live_sessions().await?;
    Ok(ApiJson(
        sessions
            .into_iter()
            .map(|s| session_dto(s, current))
            .collect(),
    ))
}

/// Ends a session (e.g. of someone who left): its cookie is refused from now on.
#[utoipa::path(delete, path = "/api/sessions/{id}", tag = "auth",
    params(("id" = String, Path, description = "Session id")),
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 204), (status = 404, body = Problem)))]
async fn revoke_session(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.auth.revoke_session(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no live session {id:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_to_is_a_local_path() {
        for ok in ["/", "/servers", "/servers/x?tab=jails#top", "/a/b%2Fc"] {
            assert_eq!(return_to(Some(ok)).expect(ok), ok);
        }
        assert_eq!(return_to(None).expect("default"), "/");
        assert_eq!(return_to(Some("")).expect("default"), "/");
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "servers",
            "/\\evil.example",
            "/a\nb",
            "javascript:alert(1)",
        ] {
            assert!(return_to(Some(bad)).is_err(), "{bad:?} accepted");
        }
    }
}
