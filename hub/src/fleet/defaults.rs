//! Pushing fail2ban's defaults (`[DEFAULT]` bantime, findtime, maxretry, ignoreip,
//! bantime.increment, bantime.maxtime) to servers through their agents' safe editor, one result per
//! server.

use banhub_proto::v1::{WriteDefaults, command, command_result::Outcome};
use serde::Serialize;
use utoipa::ToSchema;

use super::control::unexpected;
use super::{ConfigChange, Fleet, FleetError};
use crate::domain::{Server, ServerId};
use crate::settings::Fail2banDefaults;

/// What a push did on one server.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultsPushResult {
    pub server_id: String,
    pub server_name: String,
    pub ok: bool,
    /// On success: the files written and fail2ban's reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<ConfigChange>,
    /// On failure: why (offline agent, fail2ban refused the values, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// fail2ban's own messages when it refused the configuration.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl Fleet {
    /// Writes `defaults` on one server.
    pub async fn write_defaults(
        &self,
        server: ServerId,
        defaults: &Fail2banDefaults,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let kind = command::Kind::WriteDefaults(WriteDefaults {
            bantime: defaults.bantime,
            findtime: defaults.findtime,
            maxretry: defaults.maxretry,
            set_ignoreip: defaults.ignoreip.is_some(),
            ignoreip: defaults.ignoreip.clone().unwrap_or_default(),
            bantime_increment: defaults.bantime_increment,
            bantime_maxtime: defaults.bantime_maxtime,
        });
        match self.call(server, kind, "write_defaults", by).await? {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }

    /// Writes `defaults` on every server of `servers` at once; one result per server.
    pub async fn push_defaults(
        &self,
        servers: Vec<Server>,
        defaults: &Fail2banDefaults,
        by: &str,
    ) -> Vec<DefaultsPushResult> {
        let calls = servers.into_iter().map(|server| async move {
            let result = self.write_defaults(server.id, defaults, by).await;
            let (ok, change, error, details) = match result {
                Ok(change) => (true, Some(change), None, Vec::new()),
                Err(FleetError::Agent {
                    message, details, ..
                }) => (false, None, Some(message), details),
                Err(e) => (false, None, Some(e.to_string()), Vec::new()),
            };
            DefaultsPushResult {
                server_id: server.id.to_string(),
                server_name: server.name.to_string(),
                ok,
                change,
                error,
                details,
            }
        });
        futures::future::join_all(calls).await
    }
}
