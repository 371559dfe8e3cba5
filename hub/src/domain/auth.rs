//! What authentication produces and authorization consumes: roles, the principal behind a request,
//! and the records the store keeps for sessions, API tokens and the audit log.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A role; each includes the ones below it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything.
    Viewer,
    /// Also bans and unbans addresses.
    Operator,
    /// Also changes servers, configuration, settings and tokens, and reads the audit log.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// This role and every role it includes, lowest first.
    pub fn implied(self) -> Vec<Role> {
        Self::ALL.into_iter().filter(|r| *r <= self).collect()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a principal proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A browser session (cookie); the session id.
    Session(String),
    /// An API token from the database; the token id.
    Token(String),
    /// The bootstrap token of `auth.bootstrap_token_sha256`.
    Bootstrap,
}

impl Credential {
    /// `session`, `token` or `bootstrap`, as the audit log records it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Session(_) => "session",
            Self::Token(_) => "token",
            Self::Bootstrap => "bootstrap",
        }
    }
}

/// Who is asking: an authenticated user or API token, with its role.
#[derive(Debug, Clone)]
pub struct Principal {
    /// Stable identifier: the OIDC `sub`, the local user name, or `token:<id>`.
    pub subject: String,
    /// Display name.
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    pub credential: Credential,
}

impl Principal {
    /// What commands to agents carry as `requested_by`, and what agents log: readable and unique
    /// enough to find the person (the e-mail address when there is one).
    pub fn requested_by(&self) -> String {
        match &self.credential {
            Credential::Session(_) => self.email.clone().unwrap_or_else(|| self.subject.clone()),
            Credential::Token(_) | Credential::Bootstrap => {
                format!("token:{}", self.name)
            }
        }
    }
}

/// Where a session came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    Oidc,
    Local,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oidc => "oidc",
            Self::Local => "local",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "oidc" => Some(Self::Oidc),
            "local" => Some(Self::Local),
            _ => None,
        }
    }
}

/// A stored session.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub id: String,
    pub secret_hash: String,
    pub kind: SessionKind,
    pub subject: String,
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    /// The provider's ID token, kept as the `id_token_hint` of an RP-initiated logout.
    pub id_token: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A stored API token (only the hash of its secret).
#[derive(Debug, Clone)]
pub struct ApiTokenRecord {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub secret_hash: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// An OIDC login in progress, between `/auth/login` and `/auth/callback`.
#[derive(Debug, Clone)]
pub struct LoginFlow {
    pub nonce: String,
    pub pkce_verifier: String,
    pub return_to: String,
    pub redirect_url: String,
    pub expires_at: DateTime<Utc>,
}

/// How a recorded action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It was done (2xx, 3xx).
    Ok,
    /// It was allowed but failed (4xx other than a refusal, 5xx).
    Failed,
    /// The caller was not allowed to do it.
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
            Self::Denied => "denied",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ok" => Some(Self::Ok),
            "failed" => Some(Self::Failed),
            "denied" => Some(Self::Denied),
            _ => None,
        }
    }
}

/// One state-changing action, as recorded.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// Assigned by the store; 0 before.
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The principal's subject, or the user name tried for a failed login.
    pub actor: String,
    pub actor_name: String,
    /// `session`, `token`, `bootstrap`, or `anonymous` for a failed login.
    pub actor_kind: String,
    /// What was done: `METHOD /route/{template}` or a login event such as `login`.
    pub action: String,
    /// The request path as sent.
    pub path: String,
    /// The server it was about, if any.
    pub server_id: Option<String>,
    /// The HTTP status of the answer.
    pub status: u16,
    pub outcome: Outcome,
    /// What the handler added (e.g. the address banned), as a JSON object.
    pub detail: serde_json::Map<String, serde_json::Value>,
    pub client_addr: Option<String>,
}

/// Filters and paging of the audit log.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries older than this id (the previous page's last).
    pub before: Option<i64>,
    pub limit: u64,
    pub actor: Option<String>,
    pub server_id: Option<String>,
}
