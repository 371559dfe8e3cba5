//! The callback secret policy end to end, against a real hub: servers without an agent report
//! bans to `POST /api/ban` with their server's secret, issued and rotated through
//! `/api/servers/{id}/callback-secret` under `callbacks` in the settings — a chosen secret shorter
//! than the policy's minimum is refused, the previous secret works through the overlap and not
//! after it (or not at all when revoked at once), direct callbacks can be turned off, a revoked
//! secret is refused, only admins may change secrets, and every change is audited without the
//! secret.

use std::time::Duration;

use banhub_tests::hub::HubProcess;
use banhub_tests::hub::{api_get as get, api_post as post, send_json as send};
use banhub_tests::wait::wait_for_async;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// Saves `section` as `callbacks` of the settings.
async fn save_policy(hub: &HubProcess, section: Value) -> (StatusCode, Value) {
    let (_, mut doc) = get(hub, "/api/settings").await;
    doc["callbacks"] = section;
    post(hub, "/api/settings", doc).await
}

async fn create_server(hub: &HubProcess, name: &str) -> String {
    let (status, created) = post(hub, "/api/servers", json!({"name": name})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["server"]["id"].as_str().expect("id").to_owned()
}

/// fail2ban's action on a host without an agent reporting a ban.
async fn ban(hub: &HubProcess, secret: &str, ip: &str) -> (StatusCode, Value) {
    send(
        hub.anonymous_client()
            .expect("client")
            .post(hub.url("/api/ban"))
            .header("X-Callback-Secret", secret)
            .json(&json!({"ip": ip, "jail": "sshd", "hostname": "edge-1", "failures": 3})),
    )
    .await
}

async fn stored_bans(hub: &HubProcess, server: &str) -> Vec<String> {
    let (status, page) = get(
        hub,
        &format!("/api/events/bans?serverId={server}&kind=ban&limit=1000"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["ip"].as_str().expect("ip").to_owned())
        .collect()
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_secrets_rotate_with_an_overlap_under_the_policy() {
    let hub = HubProcess::start().expect("hub starts");
    scenario(&hub).await;
}

/// The same on PostgreSQL: the rotation's transaction and lookups in the other backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_secrets_rotate_with_an_overlap_on_postgresql() {
    let postgres = banhub_tests::PostgresServer::start()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_callback_secrets")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let hub = HubProcess::builder()
        .database_url(url)
        .start()
        .expect("hub starts");
    scenario(&hub).await;
}

async fn scenario(hub: &HubProcess) {
    let id = create_server(hub, "edge-1").await;
    let secret_path = format!("/api/servers/{id}/callback-secret");

    // No secret yet: nothing is accepted.
    let (status, state) = get(hub, &secret_path).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["set"], false, "{state}");
    assert_eq!(state["directEnabled"], true, "{state}");
    let (status, _) = ban(hub, "anything-at-all-anything-at-all-anything", "192.0.2.1").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The policy's own values are checked, naming the field; a refused edit changes nothing.
    let (_, before) = get(hub, "/api/settings").await;
    for (section, field) in [
        (json!({"minSecretLength": 8}), "callbacks.minSecretLength"),
        (
            json!({"rotationOverlapSecs": 2_592_001}),
            "callbacks.rotationOverlapSecs",
        ),
        (json!({"maxAgeDays": 0}), "callbacks.maxAgeDays"),
        (json!({"directEnabled": "yes"}), "callbacks.directEnabled"),
    ] {
        let (status, problem) = save_policy(hub, section.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{section}: {problem}"
        );
        assert_eq!(problem["field"], field, "{problem}");
    }
    assert_eq!(get(hub, "/api/settings").await.1, before);

    // Secrets chosen by hand are at least 40 characters; the previous one works for 3 seconds
    // after a rotation.
    let (status, saved) = save_policy(
        hub,
        json!({"minSecretLength": 40, "rotationOverlapSecs": 3, "maxAgeDays": 90}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(
        saved["callbacks"],
        json!({"directEnabled": true, "minSecretLength": 40, "rotationOverlapSecs": 3, "maxAgeDays": 90})
    );
    for (chosen, why) in [
        ("short-secret-of-27-chars-xx", "at least 40"),
        (
            "a secret with spaces in it that is long enough",
            "visible ASCII",
        ),
    ] {
        let (status, problem) = post(hub, &secret_path, json!({"secret": chosen})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], "secret", "{problem}");
        assert!(
            problem["detail"].as_str().is_some_and(|d| d.contains(why)),
            "{problem}"
        );
    }
    assert_eq!(get(hub, &secret_path).await.1["set"], false);

    // A generated secret: shown once, works.
    let (status, first) = post(hub, &secret_path, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}\n{}", hub.logs());
    let first_secret = first["secret"].as_str().expect("secret").to_owned();
    assert!(first_secret.len() >= 40, "{first}");
    assert_eq!(first["set"], true);
    assert!(
        first["previousValidUntil"].is_null(),
        "nothing to overlap: {first}"
    );
    assert_eq!(first["rotationDue"], false);
    let (status, accepted) = ban(hub, &first_secret, "192.0.2.1").await;
    assert_eq!(status, StatusCode::OK, "{accepted}");
    assert_eq!(accepted["serverId"], id.as_str());
    // Reading the state never shows it.
    let (_, state) = get(hub, &secret_path).await;
    assert!(!state.to_string().contains(&first_secret), "{state}");
    assert_eq!(state["set"], true);

    // Rotation: the new one works at once, the old one through the overlap...
    let rotated_at = Utc::now();
    let (status, second) = send(hub.client().post(hub.url(&secret_path))).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "an empty body rotates: {second}\n{}",
        hub.logs()
    );
    let second_secret = second["secret"].as_str().expect("secret").to_owned();
    assert_ne!(second_secret, first_secret);
    let until = time(&second["previousValidUntil"]);
    let overlap = until - rotated_at;
    assert!(
        overlap > chrono::Duration::milliseconds(2_000)
            && overlap < chrono::Duration::milliseconds(4_000),
        "{overlap:?}"
    );
    assert_eq!(
        ban(hub, &second_secret, "192.0.2.2").await.0,
        StatusCode::OK
    );
    let (status, during) = ban(hub, &first_secret, "192.0.2.3").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the previous secret during the overlap: {during}"
    );
    assert_eq!(during["serverId"], id.as_str());
    // ... and not after it.
    wait_for_async(DEADLINE, "the overlap to end", || async {
        get(hub, &secret_path).await.1["previousValidUntil"]
            .is_null()
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", hub.logs()));
    assert!(Utc::now() >= until);
    let (status, refused) = ban(hub, &first_secret, "192.0.2.4").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    assert_eq!(
        ban(hub, &second_secret, "192.0.2.5").await.0,
        StatusCode::OK
    );

    // A leaked secret: rotate to a chosen one and end the previous at once.
    let chosen = "chosen-by-the-operator-0123456789abcdefghij";
    let (status, third) = post(
        hub,
        &secret_path,
        json!({"secret": chosen, "revokePrevious": true}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{third}\n{}", hub.logs());
    assert_eq!(third["secret"], chosen);
    assert!(third["previousValidUntil"].is_null(), "{third}");
    assert_eq!(
        ban(hub, &second_secret, "192.0.2.6").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(ban(hub, chosen, "192.0.2.7").await.0, StatusCode::OK);
    // Another server cannot take a secret in use.
    let other = create_server(hub, "edge-2").await;
    let (status, problem) = post(
        hub,
        &format!("/api/servers/{other}/callback-secret"),
        json!({"secret": chosen}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "secret");
    assert_eq!(
        ban(hub, chosen, "192.0.2.8").await.1["serverId"],
        id.as_str()
    );

    // Direct callbacks off: refused whatever the secret, nothing stored; on again: accepted.
    let stored = stored_bans(hub, &id).await;
    let (status, saved) = save_policy(hub, json!({"directEnabled": false})).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let (status, problem) = ban(hub, chosen, "192.0.2.9").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    assert_eq!(problem["code"], "direct_callbacks_disabled");
    assert_eq!(get(hub, &secret_path).await.1["directEnabled"], false);
    assert_eq!(stored_bans(hub, &id).await, stored);
    save_policy(hub, json!({"directEnabled": true})).await;
    assert_eq!(ban(hub, chosen, "192.0.2.10").await.0, StatusCode::OK);

    // Only admins change secrets.
    let operator = hub.client_as("operator").await.expect("operator");
    let (status, _) = send(operator.post(hub.url(&secret_path)).json(&json!({}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(ban(hub, chosen, "192.0.2.11").await.0, StatusCode::OK);

    // Revoked: refused until a new one is issued.
    let (status, _) = send(hub.client().delete(hub.url(&secret_path))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        ban(hub, chosen, "192.0.2.12").await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(get(hub, &secret_path).await.1["set"], false);
    let (status, _) = get(
        hub,
        "/api/servers/0190aaaa-0000-7000-8000-000000000000/callback-secret",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Exactly the accepted callbacks were stored.
    let mut stored = stored_bans(hub, &id).await;
    stored.sort();
    let mut expected: Vec<String> = [1, 10, 11, 2, 3, 5, 7, 8]
        .iter()
        .map(|n| format!("192.0.2.{n}"))
        .collect();
    expected.sort();
    assert_eq!(stored, expected);

    // Every change is audited, against the server, without the secret.
    let (status, page) = get(hub, "/api/audit?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let entries = page["entries"].as_array().expect("entries");
    let rotations: Vec<&Value> = entries
        .iter()
        .filter(|e| e["action"] == "POST /api/servers/{id}/callback-secret")
        .collect();
    let ok = rotations.iter().filter(|e| e["outcome"] == "ok").count();
    assert_eq!(ok, 3, "{rotations:#?}");
    assert!(rotations.iter().any(|e| e["outcome"] == "denied"));
    assert!(
        rotations
            .iter()
            .filter(|e| e["outcome"] == "ok")
            .all(|e| e["serverId"] == id.as_str()),
        "{rotations:#?}"
    );
    assert!(entries.iter().any(
        |e| e["action"] == "DELETE /api/servers/{id}/callback-secret" && e["outcome"] == "ok"
    ));
    let audit_text = page.to_string();
    let logs = hub.logs();
    for secret in [first_secret.as_str(), second_secret.as_str(), chosen] {
        assert!(!audit_text.contains(secret), "a secret in the audit log");
        assert!(!logs.contains(secret), "a secret in the hub's log");
    }
}
