//! Upgrades keep data: `tests/fixtures/schema-m0017.db`, a small database written by the release
//! whose last migration is `m0017_defence`, opened by this build's hub (which runs every later
//! migration over it) still holds its servers, events, callback secret, settings, sharing policy
//! and API tokens. `refresh_the_fixture` writes the file again (see `tests/fixtures/README.md`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use banhub_tests::HubProcess;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The release whose schema the fixture holds.
const FIXTURE_SCHEMA: &str = "m0017_defence";
const SERVERS: [&str; 2] = ["edge-1", "edge-2"];
/// Bans reported by each server: `198.51.100.1` and up.
const BANS: usize = 6;
const CALLBACK_SECRET: &str = "fixture-callback-secret-0123456789-abcdefghijklmnop";
const TOKENS: [(&str, &str); 2] = [("ci reader", "viewer"), ("deploy bot", "operator")];
const POLICY: &str = "ssh everywhere";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("fixtures/schema-{}.db", &FIXTURE_SCHEMA[..5]))
}

fn settings() -> Value {
    json!({
        "alerts": {"recipients": ["ops@example.test"], "digestWindowSecs": 30},
        "events": {"retentionDays": 0},
        "fail2ban": {"defaults": {"maxretry": 4, "ignoreip": ["127.0.0.1/8"]}}
    })
}

fn ban_ip(i: usize) -> String {
    format!("198.51.100.{}", i + 1)
}

async fn call(
    hub: &HubProcess,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = hub.client().request(method, hub.url(path));
    if let Some(body) = body {
        request = request.json(&body);
    }
    banhub_tests::hub::send_json(request).await
}

/// fail2ban's action on a host without an agent, reporting a ban straight to the hub.
async fn direct_ban(hub: &HubProcess, server: &str, ip: &str) -> StatusCode {
    hub.anonymous_client()
        .expect("client")
        .post(hub.url("/api/ban"))
        .header("X-Callback-Secret", format!("{CALLBACK_SECRET}-{server}"))
        .json(
            &json!({"ip": ip, "jail": "sshd", "hostname": server, "failures": 3,
                      "logs": [format!("Failed password for root from {ip}")]}),
        )
        .send()
        .await
        .expect("callback")
        .status()
}

async fn ban_ips(hub: &HubProcess, server_id: &str) -> Vec<Value> {
    let (status, page) = call(
        hub,
        reqwest::Method::GET,
        &format!("/api/events/bans?serverId={server_id}&kind=ban&limit=1000"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_database_of_the_last_release_keeps_its_data_through_the_new_migrations() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = scratch.path().join("hub.db");
    std::fs::copy(fixture(), &db).expect("the fixture is in tests/fixtures");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let before = banhub::store::backup::applied_migrations(&url)
        .await
        .expect("the fixture opens");
    assert_eq!(
        before.last().map(String::as_str),
        Some(FIXTURE_SCHEMA),
        "{before:?}"
    );

    let hub = HubProcess::builder()
        .database_url(&url)
        .start()
        .expect("the hub starts on the fixture");
    let after = banhub::store::backup::applied_migrations(&url)
        .await
        .expect("migrated");
    assert_eq!(
        after,
        banhub::store::backup::migration_names(),
        "every migration ran"
    );

    let (status, servers) = call(&hub, reqwest::Method::GET, "/api/servers", None).await;
    assert_eq!(status, StatusCode::OK, "{servers}");
    let servers = servers.as_array().cloned().unwrap_or_default();
    let names: BTreeSet<&str> = servers.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, BTreeSet::from(SERVERS), "{servers:?}");
    for server in &servers {
        let id = server["id"].as_str().expect("id");
        let name = server["name"].as_str().expect("name");
        let events = ban_ips(&hub, id).await;
        let ips: BTreeSet<String> = events
            .iter()
            .filter_map(|e| e["ip"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(ips, (0..BANS).map(ban_ip).collect(), "{name}: {events:?}");
        for event in &events {
            assert_eq!(event["jail"], "sshd", "{event}");
            assert_eq!(event["hostname"], name, "{event}");
            assert_eq!(event["serverId"], id, "{event}");
        }
        // The callback secret survived: a new ban is accepted and stored.
        assert_eq!(direct_ban(&hub, name, "203.0.113.9").await, StatusCode::OK);
        banhub_tests::wait::wait_until_async(
            std::time::Duration::from_secs(30),
            "the new ban",
            || async { ban_ips(&hub, id).await.len() == BANS + 1 },
        )
        .await
        .expect("stored");
    }

    let (status, stored) = call(&hub, reqwest::Method::GET, "/api/settings", None).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(
        stored["alerts"]["recipients"],
        json!(["ops@example.test"]),
        "{stored}"
    );
    assert_eq!(stored["events"]["retentionDays"], 0, "{stored}");
    assert_eq!(stored["fail2ban"]["defaults"]["maxretry"], 4, "{stored}");

    let (status, policies) = call(&hub, reqwest::Method::GET, "/api/sharing/policies", None).await;
    assert_eq!(status, StatusCode::OK, "{policies}");
    let policies = policies.as_array().cloned().unwrap_or_default();
    assert!(
        policies
            .iter()
            .any(|p| p["name"] == POLICY && p["jails"] == json!(["sshd"])),
        "{policies:?}"
    );

    let (status, tokens) = call(&hub, reqwest::Method::GET, "/api/tokens", None).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let tokens = tokens.as_array().cloned().unwrap_or_default();
    for (name, role) in TOKENS {
        assert!(
            tokens
                .iter()
                .any(|t| t["name"] == name && t["role"] == role),
            "{name} ({role}) in {tokens:?}"
        );
    }
}

/// Writes `tests/fixtures/schema-m0017.db` again from a hub of this build; run it once at each
/// release, after changing `FIXTURE_SCHEMA` to the release's last migration:
/// `cargo nextest run -p banhub-tests --test e2e --run-ignored only -E 'test(/refresh_the_fixture/)'`.
#[tokio::test]
#[ignore = "writes tests/fixtures; run at a release (tests/fixtures/README.md)"]
async fn refresh_the_fixture() {
    let mut hub = HubProcess::start().expect("hub starts");
    for name in SERVERS {
        let (status, created) = call(
            &hub,
            reqwest::Method::POST,
            "/api/servers",
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let id = created["server"]["id"].as_str().expect("id").to_owned();
        let (status, secret) = call(
            &hub,
            reqwest::Method::POST,
            &format!("/api/servers/{id}/callback-secret"),
            Some(json!({"secret": format!("{CALLBACK_SECRET}-{name}")})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{secret}");
        for i in 0..BANS {
            assert_eq!(direct_ban(&hub, name, &ban_ip(i)).await, StatusCode::OK);
        }
    }
    let (_, current) = call(&hub, reqwest::Method::GET, "/api/settings", None).await;
    let mut doc = settings();
    doc["version"] = current["version"].clone();
    let (status, saved) = call(&hub, reqwest::Method::POST, "/api/settings", Some(doc)).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let (status, policy) = call(
        &hub,
        reqwest::Method::POST,
        "/api/sharing/policies",
        Some(
            json!({"name": POLICY, "sources": {"all": true}, "jails": ["sshd"],
                    "targets": {"all": true}, "duration": {"mode": "fixed", "seconds": 3600}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{policy}");
    for (name, role) in TOKENS {
        let (status, token) = call(
            &hub,
            reqwest::Method::POST,
            "/api/tokens",
            Some(json!({"name": name, "role": role})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{token}");
    }
    hub.stop().expect("hub stops");
    let url = format!("sqlite://{}", hub.data_dir().join("banhub.db").display());
    let applied = banhub::store::backup::applied_migrations(&url)
        .await
        .expect("applied");
    assert_eq!(
        applied.last().map(String::as_str),
        Some(FIXTURE_SCHEMA),
        "change FIXTURE_SCHEMA"
    );
    // The sqlite3 CLI, for its smallest page size: the same database in a fifth of the bytes.
    let target = fixture();
    let _ = std::fs::remove_file(&target);
    let output = std::process::Command::new("sqlite3")
        .arg(hub.data_dir().join("banhub.db"))
        .arg(format!(
            "PRAGMA page_size = 512; VACUUM INTO '{}'",
            target.display()
        ))
        .output()
        .expect("the sqlite3 CLI runs (apt-get install sqlite3)");
    assert!(output.status.success(), "{output:?}");
}
