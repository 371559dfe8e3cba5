//! `GET /api/alerts/deliveries` (every e-mail and webhook delivery with its status, attempts and
//! last error), `GET /api/alerts/digests[/{id}]` (what each digest grouped), `POST
//! /api/alerts/preview` (a rule's message rendered, sent nowhere) and `POST /api/alerts/test` (a
//! test alert through one channel). Rules themselves are part of the settings.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::query;
use super::error::{ApiError, ApiJson, Problem};
use crate::alerts::preview::{MessageFormat, Preview, PreviewError, PreviewRequest};
use crate::alerts::test_alert::{TestAlertError, TestAlertResult, TestTarget};
use crate::auth::{Admin, Viewer};
use crate::domain::ServerId;
use crate::domain::alerts::{Channel, Delivery, DeliveryFilter, DeliveryStatus, Digest};
use crate::settings::model::Language;

/// Largest page.
const MAX_LIMIT: u64 = 500;
const DEFAULT_LIMIT: u64 = 100;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(deliveries))
        .routes(routes!(digests))
        .routes(routes!(digest))
        .routes(routes!(preview))
        .routes(routes!(test_alert))
}

fn limit(raw: Option<u64>) -> Result<u64, ApiError> {
    match raw {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        )),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// `pending`, `sending`, `delivered` or `failed`.
    #[param(value_type = Option<DeliveryStatus>)]
    status: Option<String>,
    /// Only deliveries of this alert rule.
    rule_id: Option<String>,
    digest_id: Option<i64>,
    /// Only deliveries older than this id (the `next` of the previous page).
    before: Option<i64>,
    /// 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryPage {
    deliveries: Vec<Delivery>,
    /// Pass as `before` for the next page; absent on the last.
    next: Option<i64>,
}

/// Alert deliveries, newest first: each e-mail or webhook post of a digest with its status,
/// attempts, next retry, last error and the server's answer.
#[utoipa::path(get, path = "/api/alerts/deliveries", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))), params(DeliveryParams),
    responses((status = 200, body = DeliveryPage), (status = 422, body = Problem)))]
async fn deliveries(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<DeliveryParams>, QueryRejection>,
) -> Result<ApiJson<DeliveryPage>, ApiError> {
    let filter = query(params)?.parse()?;
    let deliveries = state.alerts.deliveries(&filter).await?;
    let next = (deliveries.len() as u64 == filter.limit)
        .then(|| deliveries.last().map(|d| d.id))
        .flatten();
    Ok(ApiJson(DeliveryPage { deliveries, next }))
}

impl DeliveryParams {
    fn parse(self) -> Result<DeliveryFilter, ApiError> {
        let status = self
            .status
            .as_deref()
            .map(|raw| {
                DeliveryStatus::parse(raw).ok_or_else(|| {
                    ApiError::invalid("status", "must be pending, sending, delivered or failed")
                })
            })
            .transpose()?;
        Ok(DeliveryFilter {
            status,
            rule_id: self.rule_id,
            digest_id: self.digest_id,
            before: self.before,
            limit: limit(self.limit)?,
        })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DigestParams {
    /// 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DigestList {
    digests: Vec<Digest>,
}

/// Alert digests, newest first: the matches of one rule within its window, summed up.
#[utoipa::path(get, path = "/api/alerts/digests", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))), params(DigestParams),
    responses((status = 200, body = DigestList), (status = 422, body = Problem)))]
async fn digests(
    _caller: Viewer,
    State(state): State<AppState>,
    params: Result<Query<DigestParams>, QueryRejection>,
) -> Result<ApiJson<DigestList>, ApiError> {
    let params = query(params)?;
    let digests = state.alerts.digests(limit(params.limit)?).await?;
    Ok(ApiJson(DigestList { digests }))
}

/// One alert digest.
#[utoipa::path(get, path = "/api/alerts/digests/{id}", tag = "alerts",
    extensions(("x-required-role" = json!("viewer"))),
    params(("id" = i64, Path, description = "Digest id")),
    responses((status = 200, body = Digest),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem)))]
async fn digest(
    _caller: Viewer,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<ApiJson<Digest>, ApiError> {
    let Path(id) = id.map_err(|rejection| ApiError::Malformed {
        status: axum::http::StatusCode::BAD_REQUEST,
        detail: rejection.body_text(),
    })?;
    state
        .alerts
        .digest(id)
        .await?
        .map(ApiJson)
        .ok_or_else(|| ApiError::NotFound(format!("no alert digest has the id {id}")))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertPreviewBody {
    /// The rule's name, 1 to 100 characters.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    rule_name: String,
    /// A server id: the sample bans happened there (default: a sample server).
    #[serde(default)]
    #[schema(format = Uuid)]
    server: Option<String>,
    /// The sample bans' jail (default `sshd`).
    #[serde(default)]
    #[schema(value_type = Option<super::schemas::JailName>)]
    jail: Option<String>,
    format: MessageFormat,
    /// Default: `alerts.language` of the saved settings.
    #[serde(default)]
    language: Option<Language>,
}

/// Renders a rule's message for a sample digest (three bans) in a channel's format and a
/// language, exactly as it would be sent, and sends nothing.
#[utoipa::path(post, path = "/api/alerts/preview", tag = "alerts",
    extensions(("x-required-role" = json!("admin"))), request_body = AlertPreviewBody,
    responses((status = 200, body = Preview),
              (status = 400, body = Problem),
              (status = 422, description = "A bad value; `field` names it", body = Problem)))]
async fn preview(
    _caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AlertPreviewBody>,
) -> Result<ApiJson<Preview>, ApiError> {
    let request = body.parse()?;
    let preview = state.alerts.preview(request).await.map_err(|e| match e {
        PreviewError::NoSuchServer(_) => ApiError::invalid("server", e),
        PreviewError::Store(e) => e.into(),
    })?;
    Ok(ApiJson(preview))
}

impl AlertPreviewBody {
    fn parse(self) -> Result<PreviewRequest, ApiError> {
        let rule_name = self.rule_name.trim().to_owned();
        if rule_name.is_empty()
            || rule_name.chars().count() > 100
            || rule_name.chars().any(char::is_control)
        {
            return Err(ApiError::invalid(
                "ruleName",
                "must be 1 to 100 characters without control characters",
            ));
        }
        let server = self
            .server
            .as_deref()
            .map(|raw| ServerId::parse(raw).map_err(|e| ApiError::invalid("server", e)))
            .transpose()?;
        let jail = self
            .jail
            .as_deref()
            .map(|raw| {
                banhub_proto::rules::JailName::parse(raw)
                    .map(|j| j.as_str().to_owned())
                    .map_err(|e| ApiError::invalid("jail", format!("{raw:?} {e}")))
            })
            .transpose()?;
        Ok(PreviewRequest {
            rule_name,
            server,
            jail,
            format: self.format,
            language: self.language,
        })
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestAlertBody {
    /// `email` (to `alerts.recipients`) or `webhook` (the one named in `webhook`).
    channel: Channel,
    /// The webhook's name, with `channel: webhook`.
    #[serde(default)]
    webhook: Option<String>,
    /// Default: `alerts.language` of the saved settings.
    #[serde(default)]
    language: Option<Language>,
}

/// Sends a test alert (a sample digest marked as a test) through one channel of the saved
/// settings, as alerts are sent, and answers with the channel's answer: `delivered` with the mail
/// server's reply or the webhook's status, or the error. One test per channel every 10 seconds.
#[utoipa::path(post, path = "/api/alerts/test", tag = "alerts",
    extensions(("x-required-role" = json!("admin"))), request_body = TestAlertBody,
    responses((status = 200, body = TestAlertResult),
              (status = 400, body = Problem),
              (status = 422, description = "The channel is not configured; `field` names what is missing", body = Problem),
              (status = 429, description = "A test went through this channel moments ago", body = Problem)))]
async fn test_alert(
    _caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<TestAlertBody>,
) -> Result<ApiJson<TestAlertResult>, ApiError> {
    let target = match (body.channel, body.webhook) {
        (Channel::Email, None) => TestTarget::Email,
        (Channel::Email, Some(_)) => {
            return Err(ApiError::invalid(
                "webhook",
                "is only for `channel: webhook`",
            ));
        }
        (Channel::Webhook, Some(name)) => TestTarget::Webhook(name),
        (Channel::Webhook, None) => {
            return Err(ApiError::invalid(
                "webhook",
                "name the webhook to test (one of alerts.webhooks)",
            ));
        }
    };
    let result = state
        .alerts
        .send_test_alert(target, body.language)
        .await
        .map_err(|e| match e {
            TestAlertError::NoSmtp => ApiError::invalid("smtp", e),
            TestAlertError::NoRecipient => ApiError::invalid("alerts.recipients", e),
            TestAlertError::NoSuchWebhook(_) | TestAlertError::NoUrl(_) => {
                ApiError::invalid("webhook", e)
            }
            TestAlertError::TooSoon { retry_after_secs } => ApiError::TooSoon {
                code: "test_alert_too_soon",
                message: e.to_string(),
                retry_after_secs,
            },
            TestAlertError::Secret(e) => ApiError::Internal(e.to_string()),
            TestAlertError::Store(e) => e.into(),
        })?;
    Ok(ApiJson(result))
}
