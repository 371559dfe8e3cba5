//! The REST API's conventions, against an in-process hub on port 0 with a fresh database: problem
//! documents with stable codes, validation at the edge that changes nothing, body limits, the OpenAPI
//! document and the health endpoints.

use std::net::SocketAddr;

use banhub::app::App;
use banhub::config::Config;
use banhub_tests::TestHub;
use banhub_tests::client::read_checked as read;
use banhub_tests::postgres::PostgresServer;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A hub with a 4 KiB body limit, on `database_url` or else on SQLite.
async fn start(database_url: Option<String>) -> TestHub {
    start_in(tempfile::tempdir().expect("tempdir"), database_url).await
}

/// Like [`start`], with `dir` as the hub's directory (its CA, keys and, on SQLite, its database).
async fn start_in(dir: tempfile::TempDir, database_url: Option<String>) -> TestHub {
    let mut builder = TestHub::builder()
        .dir(dir)
        .configure(|config| config.http.body_limit_bytes = 4096);
    if let Some(url) = database_url {
        builder = builder.database_url(url);
    }
    builder.start().await
}

/// The names of every registered server.
async fn server_names(hub: &TestHub) -> Vec<String> {
    let servers = hub.api.servers().await.expect("the servers");
    servers.into_iter().map(|s| s.name).collect()
}

#[tokio::test]
async fn create_list_get_delete_server() {
    let hub = start(None).await;
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
    assert_eq!(server_names(&hub).await, vec!["web-1"]);

    // A connection test of a server no agent enrolled for says so.
    let (status, problem) = hub
        .post(&format!("/api/servers/{id}/test"), json!({}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(problem["code"], "agent_not_enrolled");

    let response = hub
        .client()
        .delete(hub.url(&format!("/api/servers/{id}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(server_names(&hub).await.is_empty());
    let (status, problem) = hub.get(&format!("/api/servers/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(problem["code"], "unknown_server");
    hub.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_a_clear_4xx_and_changes_nothing() {
    let hub = start(None).await;
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
        // JSON that does not fit the body (a field missing, unknown or of the wrong type) breaks a
        // field rule like the others; only JSON that does not parse is a 400 (below).
        (
            json!({"nom": "typo"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("nom"),
        ),
        (
            json!({"description": "no name"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
        ),
        (
            json!({"name": 7}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            Some("name"),
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
        hub.client()
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
    assert_eq!(problem["code"], "bad_request", "{problem}");
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

    assert_eq!(server_names(&hub).await, vec!["web-1"], "nothing changed");
    hub.shutdown().await;
}

#[tokio::test]
async fn openapi_health_and_metrics() {
    let hub = start(None).await;
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
        .client()
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
        .client()
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
        .client()
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
    let hub = start(Some(url.clone())).await;
    let (status, _) = hub.post("/api/servers", json!({"name": "pg-1"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = hub.post("/api/servers", json!({"name": "pg-1"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, ready) = hub.get("/readyz").await;
    assert_eq!(ready["database"], "postgres");
    let dir = hub.shutdown().await;

    // The hub started again on the same database sees what it stored before.
    let hub = start_in(dir, Some(url.clone())).await;
    assert_eq!(server_names(&hub).await, vec!["pg-1"]);
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

/// A request with a header or body, read as [`read`] does.
async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let response = request.send().await.expect("request");
    let headers = response.headers().clone();
    let (status, body) = read(response).await;
    (status, body, headers)
}

/// Asserts a 404 `unknown_server` whose detail names `sent`.
fn assert_unknown_server(status: StatusCode, problem: &Value, sent: &str) {
    assert_eq!(status, StatusCode::NOT_FOUND, "{sent}: {problem}");
    assert_eq!(problem["code"], "unknown_server", "{sent}: {problem}");
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.contains(sent)),
        "the detail names {sent}: {problem}"
    );
}

#[tokio::test]
async fn a_method_a_route_does_not_serve_is_a_405_naming_the_methods_it_does() {
    let hub = start(None).await;
    let (status, created) = hub.post("/api/servers", json!({"name": "web-1"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["server"]["id"].as_str().expect("id").to_owned();
    let cases = [
        (
            hub.client().delete(hub.url("/api/servers")),
            "GET, HEAD, POST",
        ),
        (
            hub.client().put(hub.url(&format!("/api/servers/{id}"))),
            "GET, HEAD, DELETE",
        ),
        (hub.client().get(hub.url("/api/bandaemon/restart")), "POST"),
        (hub.client().post(hub.url("/api/openapi.json")), "GET, HEAD"),
        (hub.client().post(hub.url("/healthz")), "GET, HEAD"),
    ];
    for (request, allow) in cases {
        let (status, problem, headers) = send(request).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{problem}");
        assert_eq!(problem["code"], "method_not_allowed", "{problem}");
        assert_eq!(headers["allow"], allow, "{problem}");
    }
    // Whoever asks: the method is wrong before any role is checked.
    let anonymous = reqwest::Client::new();
    let (status, _, headers) = send(anonymous.delete(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers["allow"], "GET, HEAD, POST");
    // A path no route serves is still a 404, and the refused requests changed nothing.
    let (status, _) = hub.get("/api/no-such-thing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(server_names(&hub).await, vec!["web-1"]);
    hub.shutdown().await;
}

#[tokio::test]
async fn a_server_is_named_by_id_or_name_alike_and_an_unknown_one_is_named_back() {
    let hub = start(None).await;
    let (status, created) = hub.post("/api/servers", json!({"name": "web-1"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["server"]["id"].as_str().expect("id").to_owned();

    // In the path.
    for named in [id.as_str(), "web-1"] {
        let (status, server) = hub.get(&format!("/api/servers/{named}")).await;
        assert_eq!(status, StatusCode::OK, "{named}: {server}");
        assert_eq!(server["id"], id.as_str());
        let (status, secret) = hub
            .get(&format!("/api/servers/{named}/callback-secret"))
            .await;
        assert_eq!(status, StatusCode::OK, "{named}: {secret}");
    }
    let absent = "0190aaaa-0000-7000-8000-000000000000";
    for sent in ["web-9", absent] {
        let (status, problem) = hub.get(&format!("/api/servers/{sent}")).await;
        assert_unknown_server(status, &problem, sent);
        let (status, problem) = hub
            .get(&format!("/api/servers/{sent}/callback-secret"))
            .await;
        assert_unknown_server(status, &problem, sent);
        let (status, problem) = hub
            .post(&format!("/api/servers/{sent}/test"), json!({}))
            .await;
        assert_unknown_server(status, &problem, sent);
    }

    // In `serverId=`: a name is resolved, an id is taken as it is (a history may name a server
    // removed since).
    for named in [id.as_str(), "web-1", absent] {
        let (status, page) = hub.get(&format!("/api/events/bans?serverId={named}")).await;
        assert_eq!(status, StatusCode::OK, "{named}: {page}");
        let (status, page) = hub.get(&format!("/api/audit?serverId={named}")).await;
        assert_eq!(status, StatusCode::OK, "{named}: {page}");
    }
    for path in [
        "/api/events/bans?serverId=web-9",
        "/api/events/bans/stats?serverId=web-9",
        "/api/audit?serverId=web-9",
    ] {
        let (status, problem) = hub.get(path).await;
        assert_unknown_server(status, &problem, "web-9");
    }

    // In the `X-BanDaemon-Server` header: the server is found (its agent has not enrolled), or
    // the name is sent back.
    let restart = |server: &str| {
        hub.client()
            .post(hub.url("/api/bandaemon/restart"))
            .header("X-BanDaemon-Server", server)
    };
    for named in [id.as_str(), "web-1"] {
        let (status, problem, _) = send(restart(named)).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{named}: {problem}"
        );
    }
    let (status, problem, _) = send(restart("web-9")).await;
    assert_unknown_server(status, &problem, "web-9");
    hub.shutdown().await;
}

#[tokio::test]
async fn the_restart_body_is_optional_and_read_like_every_other_body() {
    let hub = start(None).await;
    let (status, _) = hub.post("/api/servers", json!({"name": "web-1"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let restart = || hub.client().post(hub.url("/api/bandaemon/restart"));
    // No body, or an empty object: the request is read and reaches the (absent) agent.
    for request in [
        restart(),
        restart().json(&json!({})),
        restart().json(&json!({"mode": "restart"})),
    ] {
        let (status, problem, _) = send(request).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    }
    let (status, problem, _) = send(restart().json(&json!({"mode": "sideways"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "mode", "{problem}");
    let (status, problem, _) = send(
        restart()
            .header("content-type", "application/json")
            .body("{\"mode\""),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");

    // The document says the same, and says that `q` is served by a text index.
    let (_, doc) = hub.get("/api/openapi.json").await;
    let body = &doc["paths"]["/api/bandaemon/restart"]["post"]["requestBody"];
    assert!(body.is_object(), "{body}");
    assert_ne!(body["required"], true, "{body}");
    let q = doc["paths"]["/api/events/bans"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "q")
        .expect("q")
        .clone();
    let text = q["description"].as_str().expect("description");
    assert!(
        text.contains("pg_trgm") && !text.contains("Not indexed"),
        "{text}"
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn direct_callbacks_show_their_server_as_reporting_and_unbans_carry_no_failures() {
    let hub = start(None).await;
    let (status, created) = hub.post("/api/servers", json!({"name": "edge-1"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["server"]["status"], "pending");
    let (status, issued) = hub
        .post("/api/servers/edge-1/callback-secret", json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let secret = issued["secret"].as_str().expect("secret").to_owned();
    let callback = |path: &str, body: Value| {
        reqwest::Client::new()
            .post(hub.url(path))
            .header("X-Callback-Secret", secret.as_str())
            .json(&body)
    };
    let facts = json!({"ip": "192.0.2.7", "jail": "sshd", "hostname": "edge-1", "failures": 3});
    for path in ["/api/ban", "/api/unban"] {
        let (status, accepted, _) = send(callback(path, facts.clone())).await;
        assert_eq!(status, StatusCode::OK, "{path}: {accepted}");
    }

    let (status, server) = hub.get("/api/servers/edge-1").await;
    assert_eq!(status, StatusCode::OK, "{server}");
    assert_eq!(server["status"], "reporting", "{server}");
    assert!(server["lastSeenAt"].is_string(), "{server}");

    let (status, page) = hub.get("/api/events/bans?serverId=edge-1").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let events = page["events"].as_array().expect("events");
    let of_kind = |kind: &str| {
        events
            .iter()
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {page}"))
    };
    assert_eq!(of_kind("ban")["failures"], 3, "{page}");
    let unban = of_kind("unban");
    assert!(
        unban
            .as_object()
            .is_some_and(|o| o.contains_key("failures"))
            && unban["failures"].is_null(),
        "{unban}"
    );
    hub.shutdown().await;
}
