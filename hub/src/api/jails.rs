//! Jails of the target server (`X-BanDaemon-Server`): summary, management, configuration, bans,
//! banned lists, log tails and allowlists. Every name and address is parsed here before it travels.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use banhub_proto::rules::{IpOrCidr, JailName, is_banhub_jail, unmapped_net};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::query;
use super::error::{ApiError, ApiJson, Problem, optional_json};
use super::guards;
use super::servers::ServerDto;
use super::target::Target;
use crate::auth::{Admin, Operator, Viewer};
use crate::fleet::{
    BanOutcome, BannedPage, ConfigChange, Edit, IgnoreListView, JailConfig, JailList,
    LogTailResult, StatusReport,
};

/// Largest configuration file accepted for writing.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
const MAX_TOGGLES: usize = 200;
const MAX_PAGE: u32 = 500;
const MAX_LOG_LINES: u32 = 1000;
const MAX_IGNORE_ENTRIES: usize = 500;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(summary))
        .routes(routes!(list_jails, manage_jails))
        .routes(routes!(get_config, write_config))
        .routes(routes!(ban))
        .routes(routes!(unban))
        .routes(routes!(banned))
        .routes(routes!(logs))
        .routes(routes!(get_jail_ignore, set_jail_ignore))
        .routes(routes!(get_global_ignore, set_global_ignore))
}

/// A jail name through the one jail name rule (`banhub_proto::rules::JailName`: the name rule, no
/// reserved section name), which every route and the agent share.
pub(super) fn jail_name(field: &str, raw: &str) -> Result<JailName, ApiError> {
    JailName::parse(raw).map_err(|e| ApiError::invalid(field, format!("{raw:?} {e}")))
}

/// A jail the hub may change (its configuration, allowlist, switch or a manual ban): [`jail_name`],
/// and none of banhub's own jails, which `install-action` writes and the agent drives.
pub(super) fn writable_jail_name(field: &str, raw: &str) -> Result<JailName, ApiError> {
    let name = jail_name(field, raw)?;
    if is_banhub_jail(name.as_str()) {
        return Err(ApiError::invalid(
            field,
            format!(
                "{raw:?} is banhub's own jail, written only by `banhub-agent install-action` on \
                 the host and driven by the agent"
            ),
        ));
    }
    Ok(name)
}

fn address(raw: &str) -> Result<IpOrCidr, ApiError> {
    IpOrCidr::parse(raw).map_err(|e| ApiError::invalid("ip", format!("{raw:?} {e}")))
}

/// The jails of a server with their counters, and the server's health.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    server: ServerDto,
    #[serde(flatten)]
    status: StatusReport,
}

/// Every running jail with its counters (currently/total failed and banned) and file list.
#[utoipa::path(get, path = "/api/summary", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name; the default server when absent")),
    responses((status = 200, body = Summary), (status = 404, body = Problem),
              (status = 503, description = "Agent offline", body = Problem),
              (status = 504, description = "Agent did not answer in time", body = Problem)))]
async fn summary(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
) -> Result<ApiJson<Summary>, ApiError> {
    let status = state.fleet.status(server, &caller.requested_by()).await?;
    let server = state.fleet.get(server).await?.into();
    Ok(ApiJson(Summary { server, status }))
}

/// Every jail fail2ban knows from its effective configuration, enabled or not.
#[utoipa::path(get, path = "/api/jails/manage", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = JailList), (status = 503, body = Problem)))]
async fn list_jails(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
) -> Result<ApiJson<JailList>, ApiError> {
    Ok(ApiJson(
        state.fleet.jails(server, &caller.requested_by()).await?,
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JailToggleBody {
    #[schema(value_type = super::schemas::JailName)]
    name: String,
    enabled: bool,
}

/// Jails to enable or disable, applied as one validated change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManageJails {
    #[schema(min_items = 1, max_items = 200)]
    jails: Vec<JailToggleBody>,
}

/// Enables or disables one or several jails; fail2ban validates the result before it becomes live.
#[utoipa::path(post, path = "/api/jails/manage", tag = "jails", request_body = ManageJails,
    extensions(("x-required-role" = json!("admin"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange),
              (status = 422, description = "Invalid name, or fail2ban refused the result (nothing changed)", body = Problem)))]
async fn manage_jails(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    ApiJson(body): ApiJson<ManageJails>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    if body.jails.is_empty() || body.jails.len() > MAX_TOGGLES {
        return Err(ApiError::invalid(
            "jails",
            format!("must list between 1 and {MAX_TOGGLES} jails"),
        ));
    }
    let changes = body
        .jails
        .iter()
        .enumerate()
        .map(|(i, t)| {
            writable_jail_name(&format!("jails[{i}].name"), &t.name).map(|name| (name, t.enabled))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let change = state
        .fleet
        .set_jails_enabled(server, &changes, &caller.requested_by())
        .await?;
    Ok(ApiJson(change))
}

/// A jail's override file, its filter's files and its effective settings.
#[utoipa::path(get, path = "/api/jails/{jail}/config", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("jail" = super::schemas::JailName, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = JailConfig), (status = 404, body = Problem)))]
async fn get_config(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
) -> Result<ApiJson<JailConfig>, ApiError> {
    let jail = jail_name("jail", &jail)?;
    Ok(ApiJson(
        state
            .fleet
            .jail_config(server, &jail, &caller.requested_by())
            .await?,
    ))
}

/// New content for one file and the version it was edited from (empty for a new file).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileEditBody {
    /// At most 64 KiB, no control characters but line ends and tabs.
    #[schema(
        max_length = 65536,
        pattern = "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$"
    )]
    content: String,
    /// The version it was read at; empty for a new file.
    #[serde(default)]
    #[schema(max_length = 128, pattern = "^[A-Za-z0-9]*$")]
    version: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteConfig {
    /// `jail.d/<jail>.local`; only a `[<jail>]` section.
    jail_override: Option<FileEditBody>,
    /// `filter.d/<filter>.local` of the jail's filter; only `[INCLUDES]`, `[Definition]`, `[Init]`.
    filter_local: Option<FileEditBody>,
}

impl WriteConfig {
    /// The jail's override and its filter's local file, each checked; at least one of them.
    fn parse(self, jail: &JailName) -> Result<(Option<Edit>, Option<Edit>), ApiError> {
        let jail_override = self
            .jail_override
            .map(|e| checked_edit("jailOverride", e, &[jail.as_str()]))
            .transpose()?;
        let filter_local = self
            .filter_local
            .map(|e| checked_edit("filterLocal", e, &["INCLUDES", "Definition", "Init"]))
            .transpose()?;
        if jail_override.is_none() && filter_local.is_none() {
            return Err(ApiError::invalid(
                "jailOverride",
                "give jailOverride, filterLocal or both",
            ));
        }
        Ok((jail_override, filter_local))
    }
}

/// Checks an edited file: size, no NUL or other control characters, and only the allowed sections,
/// so an edit of one jail cannot smuggle in settings for another jail or for every jail.
fn checked_edit(
    field: &str,
    edit: FileEditBody,
    allowed_sections: &[&str],
) -> Result<Edit, ApiError> {
    if edit.content.len() > MAX_CONFIG_BYTES {
        return Err(ApiError::invalid(
            field,
            format!("is larger than {MAX_CONFIG_BYTES} bytes"),
        ));
    }
    if edit
        .content
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t' && c != '\r')
    {
        return Err(ApiError::invalid(field, "contains control characters"));
    }
    for (n, line) in edit.content.lines().enumerate() {
        if let Some(rest) = line.strip_prefix('[') {
            let Some(section) = rest.trim_end().strip_suffix(']') else {
                return Err(ApiError::invalid(
                    field,
                    format!("line {}: a section header must end with ']'", n + 1),
                ));
            };
            if !allowed_sections.contains(&section) {
                return Err(ApiError::invalid(
                    field,
                    format!(
                        "line {}: section [{section}] is not allowed here; allowed: {}",
                        n + 1,
                        allowed_sections
                            .iter()
                            .map(|s| format!("[{s}]"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
    }
    if edit.version.len() > 128 || edit.version.chars().any(|c| !c.is_ascii_alphanumeric()) {
        return Err(ApiError::invalid(
            field,
            "version is not one this hub issued",
        ));
    }
    Ok(Edit {
        content: edit.content,
        expected_version: edit.version,
    })
}

/// Writes a jail's override and/or its filter's local file: validated by fail2ban before it becomes
/// live, reloaded, health-checked, rolled back on any failure. A stale version is refused (409).
#[utoipa::path(post, path = "/api/jails/{jail}/config", tag = "jails", request_body = WriteConfig,
    extensions(("x-required-role" = json!("admin"))),
    params(("jail" = super::schemas::JailName, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange),
              (status = 409, description = "The file changed since it was read", body = Problem),
              (status = 422, description = "Invalid input, or fail2ban refused the configuration (nothing changed)", body = Problem)))]
async fn write_config(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
    ApiJson(body): ApiJson<WriteConfig>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    let jail = writable_jail_name("jail", &jail)?;
    let (jail_override, filter_local) = body.parse(&jail)?;
    let change = state
        .fleet
        .write_jail_config(
            server,
            &jail,
            jail_override,
            filter_local,
            &caller.requested_by(),
        )
        .await?;
    Ok(ApiJson(change))
}

/// The optional body of a ban.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BanBody {
    /// An admin's explicit go-ahead for a ban the guard rails stop otherwise: a network wider than
    /// `guards.ban_min_prefix_v4`/`_v6`, or the broadcast address. Recorded in the audit log. It
    /// never lifts the refusal of the hub's own addresses.
    #[serde(default, rename = "override")]
    guard_override: bool,
    /// How long the ban lasts, in seconds (60 to 31536000, a year): the hub lifts it at its end,
    /// across agent, fail2ban and hub restarts. Absent: the jail's own ban time. fail2ban may lift
    /// it earlier when the jail's `bantime` is shorter.
    #[schema(minimum = 60, maximum = 31536000)]
    duration_secs: Option<u64>,
}

/// What a ban changed, and when the hub lifts it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BanAnswer {
    #[serde(flatten)]
    outcome: BanOutcome,
    /// When the hub lifts the ban (a ban with `durationSecs`); absent: the jail's own ban time.
    ends_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Bans an address or network in a jail, for the jail's ban time or for `durationSecs`. A network
/// wider than the configured limits, or the broadcast address, needs an admin's
/// `{"override": true}`; the hub's own addresses are refused.
#[utoipa::path(post, path = "/api/jails/{jail}/ban/{ip}", tag = "jails",
    request_body(content = Option<BanBody>, description = "Optional; `{\"override\": true}` from an admin lifts the guard rails that allow it; `durationSecs` bans for that long"),
    extensions(("x-required-role" = json!("operator"))),
    params(("jail" = super::schemas::JailName, Path), ("ip" = super::schemas::Address, Path, description = "IPv4, IPv6 or CIDR (`/` encoded as %2F)"),
           ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = BanAnswer),
              (status = 403, description = "`override` from a caller who is not an admin", body = Problem),
              (status = 422, description = "Invalid name, address or duration, or a guard rail (`guard_*` codes) refused the ban", body = Problem)))]
async fn ban(
    caller: Operator,
    State(state): State<AppState>,
    Target(server): Target,
    Path((jail, ip)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<ApiJson<BanAnswer>, ApiError> {
    let body: BanBody = optional_json(&body)?;
    let jail = writable_jail_name("jail", &jail)?;
    let ip = address(&ip)?;
    let duration = super::timed_bans::duration(&state, body.duration_secs)?;
    let overridden = guards::admin_override(&caller, body.guard_override)?;
    guards::check_ban(&state, &caller, "ip", &ip, overridden)?;
    let (outcome, ends_at) = state
        .timed_bans
        .ban(
            server,
            &jail,
            ip,
            duration,
            overridden,
            &caller.requested_by(),
        )
        .await?;
    Ok(ApiJson(BanAnswer { outcome, ends_at }))
}

/// Lifts the ban of an address or network in a jail.
#[utoipa::path(post, path = "/api/jails/{jail}/unban/{ip}", tag = "jails",
    extensions(("x-required-role" = json!("operator"))),
    params(("jail" = super::schemas::JailName, Path), ("ip" = super::schemas::Address, Path, description = "IPv4, IPv6 or CIDR (`/` encoded as %2F)"),
           ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = BanOutcome), (status = 422, body = Problem)))]
async fn unban(
    caller: Operator,
    State(state): State<AppState>,
    Target(server): Target,
    Path((jail, ip)): Path<(String, String)>,
) -> Result<ApiJson<BanOutcome>, ApiError> {
    let jail = jail_name("jail", &jail)?;
    let ip = address(&ip)?;
    Ok(ApiJson(
        state
            .timed_bans
            .unban(server, &jail, ip, &caller.requested_by())
            .await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BannedQuery {
    /// Substring of the address, or a CIDR network.
    #[serde(default)]
    #[param(max_length = 64, pattern = "^[0-9A-Fa-f.:/]*$")]
    search: String,
    #[serde(default)]
    offset: u32,
    /// At most 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// A page of a jail's banned addresses with ban and expiry times.
#[utoipa::path(get, path = "/api/jails/{jail}/banned", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("jail" = super::schemas::JailName, Path), BannedQuery, ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = BannedPage), (status = 422, body = Problem)))]
async fn banned(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
    params: Result<Query<BannedQuery>, QueryRejection>,
) -> Result<ApiJson<BannedPage>, ApiError> {
    let query = query(params)?;
    let jail = jail_name("jail", &jail)?;
    let page = query.parse()?;
    Ok(ApiJson(
        state
            .fleet
            .banned(
                server,
                &jail,
                &page.search,
                page.offset,
                page.limit,
                &caller.requested_by(),
            )
            .await?,
    ))
}

/// A [`BannedQuery`] whose limit and search pattern keep their rules.
struct BannedPageRequest {
    search: String,
    offset: u32,
    limit: u32,
}

impl BannedQuery {
    fn parse(self) -> Result<BannedPageRequest, ApiError> {
        let limit = self.limit.unwrap_or(50);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::invalid(
                "limit",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        if self.search.len() > 64
            || !self
                .search
                .chars()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '/'))
        {
            return Err(ApiError::invalid(
                "search",
                "must be part of an address: hex digits, '.', ':' and '/'",
            ));
        }
        Ok(BannedPageRequest {
            search: self.search,
            offset: self.offset,
            limit,
        })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogQuery {
    /// How many of the last lines; at most 1000, default 200.
    #[param(minimum = 1, maximum = 1000)]
    lines: Option<u32>,
}

/// The end of fail2ban's own log, only the lines about this jail.
#[utoipa::path(get, path = "/api/jails/{jail}/logs", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("jail" = super::schemas::JailName, Path), LogQuery, ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = LogTailResult), (status = 422, body = Problem)))]
async fn logs(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
    params: Result<Query<LogQuery>, QueryRejection>,
) -> Result<ApiJson<LogTailResult>, ApiError> {
    let query = query(params)?;
    let jail = jail_name("jail", &jail)?;
    let lines = query.lines()?;
    Ok(ApiJson(
        state
            .fleet
            .log_tail(server, Some(&jail), lines, &caller.requested_by())
            .await?,
    ))
}

impl LogQuery {
    /// How many lines to read: the default, or the number asked within its bounds.
    fn lines(self) -> Result<u32, ApiError> {
        let lines = self.lines.unwrap_or(200);
        if !(1..=MAX_LOG_LINES).contains(&lines) {
            return Err(ApiError::invalid(
                "lines",
                format!("must be between 1 and {MAX_LOG_LINES}"),
            ));
        }
        Ok(lines)
    }
}

/// An allowlist to store, with the version it was edited from.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnoreListBody {
    /// IPs, CIDRs or host names. A network covering every address (`0.0.0.0/0`, `::/0`) is
    /// refused; a public network wider than the ban limits needs `override`.
    #[schema(max_items = 500)]
    entries: Vec<String>,
    /// The version it was read at.
    #[serde(default)]
    #[schema(max_length = 128, pattern = "^[A-Za-z0-9]*$")]
    version: String,
    /// An admin's explicit go-ahead for entries wider than `guards.ban_min_prefix_v4`/`_v6`
    /// (recorded in the audit log). Nothing lifts the refusal of a network covering everything.
    #[serde(default, rename = "override")]
    guard_override: bool,
}

/// An allowlist entry as parsed: a network (a single address is a /32 or /128) or a host name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IgnoreEntry {
    Net(ipnet::IpNet),
    Host(String),
}

impl IgnoreEntry {
    /// The entry as fail2ban's `ignoreip` gets it: an address, a network or a host name.
    fn text(&self) -> String {
        match self {
            Self::Net(net) if net.prefix_len() == net.max_prefix_len() => net.addr().to_string(),
            Self::Net(net) => net.to_string(),
            Self::Host(host) => host.clone(),
        }
    }
}

/// An allowlist entry: an address, a network or a DNS host name; nothing that could break out of
/// fail2ban's space-separated `ignoreip` value. IPv4-mapped IPv6 is the IPv4 address.
fn ignore_entry(i: usize, raw: &str) -> Result<IgnoreEntry, ApiError> {
    let field = format!("entries[{i}]");
    if raw.contains('/') || raw.parse::<std::net::IpAddr>().is_ok() {
        let net: ipnet::IpNet = raw
            .parse()
            .or_else(|_| raw.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map_err(|_| {
                ApiError::invalid(&field, format!("{raw:?} is not an address or network"))
            })?;
        return Ok(IgnoreEntry::Net(unmapped_net(net).trunc()));
    }
    let hostname_ok = !raw.is_empty()
        && raw.len() <= 253
        && raw.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if hostname_ok {
        Ok(IgnoreEntry::Host(raw.to_ascii_lowercase()))
    } else {
        Err(ApiError::invalid(
            &field,
            format!("{raw:?} is not an address, a network or a host name"),
        ))
    }
}

/// The entries of an allowlist, each checked by the rule and the guard rails.
fn ignore_entries(
    state: &AppState,
    caller: &Admin,
    body: &IgnoreListBody,
) -> Result<Vec<String>, ApiError> {
    if body.entries.len() > MAX_IGNORE_ENTRIES {
        return Err(ApiError::invalid(
            "entries",
            format!("at most {MAX_IGNORE_ENTRIES} entries"),
        ));
    }
    if body.version.len() > 128 || body.version.chars().any(|c| !c.is_ascii_alphanumeric()) {
        return Err(ApiError::invalid("version", "is not one this hub issued"));
    }
    let overridden = guards::admin_override(caller, body.guard_override)?;
    let mut entries = Vec::with_capacity(body.entries.len());
    for (i, raw) in body.entries.iter().enumerate() {
        let entry = ignore_entry(i, raw)?;
        if let IgnoreEntry::Net(net) = entry {
            guards::check_allow(state, caller, &format!("entries[{i}]"), net, overridden)?;
        }
        entries.push(entry.text());
    }
    Ok(entries)
}

/// A jail's allowlist (`ignoreip`).
#[utoipa::path(get, path = "/api/jails/{jail}/ignoreip", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("jail" = super::schemas::JailName, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = IgnoreListView)))]
async fn get_jail_ignore(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
) -> Result<ApiJson<IgnoreListView>, ApiError> {
    let jail = jail_name("jail", &jail)?;
    Ok(ApiJson(
        state
            .fleet
            .ignore_list(server, Some(&jail), &caller.requested_by())
            .await?,
    ))
}

/// Replaces a jail's allowlist, through the same validated write as any configuration change.
#[utoipa::path(post, path = "/api/jails/{jail}/ignoreip", tag = "jails", request_body = IgnoreListBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("jail" = super::schemas::JailName, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn set_jail_ignore(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
    ApiJson(body): ApiJson<IgnoreListBody>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    let jail = writable_jail_name("jail", &jail)?;
    let entries = ignore_entries(&state, &caller, &body)?;
    Ok(ApiJson(
        state
            .fleet
            .set_ignore_list(
                server,
                Some(&jail),
                entries,
                body.version,
                &caller.requested_by(),
            )
            .await?,
    ))
}

/// The allowlist every jail of the server shares (`ignoreip` in `[DEFAULT]`).
#[utoipa::path(get, path = "/api/ignoreip", tag = "jails",
    extensions(("x-required-role" = json!("viewer"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = IgnoreListView)))]
async fn get_global_ignore(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
) -> Result<ApiJson<IgnoreListView>, ApiError> {
    Ok(ApiJson(
        state
            .fleet
            .ignore_list(server, None, &caller.requested_by())
            .await?,
    ))
}

/// Replaces the allowlist every jail of the server shares.
#[utoipa::path(post, path = "/api/ignoreip", tag = "jails", request_body = IgnoreListBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange), (status = 409, body = Problem), (status = 422, body = Problem)))]
async fn set_global_ignore(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    ApiJson(body): ApiJson<IgnoreListBody>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    let entries = ignore_entries(&state, &caller, &body)?;
    Ok(ApiJson(
        state
            .fleet
            .set_ignore_list(server, None, entries, body.version, &caller.requested_by())
            .await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(content: &str) -> FileEditBody {
        FileEditBody {
            content: content.to_owned(),
            version: String::new(),
        }
    }

    #[test]
    fn edits_may_only_touch_their_own_sections() {
        let ok = checked_edit(
            "f",
            edit("[sshd]\nmaxretry = 5\n  [continued]\n"),
            &["sshd"],
        );
        assert!(ok.is_ok());
        for bad in [
            "[sshd]\nmaxretry = 5\n[DEFAULT]\nignoreip = 0.0.0.0/0\n",
            "[recidive]\nenabled = true\n",
            "[sshd\n",
            "[sshd]\nmaxretry = 5\u{0}\n",
        ] {
            assert!(checked_edit("f", edit(bad), &["sshd"]).is_err(), "{bad:?}");
        }
        let mut huge = edit(&"#".repeat(MAX_CONFIG_BYTES + 1));
        huge.version = "abc".to_owned();
        assert!(checked_edit("f", huge, &["sshd"]).is_err());
        let mut bad_version = edit("[sshd]\n");
        bad_version.version = "../x".to_owned();
        assert!(checked_edit("f", bad_version, &["sshd"]).is_err());
    }

    #[test]
    fn reserved_sections_are_not_jails() {
        for raw in ["DEFAULT", "default", "INCLUDES", "banhub-defaults"] {
            assert!(jail_name("jail", raw).is_err(), "{raw}");
        }
        assert!(jail_name("jail", "sshd").is_ok());
    }

    #[test]
    fn banhubs_own_jails_are_readable_but_not_writable() {
        for raw in ["banhub-shared", "banhub-probe", "BANHUB-SHARED"] {
            assert!(writable_jail_name("jail", raw).is_err(), "{raw}");
        }
        assert!(jail_name("jail", "banhub-shared").is_ok());
        assert!(writable_jail_name("jail", "sshd").is_ok());
    }

    #[test]
    fn allowlist_entries_are_addresses_networks_or_host_names() {
        let ok = |raw: &str, want: &str| {
            assert_eq!(
                ignore_entry(0, raw).ok().map(|e| e.text()).as_deref(),
                Some(want),
                "{raw}"
            )
        };
        ok("192.0.2.1", "192.0.2.1");
        ok("::ffff:192.0.2.1", "192.0.2.1");
        ok("::ffff:192.0.2.0/120", "192.0.2.0/24");
        ok("192.0.2.0/24", "192.0.2.0/24");
        ok("2001:db8::/32", "2001:db8::/32");
        ok("127.0.0.1/8", "127.0.0.0/8");
        ok("Monitor.Example.COM", "monitor.example.com");
        for bad in [
            "",
            "a b",
            "x\ny",
            "[DEFAULT]",
            "host;rm",
            "-lead.example",
            "1.2.3.4/33",
            "a..b",
        ] {
            assert!(ignore_entry(0, bad).is_err(), "{bad:?}");
        }
    }
}
