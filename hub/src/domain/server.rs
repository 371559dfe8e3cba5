//! Servers (fail2ban hosts) and the agents that speak for them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::names::check_name;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is not a valid identifier (expected a UUID such as 0190c6e8-1b2f-7cc4-9a55-2d6f1a0b3c4d)")]
pub struct IdError;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(uuid::Uuid);

        impl $name {
            /// A new, time-ordered identifier.
            pub fn new() -> Self {
                Self(uuid::Uuid::now_v7())
            }

            pub fn parse(raw: &str) -> Result<Self, IdError> {
                uuid::Uuid::parse_str(raw.trim()).map(Self).map_err(|_| IdError)
            }

            pub fn as_uuid(&self) -> uuid::Uuid {
                self.0
            }

            pub fn from_uuid(id: uuid::Uuid) -> Self {
                Self(id)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }
    };
}

uuid_id!(
    /// Identifies a server: a fail2ban host registered with the hub.
    ServerId
);
uuid_id!(
    /// Identifies one enrolled agent. Named in the URI SAN of the agent's client certificate.
    AgentId
);

impl AgentId {
    const URI_PREFIX: &'static str = "urn:banhub:agent:";

    /// The URI SAN that names this agent in its client certificate.
    pub fn to_uri(&self) -> String {
        format!("{}{}", Self::URI_PREFIX, self)
    }

    /// Reads an agent id back from a certificate's URI SAN.
    pub fn from_uri(uri: &str) -> Option<Self> {
        uri.strip_prefix(Self::URI_PREFIX)
            .and_then(|rest| Self::parse(rest).ok())
    }
}

/// Free-form `key=value` labels on a server, used to group and select servers.
/// Keys follow the name rule; values are at most 128 printable characters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Labels(BTreeMap<String, String>);

/// Why a label set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {key:?} {reason}")]
    Key {
        key: String,
        reason: super::NameError,
    },
    #[error("label {key:?} has a value longer than 128 characters or with control characters")]
    Value { key: String },
    #[error("at most 32 labels are allowed")]
    TooMany,
}

impl Labels {
    pub fn parse(raw: BTreeMap<String, String>) -> Result<Self, LabelError> {
        if raw.len() > 32 {
            return Err(LabelError::TooMany);
        }
        for (key, value) in &raw {
            check_name(key).map_err(|reason| LabelError::Key {
                key: key.clone(),
                reason,
            })?;
            if value.chars().count() > 128 || value.chars().any(char::is_control) {
                return Err(LabelError::Value { key: key.clone() });
            }
        }
        Ok(Self(raw))
    }

    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    pub fn into_map(self) -> BTreeMap<String, String> {
        self.0
    }
}

/// Whether a server's agent currently holds a session with the hub, or how else it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ServerStatus {
    /// Created, but no agent has enrolled yet and no direct callback has come.
    Pending,
    /// No agent, but fail2ban reports to the hub through direct callbacks.
    Reporting,
    Online,
    Offline,
}

impl ServerStatus {
    /// Whether an agent has enrolled for the server (so commands can reach it when online).
    pub fn has_agent(self) -> bool {
        matches!(self, Self::Online | Self::Offline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_id_round_trips_through_its_uri() {
        let id = AgentId::new();
        assert_eq!(AgentId::from_uri(&id.to_uri()), Some(id));
        assert_eq!(AgentId::from_uri("urn:other:x"), None);
        assert_eq!(AgentId::from_uri("urn:banhub:agent:not-a-uuid"), None);
    }

    #[test]
    fn server_id_rejects_garbage() {
        assert!(ServerId::parse("../etc/passwd").is_err());
        assert!(ServerId::parse("").is_err());
        let id = ServerId::new();
        assert_eq!(ServerId::parse(&id.to_string()), Ok(id));
    }

    #[test]
    fn labels_are_validated() {
        let ok = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
        assert!(Labels::parse(ok).is_ok());
        let bad_key = BTreeMap::from([("../x".to_owned(), "v".to_owned())]);
        assert!(matches!(
            Labels::parse(bad_key),
            Err(LabelError::Key { .. })
        ));
        let bad_value = BTreeMap::from([("k".to_owned(), "a\nb".to_owned())]);
        assert!(matches!(
            Labels::parse(bad_value),
            Err(LabelError::Value { .. })
        ));
    }
}

/// A registered server as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: ServerId,
    pub name: super::ServerName,
    pub description: String,
    pub labels: Labels,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// The agent currently enrolled for this server, if any.
    pub agent_id: Option<AgentId>,
    pub enrolled_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Last time a session of its agent was seen alive.
    pub last_seen_at: Option<chrono::DateTime<chrono::Utc>>,
    pub agent_version: Option<String>,
    pub fail2ban_version: Option<String>,
    pub hostname: Option<String>,
    /// Address the agent last connected from.
    pub last_address: Option<String>,
}

#[cfg(test)]
impl Server {
    /// A never-enrolled server named `name` carrying `labels`, for unit tests.
    pub fn example(name: &str, labels: &[(&str, &str)]) -> Self {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self {
            id: ServerId::new(),
            name: super::ServerName::parse(name).expect("a valid name"),
            description: String::new(),
            labels: Labels::parse(labels).expect("valid labels"),
            created_at: chrono::Utc::now(),
            agent_id: None,
            enrolled_at: None,
            last_seen_at: None,
            agent_version: None,
            fail2ban_version: None,
            hostname: None,
            last_address: None,
        }
    }
}

/// What an operator supplies to register a server.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub name: super::ServerName,
    pub description: String,
    pub labels: Labels,
}

/// What an agent told the hub about itself when its session started.
#[derive(Debug, Clone, Default)]
pub struct AgentFacts {
    pub agent_version: String,
    pub fail2ban_version: String,
    pub hostname: String,
    pub address: String,
}
