//! Profiles and drift end to end, with a real fail2ban host and its agent: a profile with two
//! versions and the diff between them; assigned by label, the host (without the files) is
//! `drifted` with each file's diff; once the files are on the host it is `in_sync`; a hand edit
//! of a profile's file, and then of `jail.local`, makes it `drifted` again with the diff and a
//! `config-drift` alert; a profile whose failregex fail2ban rejects is refused with fail2ban's
//! message; bad paths and a second profile for the same server are refused and store nothing.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::profiles::{create_web_profile, wait_drift, web_fleet};
use banhub_tests::wait::wait_for_async;
use banhub_tests::webhook::WebhookReceiver;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(45);

const JAIL_V1: &str = "[testauth]\nmaxretry = 4\n";
const JAIL_V2: &str = "[testauth]\nmaxretry = 5\nfindtime = 300\n";
const FILTER: &str = "[Definition]\nfailregex = ^\\s*Bad login for \\S+ from <HOST>$\n";

fn file<'a>(drift: &'a Value, path: &str) -> &'a Value {
    drift["files"]
        .as_array()
        .and_then(|files| files.iter().find(|f| f["path"] == path))
        .unwrap_or_else(|| panic!("no {path} in {drift}"))
}

/// Waits until `receiver` got a `config-drift` notice whose text mentions `mentions`.
async fn wait_alert(fleet: &TestFleet, receiver: &WebhookReceiver, mentions: &str) -> Value {
    wait_for_async(DEADLINE, "the drift alert", || async {
        receiver
            .received()
            .iter()
            .filter_map(|r| r.json().ok())
            .find(|body| {
                body["rule"]["id"] == "config-drift"
                    && body["notice"]
                        .as_str()
                        .is_some_and(|n| n.contains(mentions))
            })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()))
}

#[tokio::test]
async fn profiles_versions_drift_and_hand_edits() {
    let fleet = web_fleet(&["web-1"]).await;
    let api = fleet.api();
    let host = fleet.host(0);
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let (_, current) = api.get("/api/settings").await;
    let (status, saved) = api
        .post(
            "/api/settings",
            &json!({"version": current["version"], "alerts": {
                "webhooks": [{"name": "ops", "format": "json", "url": receiver.url("/ops")}]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{saved}");

    // A profile with two versions, each checked by the host's fail2ban before it is saved.
    let created = create_web_profile(&fleet, JAIL_V1, "first").await;
    assert_eq!(created["version"]["version"], 1, "{created}");
    assert_eq!(created["validation"]["checkedOn"], "web-1", "{created}");
    let (status, saved) = api
        .post(
            "/api/profiles/web/versions",
            &json!({"comment": "second", "files": [
                {"path": "jail.d/testauth.local", "content": JAIL_V2},
                {"path": "filter.d/extra.local", "content": FILTER}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    assert_eq!(saved["version"]["version"], 2, "{saved}");
    assert_eq!(saved["validation"]["checkedOn"], "web-1", "{saved}");

    let (status, versions) = api.get("/api/profiles/web/versions").await;
    assert_eq!(status, StatusCode::OK, "{versions}");
    let comments: Vec<&str> = versions
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["comment"].as_str())
        .collect();
    assert_eq!(comments, ["first", "second"], "{versions}");
    let (status, diff) = api.get("/api/profiles/web/diff?from=1&to=2").await;
    assert_eq!(status, StatusCode::OK, "{diff}");
    assert_eq!(
        diff["files"],
        json!([
            {"path": "jail.d/testauth.local", "change": "changed", "diff":
                "--- a/jail.d/testauth.local\n+++ b/jail.d/testauth.local\n@@ -1,2 +1,3 @@\n [testauth]\n-maxretry = 4\n+maxretry = 5\n+findtime = 300\n"},
            {"path": "filter.d/extra.local", "change": "added", "diff":
                format!("--- /dev/null\n+++ b/filter.d/extra.local\n@@ -0,0 +1,2 @@\n+[Definition]\n+{}\n", FILTER.lines().nth(1).unwrap_or_default())},
        ]),
        "{diff}"
    );

    // Assigned by label, the host lacks both files: drifted, each file's diff against nothing.
    let drift = wait_drift(&fleet, &host.id, "drifted", |d| {
        d["files"].as_array().is_some_and(|f| f.len() == 2)
    })
    .await;
    assert_eq!(drift["profile"], "web", "{drift}");
    assert_eq!(drift["version"], 2, "{drift}");
    assert_eq!(
        file(&drift, "jail.d/testauth.local")["kind"],
        "missing",
        "{drift}"
    );
    assert!(
        file(&drift, "filter.d/extra.local")["diff"]
            .as_str()
            .is_some_and(|d| d.contains("+++ /dev/null") && d.contains("-[Definition]")),
        "{drift}"
    );
    let (_, servers) = api.get("/api/servers").await;
    assert_eq!(servers[0]["drift"], "drifted", "{servers}");
    let (_, summary) = api.get("/api/drift").await;
    assert_eq!(summary["counts"]["drifted"], 1, "{summary}");
    wait_alert(
        &fleet,
        &receiver,
        "jail.d/testauth.local: missing on the host",
    )
    .await;

    // The files reach the host: the filter by hand, the jail override through banhub.
    let conf = host.sandbox.conf_dir();
    std::fs::write(conf.join("filter.d/extra.local"), FILTER).expect("filter");
    let (status, written) = api
        .for_server(&host.id)
        .post(
            "/api/jails/testauth/config",
            &json!({"jailOverride": {"content": JAIL_V2, "version": ""}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{written}");
    wait_drift(&fleet, &host.id, "in_sync", |d| d["files"] == json!([])).await;
    let (_, servers) = api.get("/api/servers").await;
    assert_eq!(servers[0]["drift"], "in_sync", "{servers}");

    // A hand edit of a profile's file: drifted, with the diff from the profile to the host.
    let jail_file = conf.join("jail.d/testauth.local");
    std::fs::write(&jail_file, JAIL_V2.replace("maxretry = 5", "maxretry = 50")).expect("edit");
    let drift = wait_drift(&fleet, &host.id, "drifted", |_| true).await;
    let edited = file(&drift, "jail.d/testauth.local");
    assert_eq!(edited["kind"], "different", "{drift}");
    assert!(
        edited["diff"]
            .as_str()
            .is_some_and(|d| d.contains("-maxretry = 5\n+maxretry = 50\n")),
        "{drift}"
    );
    wait_alert(
        &fleet,
        &receiver,
        "jail.d/testauth.local: differs from the profile",
    )
    .await;

    // Put back, then a hand edit of jail.local, which no profile holds.
    std::fs::write(&jail_file, JAIL_V2).expect("restore");
    wait_drift(&fleet, &host.id, "in_sync", |_| true).await;
    std::fs::write(conf.join("jail.local"), "[DEFAULT]\nbantime = 60\n").expect("jail.local");
    let drift = wait_drift(&fleet, &host.id, "drifted", |_| true).await;
    let local = file(&drift, "jail.local");
    assert_eq!(local["kind"], "changed_outside_profile", "{drift}");
    assert!(
        local["diff"]
            .as_str()
            .is_some_and(|d| d.contains("+bantime = 60\n")),
        "{drift}"
    );
    wait_alert(&fleet, &receiver, "jail.local: changed outside the profile").await;

    // A failregex fail2ban cannot compile: refused with fail2ban's message, nothing stored.
    let (status, refused) = api
        .post(
            "/api/profiles/web/versions",
            &json!({"files": [{"path": "filter.d/broken.local",
                               "content": "[Definition]\nfailregex = ^(unclosed <HOST>\n"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["code"], "config_invalid", "{refused}");
    assert!(
        refused["details"].as_array().is_some_and(|d| !d.is_empty()),
        "{refused}"
    );
    assert!(!conf.join("filter.d/broken.local").exists());
    let (_, profile) = api.get("/api/profiles/web").await;
    assert_eq!(profile["latestVersion"], 2, "{profile}");

    // Bad paths, and a second profile for the same server: refused, nothing stored.
    for bad in [
        "/etc/fail2ban/jail.local",
        "jail.d/../../../etc/passwd.local",
        "jail.local",
        "jail.d/zz-banhub.local",
        "action.d/banhub.local",
    ] {
        let (status, refused) = api
            .post(
                "/api/profiles",
                &json!({"name": "bad", "files": [{"path": bad, "content": "[x]\n"}]}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {refused}");
        assert_eq!(refused["field"], "files[0].path", "{bad}: {refused}");
    }
    let (status, refused) = api
        .post(
            "/api/profiles",
            &json!({"name": "other", "labels": {"role": "web"},
                    "files": [{"path": "jail.d/testauth.local", "content": JAIL_V1}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let (_, profiles) = api.get("/api/profiles").await;
    let names: Vec<&str> = profiles
        .as_array()
        .expect("profiles")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["web"], "{profiles}");
    let (status, _) = api.get("/api/profiles/bad").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
