//! Validated names. A value of these types has passed its rules; nothing else reaches storage or agents.
//! The rule itself lives in `banhub_proto::rules`, shared with the agent, which checks it again.

use std::fmt;

pub use banhub_proto::rules::{NameError, check_name};

/// The operator-chosen name of a server, unique in the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerName(String);

impl ServerName {
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        check_name(raw)?;
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
