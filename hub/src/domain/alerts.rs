//! What the alert worker keeps: the matches of a rule grouped into a digest (counts by jail,
//! server, country and address, plus a few sample events), and the deliveries of each digest with
//! their status. Plain data; the store persists it, the API shows it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Sample events kept per digest; the counts cover every match.
pub const MAX_SAMPLES: usize = 20;
/// Distinct addresses counted per digest; further addresses count in `otherIps`.
pub const MAX_IPS: usize = 500;

/// One ban that matched a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchSample {
    pub event_id: i64,
    pub ip: String,
    pub jail: String,
    pub server_id: String,
    /// The host name the action reported (may be empty).
    pub hostname: String,
    pub occurred_at: DateTime<Utc>,
    pub failures: u32,
    /// ISO country code of the address, when a GeoIP database knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
}

/// The matches of one rule in one digest, summed up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestSummary {
    pub by_jail: BTreeMap<String, u64>,
    /// By server id.
    pub by_server: BTreeMap<String, u64>,
    #[serde(default)]
    pub by_country: BTreeMap<String, u64>,
    /// Matches per address (at most [`MAX_IPS`] addresses).
    pub by_ip: BTreeMap<String, u64>,
    /// Matches of addresses beyond [`MAX_IPS`].
    #[serde(default)]
    pub other_ips: u64,
    /// The first matches (at most [`MAX_SAMPLES`]).
    pub samples: Vec<MatchSample>,
    pub first_at: Option<DateTime<Utc>>,
    pub last_at: Option<DateTime<Utc>>,
    /// Set on a notice: a message of the hub itself (e.g. sharing paused for a server) delivered
    /// like a digest, with no events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

impl DigestSummary {
    pub fn add(&mut self, m: &MatchSample) {
        *self.by_jail.entry(m.jail.clone()).or_default() += 1;
        *self.by_server.entry(m.server_id.clone()).or_default() += 1;
        if let Some(country) = &m.country {
            *self.by_country.entry(country.clone()).or_default() += 1;
        }
        if let Some(n) = self.by_ip.get_mut(&m.ip) {
            *n += 1;
        } else if self.by_ip.len() < MAX_IPS {
            self.by_ip.insert(m.ip.clone(), 1);
        } else {
            self.other_ips += 1;
        }
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(m.clone());
        }
        self.first_at = Some(
            self.first_at
                .map_or(m.occurred_at, |t| t.min(m.occurred_at)),
        );
        self.last_at = Some(self.last_at.map_or(m.occurred_at, |t| t.max(m.occurred_at)));
    }

    /// The addresses with the most matches, most first.
    pub fn top_ips(&self, n: usize) -> Vec<(&str, u64)> {
        let mut ips: Vec<(&str, u64)> = self.by_ip.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        ips.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        ips.truncate(n);
        ips
    }
}

/// A rule's matches within its window, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Digest {
    pub id: i64,
    pub rule_id: String,
    pub rule_name: String,
    pub opened_at: DateTime<Utc>,
    /// When it closes and its deliveries start.
    pub due_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// Matches in it.
    pub events: u64,
    pub first_event_id: i64,
    pub last_event_id: i64,
    pub summary: DigestSummary,
}

/// Where a delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Email,
    Webhook,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Webhook => "webhook",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Email, Self::Webhook]
            .into_iter()
            .find(|c| c.as_str() == raw)
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Waiting for its first attempt or for a retry (`nextAttemptAt`).
    Pending,
    /// An attempt is running.
    Sending,
    Delivered,
    /// Given up: every attempt failed, or the failure cannot pass with time.
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [Self; 4] = [Self::Pending, Self::Sending, Self::Delivered, Self::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// One message of a digest to one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub id: i64,
    pub digest_id: i64,
    pub rule_id: String,
    pub rule_name: String,
    pub channel: Channel,
    /// `email`, or the webhook's name.
    pub target: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub max_attempts: u32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// The server's answer to the successful attempt (SMTP reply, HTTP status).
    pub response: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A delivery to create when a digest closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub channel: Channel,
    pub target: String,
    pub max_attempts: u32,
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered {
        response: String,
    },
    /// Try again at `next` (Unix ms).
    Retry {
        error: String,
        next: i64,
    },
    Failed {
        error: String,
    },
}

/// A digest's matches, for the worker to add: the rule, its window, the matches.
#[derive(Debug, Clone)]
pub struct RuleMatches {
    pub rule_id: String,
    pub rule_name: String,
    pub window_ms: i64,
    pub matches: Vec<MatchSample>,
}

/// Which deliveries to list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub status: Option<DeliveryStatus>,
    pub rule_id: Option<String>,
    pub digest_id: Option<i64>,
    /// Only deliveries with a smaller id (paging, newest first).
    pub before: Option<i64>,
    pub limit: u64,
}
