//! The `events` section: how long ban events are kept.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, refuse};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventsDocument {
    /// Ban events older than this many days are pruned; `0` keeps them forever; `null` uses the
    /// hub's configuration (`events.retention_days`).
    #[serde(default)]
    pub retention_days: Option<u32>,
}

/// The retention in days, at most a hundred years (`0` keeps events forever).
pub(super) fn validate_retention(doc: &EventsDocument) -> Result<Option<u32>, FieldError> {
    match doc.retention_days {
        Some(days) if days > 36_500 => refuse(
            "events.retentionDays",
            "must be at most 36500 days (0 keeps events forever)",
        ),
        other => Ok(other),
    }
}
