//! Fleet-wide actions and the view of the hub replicas: `POST /api/fleet/bans` bans or unbans one
//! address on every server or on a label selector, `GET /api/fleet/actions[/{id}]` shows where each
//! server is (queued / delivered / done / failed / expired), `PUT /api/servers/{id}/labels` sets the
//! labels selectors match, and `GET /api/cluster` lists the replicas and who ran the singleton jobs.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use banhub_proto::rules::IpOrCidr;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::guards;
use super::target::ServerPath;
use crate::auth::{Admin, Operator, Viewer};
use crate::cluster::ClusterStatus;
use crate::domain::Labels;
use crate::fleet::{ActionError, FleetBan, FleetError, Selector};
use crate::store::fleet_actions::{FleetActionRecord, TargetRecord, TargetState};

/// Longest time a command for an offline server may stay queued: 7 days.
const MAX_QUEUE_SECS: u64 = 7 * 24 * 3600;
/// How long commands for offline servers stay queued unless the request says otherwise.
const DEFAULT_QUEUE_SECS: u64 = 3600;
const MAX_LIST: u64 = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fleet_ban))
        .routes(routes!(list_actions))
        .routes(routes!(get_action))
        .routes(routes!(set_labels))
        .routes(routes!(cluster_view))
}

/// Body of `POST /api/fleet/bans`. Name the servers with `all: true` or with `labels` (every label
/// must match), not both.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetBanBody {
    /// The address or CIDR range.
    #[schema(value_type = super::schemas::Address)]
    ip: String,
    /// The jail; required to ban. To unban, omit it to lift the ban in every jail.
    #[schema(value_type = Option<super::schemas::JailName>)]
    jail: Option<String>,
    /// `true` lifts the ban instead.
    #[serde(default)]
    unban: bool,
    /// Every registered server.
    #[serde(default)]
    all: bool,
    /// Servers carrying all of these labels.
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    /// How long the command stays queued for servers whose agent is offline, in seconds (1 to
    /// 604800; 3600 by default). Past it, what was not delivered is reported `expired`.
    #[schema(minimum = 1, maximum = 604800)]
    deadline_secs: Option<u64>,
    /// An admin's explicit go-ahead for a ban the guard rails stop otherwise: a network wider
    /// than `guards.ban_min_prefix_v4`/`_v6`, or the broadcast address. Recorded in the audit
    /// log; it never lifts the refusal of the hub's own addresses.
    #[serde(default, rename = "override")]
    guard_override: bool,
    /// How long a ban lasts, in seconds (60 to 31536000, a year): the hub lifts it on every
    /// server at its end, across agent, fail2ban and hub restarts, and it stays queued for
    /// offline servers no longer than that. Absent: the jail's own ban time. Only for a ban.
    #[schema(minimum = 60, maximum = 31536000)]
    duration_secs: Option<u64>,
}

/// One server of a fleet action.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetDto {
    server_id: String,
    server_name: String,
    state: TargetState,
    /// Whether fail2ban's state changed (once done).
    changed: Option<bool>,
    /// The jails the change applied to (once done).
    jails: Vec<String>,
    /// Why it failed.
    error: Option<String>,
    /// Deliveries so far (more than one after the agent went away mid-command).
    attempts: u64,
    updated_at: DateTime<Utc>,
    delivered_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
}

impl From<TargetRecord> for TargetDto {
    fn from(t: TargetRecord) -> Self {
        Self {
            server_id: t.server_id.to_string(),
            server_name: t.server_name,
            state: t.state,
            changed: t.changed,
            jails: t.jails,
            error: t.error,
            attempts: t.attempts,
            updated_at: t.updated_at,
            delivered_at: t.delivered_at,
            finished_at: t.finished_at,
        }
    }
}

/// A fleet-wide ban or unban and where each server is with it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetActionDto {
    id: String,
    /// `ban` or `unban`.
    action: String,
    ip: String,
    jail: Option<String>,
    /// What the servers were selected by: `"all"` or `{"labels": {...}}`.
    #[schema(value_type = Object)]
    selector: serde_json::Value,
    requested_by: String,
    created_at: DateTime<Utc>,
    /// Commands still queued at this time expire.
    deadline: DateTime<Utc>,
    /// When the hub lifts the ban (a ban with `durationSecs`).
    ends_at: Option<DateTime<Utc>>,
    /// Number of servers per state.
    counts: BTreeMap<String, u64>,
    /// Every server (empty in listings).
    servers: Vec<TargetDto>,
}

impl From<FleetActionRecord> for FleetActionDto {
    fn from(a: FleetActionRecord) -> Self {
        Self {
            id: a.id,
            action: if a.ban { "ban" } else { "unban" }.to_owned(),
            ip: a.ip,
            jail: a.jail,
            selector: serde_json::from_str(&a.selector).unwrap_or(serde_json::Value::Null),
            requested_by: a.requested_by,
            created_at: a.created_at,
            deadline: a.deadline,
            ends_at: None,
            counts: a
                .counts
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            servers: a.targets.into_iter().map(TargetDto::from).collect(),
        }
    }
}

fn fleet_ban_request(body: FleetBanBody) -> Result<FleetBan, ApiError> {
    let ip = IpOrCidr::parse(&body.ip).map_err(|e| ApiError::invalid("ip", e))?;
    let jail = body
        .jail
        .as_deref()
        .map(|raw| super::jails::jail_name("jail", raw))
        .transpose()?;
    if jail.is_none() && !body.unban {
        return Err(ApiError::invalid(
            "jail",
            "is required to ban (only an unban may leave it out, meaning every jail)",
        ));
    }
    let selector = match (body.all, body.labels.is_empty()) {
        (true, true) => Selector::All,
        (false, false) => {
            let labels = Labels::parse(body.labels).map_err(|e| ApiError::invalid("labels", e))?;
            Selector::Labels(labels.into_map())
        }
        (true, false) => {
            return Err(ApiError::invalid(
                "labels",
                "give either `all: true` or `labels`, not both",
            ));
        }
        (false, true) => {
            return Err(ApiError::invalid(
                "all",
                "name the servers: `all: true` for every server, or `labels` to select some",
            ));
        }
    };
    let deadline = body.deadline_secs.unwrap_or(DEFAULT_QUEUE_SECS);
    if !(1..=MAX_QUEUE_SECS).contains(&deadline) {
        return Err(ApiError::invalid(
            "deadlineSecs",
            format!("must be between 1 and {MAX_QUEUE_SECS} seconds"),
        ));
    }
    Ok(FleetBan {
        ip,
        jail,
        ban: !body.unban,
        selector,
        queue_for: Duration::from_secs(deadline),
    })
}

/// Bans (or unbans) an address on every server or on the servers matching labels. Online servers
/// are done before the answer; offline ones stay `queued` until their agent comes back or the
/// deadline passes (`expired`). Follow them with `GET /api/fleet/actions/{id}`.
#[utoipa::path(post, path = "/api/fleet/bans", tag = "control", request_body = FleetBanBody,
    extensions(("x-required-role" = json!("operator"))),
    responses((status = 201, body = FleetActionDto),
              (status = 403, description = "`override` from a caller who is not an admin", body = Problem),
              (status = 422, description = "A field breaks its rule, a guard rail (`guard_*` codes) refused the ban, or no server matches", body = Problem)))]
async fn fleet_ban(
    caller: Operator,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<FleetBanBody>,
) -> Result<(StatusCode, ApiJson<FleetActionDto>), ApiError> {
    let overridden = guards::admin_override(&caller, body.guard_override)?;
    let duration = super::timed_bans::duration(&state, body.duration_secs)?;
    if duration.is_some() && body.unban {
        return Err(ApiError::invalid(
            "durationSecs",
            "is for a ban; an unban takes none",
        ));
    }
    let request = fleet_ban_request(body)?;
    if request.ban {
        guards::check_ban(&state, &caller, "ip", &request.ip, overridden)?;
    }
    let (action, ends_at) = state
        .timed_bans
        .fleet_ban(request, duration, &caller.requested_by())
        .await
        .map_err(|e| match e {
            ActionError::NoServer => ApiError::invalid("labels", "no server matches the selector"),
            ActionError::Fleet(e) => ApiError::Fleet(e),
        })?;
    let mut action = FleetActionDto::from(action);
    action.ends_at = ends_at;
    Ok((StatusCode::CREATED, ApiJson(action)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// At most this many actions (1 to 200, 50 by default).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u64>,
    /// Actions older than this action id.
    before: Option<String>,
}

/// Fleet actions, newest first, with the number of servers per state.
#[utoipa::path(get, path = "/api/fleet/actions", tag = "control", params(ListParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<FleetActionDto>), (status = 422, body = Problem)))]
async fn list_actions(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<ApiJson<Vec<FleetActionDto>>, ApiError> {
    let params = super::error::query(params)?;
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIST}"),
        ));
    }
    let actions = state
        .fleet
        .fleet_actions(limit, params.before.as_deref())
        .await?;
    let ids: Vec<String> = actions.iter().map(|a| a.id.clone()).collect();
    let ends = state.timed_bans.ends_of_actions(&ids).await?;
    Ok(ApiJson(
        actions
            .into_iter()
            .map(|a| {
                let ends_at = ends.get(&a.id).copied();
                FleetActionDto {
                    ends_at,
                    ..a.into()
                }
            })
            .collect(),
    ))
}

/// One fleet action with every server's state and result.
#[utoipa::path(get, path = "/api/fleet/actions/{id}", tag = "control",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Action id")),
    responses((status = 200, body = FleetActionDto), (status = 404, body = Problem)))]
async fn get_action(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<FleetActionDto>, ApiError> {
    let not_found = || ApiError::NotFound("no fleet action with this id".to_owned());
    if uuid::Uuid::parse_str(&id).is_err() {
        return Err(not_found());
    }
    let action = state.fleet.fleet_action(&id).await?.ok_or_else(not_found)?;
    let ends_at = state
        .timed_bans
        .ends_of_actions(std::slice::from_ref(&id))
        .await?
        .remove(&id);
    Ok(ApiJson(FleetActionDto {
        ends_at,
        ..action.into()
    }))
}

/// Body of `PUT /api/servers/{id}/labels`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelsBody {
    /// The server's new labels (replacing the old ones): keys follow the name rule, values are at
    /// most 128 printable characters, at most 32 labels.
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerLabels {
    id: String,
    name: String,
    labels: BTreeMap<String, String>,
}

/// Replaces a server's labels, which fleet actions select servers by.
#[utoipa::path(put, path = "/api/servers/{id}/labels", tag = "servers", request_body = LabelsBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = ServerLabels), (status = 404, body = Problem),
              (status = 422, body = Problem)))]
async fn set_labels(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
    ApiJson(body): ApiJson<LabelsBody>,
) -> Result<ApiJson<ServerLabels>, ApiError> {
    let labels = Labels::parse(body.labels).map_err(|e| ApiError::invalid("labels", e))?;
    let server = state
        .store
        .set_server_labels(id, &labels)
        .await?
        .ok_or_else(|| ApiError::Fleet(FleetError::UnknownServer(id.to_string())))?;
    Ok(ApiJson(ServerLabels {
        id: server.id.to_string(),
        name: server.name.to_string(),
        labels: server.labels.into_map(),
    }))
}

/// A hub replica.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaDto {
    id: String,
    started_at: DateTime<Utc>,
    heartbeat_at: DateTime<Utc>,
    /// Agents whose session it holds.
    agents: u64,
}

/// How often one replica led and ran one singleton job.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobRunsDto {
    job: String,
    replica: String,
    /// Times this replica became the job's leader.
    terms: u64,
    /// Passes it ran (for jobs that report them, e.g. the sweeper).
    runs: u64,
    first_run_at: DateTime<Utc>,
    last_run_at: DateTime<Utc>,
}

/// The hub replicas sharing this database.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// The replica that answered.
    replica: String,
    /// `sqlite` (one hub) or `postgres` (replicas possible).
    database: String,
    /// Agents with a session on the replica that answered.
    agents_here: u64,
    replicas: Vec<ReplicaDto>,
    /// The jobs only one replica at a time runs (retention, the sweeper, scheduled probes).
    jobs: Vec<JobRunsDto>,
}

/// The replicas, the agents each holds, and which replica ran the singleton jobs.
#[utoipa::path(get, path = "/api/cluster", tag = "health",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = ClusterView)))]
async fn cluster_view(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<ClusterView>, ApiError> {
    Ok(ApiJson(state.fleet.cluster_status().await?.into()))
}

impl From<ClusterStatus> for ClusterView {
    fn from(status: ClusterStatus) -> Self {
        Self {
            replica: status.replica,
            database: status.database.to_owned(),
            agents_here: status.agents_here,
            replicas: status
                .replicas
                .into_iter()
                .map(|r| ReplicaDto {
                    id: r.id,
                    started_at: r.started_at,
                    heartbeat_at: r.heartbeat_at,
                    agents: r.agents,
                })
                .collect(),
            jobs: status
                .jobs
                .into_iter()
                .map(|j| JobRunsDto {
                    job: j.name,
                    replica: j.replica,
                    terms: j.terms,
                    runs: j.runs,
                    first_run_at: j.first_run_at,
                    last_run_at: j.last_run_at,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: serde_json::Value) -> Result<FleetBan, ApiError> {
        fleet_ban_request(serde_json::from_value(json).expect("shape"))
    }

    fn field_of(result: Result<FleetBan, ApiError>) -> String {
        match result {
            Err(ApiError::Invalid { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_fleet_ban_names_its_servers_and_jail() {
        let ok = body(serde_json::json!({"ip": "203.0.113.7", "jail": "sshd", "all": true}))
            .expect("valid");
        assert!(ok.ban);
        assert_eq!(ok.selector, Selector::All);
        assert_eq!(ok.queue_for, Duration::from_secs(DEFAULT_QUEUE_SECS));
        let unban = body(serde_json::json!({"ip": "203.0.113.0/24", "unban": true,
                                            "labels": {"env": "prod"}, "deadlineSecs": 5}))
        .expect("valid");
        assert!(!unban.ban);
        assert!(unban.jail.is_none());
        assert_eq!(unban.queue_for, Duration::from_secs(5));

        let check = |json, field: &str| assert_eq!(field_of(body(json)), field);
        check(
            serde_json::json!({"ip": "nope", "jail": "sshd", "all": true}),
            "ip",
        );
        check(
            serde_json::json!({"ip": "203.0.113.7", "all": true}),
            "jail",
        );
        check(
            serde_json::json!({"ip": "203.0.113.7", "jail": "../x", "all": true}),
            "jail",
        );
        for reserved in ["DEFAULT", "INCLUDES", "includes", "banhub-defaults"] {
            check(
                serde_json::json!({"ip": "203.0.113.7", "jail": reserved, "all": true}),
                "jail",
            );
        }
        let mapped =
            body(serde_json::json!({"ip": "::ffff:203.0.113.7", "jail": "sshd", "all": true}))
                .expect("valid");
        assert_eq!(mapped.ip.to_string(), "203.0.113.7");
        check(
            serde_json::json!({"ip": "203.0.113.7", "jail": "sshd"}),
            "all",
        );
        check(
            serde_json::json!({"ip": "203.0.113.7", "jail": "sshd", "all": true, "labels": {"a": "b"}}),
            "labels",
        );
        check(
            serde_json::json!({"ip": "203.0.113.7", "jail": "sshd", "labels": {"bad key": "b"}}),
            "labels",
        );
        check(
            serde_json::json!({"ip": "203.0.113.7", "jail": "sshd", "all": true, "deadlineSecs": 0}),
            "deadlineSecs",
        );
    }
}
