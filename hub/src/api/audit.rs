//! `GET /api/audit`: the audit log, newest first, in pages (admins only).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target;
use crate::auth::{Admin, AuditPage, AuditQuery, AuditRecord, Outcome};
use crate::domain::ServerId;

const DEFAULT_PAGE: u64 = 50;
const MAX_PAGE: u64 = 500;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// Filters and paging of `GET /api/audit`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Entries per page, 1 to 500 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    #[param(value_type = Option<i64>, minimum = 1)]
    cursor: Option<String>,
    /// Only this actor (a subject, e.g. `alice` or `token:<id>`).
    actor: Option<String>,
    /// Only entries about this server: its id, or its name.
    #[param(value_type = Option<super::schemas::ServerRef>)]
    server_id: Option<String>,
}

/// One recorded action.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntryDto {
    id: i64,
    at: DateTime<Utc>,
    /// Who: the subject of the user or token (for a failed login, the name tried).
    actor: String,
    actor_name: String,
    /// `session`, `token`, `bootstrap`, or `anonymous`.
    actor_kind: String,
    /// What: `METHOD /route/{template}`, or `login` / `logout`.
    action: String,
    /// The path as requested.
    path: String,
    /// The server it concerned, if any.
    server_id: Option<String>,
    /// The HTTP status of the answer.
    status: u16,
    outcome: Outcome,
    /// Details the handler recorded (e.g. the address banned).
    #[schema(value_type = Object)]
    detail: serde_json::Map<String, serde_json::Value>,
    client_addr: Option<String>,
}

impl From<AuditRecord> for AuditEntryDto {
    fn from(r: AuditRecord) -> Self {
        Self {
            id: r.id,
            at: r.at,
            actor: r.actor,
            actor_name: r.actor_name,
            actor_kind: r.actor_kind,
            action: r.action,
            path: r.path,
            server_id: r.server_id,
            status: r.status,
            outcome: r.outcome,
            detail: r.detail,
            client_addr: r.client_addr,
        }
    }
}

/// A page of the audit log, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPageDto {
    entries: Vec<AuditEntryDto>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    next_cursor: Option<String>,
}

/// Every state-changing action (who, what, which server, how it ended, when), newest first.
#[utoipa::path(get, path = "/api/audit", tag = "audit", params(AuditParams),
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = AuditPageDto),
              (status = 400, description = "Unknown parameter", body = Problem),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn list_audit(
    State(state): State<AppState>,
    _admin: Admin,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> Result<ApiJson<AuditPageDto>, ApiError> {
    let params = super::error::query(params)?.parse()?;
    let server_id = target::filter(&state, params.server.as_deref()).await?;
    let page = state.auth.audit_page(params.query(server_id)).await?;
    Ok(ApiJson(page.into()))
}

/// [`AuditParams`] with their rules checked; the server is resolved against the store apart.
struct ParsedAuditParams {
    limit: u64,
    before: Option<i64>,
    actor: Option<String>,
    server: Option<String>,
}

impl AuditParams {
    fn parse(self) -> Result<ParsedAuditParams, ApiError> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE,
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=MAX_PAGE).contains(n))
                .ok_or_else(|| ApiError::invalid("limit", format!("must be 1 to {MAX_PAGE}")))?,
        };
        let before =
            self.cursor
                .as_deref()
                .map(|c| {
                    c.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        ApiError::invalid("cursor", "must be a nextCursor of this API")
                    })
                })
                .transpose()?;
        Ok(ParsedAuditParams {
            limit,
            before,
            actor: self.actor.filter(|a| !a.is_empty()),
            server: self.server_id,
        })
    }
}

impl ParsedAuditParams {
    fn query(self, server_id: Option<ServerId>) -> AuditQuery {
        AuditQuery {
            before: self.before,
            limit: self.limit,
            actor: self.actor,
            server_id: server_id.map(|id| id.to_string()),
        }
    }
}

impl From<AuditPage> for AuditPageDto {
    fn from(page: AuditPage) -> Self {
        Self {
            entries: page.records.into_iter().map(AuditEntryDto::from).collect(),
            next_cursor: page.next_cursor.map(|id| id.to_string()),
        }
    }
}
