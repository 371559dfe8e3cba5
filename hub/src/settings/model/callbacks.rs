//! The `callbacks` section: the callback secret policy for hosts without an agent, and its checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, refuse};

pub(super) fn default_min_secret_length() -> u32 {
    32
}

fn default_rotation_overlap() -> u32 {
    86_400
}

/// The callback secret policy: how hosts without an agent (fail2ban's action posting to
/// `POST /api/ban|unban` itself) authenticate, and how their servers' secrets are rotated
/// (`POST /api/servers/{id}/callback-secret`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallbacksDocument {
    /// Whether direct callbacks are accepted at all. Off: every `POST /api/ban|unban` is refused
    /// (403 `direct_callbacks_disabled`), whatever its secret; agents are not affected.
    #[serde(default = "super::yes")]
    pub direct_enabled: bool,
    /// Shortest secret an admin may choose by hand, 16 to 256 characters (generated secrets are
    /// 43 characters of 32 random bytes).
    #[serde(default = "default_min_secret_length")]
    pub min_secret_length: u32,
    /// After a rotation the previous secret is still accepted for this many seconds, so the host
    /// can be updated without losing bans; `0` ends it at once. At most 30 days.
    #[serde(default = "default_rotation_overlap")]
    pub rotation_overlap_secs: u32,
    /// A secret older than this many days is reported as due for rotation (`rotationDue`); it is
    /// never refused for its age, which would lose bans. `null`: no limit.
    #[serde(default)]
    pub max_age_days: Option<u32>,
}

impl Default for CallbacksDocument {
    fn default() -> Self {
        Self {
            direct_enabled: true,
            min_secret_length: default_min_secret_length(),
            rotation_overlap_secs: default_rotation_overlap(),
            max_age_days: None,
        }
    }
}

/// The checked callback secret policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackPolicy {
    pub direct_enabled: bool,
    pub min_secret_length: usize,
    pub rotation_overlap: Duration,
    pub max_age: Option<Duration>,
}

impl Default for CallbackPolicy {
    fn default() -> Self {
        Self {
            direct_enabled: true,
            min_secret_length: default_min_secret_length() as usize,
            rotation_overlap: Duration::from_secs(u64::from(default_rotation_overlap())),
            max_age: None,
        }
    }
}

/// Longest rotation overlap: 30 days.
pub const MAX_ROTATION_OVERLAP_SECS: u32 = 30 * 86_400;

pub(super) fn validate_callbacks(c: &CallbacksDocument) -> Result<CallbackPolicy, FieldError> {
    if !(16..=256).contains(&c.min_secret_length) {
        return refuse(
            "callbacks.minSecretLength",
            "must be between 16 and 256 characters",
        );
    }
    if c.rotation_overlap_secs > MAX_ROTATION_OVERLAP_SECS {
        return refuse(
            "callbacks.rotationOverlapSecs",
            format!("must be 0 to {MAX_ROTATION_OVERLAP_SECS} seconds (30 days)"),
        );
    }
    if let Some(days) = c.max_age_days
        && !(1..=3650).contains(&days)
    {
        return refuse(
            "callbacks.maxAgeDays",
            "must be 1 to 3650 days, or null for no limit",
        );
    }
    Ok(CallbackPolicy {
        direct_enabled: c.direct_enabled,
        min_secret_length: c.min_secret_length as usize,
        rotation_overlap: Duration::from_secs(u64::from(c.rotation_overlap_secs)),
        max_age: c
            .max_age_days
            .map(|d| Duration::from_secs(u64::from(d) * 86_400)),
    })
}
