//! `/api/events/…`: ban events newest first with filters and cursor paging (JSON or CSV), stats and
//! insights from the rollups, and the live stream of committed events (SSE).

use std::collections::HashMap;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt as _};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, query};
use super::shared_origin::{SharedOriginDto, server_names};
use super::{schemas, target};
use crate::alerts::insights::LocatedInsights;
use crate::auth::Viewer;
use crate::domain::ServerId;
use crate::domain::events::{
    Counts, Cursor, EventBody, EventFilter, EventId, EventKind, EventPage, EventSource,
    InsightsQuery, IpOrCidr, IpSummary, JailName, SearchText, Stats, StatsQuery, StoredEvent,
};
use crate::domain::sharing::SharedBan;
use crate::events::{EventsError, MAX_PAGE};

/// Events per page unless `limit` says otherwise.
const DEFAULT_PAGE: usize = 50;
/// Rows a CSV export holds unless `limit` says otherwise, and at most.
const DEFAULT_EXPORT: usize = 10_000;
const MAX_EXPORT: usize = 1_000_000;
const DEFAULT_TOP: usize = 10;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_bans))
        .routes(routes!(export_bans))
        .routes(routes!(ban_stats))
        .routes(routes!(ban_insights))
        .routes(routes!(event_stream))
}

impl From<EventsError> for ApiError {
    fn from(e: EventsError) -> Self {
        match e {
            EventsError::Store(e) => e.into(),
            EventsError::Invalid { field, reason } => ApiError::invalid(field, reason),
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Parameters
// ----------------------------------------------------------------------------------------------

/// Filters and paging of `GET /api/events/bans`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only events of this server: its id, or its name.
    #[param(value_type = Option<schemas::ServerRef>)]
    server_id: Option<String>,
    /// Only events of this jail.
    #[param(value_type = Option<schemas::JailName>)]
    jail: Option<String>,
    /// One address (`192.0.2.7`) or every address in a network (`198.51.100.0/24`).
    #[param(value_type = Option<schemas::Address>)]
    ip: Option<String>,
    /// Kinds, comma-separated: `ban`, `unban`, `gap`.
    #[param(value_type = Option<schemas::EventKinds>)]
    kind: Option<String>,
    /// Sources, comma-separated: `action` (the fail2ban action through the agent), `observed` (the
    /// agent's reconciliation), `direct` (a callback straight to the hub).
    #[param(value_type = Option<schemas::EventSources>)]
    source: Option<String>,
    /// Events at or after this time: RFC 3339 or Unix milliseconds.
    #[param(value_type = Option<schemas::Timestamp>)]
    from: Option<String>,
    /// Events before this time: RFC 3339 or Unix milliseconds.
    #[param(value_type = Option<schemas::Timestamp>)]
    to: Option<String>,
    /// Text to find in the log lines, ignoring case (only ASCII letters' case on SQLite). A text
    /// index finds the candidate events (trigrams on SQLite; `pg_trgm` on PostgreSQL, where the
    /// extension is installed), so a search stays quick on a long history.
    #[param(value_type = Option<schemas::SearchText>)]
    q: Option<String>,
    /// Events per page, 1 to 1000 (default 50); for CSV, rows in all, 1 to 1,000,000 (default
    /// 10,000).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
    /// `json` (default) or `csv`.
    #[param(value_type = Option<schemas::EventsFormat>)]
    format: Option<String>,
}

/// Parameters of `GET /api/events/bans/stats`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// Only this server: its id, or its name.
    #[param(value_type = Option<schemas::ServerRef>)]
    server_id: Option<String>,
    /// Only this jail.
    #[param(value_type = Option<schemas::JailName>)]
    jail: Option<String>,
    /// Start: RFC 3339 or Unix milliseconds (default: 24 hours before `to`).
    #[param(value_type = Option<schemas::Timestamp>)]
    from: Option<String>,
    /// End: RFC 3339 or Unix milliseconds (default: now).
    #[param(value_type = Option<schemas::Timestamp>)]
    to: Option<String>,
}

/// Parameters of `GET /api/events/bans/insights`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InsightsParams {
    /// Only this server (its id, or its name): its jails, and the addresses banned on it.
    #[param(value_type = Option<schemas::ServerRef>)]
    server_id: Option<String>,
    /// Only this jail (for the jail and server rankings).
    #[param(value_type = Option<schemas::JailName>)]
    jail: Option<String>,
    /// Start of the jail and server rankings: RFC 3339 or Unix milliseconds (default: 30 days
    /// before `to`). Address rankings cover the whole retained history.
    #[param(value_type = Option<schemas::Timestamp>)]
    from: Option<String>,
    /// End of the jail and server rankings (default: now).
    #[param(value_type = Option<schemas::Timestamp>)]
    to: Option<String>,
    /// Entries per list, 1 to 100 (default 10).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    limit: Option<String>,
    /// Also return what is known about this address.
    #[param(value_type = Option<schemas::Address>)]
    ip: Option<String>,
}

/// Filters of `GET /api/events/stream`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Only events of this server: its id, or its name.
    #[param(value_type = Option<schemas::ServerRef>)]
    server_id: Option<String>,
    /// Only events of this jail.
    #[param(value_type = Option<schemas::JailName>)]
    jail: Option<String>,
    /// One address or a network.
    #[param(value_type = Option<schemas::Address>)]
    ip: Option<String>,
    /// Kinds, comma-separated: `ban`, `unban`, `gap`.
    #[param(value_type = Option<schemas::EventKinds>)]
    kind: Option<String>,
    /// Sources, comma-separated: `action`, `observed`, `direct`.
    #[param(value_type = Option<schemas::EventSources>)]
    source: Option<String>,
    /// Resume after this event id (what the `Last-Event-ID` header does on a reconnect).
    #[param(value_type = Option<i64>)]
    last_event_id: Option<String>,
}

fn jail(raw: Option<&str>) -> Result<Option<JailName>, ApiError> {
    raw.map(|j| JailName::parse(j).map_err(|e| ApiError::invalid("jail", e)))
        .transpose()
}

fn ip(raw: Option<&str>) -> Result<Option<IpOrCidr>, ApiError> {
    raw.map(|ip| IpOrCidr::parse(ip).map_err(|e| ApiError::invalid("ip", e)))
        .transpose()
}

fn time(field: &'static str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let parsed = match raw.parse::<i64>() {
        Ok(ms) => DateTime::from_timestamp_millis(ms),
        Err(_) => DateTime::parse_from_rfc3339(raw)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
    };
    parsed.map(Some).ok_or_else(|| {
        ApiError::invalid(
            field,
            "must be an RFC 3339 time (2026-01-31T12:00:00Z) or Unix milliseconds",
        )
    })
}

fn list<T>(
    field: &'static str,
    raw: Option<&str>,
    parse: fn(&str) -> Option<T>,
    allowed: &str,
) -> Result<Vec<T>, ApiError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    raw.split(',')
        .map(|item| {
            parse(item.trim()).ok_or_else(|| {
                ApiError::invalid(field, format!("{item:?} is not one of {allowed}"))
            })
        })
        .collect()
}

fn number(
    field: &'static str,
    raw: Option<&str>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    raw.parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| ApiError::invalid(field, format!("must be a whole number from 1 to {max}")))
}

#[allow(clippy::too_many_arguments)]
fn filter(
    server: Option<ServerId>,
    jail_name: Option<&str>,
    address: Option<&str>,
    kind: Option<&str>,
    source: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    text: Option<&str>,
) -> Result<EventFilter, ApiError> {
    Ok(EventFilter {
        server,
        jail: jail(jail_name)?,
        ip: ip(address)?,
        kinds: list("kind", kind, EventKind::parse, "ban, unban, gap")?,
        sources: list(
            "source",
            source,
            EventSource::parse,
            "action, observed, direct",
        )?,
        from: time("from", from)?,
        to: time("to", to)?,
        text: text
            .map(|t| SearchText::parse(t).map_err(|e| ApiError::invalid("q", e)))
            .transpose()?,
    })
}

impl ListParams {
    /// The filter, with the server of `serverId=` as [`target::filter`] resolved it.
    fn filter(&self, server: Option<ServerId>) -> Result<EventFilter, ApiError> {
        filter(
            server,
            self.jail.as_deref(),
            self.ip.as_deref(),
            self.kind.as_deref(),
            self.source.as_deref(),
            self.from.as_deref(),
            self.to.as_deref(),
            self.q.as_deref(),
        )
    }

    fn cursor(&self) -> Result<Option<Cursor>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| Cursor::decode(c).map_err(|e| ApiError::invalid("cursor", e)))
            .transpose()
    }
}

// ----------------------------------------------------------------------------------------------
// Bodies
// ----------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum KindDto {
    Ban,
    Unban,
    /// Events an agent lost; `lost` says how many.
    Gap,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum SourceDto {
    /// fail2ban's action, through the agent.
    Action,
    /// The agent's reconciliation with fail2ban's ban list.
    Observed,
    /// fail2ban's action calling the hub directly.
    Direct,
}

/// Sequence numbers `first..=last` an agent lost.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeqRangeDto {
    first: u64,
    last: u64,
}

/// A ban event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventDto {
    id: i64,
    kind: KindDto,
    source: SourceDto,
    server_id: String,
    /// The reporting agent; absent for direct callbacks.
    agent_id: Option<String>,
    /// When the agent (or the hub, for a direct callback) received it.
    occurred_at: DateTime<Utc>,
    stored_at: DateTime<Utc>,
    /// Address or network; absent for gaps.
    ip: Option<String>,
    jail: Option<String>,
    hostname: Option<String>,
    /// The failures that led to a ban; null for unbans and gaps.
    failures: Option<u32>,
    /// Log lines that led to the ban (attacker-controlled text).
    logs: Vec<String>,
    /// When fail2ban banned the address, if the action said.
    ban_time: Option<DateTime<Utc>>,
    /// Ban length in seconds; -1: permanent.
    ban_duration: Option<i64>,
    /// How many times fail2ban has banned this address.
    ban_count: Option<u32>,
    /// Gaps: how many events were lost, why, and their sequence numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap_ranges: Option<Vec<SeqRangeDto>>,
    /// For an event of the shared-ban jail (`banhub-shared`): the origin of the shared ban.
    #[serde(skip_serializing_if = "Option::is_none")]
    shared: Option<SharedOriginDto>,
}

/// Marks each event of `events` whose shared ban `origins` knows (by event id) with its origin.
pub(super) fn mark_shared(
    names: &HashMap<ServerId, String>,
    events: &mut [EventDto],
    origins: &HashMap<i64, SharedBan>,
) {
    for event in events {
        if let Some(ban) = origins.get(&event.id) {
            event.shared = Some(SharedOriginDto::of(ban, names));
        }
    }
}

/// The failures that led to a ban. An unban or a gap reports none, whatever its stored row holds.
fn ban_failures(e: &StoredEvent) -> Option<u32> {
    match &e.body {
        EventBody::Ban(facts) => Some(facts.failures),
        _ => None,
    }
}

impl From<&StoredEvent> for EventDto {
    fn from(e: &StoredEvent) -> Self {
        let facts = e.body.facts();
        let gap = match &e.body {
            EventBody::Gap(gap) => Some(gap),
            _ => None,
        };
        Self {
            id: e.id.0,
            kind: match e.kind() {
                EventKind::Ban => KindDto::Ban,
                EventKind::Unban => KindDto::Unban,
                EventKind::Gap => KindDto::Gap,
            },
            source: match e.source {
                EventSource::Action => SourceDto::Action,
                EventSource::Observed => SourceDto::Observed,
                EventSource::Direct => SourceDto::Direct,
            },
            server_id: e.server_id.to_string(),
            agent_id: e.agent_id.map(|a| a.to_string()),
            occurred_at: e.occurred_at,
            stored_at: e.stored_at,
            ip: facts.map(|f| f.ip.to_string()),
            jail: facts.map(|f| f.jail.to_string()),
            hostname: facts.map(|f| f.hostname.clone()),
            failures: ban_failures(e),
            logs: facts.map(|f| f.logs.lines().to_vec()).unwrap_or_default(),
            ban_time: facts
                .and_then(|f| f.ban_time)
                .and_then(|s| DateTime::from_timestamp(s, 0)),
            ban_duration: facts.and_then(|f| f.ban_duration).map(|d| d.as_seconds()),
            ban_count: facts.and_then(|f| f.ban_count),
            lost: gap.map(|g| g.lost),
            gap_reason: gap.map(|g| g.reason.as_str().to_owned()),
            gap_ranges: gap.map(|g| {
                g.ranges
                    .iter()
                    .map(|r| SeqRangeDto {
                        first: r.first,
                        last: r.last,
                    })
                    .collect()
            }),
            shared: None,
        }
    }
}

/// A page of events, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPageDto {
    events: Vec<EventDto>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    next_cursor: Option<String>,
}

impl From<EventPage> for EventPageDto {
    fn from(page: EventPage) -> Self {
        Self {
            events: page.events.iter().map(EventDto::from).collect(),
            next_cursor: page.next.map(|c| c.encode()),
        }
    }
}

/// Event counts by kind.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountsDto {
    bans: u64,
    unbans: u64,
    /// Gap records (each stands for one or more lost events).
    gaps: u64,
}

impl From<Counts> for CountsDto {
    fn from(c: Counts) -> Self {
        Self {
            bans: c.bans,
            unbans: c.unbans,
            gaps: c.gaps,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeriesPointDto {
    /// Start of the bucket.
    start: DateTime<Utc>,
    #[serde(flatten)]
    counts: CountsDto,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerCountsDto {
    server_id: String,
    /// Absent for a server deleted since.
    server_name: Option<String>,
    #[serde(flatten)]
    counts: CountsDto,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailCountsDto {
    jail: String,
    #[serde(flatten)]
    counts: CountsDto,
}

/// Bans and unbans over time, per server, per jail and in total.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatsDto {
    /// The range counted: the asked one widened to whole buckets.
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Bucket length in seconds, chosen for the range (1 hour up to 28 days, at most ~200 buckets).
    bucket_seconds: i64,
    series: Vec<SeriesPointDto>,
    /// Most bans first.
    servers: Vec<ServerCountsDto>,
    /// Most bans first.
    jails: Vec<JailCountsDto>,
    totals: CountsDto,
}

/// What the hub knows about one address over the retained history.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpDto {
    ip: String,
    bans: u64,
    /// On how many servers it was banned.
    servers: u64,
    first_seen: DateTime<Utc>,
    last_seen: DateTime<Utc>,
    last_jail: Option<String>,
    last_server_id: Option<String>,
    /// ISO 3166 code of its country, by the GeoIP database of the settings (`geoip.databasePath`);
    /// absent when none is set or it does not know the address.
    #[serde(skip_serializing_if = "Option::is_none")]
    country: Option<String>,
}

impl From<IpSummary> for IpDto {
    fn from(s: IpSummary) -> Self {
        Self {
            ip: s.ip,
            bans: s.bans,
            servers: s.servers,
            first_seen: s.first_seen,
            last_seen: s.last_seen,
            last_jail: s.last_jail,
            last_server_id: s.last_server.map(|s| s.to_string()),
            country: None,
        }
    }
}

/// One address on one server.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpServerDto {
    server_id: String,
    server_name: Option<String>,
    bans: u64,
    first_seen: DateTime<Utc>,
    last_seen: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpDetailDto {
    #[serde(flatten)]
    summary: IpDto,
    per_server: Vec<IpServerDto>,
}

/// Top offenders, jails and servers.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InsightsDto {
    /// Range of `topJails` and `topServers` (whole hours).
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Most banned addresses over the retained history (on the asked server, if any).
    top_ips: Vec<IpDto>,
    /// Addresses banned on more than one server, most servers first.
    repeat_offenders: Vec<IpDto>,
    top_jails: Vec<JailCountsDto>,
    top_servers: Vec<ServerCountsDto>,
    /// Distinct addresses banned over the retained history.
    distinct_ips: u64,
    /// The asked address, when `ip` was given and it was ever banned.
    ip: Option<IpDetailDto>,
    /// Bans and distinct addresses per country over the retained history (on the asked server, if
    /// any), most bans first; empty without a GeoIP database (`geoip.databasePath`).
    countries: Vec<CountryCountDto>,
    /// The same per network: IPv4 /24, IPv6 /48, or a banned network wider than that.
    networks: Vec<NetworkCountDto>,
    /// When `countries` and `networks` were counted; they are recounted in the background when a
    /// request finds them older than 30 s. Absent, with both lists empty, while the first count
    /// over a large history (more than 50,000 banned addresses) runs in the background: a request
    /// never waits for it; ask again shortly.
    places_counted_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountryCountDto {
    /// ISO 3166 code.
    country: String,
    bans: u64,
    /// Distinct addresses.
    ips: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkCountDto {
    network: String,
    bans: u64,
    /// Distinct addresses.
    ips: u64,
}

// ----------------------------------------------------------------------------------------------
// Handlers
// ----------------------------------------------------------------------------------------------

fn server_counts(
    rows: Vec<(ServerId, Counts)>,
    names: &HashMap<ServerId, String>,
) -> Vec<ServerCountsDto> {
    rows.into_iter()
        .map(|(id, counts)| ServerCountsDto {
            server_id: id.to_string(),
            server_name: names.get(&id).cloned(),
            counts: counts.into(),
        })
        .collect()
}

fn jail_counts(rows: Vec<(String, Counts)>) -> Vec<JailCountsDto> {
    rows.into_iter()
        .map(|(jail, counts)| JailCountsDto {
            jail,
            counts: counts.into(),
        })
        .collect()
}

/// Ban events, newest first, filtered, in pages that stay fast deep into history. With
/// `format=csv`, a CSV export instead (as `/api/events/bans.csv`).
#[utoipa::path(get, path = "/api/events/bans", tag = "events", params(ListParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, content((EventPageDto = "application/json"), (String = "text/csv"))),
              (status = 400, description = "Unknown parameter", body = Problem),
              (status = 422, description = "A parameter breaks its rule; `field` names it", body = Problem)))]
async fn list_bans(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let params = query(params)?;
    match params.format.as_deref() {
        None | Some("json") => {}
        Some("csv") => return csv_export(&state, &params).await,
        Some(_) => return Err(ApiError::invalid("format", "must be json or csv")),
    }
    let limit = number("limit", params.limit.as_deref(), DEFAULT_PAGE, MAX_PAGE)?;
    let server = target::filter(&state, params.server_id.as_deref()).await?;
    let page = state
        .events
        .list(&params.filter(server)?, params.cursor()?, limit)
        .await?;
    let origins = state.sharing.origins(&page.events).await?;
    let mut dto = EventPageDto::from(page);
    if !origins.is_empty() {
        let names = server_names(&state).await?;
        mark_shared(&names, &mut dto.events, &origins);
    }
    Ok(ApiJson(dto).into_response())
}

/// The parameters of `/api/events/bans.csv` in the document: those of `/api/events/bans` without
/// `format`, and a `limit` of up to [`MAX_EXPORT`] rows.
struct ExportParams;

impl IntoParams for ExportParams {
    fn into_params(
        parameter_in: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ListParams::into_params(parameter_in)
            .into_iter()
            .filter(|p| p.name != "format")
            .map(|mut p| {
                if p.name == "limit" {
                    p.description = Some(format!(
                        "Rows in all, 1 to {MAX_EXPORT} (default {DEFAULT_EXPORT})."
                    ));
                    p.schema = Some(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(1))
                            .maximum(Some(MAX_EXPORT as u32))
                            .into(),
                    );
                }
                p
            })
            .collect()
    }
}

/// Ban events as CSV, newest first: the filters of `/api/events/bans`, up to `limit` rows.
#[utoipa::path(get, path = "/api/events/bans.csv", tag = "events", params(ExportParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, content_type = "text/csv", body = String),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn export_bans(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    csv_export(&state, &query(params)?).await
}

async fn csv_export(state: &AppState, params: &ListParams) -> Result<Response, ApiError> {
    let limit = number("limit", params.limit.as_deref(), DEFAULT_EXPORT, MAX_EXPORT)?;
    let server = target::filter(state, params.server_id.as_deref()).await?;
    let pages = state
        .events
        .export(params.filter(server)?, params.cursor()?, limit)?;
    Ok(csv_response(pages))
}

/// The pages of an export streamed as one CSV file, its header first.
fn csv_response(
    pages: impl Stream<Item = Result<Vec<StoredEvent>, EventsError>> + Send + 'static,
) -> Response {
    let header = futures::stream::once(async { Ok(Bytes::from_static(CSV_HEADER.as_bytes())) });
    let rows = pages.map(|page| match page {
        Ok(events) => {
            let mut out = String::new();
            for event in &events {
                csv_row(&mut out, event);
            }
            Ok(Bytes::from(out))
        }
        Err(e) => {
            tracing::error!(error = %e, "CSV export failed part-way");
            Err(std::io::Error::other(
                "the export failed part-way; see the hub's log",
            ))
        }
    });
    let mut response = Body::from_stream(header.chain(rows)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"ban-events.csv\""),
    );
    response
}

const CSV_HEADER: &str = "id,occurredAt,kind,source,serverId,agentId,jail,ip,hostname,failures,\
banTime,banDuration,banCount,lost,logs\r\n";

/// One CSV record (RFC 4180). Text an attacker wrote (host names, log lines) is quoted, and a
/// leading `=`, `+`, `-` or `@` is defused so a spreadsheet never runs it as a formula.
fn csv_row(out: &mut String, e: &StoredEvent) {
    let facts = e.body.facts();
    let lost = match &e.body {
        EventBody::Gap(g) => g.lost.to_string(),
        _ => String::new(),
    };
    let fields = [
        e.id.to_string(),
        e.occurred_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        e.kind().as_str().to_owned(),
        e.source.as_str().to_owned(),
        e.server_id.to_string(),
        e.agent_id.map(|a| a.to_string()).unwrap_or_default(),
        facts.map(|f| f.jail.to_string()).unwrap_or_default(),
        facts.map(|f| f.ip.to_string()).unwrap_or_default(),
        facts.map(|f| f.hostname.clone()).unwrap_or_default(),
        ban_failures(e).map(|n| n.to_string()).unwrap_or_default(),
        facts
            .and_then(|f| f.ban_time)
            .and_then(|s| DateTime::from_timestamp(s, 0))
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default(),
        facts
            .and_then(|f| f.ban_duration)
            .map(|d| d.as_seconds().to_string())
            .unwrap_or_default(),
        facts
            .and_then(|f| f.ban_count)
            .map(|c| c.to_string())
            .unwrap_or_default(),
        lost,
        facts.map(|f| f.logs.lines().join("\n")).unwrap_or_default(),
    ];
    let text_fields = [8, 14];
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if text_fields.contains(&i) {
            out.push('"');
            if field.starts_with(['=', '+', '-', '@']) {
                out.push('\'');
            }
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(field);
        }
    }
    out.push_str("\r\n");
}

/// Bans and unbans over time (buckets chosen for the range), per server, per jail, and totals.
#[utoipa::path(get, path = "/api/events/bans/stats", tag = "events", params(StatsParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = StatsDto),
              (status = 400, description = "Unknown parameter", body = Problem),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn ban_stats(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<StatsParams>, QueryRejection>,
) -> Result<ApiJson<StatsDto>, ApiError> {
    let p = query(params)?;
    let stats_query = StatsQuery {
        server: target::filter(&state, p.server_id.as_deref()).await?,
        jail: jail(p.jail.as_deref())?,
        from: time("from", p.from.as_deref())?,
        to: time("to", p.to.as_deref())?,
    };
    let stats = state.events.stats(&stats_query, Utc::now()).await?;
    Ok(ApiJson(stats_dto(stats, &server_names(&state).await?)))
}

fn stats_dto(s: Stats, names: &HashMap<ServerId, String>) -> StatsDto {
    StatsDto {
        from: s.from,
        to: s.to,
        bucket_seconds: s.bucket.num_seconds(),
        series: s
            .series
            .into_iter()
            .map(|p| SeriesPointDto {
                start: p.start,
                counts: p.counts.into(),
            })
            .collect(),
        servers: server_counts(s.servers, names),
        jails: jail_counts(s.jails),
        totals: s.totals.into(),
    }
}

/// Top addresses, jails and servers, repeat offenders (banned on several servers), and first and
/// last sightings per address.
#[utoipa::path(get, path = "/api/events/bans/insights", tag = "events", params(InsightsParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, body = InsightsDto),
              (status = 400, description = "Unknown parameter", body = Problem),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn ban_insights(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<InsightsParams>, QueryRejection>,
) -> Result<ApiJson<InsightsDto>, ApiError> {
    let p = query(params)?;
    let insights_query = InsightsQuery {
        server: target::filter(&state, p.server_id.as_deref()).await?,
        jail: jail(p.jail.as_deref())?,
        from: time("from", p.from.as_deref())?,
        to: time("to", p.to.as_deref())?,
        limit: number(
            "limit",
            p.limit.as_deref(),
            DEFAULT_TOP,
            crate::events::MAX_TOP,
        )?,
        ip: ip(p.ip.as_deref())?,
    };
    let located = state.alerts.insights(&insights_query, Utc::now()).await?;
    Ok(ApiJson(located.into()))
}

impl From<LocatedInsights> for InsightsDto {
    fn from(located: LocatedInsights) -> Self {
        let LocatedInsights {
            insights: i,
            server_names: names,
            countries_of,
            countries,
            networks,
            places_counted_at,
        } = located;
        let ip_dto = |summary: IpSummary| {
            let country = countries_of.get(&summary.ip).cloned();
            IpDto {
                country,
                ..IpDto::from(summary)
            }
        };
        Self {
            from: i.from,
            to: i.to,
            top_ips: i.top_ips.into_iter().map(ip_dto).collect(),
            repeat_offenders: i.repeat_offenders.into_iter().map(ip_dto).collect(),
            top_jails: jail_counts(i.top_jails),
            top_servers: server_counts(i.top_servers, &names),
            distinct_ips: i.distinct_ips,
            ip: i.ip.map(|(summary, servers)| IpDetailDto {
                summary: ip_dto(summary),
                per_server: servers
                    .into_iter()
                    .map(|s| IpServerDto {
                        server_name: names.get(&s.server).cloned(),
                        server_id: s.server.to_string(),
                        bans: s.bans,
                        first_seen: s.first_seen,
                        last_seen: s.last_seen,
                    })
                    .collect(),
            }),
            countries: countries
                .into_iter()
                .map(|(country, c)| CountryCountDto {
                    country,
                    bans: c.bans,
                    ips: c.ips,
                })
                .collect(),
            networks: networks
                .into_iter()
                .map(|(network, c)| NetworkCountDto {
                    network,
                    bans: c.bans,
                    ips: c.ips,
                })
                .collect(),
            places_counted_at,
        }
    }
}

/// New events as they commit, as Server-Sent Events: each `data` is an event as in
/// `/api/events/bans`, its `id` the event id. A client that reconnects with `Last-Event-ID` (or
/// `lastEventId`) first gets what it missed.
#[utoipa::path(get, path = "/api/events/stream", tag = "events", params(StreamParams),
    extensions(("x-required-role" = json!("viewer"))),
    responses((status = 200, content_type = "text/event-stream", body = EventDto),
              (status = 422, description = "A parameter breaks its rule", body = Problem)))]
async fn event_stream(
    _caller: Viewer,
    State(state): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<StreamParams>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let p = query(params)?;
    let filter = filter(
        target::filter(&state, p.server_id.as_deref()).await?,
        p.jail.as_deref(),
        p.ip.as_deref(),
        p.kind.as_deref(),
        p.source.as_deref(),
        None,
        None,
        None,
    )?;
    let last = resume_after(&headers, p.last_event_id.as_deref())?;
    let live = state.events.clone().live(filter, last).await?;
    let stream = live.map(|event| {
        let data = serde_json::to_string(&EventDto::from(event.as_ref())).unwrap_or_default();
        Ok(SseEvent::default().id(event.id.to_string()).data(data))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The event a stream resumes after: the `Last-Event-ID` header of a reconnect, else the
/// `lastEventId` parameter.
fn resume_after(headers: &HeaderMap, param: Option<&str>) -> Result<Option<EventId>, ApiError> {
    let from_header = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| ("Last-Event-ID", v));
    from_header
        .or(param.map(|v| ("lastEventId", v)))
        .map(|(field, raw)| {
            raw.trim()
                .parse::<i64>()
                .map(EventId)
                .map_err(|_| ApiError::invalid(field, "must be an event id"))
        })
        .transpose()
}
