//! The settings document as the store keeps it: the canonical document without secrets, and the
//! sealed secrets, with the version that orders updates. The settings service parses and unseals it.

use chrono::{DateTime, Utc};

/// The settings as stored: the canonical document (no secrets), and the sealed secrets.
#[derive(Debug, Clone)]
pub struct StoredSettings {
    pub version: u64,
    pub document: String,
    pub secrets: String,
    pub updated_at: Option<DateTime<Utc>>,
}
