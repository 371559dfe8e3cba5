//! The settings document as the API reads and writes it ([`SettingsDocument`], camelCase JSON),
//! and the validated [`Settings`] the rest of the hub uses, built from it by [`validate`].
//!
//! Secrets (the SMTP password, each webhook's URL and token, the AbuseIPDB key) are write-only: in
//! a document they are `password` / `url` / `token` / `abuseipdbKey`, absent to keep the stored
//! value, `null` to remove it, a string to replace it; they are never serialized. The `…Set` flags (and a webhook's `urlHost`) say what
//! is stored and are ignored on input, so a client may post back what it read.
//!
//! Each section of the document is a module of its own, with its document, its checked form and
//! its checks: `smtp`, `alerts`, `events`, `geoip`, `fail2ban`, `callbacks` and `lookups`. This
//! module holds the document as a whole, [`validate`], and what the sections share.

mod alerts;
mod callbacks;
mod events;
mod fail2ban;
mod geoip;
mod lookups;
mod smtp;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::domain::ServerId;

pub use alerts::{
    AlertRule, Alerts, AlertsDocument, Language, MAX_RECIPIENTS, MAX_RULES, MAX_WEBHOOKS,
    RepeatOffenderDocument, RuleDocument, Spike, SpikeDocument, Webhook, WebhookDocument,
    WebhookFormat, check_webhook_url, ntfy_topic, url_host,
};
pub use callbacks::{CallbackPolicy, CallbacksDocument, MAX_ROTATION_OVERLAP_SECS};
pub use events::EventsDocument;
pub use fail2ban::{
    DefaultsDocument, Fail2banDefaults, Fail2banDocument, MAX_IGNOREIP, validate_defaults,
};
pub use geoip::{GeoipDocument, GeoipKind};
pub use lookups::{DEFAULT_ABUSEIPDB, DEFAULT_RDAP_BOOTSTRAP, Lookups, LookupsDocument};
pub use smtp::{Smtp, SmtpDocument, TlsMode, parse_address};

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
    #[serde(default)]
    pub lookups: LookupsDocument,
}

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
    /// The ASN database of the address page.
    pub asn_path: Option<PathBuf>,
    pub defaults: Fail2banDefaults,
    pub callbacks: CallbackPolicy,
    pub lookups: Lookups,
}

/// A secret's slot name, the associated data it is sealed with and its key in the stored map.
pub fn smtp_password_slot() -> String {
    "smtp.password".to_owned()
}

pub fn abuseipdb_key_slot() -> String {
    "lookups.abuseipdbKey".to_owned()
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

/// Reads the GeoIP database of a kind at a path and says why it cannot be used. The reader belongs
/// to the alerts, which look countries up; `app` hands it to the settings service.
pub type GeoipCheck = fn(&Path, GeoipKind) -> Result<(), String>;

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
        Some(s) => Some(smtp::validate_smtp(s)?),
    };
    let alerts = alerts::validate_alerts(
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
    let retention_days = events::validate_retention(&doc.events)?;
    let (geoip_path, asn_path) = geoip::validate_geoip(&doc.geoip, check_files)?;
    let defaults = validate_defaults(&doc.fail2ban.defaults, "fail2ban.defaults")?;
    let callbacks = callbacks::validate_callbacks(&doc.callbacks)?;
    let lookups = lookups::validate_lookups(&doc.lookups)?;
    Ok(Settings {
        smtp,
        alerts,
        retention_days,
        geoip_path,
        asn_path,
        defaults,
        callbacks,
        lookups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<Settings, FieldError> {
        let mut doc: SettingsDocument = serde_json::from_value(json).expect("a document");
        validate(&mut doc, &|_| true, Some(|_, _| Ok(())))
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
    fn rules_get_ids_and_keep_them() {
        let mut doc: SettingsDocument = serde_json::from_value(serde_json::json!({
            "alerts": {"webhooks": [{"name": "w", "format": "ntfy", "url": "http://127.0.0.1:9/t"}],
                       "rules": [{"name": "r", "email": false, "webhooks": ["w"]}]}
        }))
        .expect("doc");
        let first = validate(&mut doc, &|_| true, Some(|_, _| Ok(()))).expect("valid");
        let id = doc.alerts.rules[0].id.clone().expect("an id was given");
        assert_eq!(first.alerts.rules[0].id.to_string(), id);
        let again = validate(&mut doc, &|_| true, Some(|_, _| Ok(()))).expect("valid");
        assert_eq!(again.alerts.rules[0].id, first.alerts.rules[0].id);
    }
}
