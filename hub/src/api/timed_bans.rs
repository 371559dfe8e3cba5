//! Timed bans: `GET /api/timed-bans` lists the bans that carry a duration, with when the hub
//! lifts each (or lifted it), by server, jail or address. The bans themselves are made by the
//! ban routes of `jails` and `fleet` with `durationSecs`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use crate::auth::Viewer;
use crate::store::timed_bans::{TimedBan, TimedBanFilter, TimedBanState};
use crate::timed_bans::MAX_DURATION_SECS;

const MAX_LIST: u64 = 500;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_timed_bans))
}

/// A ban's `durationSecs` through its rule (`timed_bans.min_duration_secs`, a minute by
/// default, to a year): absent is a ban for the jail's own ban time.
pub(super) fn duration(
    state: &AppState,
    raw: Option<u64>,
) -> Result<Option<std::time::Duration>, ApiError> {
    checked_duration(raw, state.config.timed_bans.min_duration_secs)
}

fn checked_duration(raw: Option<u64>, min: u64) -> Result<Option<std::time::Duration>, ApiError> {
    match raw {
        None => Ok(None),
        Some(secs) if (min..=MAX_DURATION_SECS).contains(&secs) => {
            Ok(Some(std::time::Duration::from_secs(secs)))
        }
        Some(_) => Err(ApiError::invalid(
            "durationSecs",
            format!("must be between {min} and {MAX_DURATION_SECS} (a year) seconds"),
        )),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TimedBansQuery {
    /// Only this server (id or name).
    server_id: Option<String>,
    /// Only this jail.
    #[param(value_type = Option<super::schemas::JailName>)]
    jail: Option<String>,
    /// Only this address or network.
    #[param(value_type = Option<super::schemas::Address>)]
    ip: Option<String>,
    /// Also the bans already lifted, failed, cancelled or replaced (`false` by default: the
    /// active ones only).
    #[serde(default)]
    all: bool,
    /// At most this many (1 to 500, 100 by default).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u64>,
}

/// A ban the hub lifts at its time.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimedBanDto {
    id: String,
    server_id: String,
    jail: String,
    ip: String,
    /// When the hub lifts it.
    ends_at: DateTime<Utc>,
    state: TimedBanState,
    /// The fleet ban it came with.
    fleet_action_id: Option<String>,
    requested_by: String,
    created_at: DateTime<Utc>,
    /// Lift attempts so far.
    attempts: u64,
    /// Why the last attempt failed.
    error: Option<String>,
    finished_at: Option<DateTime<Utc>>,
}

impl From<TimedBan> for TimedBanDto {
    fn from(b: TimedBan) -> Self {
        Self {
            id: b.id,
            server_id: b.server.to_string(),
            jail: b.jail,
            ip: b.ip,
            ends_at: b.ends_at,
            state: b.state,
            fleet_action_id: b.fleet_action_id,
            requested_by: b.requested_by,
            created_at: b.created_at,
            attempts: b.attempts,
            error: b.error,
            finished_at: b.finished_at,
        }
    }
}

/// Bans with a duration, those ending first first: the active ones, or with `all=true` also those
/// that ended.
#[utoipa::path(get, path = "/api/timed-bans", tag = "jails", params(TimedBansQuery),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = Vec<TimedBanDto>), (status = 404, body = Problem),
              (status = 422, body = Problem)))]
async fn list_timed_bans(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<TimedBansQuery>, QueryRejection>,
) -> Result<ApiJson<Vec<TimedBanDto>>, ApiError> {
    let params = super::error::query(params)?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIST}"),
        ));
    }
    let server = match params.server_id.as_deref() {
        Some(raw) => Some(super::target::server(&state, raw).await?),
        None => None,
    };
    let jail = params
        .jail
        .as_deref()
        .map(|raw| super::jails::jail_name("jail", raw))
        .transpose()?;
    let ip = params
        .ip
        .as_deref()
        .map(|raw| {
            banhub_proto::rules::IpOrCidr::parse(raw)
                .map_err(|e| ApiError::invalid("ip", format!("{raw:?} {e}")))
        })
        .transpose()?;
    let filter = TimedBanFilter {
        server,
        jail: jail.map(|j| j.to_string()),
        ip: ip.map(|i| i.to_string()),
        active_only: !params.all,
        limit,
    };
    let bans = state.timed_bans.list(&filter).await?;
    Ok(ApiJson(bans.into_iter().map(Into::into).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_run_from_a_minute_to_a_year() {
        let duration = |secs| checked_duration(secs, 60);
        assert_eq!(duration(None).expect("absent"), None);
        assert_eq!(
            duration(Some(60)).expect("a minute"),
            Some(std::time::Duration::from_secs(60))
        );
        assert!(duration(Some(MAX_DURATION_SECS)).is_ok());
        for bad in [0, 59, MAX_DURATION_SECS + 1] {
            match duration(Some(bad)) {
                Err(ApiError::Invalid { field, .. }) => assert_eq!(field, "durationSecs"),
                other => panic!("{bad}: expected a field error, got {other:?}"),
            }
        }
    }
}
