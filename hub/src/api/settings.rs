//! `GET/POST /api/settings` (one versioned document; a stale version is refused with 409, a bad
//! value with 422 naming the field; secrets are write-only), `POST /api/settings/test-email`, and
//! `POST /api/settings/fail2ban-defaults/push`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem, problem};
use crate::alerts::mail::{self, Mail};
use crate::auth::Admin;
use crate::domain::{Server, ServerId, ServerName};
use crate::fleet::DefaultsPushResult;
use crate::settings::model::{DefaultsDocument, parse_address};
use crate::settings::{SettingsDocument, SettingsError, SmtpDocument};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_settings, save_settings))
        .routes(routes!(test_email))
        .routes(routes!(push_defaults))
}

/// Why a settings request failed, as a problem document.
#[derive(Debug)]
enum Failure {
    Api(ApiError),
    Conflict { current: u64, message: String },
    Mail(mail::MailError),
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl From<SettingsError> for Failure {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::Invalid(f) => Self::Api(ApiError::invalid(&f.field, f.reason)),
            SettingsError::Conflict { current } => Self::Conflict {
                current,
                message: e.to_string(),
            },
            SettingsError::Store(s) => Self::Api(s.into()),
            other => Self::Api(ApiError::Internal(other.to_string())),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Self::Api(e) => e.into_response(),
            Self::Conflict { current, message } => {
                let mut response = problem(
                    StatusCode::CONFLICT,
                    "settings_conflict",
                    "The settings changed since they were read",
                    message,
                    Some("version".to_owned()),
                );
                if let Ok(value) = HeaderValue::from_str(&etag(current)) {
                    response.headers_mut().insert(header::ETAG, value);
                }
                response
            }
            Self::Mail(e) => problem(
                StatusCode::BAD_GATEWAY,
                e.code(),
                "The test e-mail was not accepted",
                e.to_string(),
                None,
            ),
        }
    }
}

fn etag(version: u64) -> String {
    format!("\"{version}\"")
}

fn with_etag(document: SettingsDocument) -> Response {
    let version = document.version.unwrap_or(0);
    let mut response = ApiJson(document).into_response();
    if let Ok(value) = HeaderValue::from_str(&etag(version)) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// Reads a JSON body into `T`; a value of the wrong type is a 422 naming its path.
fn parse_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            ApiError::Malformed {
                status: StatusCode::BAD_REQUEST,
                detail: format!("the body is not a valid JSON document of this kind: {inner}"),
            }
        } else {
            ApiError::invalid(&path, inner)
        }
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
) -> Result<Response, Failure> {
    let document: SettingsDocument = parse_body(&body)?;
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
    let Some(expected) = document.version.or(if_match) else {
        return Err(ApiError::invalid(
            "version",
            "is required: send the version you read (GET /api/settings), so a concurrent edit is \
             not overwritten",
        )
        .into());
    };
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
) -> Result<ApiJson<TestEmailResult>, Failure> {
    let body: TestEmailBody = parse_body(&body)?;
    let (smtp, password) = match state.settings.smtp_for_test(body.smtp)? {
        Some(found) => found,
        None => {
            return Err(ApiError::invalid(
                "smtp",
                "no SMTP server is configured: save one in the settings or send `smtp` with the test",
            )
            .into());
        }
    };
    let mut to = Vec::new();
    for (i, raw) in body.to.iter().enumerate() {
        to.push(
            parse_address(raw, &format!("to[{i}]"))
                .map_err(|e| ApiError::invalid(&e.field, e.reason))?,
        );
    }
    if to.is_empty() {
        to = state.settings.current().settings.alerts.recipients.clone();
    }
    if to.is_empty() {
        return Err(ApiError::invalid(
            "to",
            "no recipient: give `to` or save alerts.recipients in the settings",
        )
        .into());
    }
    let subject = "banhub test e-mail".to_owned();
    let text = format!(
        "This is a test e-mail from banhub (SMTP server {}:{}).\n\
         If it arrived, alert e-mails will reach this address.\n",
        smtp.host, smtp.port
    );
    let html = format!(
        "<html><body><p>This is a test e-mail from banhub (SMTP server {}:{}).</p>\
         <p>If it arrived, alert e-mails will reach this address.</p></body></html>",
        smtp.host, smtp.port
    );
    let message = Mail {
        to: to.clone(),
        subject: subject.clone(),
        text,
        html: Some(html),
    };
    let accepted = mail::send(&smtp, password.as_ref(), &message)
        .await
        .map_err(|e| {
            tracing::info!(code = e.code(), error = %e, "test e-mail failed");
            Failure::Mail(e)
        })?;
    tracing::info!(reply = %accepted.reply, recipients = to.len(), "test e-mail accepted");
    Ok(ApiJson(TestEmailResult {
        reply: accepted.reply,
        to: to.iter().map(ToString::to_string).collect(),
        from: smtp.from.to_string(),
        subject,
        took_ms: u64::try_from(accepted.took.as_millis()).unwrap_or(u64::MAX),
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
) -> Result<ApiJson<PushDefaultsResult>, Failure> {
    let body: PushDefaultsBody = parse_body(&body)?;
    let snapshot = state.settings.current();
    let defaults = snapshot.settings.defaults.clone();
    if defaults.is_empty() {
        return Err(ApiError::invalid(
            "fail2ban.defaults",
            "nothing to push: save at least one default in the settings first",
        )
        .into());
    }
    let all = state.store.list_servers().await.map_err(ApiError::from)?;
    let mut chosen: Vec<Server> = Vec::new();
    for (i, raw) in body.servers.iter().enumerate() {
        let found = match ServerId::parse(raw) {
            Ok(id) => all.iter().find(|s| s.id == id),
            Err(_) => ServerName::parse(raw)
                .ok()
                .and_then(|name| all.iter().find(|s| s.name == name)),
        };
        match found {
            Some(server) if !chosen.iter().any(|c| c.id == server.id) => {
                chosen.push(server.clone())
            }
            Some(_) => {}
            None => {
                return Err(ApiError::invalid(
                    &format!("servers[{i}]"),
                    format!("no server has the id or name {raw:?}"),
                )
                .into());
            }
        }
    }
    if body.servers.is_empty() {
        chosen = all;
    }
    chosen.retain(|s| {
        body.labels
            .iter()
            .all(|(k, v)| s.labels.as_map().get(k) == Some(v))
    });
    if chosen.is_empty() {
        return Err(ApiError::invalid("labels", "no server matches").into());
    }
    let results = state
        .fleet
        .push_defaults(chosen, &defaults, &caller.requested_by())
        .await;
    Ok(ApiJson(PushDefaultsResult {
        defaults: snapshot.document.fail2ban.defaults.clone(),
        results,
    }))
}
