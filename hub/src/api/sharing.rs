//! Sharing policies and shared bans: `GET|POST /api/sharing/policies`, `GET|PUT|DELETE
//! /api/sharing/policies/{id}` (admin to change), each policy with its live counters; and `GET
//! /api/sharing/bans` listing shared bans with their origin and status.

use std::collections::BTreeMap;

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
use super::error::{ApiError, ApiJson, Problem, query};
use super::shared_origin::server_names;
use crate::auth::{Admin, Viewer};
use crate::domain::Labels;
use crate::domain::sharing::{
    JailPattern, MAX_JAIL_PATTERNS, MAX_LADDER_STEPS, MAX_POLICY_NAME, MAX_SHARE_SECS, PolicySpec,
    ServerSet, ShareDuration, SharedBan, SharedBanFilter, SharedBanStatus,
};
use crate::sharing::{PolicyView, SharingError};

/// Most shared bans one listing returns.
const MAX_LIST: u64 = 1000;
const DEFAULT_LIST: u64 = 100;
/// Highest `minFailures` accepted.
const MAX_MIN_FAILURES: u32 = 1_000_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(get_policy, update_policy, delete_policy))
        .routes(routes!(list_shared_bans))
}

impl From<SharingError> for ApiError {
    fn from(e: SharingError) -> Self {
        match e {
            SharingError::NotFound => Self::NotFound(e.to_string()),
            SharingError::NameTaken(_) => Self::invalid("name", e),
            SharingError::Store(e) => Self::from(e),
        }
    }
}

/// Servers: `all: true`, or `labels` (every label must match), not both.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServersDto {
    #[serde(default)]
    all: bool,
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
}

/// How long a shared ban lasts: `origin` (the origin's own ban time), `fixed` (`seconds`), or
/// `ladder` (`steps`: the n-th time the policy shares an address it gets the n-th step, the last
/// step repeating).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DurationDto {
    /// `origin`, `fixed` or `ladder`.
    mode: String,
    /// For `fixed`: 1 to 31622400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seconds: Option<u64>,
    /// For `ladder`: 1 to 16 steps of 1 to 31622400 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<u64>>,
}

/// Body of `POST /api/sharing/policies` and `PUT /api/sharing/policies/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyBody {
    /// 1 to 64 printable characters, unique.
    name: String,
    /// On by default.
    #[serde(default = "yes")]
    enabled: bool,
    /// The servers whose bans are shared.
    sources: ServersDto,
    /// Jail names or globs (`ssh*`); empty or absent: every jail. banhub's own jails never count.
    #[serde(default)]
    jails: Vec<String>,
    /// Share only bans after at least this many failures (1 to 1000000).
    min_failures: Option<u32>,
    /// The servers that get the shared bans (the origin itself never does).
    targets: ServersDto,
    duration: DurationDto,
    /// An unban at the origin lifts the shared bans it caused.
    #[serde(default)]
    unban_follows_origin: bool,
}

fn yes() -> bool {
    true
}

/// A policy's live counters.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountersDto {
    /// Shared bans ever recorded (skips included).
    shared_total: u64,
    /// Shared bans held now.
    active: u64,
    last_match_at: Option<DateTime<Utc>>,
}

/// A sharing policy.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDto {
    id: String,
    name: String,
    enabled: bool,
    sources: ServersDto,
    jails: Vec<String>,
    min_failures: Option<u32>,
    targets: ServersDto,
    duration: DurationDto,
    unban_follows_origin: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    counters: CountersDto,
}

fn servers_dto(set: ServerSet) -> ServersDto {
    match set {
        ServerSet::All => ServersDto {
            all: true,
            labels: BTreeMap::new(),
        },
        ServerSet::Labels(labels) => ServersDto { all: false, labels },
    }
}

impl From<PolicyView> for PolicyDto {
    fn from(view: PolicyView) -> Self {
        let PolicyView { policy, counters } = view;
        let spec = policy.spec;
        let duration = match spec.duration {
            ShareDuration::Origin => DurationDto {
                mode: "origin".to_owned(),
                seconds: None,
                steps: None,
            },
            ShareDuration::Fixed { seconds } => DurationDto {
                mode: "fixed".to_owned(),
                seconds: Some(seconds),
                steps: None,
            },
            ShareDuration::Ladder { steps } => DurationDto {
                mode: "ladder".to_owned(),
                seconds: None,
                steps: Some(steps),
            },
        };
        Self {
            id: policy.id,
            name: spec.name,
            enabled: spec.enabled,
            sources: servers_dto(spec.sources),
            jails: spec.jails.into_iter().map(String::from).collect(),
            min_failures: spec.min_failures,
            targets: servers_dto(spec.targets),
            duration,
            unban_follows_origin: spec.unban_follows_origin,
            created_at: policy.created_at,
            updated_at: policy.updated_at,
            counters: CountersDto {
                shared_total: counters.total,
                active: counters.active,
                last_match_at: counters.last_match_at,
            },
        }
    }
}

fn server_set(field: &str, dto: ServersDto) -> Result<ServerSet, ApiError> {
    match (dto.all, dto.labels.is_empty()) {
        (true, true) => Ok(ServerSet::All),
        (false, false) => Labels::parse(dto.labels)
            .map(ServerSet::labels)
            .map_err(|e| ApiError::invalid(&format!("{field}.labels"), e)),
        (true, false) => Err(ApiError::invalid(
            &format!("{field}.labels"),
            "give either `all: true` or `labels`, not both",
        )),
        (false, true) => Err(ApiError::invalid(
            &format!("{field}.all"),
            "name the servers: `all: true` for every server, or `labels` to select some",
        )),
    }
}

fn share_seconds(field: &str, seconds: u64) -> Result<u64, ApiError> {
    if (1..=MAX_SHARE_SECS).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(ApiError::invalid(
            field,
            format!("must be between 1 and {MAX_SHARE_SECS} seconds"),
        ))
    }
}

fn duration(dto: DurationDto) -> Result<ShareDuration, ApiError> {
    let unexpected = |field: &str, mode: &str| {
        ApiError::invalid(field, format!("is not used with the `{mode}` mode"))
    };
    match dto.mode.as_str() {
        "origin" => match (dto.seconds, dto.steps) {
            (Some(_), _) => Err(unexpected("duration.seconds", "origin")),
            (_, Some(_)) => Err(unexpected("duration.steps", "origin")),
            (None, None) => Ok(ShareDuration::Origin),
        },
        "fixed" => {
            if dto.steps.is_some() {
                return Err(unexpected("duration.steps", "fixed"));
            }
            let seconds = dto.seconds.ok_or_else(|| {
                ApiError::invalid("duration.seconds", "is required with the `fixed` mode")
            })?;
            Ok(ShareDuration::Fixed {
                seconds: share_seconds("duration.seconds", seconds)?,
            })
        }
        "ladder" => {
            if dto.seconds.is_some() {
                return Err(unexpected("duration.seconds", "ladder"));
            }
            let steps = dto.steps.unwrap_or_default();
            if !(1..=MAX_LADDER_STEPS).contains(&steps.len()) {
                return Err(ApiError::invalid(
                    "duration.steps",
                    format!("must hold 1 to {MAX_LADDER_STEPS} steps"),
                ));
            }
            for (i, step) in steps.iter().enumerate() {
                share_seconds(&format!("duration.steps[{i}]"), *step)?;
            }
            Ok(ShareDuration::Ladder { steps })
        }
        _ => Err(ApiError::invalid(
            "duration.mode",
            "must be origin, fixed or ladder",
        )),
    }
}

/// Checks a policy body field by field.
fn policy_spec(body: PolicyBody) -> Result<PolicySpec, ApiError> {
    let name = body.name.trim().to_owned();
    if name.is_empty()
        || name.chars().count() > MAX_POLICY_NAME
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::invalid(
            "name",
            format!("must be 1 to {MAX_POLICY_NAME} characters without control characters"),
        ));
    }
    let sources = server_set("sources", body.sources)?;
    if body.jails.len() > MAX_JAIL_PATTERNS {
        return Err(ApiError::invalid(
            "jails",
            format!("must hold at most {MAX_JAIL_PATTERNS} patterns"),
        ));
    }
    let jails = body
        .jails
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            JailPattern::parse(raw).map_err(|e| ApiError::invalid(&format!("jails[{i}]"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(min) = body.min_failures
        && !(1..=MAX_MIN_FAILURES).contains(&min)
    {
        return Err(ApiError::invalid(
            "minFailures",
            format!("must be between 1 and {MAX_MIN_FAILURES}"),
        ));
    }
    let targets = server_set("targets", body.targets)?;
    Ok(PolicySpec {
        name,
        enabled: body.enabled,
        sources,
        jails,
        min_failures: body.min_failures,
        targets,
        duration: duration(body.duration)?,
        unban_follows_origin: body.unban_follows_origin,
    })
}

/// Every sharing policy with its live counters, by name.
#[utoipa::path(get, path = "/api/sharing/policies", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<PolicyDto>)))]
async fn list_policies(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<PolicyDto>>, ApiError> {
    let policies = state.sharing.policies().await?;
    Ok(ApiJson(policies.into_iter().map(Into::into).collect()))
}

/// Creates a sharing policy: from then on, a ban a source server reports in a matching jail is
/// banned on every target server, for the policy's time.
#[utoipa::path(post, path = "/api/sharing/policies", tag = "sharing", request_body = PolicyBody,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = PolicyDto),
              (status = 422, description = "A field breaks its rule or the name is taken; `field` names it", body = Problem)))]
async fn create_policy(
    _caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<PolicyBody>,
) -> Result<(StatusCode, ApiJson<PolicyDto>), ApiError> {
    let spec = policy_spec(body)?;
    let view = state.sharing.create_policy(spec).await?;
    Ok((StatusCode::CREATED, ApiJson(view.into())))
}

/// One sharing policy with its live counters.
#[utoipa::path(get, path = "/api/sharing/policies/{id}", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Policy id")),
    responses((status = 200, body = PolicyDto), (status = 404, body = Problem)))]
async fn get_policy(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<ApiJson<PolicyDto>, ApiError> {
    Ok(ApiJson(state.sharing.policy(&id).await?.into()))
}

/// Replaces a sharing policy. Shared bans it already made keep their time.
#[utoipa::path(put, path = "/api/sharing/policies/{id}", tag = "sharing", request_body = PolicyBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Policy id")),
    responses((status = 200, body = PolicyDto), (status = 404, body = Problem),
              (status = 422, description = "A field breaks its rule or the name is taken; `field` names it", body = Problem)))]
async fn update_policy(
    _caller: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PolicyBody>,
) -> Result<ApiJson<PolicyDto>, ApiError> {
    let spec = policy_spec(body)?;
    Ok(ApiJson(
        state.sharing.update_policy(&id, spec).await?.into(),
    ))
}

/// Deletes a sharing policy. Shared bans it already made stay until they expire or are lifted.
#[utoipa::path(delete, path = "/api/sharing/policies/{id}", tag = "sharing",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Policy id")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn delete_policy(
    _caller: Admin,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.sharing.delete_policy(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BanListParams {
    /// One address or network, as shared.
    #[param(value_type = Option<super::schemas::Address>)]
    ip: Option<String>,
    /// The target server (id or name).
    #[param(value_type = Option<super::schemas::ServerRef>)]
    server: Option<String>,
    /// The policy id.
    policy: Option<String>,
    /// `pending`, `delivered`, `lifted`, `expired` or `skipped`.
    status: Option<String>,
    /// At most this many (1 to 1000, 100 by default).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u64>,
}

/// A shared ban on one target server, with its origin.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedBanDto {
    id: i64,
    ip: String,
    /// The server that holds it.
    server_id: String,
    server_name: Option<String>,
    origin_server_id: String,
    origin_server_name: Option<String>,
    origin_jail: String,
    /// The origin's ban event.
    origin_event_id: Option<i64>,
    /// `policy` or `rule`.
    source_kind: String,
    /// The policy (or rule) id and name.
    policy_id: String,
    policy_name: String,
    /// The n-th time this policy shared the address.
    step: u32,
    status: SharedBanStatus,
    /// Why it was not sent (the lockout guard's rule).
    skip_reason: Option<String>,
    created_at: DateTime<Utc>,
    /// Absent: until lifted.
    expires_at: Option<DateTime<Utc>>,
    delivered_at: Option<DateTime<Utc>>,
    lifted_at: Option<DateTime<Utc>>,
}

/// The DTO of `ban`, with server names from `names`.
pub(super) fn shared_ban_dto(
    ban: SharedBan,
    names: &std::collections::HashMap<crate::domain::ServerId, String>,
    now: DateTime<Utc>,
) -> SharedBanDto {
    SharedBanDto {
        id: ban.id,
        status: ban.status_at(now),
        server_name: names.get(&ban.target).cloned(),
        origin_server_name: names.get(&ban.origin_server).cloned(),
        server_id: ban.target.to_string(),
        origin_server_id: ban.origin_server.to_string(),
        origin_jail: ban.origin_jail,
        origin_event_id: ban.origin_event.map(|e| e.0),
        source_kind: ban.source.kind.as_str().to_owned(),
        policy_id: ban.source.id,
        policy_name: ban.source.name,
        step: ban.step,
        skip_reason: ban.skip_reason,
        created_at: ban.created_at,
        expires_at: ban.expires_at,
        delivered_at: ban.delivered_at,
        lifted_at: ban.lifted_at,
        ip: ban.ip,
    }
}

/// Shared bans, newest first, with their origin and status.
#[utoipa::path(get, path = "/api/sharing/bans", tag = "sharing", params(BanListParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<SharedBanDto>),
              (status = 404, description = "`server` names no server", body = Problem),
              (status = 422, description = "A parameter breaks its rule; `field` names it", body = Problem)))]
async fn list_shared_bans(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<BanListParams>, QueryRejection>,
) -> Result<ApiJson<Vec<SharedBanDto>>, ApiError> {
    let params = query(params)?;
    let limit = params.limit.unwrap_or(DEFAULT_LIST);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIST}"),
        ));
    }
    let filter = SharedBanFilter {
        ip: params
            .ip
            .as_deref()
            .map(|raw| IpOrCidr::parse(raw).map_err(|e| ApiError::invalid("ip", e)))
            .transpose()?,
        target: super::target::filter(&state, params.server.as_deref()).await?,
        policy: params.policy,
        status: params
            .status
            .as_deref()
            .map(|raw| {
                SharedBanStatus::parse(raw).ok_or_else(|| {
                    ApiError::invalid(
                        "status",
                        "must be pending, delivered, lifted, expired or skipped",
                    )
                })
            })
            .transpose()?,
    };
    let bans = state.sharing.shared_bans(&filter, limit).await?;
    let names = server_names(&state).await?;
    let now = Utc::now();
    Ok(ApiJson(
        bans.into_iter()
            .map(|b| shared_ban_dto(b, &names, now))
            .collect(),
    ))
}

/// Lifts every shared ban of `ip`, for "unban everywhere".
pub(super) async fn lift_everywhere(state: &AppState, ip: IpOrCidr) -> Result<(), ApiError> {
    state.sharing.lift_everywhere(ip).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: serde_json::Value) -> Result<PolicySpec, ApiError> {
        policy_spec(serde_json::from_value(json).expect("shape"))
    }

    fn field_of(result: Result<PolicySpec, ApiError>) -> String {
        match result {
            Err(ApiError::Invalid { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    fn valid() -> serde_json::Value {
        serde_json::json!({
            "name": "ssh to web", "sources": {"all": true}, "jails": ["ssh*"],
            "targets": {"labels": {"role": "web"}}, "duration": {"mode": "fixed", "seconds": 3600},
            "unbanFollowsOrigin": true
        })
    }

    fn with(key: &str, value: serde_json::Value) -> serde_json::Value {
        let mut json = valid();
        json[key] = value;
        json
    }

    #[test]
    fn a_valid_policy_parses() {
        let spec = body(valid()).expect("valid");
        assert_eq!(spec.name, "ssh to web");
        assert!(spec.enabled);
        assert_eq!(spec.sources, ServerSet::All);
        assert_eq!(spec.duration, ShareDuration::Fixed { seconds: 3600 });
        let ladder = body(with(
            "duration",
            serde_json::json!({"mode": "ladder", "steps": [60, 3600]}),
        ))
        .expect("valid");
        assert_eq!(
            ladder.duration,
            ShareDuration::Ladder {
                steps: vec![60, 3600]
            }
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let check = |json, field: &str| assert_eq!(field_of(body(json)), field);
        check(with("name", serde_json::json!("")), "name");
        check(with("name", serde_json::json!("x".repeat(65))), "name");
        check(with("sources", serde_json::json!({})), "sources.all");
        check(
            with(
                "sources",
                serde_json::json!({"all": true, "labels": {"a": "b"}}),
            ),
            "sources.labels",
        );
        check(
            with("targets", serde_json::json!({"labels": {"bad key": "b"}})),
            "targets.labels",
        );
        check(
            with("jails", serde_json::json!(["sshd", "../x"])),
            "jails[1]",
        );
        check(
            with("jails", serde_json::json!(["banhub-shared"])),
            "jails[0]",
        );
        check(with("minFailures", serde_json::json!(0)), "minFailures");
        check(
            with("duration", serde_json::json!({"mode": "forever"})),
            "duration.mode",
        );
        check(
            with("duration", serde_json::json!({"mode": "fixed"})),
            "duration.seconds",
        );
        check(
            with(
                "duration",
                serde_json::json!({"mode": "fixed", "seconds": 0}),
            ),
            "duration.seconds",
        );
        check(
            with(
                "duration",
                serde_json::json!({"mode": "ladder", "steps": []}),
            ),
            "duration.steps",
        );
        check(
            with(
                "duration",
                serde_json::json!({"mode": "ladder", "steps": [60, 0]}),
            ),
            "duration.steps[1]",
        );
        check(
            with(
                "duration",
                serde_json::json!({"mode": "origin", "seconds": 5}),
            ),
            "duration.seconds",
        );
    }
}
