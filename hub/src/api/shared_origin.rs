//! Where a shared ban came from, as event lists and the address page show it beside an event of
//! the shared-ban jail, and the server names those views print.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use crate::domain::ServerId;
use crate::domain::sharing::SharedBan;

/// Where a shared ban an event reports came from.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedOriginDto {
    origin_server_id: String,
    origin_server_name: Option<String>,
    origin_jail: String,
    origin_event_id: Option<i64>,
    /// `policy` or `rule`.
    source_kind: String,
    policy_id: String,
    policy_name: String,
}

impl SharedOriginDto {
    /// The origin of `ban`, with server names from `names`.
    pub(super) fn of(ban: &SharedBan, names: &HashMap<ServerId, String>) -> Self {
        Self {
            origin_server_id: ban.origin_server.to_string(),
            origin_server_name: names.get(&ban.origin_server).cloned(),
            origin_jail: ban.origin_jail.clone(),
            origin_event_id: ban.origin_event.map(|e| e.0),
            source_kind: ban.source.kind.as_str().to_owned(),
            policy_id: ban.source.id.clone(),
            policy_name: ban.source.name.clone(),
        }
    }
}

/// Every server's name by id.
pub(super) async fn server_names(state: &AppState) -> Result<HashMap<ServerId, String>, ApiError> {
    Ok(state
        .store
        .list_servers()
        .await?
        .into_iter()
        .map(|s| (s.id, s.name.to_string()))
        .collect())
}
