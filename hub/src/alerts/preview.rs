//! The preview of an alert message (`POST /api/alerts/preview`): a sample digest of a rule (three
//! bans of documentation addresses in the rule's first jail on its first server) rendered in a
//! channel's format and a language, exactly as it would go out, and sent nowhere. The test alert
//! renders the same sample.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Alerts;
use super::render::{self, Rendered};
use super::webhook::{self, Payload};
use crate::domain::ServerId;
use crate::domain::alerts::{Digest, DigestSummary, MatchSample};
use crate::settings::WebhookFormat;
use crate::settings::model::Language;
use crate::store::StoreError;

/// The jail of a sample digest when the rule names none.
const SAMPLE_JAIL: &str = "sshd";
/// The server of a sample digest when the rule names none.
const SAMPLE_SERVER: &str = "web-1";

/// A channel's message format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MessageFormat {
    /// An alert e-mail: subject, plain text and HTML.
    Email,
    /// banhub's JSON document.
    Json,
    /// Slack's incoming webhook, `{"text", "blocks"}`.
    Slack,
    /// ntfy's plain text with headers.
    Ntfy,
    /// ntfy's JSON publish.
    NtfyJson,
}

impl MessageFormat {
    fn webhook(self) -> Option<WebhookFormat> {
        match self {
            Self::Email => None,
            Self::Json => Some(WebhookFormat::Json),
            Self::Slack => Some(WebhookFormat::Slack),
            Self::Ntfy => Some(WebhookFormat::Ntfy),
            Self::NtfyJson => Some(WebhookFormat::NtfyJson),
        }
    }
}

/// What to preview; what is left out is taken from a sample or the settings.
#[derive(Debug, Clone)]
pub struct PreviewRequest {
    /// The rule's name as it would head the message.
    pub rule_name: String,
    /// The server the sample bans happened on.
    pub server: Option<ServerId>,
    /// The jail the sample bans happened in.
    pub jail: Option<String>,
    pub format: MessageFormat,
    /// `None`: `alerts.language` of the saved settings.
    pub language: Option<Language>,
}

/// A message as it would go out.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    pub format: MessageFormat,
    pub language: Language,
    pub subject: String,
    /// The plain text: the e-mail's text part, ntfy's body, or the chat text of Slack.
    pub text: String,
    /// The e-mail's HTML part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// The JSON body posted (`json`, `slack`, `ntfy-json`); the topic of `ntfy-json` is shown as
    /// `<topic>`, since a webhook's URL is never shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// The headers sent with a text body (`ntfy`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Why there is no preview.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("no server has the id {0}")]
    NoSuchServer(ServerId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Alerts {
    /// Renders the sample digest of `request` without sending it.
    pub async fn preview(&self, request: PreviewRequest) -> Result<Preview, PreviewError> {
        let language = request
            .language
            .unwrap_or_else(|| self.0.settings.current().settings.alerts.language);
        let server_name = match request.server {
            None => SAMPLE_SERVER.to_owned(),
            Some(id) => self
                .0
                .store
                .get_server(id)
                .await?
                .ok_or(PreviewError::NoSuchServer(id))?
                .name
                .to_string(),
        };
        let jail = request.jail.as_deref().unwrap_or(SAMPLE_JAIL);
        let digest = sample_digest(&request.rule_name, jail, Utc::now());
        let servers = HashMap::from([(SAMPLE_SERVER.to_owned(), server_name)]);
        let rendered = render::render(&digest, &servers, language);
        Ok(preview_of(&rendered, request.format, language))
    }
}

/// `rendered` as a message of `format`.
fn preview_of(rendered: &Rendered, format: MessageFormat, language: Language) -> Preview {
    let mut preview = Preview {
        format,
        language,
        subject: rendered.subject.clone(),
        text: rendered.text.clone(),
        html: None,
        body: None,
        headers: BTreeMap::new(),
    };
    match format.webhook() {
        None => preview.html = Some(rendered.html.clone()),
        Some(webhook_format) => match webhook::payload(webhook_format, rendered, "<topic>") {
            Payload::Json(body) => {
                if webhook_format == WebhookFormat::Slack {
                    preview.text.clone_from(&rendered.chat);
                }
                preview.body = Some(body);
            }
            Payload::Text { headers, body } => {
                preview.text = body;
                preview.headers = headers
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect();
            }
        },
    }
    preview
}

/// Three bans of documentation addresses in `jail` on the sample server, the last at `now`.
pub(super) fn sample_digest(rule_name: &str, jail: &str, now: DateTime<Utc>) -> Digest {
    let bans = [
        ("203.0.113.7", 120),
        ("198.51.100.23", 60),
        ("203.0.113.7", 0),
    ];
    let mut summary = DigestSummary::default();
    for (i, (ip, secs_ago)) in bans.into_iter().enumerate() {
        summary.add(&MatchSample {
            event_id: i as i64 + 1,
            ip: ip.to_owned(),
            jail: jail.to_owned(),
            server_id: SAMPLE_SERVER.to_owned(),
            hostname: SAMPLE_SERVER.to_owned(),
            occurred_at: now - chrono::Duration::seconds(secs_ago),
            failures: 5,
            country: None,
        });
    }
    Digest {
        id: 0,
        rule_id: "preview".to_owned(),
        rule_name: rule_name.to_owned(),
        opened_at: now,
        due_at: now,
        closed_at: Some(now),
        events: bans.len() as u64,
        first_event_id: 1,
        last_event_id: bans.len() as i64,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(language: Language) -> Rendered {
        let digest = sample_digest("web bans", "nginx", Utc::now());
        render::render(&digest, &HashMap::new(), language)
    }

    #[test]
    fn every_format_previews_what_it_sends() {
        let r = rendered(Language::En);
        let email = preview_of(&r, MessageFormat::Email, Language::En);
        assert!(
            email.subject.contains("web bans: 3 bans on 1 server"),
            "{}",
            email.subject
        );
        assert!(email.html.as_deref().is_some_and(|h| h.contains("nginx")));
        let slack = preview_of(&r, MessageFormat::Slack, Language::En);
        let body = slack.body.expect("a JSON body");
        assert_eq!(body["text"], slack.text);
        assert!(body["blocks"].is_array());
        let ntfy = preview_of(&r, MessageFormat::Ntfy, Language::En);
        assert_eq!(ntfy.headers["Priority"], "high");
        assert!(ntfy.body.is_none());
        let ntfy_json = preview_of(&r, MessageFormat::NtfyJson, Language::En);
        assert_eq!(ntfy_json.body.expect("JSON")["topic"], "<topic>");
        let json = preview_of(&r, MessageFormat::Json, Language::En);
        assert_eq!(json.body.expect("JSON")["events"], 3);
    }

    #[test]
    fn the_sample_renders_in_every_language() {
        for language in Language::ALL {
            let r = rendered(language);
            let m = super::super::templates::messages(language);
            assert!(
                r.text.contains(m.by_jail),
                "{}: {}",
                language.as_str(),
                r.text
            );
            assert!(r.text.contains("203.0.113.7"), "{}", language.as_str());
            assert!(r.subject.contains("web bans"), "{}", language.as_str());
            assert!(r.html.contains(m.first_bans), "{}", language.as_str());
            assert!(r.chat.contains(m.chat_jails), "{}", language.as_str());
        }
        let de = rendered(Language::De);
        assert!(
            de.subject.contains("3 Sperren auf 1 Server"),
            "{}",
            de.subject
        );
        assert!(de.text.contains("„web bans“"), "{}", de.text);
        let ja = rendered(Language::Ja);
        assert!(ja.text.contains("サーバー別"), "{}", ja.text);
    }
}
