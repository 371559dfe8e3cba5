//! The settings document as the API reads and writes it ([`SettingsDocument`], camelCase JSON),
//! and the validated [`Settings`] the rest of the hub uses, built from it by [`validate`].
//!
//! Secrets (the SMTP password, each webhook's URL and token) are write-only: in a document they
//! are `password` / `url` / `token`, absent to keep the stored value, `null` to remove it, a string
//! to replace it; they are never serialized. The `…Set` flags (and a webhook's `urlHost`) say what
//! is stored and are ignored on input, so a client may post back what it read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_proto::rules::{IpOrCidr, JailName, check_name};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::domain::ServerId;

/// Largest number of alert rules.
pub const MAX_RULES: usize = 100;
/// Largest number of webhook targets.
pub const MAX_WEBHOOKS: usize = 20;
/// Largest number of e-mail recipients.
pub const MAX_RECIPIENTS: usize = 50;
/// Largest number of `ignoreip` entries pushed to fail2ban.
pub const MAX_IGNOREIP: usize = 512;
/// Longest secret accepted, in bytes.
pub const MAX_SECRET_BYTES: usize = 2048;

/// A write-only value: absent keeps what is stored, `null` removes it, a string replaces it.
pub type Patch = Option<Option<String>>;

fn patch<'de, D: Deserializer<'de>>(d: D) -> Result<Patch, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn yes() -> bool {
    true
}

/// Every setting, as read with `GET /api/settings` and written with `POST /api/settings`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsDocument {
    /// The version read (GET); the version edited from (POST, required there unless an
    /// `If-Match` header carries it). A POST from an older version is refused with 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// When the settings were last saved (ignored on input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
    /// The mail server alerts and test e-mails go through; `null` for none.
    #[serde(default)]
    pub smtp: Option<SmtpDocument>,
    #[serde(default)]
    pub alerts: AlertsDocument,
    #[serde(default)]
    pub events: EventsDocument,
    #[serde(default)]
    pub geoip: GeoipDocument,
    #[serde(default)]
    pub fail2ban: Fail2banDocument,
    #[serde(default)]
    pub callbacks: CallbacksDocument,
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plain text (only for a relay on the same host or a test server).
    None,
    /// Plain connection upgraded with STARTTLS, which the server must offer (port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
}

fn default_smtp_port() -> u16 {
    587
}

fn default_smtp_timeout() -> u32 {
    15
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SmtpDocument {
    /// Host name or address of the mail server.
    pub host: String,
    #[serde(default = "default_smtp_port")]
    pub port: u16,
    #[serde(default)]
    pub tls: TlsMode,
    /// For SMTP authentication; `null` sends no credentials.
    #[serde(default)]
    pub username: Option<String>,
    /// Write-only.
    #[serde(default, deserialize_with = "patch", skip_serializing)]
    #[schema(value_type = Option<String>, write_only)]
    pub password: Patch,
    /// Whether a password is stored (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub password_set: bool,
    /// Sender, e.g. `banhub <banhub@example.org>`.
    pub from: String,
    /// Bound on connecting and on each SMTP exchange, 1 to 300 seconds.
    #[serde(default = "default_smtp_timeout")]
    pub timeout_secs: u32,
}

fn default_digest_window() -> u32 {
    60
}

fn default_max_attempts() -> u32 {
    5
}

fn default_retry_initial() -> u32 {
    30
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertsDocument {
    /// Off: no rule is evaluated (events arriving meanwhile are never alerted on).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Who gets alert e-mails (and test e-mails sent without `to`).
    #[serde(default)]
    pub recipients: Vec<String>,
    /// Matches of one rule within this many seconds of its first match go out as one digest.
    #[serde(default = "default_digest_window")]
    pub digest_window_secs: u32,
    /// Attempts per delivery before it is reported failed, 1 to 20.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Wait before the first retry, doubled for each further one (at most an hour).
    #[serde(default = "default_retry_initial")]
    pub retry_initial_secs: u32,
    #[serde(default)]
    pub rules: Vec<RuleDocument>,
    #[serde(default)]
    pub webhooks: Vec<WebhookDocument>,
}

impl Default for AlertsDocument {
    fn default() -> Self {
        Self {
            enabled: true,
            recipients: Vec::new(),
            digest_window_secs: default_digest_window(),
            max_attempts: default_max_attempts(),
            retry_initial_secs: default_retry_initial(),
            rules: Vec::new(),
            webhooks: Vec::new(),
        }
    }
}

/// An alert rule: every ban event that passes all of its conditions matches. Empty lists match
/// anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleDocument {
    /// Assigned by the hub when absent; keep it when editing a rule.
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Server ids.
    #[serde(default)]
    pub servers: Vec<String>,
    #[serde(default)]
    pub jails: Vec<String>,
    /// ISO 3166 country codes of the banned address; needs `geoip.databasePath`.
    #[serde(default)]
    pub countries: Vec<String>,
    /// Only addresses banned at least this often (all servers, within the event retention).
    #[serde(default)]
    pub repeat_offender: Option<RepeatOffenderDocument>,
    /// Only while the rule's other conditions matched at least `bans` bans within `windowSecs`.
    #[serde(default)]
    pub spike: Option<SpikeDocument>,
    /// Send to `alerts.recipients`.
    #[serde(default = "yes")]
    pub email: bool,
    /// Names of `alerts.webhooks` to post to.
    #[serde(default)]
    pub webhooks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RepeatOffenderDocument {
    pub min_bans: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpikeDocument {
    pub bans: u32,
    pub window_secs: u32,
}

/// What a webhook's body looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// banhub's own JSON document.
    Json,
    /// `{"text": …}`, as Slack-style incoming webhooks (Slack, Mattermost, Rocket.Chat) take it.
    Slack,
    /// Plain text with `Title`, `Tags` and `Priority` headers, as ntfy takes it.
    Ntfy,
}

impl WebhookFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Slack => "slack",
            Self::Ntfy => "ntfy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookDocument {
    /// Rules name the webhook by this.
    pub name: String,
    pub format: WebhookFormat,
    /// Write-only (it often carries a token in its path): `http://` or `https://`.
    #[serde(default, deserialize_with = "patch", skip_serializing)]
    #[schema(value_type = Option<String>, write_only)]
    pub url: Patch,
    /// Whether a URL is stored (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub url_set: bool,
    /// The host (and port) of the stored URL, to recognize it (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub url_host: Option<String>,
    /// Write-only; sent as `Authorization: Bearer <token>`.
    #[serde(default, deserialize_with = "patch", skip_serializing)]
    #[schema(value_type = Option<String>, write_only)]
    pub token: Patch,
    /// Whether a token is stored (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub token_set: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventsDocument {
    /// Ban events older than this many days are pruned; `0` keeps them forever; `null` uses the
    /// hub's configuration (`events.retention_days`).
    #[serde(default)]
    pub retention_days: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeoipDocument {
    /// Absolute path of a MaxMind-format country (or city) database, e.g.
    /// `/var/lib/GeoIP/GeoLite2-Country.mmdb`; `null` for none.
    #[serde(default)]
    pub database_path: Option<String>,
}

fn default_min_secret_length() -> u32 {
    32
}

fn default_rotation_overlap() -> u32 {
    86_400
}

/// The callback secret policy: how hosts without an agent (fail2ban's action posting to
/// `POST /api/ban|unban` itself) authenticate, and how their servers' secrets are rotated
/// (`POST /api/servers/{id}/callback-secret`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallbacksDocument {
    /// Whether direct callbacks are accepted at all. Off: every `POST /api/ban|unban` is refused
    /// (403 `direct_callbacks_disabled`), whatever its secret; agents are not affected.
    #[serde(default = "yes")]
    pub direct_enabled: bool,
    /// Shortest secret an admin may choose by hand, 16 to 256 characters (generated secrets are
    /// 43 characters of 32 random bytes).
    #[serde(default = "default_min_secret_length")]
    pub min_secret_length: u32,
    /// After a rotation the previous secret is still accepted for this many seconds, so the host
    /// can be updated without losing bans; `0` ends it at once. At most 30 days.
    #[serde(default = "default_rotation_overlap")]
    pub rotation_overlap_secs: u32,
    /// A secret older than this many days is reported as due for rotation (`rotationDue`); it is
    /// never refused for its age, which would lose bans. `null`: no limit.
    #[serde(default)]
    pub max_age_days: Option<u32>,
}

impl Default for CallbacksDocument {
    fn default() -> Self {
        Self {
            direct_enabled: true,
            min_secret_length: default_min_secret_length(),
            rotation_overlap_secs: default_rotation_overlap(),
            max_age_days: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fail2banDocument {
    /// Written to each host's `[DEFAULT]` by `POST /api/settings/fail2ban-defaults/push`.
    #[serde(default)]
    pub defaults: DefaultsDocument,
}

/// fail2ban's defaults for every jail; `null` leaves a key as the host has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultsDocument {
    /// Seconds an address stays banned; `-1` bans for good.
    #[serde(default)]
    pub bantime: Option<i64>,
    /// Seconds within which `maxretry` failures lead to a ban.
    #[serde(default)]
    pub findtime: Option<u64>,
    #[serde(default)]
    pub maxretry: Option<u32>,
    /// Addresses, networks or host names never banned.
    #[serde(default)]
    pub ignoreip: Option<Vec<String>>,
    /// Ban repeat offenders for longer each time (`bantime.increment`).
    #[serde(default)]
    pub bantime_increment: Option<bool>,
    /// Longest ban when `bantimeIncrement` is on, in seconds (`bantime.maxtime`).
    #[serde(default)]
    pub bantime_maxtime: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Validated settings
// ---------------------------------------------------------------------------------------------

/// A setting that breaks its rule: `field` is its JSON path (`alerts.rules[0].jails[1]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

fn refuse<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError {
        field: field.into(),
        reason: reason.into(),
    })
}

/// Every setting, checked. Secrets are not here: they are opened when needed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub smtp: Option<Smtp>,
    pub alerts: Alerts,
    /// Overrides `events.retention_days` of the hub's configuration.
    pub retention_days: Option<u32>,
    pub geoip_path: Option<PathBuf>,
    pub defaults: Fail2banDefaults,
    pub callbacks: CallbackPolicy,
}

/// The checked callback secret policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackPolicy {
    pub direct_enabled: bool,
    pub min_secret_length: usize,
    pub rotation_overlap: Duration,
    pub max_age: Option<Duration>,
}

impl Default for CallbackPolicy {
    fn default() -> Self {
        Self {
            direct_enabled: true,
            min_secret_length: default_min_secret_length() as usize,
            rotation_overlap: Duration::from_secs(u64::from(default_rotation_overlap())),
            max_age: None,
        }
    }
}

/// Longest rotation overlap: 30 days.
pub const MAX_ROTATION_OVERLAP_SECS: u32 = 30 * 86_400;

fn validate_callbacks(c: &CallbacksDocument) -> Result<CallbackPolicy, FieldError> {
    if !(16..=256).contains(&c.min_secret_length) {
        return refuse(
            "callbacks.minSecretLength",
            "must be between 16 and 256 characters",
        );
    }
    if c.rotation_overlap_secs > MAX_ROTATION_OVERLAP_SECS {
        return refuse(
            "callbacks.rotationOverlapSecs",
            format!("must be 0 to {MAX_ROTATION_OVERLAP_SECS} seconds (30 days)"),
        );
    }
    if let Some(days) = c.max_age_days
        && !(1..=3650).contains(&days)
    {
        return refuse(
            "callbacks.maxAgeDays",
            "must be 1 to 3650 days, or null for no limit",
        );
    }
    Ok(CallbackPolicy {
        direct_enabled: c.direct_enabled,
        min_secret_length: c.min_secret_length as usize,
        rotation_overlap: Duration::from_secs(u64::from(c.rotation_overlap_secs)),
        max_age: c
            .max_age_days
            .map(|d| Duration::from_secs(u64::from(d) * 86_400)),
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct Smtp {
    pub host: String,
    pub port: u16,
    pub tls: TlsMode,
    pub username: Option<String>,
    pub from: lettre::message::Mailbox,
    pub timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Alerts {
    pub enabled: bool,
    pub recipients: Vec<lettre::Address>,
    pub digest_window: Duration,
    pub max_attempts: u32,
    pub retry_initial: Duration,
    pub rules: Vec<AlertRule>,
    pub webhooks: Vec<Webhook>,
}

impl Default for Alerts {
    fn default() -> Self {
        Self {
            enabled: true,
            recipients: Vec::new(),
            digest_window: Duration::from_secs(u64::from(default_digest_window())),
            max_attempts: default_max_attempts(),
            retry_initial: Duration::from_secs(u64::from(default_retry_initial())),
            rules: Vec::new(),
            webhooks: Vec::new(),
        }
    }
}

/// A checked alert rule.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRule {
    pub id: uuid::Uuid,
    pub name: String,
    pub enabled: bool,
    pub servers: BTreeSet<ServerId>,
    pub jails: BTreeSet<JailName>,
    /// Upper-case ISO 3166 alpha-2 codes.
    pub countries: BTreeSet<String>,
    pub repeat_offender: Option<u32>,
    pub spike: Option<Spike>,
    pub email: bool,
    pub webhooks: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spike {
    pub bans: u32,
    pub window: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub name: String,
    pub format: WebhookFormat,
}

/// fail2ban's `[DEFAULT]` keys banhub manages; `None` leaves a key alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fail2banDefaults {
    /// Seconds, or `-1` for permanent bans.
    pub bantime: Option<i64>,
    pub findtime: Option<u64>,
    pub maxretry: Option<u32>,
    pub ignoreip: Option<Vec<String>>,
    pub bantime_increment: Option<bool>,
    pub bantime_maxtime: Option<u64>,
}

impl Fail2banDefaults {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A secret's slot name, the associated data it is sealed with and its key in the stored map.
pub fn smtp_password_slot() -> String {
    "smtp.password".to_owned()
}

pub fn webhook_url_slot(name: &str) -> String {
    format!("webhook:{name}:url")
}

pub fn webhook_token_slot(name: &str) -> String {
    format!("webhook:{name}:token")
}

/// Whether a text is free of control characters and at most `max` characters.
fn plain(text: &str, max: usize) -> bool {
    text.chars().count() <= max && !text.chars().any(char::is_control)
}

/// Checks a host name or address: letters, digits, dots and dashes, or an IP literal.
fn host_ok(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|label| !label.is_empty() && label.len() <= 63 && !label.starts_with('-'))
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// Reads the GeoIP database at a path and says why it cannot be used. The reader belongs to the
/// alerts, which look countries up; `app` hands it to the settings service.
pub type GeoipCheck = fn(&Path) -> Result<(), String>;

/// Checks `doc` (secrets aside) and builds the settings from it. Rules without an id get one.
/// `server_exists` says whether a rule's server is registered; with `check_files`, the files named
/// (the GeoIP database) must exist now and be read by it.
pub fn validate(
    doc: &mut SettingsDocument,
    server_exists: &dyn Fn(ServerId) -> bool,
    check_files: Option<GeoipCheck>,
) -> Result<Settings, FieldError> {
    let smtp = match &doc.smtp {
        None => None,
        Some(s) => Some(validate_smtp(s)?),
    };
    let alerts = validate_alerts(
        &mut doc.alerts,
        server_exists,
        doc.geoip.database_path.is_some(),
    )?;
    if alerts.enabled {
        let mailing = alerts.rules.iter().any(|r| r.enabled && r.email);
        if mailing && alerts.recipients.is_empty() {
            return refuse(
                "alerts.recipients",
                "a rule sends e-mail, so at least one recipient is needed (or turn `email` off in \
                 the rules)",
            );
        }
        if mailing && smtp.is_none() {
            return refuse(
                "smtp",
                "a rule sends e-mail, so an SMTP server is needed (or turn `email` off in the rules)",
            );
        }
    }
    let retention_days = match doc.events.retention_days {
        Some(days) if days > 36_500 => {
            return refuse(
                "events.retentionDays",
                "must be at most 36500 days (0 keeps events forever)",
            );
        }
        other => other,
    };
    let geoip_path = match &doc.geoip.database_path {
        None => None,
        Some(raw) => {
            let path = PathBuf::from(raw);
            if !path.is_absolute() || raw.chars().any(char::is_control) {
                return refuse("geoip.databasePath", "must be an absolute path");
            }
            if let Some(read_geoip) = check_files {
                if !path.is_file() {
                    return refuse(
                        "geoip.databasePath",
                        format!("{raw} is not a readable file on the hub"),
                    );
                }
                // Read it now, so a wrong file is refused here rather than found out when a
                // rule by country silently never matches.
                read_geoip(&path).map_err(|reason| FieldError {
                    field: "geoip.databasePath".to_owned(),
                    reason,
                })?;
            }
            Some(path)
        }
    };
    let defaults = validate_defaults(&doc.fail2ban.defaults, "fail2ban.defaults")?;
    let callbacks = validate_callbacks(&doc.callbacks)?;
    Ok(Settings {
        smtp,
        alerts,
        retention_days,
        geoip_path,
        defaults,
        callbacks,
    })
}

fn validate_smtp(s: &SmtpDocument) -> Result<Smtp, FieldError> {
    let host = s.host.trim();
    if !host_ok(host) {
        return refuse(
            "smtp.host",
            "must be a host name (letters, digits, dots, dashes) or an IP address",
        );
    }
    if s.port == 0 {
        return refuse("smtp.port", "must be between 1 and 65535");
    }
    if let Some(user) = &s.username
        && (user.is_empty() || !plain(user, 256))
    {
        return refuse(
            "smtp.username",
            "must be 1 to 256 characters without control characters, or null",
        );
    }
    if let Some(Some(password)) = &s.password
        && (password.is_empty() || password.len() > MAX_SECRET_BYTES)
    {
        return refuse(
            "smtp.password",
            format!("must be 1 to {MAX_SECRET_BYTES} bytes, or null to remove it"),
        );
    }
    let from: lettre::message::Mailbox = s.from.trim().parse().map_err(|_| FieldError {
        field: "smtp.from".to_owned(),
        reason: "must be an e-mail address, optionally with a name: `banhub <hub@example.org>`"
            .to_owned(),
    })?;
    if !(1..=300).contains(&s.timeout_secs) {
        return refuse("smtp.timeoutSecs", "must be between 1 and 300 seconds");
    }
    Ok(Smtp {
        host: host.to_owned(),
        port: s.port,
        tls: s.tls,
        username: s.username.clone(),
        from,
        timeout: Duration::from_secs(u64::from(s.timeout_secs)),
    })
}

/// Checks one e-mail address.
pub fn parse_address(raw: &str, field: &str) -> Result<lettre::Address, FieldError> {
    raw.trim().parse().map_err(|_| FieldError {
        field: field.to_owned(),
        reason: format!("{raw:?} is not an e-mail address"),
    })
}

fn validate_alerts(
    a: &mut AlertsDocument,
    server_exists: &dyn Fn(ServerId) -> bool,
    geoip: bool,
) -> Result<Alerts, FieldError> {
    if a.recipients.len() > MAX_RECIPIENTS {
        return refuse(
            "alerts.recipients",
            format!("at most {MAX_RECIPIENTS} recipients"),
        );
    }
    let mut recipients = Vec::new();
    for (i, raw) in a.recipients.iter().enumerate() {
        let address = parse_address(raw, &format!("alerts.recipients[{i}]"))?;
        if !recipients.contains(&address) {
            recipients.push(address);
        }
    }
    if !(1..=86_400).contains(&a.digest_window_secs) {
        return refuse(
            "alerts.digestWindowSecs",
            "must be between 1 and 86400 seconds",
        );
    }
    if !(1..=20).contains(&a.max_attempts) {
        return refuse("alerts.maxAttempts", "must be between 1 and 20");
    }
    if !(1..=3600).contains(&a.retry_initial_secs) {
        return refuse(
            "alerts.retryInitialSecs",
            "must be between 1 and 3600 seconds",
        );
    }
    if a.webhooks.len() > MAX_WEBHOOKS {
        return refuse(
            "alerts.webhooks",
            format!("at most {MAX_WEBHOOKS} webhooks"),
        );
    }
    let mut webhooks: Vec<Webhook> = Vec::new();
    for (i, w) in a.webhooks.iter().enumerate() {
        let at = |f: &str| format!("alerts.webhooks[{i}].{f}");
        if check_name(&w.name).is_err() {
            return refuse(
                at("name"),
                "must be 1 to 64 letters, digits, `.`, `_`, `@` or `-`, starting with a letter or digit",
            );
        }
        if webhooks.iter().any(|o| o.name == w.name) {
            return refuse(at("name"), format!("{:?} is used twice", w.name));
        }
        if let Some(Some(url)) = &w.url {
            check_webhook_url(url).map_err(|reason| FieldError {
                field: at("url"),
                reason,
            })?;
        }
        if let Some(Some(token)) = &w.token
            && (token.is_empty()
                || token.len() > MAX_SECRET_BYTES
                || token.chars().any(char::is_control))
        {
            return refuse(
                at("token"),
                format!(
                    "must be 1 to {MAX_SECRET_BYTES} bytes without control characters, or null"
                ),
            );
        }
        webhooks.push(Webhook {
            name: w.name.clone(),
            format: w.format,
        });
    }
    if a.rules.len() > MAX_RULES {
        return refuse("alerts.rules", format!("at most {MAX_RULES} rules"));
    }
    let mut rules: Vec<AlertRule> = Vec::new();
    for (i, r) in a.rules.iter_mut().enumerate() {
        let at = |f: &str| format!("alerts.rules[{i}].{f}");
        let id = match &r.id {
            None => uuid::Uuid::now_v7(),
            Some(raw) => uuid::Uuid::parse_str(raw).map_err(|_| FieldError {
                field: at("id"),
                reason: "must be the id the hub gave the rule (a UUID), or absent for a new rule"
                    .to_owned(),
            })?,
        };
        if rules.iter().any(|o| o.id == id) {
            return refuse(at("id"), "two rules have this id");
        }
        r.id = Some(id.to_string());
        let name = r.name.trim();
        if name.is_empty() || !plain(name, 100) {
            return refuse(
                at("name"),
                "must be 1 to 100 characters without control characters",
            );
        }
        let mut servers = BTreeSet::new();
        for (j, raw) in r.servers.iter().enumerate() {
            let field = format!("alerts.rules[{i}].servers[{j}]");
            let id = ServerId::parse(raw).map_err(|e| FieldError {
                field: field.clone(),
                reason: e.to_string(),
            })?;
            if !server_exists(id) {
                return refuse(field, format!("no server has the id {id}"));
            }
            servers.insert(id);
        }
        let mut jails = BTreeSet::new();
        for (j, raw) in r.jails.iter().enumerate() {
            let jail = JailName::parse(raw).map_err(|e| FieldError {
                field: format!("alerts.rules[{i}].jails[{j}]"),
                reason: format!("{raw:?} {e}"),
            })?;
            jails.insert(jail);
        }
        let mut countries = BTreeSet::new();
        for (j, raw) in r.countries.iter().enumerate() {
            let code = raw.trim().to_ascii_uppercase();
            if code.len() != 2 || !code.chars().all(|c| c.is_ascii_uppercase()) {
                return refuse(
                    format!("alerts.rules[{i}].countries[{j}]"),
                    format!("{raw:?} is not a two-letter ISO 3166 country code"),
                );
            }
            countries.insert(code);
        }
        // Stored as they match: upper case, each once.
        r.countries = countries.iter().cloned().collect();
        if !countries.is_empty() && !geoip {
            return refuse(
                at("countries"),
                "matching by country needs a GeoIP database: set geoip.databasePath",
            );
        }
        let repeat_offender = match &r.repeat_offender {
            None => None,
            Some(ro) if (2..=1_000_000).contains(&ro.min_bans) => Some(ro.min_bans),
            Some(_) => {
                return refuse(
                    at("repeatOffender.minBans"),
                    "must be between 2 and 1000000",
                );
            }
        };
        let spike = match &r.spike {
            None => None,
            Some(s) => {
                if !(2..=1_000_000).contains(&s.bans) {
                    return refuse(at("spike.bans"), "must be between 2 and 1000000");
                }
                if !(1..=86_400).contains(&s.window_secs) {
                    return refuse(
                        at("spike.windowSecs"),
                        "must be between 1 and 86400 seconds",
                    );
                }
                Some(Spike {
                    bans: s.bans,
                    window: Duration::from_secs(u64::from(s.window_secs)),
                })
            }
        };
        let mut targets = Vec::new();
        for (j, name) in r.webhooks.iter().enumerate() {
            if !webhooks.iter().any(|w| &w.name == name) {
                return refuse(
                    format!("alerts.rules[{i}].webhooks[{j}]"),
                    format!("no webhook in alerts.webhooks is named {name:?}"),
                );
            }
            if !targets.contains(name) {
                targets.push(name.clone());
            }
        }
        if !r.email && targets.is_empty() {
            return refuse(
                at("webhooks"),
                "the rule sends nowhere: turn `email` on or name a webhook",
            );
        }
        rules.push(AlertRule {
            id,
            name: name.to_owned(),
            enabled: r.enabled,
            servers,
            jails,
            countries,
            repeat_offender,
            spike,
            email: r.email,
            webhooks: targets,
        });
    }
    Ok(Alerts {
        enabled: a.enabled,
        recipients,
        digest_window: Duration::from_secs(u64::from(a.digest_window_secs)),
        max_attempts: a.max_attempts,
        retry_initial: Duration::from_secs(u64::from(a.retry_initial_secs)),
        rules,
        webhooks,
    })
}

/// A webhook URL: `http` or `https`, with a host, at most 2048 bytes. Returns why not.
pub fn check_webhook_url(raw: &str) -> Result<reqwest::Url, String> {
    if raw.len() > 2048 {
        return Err("must be at most 2048 bytes".to_owned());
    }
    let url = reqwest::Url::parse(raw).map_err(|e| format!("is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must start with http:// or https://".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password; use `token`".to_owned());
    }
    Ok(url)
}

/// The host and port of a URL, to show instead of the URL itself.
pub fn url_host(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => String::new(),
    }
}

/// A longest ban or window: ten years.
const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Checks fail2ban defaults; `prefix` is the path of the object (`fail2ban.defaults`).
pub fn validate_defaults(
    d: &DefaultsDocument,
    prefix: &str,
) -> Result<Fail2banDefaults, FieldError> {
    let at = |f: &str| format!("{prefix}.{f}");
    if let Some(bantime) = d.bantime
        && bantime != -1
        && !(1..=MAX_SECONDS as i64).contains(&bantime)
    {
        return refuse(
            at("bantime"),
            format!("must be 1 to {MAX_SECONDS} seconds, or -1 for permanent bans"),
        );
    }
    if let Some(findtime) = d.findtime
        && !(1..=MAX_SECONDS).contains(&findtime)
    {
        return refuse(
            at("findtime"),
            format!("must be 1 to {MAX_SECONDS} seconds"),
        );
    }
    if let Some(maxretry) = d.maxretry
        && !(1..=1000).contains(&maxretry)
    {
        return refuse(at("maxretry"), "must be between 1 and 1000");
    }
    if let Some(maxtime) = d.bantime_maxtime
        && !(1..=MAX_SECONDS).contains(&maxtime)
    {
        return refuse(
            at("bantimeMaxtime"),
            format!("must be 1 to {MAX_SECONDS} seconds"),
        );
    }
    let ignoreip = match &d.ignoreip {
        None => None,
        Some(list) => {
            if list.len() > MAX_IGNOREIP {
                return refuse(at("ignoreip"), format!("at most {MAX_IGNOREIP} entries"));
            }
            let mut out: Vec<String> = Vec::new();
            for (i, raw) in list.iter().enumerate() {
                let entry = raw.trim();
                let ok = IpOrCidr::parse(entry).is_ok()
                    || entry.parse::<ipnet::IpNet>().is_ok()
                    || entry.parse::<std::net::IpAddr>().is_ok()
                    || host_ok(entry) && entry.chars().any(|c| c.is_ascii_alphabetic());
                if !ok {
                    return refuse(
                        format!("{prefix}.ignoreip[{i}]"),
                        format!("{raw:?} is not an address, a network (CIDR) or a host name"),
                    );
                }
                if entry
                    .parse::<ipnet::IpNet>()
                    .is_ok_and(banhub_proto::rules::covers_everything)
                {
                    return refuse(
                        format!("{prefix}.ignoreip[{i}]"),
                        format!("{raw:?} covers every address: it would switch banning off"),
                    );
                }
                if !out.iter().any(|e| e == entry) {
                    out.push(entry.to_owned());
                }
            }
            Some(out)
        }
    };
    Ok(Fail2banDefaults {
        bantime: d.bantime,
        findtime: d.findtime,
        maxretry: d.maxretry,
        ignoreip,
        bantime_increment: d.bantime_increment,
        bantime_maxtime: d.bantime_maxtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<Settings, FieldError> {
        let mut doc: SettingsDocument = serde_json::from_value(json).expect("a document");
        validate(&mut doc, &|_| true, Some(|_| Ok(())))
    }

    fn refused(json: serde_json::Value, field: &str) {
        match parse(json.clone()) {
            Err(e) => assert_eq!(e.field, field, "{json}: {e}"),
            Ok(s) => panic!("{json} was accepted: {s:?}"),
        }
    }

    #[test]
    fn an_empty_document_is_the_defaults() {
        let settings = parse(serde_json::json!({})).expect("defaults");
        assert_eq!(settings, Settings::default());
    }

    #[test]
    fn a_full_document_is_accepted() {
        let s = parse(serde_json::json!({
            "smtp": {"host": "mail.example.org", "port": 465, "tls": "tls", "username": "u",
                     "password": "p", "from": "banhub <hub@example.org>"},
            "alerts": {"recipients": ["ops@example.org"], "digestWindowSecs": 5,
                       "webhooks": [{"name": "chat", "format": "slack", "url": "https://hooks.example.org/x"}],
                       "rules": [{"name": "ssh", "jails": ["sshd"], "webhooks": ["chat"],
                                  "repeatOffender": {"minBans": 3}, "spike": {"bans": 10, "windowSecs": 60}}]},
            "events": {"retentionDays": 30},
            "fail2ban": {"defaults": {"bantime": -1, "findtime": 600, "maxretry": 3,
                                      "ignoreip": ["127.0.0.1/8", "::1", "office.example.org"],
                                      "bantimeIncrement": true}}
        }))
        .expect("valid");
        let smtp = s.smtp.expect("smtp");
        assert_eq!((smtp.port, smtp.tls), (465, TlsMode::Tls));
        assert_eq!(s.alerts.rules[0].repeat_offender, Some(3));
        assert_eq!(s.retention_days, Some(30));
        assert_eq!(s.defaults.maxretry, Some(3));
    }

    #[test]
    fn bad_values_name_their_field() {
        let smtp = serde_json::json!({"host": "mail.example.org", "from": "hub@example.org"});
        refused(
            serde_json::json!({"smtp": {"host": "bad host", "from": "a@b.c"}}),
            "smtp.host",
        );
        refused(
            serde_json::json!({"smtp": {"host": "h", "port": 0, "from": "a@b.c"}}),
            "smtp.port",
        );
        refused(
            serde_json::json!({"smtp": {"host": "h", "from": "nobody"}}),
            "smtp.from",
        );
        refused(
            serde_json::json!({"smtp": {"host": "h", "from": "a@b.c", "timeoutSecs": 0}}),
            "smtp.timeoutSecs",
        );
        refused(
            serde_json::json!({"smtp": smtp, "alerts": {"recipients": ["x"]}}),
            "alerts.recipients[0]",
        );
        refused(
            serde_json::json!({"alerts": {"rules": [{"name": "r"}]}}),
            "alerts.recipients",
        );
        refused(
            serde_json::json!({"alerts": {"recipients": ["a@b.c"], "rules": [{"name": "r"}]}}),
            "smtp",
        );
        refused(
            serde_json::json!({"smtp": smtp, "alerts": {"recipients": ["a@b.c"],
                "rules": [{"name": "r", "jails": ["ok", "../x"]}]}}),
            "alerts.rules[0].jails[1]",
        );
        refused(
            serde_json::json!({"alerts": {"rules": [{"name": "r", "email": false}]}}),
            "alerts.rules[0].webhooks",
        );
        refused(
            serde_json::json!({"alerts": {"rules": [{"name": "r", "email": false, "webhooks": ["nope"]}]}}),
            "alerts.rules[0].webhooks[0]",
        );
        refused(
            serde_json::json!({"alerts": {"webhooks": [{"name": "w", "format": "json", "url": "ftp://x"}]}}),
            "alerts.webhooks[0].url",
        );
        refused(
            serde_json::json!({"alerts": {"rules": [{"name": "r", "email": false, "countries": ["DE"]}]}}),
            "alerts.rules[0].countries",
        );
        refused(
            serde_json::json!({"alerts": {"rules": [{"name": "r", "email": false, "spike": {"bans": 1, "windowSecs": 5}}]}}),
            "alerts.rules[0].spike.bans",
        );
        refused(
            serde_json::json!({"fail2ban": {"defaults": {"maxretry": 0}}}),
            "fail2ban.defaults.maxretry",
        );
        refused(
            serde_json::json!({"fail2ban": {"defaults": {"bantime": -2}}}),
            "fail2ban.defaults.bantime",
        );
        refused(
            serde_json::json!({"fail2ban": {"defaults": {"ignoreip": ["10.0.0.0/8", "a b"]}}}),
            "fail2ban.defaults.ignoreip[1]",
        );
        for everything in ["0.0.0.0/0", "::/0", "::ffff:0:0/96"] {
            refused(
                serde_json::json!({"fail2ban": {"defaults": {"ignoreip": ["10.0.0.0/8", everything]}}}),
                "fail2ban.defaults.ignoreip[1]",
            );
        }
        refused(
            serde_json::json!({"events": {"retentionDays": 40000}}),
            "events.retentionDays",
        );
        refused(
            serde_json::json!({"geoip": {"databasePath": "relative.mmdb"}}),
            "geoip.databasePath",
        );
        refused(
            serde_json::json!({"callbacks": {"minSecretLength": 8}}),
            "callbacks.minSecretLength",
        );
        refused(
            serde_json::json!({"callbacks": {"rotationOverlapSecs": 2_592_001}}),
            "callbacks.rotationOverlapSecs",
        );
        refused(
            serde_json::json!({"callbacks": {"maxAgeDays": 0}}),
            "callbacks.maxAgeDays",
        );
    }

    #[test]
    fn secrets_are_never_serialized_and_patches_read_three_ways() {
        let doc: SmtpDocument = serde_json::from_value(serde_json::json!({
            "host": "h", "from": "a@b.c", "password": "hunter2", "passwordSet": false
        }))
        .expect("doc");
        assert_eq!(doc.password, Some(Some("hunter2".to_owned())));
        let text = serde_json::to_string(&doc).expect("json");
        assert!(!text.contains("hunter2"), "{text}");
        let cleared: SmtpDocument = serde_json::from_value(
            serde_json::json!({"host": "h", "from": "a@b.c", "password": null}),
        )
        .expect("doc");
        assert_eq!(cleared.password, Some(None));
        let kept: SmtpDocument =
            serde_json::from_value(serde_json::json!({"host": "h", "from": "a@b.c"})).expect("doc");
        assert_eq!(kept.password, None);
    }

    #[test]
    fn rules_get_ids_and_keep_them() {
        let mut doc: SettingsDocument = serde_json::from_value(serde_json::json!({
            "alerts": {"webhooks": [{"name": "w", "format": "ntfy", "url": "http://127.0.0.1:9/t"}],
                       "rules": [{"name": "r", "email": false, "webhooks": ["w"]}]}
        }))
        .expect("doc");
        let first = validate(&mut doc, &|_| true, Some(|_| Ok(()))).expect("valid");
        let id = doc.alerts.rules[0].id.clone().expect("an id was given");
        assert_eq!(first.alerts.rules[0].id.to_string(), id);
        let again = validate(&mut doc, &|_| true, Some(|_| Ok(()))).expect("valid");
        assert_eq!(again.alerts.rules[0].id, first.alerts.rules[0].id);
    }
}
