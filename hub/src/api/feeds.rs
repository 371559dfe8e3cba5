//! Blocklist feeds for edge firewalls: an admin defines feeds (`/api/feeds[/{name}]`), previews
//! them and hands out read-only feed tokens (`/api/feeds/{name}/tokens`); a firewall fetches
//! `GET /feeds/{name}.{txt|nft|ipset|rsc}` with its token, revalidating with `If-None-Match`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, problem};
use crate::auth::{Admin, AuthError};
use crate::domain::feeds::{
    FeedDraft, FeedFormat, FeedServers, FeedSpec, FeedTokenRecord, MAX_FEED_LIST,
};
use crate::feeds::{FeedView, FeedsError, Rendered};

/// Lines of a preview unless the request says otherwise, and at most.
const PREVIEW_LINES: usize = 20;
const MAX_PREVIEW_LINES: usize = 500;
/// Longest token name, in characters.
const MAX_TOKEN_NAME: usize = 128;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_feeds, create_feed))
        .routes(routes!(get_feed, update_feed, delete_feed))
        .routes(routes!(preview_feed))
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
        .routes(routes!(feed_file))
}

impl From<FeedsError> for ApiError {
    fn from(e: FeedsError) -> Self {
        match e {
            FeedsError::UnknownFeed(_) | FeedsError::UnknownToken(_) => {
                Self::NotFound(e.to_string())
            }
            FeedsError::NameTaken(_) | FeedsError::TooManyTokens => Self::Conflict(e.to_string()),
            FeedsError::Unauthenticated => Self::Auth(AuthError::Unauthenticated(e.to_string())),
            FeedsError::OtherFeed => Self::Auth(AuthError::Forbidden(e.to_string())),
            FeedsError::NotReady => Self::Conflict(e.to_string()),
            FeedsError::Store(e) => Self::from(e),
        }
    }
}

/// Body of `POST /api/feeds` and `PUT /api/feeds/{name}`. Name the servers with exactly one of
/// `allServers: true`, `serverIds` and `labels`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeedBody {
    /// The feed's name: letters, digits, `_` and `-`, starting with a letter or a digit, at most
    /// 24 characters. It names the file (`/feeds/{name}.txt`) and the firewall's set.
    #[schema(max_length = 24, pattern = "^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")]
    name: String,
    /// At most 500 characters.
    description: Option<String>,
    /// Bans of every server.
    #[serde(default)]
    all_servers: bool,
    /// Bans of these servers (ids).
    #[serde(default)]
    server_ids: Vec<String>,
    /// Bans of the servers carrying all of these labels.
    #[serde(default)]
    #[schema(value_type = super::schemas::Labels)]
    labels: BTreeMap<String, String>,
    /// Jail names or globs (`*`, `?`); empty: every jail. The probe jail is never listed.
    #[serde(default)]
    jails: Vec<String>,
    /// Ids of sharing policies whose shared bans the feed lists; stored, not yet applied.
    #[serde(default)]
    policies: Vec<String>,
    /// Bans recorded for an address on the selected servers and jails before it is listed (1 by
    /// default).
    #[schema(minimum = 1, maximum = 1000000)]
    min_bans: Option<u32>,
    /// Distinct selected servers that banned an address before it is listed (1 by default).
    #[schema(minimum = 1, maximum = 10000)]
    min_servers: Option<u32>,
    /// An address whose newest ban is older than this many seconds drops out (60 to a year).
    #[schema(minimum = 60, maximum = 31622400)]
    max_age_secs: Option<u64>,
    /// Merge neighbouring entries into the smallest set of CIDRs.
    #[serde(default)]
    aggregate: bool,
    /// `txt` (by default), `nft`, `ipset` or `rsc`: the format the UI offers first.
    #[schema(value_type = Option<FormatName>)]
    default_format: Option<String>,
}

/// A feed format: `txt` (one entry per line), `nft` (`nft -f`), `ipset` (`ipset restore`), `rsc`
/// (MikroTik RouterOS script).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    Txt,
    Nft,
    Ipset,
    Rsc,
}

fn spec_of(body: FeedBody) -> Result<FeedSpec, ApiError> {
    for (field, list) in [
        ("serverIds", &body.server_ids),
        ("jails", &body.jails),
        ("policies", &body.policies),
    ] {
        if list.len() > MAX_FEED_LIST {
            return Err(ApiError::invalid(
                field,
                format!("holds more than {MAX_FEED_LIST} entries"),
            ));
        }
    }
    FeedSpec::parse(FeedDraft {
        name: body.name,
        description: body.description,
        all_servers: body.all_servers,
        server_ids: body.server_ids,
        labels: body.labels,
        jails: body.jails,
        policies: body.policies,
        min_bans: body.min_bans,
        min_servers: body.min_servers,
        max_age_secs: body.max_age_secs,
        aggregate: body.aggregate,
        default_format: body.default_format,
    })
    .map_err(|e| ApiError::invalid(e.field, e.message))
}

/// A feed, what it lists now, and where firewalls fetch it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedDto {
    id: String,
    name: String,
    description: String,
    all_servers: bool,
    server_ids: Vec<String>,
    labels: BTreeMap<String, String>,
    jails: Vec<String>,
    policies: Vec<String>,
    min_bans: u32,
    min_servers: u32,
    max_age_secs: Option<u64>,
    aggregate: bool,
    #[schema(value_type = FormatName)]
    default_format: String,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// Entries listed at the last rendering (`null` until the hub has rendered the feed).
    entries: Option<u64>,
    rendered_at: Option<DateTime<Utc>>,
    /// The path of each format's file on this hub (`txt`, `nft`, `ipset`, `rsc`), to append to
    /// the hub's address; firewalls add `?token=` or send `Authorization: Bearer`.
    paths: BTreeMap<String, String>,
}

fn feed_dto(state: &AppState, view: FeedView) -> FeedDto {
    let spec = &view.record.spec;
    let (all_servers, server_ids, labels) = match &spec.servers {
        FeedServers::All => (true, Vec::new(), BTreeMap::new()),
        FeedServers::Ids(ids) => (
            false,
            ids.iter().map(ToString::to_string).collect(),
            BTreeMap::new(),
        ),
        FeedServers::Labels(labels) => (false, Vec::new(), labels.clone()),
    };
    let paths = FeedFormat::ALL
        .into_iter()
        .map(|f| {
            let path = format!("/feeds/{}.{}", spec.name, f.as_str());
            (
                f.as_str().to_owned(),
                state.config.http.base_path.join(&path),
            )
        })
        .collect();
    FeedDto {
        id: view.record.id.clone(),
        name: spec.name.to_string(),
        description: spec.description.clone(),
        all_servers,
        server_ids,
        labels,
        jails: spec.jails.iter().map(|j| j.as_str().to_owned()).collect(),
        policies: spec.policies.clone(),
        min_bans: spec.min_bans,
        min_servers: spec.min_servers,
        max_age_secs: spec.max_age_secs,
        aggregate: spec.aggregate,
        default_format: spec.default_format.as_str().to_owned(),
        created_by: view.record.created_by.clone(),
        created_at: view.record.created_at,
        updated_at: view.record.updated_at,
        entries: view.entries.map(|n| n as u64),
        rendered_at: view.rendered_at,
        paths,
    }
}

/// Every feed, by name.
#[utoipa::path(get, path = "/api/feeds", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = Vec<FeedDto>)))]
async fn list_feeds(
    _caller: Admin,
    State(state): State<AppState>,
) -> Result<ApiJson<Vec<FeedDto>>, ApiError> {
    let feeds = state.feeds.list().await?;
    Ok(ApiJson(
        feeds.into_iter().map(|f| feed_dto(&state, f)).collect(),
    ))
}

/// Creates a feed. It lists what it selects within a second or two; tokens are made separately.
#[utoipa::path(post, path = "/api/feeds", tag = "feeds", request_body = FeedBody,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = FeedDto),
              (status = 409, description = "A feed with this name exists", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn create_feed(
    caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<FeedBody>,
) -> Result<(StatusCode, ApiJson<FeedDto>), ApiError> {
    let spec = spec_of(body)?;
    let view = state.feeds.create(spec, &caller.requested_by()).await?;
    Ok((StatusCode::CREATED, ApiJson(feed_dto(&state, view))))
}

/// One feed.
#[utoipa::path(get, path = "/api/feeds/{name}", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name")),
    responses((status = 200, body = FeedDto), (status = 404, body = Problem)))]
async fn get_feed(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<FeedDto>, ApiError> {
    let view = state.feeds.get(&name).await?;
    Ok(ApiJson(feed_dto(&state, view)))
}

/// Replaces a feed's definition (a new name renames it; its tokens stay valid).
#[utoipa::path(put, path = "/api/feeds/{name}", tag = "feeds", request_body = FeedBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name")),
    responses((status = 200, body = FeedDto), (status = 404, body = Problem),
              (status = 409, description = "Another feed has the new name", body = Problem),
              (status = 422, description = "A field breaks its rule", body = Problem)))]
async fn update_feed(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<FeedBody>,
) -> Result<ApiJson<FeedDto>, ApiError> {
    let spec = spec_of(body)?;
    let view = state.feeds.update(&name, spec).await?;
    Ok(ApiJson(feed_dto(&state, view)))
}

/// Deletes a feed and its tokens.
#[utoipa::path(delete, path = "/api/feeds/{name}", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn delete_feed(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.feeds.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreviewParams {
    /// The format (the feed's default format when left out).
    #[param(value_type = Option<FormatName>)]
    format: Option<String>,
    /// At most this many lines (1 to 500, 20 by default).
    #[param(minimum = 1, maximum = 500)]
    lines: Option<usize>,
}

/// The first lines of a feed's file.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewDto {
    #[schema(value_type = FormatName)]
    format: String,
    etag: String,
    lines: Vec<String>,
    /// Lines of the whole file.
    total_lines: u64,
}

/// The first lines of a feed's file as a firewall would fetch it now.
#[utoipa::path(get, path = "/api/feeds/{name}/preview", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name"), PreviewParams),
    responses((status = 200, body = PreviewDto), (status = 404, body = Problem),
              (status = 409, description = "The hub has not rendered the feed yet", body = Problem),
              (status = 422, body = Problem)))]
async fn preview_feed(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    params: Result<Query<PreviewParams>, QueryRejection>,
) -> Result<ApiJson<PreviewDto>, ApiError> {
    let params = super::error::query(params)?;
    let lines = params.lines.unwrap_or(PREVIEW_LINES);
    if !(1..=MAX_PREVIEW_LINES).contains(&lines) {
        return Err(ApiError::invalid(
            "lines",
            format!("must be between 1 and {MAX_PREVIEW_LINES}"),
        ));
    }
    let format = params
        .format
        .as_deref()
        .map(|raw| {
            FeedFormat::parse(raw)
                .ok_or_else(|| ApiError::invalid("format", "must be one of txt, nft, ipset, rsc"))
        })
        .transpose()?;
    let (format, rendered) = state.feeds.preview(&name, format).await?;
    Ok(ApiJson(PreviewDto {
        format: format.as_str().to_owned(),
        etag: rendered.etag.clone(),
        lines: rendered
            .body
            .lines()
            .take(lines)
            .map(str::to_owned)
            .collect(),
        total_lines: rendered.body.lines().count() as u64,
    }))
}

/// A feed token (never its secret).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedTokenDto {
    id: String,
    name: String,
    created_by: String,
    created_at: DateTime<Utc>,
    /// Last fetch with this token (written at most once a minute).
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

impl From<FeedTokenRecord> for FeedTokenDto {
    fn from(t: FeedTokenRecord) -> Self {
        Self {
            id: t.id,
            name: t.name,
            created_by: t.created_by,
            created_at: t.created_at,
            last_used_at: t.last_used_at,
            revoked_at: t.revoked_at,
        }
    }
}

/// A new feed token with its secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedFeedToken {
    #[serde(flatten)]
    record: FeedTokenDto,
    /// `bhf_…`: send as `Authorization: Bearer <token>` or as `?token=<token>`.
    token: String,
}

/// Body of `POST /api/feeds/{name}/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeedTokenBody {
    /// Who uses it (e.g. the firewall's name): 1 to 128 characters, no control characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$"
    )]
    name: String,
}

/// A feed's tokens, revoked ones included, newest first.
#[utoipa::path(get, path = "/api/feeds/{name}/tokens", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name")),
    responses((status = 200, body = Vec<FeedTokenDto>), (status = 404, body = Problem)))]
async fn list_tokens(
    _caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<ApiJson<Vec<FeedTokenDto>>, ApiError> {
    let tokens = state.feeds.tokens(&name).await?;
    Ok(ApiJson(tokens.into_iter().map(Into::into).collect()))
}

/// Creates a read-only token of one feed. The answer holds the token; it is not shown again.
#[utoipa::path(post, path = "/api/feeds/{name}/tokens", tag = "feeds", request_body = FeedTokenBody,
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name")),
    responses((status = 201, body = CreatedFeedToken), (status = 404, body = Problem),
              (status = 409, description = "The feed has the most tokens it may have", body = Problem),
              (status = 422, body = Problem)))]
async fn create_token(
    caller: Admin,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<FeedTokenBody>,
) -> Result<(StatusCode, ApiJson<CreatedFeedToken>), ApiError> {
    let token_name = body.name.trim();
    if token_name.is_empty()
        || token_name.chars().count() > MAX_TOKEN_NAME
        || token_name.chars().any(char::is_control)
    {
        return Err(ApiError::invalid(
            "name",
            format!("must be 1 to {MAX_TOKEN_NAME} characters without control characters"),
        ));
    }
    let (record, token) = state
        .feeds
        .create_token(&name, token_name, &caller.requested_by())
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(CreatedFeedToken {
            record: record.into(),
            token,
        }),
    ))
}

/// Revokes a feed token: the next fetch with it is refused.
#[utoipa::path(delete, path = "/api/feeds/{name}/tokens/{id}", tag = "feeds",
    extensions(("x-required-role" = json!("admin"))),
    params(("name" = String, Path, description = "Feed name"),
           ("id" = String, Path, description = "Token id")),
    responses((status = 204), (status = 404, body = Problem)))]
async fn revoke_token(
    _caller: Admin,
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state.feeds.revoke_token(&name, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FileParams {
    /// The feed token, for firewalls that cannot send an `Authorization` header.
    token: Option<String>,
}

/// A feed's file for a firewall, read with the feed's token. `If-None-Match` with the last
/// `ETag` answers 304 while the listed set is unchanged.
#[utoipa::path(get, path = "/feeds/{file}", tag = "feeds",
    extensions(("x-required-role" = json!("public"))),
    params(("file" = String, Path,
            description = "`{name}.{format}`, the format one of `txt`, `nft`, `ipset`, `rsc`"),
           FileParams,
           ("Authorization" = Option<String>, Header, description = "`Bearer bhf_…`, the feed token"),
           ("If-None-Match" = Option<String>, Header, description = "The `ETag` of the copy held")),
    responses((status = 200, description = "The file", content_type = "text/plain", body = String,
               headers(("ETag" = String), ("Cache-Control" = String))),
              (status = 304, description = "The copy held is current"),
              (status = 400, body = Problem),
              (status = 401, description = "No feed token, or an unknown or revoked one", body = Problem),
              (status = 403, description = "The token reads another feed", body = Problem),
              (status = 404, description = "No such feed or format", body = Problem),
              (status = 503, description = "The feed is being prepared", body = Problem)))]
async fn feed_file(
    State(state): State<AppState>,
    Path(file): Path<String>,
    params: Result<Query<FileParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    match serve_file(&state, &file, params, &headers).await {
        Ok(response) => response,
        Err(FileError::NotReady) => {
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "feed_not_ready",
                "Feed not ready",
                FeedsError::NotReady.to_string(),
                None,
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        Err(FileError::Api(e)) => {
            let unauthenticated = matches!(e, ApiError::Auth(AuthError::Unauthenticated(_)));
            let mut response = e.into_response();
            if unauthenticated {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"banhub feeds\""),
                );
            }
            response
        }
    }
}

enum FileError {
    NotReady,
    Api(ApiError),
}

impl<E: Into<ApiError>> From<E> for FileError {
    fn from(e: E) -> Self {
        Self::Api(e.into())
    }
}

/// The body of a rendered feed, handed to the response without a copy.
struct Shared(Arc<Rendered>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        self.0.body.as_bytes()
    }
}

async fn serve_file(
    state: &AppState,
    file: &str,
    params: Result<Query<FileParams>, QueryRejection>,
    headers: &HeaderMap,
) -> Result<Response, FileError> {
    let params = super::error::query(params)?;
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let token = bearer.or(params.token.as_deref());
    let unknown = || {
        ApiError::NotFound(format!(
            "no feed file {file:?} (expected {{name}}.txt, .nft, .ipset or .rsc)"
        ))
    };
    let (name, format) = file
        .rsplit_once('.')
        .and_then(|(name, ext)| Some((name, FeedFormat::parse(ext)?)))
        .ok_or_else(unknown)?;
    let rendered = match state.feeds.read(name, format, token).await {
        Ok(rendered) => rendered,
        Err(FeedsError::NotReady) => return Err(FileError::NotReady),
        Err(e) => return Err(e.into()),
    };
    let etag =
        HeaderValue::from_str(&rendered.etag).map_err(|_| ApiError::NotFound(String::new()))?;
    let cache = HeaderValue::from_static("private, no-cache");
    if matches_etag(headers, &rendered.etag) {
        return Ok((
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag), (header::CACHE_CONTROL, cache)],
        )
            .into_response());
    }
    let content_type = HeaderValue::from_static(rendered.content_type);
    let body = Body::from(Bytes::from_owner(Shared(rendered)));
    Ok((
        StatusCode::OK,
        [
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
            (header::CONTENT_TYPE, content_type),
        ],
        body,
    )
        .into_response())
}

/// Whether `If-None-Match` names `etag` (weakly compared, as RFC 9110 asks for this header) or
/// is `*`.
fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    let strip = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let own = strip(etag);
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == "*" || strip(tag) == own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_compares_weakly_and_takes_lists_and_star() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::IF_NONE_MATCH,
                HeaderValue::from_str(value).expect("value"),
            );
            headers
        };
        assert!(matches_etag(&with("\"abc\""), "\"abc\""));
        assert!(matches_etag(&with("W/\"abc\""), "\"abc\""));
        assert!(matches_etag(&with("\"x\", \"abc\""), "\"abc\""));
        assert!(matches_etag(&with("*"), "\"abc\""));
        assert!(!matches_etag(&with("\"abd\""), "\"abc\""));
        assert!(!matches_etag(&HeaderMap::new(), "\"abc\""));
    }
}
