//! `/api/servers`: list, add (with an enrollment token), delete (revoke), and test servers.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::drift::DriftStateDto;
use super::error::{ApiError, ApiJson, Problem};
use super::target::ServerPath;
use crate::auth::{Admin, Operator, Viewer};
use crate::domain::profiles::drift::DriftState;
use crate::domain::{Labels, NewServer, ServerName, ServerStatus};
use crate::fleet::{IssuedToken, PingReport, ServerView};

const MAX_DESCRIPTION: usize = 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_servers, create_server))
        .routes(routes!(get_server, delete_server))
        .routes(routes!(test_server))
        .routes(routes!(new_enrollment_token))
}

/// Body of `POST /api/servers`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateServer {
    /// Unique name: letters, digits, `.`, `_`, `@`, `-`; at most 64 characters.
    #[schema(value_type = super::schemas::Name)]
    name: String,
    /// At most 1024 characters, no control characters but line ends and tabs.
    #[serde(default)]
    #[schema(max_length = 1024, pattern = "^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$")]
    description: String,
    /// `key=value` labels for grouping servers.
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum StatusDto {
    /// Created, no agent enrolled yet and no direct callback received.
    Pending,
    /// No agent, but fail2ban reports through direct callbacks (`lastSeenAt`: the last one).
    Reporting,
    Online,
    Offline,
}

/// A registered fail2ban host.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerDto {
    id: String,
    name: String,
    description: String,
    labels: BTreeMap<String, String>,
    status: StatusDto,
    created_at: DateTime<Utc>,
    enrolled_at: Option<DateTime<Utc>>,
    /// Last time the agent was seen alive (now, while online); for a server without an agent, its
    /// last direct callback.
    last_seen_at: Option<DateTime<Utc>>,
    /// When the current session started, while online.
    connected_at: Option<DateTime<Utc>>,
    agent_id: Option<String>,
    agent_version: Option<String>,
    fail2ban_version: Option<String>,
    hostname: Option<String>,
    /// Address the agent connects from.
    address: Option<String>,
    /// The hub replica holding the agent's session (only with several replicas on PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    replica: Option<String>,
    /// Where the server stands against its profile (`GET /api/servers/{id}/drift` has the diff).
    drift: DriftStateDto,
}

impl From<ServerView> for ServerDto {
    fn from(view: ServerView) -> Self {
        let s = view.server;
        let session = view.session;
        let replica = view.replica;
        let online = session.is_some();
        Self {
            id: s.id.to_string(),
            name: s.name.to_string(),
            description: s.description,
            labels: s.labels.into_map(),
            status: match view.status {
                ServerStatus::Pending => StatusDto::Pending,
                ServerStatus::Reporting => StatusDto::Reporting,
                ServerStatus::Online => StatusDto::Online,
                ServerStatus::Offline => StatusDto::Offline,
            },
            created_at: s.created_at,
            enrolled_at: s.enrolled_at,
            last_seen_at: if online {
                Some(Utc::now())
            } else {
                s.last_seen_at
            },
            connected_at: session.as_ref().map(|i| i.connected_at),
            agent_id: s.agent_id.map(|a| a.to_string()),
            agent_version: session
                .as_ref()
                .map(|i| i.agent_version.clone())
                .or(s.agent_version),
            fail2ban_version: session
                .as_ref()
                .map(|i| i.fail2ban_version.clone())
                .or(s.fail2ban_version),
            hostname: session.as_ref().map(|i| i.hostname.clone()).or(s.hostname),
            address: session.map(|i| i.address).or(s.last_address),
            replica,
            drift: DriftStateDto::Unknown,
        }
    }
}

impl ServerDto {
    fn with_drift(mut self, drift: Option<DriftState>) -> Self {
        self.drift = drift.map_or(DriftStateDto::Unknown, Into::into);
        self
    }
}

/// A one-time enrollment token and the command that uses it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnrollmentDto {
    /// Shown once; the hub keeps only a hash of its secret.
    token: String,
    expires_at: DateTime<Utc>,
    /// Run this on the fail2ban host.
    command: String,
}

impl From<IssuedToken> for EnrollmentDto {
    fn from(t: IssuedToken) -> Self {
        Self {
            command: format!("banhub-agent enroll {}", t.token),
            token: t.token,
            expires_at: t.expires_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedServer {
    server: ServerDto,
    enrollment: EnrollmentDto,
}

/// The result of a connection test.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    /// fail2ban's answer: `pong`.
    reply: String,
    /// Hub → agent → fail2ban → back, in milliseconds.
    round_trip_ms: f64,
    /// Time fail2ban took to answer the agent, in milliseconds.
    fail2ban_latency_ms: f64,
    agent_version: String,
    fail2ban_version: String,
}

impl From<PingReport> for TestResult {
    fn from(p: PingReport) -> Self {
        Self {
            reply: "pong".to_owned(),
            round_trip_ms: p.round_trip.as_secs_f64() * 1000.0,
            fail2ban_latency_ms: p.fail2ban_latency.as_secs_f64() * 1000.0,
            agent_version: p.agent_version,
            fail2ban_version: p.fail2ban_version,
        }
    }
}

fn new_server(body: CreateServer) -> Result<NewServer, ApiError> {
    let name = ServerName::parse(&body.name).map_err(|e| ApiError::invalid("name", e))?;
    if body.description.chars().count() > MAX_DESCRIPTION
        || body
            .description
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(ApiError::invalid(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters without control characters"),
        ));
    }
    let labels = Labels::parse(body.labels).map_err(|e| ApiError::invalid("labels", e))?;
    Ok(NewServer {
        name,
        description: body.description,
        labels,
    })
}

/// Every registered server with its live status.
#[utoipa::path(get, path = "/api/servers", tag = "servers",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<ServerDto>)))]
async fn list_servers(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<ServerDto>>, ApiError> {
    let servers = state.fleet.list().await?;
    let drift = state.profiles.drift_states().await?;
    Ok(ApiJson(
        servers
            .into_iter()
            .map(|view| {
                let state = drift.get(&view.server.id).copied();
                ServerDto::from(view).with_drift(state)
            })
            .collect(),
    ))
}

/// Registers a server and returns its one-time enrollment token.
#[utoipa::path(post, path = "/api/servers", tag = "servers", request_body = CreateServer,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = CreatedServer),
              (status = 409, description = "Name already in use", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn create_server(
    _caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateServer>,
) -> Result<(StatusCode, ApiJson<CreatedServer>), ApiError> {
    let (view, token) = state.fleet.create_server(new_server(body)?).await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(CreatedServer {
            server: view.into(),
            enrollment: token.into(),
        }),
    ))
}

/// One server.
#[utoipa::path(get, path = "/api/servers/{id}", tag = "servers",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = ServerDto), (status = 404, body = Problem)))]
async fn get_server(
    _caller: Viewer,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<ServerDto>, ApiError> {
    let drift = state.profiles.server_drift(id).await?.state;
    Ok(ApiJson(
        ServerDto::from(state.fleet.get(id).await?).with_drift(Some(drift)),
    ))
}

/// Deletes a server: its agent's certificate is revoked and its live session cut.
#[utoipa::path(delete, path = "/api/servers/{id}", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn delete_server(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<StatusCode, ApiError> {
    state.fleet.delete_server(id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Round trip through the server's agent to fail2ban's `ping`.
#[utoipa::path(post, path = "/api/servers/{id}/test", tag = "servers",
    extensions(("x-required-role" = json!("operator"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = TestResult),
              (status = 404, body = Problem),
              (status = 502, description = "fail2ban unreachable or failing on the host", body = Problem),
              (status = 503, description = "Agent offline or not enrolled", body = Problem),
              (status = 504, description = "Agent did not answer in time", body = Problem)))]
async fn test_server(
    caller: Operator,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<TestResult>, ApiError> {
    let report = state.fleet.ping(id, &caller.requested_by()).await?;
    Ok(ApiJson(report.into()))
}

/// Issues a new one-time enrollment token for an existing server, e.g. after its host was rebuilt.
/// Enrolling with it replaces (and revokes) the server's current agent.
#[utoipa::path(post, path = "/api/servers/{id}/enrollment-token", tag = "servers",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 201, body = EnrollmentDto), (status = 404, body = Problem)))]
async fn new_enrollment_token(
    _caller: Admin,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<(StatusCode, ApiJson<EnrollmentDto>), ApiError> {
    let token = state.fleet.issue_token(id).await?;
    Ok((StatusCode::CREATED, ApiJson(token.into())))
}
