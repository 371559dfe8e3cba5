//! Filter previews on real logs: `POST /api/jails/{jail}/preview` runs a proposed filter (or the
//! jail's own) over the recent end of the jail's log on the target server (`X-BanDaemon-Server`),
//! and `POST /api/previews` runs it on every server a selector names, answered per host. Both
//! flag the protected addresses among the would-be bans; neither changes anything on a host.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use banhub_proto::rules::FilterName;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::jails::{MAX_CONFIG_BYTES, jail_name};
use super::target::Target;
use crate::auth::Operator;
use crate::domain::Labels;
use crate::fleet::{FilterPreviewResult, PreviewInput, PreviewSource, Selector};
use crate::previews::{HostPreview, Previews};

const MAX_MAXRETRY: u32 = 10_000;
/// One year.
const MAX_FINDTIME_SECS: u64 = 365 * 24 * 3600;
const MAX_LOG_PATHS: usize = 16;
const MAX_LOG_PATH_BYTES: usize = 4096;
/// 256 MiB, the agent's own limit.
const MAX_BYTES: u64 = 256 << 20;
const MIN_BUDGET_MS: u32 = 100;
const MAX_BUDGET_MS: u32 = 60_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(preview_jail))
        .routes(routes!(preview_fleet))
}

/// What to preview. Give at most one of `filter`, `filterText` and `filterLocal`; none runs the
/// jail's own filter.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewBody {
    /// Another filter of the host.
    #[schema(value_type = Option<super::schemas::Name>)]
    filter: Option<String>,
    /// A whole filter file (never written by a preview).
    filter_text: Option<String>,
    /// The text the jail's `filter.d/<filter>.local` would hold (an edit being proposed).
    filter_local: Option<String>,
    /// Failures within `findtimeSecs` that ban (1 to 10000); the jail's own when absent.
    #[schema(minimum = 1, maximum = 10000)]
    maxretry: Option<u32>,
    /// The window in seconds (1 to 31536000); the jail's own when absent.
    #[schema(minimum = 1, maximum = 31536000)]
    findtime_secs: Option<u64>,
    /// Log files to read instead of the jail's (absolute, under the host policy's log
    /// directories; a `*` in a file name matches), at most 16.
    #[serde(default)]
    #[schema(max_items = 16)]
    log_paths: Vec<String>,
    /// Bytes read from the end of each log file (1 to 268435456); 64 MiB when absent.
    #[schema(minimum = 1, maximum = 268435456)]
    max_bytes: Option<u64>,
    /// How long the preview may run on a host, in milliseconds (100 to 60000); 20 s when absent.
    #[schema(minimum = 100, maximum = 60000)]
    time_budget_ms: Option<u32>,
}

/// Runs a filter over the end of the jail's own log on the host, without changing anything:
/// lines read and matched, the addresses that would be banned under `maxretry`/`findtime`, the
/// top addresses, and every protected address among them with the entry protecting it.
#[utoipa::path(post, path = "/api/jails/{jail}/preview", tag = "jails", request_body = PreviewBody,
    extensions(("x-required-role" = json!("operator"))),
    params(("jail" = super::schemas::JailName, Path),
           ("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = FilterPreviewResult),
        (status = 422, description = "Invalid input, or fail2ban-regex refused the filter", body = Problem),
        (status = 429, body = Problem,
            description = "A filter test or preview runs on this server and another waits; try again after `Retry-After` seconds",
            headers(("Retry-After" = u64, description = "Seconds to wait before trying again")))))]
async fn preview_jail(
    caller: Operator,
    State(state): State<AppState>,
    Target(server): Target,
    Path(jail): Path<String>,
    ApiJson(body): ApiJson<PreviewBody>,
) -> Result<ApiJson<FilterPreviewResult>, ApiError> {
    let input = body.parse(&jail, "jail")?;
    let previews = Previews::new(state.fleet.clone(), state.guards.clone());
    Ok(ApiJson(
        previews
            .preview(server, input, &caller.requested_by())
            .await?,
    ))
}

/// A preview on many servers: `all: true`, or the servers carrying all of `labels`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetPreviewBody {
    #[schema(value_type = super::schemas::JailName)]
    jail: String,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    preview: PreviewBody,
}

/// Each server's preview.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetPreviewDto {
    /// In server name order; a host offline, not enrolled, too old or out of time is marked so.
    hosts: Vec<HostPreview>,
}

/// Runs the same preview on every server the selector names, each host bounded by the
/// preview's time; nothing changes on any host.
#[utoipa::path(post, path = "/api/previews", tag = "jails", request_body = FleetPreviewBody,
    extensions(("x-required-role" = json!("operator"))),
    responses((status = 200, body = FleetPreviewDto),
        (status = 422, description = "Invalid input", body = Problem)))]
async fn preview_fleet(
    caller: Operator,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<FleetPreviewBody>,
) -> Result<ApiJson<FleetPreviewDto>, ApiError> {
    let selector = match (body.all, body.labels.is_empty()) {
        (true, true) => Selector::All,
        (false, false) => Selector::Labels(
            Labels::parse(body.labels)
                .map_err(|e| ApiError::invalid("labels", e))?
                .into_map(),
        ),
        _ => {
            return Err(ApiError::invalid(
                "labels",
                "name the servers with exactly one of `all: true` and `labels`",
            ));
        }
    };
    let input = body.preview.parse(&body.jail, "jail")?;
    let previews = Previews::new(state.fleet.clone(), state.guards.clone());
    let hosts = previews
        .preview_fleet(&selector, input, &caller.requested_by())
        .await?;
    Ok(ApiJson(FleetPreviewDto { hosts }))
}

impl PreviewBody {
    /// The preview of `jail`, each field within its limits.
    fn parse(self, jail: &str, jail_field: &str) -> Result<PreviewInput, ApiError> {
        let jail = jail_name(jail_field, jail)?;
        let text = |field: &str, text: String| {
            if text.len() > MAX_CONFIG_BYTES || text.contains('\0') {
                Err(ApiError::invalid(
                    field,
                    format!("must be at most {MAX_CONFIG_BYTES} bytes of text"),
                ))
            } else {
                Ok(text)
            }
        };
        let source = match (self.filter, self.filter_text, self.filter_local) {
            (None, None, None) => PreviewSource::JailOwn,
            (Some(name), None, None) => PreviewSource::Named(
                FilterName::parse(&name).map_err(|e| ApiError::invalid("filter", e))?,
            ),
            (None, Some(t), None) => PreviewSource::Text(text("filterText", t)?),
            (None, None, Some(t)) => PreviewSource::Local(text("filterLocal", t)?),
            _ => {
                return Err(ApiError::invalid(
                    "filter",
                    "give at most one of filter, filterText and filterLocal",
                ));
            }
        };
        if let Some(n) = self.maxretry
            && !(1..=MAX_MAXRETRY).contains(&n)
        {
            return Err(ApiError::invalid(
                "maxretry",
                format!("must be between 1 and {MAX_MAXRETRY}"),
            ));
        }
        if let Some(n) = self.findtime_secs
            && !(1..=MAX_FINDTIME_SECS).contains(&n)
        {
            return Err(ApiError::invalid(
                "findtimeSecs",
                format!("must be between 1 and {MAX_FINDTIME_SECS}"),
            ));
        }
        if self.log_paths.len() > MAX_LOG_PATHS {
            return Err(ApiError::invalid(
                "logPaths",
                format!("at most {MAX_LOG_PATHS} paths"),
            ));
        }
        for (i, path) in self.log_paths.iter().enumerate() {
            log_path(path).map_err(|why| ApiError::invalid(&format!("logPaths[{i}]"), why))?;
        }
        if let Some(n) = self.max_bytes
            && !(1..=MAX_BYTES).contains(&n)
        {
            return Err(ApiError::invalid(
                "maxBytes",
                format!("must be between 1 and {MAX_BYTES}"),
            ));
        }
        if let Some(n) = self.time_budget_ms
            && !(MIN_BUDGET_MS..=MAX_BUDGET_MS).contains(&n)
        {
            return Err(ApiError::invalid(
                "timeBudgetMs",
                format!("must be between {MIN_BUDGET_MS} and {MAX_BUDGET_MS}"),
            ));
        }
        Ok(PreviewInput {
            jail,
            source,
            maxretry: self.maxretry,
            findtime_secs: self.findtime_secs,
            log_paths: self.log_paths,
            max_bytes: self.max_bytes,
            time_budget_ms: self.time_budget_ms,
        })
    }
}

/// A log path: absolute, without `..`, one line of printable text (the agent checks it again
/// against the host's own policy).
fn log_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_LOG_PATH_BYTES {
        return Err(format!("must be 1 to {MAX_LOG_PATH_BYTES} bytes"));
    }
    if path.chars().any(char::is_control) {
        return Err("must be one line without control characters".to_owned());
    }
    if !path.starts_with('/') || path.split('/').any(|part| part == "..") {
        return Err(format!("{path:?} is not an absolute path without `..`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(body: PreviewBody) -> Option<String> {
        match body.parse("sshd", "jail") {
            Err(ApiError::Invalid { field, .. }) => Some(field),
            Err(other) => panic!("not a field error: {other}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn every_field_is_checked_by_name() {
        assert_eq!(field(PreviewBody::default()), None);
        let check = |body: PreviewBody, expected: &str| {
            assert_eq!(field(body).as_deref(), Some(expected));
        };
        check(
            PreviewBody {
                filter: Some("a".into()),
                filter_text: Some("b".into()),
                ..PreviewBody::default()
            },
            "filter",
        );
        check(
            PreviewBody {
                filter: Some("../x".into()),
                ..PreviewBody::default()
            },
            "filter",
        );
        check(
            PreviewBody {
                filter_local: Some("x".repeat(MAX_CONFIG_BYTES + 1)),
                ..PreviewBody::default()
            },
            "filterLocal",
        );
        check(
            PreviewBody {
                maxretry: Some(0),
                ..PreviewBody::default()
            },
            "maxretry",
        );
        check(
            PreviewBody {
                findtime_secs: Some(0),
                ..PreviewBody::default()
            },
            "findtimeSecs",
        );
        for bad in [
            "var/log/auth.log",
            "/var/log/../../etc/shadow",
            "/var/log/a\nb",
            "",
        ] {
            check(
                PreviewBody {
                    log_paths: vec!["/var/log/ok.log".into(), bad.into()],
                    ..PreviewBody::default()
                },
                "logPaths[1]",
            );
        }
        check(
            PreviewBody {
                max_bytes: Some(MAX_BYTES + 1),
                ..PreviewBody::default()
            },
            "maxBytes",
        );
        check(
            PreviewBody {
                time_budget_ms: Some(99),
                ..PreviewBody::default()
            },
            "timeBudgetMs",
        );
        assert!(PreviewBody::default().parse("bad name!", "jail").is_err());
    }
}
