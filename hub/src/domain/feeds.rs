//! Blocklist feeds for edge firewalls: a feed's validated definition (which servers, jails and
//! policies, the thresholds an address must reach, the maximum age), its read-only tokens, and the
//! ban changes the feeds follow. Nothing here knows HTTP or SQL.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::jail_pattern::JailPattern;
use super::names::check_name;
use super::server::ServerId;

/// Longest feed name: firewall set names are short (an ipset name holds at most 31 bytes).
pub const MAX_FEED_NAME: usize = 24;
/// At most this many jail patterns, server ids or policy ids per feed.
pub const MAX_FEED_LIST: usize = 64;
/// The longest maximum age: a year.
pub const MAX_FEED_AGE_SECS: u64 = 366 * 24 * 3600;

/// Why a feed definition was refused; `field` names the body's field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FeedError {
    pub field: &'static str,
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> FeedError {
    FeedError {
        field,
        message: message.into(),
    }
}

/// A feed's name: the name rule without `.` and `@` (so `{name}.{format}` reads back one way and
/// the name is a valid nftables and ipset identifier part), at most [`MAX_FEED_NAME`] characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FeedName(String);

impl FeedName {
    pub fn parse(raw: &str) -> Result<Self, String> {
        check_name(raw).map_err(|e| e.to_string())?;
        if raw.len() > MAX_FEED_NAME {
            return Err(format!("is longer than {MAX_FEED_NAME} characters"));
        }
        if raw.contains(['.', '@']) {
            return Err("may hold letters, digits, `_` and `-` only".to_owned());
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FeedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The formats a feed is served in, each for the firewalls that read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FeedFormat {
    /// One address or network per line (pfSense and OPNsense URL table aliases).
    Txt,
    /// An nftables script for `nft -f`.
    Nft,
    /// An `ipset restore` file.
    Ipset,
    /// A MikroTik RouterOS script.
    Rsc,
}

impl FeedFormat {
    pub const ALL: [Self; 4] = [Self::Txt, Self::Nft, Self::Ipset, Self::Rsc];

    /// The file extension, which is also the format's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Txt => "txt",
            Self::Nft => "nft",
            Self::Ipset => "ipset",
            Self::Rsc => "rsc",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == raw)
    }
}

/// Which servers' bans a feed lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedServers {
    All,
    Ids(Vec<ServerId>),
    /// Servers carrying every one of these labels.
    Labels(BTreeMap<String, String>),
}

/// A feed's validated definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedSpec {
    pub name: FeedName,
    pub description: String,
    pub servers: FeedServers,
    /// Empty: every jail (the probe jail never).
    pub jails: Vec<JailPattern>,
    /// Sharing policies whose shared bans the feed lists; empty: bans of any origin.
    pub policies: Vec<String>,
    /// Bans recorded for an address on the selected servers and jails before it is listed.
    pub min_bans: u32,
    /// Distinct selected servers that banned an address before it is listed.
    pub min_servers: u32,
    /// An address whose newest ban is older than this drops out.
    pub max_age_secs: Option<u64>,
    /// Whether neighbouring entries are merged into the smallest set of CIDRs.
    pub aggregate: bool,
    pub default_format: FeedFormat,
}

/// What an admin sends to create or change a feed, before its rules are checked; also the shape
/// the store keeps, so a stored feed passes the same rules when it is read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FeedDraft {
    pub name: String,
    pub description: Option<String>,
    pub all_servers: bool,
    pub server_ids: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub jails: Vec<String>,
    pub policies: Vec<String>,
    pub min_bans: Option<u32>,
    pub min_servers: Option<u32>,
    pub max_age_secs: Option<u64>,
    pub aggregate: bool,
    pub default_format: Option<String>,
}

impl FeedSpec {
    /// The draft this definition reads back from.
    pub fn to_draft(&self) -> FeedDraft {
        let (all_servers, server_ids, labels) = match &self.servers {
            FeedServers::All => (true, Vec::new(), BTreeMap::new()),
            FeedServers::Ids(ids) => (
                false,
                ids.iter().map(ToString::to_string).collect(),
                BTreeMap::new(),
            ),
            FeedServers::Labels(labels) => (false, Vec::new(), labels.clone()),
        };
        FeedDraft {
            name: self.name.to_string(),
            description: Some(self.description.clone()),
            all_servers,
            server_ids,
            labels,
            jails: self.jails.iter().map(|j| j.as_str().to_owned()).collect(),
            policies: self.policies.clone(),
            min_bans: Some(self.min_bans),
            min_servers: Some(self.min_servers),
            max_age_secs: self.max_age_secs,
            aggregate: self.aggregate,
            default_format: Some(self.default_format.as_str().to_owned()),
        }
    }

    /// Checks every rule of a draft; the error names the first field that breaks one.
    pub fn parse(draft: FeedDraft) -> Result<Self, FeedError> {
        let name = FeedName::parse(&draft.name).map_err(|m| refuse("name", m))?;
        let description = draft.description.unwrap_or_default();
        if description.chars().count() > 500 || description.chars().any(char::is_control) {
            return Err(refuse(
                "description",
                "must be at most 500 characters without control characters",
            ));
        }
        let chosen = [
            draft.all_servers,
            !draft.server_ids.is_empty(),
            !draft.labels.is_empty(),
        ];
        let servers = match chosen {
            [true, false, false] => FeedServers::All,
            [false, true, false] => {
                let ids = list("serverIds", &draft.server_ids, |raw| {
                    ServerId::parse(raw).map_err(|e| e.to_string())
                })?;
                FeedServers::Ids(ids)
            }
            [false, false, true] => {
                let labels = super::Labels::parse(draft.labels)
                    .map_err(|e| refuse("labels", e.to_string()))?;
                FeedServers::Labels(labels.into_map())
            }
            [false, false, false] => {
                return Err(refuse(
                    "allServers",
                    "name the servers: `allServers: true`, `serverIds` or `labels`",
                ));
            }
            _ => {
                return Err(refuse(
                    "allServers",
                    "give one of `allServers: true`, `serverIds` and `labels`",
                ));
            }
        };
        let jails = list("jails", &draft.jails, |raw| {
            JailPattern::parse(raw).map_err(|e| e.to_string())
        })?;
        let policies = list("policies", &draft.policies, |raw| {
            uuid::Uuid::parse_str(raw)
                .map(|_| raw.to_owned())
                .map_err(|_| "is not a policy id".to_owned())
        })?;
        let min_bans = draft.min_bans.unwrap_or(1);
        if !(1..=1_000_000).contains(&min_bans) {
            return Err(refuse("minBans", "must be between 1 and 1000000"));
        }
        let min_servers = draft.min_servers.unwrap_or(1);
        if !(1..=10_000).contains(&min_servers) {
            return Err(refuse("minServers", "must be between 1 and 10000"));
        }
        if let Some(age) = draft.max_age_secs
            && !(60..=MAX_FEED_AGE_SECS).contains(&age)
        {
            return Err(refuse(
                "maxAgeSecs",
                format!("must be between 60 and {MAX_FEED_AGE_SECS} seconds"),
            ));
        }
        let default_format = match draft.default_format.as_deref() {
            None => FeedFormat::Txt,
            Some(raw) => FeedFormat::parse(raw)
                .ok_or_else(|| refuse("defaultFormat", "must be one of txt, nft, ipset, rsc"))?,
        };
        Ok(Self {
            name,
            description,
            servers,
            jails,
            policies,
            min_bans,
            min_servers,
            max_age_secs: draft.max_age_secs,
            aggregate: draft.aggregate,
            default_format,
        })
    }
}

fn list<T>(
    field: &'static str,
    raw: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, FeedError> {
    if raw.len() > MAX_FEED_LIST {
        return Err(refuse(
            field,
            format!("holds more than {MAX_FEED_LIST} entries"),
        ));
    }
    raw.iter()
        .map(|r| parse(r).map_err(|m| refuse(field, format!("{r:?} {m}"))))
        .collect()
}

/// A stored feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRecord {
    pub id: String,
    pub spec: FeedSpec,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A stored feed token: it reads one feed and nothing else. Only a hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTokenRecord {
    pub id: String,
    pub feed_id: String,
    pub name: String,
    pub secret_hash: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A ban or an unban as the feeds follow it: where, what, and until when it is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanChange {
    pub event_id: i64,
    pub server_id: ServerId,
    pub jail: String,
    pub net: IpNet,
    pub ban: bool,
    /// When fail2ban banned it (the event's time when the action did not say).
    pub banned_at: DateTime<Utc>,
    /// When the ban ends; `None` when it is permanent or its duration unknown (then it lasts
    /// until the unban).
    pub until: Option<DateTime<Utc>>,
}

/// A shared ban in force that a sharing policy recorded, as a feed with policies lists it: the
/// address, the server it was shared to, the origin's jail and the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyShare {
    pub net: IpNet,
    pub target: ServerId,
    pub origin_jail: String,
    pub policy_id: String,
    pub created_at: DateTime<Utc>,
    /// `None`: until lifted.
    pub until: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_names_follow_their_rule() {
        assert!(FeedName::parse("edge-1_fw").is_ok());
        assert!(FeedName::parse("edge.fw").is_err());
        assert!(FeedName::parse("a@b").is_err());
        assert!(FeedName::parse(&"a".repeat(25)).is_err());
        assert!(FeedName::parse("").is_err());
    }

    fn draft() -> FeedDraft {
        FeedDraft {
            name: "edge".to_owned(),
            all_servers: true,
            ..FeedDraft::default()
        }
    }

    #[test]
    fn drafts_are_refused_with_the_field_that_breaks_a_rule() {
        let field = |d: FeedDraft| FeedSpec::parse(d).map(|_| ()).map_err(|e| e.field);
        assert_eq!(field(draft()), Ok(()));
        assert_eq!(
            field(FeedDraft {
                name: "x y".into(),
                ..draft()
            }),
            Err("name")
        );
        assert_eq!(
            field(FeedDraft {
                all_servers: false,
                ..draft()
            }),
            Err("allServers")
        );
        assert_eq!(
            field(FeedDraft {
                server_ids: vec!["nope".into()],
                ..draft()
            }),
            Err("allServers")
        );
        assert_eq!(
            field(FeedDraft {
                all_servers: false,
                server_ids: vec!["nope".into()],
                ..draft()
            }),
            Err("serverIds")
        );
        assert_eq!(
            field(FeedDraft {
                jails: vec!["bad jail".into()],
                ..draft()
            }),
            Err("jails")
        );
        assert_eq!(
            field(FeedDraft {
                min_bans: Some(0),
                ..draft()
            }),
            Err("minBans")
        );
        assert_eq!(
            field(FeedDraft {
                max_age_secs: Some(5),
                ..draft()
            }),
            Err("maxAgeSecs")
        );
        assert_eq!(
            field(FeedDraft {
                default_format: Some("csv".into()),
                ..draft()
            }),
            Err("defaultFormat")
        );
        assert_eq!(
            field(FeedDraft {
                policies: vec!["x".into()],
                ..draft()
            }),
            Err("policies")
        );
    }
}
