//! Filter previews on a host: `PreviewFilter` to the server's agent, which runs a proposed filter
//! (or the jail's own) over the recent end of the jail's own log and answers what fail2ban would
//! ban. A preview takes the server's filter-test turn, so `fail2ban-regex` runs once per host.

use banhub_proto::rules::{FilterName, JailName};
use banhub_proto::v1::{PreviewFilter, PreviewedAddress, command, command_result::Outcome};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::control::unexpected;
use super::{Fleet, FleetError};
use crate::domain::ServerId;

/// The filter a preview runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviewSource {
    /// The jail's own filter as configured.
    JailOwn,
    /// Another filter of the host.
    Named(FilterName),
    /// A whole filter file.
    Text(String),
    /// The jail's filter with its `.local` holding this text.
    Local(String),
}

/// A preview as the operator asked for it, checked at the API's edge.
#[derive(Debug, Clone)]
pub struct PreviewInput {
    pub jail: JailName,
    pub source: PreviewSource,
    pub maxretry: Option<u32>,
    pub findtime_secs: Option<u64>,
    pub log_paths: Vec<String>,
    /// Bytes read from the end of each log file; `None`: the agent's default.
    pub max_bytes: Option<u64>,
    /// Milliseconds the preview may run; `None`: the agent's default.
    pub time_budget_ms: Option<u32>,
}

/// One log file the preview read.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewLog {
    pub path: String,
    pub bytes_read: u64,
    /// The file is longer than what was read from its end.
    pub truncated: bool,
}

/// Why an address would not be banned, or must not be: the entry that protects it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewProtection {
    /// `configured`, `hub_address`, `operator_session` (the hub's protected networks) or
    /// `ignoreip` (the jail's own `ignoreip` on the host).
    pub kind: String,
    /// The protecting network or `ignoreip` entry.
    pub entry: String,
    /// Who or what it protects (empty for `ignoreip`).
    pub note: String,
}

/// One address of a preview.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewAddress {
    pub ip: String,
    pub matches: u64,
    /// It reaches `maxretry` within `findtime`.
    pub reaches_maxretry: bool,
    /// When it first reaches `maxretry`.
    pub first_ban_at: Option<DateTime<Utc>>,
    /// The jail's `ignoreip` entry covering it on the host (then fail2ban does not ban it).
    pub ignored_by: Option<String>,
    /// The protection that covers it, hub's first, then the host's `ignoreip`; set by the hub.
    pub protected_by: Option<PreviewProtection>,
}

/// What a filter would have banned on the end of the jail's log.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterPreviewResult {
    /// The filter that ran.
    pub filter: String,
    pub logs: Vec<PreviewLog>,
    pub lines_read: u64,
    pub lines_matched: u64,
    pub first_match_at: Option<DateTime<Utc>>,
    pub last_match_at: Option<DateTime<Utc>>,
    pub maxretry: u32,
    pub findtime_secs: u64,
    /// Distinct addresses matched.
    pub addresses: u64,
    /// Addresses that reach `maxretry` within `findtime` (all of them, listed or not).
    pub would_ban_total: u64,
    /// The addresses that reach `maxretry`, most matches first (at most 1,000).
    pub would_ban: Vec<PreviewAddress>,
    /// The addresses with the most matches (at most 20).
    pub top: Vec<PreviewAddress>,
    /// The jail's `ignoreip` entries on the host.
    pub ignoreip: Vec<String>,
    /// Bounds that cut the preview short: `size`, `time`, `matches`.
    pub bounds_hit: Vec<String>,
    /// Would-be-banned addresses that a protection covers.
    pub protected_hits: u64,
}

impl Fleet {
    /// Runs a preview on the server, when its turn for filter tests comes; refused when one
    /// runs there and another waits already.
    pub async fn preview_filter(
        &self,
        server: ServerId,
        input: PreviewInput,
        by: &str,
    ) -> Result<FilterPreviewResult, FleetError> {
        let _turn = self
            .0
            .filter_tests
            .turn(server)
            .await
            .map_err(|_| FleetError::FilterTestsBusy)?;
        use banhub_proto::v1::preview_filter::Filter;
        let filter = match input.source {
            PreviewSource::JailOwn => None,
            PreviewSource::Named(name) => Some(Filter::Name(name.to_string())),
            PreviewSource::Text(text) => Some(Filter::Text(text)),
            PreviewSource::Local(text) => Some(Filter::Local(text)),
        };
        let kind = command::Kind::PreviewFilter(PreviewFilter {
            jail: input.jail.to_string(),
            filter,
            maxretry: input.maxretry,
            findtime_secs: input.findtime_secs,
            log_paths: input.log_paths,
            max_bytes: input.max_bytes.unwrap_or_default(),
            time_budget_ms: input.time_budget_ms.unwrap_or_default(),
        });
        match self.call(server, kind, "preview_filter", by).await? {
            Outcome::FilterPreview(p) => Ok(FilterPreviewResult {
                filter: p.filter,
                logs: p
                    .logs
                    .into_iter()
                    .map(|l| PreviewLog {
                        path: l.path,
                        bytes_read: l.bytes_read,
                        truncated: l.truncated,
                    })
                    .collect(),
                lines_read: p.lines_read,
                lines_matched: p.lines_matched,
                first_match_at: at(p.first_match_unix),
                last_match_at: at(p.last_match_unix),
                maxretry: p.maxretry,
                findtime_secs: p.findtime_secs,
                addresses: p.addresses,
                would_ban_total: p.would_ban_total,
                would_ban: p.would_ban.into_iter().map(address).collect(),
                top: p.top.into_iter().map(address).collect(),
                ignoreip: p.ignoreip,
                bounds_hit: p.bounds_hit,
                protected_hits: 0,
            }),
            other => Err(unexpected(&other)),
        }
    }
}

fn address(a: PreviewedAddress) -> PreviewAddress {
    PreviewAddress {
        ip: a.ip,
        matches: a.matches,
        reaches_maxretry: a.reaches_maxretry,
        first_ban_at: at(a.first_ban_unix),
        ignored_by: (!a.ignored_by.is_empty()).then_some(a.ignored_by),
        protected_by: None,
    }
}

fn at(unix: i64) -> Option<DateTime<Utc>> {
    (unix > 0)
        .then(|| DateTime::from_timestamp(unix, 0))
        .flatten()
}
