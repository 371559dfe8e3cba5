//! Control of fail2ban through the agents: one method per command kind, turning validated domain
//! input into a protocol command and the agent's answer into a plain result type. The result types
//! serialize as the REST API's response bodies (camelCase JSON), so the API needs no third copy.

use std::collections::BTreeMap;

use banhub_proto::rules::{FilterName, IpOrCidr, JailName};
use banhub_proto::v1::{
    self as pb, FileEdit, GetIgnoreList, GetJailConfig, GetStatus, JailToggle, ListBanned,
    ListFilters, ListJails, LogTail, Restart, RestartMode, SetBan, SetIgnoreList, SetJailsEnabled,
    TestFilter, WriteJailConfig, command, command_result::Outcome,
};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::{Fleet, FleetError};
use crate::domain::ServerId;

/// Counters of one running jail.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailCounters {
    pub name: String,
    pub currently_failed: u64,
    pub total_failed: u64,
    pub currently_banned: u64,
    pub total_banned: u64,
    /// Log files the jail watches (empty for the systemd journal backend).
    pub file_list: Vec<String>,
    /// Journal matches of the systemd backend.
    pub journal_matches: Vec<String>,
}

/// Every running jail of one server with its counters.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub fail2ban_version: String,
    /// Time fail2ban took to answer every status query.
    pub fail2ban_latency_ms: f64,
    pub jails: Vec<JailCounters>,
}

/// One banned address.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BannedIp {
    pub ip: String,
    pub banned_at: Option<DateTime<Utc>>,
    /// When the ban ends; absent when unknown or permanent.
    pub expires_at: Option<DateTime<Utc>>,
    pub permanent: bool,
}

/// A page of a jail's banned addresses.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BannedPage {
    pub jail: String,
    /// Addresses matching the search.
    pub total: u64,
    pub offset: u32,
    pub limit: u32,
    pub items: Vec<BannedIp>,
}

/// What a ban or unban changed.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BanOutcome {
    pub ip: String,
    /// False when the address was already banned (ban) or not banned (unban).
    pub changed: bool,
    pub jails: Vec<String>,
}

/// A jail of the effective configuration.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailSummary {
    pub name: String,
    pub enabled: bool,
    pub running: bool,
    pub filter: String,
    pub backend: String,
    pub log_paths: Vec<String>,
    pub actions: Vec<String>,
    pub settings: BTreeMap<String, String>,
    /// What fail2ban runs, by setting; empty when the jail does not run.
    pub running_settings: BTreeMap<String, String>,
    /// Settings fail2ban runs differently from what the files say; empty when they agree.
    pub drift: Vec<SettingDrift>,
}

/// A setting a running jail runs differently from its files.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingDrift {
    /// fail2ban's name of the setting: `actions`, `ignoreip`, `ignorecommand`, `maxretry`,
    /// `findtime`, `bantime` or `logpath`.
    pub setting: String,
    /// What the files say, normalized like `running_value`.
    pub file_value: String,
    pub running_value: String,
}

/// The running values and drift of an agent's `RunningState` (none when the jail does not run).
fn running_state(state: Option<pb::RunningState>) -> (BTreeMap<String, String>, Vec<SettingDrift>) {
    let state = state.unwrap_or_default();
    let drift = state
        .drift
        .into_iter()
        .map(|d| SettingDrift {
            setting: d.setting,
            file_value: d.file_value,
            running_value: d.running_value,
        })
        .collect();
    (state.settings.into_iter().collect(), drift)
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailList {
    pub jails: Vec<JailSummary>,
    /// What the agent's configuration reader noticed.
    pub warnings: Vec<String>,
}

/// A file written and its new version.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileVersion {
    pub path: String,
    pub version: String,
}

/// The result of a validated configuration change.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigChange {
    pub files: Vec<FileVersion>,
    /// Jails enabled in the configuration that do not run after the reload.
    pub failed_jails: Vec<String>,
    pub message: String,
}

/// A configuration file as the editor sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFile {
    /// Logical path inside the fail2ban configuration, e.g. `jail.d/sshd.local`.
    pub path: String,
    pub content: String,
    /// Send this back when writing; empty when the file does not exist.
    pub version: String,
    pub exists: bool,
}

/// A jail's override, its filter and its effective settings.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailConfig {
    pub jail: String,
    pub enabled: bool,
    pub running: bool,
    pub jail_override: Option<ConfigFile>,
    pub filter: String,
    /// The distribution's filter file (read-only).
    pub filter_conf: Option<ConfigFile>,
    /// The editable local filter file.
    pub filter_local: Option<ConfigFile>,
    pub effective: BTreeMap<String, String>,
    /// What fail2ban runs, by setting; empty when the jail does not run.
    pub running_settings: BTreeMap<String, String>,
    /// Settings fail2ban runs differently from what the files say; empty when they agree.
    pub drift: Vec<SettingDrift>,
}

/// New content for one file, with the version it was edited from.
#[derive(Debug, Clone)]
pub struct Edit {
    pub content: String,
    pub expected_version: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchedLine {
    /// 0-based index into the lines sent.
    pub index: u32,
    pub line: String,
    pub ip: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegexHits {
    pub index: u32,
    pub regex: String,
    pub hits: u64,
}

/// What `fail2ban-regex` found.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterTestResult {
    pub matched: Vec<MatchedLine>,
    pub ips: Vec<String>,
    pub regex_hits: Vec<RegexHits>,
    pub lines: u64,
    pub matched_count: u64,
    pub missed: u64,
    pub ignored: u64,
}

/// Which filter to test.
#[derive(Debug, Clone)]
pub enum FilterSource {
    Named(FilterName),
    Text(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum RestartKind {
    /// Re-read the configuration (new and changed jails, filters, actions).
    Reload,
    /// Also restart every jail.
    Restart,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartResult {
    pub ok: bool,
    pub mode: RestartKind,
    pub running_jails: Vec<String>,
    pub failed_jails: Vec<String>,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogTailResult {
    pub path: String,
    pub lines: Vec<String>,
}

/// A jail's (or the global) `ignoreip` list.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnoreListView {
    pub jail: Option<String>,
    /// As configured in the file that holds it.
    pub entries: Vec<String>,
    /// As fail2ban applies it, defaults included.
    pub effective: Vec<String>,
    pub path: String,
    /// Send this back when writing.
    pub version: String,
}

pub(super) fn unexpected(outcome: &Outcome) -> FleetError {
    FleetError::Protocol(format!("an answer of the wrong kind: {outcome:?}"))
}

fn time(unix: i64) -> Option<DateTime<Utc>> {
    (unix > 0)
        .then(|| DateTime::from_timestamp(unix, 0))
        .flatten()
}

fn config_file(file: Option<pb::ConfigFile>) -> Option<ConfigFile> {
    file.map(|f| ConfigFile {
        path: f.path,
        content: f.content,
        version: f.version,
        exists: f.exists,
    })
}

/// The agent's account of a change to fail2ban's files, as the fleet reports it.
impl From<pb::ConfigChange> for ConfigChange {
    fn from(change: pb::ConfigChange) -> Self {
        Self {
            files: change
                .files
                .into_iter()
                .map(|f| FileVersion {
                    path: f.path,
                    version: f.version,
                })
                .collect(),
            failed_jails: change.failed_jails,
            message: change.message,
        }
    }
}

impl Fleet {
    /// Every running jail of `server` with its counters.
    pub async fn status(&self, server: ServerId, by: &str) -> Result<StatusReport, FleetError> {
        match self
            .call(server, command::Kind::Status(GetStatus {}), "status", by)
            .await?
        {
            Outcome::Status(s) => Ok(StatusReport {
                fail2ban_version: s.fail2ban_version,
                fail2ban_latency_ms: s.fail2ban_latency_us as f64 / 1000.0,
                jails: s
                    .jails
                    .into_iter()
                    .map(|j| JailCounters {
                        name: j.name,
                        currently_failed: j.currently_failed,
                        total_failed: j.total_failed,
                        currently_banned: j.currently_banned,
                        total_banned: j.total_banned,
                        file_list: j.file_list,
                        journal_matches: j.journal_matches,
                    })
                    .collect(),
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// One page of a jail's banned addresses.
    pub async fn banned(
        &self,
        server: ServerId,
        jail: &JailName,
        search: &str,
        offset: u32,
        limit: u32,
        by: &str,
    ) -> Result<BannedPage, FleetError> {
        let kind = command::Kind::ListBanned(ListBanned {
            jail: jail.to_string(),
            search: search.to_owned(),
            offset,
            limit,
        });
        match self.call(server, kind, "list_banned", by).await? {
            Outcome::Banned(page) => Ok(BannedPage {
                jail: page.jail,
                total: page.total,
                offset,
                limit,
                items: page
                    .entries
                    .into_iter()
                    .map(|e| BannedIp {
                        ip: e.ip,
                        banned_at: time(e.banned_at_unix),
                        expires_at: time(e.expires_at_unix),
                        permanent: e.expires_at_unix == -1,
                    })
                    .collect(),
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Bans `ip` in `jail`, or lifts its ban (in every jail when `jail` is `None`).
    /// `guard_override` tells the agent an admin lifted the guard rails the agent checks again.
    pub async fn set_ban(
        &self,
        server: ServerId,
        jail: Option<&JailName>,
        ip: IpOrCidr,
        ban: bool,
        guard_override: bool,
        by: &str,
    ) -> Result<BanOutcome, FleetError> {
        let kind = command::Kind::SetBan(SetBan {
            jail: jail.map(ToString::to_string).unwrap_or_default(),
            ip: ip.to_string(),
            ban,
            guard_override,
        });
        let label = if ban { "ban" } else { "unban" };
        match self.call(server, kind, label, by).await? {
            Outcome::BanChange(change) => Ok(BanOutcome {
                ip: ip.to_string(),
                changed: change.changed,
                jails: change.jails,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Every jail of the effective configuration.
    pub async fn jails(&self, server: ServerId, by: &str) -> Result<JailList, FleetError> {
        match self
            .call(
                server,
                command::Kind::ListJails(ListJails {}),
                "list_jails",
                by,
            )
            .await?
        {
            Outcome::Jails(list) => Ok(JailList {
                jails: list
                    .jails
                    .into_iter()
                    .map(|j| {
                        let (running_settings, drift) = running_state(j.running_state);
                        JailSummary {
                            name: j.name,
                            enabled: j.enabled,
                            running: j.running,
                            filter: j.filter,
                            backend: j.backend,
                            log_paths: j.log_paths,
                            actions: j.actions,
                            settings: j.settings.into_iter().collect(),
                            running_settings,
                            drift,
                        }
                    })
                    .collect(),
                warnings: list.warnings,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Enables or disables jails in one validated change.
    pub async fn set_jails_enabled(
        &self,
        server: ServerId,
        changes: &[(JailName, bool)],
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let kind = command::Kind::SetJailsEnabled(SetJailsEnabled {
            changes: changes
                .iter()
                .map(|(jail, enabled)| JailToggle {
                    jail: jail.to_string(),
                    enabled: *enabled,
                })
                .collect(),
        });
        match self
            .write_call(server, kind, "set_jails_enabled", by)
            .await?
        {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn jail_config(
        &self,
        server: ServerId,
        jail: &JailName,
        by: &str,
    ) -> Result<JailConfig, FleetError> {
        let kind = command::Kind::GetJailConfig(GetJailConfig {
            jail: jail.to_string(),
        });
        match self.call(server, kind, "get_jail_config", by).await? {
            Outcome::JailConfig(c) => {
                let (running_settings, drift) = running_state(c.running_state.map(|s| *s));
                Ok(JailConfig {
                    jail: c.jail,
                    enabled: c.enabled,
                    running: c.running,
                    jail_override: config_file(c.jail_override),
                    filter: c.filter,
                    filter_conf: config_file(c.filter_conf),
                    filter_local: config_file(c.filter_local),
                    effective: c.effective.into_iter().collect(),
                    running_settings,
                    drift,
                })
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Writes a jail's override and/or its filter's local file.
    pub async fn write_jail_config(
        &self,
        server: ServerId,
        jail: &JailName,
        jail_override: Option<Edit>,
        filter_local: Option<Edit>,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let edit = |e: Edit| FileEdit {
            content: e.content,
            expected_version: e.expected_version,
        };
        let kind = command::Kind::WriteJailConfig(WriteJailConfig {
            jail: jail.to_string(),
            jail_override: jail_override.map(edit),
            filter_local: filter_local.map(edit),
        });
        match self
            .write_call(server, kind, "write_jail_config", by)
            .await?
        {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn filters(&self, server: ServerId, by: &str) -> Result<Vec<String>, FleetError> {
        match self
            .call(
                server,
                command::Kind::ListFilters(ListFilters {}),
                "list_filters",
                by,
            )
            .await?
        {
            Outcome::Filters(list) => Ok(list.names),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs `fail2ban-regex` on the host, when the server's turn for filter tests comes; refused
    /// when one runs there and another waits already.
    pub async fn test_filter(
        &self,
        server: ServerId,
        source: FilterSource,
        lines: Vec<String>,
        by: &str,
    ) -> Result<FilterTestResult, FleetError> {
        let _turn = self
            .0
            .filter_tests
            .turn(server)
            .await
            .map_err(|_| FleetError::FilterTestsBusy)?;
        let filter = match source {
            FilterSource::Named(name) => pb::test_filter::Filter::Name(name.to_string()),
            FilterSource::Text(text) => pb::test_filter::Filter::Text(text),
        };
        let kind = command::Kind::TestFilter(TestFilter {
            filter: Some(filter),
            lines,
        });
        match self.call(server, kind, "test_filter", by).await? {
            Outcome::FilterTest(r) => Ok(FilterTestResult {
                matched: r
                    .matched
                    .into_iter()
                    .map(|m| MatchedLine {
                        index: m.index,
                        line: m.line,
                        ip: m.ip,
                    })
                    .collect(),
                ips: r.ips,
                regex_hits: r
                    .regex_hits
                    .into_iter()
                    .map(|h| RegexHits {
                        index: h.index,
                        regex: h.regex,
                        hits: h.hits,
                    })
                    .collect(),
                lines: r.lines,
                matched_count: r.matched_count,
                missed: r.missed,
                ignored: r.ignored,
            }),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn restart(
        &self,
        server: ServerId,
        mode: RestartKind,
        by: &str,
    ) -> Result<RestartResult, FleetError> {
        let kind = command::Kind::Restart(Restart {
            mode: match mode {
                RestartKind::Reload => RestartMode::Reload,
                RestartKind::Restart => RestartMode::Restart,
            }
            .into(),
        });
        match self.call(server, kind, "restart", by).await? {
            Outcome::Restart(r) => Ok(RestartResult {
                ok: r.ok,
                mode,
                running_jails: r.running_jails,
                failed_jails: r.failed_jails,
                message: r.message,
            }),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn log_tail(
        &self,
        server: ServerId,
        jail: Option<&JailName>,
        lines: u32,
        by: &str,
    ) -> Result<LogTailResult, FleetError> {
        let kind = command::Kind::LogTail(LogTail {
            jail: jail.map(ToString::to_string).unwrap_or_default(),
            lines,
        });
        match self.call(server, kind, "log_tail", by).await? {
            Outcome::LogLines(l) => Ok(LogTailResult {
                path: l.path,
                lines: l.lines,
            }),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn ignore_list(
        &self,
        server: ServerId,
        jail: Option<&JailName>,
        by: &str,
    ) -> Result<IgnoreListView, FleetError> {
        let kind = command::Kind::GetIgnoreList(GetIgnoreList {
            jail: jail.map(ToString::to_string).unwrap_or_default(),
        });
        match self.call(server, kind, "get_ignore_list", by).await? {
            Outcome::IgnoreList(l) => Ok(ignore_view(jail, l)),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn set_ignore_list(
        &self,
        server: ServerId,
        jail: Option<&JailName>,
        entries: Vec<String>,
        expected_version: String,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let kind = command::Kind::SetIgnoreList(SetIgnoreList {
            jail: jail.map(ToString::to_string).unwrap_or_default(),
            entries,
            expected_version,
        });
        match self.call(server, kind, "set_ignore_list", by).await? {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }
}

fn ignore_view(jail: Option<&JailName>, l: pb::IgnoreList) -> IgnoreListView {
    IgnoreListView {
        jail: jail.map(ToString::to_string),
        entries: l.entries,
        effective: l.effective,
        path: l.path,
        version: l.version,
    }
}

/// The outcome of a fleet-wide action on one server.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerActionResult {
    pub server_id: String,
    pub server_name: String,
    pub ok: bool,
    /// Whether fail2ban's state changed on this server.
    pub changed: bool,
    pub jails: Vec<String>,
    /// Why it failed (offline agent, fail2ban error, ...).
    pub error: Option<String>,
}

impl Fleet {
    /// Lifts the ban of `ip` in every jail of every server, all at once; one result per server.
    pub async fn unban_everywhere(
        &self,
        ip: IpOrCidr,
        by: &str,
    ) -> Result<Vec<ServerActionResult>, FleetError> {
        let servers = self.list().await?;
        let calls = servers.into_iter().map(|view| async move {
            let server = view.server;
            let result = self.set_ban(server.id, None, ip, false, false, by).await;
            let (ok, changed, jails, error) = match result {
                Ok(outcome) => (true, outcome.changed, outcome.jails, None),
                Err(e) => (false, false, Vec::new(), Some(e.to_string())),
            };
            ServerActionResult {
                server_id: server.id.to_string(),
                server_name: server.name.to_string(),
                ok,
                changed,
                jails,
                error,
            }
        });
        Ok(futures::future::join_all(calls).await)
    }
}
