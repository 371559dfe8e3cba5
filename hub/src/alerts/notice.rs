//! Notices: messages of the hub itself (sharing paused for a server by the storm breaker) sent
//! through the alert channels. A notice is stored as a digest without events, closed at once, so
//! its deliveries are sent, retried and listed like any digest's.

use chrono::Utc;

use super::Alerts;
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
