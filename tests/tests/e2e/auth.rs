//! Operator authentication against a real hub process in local-admin mode (the default): the
//! generated initial password logs in, a wrong one is refused and rate limited, every `/api` route
//! needs a session or a token, each role's allowed and refused calls, cross-origin changes with a
//! valid cookie are refused, logout and session expiry end the session.
//!
//! The OpenID Connect login against a real provider is in `oidc.rs`.

use std::time::Duration;

use banhub_tests::hub::HubProcess;
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};

fn initial_password(hub: &HubProcess) -> String {
    let path = hub.data_dir().join("initial-admin-password");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// Posts the local login; returns the status, the body and the session cookie (`name=value`).
async fn login(
    hub: &HubProcess,
    user: &str,
    password: &str,
) -> (StatusCode, Value, Option<String>) {
    let response = hub
        .anonymous_client()
        .expect("client")
        .post(hub.url("/auth/login"))
        .json(&json!({ "username": user, "password": password }))
        .send()
        .await
        .expect("POST /auth/login");
    let status = response.status();
    let cookie = response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("banhub_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, cookie)
}

async fn status_of(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_api_needs_a_login_but_health_does_not() {
    let hub = HubProcess::start().expect("hub");
    let anonymous = hub.anonymous_client().expect("client");
    let (status, body) = status_of(anonymous.get(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthenticated");
    let (status, body) = status_of(
        anonymous
            .post(hub.url("/api/servers"))
            .json(&json!({ "name": "web-1" })),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (_, servers) = status_of(hub.client().get(hub.url("/api/servers"))).await;
    assert_eq!(
        servers.as_array().map(Vec::len),
        Some(0),
        "nothing was added: {servers}"
    );
    for open in ["/healthz", "/readyz", "/auth/status"] {
        let (status, body) = status_of(anonymous.get(hub.url(open))).await;
        assert_eq!(status, StatusCode::OK, "{open}: {body}");
    }
    let (_, status) = status_of(anonymous.get(hub.url("/auth/status"))).await;
    assert_eq!(status["authenticated"], false);
    assert_eq!(status["mode"], "local");
    let (status, body) = status_of(
        anonymous
            .get(hub.url("/api/servers"))
            .bearer_auth("bht_0000_not-a-token"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // The document says which role each route needs.
    let (_, doc) = status_of(hub.client().get(hub.url("/api/openapi.json"))).await;
    let post_servers = &doc["paths"]["/api/servers"]["post"];
    assert_eq!(post_servers["x-required-role"], "admin", "{post_servers}");
    assert_eq!(
        doc["paths"]["/api/jails/{jail}/ban/{ip}"]["post"]["x-required-role"],
        "operator"
    );
    assert_eq!(
        doc["paths"]["/api/servers"]["get"]["x-required-role"],
        "viewer"
    );
}

#[tokio::test]
async fn local_admin_logs_in_with_the_generated_password() {
    let hub = HubProcess::start().expect("hub");
    let path = hub.data_dir().join("initial-admin-password");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&path)
            .expect("password file")
            .permissions(),
    );
    assert_eq!(
        mode & 0o077,
        0,
        "only its owner may read {}",
        path.display()
    );
    let (status, user, cookie) = login(&hub, "admin", &initial_password(&hub)).await;
    assert_eq!(status, StatusCode::OK, "{user}");
    assert_eq!(user["role"], "admin");
    let cookie = cookie.expect("a session cookie");
    let client = hub.anonymous_client().expect("client");
    let (status, me) = status_of(client.get(hub.url("/auth/user")).header(COOKIE, &cookie)).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["name"], "admin");
    // A change from the hub's own origin works; the same cookie from another origin does not.
    let origin = hub.http_url();
    let (status, body) = status_of(
        client
            .post(hub.url("/api/servers"))
            .header(COOKIE, &cookie)
            .header(ORIGIN, origin.trim_end_matches('/'))
            .json(&json!({ "name": "same-origin" })),
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = status_of(
        client
            .post(hub.url("/api/servers"))
            .header(COOKIE, &cookie)
            .header(ORIGIN, "https://evil.example")
            .json(&json!({ "name": "cross-origin" })),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "cross_origin");
    let (status, body) = status_of(
        client
            .post(hub.url("/api/servers"))
            .header(COOKIE, &cookie)
            .json(&json!({ "name": "no-origin" })),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (_, servers) = status_of(hub.client().get(hub.url("/api/servers"))).await;
    let names: Vec<_> = servers
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, ["same-origin"], "refused requests changed nothing");
    // Logout ends the session on the hub, not only in the browser.
    let response = client
        .post(hub.url("/auth/logout"))
        .header(COOKIE, &cookie)
        .header(ORIGIN, origin.trim_end_matches('/'))
        .send()
        .await
        .expect("logout");
    assert!(
        response.status().is_redirection() || response.status().is_success(),
        "{}",
        response.status()
    );
    let (status, body) = status_of(client.get(hub.url("/auth/user")).header(COOKIE, &cookie)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _) = status_of(client.get(hub.url("/api/servers")).header(COOKIE, &cookie)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn wrong_passwords_are_refused_then_rate_limited() {
    let hub = HubProcess::start().expect("hub");
    for attempt in 0..5 {
        let (status, body, cookie) = login(&hub, "admin", "wrong password").await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "attempt {attempt}: {body}"
        );
        assert!(cookie.is_none());
    }
    let (status, body, cookie) = login(&hub, "admin", "wrong password").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(cookie.is_none());
    // Even the right password waits for the lockout to end.
    let (status, _, cookie) = login(&hub, "admin", &initial_password(&hub)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(cookie.is_none());
}

#[tokio::test]
async fn sessions_expire() {
    let hub = HubProcess::builder()
        .env("BANHUB_AUTH__SESSION__IDLE_TIMEOUT_SECS", "2")
        .env("BANHUB_AUTH__SESSION__ABSOLUTE_TIMEOUT_SECS", "2")
        .start()
        .expect("hub");
    let (status, _, cookie) = login(&hub, "admin", &initial_password(&hub)).await;
    assert_eq!(status, StatusCode::OK);
    let cookie = cookie.expect("cookie");
    let client = hub.anonymous_client().expect("client");
    let (status, _) = status_of(client.get(hub.url("/api/servers")).header(COOKIE, &cookie)).await;
    assert_eq!(status, StatusCode::OK, "fresh session works");
    wait_for_async(Duration::from_secs(20), "the session to expire", || {
        let request = client.get(hub.url("/api/servers")).header(COOKIE, &cookie);
        async move {
            let (status, body) = status_of(request).await;
            (status == StatusCode::UNAUTHORIZED).then_some(body)
        }
    })
    .await
    .expect("expired");
}

#[tokio::test]
async fn each_role_gets_its_calls_and_no_others() {
    let hub = HubProcess::start().expect("hub");
    let viewer = hub.client_as("viewer").await.expect("viewer token");
    let operator = hub.client_as("operator").await.expect("operator token");
    let admin = hub.client_as("admin").await.expect("admin token");

    // Reads: everyone.
    for client in [&viewer, &operator, &admin] {
        let (status, body) = status_of(client.get(hub.url("/api/servers"))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = status_of(client.get(hub.url("/api/events/bans"))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // Server add: admin only.
    for client in [&viewer, &operator] {
        let (status, body) = status_of(
            client
                .post(hub.url("/api/servers"))
                .json(&json!({ "name": "nope" })),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["code"], "forbidden");
    }
    let (status, server) = status_of(
        admin
            .post(hub.url("/api/servers"))
            .json(&json!({ "name": "web-1" })),
    )
    .await;
    assert!(status.is_success(), "{status} {server}");
    let id = server["server"]["id"].as_str().expect("id").to_owned();
    // Ban: operator and admin pass the role check (the agent is offline: 503), the viewer does not.
    let (status, body) = status_of(
        viewer
            .post(hub.url("/api/jails/sshd/ban/192.0.2.7"))
            .header("X-BanDaemon-Server", &id),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    for client in [&operator, &admin] {
        let (status, body) = status_of(
            client
                .post(hub.url("/api/jails/sshd/ban/192.0.2.7"))
                .header("X-BanDaemon-Server", &id),
        )
        .await;
        assert_ne!(status, StatusCode::FORBIDDEN, "{body}");
        assert_ne!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    // Settings, tokens, audit, server delete: admin only.
    for path in ["/api/settings", "/api/tokens", "/api/audit"] {
        for client in [&viewer, &operator] {
            let (status, body) = status_of(client.get(hub.url(path))).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        }
        let (status, body) = status_of(admin.get(hub.url(path))).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let (status, _) = status_of(operator.delete(hub.url(&format!("/api/servers/{id}")))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = status_of(viewer.get(hub.url(&format!("/api/servers/{id}")))).await;
    assert_eq!(status, StatusCode::OK, "refused delete kept the server");
    let (status, body) = status_of(admin.delete(hub.url(&format!("/api/servers/{id}")))).await;
    assert!(status.is_success(), "{status} {body}");
}

#[tokio::test]
async fn revoked_tokens_stop_working() {
    let hub = HubProcess::start().expect("hub");
    let token = hub.token("viewer").await.expect("token");
    let client = banhub_tests::hub::bearer_client(&token).expect("client");
    let (status, _) = status_of(client.get(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::OK);
    let (_, tokens) = status_of(hub.client().get(hub.url("/api/tokens"))).await;
    let listed = tokens.as_array().expect("list");
    assert_eq!(listed.len(), 1, "{tokens}");
    assert!(
        !tokens.to_string().contains(&token),
        "the secret is never shown again"
    );
    let id = listed[0]["id"].as_str().expect("id");
    let (status, body) =
        status_of(hub.client().delete(hub.url(&format!("/api/tokens/{id}")))).await;
    assert!(status.is_success(), "{status} {body}");
    let (status, _) = status_of(client.get(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
