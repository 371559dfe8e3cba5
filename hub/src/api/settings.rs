//! `GET/POST /api/settings` (one versioned document; a stale version is refused with 409, a bad
//! value with 422 naming the field; secrets are write-only), `POST /api/settings/test-email`, and
//! `POST /api/settings/fail2ban-defaults/push`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, optional_json};
use crate::alerts::test_mail::{TestMailError, TestMailRequest};
use crate::auth::Admin;
use crate::fleet::{DefaultsPushResult, DefaultsTargets, PushDefaultsError};
use crate::settings::model::DefaultsDocument;
use crate::settings::{SettingsDocument, SettingsError, SmtpDocument};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_settings, save_settings))
        .routes(routes!(test_email))
        .routes(routes!(push_defaults))
}

/// The settings service's refusals as problem documents.
impl From<SettingsError> for ApiError {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::Invalid(f) => ApiError::invalid(&f.field, f.reason),
            SettingsError::Conflict { current } => ApiError::SettingsConflict {
                current,
                message: e.to_string(),
            },
            SettingsError::Store(s) => s.into(),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<TestMailError> for ApiError {
    fn from(e: TestMailError) -> Self {
        match e {
            TestMailError::Settings(e) => e.into(),
            TestMailError::NoSmtp => ApiError::invalid("smtp", e),
            TestMailError::Recipient(f) => ApiError::invalid(&f.field, f.reason),
            TestMailError::NoRecipient => ApiError::invalid("to", e),
            TestMailError::Mail(e) => ApiError::Mail(e),
        }
    }
}

impl From<PushDefaultsError> for ApiError {
    fn from(e: PushDefaultsError) -> Self {
        match e {
            PushDefaultsError::NothingToPush => ApiError::invalid("fail2ban.defaults", e),
            PushDefaultsError::NoSuchServer { index, .. } => {
                ApiError::invalid(&format!("servers[{index}]"), e)
            }
            PushDefaultsError::NoMatch => ApiError::invalid("labels", e),
            PushDefaultsError::Store(e) => e.into(),
        }
    }
}

fn with_etag(document: SettingsDocument) -> Response {
    let version = document.version.unwrap_or(0);
    let mut response = ApiJson(document).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// The version an edit starts from: `version` of the body, else the `If-Match` header.
fn expected_version(document: &SettingsDocument, headers: &HeaderMap) -> Result<u64, ApiError> {
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|raw| {
            raw.trim()
                .trim_start_matches("W/")
                .trim_matches('"')
                .parse::<u64>()
                .map_err(|_| {
                    ApiError::invalid("If-Match", "must be the settings' ETag, e.g. \"3\"")
                })
        })
        .transpose()?;
    document.version.or(if_match).ok_or_else(|| {
        ApiError::invalid(
            "version",
            "is required: send the version you read (GET /api/settings), so a concurrent edit is \
             not overwritten",
        )
    })
}

/// The current settings. Secrets are never shown: `passwordSet`, `urlSet` and `tokenSet` say
/// whether one is stored. The `ETag` header carries the version.
#[utoipa::path(get, path = "/api/settings", tag = "settings",
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = SettingsDocument, headers(("ETag" = String, description = "The version, quoted")))))]
async fn get_settings(_caller: Admin, State(state): State<AppState>) -> Response {
    with_etag(state.settings.view())
}

/// Replaces the settings. Send the version you read in `version` (or as `If-Match`); an edit from
/// an older version is refused with 409 so no one's change is lost. A secret left out keeps its
/// stored value; `null` removes it. Sections left out take their defaults.
#[utoipa::path(post, path = "/api/settings", tag = "settings",
    extensions(("x-required-role" = json!("admin"))), request_body = SettingsDocument,
    params(("If-Match" = Option<String>, Header, description = "The version read, instead of `version` in the body")),
    responses((status = 200, body = SettingsDocument),
              (status = 400, body = Problem), (status = 409, description = "Edited from an older version", body = Problem),
              (status = 422, description = "A value breaks its rule; `field` names it", body = Problem)))]
async fn save_settings(
    _caller: Admin,
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let document: SettingsDocument = optional_json(&body)?;
    let expected = expected_version(&document, &headers)?;
    let saved = state.settings.update(document, expected).await?;
    // The other replicas read them again (retention, alert rules, the callback policy apply there
    // too).
    state.cluster.announce_settings().await;
    Ok(with_etag(saved))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestEmailBody {
    /// Recipients; empty: `alerts.recipients` of the saved settings.
    #[serde(default)]
    to: Vec<String>,
    /// SMTP settings to try before saving them; absent: the saved ones. A password left out is
    /// the saved one.
    #[serde(default)]
    smtp: Option<SmtpDocument>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestEmailResult {
    /// The SMTP server's final reply, e.g. `250 2.0.0 Ok: queued as 4F2A`.
    reply: String,
    to: Vec<String>,
    from: String,
    subject: String,
    took_ms: u64,
}

/// Sends a test e-mail and answers with the SMTP server's reply, or with a problem whose `code`
/// says what failed: `smtp_dns`, `smtp_refused`, `smtp_timeout`, `smtp_tls`, `smtp_auth`,
/// `smtp_rejected` (502).
#[utoipa::path(post, path = "/api/settings/test-email", tag = "settings",
    extensions(("x-required-role" = json!("admin"))), request_body = TestEmailBody,
    responses((status = 200, body = TestEmailResult),
              (status = 422, description = "No SMTP server or recipient, or a bad value", body = Problem),
              (status = 502, description = "The mail server could not be reached or refused", body = Problem)))]
async fn test_email(
    _caller: Admin,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<ApiJson<TestEmailResult>, ApiError> {
    let body: TestEmailBody = optional_json(&body)?;
    let request = TestMailRequest {
        to: body.to,
        smtp: body.smtp,
    };
    let sent = state.alerts.send_test_mail(request).await?;
    Ok(ApiJson(TestEmailResult {
        reply: sent.reply,
        to: sent.to.iter().map(ToString::to_string).collect(),
        from: sent.from,
        subject: sent.subject,
        took_ms: u64::try_from(sent.took.as_millis()).unwrap_or(u64::MAX),
    }))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PushDefaultsBody {
    /// Server ids or names; empty: every server (or those matching `labels`).
    #[serde(default)]
    servers: Vec<String>,
    /// Only servers carrying all of these labels.
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushDefaultsResult {
    /// What was pushed: `fail2ban.defaults` of the saved settings.
    defaults: DefaultsDocument,
    /// One result per server.
    results: Vec<DefaultsPushResult>,
}

/// Pushes `fail2ban.defaults` of the saved settings to every server (or the chosen ones) through
/// their agents: each writes the `[DEFAULT]` keys to its `jail.d/banhub-defaults.local`, has
/// fail2ban validate the result and reloads. One result per server.
#[utoipa::path(post, path = "/api/settings/fail2ban-defaults/push", tag = "settings",
    extensions(("x-required-role" = json!("admin"))), request_body = PushDefaultsBody,
    responses((status = 200, body = PushDefaultsResult),
              (status = 422, description = "Nothing to push, or no such server", body = Problem)))]
async fn push_defaults(
    caller: Admin,
    State(state): State<AppState>,
    body: Bytes,
) -> Result<ApiJson<PushDefaultsResult>, ApiError> {
    let body: PushDefaultsBody = optional_json(&body)?;
    let targets = DefaultsTargets {
        servers: body.servers,
        labels: body.labels,
    };
    let pushed = state
        .fleet
        .push_saved_defaults(targets, &caller.requested_by())
        .await?;
    Ok(ApiJson(PushDefaultsResult {
        defaults: pushed.defaults,
        results: pushed.results,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[tokio::test]
    async fn a_stale_version_is_a_409_naming_the_version_with_the_current_etag() {
        let response = ApiError::from(SettingsError::Conflict { current: 7 }).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::ETAG], "\"7\"");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("problem+json");
        assert_eq!(problem["code"], "settings_conflict");
        assert_eq!(problem["field"], "version");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("version 7")),
            "{problem}"
        );
    }
}
