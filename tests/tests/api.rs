//! The REST API's conventions, against an in-process hub on port 0 with a fresh database: problem
//! documents with stable codes, validation at the edge that changes nothing, body limits, the OpenAPI
//! document and the health endpoints.

use std::net::SocketAddr;

use banhub::app::App;
use banhub::config::Config;
use banhub_tests::postgres::PostgresServer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct TestHub {
    base: String,
    client: reqwest::Client,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    dir: tempfile::TempDir,
}

impl TestHub {
    async fn start(database_url: Option<String>) -> Self {
        Self::start_in(tempfile::tempdir().expect("tempdir"), database_url).await
    }

    /// A hub on `dir` as its data directory (its CA, keys and, on SQLite, its database).
    async fn start_in(dir: tempfile::TempDir, database_url: Option<String>) -> Self {
        let mut config = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        config.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.grpc.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.http.body_limit_bytes = 4096;
        if let Some(url) = database_url {
            config.database.url = url;
        }
        // Act as an admin: the hub accepts this token through auth.bootstrap_token_sha256.
        let admin = banhub_tests::BootstrapToken::generate();
        config.auth.bootstrap_token_sha256 = admin.sha256.clone();
        let app = App::build(config).await.expect("hub builds");
        let base = format!("http://{}", app.http_addr().expect("bound"));
        let stop = CancellationToken::new();
        let task = tokio::spawn(app.run(stop.clone()));
        Self {
            base,
            client: banhub_tests::bearer_client(&admin.token).expect("client"),
            stop,
            task,
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        read(response).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        read(
            self.client
                .get(self.url(path))
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    async fn server_names(&self) -> Vec<String> {
        let (status, body) = self.get("/api/servers").await;
        assert_eq!(status, StatusCode::OK);
        body.as_array()
            .expect("a list")
            .iter()
            .map(|s| s["name"].as_str().expect("name").to_owned())
            .collect()
    }

    /// Stops the hub and hands back its data directory, for a restart on the same data.
    async fn shutdown(self) -> tempfile::TempDir {
        self.stop.cancel();
        self.task.await.expect("joined").expect("clean stop");
        self.dir
    }
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let problem = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/problem+json");
    let text = response.text().await.expect("body");
    let body: Value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
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

#[tokio::test]
async fn create_list_get_delete_server() {
    let hub = TestHub::start(None).await;
    let (status, created) = hub
        .post(
            "/api/servers",
            json!({"name": "web-1", "description": "front", "labels": {"env": "prod"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let server = &created["server"];
    assert_eq!(server["name"], "web-1");
    assert_eq!(server["status"], "pending");
    assert_eq!(server["labels"]["env"], "prod");
    let token = created["enrollment"]["token"].as_str().expect("token");
    let decoded = banhub_proto::token::EnrollmentToken::decode(token).expect("a valid token");
    assert!(decoded.hub_address.starts_with("127.0.0.1:"));
    assert_eq!(
        created["enrollment"]["command"],
        format!("banhub-agent enroll {token}")
    );

    let id = server["id"].as_str().expect("id");
    let (status, one) = hub.get(&format!("/api/servers/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["name"], "web-1");
    assert_eq!(hub.server_names().await, vec!["web-1"]);

    // A connection test of a server no agent enrolled for says so.
    let (status, problem) = hub
        .post(&format!("/api/servers/{id}/test"), json!({}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(problem["code"], "agent_not_enrolled");

    let response = hub
        .client
        .delete(hub.url(&format!("/api/servers/{id}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(hub.server_names().await.is_empty());
    let (status, problem) = hub.get(&format!("/api/servers/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["code"], "unknown_server");
    hub.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_a_clear_4xx_and_changes_nothing() {
    let hub = TestHub::start(None).await;
    let (status, _) = hub.post("/api/servers", json!({"name": "web-1"})).await;
    assert_eq!(status, StatusCode::CREATED);

    let cases: Vec<(Value, StatusCode, &str, Option<&str>)> = vec![
        (
            json!({"name": "../etc"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": "a b"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": "x".repeat(65)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": "ok", "labels": {"../k": "v"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("labels"),
        ),
        (
            json!({"name": "ok", "description": "a\u{0}b"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("description"),
        ),
        (
            json!({"name": "web-1"}),
            StatusCode::CONFLICT,
            "name_taken",
            None,
        ),
        (
            json!({"nom": "typo"}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            None,
        ),
        (
            json!({"name": 7}),
            StatusCode::BAD_REQUEST,
            "bad_request",
            None,
        ),
    ];
    for (body, want_status, want_code, want_field) in cases {
        let (status, problem) = hub.post("/api/servers", body.clone()).await;
        assert_eq!(status, want_status, "for {body}: {problem}");
        assert_eq!(problem["code"], want_code, "for {body}: {problem}");
        if let Some(field) = want_field {
            assert_eq!(problem["field"], field, "for {body}: {problem}");
        }
    }

    // Not JSON at all, the wrong media type, a body over the limit.
    let raw = |body: String, content_type: &'static str| {
        hub.client
            .post(hub.url("/api/servers"))
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let (status, problem) = read(
        raw("{not json".to_owned(), "application/json")
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let (status, problem) = read(
        raw("name=x".to_owned(), "application/x-www-form-urlencoded")
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{problem}");
    let huge = json!({"name": "big", "description": "x".repeat(10_000)}).to_string();
    let (status, problem) = read(raw(huge, "application/json").await.expect("sent")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{problem}");
    assert_eq!(problem["code"], "payload_too_large");

    // Ids that are not ids, and unknown endpoints.
    for path in [
        "/api/servers/..%2F..%2Fetc",
        "/api/servers/not-a-uuid",
        "/api/servers/00000000-0000-0000-0000-000000000000",
    ] {
        let (status, problem) = hub.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {problem}");
    }
    let (status, _) = hub.get("/api/no-such-thing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert_eq!(hub.server_names().await, vec!["web-1"], "nothing changed");
    hub.shutdown().await;
}

#[tokio::test]
async fn openapi_health_and_metrics() {
    let hub = TestHub::start(None).await;
    let (status, doc) = hub.get("/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        "/api/servers",
        "/api/servers/{id}",
        "/api/servers/{id}/test",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from the OpenAPI document"
        );
    }
    assert!(doc["components"]["schemas"]["Problem"].is_object());

    // The docs page and its assets are served by the hub itself (works offline).
    let page = hub
        .client
        .get(hub.url("/api/docs/"))
        .send()
        .await
        .expect("docs");
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.expect("html");
    assert!(
        !html.contains("cdn"),
        "the docs page must not load from a CDN"
    );
    let script = hub
        .client
        .get(hub.url("/api/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .expect("asset");
    assert_eq!(script.status(), StatusCode::OK);

    let (status, health) = hub.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "ok");
    let (status, ready) = hub.get("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ready["database"], "sqlite");

    let metrics = hub
        .client
        .get(hub.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.expect("text");
    assert!(text.contains("banhub_agents_connected 0"), "{text}");
    assert!(text.contains("banhub_http_requests_total{"), "{text}");
    hub.shutdown().await;
}

#[tokio::test]
async fn the_api_works_on_postgres_too() {
    let pg = PostgresServer::start().expect("PostgreSQL");
    let url = pg.create_database("api").expect("database");
    let hub = TestHub::start(Some(url.clone())).await;
    let (status, _) = hub.post("/api/servers", json!({"name": "pg-1"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = hub.post("/api/servers", json!({"name": "pg-1"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, ready) = hub.get("/readyz").await;
    assert_eq!(ready["database"], "postgres");
    let dir = hub.shutdown().await;

    // The hub started again on the same database sees what it stored before.
    let hub = TestHub::start_in(dir, Some(url.clone())).await;
    assert_eq!(hub.server_names().await, vec!["pg-1"]);
    hub.shutdown().await;

    // A hub with a CA of its own is refused on a database whose hubs share another CA: the agents
    // enrolled there would not trust it.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    config.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.grpc.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.database.url = url;
    let Err(refused) = App::build(config).await else {
        panic!("a hub with another CA joined the database");
    };
    assert!(refused.to_string().contains("CA"), "{refused}");
}
