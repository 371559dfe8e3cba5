//! Posting a digest to a webhook in one of four shapes: banhub's JSON, Slack's incoming-webhook
//! `{"text", "blocks"}`, ntfy's plain text with headers, or ntfy's JSON publish. A 2xx answer
//! delivers; 408, 429 and 5xx answers and network failures are worth retrying; any other answer
//! is not.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::render::Rendered;
use crate::settings::WebhookFormat;
use crate::settings::model::ntfy_topic;

/// Longest text of a Slack header block (Slack's own limit).
const SLACK_HEADER_MAX: usize = 150;
/// Longest text of a Slack section block (Slack's own limit).
const SLACK_SECTION_MAX: usize = 3000;

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
    let (url, topic) = match format {
        WebhookFormat::NtfyJson => {
            let (root, topic) = ntfy_topic(&url).ok_or_else(|| WebhookError {
                message: format!(
                    "the URL of this ntfy webhook ({host}) does not end with a topic name"
                ),
                transient: false,
            })?;
            (root, topic)
        }
        _ => (url, String::new()),
    };
    let mut request = client.post(url);
    if let Some(token) = token {
        request = request.bearer_auth(token.expose_secret());
    }
    request = match payload(format, rendered, &topic) {
        Payload::Json(body) => request.json(&body),
        Payload::Text { headers, body } => {
            for (name, value) in headers {
                request = request.header(name, value);
            }
            request
                .header("Content-Type", "text/plain; charset=utf-8")
                .body(body)
        }
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

/// The body of a webhook post, as it goes out.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Json(serde_json::Value),
    /// A plain-text body with the headers that go with it.
    Text {
        headers: Vec<(&'static str, String)>,
        body: String,
    },
}

/// What a webhook of `format` is sent for `rendered`; `topic` is the ntfy topic of `ntfy-json`.
pub fn payload(format: WebhookFormat, rendered: &Rendered, topic: &str) -> Payload {
    match format {
        WebhookFormat::Json => Payload::Json(rendered.json.clone()),
        WebhookFormat::Slack => Payload::Json(serde_json::json!({
            "text": rendered.chat,
            "blocks": [
                {"type": "header",
                 "text": {"type": "plain_text", "text": clip(&rendered.subject, SLACK_HEADER_MAX)}},
                {"type": "section",
                 "text": {"type": "mrkdwn", "text": clip(&rendered.chat, SLACK_SECTION_MAX)}},
            ],
        })),
        WebhookFormat::Ntfy => Payload::Text {
            headers: vec![
                ("Title", ascii_header(&rendered.subject)),
                ("Tags", "rotating_light".to_owned()),
                ("Priority", "high".to_owned()),
            ],
            body: rendered.text.clone(),
        },
        WebhookFormat::NtfyJson => Payload::Json(serde_json::json!({
            "topic": topic,
            "title": rendered.subject,
            "message": rendered.text,
            "tags": ["rotating_light"],
            "priority": 4,
        })),
    }
}

/// At most `max` characters of `text`, an ellipsis marking a cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Header values must be visible ASCII; anything else becomes `?`.
fn ascii_header(text: &str) -> String {
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered() -> Rendered {
        Rendered {
            subject: "[banhub] web: 3 bans on 1 server".to_owned(),
            text: "Alert rule \"web\" matched 3 bans.".to_owned(),
            html: String::new(),
            chat: "*web*: 3 bans".to_owned(),
            json: serde_json::json!({"type": "banhub.alert.digest"}),
        }
    }

    #[test]
    fn slack_gets_text_and_blocks() {
        let Payload::Json(body) = payload(WebhookFormat::Slack, &rendered(), "") else {
            panic!("JSON");
        };
        assert_eq!(body["text"], "*web*: 3 bans");
        assert_eq!(body["blocks"][0]["type"], "header");
        assert_eq!(body["blocks"][0]["text"]["type"], "plain_text");
        assert_eq!(
            body["blocks"][0]["text"]["text"],
            "[banhub] web: 3 bans on 1 server"
        );
        assert_eq!(body["blocks"][1]["text"]["type"], "mrkdwn");
        assert_eq!(body["blocks"][1]["text"]["text"], "*web*: 3 bans");
    }

    #[test]
    fn ntfy_json_names_its_topic_and_ntfy_text_its_headers() {
        let Payload::Json(body) = payload(WebhookFormat::NtfyJson, &rendered(), "alerts") else {
            panic!("JSON");
        };
        assert_eq!(body["topic"], "alerts");
        assert_eq!(body["title"], "[banhub] web: 3 bans on 1 server");
        assert_eq!(body["message"], "Alert rule \"web\" matched 3 bans.");
        assert_eq!(body["tags"][0], "rotating_light");
        assert_eq!(body["priority"], 4);
        let Payload::Text { headers, body } = payload(WebhookFormat::Ntfy, &rendered(), "") else {
            panic!("text");
        };
        assert!(headers.contains(&("Priority", "high".to_owned())));
        assert!(body.starts_with("Alert rule"));
    }

    #[test]
    fn an_ntfy_url_splits_into_its_root_and_topic() {
        let split = |raw: &str| {
            ntfy_topic(&reqwest::Url::parse(raw).expect("URL"))
                .map(|(root, topic)| (root.to_string(), topic))
        };
        assert_eq!(
            split("https://ntfy.sh/banhub-alerts"),
            Some(("https://ntfy.sh/".to_owned(), "banhub-alerts".to_owned()))
        );
        assert_eq!(
            split("http://127.0.0.1:8080/ntfy/ops_1/?x=1"),
            Some(("http://127.0.0.1:8080/ntfy/".to_owned(), "ops_1".to_owned()))
        );
        assert_eq!(split("https://ntfy.sh/"), None);
        assert_eq!(split("https://ntfy.sh/a.b"), None);
    }

    #[test]
    fn long_slack_texts_are_clipped() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
