//! Filter debugging on the target server: list filters, and test one (named, or text being edited)
//! against pasted log lines with `fail2ban-regex` on the host.

use axum::extract::State;
use banhub_proto::rules::FilterName;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::jails::MAX_CONFIG_BYTES;
use super::target::Target;
use crate::auth::{Operator, Viewer};
use crate::fleet::{FilterSource, FilterTestResult};

const MAX_LINES: usize = 10_000;
const MAX_LINE_BYTES: usize = 4096;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_filters))
        .routes(routes!(test_filter))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterListDto {
    filters: Vec<String>,
}

/// The filters of the server's configuration (`filter.d`).
#[utoipa::path(get, path = "/api/filters", tag = "filters",
    extensions(("x-required-role" = json!("viewer"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = FilterListDto), (status = 503, body = Problem)))]
async fn list_filters(
    caller: Viewer,
    State(state): State<AppState>,
    Target(server): Target,
) -> Result<ApiJson<FilterListDto>, ApiError> {
    let filters = state.fleet.filters(server, &caller.requested_by()).await?;
    Ok(ApiJson(FilterListDto { filters }))
}

/// A filter and the log lines to try it on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestFilterBody {
    /// A filter of the server's configuration.
    #[schema(value_type = Option<super::schemas::Name>)]
    filter: Option<String>,
    /// Or the text of a filter file being edited (never saved by a test).
    filter_text: Option<String>,
    /// Log lines, one per element: 1 to 10,000 of at most 4096 bytes, without line ends.
    #[schema(min_items = 1, max_items = 10000)]
    lines: Vec<String>,
}

/// Runs `fail2ban-regex` on the host: which lines match, the addresses found, hits per regex.
#[utoipa::path(post, path = "/api/filters/test", tag = "filters", request_body = TestFilterBody,
    extensions(("x-required-role" = json!("operator"))),
    params(("X-BanDaemon-Server" = Option<String>, Header, description = "Server id or name")),
    responses((status = 200, body = FilterTestResult), (status = 422, body = Problem),
        (status = 429, body = Problem,
            description = "A filter test runs on this server and another waits; try again after `Retry-After` seconds",
            headers(("Retry-After" = u64, description = "Seconds to wait before trying again")))))]
async fn test_filter(
    caller: Operator,
    State(state): State<AppState>,
    Target(server): Target,
    ApiJson(body): ApiJson<TestFilterBody>,
) -> Result<ApiJson<FilterTestResult>, ApiError> {
    let (source, lines) = body.parse()?;
    Ok(ApiJson(
        state
            .fleet
            .test_filter(server, source, lines, &caller.requested_by())
            .await?,
    ))
}

impl TestFilterBody {
    /// The filter to test and the lines to test it on, each within its limits.
    fn parse(self) -> Result<(FilterSource, Vec<String>), ApiError> {
        let source = match (self.filter, self.filter_text) {
            (Some(name), None) => FilterSource::Named(
                FilterName::parse(&name).map_err(|e| ApiError::invalid("filter", e))?,
            ),
            (None, Some(text)) => {
                if text.len() > MAX_CONFIG_BYTES || text.contains('\0') {
                    return Err(ApiError::invalid(
                        "filterText",
                        format!("must be at most {MAX_CONFIG_BYTES} bytes of text"),
                    ));
                }
                FilterSource::Text(text)
            }
            _ => {
                return Err(ApiError::invalid(
                    "filter",
                    "give exactly one of filter and filterText",
                ));
            }
        };
        if self.lines.is_empty() || self.lines.len() > MAX_LINES {
            return Err(ApiError::invalid(
                "lines",
                format!("must hold between 1 and {MAX_LINES} lines"),
            ));
        }
        if let Some(i) = self
            .lines
            .iter()
            .position(|l| l.len() > MAX_LINE_BYTES || l.contains(['\n', '\r', '\0']))
        {
            return Err(ApiError::invalid(
                &format!("lines[{i}]"),
                format!("must be one line of at most {MAX_LINE_BYTES} bytes"),
            ));
        }
        Ok((source, self.lines))
    }
}
