//! The fleet's jails across servers: `GET /api/fleet/jails` (one row per jail name: the servers
//! that have it, enabled or not, banned and failing now, in sum and per server; filtered by
//! labels) and `POST /api/fleet/jails/{jail}/enabled` (switch one jail on or off on chosen servers,
//! one result per server).

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::{Admin, Viewer};
use crate::domain::{Labels, ServerStatus};
use crate::fleet_jails::{ServerJails, SwitchResult};
use crate::profiles::Recheck;

/// Most servers one switch may name.
const MAX_SWITCH_SERVERS: usize = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fleet_jails))
        .routes(routes!(switch_jail))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FleetJailsQuery {
    /// Only servers carrying every one of these labels, `key=value` pairs separated by commas
    /// (`env=prod,role=web`).
    #[param(max_length = 2048)]
    labels: Option<String>,
}

/// One jail on one server.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailOnServerDto {
    server_id: String,
    server_name: String,
    /// Whether the server's configuration enables it.
    enabled: bool,
    /// Whether fail2ban runs it now.
    running: bool,
    currently_banned: u64,
    currently_failed: u64,
}

/// One jail name across the fleet.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetJailDto {
    name: String,
    /// Servers whose configuration has it.
    servers: Vec<JailOnServerDto>,
    /// Servers that run it now.
    running_on: u64,
    /// Servers whose configuration enables it.
    enabled_on: u64,
    /// Addresses banned now, summed over the servers.
    banned_now: u64,
    /// Addresses failing now, summed over the servers.
    failing_now: u64,
}

/// How fresh one server's part of the view is.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetJailServerDto {
    server_id: String,
    server_name: String,
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    /// `online`, `offline`, `pending` or `reporting`.
    status: String,
    /// When its agent last answered (absent: no answer yet).
    answered_at: Option<DateTime<Utc>>,
    /// Seconds since that answer.
    age_secs: Option<u64>,
    /// Why the latest attempt gave no answer (its last answer, if any, is shown instead).
    error: Option<String>,
}

/// The fleet's jails and how fresh each server's answer is.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetJailsView {
    jails: Vec<FleetJailDto>,
    servers: Vec<FleetJailServerDto>,
}

fn labels_filter(raw: Option<&str>) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let mut pairs = BTreeMap::new();
    for pair in raw.split(',') {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ApiError::invalid("labels", format!("{pair:?} is not a `key=value` pair"))
        })?;
        pairs.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    Labels::parse(pairs)
        .map(Labels::into_map)
        .map_err(|e| ApiError::invalid("labels", e))
}

fn status_name(status: ServerStatus) -> &'static str {
    match status {
        ServerStatus::Pending => "pending",
        ServerStatus::Reporting => "reporting",
        ServerStatus::Online => "online",
        ServerStatus::Offline => "offline",
    }
}

fn view_of(answers: Vec<ServerJails>) -> FleetJailsView {
    let now = Utc::now();
    let mut jails: BTreeMap<String, FleetJailDto> = BTreeMap::new();
    for answer in &answers {
        for (name, jail) in &answer.jails {
            let row = jails.entry(name.clone()).or_insert_with(|| FleetJailDto {
                name: name.clone(),
                servers: Vec::new(),
                running_on: 0,
                enabled_on: 0,
                banned_now: 0,
                failing_now: 0,
            });
            row.running_on += u64::from(jail.running);
            row.enabled_on += u64::from(jail.enabled);
            row.banned_now += jail.currently_banned;
            row.failing_now += jail.currently_failed;
            row.servers.push(JailOnServerDto {
                server_id: answer.server.to_string(),
                server_name: answer.name.clone(),
                enabled: jail.enabled,
                running: jail.running,
                currently_banned: jail.currently_banned,
                currently_failed: jail.currently_failed,
            });
        }
    }
    let servers = answers
        .into_iter()
        .map(|a| FleetJailServerDto {
            server_id: a.server.to_string(),
            server_name: a.name,
            labels: a.labels,
            status: status_name(a.status).to_owned(),
            answered_at: a.answered_at,
            age_secs: a
                .answered_at
                .map(|at| u64::try_from((now - at).num_seconds()).unwrap_or(0)),
            error: a.error,
        })
        .collect();
    FleetJailsView {
        jails: jails.into_values().collect(),
        servers,
    }
}

/// Every jail name across the servers (all, or those carrying the labels asked for), with the
/// servers that have it. Online agents are asked with a deadline of a few seconds, at most 32 at
/// a time; an answer younger than 5 s is reused. A server that does not answer in time, or is
/// offline, shows its last answer with its age (`servers[].ageSecs`), or none.
#[utoipa::path(get, path = "/api/fleet/jails", tag = "jails", params(FleetJailsQuery),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = FleetJailsView), (status = 422, body = Problem)))]
async fn fleet_jails(
    caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<FleetJailsQuery>, QueryRejection>,
) -> Result<ApiJson<FleetJailsView>, ApiError> {
    let params = super::error::query(params)?;
    let labels = labels_filter(params.labels.as_deref())?;
    let answers = state
        .fleet_jails
        .view(&labels, &caller.requested_by())
        .await?;
    Ok(ApiJson(view_of(answers)))
}

/// Body of `POST /api/fleet/jails/{jail}/enabled`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchBody {
    /// `true` enables the jail, `false` disables it.
    enabled: bool,
    /// The servers, by id or name (1 to 200).
    #[schema(min_items = 1, max_items = 200, value_type = Vec<super::schemas::ServerRef>)]
    servers: Vec<String>,
}

/// One server's outcome of the switch.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchResultDto {
    server_id: String,
    server_name: String,
    ok: bool,
    /// Jails enabled in the configuration that do not run after the reload.
    failed_jails: Vec<String>,
    /// Why it failed on this server (nothing changed there).
    error: Option<String>,
}

/// The switch and every server's outcome.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchAnswer {
    jail: String,
    enabled: bool,
    results: Vec<SwitchResultDto>,
}

impl From<SwitchResult> for SwitchResultDto {
    fn from(r: SwitchResult) -> Self {
        let (ok, failed_jails, error) = match r.result {
            Ok(failed) => (true, failed, None),
            Err(e) => (false, Vec::new(), Some(e.to_string())),
        };
        Self {
            server_id: r.server.to_string(),
            server_name: r.name,
            ok,
            failed_jails,
            error,
        }
    }
}

/// Enables or disables one jail on each chosen server at once, through each agent's validated
/// editor (fail2ban checks the result before it becomes live; a refusal changes nothing on that
/// server). Answers with one result per server; an offline server's result says so.
#[utoipa::path(post, path = "/api/fleet/jails/{jail}/enabled", tag = "jails", request_body = SwitchBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("jail" = super::schemas::JailName, Path)),
    responses((status = 200, body = SwitchAnswer),
              (status = 404, description = "A server named does not exist", body = Problem),
              (status = 422, description = "Invalid jail name (banhub's own jails included) or server list", body = Problem)))]
async fn switch_jail(
    caller: Admin,
    State(state): State<AppState>,
    Path(jail): Path<String>,
    ApiJson(body): ApiJson<SwitchBody>,
) -> Result<ApiJson<SwitchAnswer>, ApiError> {
    let jail = super::jails::writable_jail_name("jail", &jail)?;
    if body.servers.is_empty() || body.servers.len() > MAX_SWITCH_SERVERS {
        return Err(ApiError::invalid(
            "servers",
            format!("must name between 1 and {MAX_SWITCH_SERVERS} servers"),
        ));
    }
    let mut servers = Vec::with_capacity(body.servers.len());
    for raw in &body.servers {
        let id = super::target::server(&state, raw).await?;
        if !servers.iter().any(|(s, _)| *s == id) {
            let name = state.fleet.get(id).await?.server.name.to_string();
            servers.push((id, name));
        }
    }
    let ids: Vec<_> = servers.iter().map(|(id, _)| *id).collect();
    let results = state
        .fleet_jails
        .set_enabled(&jail, body.enabled, servers, &caller.requested_by())
        .await;
    for id in ids {
        state.profiles.recheck(Recheck::Server(id));
    }
    Ok(ApiJson(SwitchAnswer {
        jail: jail.to_string(),
        enabled: body.enabled,
        results: results.into_iter().map(Into::into).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filters_are_key_value_pairs() {
        assert!(labels_filter(None).expect("none").is_empty());
        assert!(labels_filter(Some(" ")).expect("blank").is_empty());
        let pairs = labels_filter(Some("env=prod, role=web")).expect("valid");
        assert_eq!(pairs.get("env").map(String::as_str), Some("prod"));
        assert_eq!(pairs.get("role").map(String::as_str), Some("web"));
        for bad in ["env", "bad key=x", "=x"] {
            match labels_filter(Some(bad)) {
                Err(ApiError::Invalid { field, .. }) => assert_eq!(field, "labels"),
                other => panic!("{bad:?}: expected a field error, got {other:?}"),
            }
        }
    }
}
