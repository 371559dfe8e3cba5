//! The `smtp` section: the mail server alerts and test e-mails go through, and its checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, MAX_SECRET_BYTES, Patch, host_ok, plain, refuse};

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
    #[serde(default, deserialize_with = "super::patch", skip_serializing)]
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

#[derive(Debug, Clone, PartialEq)]
pub struct Smtp {
    pub host: String,
    pub port: u16,
    pub tls: TlsMode,
    pub username: Option<String>,
    pub from: lettre::message::Mailbox,
    pub timeout: Duration,
}

pub(super) fn validate_smtp(s: &SmtpDocument) -> Result<Smtp, FieldError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
