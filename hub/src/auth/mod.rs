//! Operator authentication and authorization: OIDC login, server-side sessions, the local
//! administrator, API tokens, roles (viewer, operator, admin) and the audit trail of every change.
//!
//! [`Auth`] authenticates requests (a bearer token or the session cookie), runs the logins, and keeps
//! the audit log. [`policy`] holds the per-route roles (declared on each route's OpenAPI operation as
//! `x-required-role`) and the same-origin checks; [`capability`] holds the `Viewer`, `Operator` and
//! `Admin` capabilities handlers take. Refusals are [`AuthError`]s: the HTTP layers that apply all
//! this, and turn the refusals into `ApiError` answers, are `api::access`.

mod addresses;
pub mod capability;
mod cookie;
mod error;
mod local;
mod logins;
mod oidc;
pub mod policy;
mod ratelimit;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use chrono::{DateTime, TimeDelta, Utc};
use openidconnect::url::Url;
use subtle::ConstantTimeEq as _;

pub use crate::config::{AuthConfig, AuthMode};
pub use crate::domain::auth::{
    ApiTokenRecord, AuditQuery, AuditRecord, Credential, LoginFlow, Outcome, Principal, Role,
    SessionKind, SessionRecord,
};
pub use capability::{Admin, Caller, Operator, Viewer};
pub use cookie::{LOGIN_COOKIE, LOGIN_COOKIE_PATH, SESSION_COOKIE};
pub use error::AuthError;
pub use local::INITIAL_PASSWORD_FILE;
pub use policy::AuditHandle;

use crate::pki::{random_secret, sha256_hex};
use crate::store::Store;

/// How long an OIDC login may take between the redirect to the provider and the callback.
const LOGIN_FLOW_TTL_SECS: u64 = 600;
/// Prefix of API tokens, so that they are recognisable (e.g. by secret scanners).
const TOKEN_PREFIX: &str = "bht_";

/// Authentication and the audit log; cheap to clone.
#[derive(Debug, Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: AuthConfig,
    store: Store,
    /// The listener itself speaks HTTPS.
    listener_https: bool,
    base_path: String,
    oidc: Option<oidc::Oidc>,
    limiter: ratelimit::LoginLimiter,
    decoy: tokio::sync::OnceCell<String>,
}

/// The result of looking at a request's credentials.
#[derive(Debug, Clone, Default)]
pub struct Authn {
    pub principal: Option<Principal>,
    /// Why presented credentials were not accepted (an unknown token, an expired session).
    pub refusal: Option<String>,
    /// The session cookie is dead: the answer should delete it.
    pub clear_cookie: bool,
}

/// Where the hub is reached from the browser's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct External {
    /// `scheme://host[:port]`, as browsers send it in `Origin`.
    pub origin: String,
    /// The origin and the base path, without a trailing slash.
    pub base: String,
}

/// How the HTTP listener is reached, as far as the configuration says.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// The listener itself speaks HTTPS (`http.tls`).
    pub https: bool,
    /// `http.base_path`: `""` for the root, else `/prefix`.
    pub base_path: String,
}

/// A new session: the principal and the cookie that carries it.
#[derive(Debug)]
pub struct NewSession {
    pub principal: Principal,
    pub set_cookie: HeaderValue,
}

impl Auth {
    /// Sets up authentication for `config`; in local mode, makes sure the administrator can log in
    /// (generating the initial password at first start in `data_dir`).
    pub async fn new(
        auth: &AuthConfig,
        data_dir: &Path,
        site: Site,
        store: Store,
    ) -> Result<Self, AuthError> {
        let oidc = match auth.mode {
            AuthMode::Oidc => Some(oidc::Oidc::new(&auth.oidc)?),
            AuthMode::Local => {
                local::ensure_admin(&store, &auth.local, data_dir).await?;
                None
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                limiter: ratelimit::LoginLimiter::new(
                    auth.local.max_failures,
                    Duration::from_secs(auth.local.lockout_secs),
                ),
                config: auth.clone(),
                store,
                listener_https: site.https,
                base_path: site.base_path,
                oidc,
                decoy: tokio::sync::OnceCell::new(),
            }),
        })
    }

    pub fn mode(&self) -> AuthMode {
        self.inner.config.mode
    }

    fn config(&self) -> &AuthConfig {
        &self.inner.config
    }

    /// Whether cookies get the `Secure` flag: the hub is reached over HTTPS.
    pub fn secure_cookies(&self) -> bool {
        self.inner.listener_https || self.config().public_url.starts_with("https://")
    }

    /// The hub's external origin and base URL: `auth.public_url`, or the request's `Host` with the
    /// listener's scheme and the base path.
    pub fn external(&self, headers: &HeaderMap) -> Option<External> {
        let public = &self.config().public_url;
        if !public.is_empty() {
            let url = Url::parse(public).ok()?;
            return Some(External {
                origin: url.origin().ascii_serialization(),
                base: public.clone(),
            });
        }
        let host = headers.get(header::HOST)?.to_str().ok()?;
        let scheme = if self.inner.listener_https {
            "https"
        } else {
            "http"
        };
        // Parsing checks that the Host header is a host and port, nothing more.
        let url = Url::parse(&format!("{scheme}://{host}")).ok()?;
        if url.path() != "/" || !url.username().is_empty() || url.host().is_none() {
            return None;
        }
        let origin = url.origin().ascii_serialization();
        Some(External {
            base: format!("{origin}{}", self.inner.base_path),
            origin,
        })
    }

    /// Who sent this request: a bearer token (preferred) or the session cookie; `client` is the
    /// address it came from, recorded for the lockout guard.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Result<Authn, AuthError> {
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(str::trim);
            let principal = match token {
                Some(token) => self.token_principal(token, client).await?,
                None => None,
            };
            return Ok(match principal {
                Some(principal) => Authn {
                    principal: Some(principal),
                    ..Authn::default()
                },
                None => Authn {
                    refusal: Some(
                        "the bearer token is unknown, revoked or expired (send `Authorization: \
                         Bearer <token>` with a token an admin created)"
                            .to_owned(),
                    ),
                    ..Authn::default()
                },
            });
        }
        let Some(value) = cookie::read(headers, SESSION_COOKIE) else {
            return Ok(Authn::default());
        };
        match self.session_principal(&value, client).await? {
            Some(principal) => Ok(Authn {
                principal: Some(principal),
                ..Authn::default()
            }),
            None => Ok(Authn {
                refusal: Some("the session has expired or ended; log in again".to_owned()),
                clear_cookie: true,
                ..Authn::default()
            }),
        }
    }

    async fn token_principal(
        &self,
        token: &str,
        client: Option<IpAddr>,
    ) -> Result<Option<Principal>, AuthError> {
        let bootstrap = &self.config().bootstrap_token_sha256;
        if !bootstrap.is_empty()
            && bool::from(
                sha256_hex(token.as_bytes())
                    .as_bytes()
                    .ct_eq(bootstrap.to_ascii_lowercase().as_bytes()),
            )
        {
            return Ok(Some(Principal {
                subject: "token:bootstrap".to_owned(),
                name: "bootstrap".to_owned(),
                email: None,
                role: Role::Admin,
                credential: Credential::Bootstrap,
            }));
        }
        let Some((id, secret)) = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.split_once('_'))
        else {
            return Ok(None);
        };
        let Some(record) = self.inner.store.api_token(id).await? else {
            return Ok(None);
        };
        let now = Utc::now();
        let matches = bool::from(
            sha256_hex(secret.as_bytes())
                .as_bytes()
                .ct_eq(record.secret_hash.as_bytes()),
        );
        if !matches || record.revoked_at.is_some() || record.expires_at.is_some_and(|t| t <= now) {
            return Ok(None);
        }
        let principal = Principal {
            subject: format!("token:{}", record.id),
            name: record.name,
            email: None,
            role: record.role,
            credential: Credential::Token(record.id.clone()),
        };
        // Recording every use would be a write per request; once a minute is enough to see which
        // tokens are in use, and from where.
        if record
            .last_used_at
            .is_none_or(|t| now - t > TimeDelta::seconds(60))
        {
            self.inner.store.touch_api_token(&record.id, now).await?;
            self.note_address(&principal, client).await;
        }
        Ok(Some(principal))
    }

    async fn session_principal(
        &self,
        value: &str,
        client: Option<IpAddr>,
    ) -> Result<Option<Principal>, AuthError> {
        let Some((id, secret)) = value.split_once('.') else {
            return Ok(None);
        };
        let Some(record) = self.inner.store.session(id).await? else {
            return Ok(None);
        };
        let matches = bool::from(
            sha256_hex(secret.as_bytes())
                .as_bytes()
                .ct_eq(record.secret_hash.as_bytes()),
        );
        let now = Utc::now();
        let idle = self.idle_timeout();
        if !matches
            || record.revoked_at.is_some()
            || record.expires_at <= now
            || now - record.last_seen_at >= idle
        {
            return Ok(None);
        }
        let principal = Principal {
            subject: record.subject,
            name: record.name,
            email: record.email,
            role: record.role,
            credential: Credential::Session(record.id.clone()),
        };
        // Write the last use (and the address it came from) at most every quarter of the idle
        // timeout (at most every minute).
        let touch_every = (idle / 4).min(TimeDelta::seconds(60));
        if now - record.last_seen_at >= touch_every {
            self.inner.store.touch_session(&record.id, now).await?;
            self.note_address(&principal, client).await;
        }
        Ok(Some(principal))
    }

    fn idle_timeout(&self) -> TimeDelta {
        secs(self.config().session.idle_timeout_secs)
    }

    /// Starts a session for a logged-in user.
    async fn start_session(
        &self,
        kind: SessionKind,
        subject: String,
        name: String,
        email: Option<String>,
        role: Role,
        id_token: Option<String>,
    ) -> Result<NewSession, AuthError> {
        let now = Utc::now();
        let store = &self.inner.store;
        // Logins are rare; clean up what can no longer be used while here.
        if let Err(e) = store.prune_sessions(now, now - self.idle_timeout()).await {
            tracing::warn!(error = %e, "could not prune expired sessions");
        }
        let absolute = self.config().session.absolute_timeout_secs;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let secret = random_secret();
        let record = SessionRecord {
            id: id.clone(),
            secret_hash: sha256_hex(secret.as_bytes()),
            kind,
            subject,
            name,
            email,
            role,
            id_token,
            created_at: now,
            last_seen_at: now,
            expires_at: now + secs(absolute),
            revoked_at: None,
        };
        store.insert_session(&record).await?;
        tracing::info!(session = %id, subject = %record.subject, role = %role, kind = kind.as_str(), "login");
        Ok(NewSession {
            set_cookie: cookie::set(
                SESSION_COOKIE,
                &format!("{id}.{secret}"),
                "/",
                absolute,
                self.secure_cookies(),
            ),
            principal: Principal {
                subject: record.subject,
                name: record.name,
                email: record.email,
                role,
                credential: Credential::Session(id),
            },
        })
    }

    /// A `Set-Cookie` value deleting the session cookie.
    pub fn clear_session_cookie(&self) -> HeaderValue {
        cookie::clear(SESSION_COOKIE, "/", self.secure_cookies())
    }

    /// Local mode: checks the administrator's password, with rate limiting per client address and
    /// per user name.
    #[tracing::instrument(skip_all, fields(user = username))]
    async fn open_local_session(
        &self,
        username: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<NewSession, AuthError> {
        if self.mode() != AuthMode::Local {
            return Err(AuthError::WrongMode(
                "this hub logs in through its OpenID provider: GET /auth/login".to_owned(),
            ));
        }
        let user_key = format!("user:{}", username.to_lowercase());
        let mut keys = vec![user_key.clone()];
        if let Some(ip) = client {
            keys.push(format!("ip:{ip}"));
        }
        let limiter = &self.inner.limiter;
        if let Err(retry_after_secs) = limiter.check(&keys, Instant::now()) {
            return Err(AuthError::RateLimited { retry_after_secs });
        }
        let configured = &self.config().local.username;
        let known = bool::from(username.as_bytes().ct_eq(configured.as_bytes()));
        let stored = if known {
            self.inner.store.local_password_hash(configured).await?
        } else {
            None
        };
        // A wrong user name costs the same argon2 verification as a wrong password.
        let (hash, exists) = match stored {
            Some(hash) => (hash, true),
            None => (
                self.inner
                    .decoy
                    .get_or_try_init(local::decoy_hash)
                    .await?
                    .clone(),
                false,
            ),
        };
        let verified = local::verify_password(password.to_owned(), hash).await;
        if !(verified && exists) {
            limiter.fail(&keys, Instant::now());
            return Err(AuthError::BadCredentials);
        }
        limiter.clear(&user_key);
        self.start_session(
            SessionKind::Local,
            configured.clone(),
            configured.clone(),
            None,
            Role::Admin,
            None,
        )
        .await
    }

    fn oidc(&self) -> Result<&oidc::Oidc, AuthError> {
        self.inner.oidc.as_ref().ok_or_else(|| {
            AuthError::WrongMode(
                "this hub has a local administrator, not an OpenID provider: POST /auth/login"
                    .to_owned(),
            )
        })
    }

    fn redirect_url(&self, external: &External) -> String {
        let configured = &self.config().oidc.redirect_url;
        if configured.is_empty() {
            format!("{}/auth/callback", external.base)
        } else {
            configured.clone()
        }
    }

    /// OIDC mode: the provider URL to send the browser to, and the `Set-Cookie` binding the login to
    /// this browser.
    pub async fn begin_oidc(
        &self,
        external: &External,
        return_to: &str,
    ) -> Result<(Url, HeaderValue), AuthError> {
        let oidc = self.oidc()?;
        let redirect_url = self.redirect_url(external);
        let begin = oidc.begin(&redirect_url).await?;
        let flow = LoginFlow {
            nonce: begin.nonce,
            pkce_verifier: begin.pkce_verifier,
            return_to: return_to.to_owned(),
            redirect_url,
            expires_at: Utc::now() + secs(LOGIN_FLOW_TTL_SECS),
        };
        self.inner
            .store
            .insert_login_flow(&sha256_hex(begin.state.as_bytes()), &flow)
            .await?;
        let set_cookie = cookie::set(
            LOGIN_COOKIE,
            &begin.state,
            LOGIN_COOKIE_PATH,
            LOGIN_FLOW_TTL_SECS,
            self.secure_cookies(),
        );
        Ok((begin.url, set_cookie))
    }

    /// A `Set-Cookie` value deleting the login cookie.
    pub fn clear_login_cookie(&self) -> HeaderValue {
        cookie::clear(LOGIN_COOKIE, LOGIN_COOKIE_PATH, self.secure_cookies())
    }

    /// OIDC mode: the callback. The `state` must be the one this browser's login cookie carries
    /// and a login this hub started and has not finished; the code is redeemed and the ID token
    /// verified against the login's nonce. Returns the session and where to send the browser.
    #[tracing::instrument(skip_all)]
    async fn redeem_oidc_callback(
        &self,
        callback: &Callback,
        headers: &HeaderMap,
    ) -> Result<(NewSession, String), AuthError> {
        let oidc = self.oidc()?;
        if let Some(error) = &callback.error {
            let description = callback.error_description.as_deref().unwrap_or("");
            return Err(AuthError::LoginFailed(format!(
                "the identity provider refused the login: {error} {description}"
            )));
        }
        let state = callback.state.as_deref().unwrap_or("");
        let bound = cookie::read(headers, LOGIN_COOKIE).unwrap_or_default();
        if state.is_empty() || !bool::from(state.as_bytes().ct_eq(bound.as_bytes())) {
            return Err(AuthError::LoginState(
                "the callback's state is not the one of the login this browser started; start \
                 again at /auth/login"
                    .to_owned(),
            ));
        }
        let flow = self
            .inner
            .store
            .take_login_flow(&sha256_hex(state.as_bytes()), Utc::now())
            .await?
            .ok_or_else(|| {
                AuthError::LoginState(
                    "this login is unknown, already finished or expired; start again at \
                     /auth/login"
                        .to_owned(),
                )
            })?;
        // RFC 9207: an answer naming another issuer was meant for another provider (a mix-up).
        if let Some(iss) = callback.iss.as_deref()
            && !oidc.is_issuer(iss)
        {
            return Err(AuthError::LoginFailed(format!(
                "the callback comes from the issuer {iss:?}, not from the configured provider; \
                 start again at /auth/login"
            )));
        }
        let code = callback
            .code
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| AuthError::LoginState("the callback has no code".to_owned()))?;
        let identity = oidc
            .finish(code, &flow.redirect_url, &flow.nonce, &flow.pkce_verifier)
            .await?;
        let Some(role) = oidc.role(&identity.claims) else {
            return Err(AuthError::NoRole(format!(
                "{} ({}) logged in at the provider, but no value of its `{}` claim is mapped to a \
                 banhub role (auth.oidc.role_map)",
                identity.name,
                identity.subject,
                oidc.role_claim()
            )));
        };
        let session = self
            .start_session(
                SessionKind::Oidc,
                identity.subject,
                identity.name,
                identity.email,
                role,
                Some(identity.id_token),
            )
            .await?;
        Ok((session, flow.return_to))
    }

    /// Ends the session of `principal` (if it is a session). Returns the provider's end-session URL
    /// when the session came from OIDC and the provider has one.
    async fn end_session(
        &self,
        principal: Option<&Principal>,
        external: Option<&External>,
    ) -> Result<Option<Url>, AuthError> {
        let Some(Principal {
            credential: Credential::Session(id),
            ..
        }) = principal
        else {
            return Ok(None);
        };
        let record = self.inner.store.session(id).await?;
        self.inner.store.revoke_session(id).await?;
        let (Some(oidc), Some(record), Some(external)) = (&self.inner.oidc, record, external)
        else {
            return Ok(None);
        };
        if record.kind != SessionKind::Oidc {
            return Ok(None);
        }
        let home = format!("{}/", external.base);
        Ok(oidc.logout_url(record.id_token.as_deref(), &home).await)
    }

    /// Creates an API token; returns its record and the token itself (shown once).
    pub async fn create_token(
        &self,
        name: &str,
        role: Role,
        expires_at: Option<DateTime<Utc>>,
        created_by: &str,
    ) -> Result<(ApiTokenRecord, String), AuthError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let secret = random_secret();
        let record = ApiTokenRecord {
            id: id.clone(),
            name: name.to_owned(),
            role,
            secret_hash: sha256_hex(secret.as_bytes()),
            created_by: created_by.to_owned(),
            created_at: Utc::now(),
            last_used_at: None,
            expires_at,
            revoked_at: None,
        };
        self.inner.store.insert_api_token(&record).await?;
        Ok((record, format!("{TOKEN_PREFIX}{id}_{secret}")))
    }

    pub async fn list_tokens(&self) -> Result<Vec<ApiTokenRecord>, AuthError> {
        Ok(self.inner.store.list_api_tokens().await?)
    }

    /// Revokes a token; `false` if there was no such unrevoked token.
    pub async fn revoke_token(&self, id: &str) -> Result<bool, AuthError> {
        Ok(self.inner.store.revoke_api_token(id).await?)
    }

    /// Sessions that can still be used.
    pub async fn live_sessions(&self) -> Result<Vec<SessionRecord>, AuthError> {
        let now = Utc::now();
        let idle = self.idle_timeout();
        Ok(self
            .inner
            .store
            .live_sessions(now)
            .await?
            .into_iter()
            .filter(|s| now - s.last_seen_at < idle)
            .collect())
    }

    /// Ends a session by id; `false` if there was no such live session.
    pub async fn revoke_session(&self, id: &str) -> Result<bool, AuthError> {
        Ok(self.inner.store.revoke_session(id).await?)
    }

    /// Appends to the audit log. A failure is logged, not returned: the action it records has
    /// already happened.
    pub async fn record(&self, record: AuditRecord) {
        if let Err(e) = self.inner.store.insert_audit(&record).await {
            tracing::error!(error = %e, action = %record.action, actor = %record.actor, "could not write the audit log");
        }
    }

    /// A page of the audit log, newest first, with the cursor of the next (older) page when there
    /// is one.
    pub async fn audit_page(&self, query: AuditQuery) -> Result<AuditPage, AuthError> {
        let limit = query.limit;
        // One more than asked tells whether there is a next page.
        let mut records = self
            .inner
            .store
            .audit_page(&AuditQuery {
                limit: limit + 1,
                ..query
            })
            .await?;
        let more = records.len() as u64 > limit;
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_cursor = if more {
            records.last().map(|r| r.id)
        } else {
            None
        };
        Ok(AuditPage {
            records,
            next_cursor,
        })
    }
}

/// A page of the audit log, newest first.
#[derive(Debug, Clone)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    /// The id to pass as `before` for the next (older) page; `None` on the last page.
    pub next_cursor: Option<i64>,
}

/// The query of `/auth/callback`.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Callback {
    pub code: Option<String>,
    pub state: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
    /// The issuer that answers (RFC 9207); when present, it must be the configured provider.
    pub iss: Option<String>,
}

fn secs(s: u64) -> TimeDelta {
    TimeDelta::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000))
}
