//! A typed client of the hub's REST API for tests: [`ApiClient`] sends as one caller (a bearer token
//! or a session cookie in its `reqwest::Client`), optionally addressed to one server, and reads the
//! answers into the serde types below, which follow the JSON the API answers. Tests of bad input use
//! the raw [`ApiClient::send`], [`ApiClient::get`] and [`ApiClient::post`].

use std::collections::BTreeMap;
use std::fmt;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The header that addresses a request to one server (by id or name).
pub const SERVER_HEADER: &str = "X-BanDaemon-Server";

/// An answer other than the one a typed call expects: its status and body (a problem document for
/// the hub's errors).
#[derive(Debug)]
pub struct Refused {
    pub status: StatusCode,
    pub body: Value,
}

impl Refused {
    /// The problem document's `code`, when the body is one.
    pub fn code(&self) -> Option<&str> {
        self.body["code"].as_str()
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the hub answered {}: {}", self.status, self.body)
    }
}

impl std::error::Error for Refused {}

/// The hub's REST API as one caller sees it.
#[derive(Debug, Clone)]
pub struct ApiClient {
    /// Scheme, host and any base path, without a trailing slash.
    base: String,
    http: reqwest::Client,
    /// Sent as [`SERVER_HEADER`] when set.
    server: Option<String>,
}

impl ApiClient {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:8080`, or with a base path) sending
    /// through `http`.
    pub fn new(base: impl Into<String>, http: reqwest::Client) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            http,
            server: None,
        }
    }

    /// The same caller with every request addressed to `server` (an id or a name).
    pub fn for_server(&self, server: &str) -> Self {
        Self {
            server: Some(server.to_owned()),
            ..self.clone()
        }
    }

    /// The absolute URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The underlying HTTP client, for requests this type has no method for.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A request to `path`, with the server header when the client is addressed to a server.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.server {
            Some(server) => request.header(SERVER_HEADER, server),
            None => request,
        }
    }

    /// Sends `request` and reads the answer: its status and its body as JSON (a string when it is
    /// not JSON, null when empty).
    pub async fn send(&self, request: RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("the hub answers");
        let status = response.status();
        let text = response.text().await.expect("a body");
        (status, parse_body(text))
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.request(Method::GET, path)).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(self.request(Method::PUT, path).json(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.request(Method::DELETE, path)).await
    }

    /// Every registered server.
    pub async fn servers(&self) -> Result<Vec<Server>, Refused> {
        self.typed(Method::GET, "/api/servers", None, StatusCode::OK)
            .await
    }

    /// One server, by id or name.
    pub async fn server(&self, id: &str) -> Result<Server, Refused> {
        self.typed(
            Method::GET,
            &format!("/api/servers/{id}"),
            None,
            StatusCode::OK,
        )
        .await
    }

    /// Registers a server named `name`; the answer holds its one-time enrollment token.
    pub async fn create_server(&self, name: &str) -> Result<CreatedServer, Refused> {
        let body = json!({ "name": name });
        self.typed(
            Method::POST,
            "/api/servers",
            Some(&body),
            StatusCode::CREATED,
        )
        .await
    }

    /// The jails of the addressed server with their counters, and the server.
    pub async fn summary(&self) -> Result<Summary, Refused> {
        self.typed(Method::GET, "/api/summary", None, StatusCode::OK)
            .await
    }

    /// Every jail of the addressed server's effective configuration.
    pub async fn jails(&self) -> Result<JailList, Refused> {
        self.typed(Method::GET, "/api/jails/manage", None, StatusCode::OK)
            .await
    }

    /// Bans `ip` in `jail` on the addressed server.
    pub async fn ban(&self, jail: &str, ip: &str) -> Result<BanOutcome, Refused> {
        let path = format!("/api/jails/{jail}/ban/{}", ip.replace('/', "%2F"));
        self.typed(Method::POST, &path, None, StatusCode::OK).await
    }

    /// Lifts the ban of `ip` in `jail` on the addressed server.
    pub async fn unban(&self, jail: &str, ip: &str) -> Result<BanOutcome, Refused> {
        let path = format!("/api/jails/{jail}/unban/{}", ip.replace('/', "%2F"));
        self.typed(Method::POST, &path, None, StatusCode::OK).await
    }

    /// The first page of addresses banned in `jail` on the addressed server.
    pub async fn banned(&self, jail: &str) -> Result<BannedPage, Refused> {
        let path = format!("/api/jails/{jail}/banned");
        self.typed(Method::GET, &path, None, StatusCode::OK).await
    }

    /// One page of `GET /api/events/bans?{query}` (`query` without the leading `?`).
    pub async fn events(&self, query: &str) -> Result<EventPage, Refused> {
        let path = format!("/api/events/bans?{query}");
        self.typed(Method::GET, &path, None, StatusCode::OK).await
    }

    /// Every event matching `query`, walking the pages `page` at a time; each page but the last is
    /// full and none is longer than `page`.
    pub async fn all_events(&self, query: &str, page: usize) -> Result<Vec<Event>, Refused> {
        let events = self.all_events_json(query, page).await?;
        Ok(events
            .into_iter()
            .map(|e| serde_json::from_value(e.clone()).unwrap_or_else(|x| panic!("{x}: {e}")))
            .collect())
    }

    /// [`ApiClient::all_events`] as the JSON the API answers.
    pub async fn all_events_json(&self, query: &str, page: usize) -> Result<Vec<Value>, Refused> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..10_000 {
            let mut path = format!("/api/events/bans?limit={page}");
            if !query.is_empty() {
                path.push('&');
                path.push_str(query);
            }
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let (status, body) = self.get(&path).await;
            if status != StatusCode::OK {
                return Err(Refused { status, body });
            }
            let events = body["events"].as_array().expect("events");
            assert!(events.len() <= page, "{path}: a page longer than asked");
            out.extend(events.iter().cloned());
            match body["nextCursor"].as_str() {
                Some(next) => {
                    assert_eq!(events.len(), page, "a full page before a next cursor");
                    cursor = Some(next.to_owned());
                }
                None => return Ok(out),
            }
        }
        panic!("paging did not end");
    }

    /// Sends `body` (if any) to `path` and reads the answer as `T` when its status is `expected`.
    async fn typed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        expected: StatusCode,
    ) -> Result<T, Refused> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let (status, body) = self.send(request).await;
        if status != expected {
            return Err(Refused { status, body });
        }
        Ok(serde_json::from_value(body.clone()).unwrap_or_else(|e| {
            panic!("{path}: the answer does not read as expected ({e}): {body}")
        }))
    }
}

/// Reads an answer's body: JSON, a string when it is not JSON, null when empty.
fn parse_body(text: String) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// Reads `response` and checks the error vocabulary on the way: an error is
/// `application/problem+json` with its status, a string `code` and a `urn:banhub:problem:` type.
pub async fn read_checked(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let problem = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/problem+json");
    let body = parse_body(response.text().await.expect("body"));
    if !status.is_success() {
        assert!(problem, "error {status} is not problem+json: {body}");
        assert_eq!(body["status"], status.as_u16(), "{body}");
        assert!(body["code"].is_string(), "{body}");
        assert!(
            body["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("urn:banhub:problem:")),
            "{body}"
        );
    }
    (status, body)
}

/// A server's connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServerStatus {
    Pending,
    Reporting,
    Online,
    Offline,
}

/// A registered fail2ban host (`ServerDto`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    pub id: String,
    pub name: String,
    pub description: String,
    pub labels: BTreeMap<String, String>,
    pub status: ServerStatus,
    pub agent_id: Option<String>,
    pub agent_version: Option<String>,
    pub fail2ban_version: Option<String>,
    pub hostname: Option<String>,
    pub address: Option<String>,
    pub replica: Option<String>,
}

/// A one-time enrollment token.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enrollment {
    pub token: String,
    pub command: String,
}

/// The answer to `POST /api/servers`.
#[derive(Debug, Clone, Deserialize)]
pub struct CreatedServer {
    pub server: Server,
    pub enrollment: Enrollment,
}

/// One jail's counters in a summary.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JailCounters {
    pub name: String,
    pub currently_failed: u64,
    pub total_failed: u64,
    pub currently_banned: u64,
    pub total_banned: u64,
}

/// The answer to `GET /api/summary`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub server: Server,
    pub fail2ban_version: String,
    pub jails: Vec<JailCounters>,
}

/// One jail of the effective configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JailSummary {
    pub name: String,
    pub enabled: bool,
    pub running: bool,
    pub filter: String,
    pub actions: Vec<String>,
}

/// The answer to `GET /api/jails/manage`.
#[derive(Debug, Clone, Deserialize)]
pub struct JailList {
    pub jails: Vec<JailSummary>,
    pub warnings: Vec<String>,
}

/// The answer to a ban or an unban.
#[derive(Debug, Clone, Deserialize)]
pub struct BanOutcome {
    pub ip: String,
    /// False when the address was already banned (ban) or not banned (unban).
    pub changed: bool,
    pub jails: Vec<String>,
}

/// One banned address.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BannedIp {
    pub ip: String,
    pub permanent: bool,
}

/// A page of a jail's banned addresses.
#[derive(Debug, Clone, Deserialize)]
pub struct BannedPage {
    pub jail: String,
    pub total: u64,
    pub items: Vec<BannedIp>,
}

/// An event's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EventKind {
    Ban,
    Unban,
    Gap,
}

/// Where an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EventSource {
    Action,
    Observed,
    Direct,
}

/// A ban event (`EventDto`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: i64,
    pub kind: EventKind,
    pub source: EventSource,
    pub server_id: String,
    pub agent_id: Option<String>,
    pub ip: Option<String>,
    pub jail: Option<String>,
    pub hostname: Option<String>,
    /// Null for unbans and gaps.
    pub failures: Option<u32>,
    pub logs: Vec<String>,
    pub ban_count: Option<u32>,
    pub lost: Option<u64>,
}

/// A page of events, newest first.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next_cursor: Option<String>,
}
