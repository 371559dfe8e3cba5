//! Profiles and drift through the agents: `GetConfigFiles` (a host's `.local` files, compared
//! with its profile) and `ValidateConfigSet` (a profile's files checked by fail2ban on a host,
//! nothing written).

use std::collections::BTreeMap;

use banhub_proto::v1::{
    ConfigFile, GetConfigFiles, ValidateConfigSet, command, command_result::Outcome,
};

use super::{Fleet, FleetError};
use crate::domain::ServerId;
use crate::domain::profiles::ProfileFile;

/// The capability of agents that answer `GetConfigFiles`.
pub const CONFIG_FILES_CAPABILITY: &str = "get_config_files";
/// The capability of agents that answer `ValidateConfigSet`.
pub const VALIDATE_SET_CAPABILITY: &str = "validate_config_set";

/// A host's `.local` files as its agent read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfigFiles {
    /// Logical path → text, existing files only.
    pub files: BTreeMap<String, String>,
    /// Files the agent left out, and why.
    pub warnings: Vec<String>,
    /// Whether the agent's bounds cut the list short.
    pub truncated: bool,
}

impl Fleet {
    /// `jail.local`, `jail.d/*.local` and `filter.d/*.local` of `server` (its agent's own files
    /// left out).
    pub async fn config_files(
        &self,
        server: ServerId,
        by: &str,
    ) -> Result<HostConfigFiles, FleetError> {
        let kind = command::Kind::GetConfigFiles(GetConfigFiles {});
        match self.call(server, kind, "get_config_files", by).await? {
            Outcome::ConfigFiles(found) => Ok(HostConfigFiles {
                files: found
                    .files
                    .into_iter()
                    .filter(|f| f.exists)
                    .map(|f| (f.path, f.content))
                    .collect(),
                warnings: found.warnings,
                truncated: found.truncated,
            }),
            other => Err(FleetError::Protocol(format!(
                "expected config files, got {other:?}"
            ))),
        }
    }

    /// Has `server`'s fail2ban check `files` as an edit of them would be checked; nothing is
    /// written. Returns fail2ban's warnings; a refusal is a `ValidationFailed` agent error with
    /// fail2ban's messages.
    pub async fn validate_config_set(
        &self,
        server: ServerId,
        files: &[ProfileFile],
        by: &str,
    ) -> Result<Vec<String>, FleetError> {
        let kind = command::Kind::ValidateConfigSet(ValidateConfigSet {
            files: files
                .iter()
                .map(|f| ConfigFile {
                    path: f.path.to_string(),
                    exists: f.content.is_some(),
                    content: f.content.clone().unwrap_or_default(),
                    version: String::new(),
                })
                .collect(),
        });
        match self.call(server, kind, "validate_config_set", by).await? {
            Outcome::ConfigSetValidation(report) => Ok(report.warnings),
            other => Err(FleetError::Protocol(format!(
                "expected a config set validation, got {other:?}"
            ))),
        }
    }
}
