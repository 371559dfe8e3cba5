//! Sharing policies and shared bans: which bans of which servers are shared with which others and
//! for how long, and the shared bans the hub asks target hosts to hold on an origin's behalf. Every
//! value of these types has passed its rules; nothing here knows HTTP, gRPC or SQL.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::events::{EventId, IpOrCidr, JailName};
pub use super::jail_pattern::{JailPattern, PatternError};
use super::{Labels, Server, ServerId};

/// Longest policy name, in characters.
pub const MAX_POLICY_NAME: usize = 64;
/// Most jail patterns of one policy.
pub const MAX_JAIL_PATTERNS: usize = 32;
/// Most steps of an escalation ladder.
pub const MAX_LADDER_STEPS: usize = 16;
/// Longest shared ban a policy may ask for: one year.
pub const MAX_SHARE_SECS: u64 = 366 * 24 * 3600;
/// How long a shared ban of a policy that follows the origin's ban time lasts when the origin did
/// not say: fail2ban's own default `bantime`.
pub const ORIGIN_UNKNOWN_SECS: u64 = 600;

/// Which servers a policy names: every one, or those carrying every one of these labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServerSet {
    All,
    Labels(BTreeMap<String, String>),
}

impl ServerSet {
    pub fn matches(&self, server: &Server) -> bool {
        match self {
            Self::All => true,
            Self::Labels(wanted) => wanted
                .iter()
                .all(|(k, v)| server.labels.as_map().get(k) == Some(v)),
        }
    }

    /// Builds a set from labels already checked with [`Labels::parse`].
    pub fn labels(labels: Labels) -> Self {
        Self::Labels(labels.into_map())
    }
}

/// How long a shared ban lasts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mode")]
pub enum ShareDuration {
    /// The origin's own ban time (permanent if the origin's ban is).
    Origin,
    /// This many seconds from the origin's ban.
    Fixed { seconds: u64 },
    /// The n-th time this policy shares an address, the n-th step (the last one repeats).
    Ladder { steps: Vec<u64> },
}

/// What a sharing policy says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    pub name: String,
    pub enabled: bool,
    pub sources: ServerSet,
    /// Jails whose bans are shared; empty means every jail.
    pub jails: Vec<JailPattern>,
    /// Only bans after at least this many failures (when the origin said how many).
    pub min_failures: Option<u32>,
    pub targets: ServerSet,
    pub duration: ShareDuration,
    /// An unban at the origin lifts the shared bans it caused.
    pub unban_follows_origin: bool,
}

/// A stored sharing policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub id: String,
    pub spec: PolicySpec,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A policy's live counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyCounters {
    /// Shared bans it ever recorded (skips included).
    pub total: u64,
    /// Shared bans held now (pending or delivered, not expired).
    pub active: u64,
    /// When it last matched a ban.
    pub last_match_at: Option<DateTime<Utc>>,
}

/// What made a shared ban: a sharing policy, or a fleet rule (recidive).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShareSource {
    /// `policy` or `rule`.
    pub kind: SourceKind,
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceKind {
    Policy,
    Rule,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Policy => "policy",
            Self::Rule => "rule",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Policy, Self::Rule]
            .into_iter()
            .find(|k| k.as_str() == raw)
    }
}

/// Where a shared ban stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum SharedBanStatus {
    /// Recorded, not yet confirmed by the target's agent.
    Pending,
    /// The target's agent holds it.
    Delivered,
    /// Lifted before its expiry (an unban at the origin, or everywhere).
    Lifted,
    /// Past its expiry; the agent lifted it by itself.
    Expired,
    /// Never sent: the lockout guard refused the address.
    Skipped,
}

impl SharedBanStatus {
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Delivered,
        Self::Lifted,
        Self::Expired,
        Self::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Lifted => "lifted",
            Self::Expired => "expired",
            Self::Skipped => "skipped",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

impl fmt::Display for SharedBanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A shared ban on its way into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSharedBan {
    pub ip: IpOrCidr,
    pub target: ServerId,
    pub origin_server: ServerId,
    pub origin_jail: JailName,
    pub origin_event: Option<EventId>,
    pub source: ShareSource,
    /// The n-th time the source shares this address (1 for the first).
    pub step: u32,
    /// `None`: until lifted.
    pub expires_at: Option<DateTime<Utc>>,
    /// Why it is not sent (the guard's rule and message); `None` for a ban to deliver.
    pub skipped: Option<String>,
}

/// An unban at an origin, as it lifts shared bans: those of `ip` that `origin_jail` on
/// `origin_server` caused by a ban before `event`, of the policies whose bans follow the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginLift {
    pub event: EventId,
    pub ip: String,
    pub origin_server: ServerId,
    pub origin_jail: String,
}

/// A stored shared ban.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBan {
    pub id: i64,
    pub ip: String,
    pub target: ServerId,
    pub origin_server: ServerId,
    pub origin_jail: String,
    pub origin_event: Option<EventId>,
    pub source: ShareSource,
    pub step: u32,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// As stored; see [`SharedBan::status_at`] for what it is now.
    pub status: SharedBanStatus,
    pub skip_reason: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub lifted_at: Option<DateTime<Utc>>,
}

impl SharedBan {
    /// The status at `now`: a pending or delivered ban past its expiry is expired.
    pub fn status_at(&self, now: DateTime<Utc>) -> SharedBanStatus {
        match self.status {
            SharedBanStatus::Pending | SharedBanStatus::Delivered
                if self.expires_at.is_some_and(|at| at <= now) =>
            {
                SharedBanStatus::Expired
            }
            other => other,
        }
    }
}

/// Which shared bans to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedBanFilter {
    pub ip: Option<IpOrCidr>,
    pub target: Option<ServerId>,
    pub policy: Option<String>,
    pub status: Option<SharedBanStatus>,
}

/// What a target host is asked to change: bans to hold (address, expiry in Unix ms or 0 for until
/// lifted, reason) and addresses to lift; `full` replaces everything it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedBanSync {
    pub full: bool,
    pub bans: Vec<(String, i64, String)>,
    pub lift: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_patterns_match_names_and_globs() {
        let check = |pattern: &str, jail: &str, expected: bool| {
            let p = JailPattern::parse(pattern).expect("valid pattern");
            assert_eq!(p.matches(jail), expected, "{pattern} ~ {jail}");
        };
        check("sshd", "sshd", true);
        check("sshd", "sshd-ddos", false);
        check("ssh*", "sshd", true);
        check("ssh*", "ssh", true);
        check("*-auth", "nginx-http-auth", true);
        check("*-auth", "nginx-http-authx", false);
        check("ng?nx*", "nginx-botsearch", true);
        check("*", "anything", true);
        check("a*b*c", "aXbYbZc", true);
        check("a*b*c", "aXbYbZ", false);
    }

    #[test]
    fn jail_patterns_refuse_paths_and_reserved_jails() {
        for bad in ["", "../x", "a/b", "a b", ".hidden", &"x".repeat(65)] {
            assert_eq!(JailPattern::parse(bad), Err(PatternError::Invalid), "{bad}");
        }
        assert!(matches!(
            JailPattern::parse("banhub-shared"),
            Err(PatternError::Reserved(_))
        ));
        assert!(matches!(
            JailPattern::parse("banhub-probe"),
            Err(PatternError::Reserved(_))
        ));
        assert!(JailPattern::parse("banhub-*").is_ok());
    }

    #[test]
    fn a_ban_past_its_expiry_reads_expired() {
        let now = Utc::now();
        let ban = SharedBan {
            id: 1,
            ip: "203.0.113.7".to_owned(),
            target: ServerId::new(),
            origin_server: ServerId::new(),
            origin_jail: "sshd".to_owned(),
            origin_event: Some(EventId(1)),
            source: ShareSource {
                kind: SourceKind::Policy,
                id: "p".to_owned(),
                name: "p".to_owned(),
            },
            step: 1,
            created_at: now,
            expires_at: Some(now),
            status: SharedBanStatus::Delivered,
            skip_reason: None,
            delivered_at: Some(now),
            lifted_at: None,
        };
        assert_eq!(ban.status_at(now), SharedBanStatus::Expired);
        assert_eq!(
            ban.status_at(now - chrono::Duration::seconds(1)),
            SharedBanStatus::Delivered
        );
        let forever = SharedBan {
            expires_at: None,
            ..ban.clone()
        };
        assert_eq!(forever.status_at(now), SharedBanStatus::Delivered);
        let lifted = SharedBan {
            status: SharedBanStatus::Lifted,
            ..ban
        };
        assert_eq!(lifted.status_at(now), SharedBanStatus::Lifted);
    }
}
