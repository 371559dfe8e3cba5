//! OpenID Connect login end to end: a real hub process logs operators in through a real OpenID
//! provider (npm `oidc-provider`, started by `banhub_tests::oidc`), driven like a browser without
//! JavaScript: `/auth/login` → the provider's login and consent forms → `/auth/callback` → session.
//!
//! The provider's ID tokens carry only `sub`; name, e-mail and groups come from its userinfo
//! endpoint, so every role here was mapped from userinfo claims.

use std::time::Duration;

use banhub_tests::enrolled::EnrolledAgent;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::oidc::{Browser, CLIENT_ID, OidcProvider, SESSION_COOKIE};
use banhub_tests::wait::wait_until_async;
use reqwest::header::{ACCEPT, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

fn start() -> (OidcProvider, HubProcess) {
    let provider = OidcProvider::start().expect("the OpenID provider starts");
    let hub = HubProcess::builder()
        .oidc(&provider)
        .start()
        .expect("the hub starts");
    (provider, hub)
}

fn start_with(env: &[(&str, &str)]) -> (OidcProvider, HubProcess) {
    let provider = OidcProvider::start().expect("the OpenID provider starts");
    let mut builder = HubProcess::builder().oidc(&provider);
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    (provider, builder.start().expect("the hub starts"))
}

async fn json_of(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn login(hub: &HubProcess, provider: &OidcProvider, user: &str) -> Browser {
    match Browser::login(&hub.http_url(), user).await {
        Ok(logged_in) => logged_in.browser,
        Err(e) => panic!(
            "login of {user}: {e:#}\n--- hub ---\n{}\n--- provider ---\n{}",
            hub.logs(),
            provider.logs()
        ),
    }
}

/// The live sessions, as the bootstrap admin sees them (`GET /api/sessions`).
async fn sessions(hub: &HubProcess) -> Vec<Value> {
    let (status, body) = json_of(hub.client().get(hub.url("/api/sessions"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array().cloned().unwrap_or_default()
}

async fn server_names(hub: &HubProcess) -> Vec<String> {
    let (status, body) = json_of(hub.client().get(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body.as_array()
        .expect("a list")
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `Set-Cookie` values of a response that set `name`.
fn set_cookies(response: &reqwest::Response, name: &str) -> Vec<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
        .collect()
}

/// The payload of a JWT, unverified (the hub verified it; the test only reads what it carried).
fn jwt_claims(jwt: &str) -> Value {
    use base64::Engine as _;
    let payload = jwt.split('.').nth(1).expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn with_query(url: &Url, key: &str, value: &str) -> Url {
    let mut changed = url.clone();
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == key {
                value.to_owned()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    changed.query_pairs_mut().clear().extend_pairs(pairs);
    changed
}

fn query(url: &Url, key: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

#[tokio::test]
async fn viewer_operator_and_admin_log_in_and_get_their_roles() {
    let (provider, hub) = start();
    let origin = hub.http_url();
    // A server that exists but has no agent: an allowed ban reaches the fleet and finds it offline.
    let (status, created) = json_of(
        hub.client()
            .post(hub.url("/api/servers"))
            .json(&json!({ "name": "web-1" })),
    )
    .await;
    assert!(status.is_success(), "{status} {created}");
    let server = created["server"]["id"].as_str().expect("id").to_owned();

    let (status, anonymous) = json_of(
        hub.anonymous_client()
            .expect("client")
            .get(hub.url("/auth/status")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(anonymous["mode"], "oidc");
    assert_eq!(anonymous["authenticated"], false);

    let cases = [
        ("victor", "Victor Viewer", "viewer", vec!["viewer"]),
        (
            "olga",
            "Olga Operator",
            "operator",
            vec!["viewer", "operator"],
        ),
        (
            "alice",
            "Alice Admin",
            "admin",
            vec!["viewer", "operator", "admin"],
        ),
    ];
    for (user, name, role, roles) in &cases {
        let browser = login(&hub, &provider, user).await;
        let client = browser.client();
        let (status, me) = json_of(client.get(hub.url("/auth/user"))).await;
        assert_eq!(status, StatusCode::OK, "{user}: {me}");
        assert_eq!(me["subject"], *user);
        assert_eq!(me["name"], *name);
        assert_eq!(me["email"], format!("{user}@example.test"));
        assert_eq!(me["role"], *role);
        assert_eq!(me["roles"], json!(roles));
        let (_, status_doc) = json_of(client.get(hub.url("/auth/status"))).await;
        assert_eq!(status_doc["authenticated"], true, "{status_doc}");
        assert_eq!(status_doc["user"]["subject"], *user);

        // Reads: every role.
        for path in ["/api/servers", "/api/events/bans"] {
            let (status, body) = json_of(client.get(hub.url(path))).await;
            assert_eq!(status, StatusCode::OK, "{user} GET {path}: {body}");
        }
        // Ban: operator and admin pass the role check and reach the fleet, which answers that the
        // server's agent is offline; the viewer is refused before that.
        let (status, body) = json_of(
            client
                .post(hub.url("/api/jails/sshd/ban/192.0.2.7"))
                .header(ORIGIN, &origin)
                .header("X-BanDaemon-Server", &server),
        )
        .await;
        if *role == "viewer" {
            assert_eq!(status, StatusCode::FORBIDDEN, "{user} ban: {body}");
            assert_eq!(body["code"], "forbidden");
        } else {
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{user} ban: {body}"
            );
            assert_eq!(body["code"], "agent_offline");
        }
        // Jail management, settings and adding servers: admin only.
        let (status, body) = json_of(
            client
                .post(hub.url("/api/jails/manage"))
                .header(ORIGIN, &origin)
                .header("X-BanDaemon-Server", &server)
                .json(&json!({ "jails": [{ "name": "sshd", "enabled": true }] })),
        )
        .await;
        if *role == "admin" {
            assert_eq!(
                status,
                StatusCode::SERVICE_UNAVAILABLE,
                "{user} manage: {body}"
            );
            assert_eq!(body["code"], "agent_offline");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{user} manage: {body}");
        }
        let (status, body) = json_of(client.get(hub.url("/api/settings"))).await;
        let expected = if *role == "admin" {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(status, expected, "{user} GET /api/settings: {body}");
        let (status, body) = json_of(
            client
                .post(hub.url("/api/servers"))
                .header(ORIGIN, &origin)
                .json(&json!({ "name": format!("by-{user}") })),
        )
        .await;
        if *role == "admin" {
            assert_eq!(status, StatusCode::CREATED, "{user} add server: {body}");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "{user} add server: {body}");
        }
    }
    // Only the admin's server was added.
    assert_eq!(server_names(&hub).await, ["by-alice", "web-1"]);
    // Three OIDC sessions, stored with the roles mapped from the provider's groups.
    let mut stored: Vec<(String, String, String)> = sessions(&hub)
        .await
        .iter()
        .map(|s| {
            (
                s["subject"].as_str().unwrap_or_default().to_owned(),
                s["role"].as_str().unwrap_or_default().to_owned(),
                s["kind"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    stored.sort();
    let expected: Vec<(String, String, String)> = [
        ("alice", "admin"),
        ("olga", "operator"),
        ("victor", "viewer"),
    ]
    .iter()
    .map(|(s, r)| ((*s).to_owned(), (*r).to_owned(), "oidc".to_owned()))
    .collect();
    assert_eq!(stored, expected);
    // The logins and the refused changes are in the audit log, under the provider's subjects.
    let (status, audit) = json_of(hub.client().get(hub.url("/api/audit?limit=200"))).await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let entries = audit["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("audit page: {audit}"));
    for (user, ..) in &cases {
        assert!(
            entries
                .iter()
                .any(|e| e["actor"] == *user && e["action"] == "login" && e["outcome"] == "ok"),
            "no login of {user} in {audit}"
        );
    }
    assert!(
        entries.iter().any(|e| e["actor"] == "victor"
            && e["outcome"] == "denied"
            && e["action"].as_str().is_some_and(|a| a.contains("/ban/"))),
        "no refused ban of victor in {audit}"
    );
}

#[tokio::test]
async fn a_user_without_a_mapped_group_is_refused_and_gets_no_session() {
    let (provider, hub) = start();
    let browser = Browser::new().expect("browser");
    let authorize = browser
        .start_login(&hub.http_url(), None)
        .await
        .expect("login starts");
    let callback = browser
        .sign_in_at_provider(authorize, "nora")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    let response = browser.finish_login(callback).await.expect("callback");
    assert!(set_cookies(&response, SESSION_COOKIE).is_empty());
    let status = response.status();
    let body: Value = response.json().await.expect("a problem document");
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "no_role");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("nora") && detail.contains("groups") && detail.contains("role_map"),
        "the refusal says who and why: {detail}"
    );
    assert!(browser.cookie(&hub.http_url(), SESSION_COOKIE).is_none());
    let (status, _) = json_of(browser.client().get(hub.url("/auth/user"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(sessions(&hub).await.is_empty(), "no session was stored");
    let (_, audit) = json_of(hub.client().get(hub.url("/api/audit?limit=50"))).await;
    assert!(
        audit.to_string().contains("mapped to a banhub role"),
        "the refused login is audited: {audit}"
    );

    // A browser (asking for HTML) is sent to the login page, which shows the reason.
    let browser = Browser::new().expect("browser");
    let authorize = browser
        .start_login(&hub.http_url(), None)
        .await
        .expect("login starts");
    let callback = browser
        .sign_in_at_provider(authorize, "nora")
        .await
        .expect("at the provider");
    let response = browser
        .client()
        .get(callback)
        .header(ACCEPT, "text/html,application/xhtml+xml")
        .send()
        .await
        .expect("callback");
    assert_eq!(response.status(), StatusCode::FOUND);
    assert!(set_cookies(&response, SESSION_COOKIE).is_empty());
    let location = response.headers()[LOCATION].to_str().expect("ascii");
    let target = Url::parse(&format!("{}{location}", hub.http_url())).expect("URL");
    assert_eq!(target.path(), "/login");
    let error = query(&target, "error").expect("error");
    assert!(
        error.contains("nora") && error.contains("is mapped to a banhub role"),
        "{error}"
    );
    assert!(sessions(&hub).await.is_empty(), "no session was stored");
}

#[tokio::test]
async fn a_tampered_or_foreign_state_is_refused() {
    let (provider, hub) = start();
    let hub_url = hub.http_url();

    // The state in the callback changed: not this browser's login.
    let browser = Browser::new().expect("browser");
    let authorize = browser.start_login(&hub_url, None).await.expect("start");
    let callback = browser
        .sign_in_at_provider(authorize, "alice")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    let state = query(&callback, "state").expect("state");
    let tampered = with_query(&callback, "state", &format!("{state}x"));
    let response = browser.finish_login(tampered).await.expect("callback");
    assert!(set_cookies(&response, SESSION_COOKIE).is_empty());
    let (status, body) = (response.status(), response.json::<Value>().await);
    let body = body.expect("problem");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "login_state_invalid");

    // A callback with a genuine code and state, taken to another browser (login CSRF): refused.
    let victim = Browser::new().expect("browser");
    let attacker = Browser::new().expect("browser");
    let authorize = attacker.start_login(&hub_url, None).await.expect("start");
    let callback = attacker
        .sign_in_at_provider(authorize, "alice")
        .await
        .expect("at the provider");
    let response = victim
        .finish_login(callback.clone())
        .await
        .expect("callback");
    let status = response.status();
    let body: Value = response.json().await.expect("problem");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "login_state_invalid");
    assert!(victim.cookie(&hub_url, SESSION_COOKIE).is_none());

    // A callback without state at all.
    let response = attacker
        .finish_login(with_query(&callback, "state", ""))
        .await
        .expect("callback");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(sessions(&hub).await.is_empty(), "no session was stored");
}

#[tokio::test]
async fn a_tampered_or_replayed_nonce_is_refused() {
    let (provider, hub) = start();
    let hub_url = hub.http_url();
    // A genuine login first: its nonce is the one replayed below.
    let earlier = Browser::new().expect("browser");
    let authorize = earlier.start_login(&hub_url, None).await.expect("start");
    let old_nonce = query(&authorize, "nonce").expect("the hub sends a nonce");
    let callback = earlier
        .sign_in_at_provider(authorize, "alice")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    let response = earlier.finish_login(callback).await.expect("callback");
    assert_eq!(response.status(), StatusCode::FOUND);

    // Someone changes the nonce on its way to the provider (to a made-up one, or to the earlier
    // login's): the provider puts it into the ID token, and the hub compares it with the one it
    // stored for this login.
    for case in ["forged", "replayed"] {
        let browser = Browser::new().expect("browser");
        let authorize = browser.start_login(&hub_url, None).await.expect("start");
        let nonce = query(&authorize, "nonce").expect("the hub sends a nonce");
        assert_ne!(nonce, old_nonce, "every login has its own nonce");
        let changed = match case {
            "forged" => format!("{nonce}-forged"),
            _ => old_nonce.clone(),
        };
        let callback = browser
            .sign_in_at_provider(with_query(&authorize, "nonce", &changed), "alice")
            .await
            .unwrap_or_else(|e| panic!("{case}: {e:#}\n{}", provider.logs()));
        let response = browser.finish_login(callback).await.expect("callback");
        assert!(set_cookies(&response, SESSION_COOKIE).is_empty(), "{case}");
        let status = response.status();
        let body: Value = response.json().await.expect("problem");
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}: {body}");
        assert_eq!(body["code"], "login_failed", "{case}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.to_lowercase().contains("nonce")),
            "{case}: {body}"
        );
    }
    assert_eq!(sessions(&hub).await.len(), 1, "only the genuine login");
}

#[tokio::test]
async fn a_callback_naming_another_issuer_is_refused() {
    let (provider, hub) = start();
    let browser = Browser::new().expect("browser");
    let authorize = browser
        .start_login(&hub.http_url(), None)
        .await
        .expect("start");
    let callback = browser
        .sign_in_at_provider(authorize, "alice")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    // The provider says who answers (RFC 9207); an answer from another issuer is a mix-up.
    assert_eq!(query(&callback, "iss").as_deref(), Some(provider.issuer()));
    let mixed_up = with_query(&callback, "iss", "https://other-idp.example");
    let response = browser.finish_login(mixed_up).await.expect("callback");
    assert!(set_cookies(&response, SESSION_COOKIE).is_empty());
    let status = response.status();
    let body: Value = response.json().await.expect("problem");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "login_failed");
    assert!(sessions(&hub).await.is_empty(), "no session was stored");
}

#[tokio::test]
async fn a_replayed_callback_or_code_is_refused() {
    let (provider, hub) = start();
    let hub_url = hub.http_url();
    let browser = Browser::new().expect("browser");
    let authorize = browser.start_login(&hub_url, None).await.expect("start");
    let first = browser
        .sign_in_at_provider(authorize, "alice")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    let response = browser.finish_login(first.clone()).await.expect("callback");
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(sessions(&hub).await.len(), 1);

    // The same callback again: the login it belongs to is finished.
    let response = browser.finish_login(first.clone()).await.expect("callback");
    let status = response.status();
    let body: Value = response.json().await.expect("problem");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "login_state_invalid");

    // The used code inside a fresh, genuine login of this browser: the provider refuses to redeem
    // it twice (and its PKCE verifier belongs to the other login).
    let authorize = browser.start_login(&hub_url, None).await.expect("start");
    let second = browser
        .sign_in_at_provider(authorize, "alice")
        .await
        .expect("at the provider");
    let old_code = query(&first, "code").expect("code");
    let replay = with_query(&second, "code", &old_code);
    let response = browser.finish_login(replay).await.expect("callback");
    assert!(set_cookies(&response, SESSION_COOKIE).is_empty());
    let status = response.status();
    let body: Value = response.json().await.expect("problem");
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "login_failed");
    assert_eq!(sessions(&hub).await.len(), 1, "no second session");
}

#[tokio::test]
async fn a_cross_origin_post_with_a_valid_cookie_is_refused_and_changes_nothing() {
    let (provider, hub) = start();
    let browser = login(&hub, &provider, "alice").await;
    let client = browser.client();
    for origin in [
        Some("https://evil.example"),
        Some("http://127.0.0.1:1"),
        None,
    ] {
        let mut request = client
            .post(hub.url("/api/servers"))
            .json(&json!({ "name": "cross-origin" }));
        if let Some(origin) = origin {
            request = request.header(ORIGIN, origin);
        }
        let (status, body) = json_of(request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin:?}: {body}");
        assert_eq!(body["code"], "cross_origin");
    }
    // Logging someone out is a change too.
    let response = client
        .post(hub.url("/auth/logout"))
        .header(ORIGIN, "https://evil.example")
        .send()
        .await
        .expect("logout");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(server_names(&hub).await.is_empty(), "nothing was added");
    assert_eq!(sessions(&hub).await.len(), 1, "the session still lives");
    // The same request from the hub's own pages works.
    let (status, body) = json_of(
        client
            .post(hub.url("/api/servers"))
            .header(ORIGIN, hub.http_url())
            .json(&json!({ "name": "same-origin" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(server_names(&hub).await, ["same-origin"]);
}

#[tokio::test]
async fn logout_ends_the_session_here_and_at_the_provider() {
    let (provider, hub) = start();
    let hub_url = hub.http_url();
    let browser = login(&hub, &provider, "alice").await;
    let cookie = browser
        .cookie(&hub_url, SESSION_COOKIE)
        .expect("session cookie");
    let live = sessions(&hub).await;
    assert_eq!(live.len(), 1);
    let session_id = live[0]["id"].as_str().expect("id").to_owned();

    let response = browser
        .client()
        .get(hub.url("/auth/logout"))
        .send()
        .await
        .expect("logout");
    assert_eq!(response.status(), StatusCode::FOUND);
    let cleared = set_cookies(&response, SESSION_COOKIE);
    assert!(
        cleared.iter().any(|c| c.contains("Max-Age=0")),
        "the cookie is deleted: {cleared:?}"
    );
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .expect("Location")
        .to_owned();
    let end_session = Url::parse(&location).expect("absolute URL");
    assert_eq!(
        format!(
            "{}{}",
            end_session.origin().ascii_serialization(),
            end_session.path()
        ),
        format!("{}/session/end", provider.issuer()),
        "to the provider's end_session_endpoint"
    );
    assert_eq!(
        query(&end_session, "post_logout_redirect_uri").as_deref(),
        Some(format!("{hub_url}/").as_str())
    );
    assert_eq!(query(&end_session, "client_id").as_deref(), Some(CLIENT_ID));
    let hint = query(&end_session, "id_token_hint").expect("id_token_hint");
    let claims = jwt_claims(&hint);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["aud"], CLIENT_ID);
    assert_eq!(claims["iss"], provider.issuer());

    // Ended here: the old cookie no longer works, and the session is no longer live.
    let replay = hub.anonymous_client().expect("client");
    let (status, body) = json_of(
        replay
            .get(hub.url("/auth/user"))
            .header(COOKIE, format!("{SESSION_COOKIE}={cookie}")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _) = json_of(
        replay
            .get(hub.url("/api/servers"))
            .header(COOKIE, format!("{SESSION_COOKIE}={cookie}")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        sessions(&hub)
            .await
            .iter()
            .all(|s| s["id"] != session_id.as_str()),
        "the session is gone from the live sessions"
    );

    // Ended at the provider: it accepts the hint and the return address, and sends the browser
    // back to the hub.
    let back = browser
        .confirm_provider_logout(end_session)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    assert_eq!(back.as_str(), format!("{hub_url}/"));
    // The next login asks for the password again: the provider's session is over.
    let authorize = browser.start_login(&hub_url, None).await.expect("start");
    let mut url = authorize;
    let page = loop {
        let response = browser
            .client()
            .get(url.clone())
            .send()
            .await
            .expect("provider");
        if response.status().is_redirection() {
            let location = response.headers()[LOCATION]
                .to_str()
                .expect("ascii")
                .to_owned();
            url = url.join(&location).expect("URL");
            assert!(
                url.as_str().starts_with(provider.issuer()),
                "the provider sent the browser straight back ({url}): its session was not ended"
            );
            continue;
        }
        break response.text().await.expect("page");
    };
    assert!(page.contains("name=\"login\""), "a login form: {page}");
}

#[tokio::test]
async fn roles_come_from_userinfo_when_the_id_token_has_no_groups() {
    let (provider, hub) = start();
    let browser = login(&hub, &provider, "olga").await;
    let (_, me) = json_of(browser.client().get(hub.url("/auth/user"))).await;
    assert_eq!(me["role"], "operator", "{me}");
    assert_eq!(me["name"], "Olga Operator");
    // The ID token the hub kept (sent back as the logout's hint) has neither groups nor name:
    // the role and the name above came from the userinfo endpoint.
    let response = browser
        .client()
        .get(hub.url("/auth/logout"))
        .send()
        .await
        .expect("logout");
    let location = Url::parse(response.headers()[LOCATION].to_str().expect("ascii")).expect("URL");
    let claims = jwt_claims(&query(&location, "id_token_hint").expect("hint"));
    assert_eq!(claims["sub"], "olga");
    assert!(claims.get("groups").is_none(), "{claims}");
    assert!(claims.get("name").is_none(), "{claims}");
}

#[tokio::test]
async fn a_session_ends_at_its_absolute_lifetime() {
    let (provider, hub) = start_with(&[
        ("BANHUB_AUTH__SESSION__IDLE_TIMEOUT_SECS", "2"),
        ("BANHUB_AUTH__SESSION__ABSOLUTE_TIMEOUT_SECS", "2"),
    ]);
    let browser = login(&hub, &provider, "victor").await;
    let client = browser.client().clone();
    let (status, _) = json_of(client.get(hub.url("/api/servers"))).await;
    assert_eq!(status, StatusCode::OK, "a fresh session works");
    // Used all the time, it still ends.
    let url = hub.url("/api/servers");
    wait_until_async(DEADLINE, "the session to expire", || {
        let request = client.get(&url);
        async move { json_of(request).await.0 == StatusCode::UNAUTHORIZED }
    })
    .await
    .expect("expired");
    let (status, body) = json_of(client.get(hub.url("/auth/user"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn an_unused_session_ends_after_the_idle_timeout() {
    let (provider, hub) = start_with(&[
        ("BANHUB_AUTH__SESSION__IDLE_TIMEOUT_SECS", "2"),
        ("BANHUB_AUTH__SESSION__ABSOLUTE_TIMEOUT_SECS", "3600"),
    ]);
    let browser = login(&hub, &provider, "victor").await;
    assert_eq!(sessions(&hub).await.len(), 1);
    // Watched through the admin's list (which does not touch it), not by using it.
    wait_until_async(
        DEADLINE,
        "the idle session to leave the live sessions",
        || async { sessions(&hub).await.is_empty() },
    )
    .await
    .expect("idle session ended");
    let (status, body) = json_of(browser.client().get(hub.url("/auth/user"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["code"], "unauthenticated");
}

#[tokio::test]
async fn the_return_path_stays_on_the_hub() {
    let (provider, hub) = start();
    let hub_url = hub.http_url();
    let browser = Browser::new().expect("browser");
    let authorize = browser
        .start_login(&hub_url, Some("/servers?tab=all"))
        .await
        .expect("start");
    let callback = browser
        .sign_in_at_provider(authorize, "victor")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    let response = browser.finish_login(callback).await.expect("callback");
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(response.headers()[LOCATION], "/servers?tab=all");

    // Anything that leaves the hub is refused before the provider is involved.
    for foreign in [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "http:/evil.example",
    ] {
        let anonymous = Browser::new().expect("browser");
        let mut url = Url::parse(&format!("{hub_url}/auth/login")).expect("URL");
        url.query_pairs_mut().append_pair("return_to", foreign);
        let response = anonymous.client().get(url).send().await.expect("login");
        assert!(
            response.headers().get(LOCATION).is_none(),
            "{foreign}: redirected to {:?}",
            response.headers().get(LOCATION)
        );
        let status = response.status();
        let body: Value = response.json().await.expect("problem");
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{foreign}: {body}"
        );
        assert_eq!(body["code"], "invalid_field", "{foreign}: {body}");
    }
}

#[tokio::test]
async fn login_and_logout_work_under_a_base_path() {
    let (provider, hub) = start_with(&[("BANHUB_HTTP__BASE_PATH", "/banhub")]);
    let base = format!("{}/banhub", hub.http_url());
    let browser = Browser::new().expect("browser");
    let authorize = browser
        .start_login(&base, Some("/servers"))
        .await
        .expect("login starts under the base path");
    assert_eq!(
        query(&authorize, "redirect_uri").as_deref(),
        Some(format!("{base}/auth/callback").as_str())
    );
    let callback = browser
        .sign_in_at_provider(authorize, "alice")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    assert_eq!(callback.path(), "/banhub/auth/callback");
    let response = browser.finish_login(callback).await.expect("callback");
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    assert_eq!(
        status,
        StatusCode::FOUND,
        "{}",
        response.text().await.unwrap_or_default()
    );
    assert_eq!(location.as_deref(), Some("/banhub/servers"));
    let (status, me) = json_of(browser.client().get(format!("{base}/auth/user"))).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["role"], "admin");

    let response = browser
        .client()
        .get(format!("{base}/auth/logout"))
        .send()
        .await
        .expect("logout");
    assert_eq!(response.status(), StatusCode::FOUND);
    let end_session =
        Url::parse(response.headers()[LOCATION].to_str().expect("ascii")).expect("URL");
    assert_eq!(
        query(&end_session, "post_logout_redirect_uri").as_deref(),
        Some(format!("{base}/").as_str())
    );
    let back = browser
        .confirm_provider_logout(end_session)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", provider.logs()));
    assert_eq!(back.as_str(), format!("{base}/"));
    let (status, _) = json_of(browser.client().get(format!("{base}/auth/user"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_oidc_session_survives_a_hub_restart() {
    let (provider, mut hub) = start();
    let browser = login(&hub, &provider, "olga").await;
    let cookie = browser
        .cookie(&hub.http_url(), SESSION_COOKIE)
        .expect("session cookie");
    hub.restart().expect("the hub restarts");
    // The same cookie in a fresh client (the old one's pooled connection died with the hub).
    let (status, me) = json_of(
        hub.anonymous_client()
            .expect("client")
            .get(hub.url("/auth/user"))
            .header(COOKIE, format!("{SESSION_COOKIE}={cookie}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["subject"], "olga");
    assert_eq!(me["role"], "operator");
}

#[tokio::test]
async fn a_login_while_the_provider_is_down_is_a_clear_error() {
    let (mut provider, hub) = start();
    provider.stop().expect("the provider stops");
    let browser = Browser::new().expect("browser");
    let response = browser
        .client()
        .get(hub.url("/auth/login"))
        .send()
        .await
        .expect("login");
    assert!(response.headers().get(LOCATION).is_none());
    let status = response.status();
    let body: Value = response.json().await.expect("problem");
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["code"], "oidc_unavailable");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains(provider.issuer())),
        "names the provider: {body}"
    );
    assert!(browser.cookie(&hub.http_url(), "banhub_login").is_none());
}

#[tokio::test]
async fn a_login_after_the_provider_rotated_its_keys_works_at_once() {
    let (mut provider, hub) = start();
    // The hub discovers the provider and keeps its signing keys.
    login(&hub, &provider, "alice").await;
    // Back at the same address with a new signing key (and no memory of the earlier login).
    provider.restart().expect("the provider restarts");
    let browser = login(&hub, &provider, "olga").await;
    let (status, me) = json_of(browser.client().get(hub.url("/auth/user"))).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["subject"], "olga");
    assert!(
        hub.logs().contains("fetching the provider's keys again"),
        "the hub refetched the keys for the unknown one:\n{}",
        hub.logs()
    );
    assert_eq!(sessions(&hub).await.len(), 2);
}

#[tokio::test]
async fn an_operator_bans_on_a_real_fail2ban_and_a_viewer_cannot() {
    let (provider, hub) = start();
    let sandbox = Fail2banSandbox::start("web-1").expect("fail2ban sandbox");
    let enrolled = EnrolledAgent::register(&hub.client(), &hub.http_url(), "web-1", &sandbox, &[])
        .await
        .expect("agent enrolled");
    enrolled
        .wait_online(&hub.client(), &hub.http_url(), DEADLINE)
        .await
        .expect("agent online");
    let server = enrolled.server_id.clone();
    let banned = || {
        sandbox
            .client(&["get", "testauth", "banned"])
            .expect("fail2ban answers")
    };
    let ip = "192.0.2.50";
    let ban = |client: &reqwest::Client, action: &str| {
        client
            .post(hub.url(&format!("/api/jails/testauth/{action}/{ip}")))
            .header(ORIGIN, hub.http_url())
            .header("X-BanDaemon-Server", &server)
    };

    let viewer = login(&hub, &provider, "victor").await;
    let (status, body) = json_of(ban(viewer.client(), "ban")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "forbidden");
    assert!(!banned().contains(ip), "fail2ban was not touched");

    let operator = login(&hub, &provider, "olga").await;
    let (status, body) = json_of(ban(operator.client(), "ban")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(banned().contains(ip), "fail2ban: {}", banned());
    let (status, body) = json_of(ban(operator.client(), "unban")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!banned().contains(ip), "fail2ban: {}", banned());

    // Who did what, as the audit log has it: the operator's ban with its server, the viewer's
    // refused attempt with its path (a refused request never reaches the handler that resolves
    // the server header, so it carries no server id).
    let (_, audit) = json_of(hub.client().get(hub.url("/api/audit?limit=50"))).await;
    let entries = audit["entries"].as_array().expect("entries");
    let ban_path = format!("/api/jails/testauth/ban/{ip}");
    assert!(
        entries.iter().any(|e| e["actor"] == "olga"
            && e["outcome"] == "ok"
            && e["path"] == ban_path.as_str()
            && e["serverId"] == server.as_str()),
        "{audit}"
    );
    assert!(
        entries.iter().any(|e| e["actor"] == "victor"
            && e["outcome"] == "denied"
            && e["status"] == 403
            && e["path"] == ban_path.as_str()),
        "{audit}"
    );
}
