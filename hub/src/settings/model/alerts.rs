//! The `alerts` section: recipients, digests, retries, webhooks and rules, and their checks.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use banhub_proto::rules::{JailName, check_name};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, MAX_SECRET_BYTES, Patch, parse_address, plain, refuse};
use crate::domain::{Labels, ServerId};

/// Largest number of alert rules.
pub const MAX_RULES: usize = 100;
/// Largest number of webhook targets.
pub const MAX_WEBHOOKS: usize = 20;
/// Largest number of e-mail recipients.
pub const MAX_RECIPIENTS: usize = 50;

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
    #[serde(default = "super::yes")]
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
    /// The language of alert e-mails, chat messages and test alerts.
    #[serde(default)]
    pub language: Language,
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
            language: Language::default(),
        }
    }
}

/// A language alert messages are written in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    En,
    De,
    Fr,
    Es,
    It,
    Ja,
    Zh,
}

impl Language {
    pub const ALL: [Self; 7] = [
        Self::En,
        Self::De,
        Self::Fr,
        Self::Es,
        Self::It,
        Self::Ja,
        Self::Zh,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::De => "de",
            Self::Fr => "fr",
            Self::Es => "es",
            Self::It => "it",
            Self::Ja => "ja",
            Self::Zh => "zh",
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
    #[serde(default = "super::yes")]
    pub enabled: bool,
    /// Server ids.
    #[serde(default)]
    pub servers: Vec<String>,
    /// A label selector, as a profile's: the servers carrying every one of these labels are in
    /// scope besides those of `servers`; with both empty, every server is.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
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
    #[serde(default = "super::yes")]
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
    /// Plain text with `Title`, `Tags` and `Priority` headers, posted to the topic's URL, as ntfy
    /// takes it.
    Ntfy,
    /// ntfy's JSON publish, `{"topic", "title", "message", "tags", "priority"}`, posted to the root
    /// of the ntfy server; the topic is the last segment of the URL's path.
    #[serde(rename = "ntfy-json")]
    NtfyJson,
}

impl WebhookFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Slack => "slack",
            Self::Ntfy => "ntfy",
            Self::NtfyJson => "ntfy-json",
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
    #[serde(default, deserialize_with = "super::patch", skip_serializing)]
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
    #[serde(default, deserialize_with = "super::patch", skip_serializing)]
    #[schema(value_type = Option<String>, write_only)]
    pub token: Patch,
    /// Whether a token is stored (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub token_set: bool,
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
    pub language: Language,
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
            language: Language::default(),
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
    /// Servers carrying every one of these labels are in scope too; empty: none by labels.
    pub labels: BTreeMap<String, String>,
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

pub(super) fn validate_alerts(
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
            let parsed = check_webhook_url(url).map_err(|reason| FieldError {
                field: at("url"),
                reason,
            })?;
            if w.format == WebhookFormat::NtfyJson && ntfy_topic(&parsed).is_none() {
                return refuse(
                    at("url"),
                    "must end with the ntfy topic (1 to 64 letters, digits, `-` or `_`), e.g. \
                     https://ntfy.sh/banhub-alerts",
                );
            }
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
        let labels = Labels::parse(r.labels.clone())
            .map_err(|e| FieldError {
                field: at("labels"),
                reason: e.to_string(),
            })?
            .into_map();
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
            labels,
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
        language: a.language,
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

/// An ntfy topic URL split for ntfy's JSON publish: the server's root URL (the path without its
/// last segment) and the topic (that segment). `None` when the last segment is no topic name.
pub fn ntfy_topic(url: &reqwest::Url) -> Option<(reqwest::Url, String)> {
    let path = url.path().trim_end_matches('/');
    let (base, topic) = path.rsplit_once('/')?;
    let valid = (1..=64).contains(&topic.len())
        && topic
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return None;
    }
    let mut root = url.clone();
    root.set_path(&format!("{base}/"));
    root.set_query(None);
    root.set_fragment(None);
    Some((root, topic.to_owned()))
}

/// The host and port of a URL, to show instead of the URL itself.
pub fn url_host(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => String::new(),
    }
}
