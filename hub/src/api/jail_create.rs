//! Jails created through banhub on the target server (`X-BanDaemon-Server`): a new jail of its own
//! from one of the host's filters (`POST /api/jails`), and deleting a jail banhub created
//! (`DELETE /api/jails/{jail}`). Every field is checked here with the rules the agent applies
//! again (`banhub_proto::new_config`), and a refusal names the field.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use banhub_proto::new_config::JailSettings;
use banhub_proto::rules::FilterName;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::jails::writable_jail_name;
use super::target::Target;
use crate::auth::Admin;
use crate::fleet::{ConfigChange, CreatedConfig, NewJail};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_jail))
        .routes(routes!(delete_jail))
}

fn enabled_default() -> bool {
    true
}

/// A new jail: its name, one of the host's filters, what it reads and its thresholds.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewJailBody {
    /// No jail of that name may exist on the host, in any file.
    #[schema(value_type = super::schemas::JailName)]
    name: String,
    /// A filter of the host's `filter.d` (see `GET /api/filters/catalog`).
    #[schema(value_type = super::schemas::Name)]
    filter: String,
    /// Absolute, normalized log paths (no `.` or `..`, no empty component, no trailing `/`):
    /// letters, digits, `/ . _ - + @` and the globs `* ?`. 1 to 16, or none with `journalMatch`.
    #[serde(default)]
    #[schema(max_items = 16)]
    log_paths: Vec<String>,
    /// The systemd journal match instead of log paths: `FIELD=value` terms separated by one
    /// space, `+` between alternatives (`_SYSTEMD_UNIT=sshd.service + _COMM=sshd`).
    #[serde(default)]
    #[schema(max_length = 512)]
    journal_match: Option<String>,
    /// `auto`, `pyinotify`, `polling` or `systemd`; by default `auto` for log paths and `systemd`
    /// for a journal match (the only backend it takes).
    #[serde(default)]
    backend: Option<String>,
    /// Failures within `findtime` that ban an address.
    #[schema(minimum = 1, maximum = 1000)]
    maxretry: u32,
    /// Seconds.
    #[schema(minimum = 1, maximum = 31536000)]
    findtime: u64,
    /// Seconds; -1 bans for good.
    #[schema(minimum = -1, maximum = 315360000)]
    bantime: i64,
    /// Port names or numbers separated by commas, a range as `1000:2000`; by default the host's.
    #[serde(default)]
    #[schema(max_length = 64, pattern = "^[A-Za-z0-9:,-]*$")]
    port: Option<String>,
    /// Whether the jail starts; true by default.
    #[serde(default = "enabled_default")]
    enabled: bool,
}

impl NewJailBody {
    /// The new jail, each field through the shared rules.
    fn parse(self) -> Result<NewJail, ApiError> {
        let name = writable_jail_name("name", &self.name)?;
        let filter = FilterName::parse(&self.filter)
            .map_err(|e| ApiError::invalid("filter", format!("{:?} {e}", self.filter)))?;
        let settings = JailSettings {
            log_paths: self.log_paths,
            journal_match: self.journal_match.unwrap_or_default(),
            backend: self.backend.unwrap_or_default(),
            maxretry: self.maxretry,
            findtime: self.findtime,
            bantime: self.bantime,
            port: self.port.unwrap_or_default(),
            enabled: self.enabled,
        }
        .checked()
        .map_err(|e| ApiError::invalid(&e.field, e.reason))?;
        Ok(NewJail {
            name,
            filter,
            settings,
        })
    }
}

/// Creates a jail of its own on the host (`jail.d/<jail>.local`, marked as created by banhub):
/// validated by fail2ban before it becomes live, reloaded, health-checked, rolled back on any
/// failure. A name any file already defines is refused.
#[utoipa::path(post, path = "/api/jails", tag = "jails", request_body = NewJailBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 201, body = ConfigChange),
              (status = 404, description = "The filter is not on the host", body = Problem),
              (status = 422, description = "A field breaks its rule, the name is taken, or fail2ban refused the jail (nothing changed)", body = Problem)))]
async fn create_jail(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    ApiJson(body): ApiJson<NewJailBody>,
) -> Result<(StatusCode, ApiJson<ConfigChange>), ApiError> {
    let jail = body.parse()?;
    let change = state
        .fleet
        .create_jail(server, jail, &caller.requested_by())
        .await?;
    Ok((StatusCode::CREATED, ApiJson(change)))
}

/// Deletes a jail banhub created (its `jail.d/<jail>.local` starts with banhub's marker), then
/// fail2ban reloads. Any other jail is refused and left as it is.
#[utoipa::path(delete, path = "/api/jails/{jail}", tag = "jails",
    extensions(("x-required-role" = json!("admin"))),
    params(("jail" = super::schemas::JailName, Path), ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = ConfigChange),
              (status = 404, description = "No such jail file on the host", body = Problem),
              (status = 422, description = "Not a jail banhub created (`host_policy`), or an invalid name", body = Problem)))]
async fn delete_jail(
    caller: Admin,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
) -> Result<ApiJson<ConfigChange>, ApiError> {
    let jail = writable_jail_name("jail", &jail)?;
    let change = state
        .fleet
        .delete_created(server, CreatedConfig::Jail(jail), &caller.requested_by())
        .await?;
    Ok(ApiJson(change))
}
