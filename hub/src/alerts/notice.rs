//! Notices: messages of the hub itself (sharing paused for a server by the storm breaker) sent
//! through the alert channels. A notice is stored as a digest without events, closed at once, so
//! its deliveries are sent, retried and listed like any digest's.

use chrono::Utc;
use serde_json::json;

use super::Alerts;
use super::render::{Rendered, escape};
use crate::domain::alerts::{Channel, Digest, DigestSummary, NewDelivery};
use crate::store::StoreError;

/// A notice to send.
#[derive(Debug, Clone)]
pub struct Notice {
    /// Stable for clients (the `rule.id` of deliveries and webhooks), e.g. `sharing-paused`.
    pub kind: &'static str,
    /// One line: the subject.
    pub title: String,
    /// What happened and what to do about it.
    pub text: String,
}

impl Alerts {
    /// Sends `notice` by e-mail (when recipients are set) and to every webhook, unless alerts are
    /// switched off. Returns the stored digest, `None` when there was nowhere to send it.
    pub async fn notify(&self, notice: Notice) -> Result<Option<Digest>, StoreError> {
        let snapshot = self.0.settings.current();
        let alerts = &snapshot.settings.alerts;
        if !alerts.enabled {
            return Ok(None);
        }
        let mut deliveries = Vec::new();
        if !alerts.recipients.is_empty() {
            deliveries.push(NewDelivery {
                channel: Channel::Email,
                target: "email".to_owned(),
                max_attempts: alerts.max_attempts,
            });
        }
        for hook in &alerts.webhooks {
            deliveries.push(NewDelivery {
                channel: Channel::Webhook,
                target: hook.name.clone(),
                max_attempts: alerts.max_attempts,
            });
        }
        if deliveries.is_empty() {
            return Ok(None);
        }
        let summary = DigestSummary {
            notice: Some(notice.text),
            ..DigestSummary::default()
        };
        let digest = self
            .0
            .store
            .record_notice(
                notice.kind,
                &notice.title,
                &summary,
                &deliveries,
                Utc::now().timestamp_millis(),
            )
            .await?;
        self.0.deliveries_due.notify_one();
        Ok(Some(digest))
    }
}

/// A notice rendered for every channel; its title is the digest's rule name.
pub(super) fn render(digest: &Digest, notice: &str) -> Rendered {
    let title = &digest.rule_name;
    Rendered {
        subject: format!("[banhub] {title}"),
        text: format!("{notice}\n\nNotice {}. Sent by banhub.\n", digest.id),
        html: format!(
            "<html><body><p><b>{}</b></p><p>{}</p><p>Notice {}. Sent by banhub.</p></body></html>",
            escape(title),
            escape(notice),
            digest.id
        ),
        chat: format!("*{title}*\n{notice}"),
        json: json!({
            "type": "banhub.alert.notice",
            "digestId": digest.id,
            "rule": {"id": digest.rule_id, "name": title},
            "notice": notice,
            "at": digest.opened_at,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_renders_its_title_and_text_escaped() {
        let digest = Digest {
            id: 7,
            rule_id: "sharing-paused".to_owned(),
            rule_name: "Sharing paused for <web-1>".to_owned(),
            opened_at: Utc::now(),
            due_at: Utc::now(),
            closed_at: Some(Utc::now()),
            events: 0,
            first_event_id: 0,
            last_event_id: 0,
            summary: DigestSummary {
                notice: Some("601 shared bans & more".to_owned()),
                ..DigestSummary::default()
            },
        };
        let rendered = super::super::render::render(&digest, &Default::default());
        assert_eq!(rendered.subject, "[banhub] Sharing paused for <web-1>");
        assert!(rendered.text.starts_with("601 shared bans & more"));
        assert!(rendered.html.contains("&lt;web-1&gt;"));
        assert!(rendered.html.contains("601 shared bans &amp; more"));
        assert_eq!(rendered.json["type"], "banhub.alert.notice");
        assert_eq!(rendered.json["rule"]["id"], "sharing-paused");
    }
}
