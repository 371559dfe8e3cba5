//! Filters created through banhub on the target server (`X-BanDaemon-Server`): the catalog new
//! jails and filters are made from (`GET /api/filters/catalog`), a new custom filter
//! (`POST /api/filters`), and deleting a filter banhub created (`DELETE /api/filters/{name}`).
//! Every line is checked here with the rules the agent applies again (`banhub_proto::new_config`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use banhub_proto::new_config::FilterLines;
use banhub_proto::rules::FilterName;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::target::Target;
use crate::auth::{Admin, Viewer};
use crate::fleet::{ConfigChange, CreatedConfig, FilterCatalog, NewFilter};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(catalog))
        .routes(routes!(create_filter))
        .routes(routes!(delete_filter))
}

fn filter_name(field: &str, raw: &str) -> Result<FilterName, ApiError> {
    FilterName::parse(raw).map_err(|e| ApiError::invalid(field, format!("{raw:?} {e}")))
}

/// The host's filters with the files that define them, the jails of its `jail.conf` as templates,
/// and the jails and filters banhub created there (which banhub can delete).
#[utoipa::path(get, path = "/api/filters/catalog", tag = "filters",
    extensions(("x-required-role" = json!("viewer"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = FilterCatalog)))]
async fn catalog(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
) -> Result<ApiJson<FilterCatalog>, ApiError> {
    Ok(ApiJson(
        state
            .fleet
            .filter_catalog(server, &caller.requested_by())
            .await?,
    ))
}

/// A new custom filter.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewFilterBody {
    /// No filter of that name may exist on the host (shipped or custom).
    #[schema(value_type = super::schemas::Name)]
    name: String,
    /// fail2ban's regular expressions (with `<HOST>`), one per element: 1 to 32 lines of at most
    /// 2048 bytes, not starting with `#` or `;`.
    #[schema(min_items = 1, max_items = 32)]
    failregex: Vec<String>,
    /// Lines that are never failures, like `failregex`; at most 32.
    #[serde(default)]
    #[schema(max_items = 32)]
    ignoreregex: Vec<String>,
    /// fail2ban's `datepattern`; by default its own date detection.
    #[serde(default)]
    #[schema(max_length = 256)]
    datepattern: Option<String>,
}

/// Creates a custom filter on the host (`filter.d/<name>.local`, marked as created by banhub):
/// its expressions compiled by `fail2ban-regex` and the configuration checked by fail2ban before
/// it becomes live. fail2ban's own messages come back in `details` when it refuses the filter.
#[utoipa::path(post, path = "/api/filters", tag = "filters", request_body = NewFilterBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 201, body = ConfigChange),
              (status = 422, description = "A field breaks its rule, the name is taken, or fail2ban refused the filter (nothing changed)", body = Problem)))]
async fn create_filter(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    ApiJson(body): ApiJson<NewFilterBody>,
) -> Result<(StatusCode, ApiJson<ConfigChange>), ApiError> {
    let name = filter_name("name", &body.name)?;
    let lines = FilterLines {
        failregex: body.failregex,
        ignoreregex: body.ignoreregex,
        datepattern: body.datepattern.unwrap_or_default(),
    }
    .checked()
    .map_err(|e| ApiError::invalid(&e.field, e.reason))?;
    let change = state
        .fleet
        .create_filter(server, NewFilter { name, lines }, &caller.requested_by())
        .await?;
    Ok((StatusCode::CREATED, ApiJson(change)))
}

/// Deletes a filter banhub created (its `filter.d/<name>.local` starts with banhub's marker) that
/// no jail uses, then fail2ban reloads. Any other filter is refused and left as it is.
#[utoipa::path(delete, path = "/api/filters/{name}", tag = "filters",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = super::schemas::Name, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange),
              (status = 404, description = "No such filter file on the host", body = Problem),
              (status = 422, description = "Not a filter banhub created (`host_policy`), a jail still uses it, or an invalid name", body = Problem)))]
async fn delete_filter(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    Path(name): Path<String>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    let filter = filter_name("name", &name)?;
    let change = state
        .fleet
        .delete_created(
            server,
            CreatedConfig::Filter(filter),
            &caller.requested_by(),
        )
        .await?;
    Ok(ApiJson(change))
}
