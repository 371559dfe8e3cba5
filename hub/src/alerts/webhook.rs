//! Posting a digest to a webhook in one of three shapes: banhub's JSON, a Slack-style `{"text"}`
//! body, or ntfy's plain text with headers. A 2xx answer delivers; 408, 429 and 5xx answers and
//! network failures are worth retrying; any other answer is not.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::render::Rendered;
use crate::settings::WebhookFormat;

/// Bound on one webhook request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a post did not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WebhookError {
    pub message: String,
    pub transient: bool,
}

/// A client for webhooks: no redirects (a redirect could carry the token elsewhere), a timeout.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("banhub/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Posts `rendered` to `url` in `format`; returns the status line on success.
pub async fn post(
    client: &reqwest::Client,
    format: WebhookFormat,
    url: &SecretString,
    token: Option<&SecretString>,
    rendered: &Rendered,
) -> Result<String, WebhookError> {
    let url = reqwest::Url::parse(url.expose_secret()).map_err(|e| WebhookError {
        message: format!("the stored URL does not parse: {e}"),
        transient: false,
    })?;
    let host = super::super::settings::model::url_host(&url);
    let mut request = client.post(url);
    if let Some(token) = token {
        request = request.bearer_auth(token.expose_secret());
    }
    request = match format {
        WebhookFormat::Json => request.json(&rendered.json),
        WebhookFormat::Slack => request.json(&serde_json::json!({ "text": rendered.chat })),
        WebhookFormat::Ntfy => request
            .header("Title", ascii_header(&rendered.subject))
            .header("Tags", "rotating_light")
            .header("Priority", "high")
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(rendered.text.clone()),
    };
    let response = request.send().await.map_err(|e| WebhookError {
        // Without the URL: its path may hold a secret.
        message: format!(
            "posting to {host} failed: {}",
            if e.is_timeout() {
                "no answer in time".to_owned()
            } else if e.is_connect() {
                "cannot connect".to_owned()
            } else {
                e.without_url().to_string()
            }
        ),
        transient: true,
    })?;
    let status = response.status();
    let line = format!(
        "HTTP {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .trim()
    .to_owned();
    if status.is_success() {
        return Ok(line);
    }
    let body: String = response
        .text()
        .await
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    let transient = status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429;
    Err(WebhookError {
        message: format!("{host} answered {line}: {body}")
            .trim_end_matches([':', ' '])
            .to_owned(),
        transient,
    })
}

/// Header values must be visible ASCII; anything else becomes `?`.
fn ascii_header(text: &str) -> String {
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}
