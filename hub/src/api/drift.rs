//! Drift: `GET /api/servers/{id}/drift` (one server against its profile, with the diff of each
//! file from what it should be to what it is) and `GET /api/drift` (every server's state and the
//! counts per state).

use std::collections::BTreeMap;

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target::ServerPath;
use crate::auth::Viewer;
use crate::domain::profiles::drift::{DriftRecord, DriftState, FileDriftKind};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(server_drift))
        .routes(routes!(drift_summary))
}

/// Where a server stands against its profile.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DriftStateDto {
    /// Every file is as the profile says.
    InSync,
    /// At least one file differs.
    Drifted,
    /// Not compared: no profile, agent offline or too old, or its files could not be read.
    Unknown,
}

impl From<DriftState> for DriftStateDto {
    fn from(s: DriftState) -> Self {
        match s {
            DriftState::InSync => Self::InSync,
            DriftState::Drifted => Self::Drifted,
            DriftState::Unknown => Self::Unknown,
        }
    }
}

/// How a file differs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileDriftDto {
    /// The profile has it; the host does not.
    Missing,
    /// Both have it, with different text.
    Different,
    /// The profile removes it; the host has it.
    Unexpected,
    /// A file outside the profile changed since the host was in sync (a hand edit).
    ChangedOutsideProfile,
}

/// One file that differs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftFileDto {
    path: String,
    kind: FileDriftDto,
    /// `diff -u` from what the file should be (`a/`) to what the host has (`b/`).
    diff: String,
}

/// A server's drift from its profile.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerDriftDto {
    server_id: String,
    state: DriftStateDto,
    /// The profile that applies to the server.
    profile: Option<String>,
    /// The profile version compared with.
    version: Option<i64>,
    /// Why the state is `unknown`, or a word on the comparison.
    reason: String,
    files: Vec<DriftFileDto>,
    /// When this result was found (later checks finding the same leave it).
    checked_at: DateTime<Utc>,
    /// When the server entered this state.
    since: DateTime<Utc>,
}

impl From<DriftRecord> for ServerDriftDto {
    fn from(r: DriftRecord) -> Self {
        Self {
            server_id: r.server.to_string(),
            state: r.state.into(),
            profile: r.profile.map(|p| p.to_string()),
            version: r.version,
            reason: r.reason,
            files: r
                .files
                .into_iter()
                .map(|f| DriftFileDto {
                    path: f.path,
                    kind: match f.kind {
                        FileDriftKind::Missing => FileDriftDto::Missing,
                        FileDriftKind::Different => FileDriftDto::Different,
                        FileDriftKind::Unexpected => FileDriftDto::Unexpected,
                        FileDriftKind::ChangedOutsideProfile => FileDriftDto::ChangedOutsideProfile,
                    },
                    diff: f.diff,
                })
                .collect(),
            checked_at: r.checked_at,
            since: r.since,
        }
    }
}

/// One server in the drift summary.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftRowDto {
    server_id: String,
    server_name: String,
    state: DriftStateDto,
    profile: Option<String>,
    version: Option<i64>,
    reason: String,
    /// The paths of the files that differ.
    files: Vec<String>,
    since: DateTime<Utc>,
}

/// Every server's drift state.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftSummaryDto {
    /// Servers per state: `in_sync`, `drifted`, `unknown`.
    counts: BTreeMap<String, u64>,
    servers: Vec<DriftRowDto>,
}

/// A server's drift from its profile, with the diff of every file that differs.
#[utoipa::path(get, path = "/api/servers/{id}/drift", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = String, Path, description = "Server id or name")),
    responses((status = 200, body = ServerDriftDto), (status = 404, body = Problem)))]
async fn server_drift(
    _caller: Viewer,
    State(state): State<AppState>,
    ServerPath(id): ServerPath,
) -> Result<ApiJson<ServerDriftDto>, ApiError> {
    Ok(ApiJson(state.profiles.server_drift(id).await?.into()))
}

/// Every server's drift state, and how many servers are in each.
#[utoipa::path(get, path = "/api/drift", tag = "profiles",
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = DriftSummaryDto)))]
async fn drift_summary(
    _caller: Viewer,
    State(state): State<AppState>,
) -> Result<ApiJson<DriftSummaryDto>, ApiError> {
    let summary = state.profiles.drift_summary().await?;
    Ok(ApiJson(DriftSummaryDto {
        counts: summary
            .counts
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        servers: summary
            .servers
            .into_iter()
            .map(|s| DriftRowDto {
                server_id: s.server.id.to_string(),
                server_name: s.server.name.to_string(),
                state: s.record.state.into(),
                profile: s.record.profile.map(|p| p.to_string()),
                version: s.record.version,
                reason: s.record.reason,
                files: s.record.files.into_iter().map(|f| f.path).collect(),
                since: s.record.since,
            })
            .collect(),
    }))
}
