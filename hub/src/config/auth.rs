//! The `auth` section of the hub's configuration: how operators log in (`local` or `oidc`), how long
//! sessions last, and the secrets involved. Secrets are never printed: `banhub config` leaves them out
//! and `Debug` shows `[redacted]`.

use std::collections::BTreeSet;
use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};

/// Longest session the configuration accepts: 30 days.
pub const MAX_SESSION_SECS: u64 = 30 * 24 * 3600;

/// How operators log in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// One local administrator account with a password (argon2-hashed in the database).
    #[default]
    Local,
    /// An OpenID Connect provider; roles come from one of its claims.
    Oidc,
}

impl AuthMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Oidc => "oidc",
        }
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// The URL operators reach the hub at, with the base path (e.g. `https://hub.example.com/banhub`).
    /// Empty: taken from each request's `Host` header and the listener's scheme. Set it behind a
    /// reverse proxy that changes the host or terminates TLS: it decides the OIDC redirect URL, the
    /// origin the same-origin check expects and whether cookies are `Secure`.
    pub public_url: String,
    /// SHA-256 (hex) of an admin API token accepted besides those in the database, for provisioning
    /// automation before anyone has logged in. Empty: none.
    pub bootstrap_token_sha256: String,
    pub session: SessionConfig,
    pub oidc: OidcConfig,
    pub local: LocalConfig,
}

/// `[auth.session]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// A session unused for this long ends.
    pub idle_timeout_secs: u64,
    /// A session ends this long after login, used or not.
    pub absolute_timeout_secs: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            idle_timeout_secs: 8 * 3600,
            absolute_timeout_secs: 24 * 3600,
        }
    }
}

/// `[auth.oidc]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL; its discovery document is read from
    /// `<issuer_url>/.well-known/openid-configuration`.
    pub issuer_url: String,
    pub client_id: String,
    /// Set it through `BANHUB_AUTH__OIDC__CLIENT_SECRET` rather than the file.
    #[serde(skip_serializing)]
    pub client_secret: Option<Secret>,
    /// Scopes requested besides `openid`.
    pub scopes: Vec<String>,
    /// The claim holding the user's groups or roles (in the ID token or from the userinfo endpoint);
    /// dots reach into objects (`realm_access.roles`).
    pub role_claim: String,
    /// Which claim values grant which role; the highest role matched wins, no match is refused.
    pub role_map: RoleMap,
    /// The redirect URL registered at the provider. Empty: `<public_url>/auth/callback`.
    pub redirect_url: String,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            issuer_url: String::new(),
            client_id: String::new(),
            client_secret: None,
            scopes: ["email", "profile", "groups"].map(String::from).to_vec(),
            role_claim: "groups".to_owned(),
            role_map: RoleMap::default(),
            redirect_url: String::new(),
        }
    }
}

/// `[auth.oidc.role_map]`: claim values per role.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RoleMap {
    pub admin: Vec<String>,
    pub operator: Vec<String>,
    pub viewer: Vec<String>,
}

/// `[auth.local]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LocalConfig {
    /// The administrator's login name.
    pub username: String,
    /// The administrator's password, set through `BANHUB_AUTH__LOCAL__PASSWORD`. Empty: one is
    /// generated at first start and written to `<data_dir>/initial-admin-password` (never logged).
    #[serde(skip_serializing)]
    pub password: Option<Secret>,
    /// Failed logins allowed per client address and per user name within `lockout_secs`; past
    /// that, logins are refused with 429 until the oldest failure is that old.
    pub max_failures: u32,
    pub lockout_secs: u64,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            username: "admin".to_owned(),
            password: None,
            max_failures: 5,
            lockout_secs: 300,
        }
    }
}

/// A secret from the configuration: never printed, compared only for configuration equality.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

/// A rule of the `auth` section that does not hold: the field and what to do.
#[derive(Debug)]
pub struct Invalid {
    pub field: &'static str,
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> Result<(), Invalid> {
    Err(Invalid {
        field,
        reason: reason.into(),
    })
}

fn is_http_url(text: &str) -> bool {
    openidconnect::url::Url::parse(text)
        .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
}

impl AuthConfig {
    /// Checks every rule; says which field breaks which.
    pub fn validate(&self) -> Result<(), Invalid> {
        let session = &self.session;
        if !(1..=MAX_SESSION_SECS).contains(&session.idle_timeout_secs) {
            return invalid(
                "auth.session.idle_timeout_secs",
                "must be between 1 second and 30 days",
            );
        }
        if session.absolute_timeout_secs < session.idle_timeout_secs
            || session.absolute_timeout_secs > MAX_SESSION_SECS
        {
            return invalid(
                "auth.session.absolute_timeout_secs",
                "must be at least auth.session.idle_timeout_secs and at most 30 days",
            );
        }
        if !self.public_url.is_empty()
            && (!is_http_url(&self.public_url)
                || self.public_url.contains(['?', '#'])
                || self.public_url.ends_with('/'))
        {
            return invalid(
                "auth.public_url",
                "must be an http(s) URL without a trailing slash, query or fragment, e.g. \
                 https://hub.example.com or https://example.com/banhub",
            );
        }
        let hash = &self.bootstrap_token_sha256;
        if !hash.is_empty() && (hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit())) {
            return invalid(
                "auth.bootstrap_token_sha256",
                "must be 64 hexadecimal digits (e.g. `printf %s \"$TOKEN\" | sha256sum`)",
            );
        }
        let local = &self.local;
        if local.username.is_empty()
            || local.username.chars().count() > 64
            || local.username.chars().any(|c| c.is_control() || c == ':')
        {
            return invalid(
                "auth.local.username",
                "must be 1 to 64 characters without control characters or ':'",
            );
        }
        if local
            .password
            .as_ref()
            .is_some_and(|p| p.expose().len() < 12)
        {
            return invalid(
                "auth.local.password",
                "must be at least 12 characters (or unset, to have one generated)",
            );
        }
        if local.max_failures == 0 {
            return invalid("auth.local.max_failures", "must be at least 1");
        }
        if !(1..=86_400).contains(&local.lockout_secs) {
            return invalid(
                "auth.local.lockout_secs",
                "must be between 1 and 86400 seconds",
            );
        }
        if self.mode == AuthMode::Oidc {
            self.validate_oidc()?;
        }
        Ok(())
    }

    fn validate_oidc(&self) -> Result<(), Invalid> {
        let oidc = &self.oidc;
        if !is_http_url(&oidc.issuer_url) {
            return invalid(
                "auth.oidc.issuer_url",
                "must be the provider's issuer URL (http or https) when auth.mode is oidc",
            );
        }
        if oidc.client_id.is_empty() {
            return invalid("auth.oidc.client_id", "must be set when auth.mode is oidc");
        }
        if oidc.role_claim.is_empty() || oidc.role_claim.split('.').any(str::is_empty) {
            return invalid(
                "auth.oidc.role_claim",
                "must name a claim, e.g. groups or realm_access.roles",
            );
        }
        let map = &oidc.role_map;
        if map.admin.is_empty() && map.operator.is_empty() && map.viewer.is_empty() {
            return invalid(
                "auth.oidc.role_map",
                "must map at least one claim value to a role, e.g. admin = [\"banhub-admins\"]",
            );
        }
        let values: BTreeSet<&String> = map
            .admin
            .iter()
            .chain(&map.operator)
            .chain(&map.viewer)
            .collect();
        if values.iter().any(|v| v.is_empty()) {
            return invalid("auth.oidc.role_map", "claim values must not be empty");
        }
        if !oidc.redirect_url.is_empty() && !is_http_url(&oidc.redirect_url) {
            return invalid(
                "auth.oidc.redirect_url",
                "must be an http(s) URL ending in /auth/callback",
            );
        }
        if oidc.scopes.iter().any(|s| s.is_empty() || s.contains(' ')) {
            return invalid("auth.oidc.scopes", "each scope is one word");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_local_mode() {
        let config = AuthConfig::default();
        assert_eq!(config.mode, AuthMode::Local);
        config.validate().expect("valid");
    }

    #[test]
    fn oidc_mode_needs_issuer_client_and_roles() {
        let mut config = AuthConfig {
            mode: AuthMode::Oidc,
            ..AuthConfig::default()
        };
        assert_eq!(
            config.validate().expect_err("no issuer").field,
            "auth.oidc.issuer_url"
        );
        config.oidc.issuer_url = "https://idp.example.com".to_owned();
        assert_eq!(
            config.validate().expect_err("no client").field,
            "auth.oidc.client_id"
        );
        config.oidc.client_id = "banhub".to_owned();
        assert_eq!(
            config.validate().expect_err("no roles").field,
            "auth.oidc.role_map"
        );
        config.oidc.role_map.viewer = vec!["staff".to_owned()];
        config.validate().expect("valid");
    }

    #[test]
    fn timeouts_hashes_and_urls_are_checked() {
        let check = |edit: fn(&mut AuthConfig), field: &str| {
            let mut config = AuthConfig::default();
            edit(&mut config);
            assert_eq!(config.validate().expect_err(field).field, field);
        };
        check(
            |c| c.session.idle_timeout_secs = 0,
            "auth.session.idle_timeout_secs",
        );
        check(
            |c| c.session.absolute_timeout_secs = 100,
            "auth.session.absolute_timeout_secs",
        );
        check(
            |c| c.public_url = "hub.example.com".into(),
            "auth.public_url",
        );
        check(
            |c| c.public_url = "https://hub.example.com/".into(),
            "auth.public_url",
        );
        check(
            |c| c.bootstrap_token_sha256 = "abc".into(),
            "auth.bootstrap_token_sha256",
        );
        check(|c| c.local.username = String::new(), "auth.local.username");
        check(
            |c| c.local.password = Some(Secret::new("short")),
            "auth.local.password",
        );
    }

    #[test]
    fn secrets_are_never_printed() {
        let mut config = AuthConfig::default();
        config.local.password = Some(Secret::new("correct horse battery staple"));
        config.oidc.client_secret = Some(Secret::new("client-secret-value"));
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("horse") && !debug.contains("client-secret-value"),
            "{debug}"
        );
        let toml = toml::to_string(&config).expect("serializes");
        assert!(
            !toml.contains("horse") && !toml.contains("client-secret-value"),
            "{toml}"
        );
    }
}
