//! The test alert (`POST /api/alerts/test`): the sample digest, headed by the language's "test
//! alert" and saying what it is, sent once through one channel of the saved settings (e-mail to
//! `alerts.recipients`, or one webhook) by the same code that delivers digests, and the channel's
//! answer. At most one test per channel every [`MIN_INTERVAL`] across every replica (the turns
//! are kept in the store), so the button cannot spam.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;
use utoipa::ToSchema;

use super::preview::sample_digest;
use super::render::{self, Rendered};
use super::templates::{fill, messages};
use super::{Alerts, mail, webhook};
use crate::domain::alerts::Channel;
use crate::settings::CryptoError;
use crate::settings::model::Language;
use crate::store::StoreError;

/// The shortest time between two test alerts through one channel.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);

/// Where a test alert goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestTarget {
    /// E-mail to `alerts.recipients`.
    Email,
    /// The webhook of this name.
    Webhook(String),
}

impl TestTarget {
    fn key(&self) -> String {
        match self {
            Self::Email => "email".to_owned(),
            Self::Webhook(name) => format!("webhook:{name}"),
        }
    }
}

/// What happened to a test alert.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestAlertResult {
    pub channel: Channel,
    /// `email`, or the webhook's name.
    pub target: String,
    pub language: Language,
    pub subject: String,
    /// Whether the mail server or the webhook took it.
    pub delivered: bool,
    /// The mail server's reply or the webhook's status line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// Why it was not delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub took_ms: u64,
}

/// Why no test alert was sent.
#[derive(Debug, thiserror::Error)]
pub enum TestAlertError {
    #[error("no SMTP server is configured: save one in the settings (smtp)")]
    NoSmtp,
    #[error("no recipient: save alerts.recipients in the settings")]
    NoRecipient,
    #[error("no webhook in the saved settings is named {0:?}")]
    NoSuchWebhook(String),
    #[error("webhook {0:?} has no URL: save one in the settings")]
    NoUrl(String),
    #[error(
        "a test alert went through this channel moments ago; try again in {retry_after_secs} s"
    )]
    TooSoon { retry_after_secs: u64 },
    #[error(transparent)]
    Secret(#[from] CryptoError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Alerts {
    /// Sends a test alert to `target` in `language` (else `alerts.language`) and answers with
    /// what the channel said. A channel that is not configured is an error; one that is but
    /// refuses or cannot be reached is a result with `delivered: false`.
    #[tracing::instrument(skip_all, fields(target = ?target), err(level = "info"))]
    pub async fn send_test_alert(
        &self,
        target: TestTarget,
        language: Option<Language>,
    ) -> Result<TestAlertResult, TestAlertError> {
        let snapshot = self.0.settings.current();
        let alerts = &snapshot.settings.alerts;
        let language = language.unwrap_or(alerts.language);
        let (channel, name) = match &target {
            TestTarget::Email => {
                if snapshot.settings.smtp.is_none() {
                    return Err(TestAlertError::NoSmtp);
                }
                if alerts.recipients.is_empty() {
                    return Err(TestAlertError::NoRecipient);
                }
                (Channel::Email, "email".to_owned())
            }
            TestTarget::Webhook(name) => {
                if !alerts.webhooks.iter().any(|w| &w.name == name) {
                    return Err(TestAlertError::NoSuchWebhook(name.clone()));
                }
                (Channel::Webhook, name.clone())
            }
        };
        let rendered = test_message(&name, language);
        let started = Instant::now();
        let outcome = match &target {
            TestTarget::Email => {
                let password = self.0.settings.smtp_password(&snapshot)?;
                let smtp = snapshot
                    .settings
                    .smtp
                    .as_ref()
                    .ok_or(TestAlertError::NoSmtp)?;
                self.take_turn(&target).await?;
                let message = mail::Mail {
                    to: alerts.recipients.clone(),
                    subject: rendered.subject.clone(),
                    text: rendered.text.clone(),
                    html: Some(rendered.html.clone()),
                };
                mail::send(smtp, password.as_ref(), &message)
                    .await
                    .map(|accepted| accepted.reply)
                    .map_err(|e| e.to_string())
            }
            TestTarget::Webhook(name) => {
                let format = alerts
                    .webhooks
                    .iter()
                    .find(|w| &w.name == name)
                    .map(|w| w.format)
                    .ok_or_else(|| TestAlertError::NoSuchWebhook(name.clone()))?;
                let (url, token) = self.0.settings.webhook_secrets(&snapshot, name)?;
                let url = url.ok_or_else(|| TestAlertError::NoUrl(name.clone()))?;
                self.take_turn(&target).await?;
                webhook::post(&self.0.http, format, &url, token.as_ref(), &rendered)
                    .await
                    .map_err(|e| e.message)
            }
        };
        let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(channel = channel.as_str(), target = %name, delivered = outcome.is_ok(), "test alert sent");
        let (response, error) = match outcome {
            Ok(response) => (Some(response), None),
            Err(error) => (None, Some(error)),
        };
        Ok(TestAlertResult {
            channel,
            target: name,
            language,
            subject: rendered.subject,
            delivered: error.is_none(),
            response,
            error,
            took_ms,
        })
    }

    /// Takes the channel's turn, held in the store so every replica counts the same turns.
    async fn take_turn(&self, target: &TestTarget) -> Result<(), TestAlertError> {
        self.0
            .store
            .take_test_alert_turn(&target.key(), Utc::now(), MIN_INTERVAL)
            .await?
            .map_err(|retry_after_secs| TestAlertError::TooSoon { retry_after_secs })
    }
}

/// The test alert for the channel named `channel`: the sample digest under the language's "test
/// alert", with a line saying it is a test.
fn test_message(channel: &str, language: Language) -> Rendered {
    let m = messages(language);
    let digest = sample_digest(m.test_rule, "sshd", Utc::now());
    let mut rendered = render::render(&digest, &HashMap::new(), language);
    let note = fill(m.test_note, &[("channel", channel)]);
    rendered.text = format!("{note}\n\n{}", rendered.text);
    rendered.html = rendered.html.replacen(
        "<body>",
        &format!("<body><p><i>{}</i></p>", escape(&note)),
        1,
    );
    rendered.chat = format!("{note}\n{}", rendered.chat);
    if let Some(object) = rendered.json.as_object_mut() {
        object.insert("test".to_owned(), serde_json::Value::Bool(true));
        object.insert("note".to_owned(), serde_json::Value::String(note));
    }
    rendered
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_message_says_it_is_a_test_in_its_language() {
        let de = test_message("email", Language::De);
        assert!(
            de.subject.starts_with("[banhub] Testalarm"),
            "{}",
            de.subject
        );
        assert!(de.text.starts_with("Dies ist ein Testalarm"), "{}", de.text);
        assert_eq!(de.json["test"], true);
        let en = test_message("chat", Language::En);
        assert!(en.text.contains("sent through chat"), "{}", en.text);
        assert!(en.html.contains("<i>This is a test alert"), "{}", en.html);
    }
}
