//! Config sets on an agent: `ApplyConfigSet`, `SettleConfigSet` and `GetConfigSetStatus`, with
//! their answers as plain [`AgentChange`]s for the config-change service.

use banhub_proto::v1::{
    ApplyConfigSet, ConfigFile, ConfigSetPhase, ConfigSetState, GetConfigSetStatus,
    SettleConfigSet, command, command_result::Outcome,
};

use super::control::unexpected;
use super::{Fleet, FleetError};
use crate::domain::ServerId;
use crate::domain::config_changes::SetFile;

/// The capability an agent announces when it runs config sets.
pub const CONFIG_SET_CAPABILITY: &str = "apply_config_set";

/// Where a change stands on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentPhase {
    Pending,
    Confirmed,
    Reverted,
    /// The host holds no record of it.
    Unknown,
}

/// The agent's answer about a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChange {
    pub phase: AgentPhase,
    pub reason: String,
    /// When the agent reverts unless confirmed (0: none).
    pub deadline_unix_ms: i64,
    /// The files written, with their versions after the change.
    pub files: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

impl From<ConfigSetState> for AgentChange {
    fn from(state: ConfigSetState) -> Self {
        let phase = match state.phase() {
            ConfigSetPhase::Pending => AgentPhase::Pending,
            ConfigSetPhase::Confirmed => AgentPhase::Confirmed,
            ConfigSetPhase::Reverted => AgentPhase::Reverted,
            ConfigSetPhase::Unknown | ConfigSetPhase::Unspecified => AgentPhase::Unknown,
        };
        Self {
            phase,
            reason: state.reason,
            deadline_unix_ms: state.deadline_unix_ms,
            files: state
                .files
                .into_iter()
                .map(|f| (f.path, f.version))
                .collect(),
            warnings: state.warnings,
        }
    }
}

impl Fleet {
    /// Applies `files` on the server's agent as change `change_id`, pending until confirmed when
    /// `confirm_within_secs` > 0. An agent here that does not announce config sets is refused
    /// before anything is sent.
    pub async fn apply_config_set(
        &self,
        server: ServerId,
        change_id: &str,
        files: &[SetFile],
        confirm_within_secs: u32,
        by: &str,
    ) -> Result<AgentChange, FleetError> {
        self.require_capability(server, CONFIG_SET_CAPABILITY, "config sets")?;
        let kind = command::Kind::ApplyConfigSet(ApplyConfigSet {
            change_id: change_id.to_owned(),
            files: files
                .iter()
                .map(|f| ConfigFile {
                    path: f.path.clone(),
                    content: if f.exists {
                        f.content.clone()
                    } else {
                        String::new()
                    },
                    version: if f.version == "absent" {
                        String::new()
                    } else {
                        f.version.clone()
                    },
                    exists: f.exists,
                })
                .collect(),
            confirm_within_secs,
        });
        self.config_set_call(server, kind, "apply_config_set", by, true)
            .await
    }

    /// Confirms the change (`confirm`) or has the agent put the previous files back now.
    pub async fn settle_config_set(
        &self,
        server: ServerId,
        change_id: &str,
        confirm: bool,
        by: &str,
    ) -> Result<AgentChange, FleetError> {
        let kind = command::Kind::SettleConfigSet(SettleConfigSet {
            change_id: change_id.to_owned(),
            confirm,
        });
        self.config_set_call(server, kind, "settle_config_set", by, true)
            .await
    }

    /// What became of the change on the host.
    pub async fn config_set_status(
        &self,
        server: ServerId,
        change_id: &str,
        by: &str,
    ) -> Result<AgentChange, FleetError> {
        let kind = command::Kind::ConfigSetStatus(GetConfigSetStatus {
            change_id: change_id.to_owned(),
        });
        self.config_set_call(server, kind, "config_set_status", by, false)
            .await
    }

    async fn config_set_call(
        &self,
        server: ServerId,
        kind: command::Kind,
        label: &'static str,
        by: &str,
        writes: bool,
    ) -> Result<AgentChange, FleetError> {
        let outcome = if writes {
            self.write_call(server, kind, label, by).await?
        } else {
            self.call(server, kind, label, by).await?
        };
        match outcome {
            Outcome::ConfigSet(state) => Ok(state.into()),
            other => Err(unexpected(&other)),
        }
    }
}
