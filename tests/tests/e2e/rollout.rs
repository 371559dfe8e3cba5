//! Rollouts of a profile version end to end, on one fleet of three real fail2ban hosts with their
//! agents: a rollout (canary 1, then a batch of 2) confirmed on every host, which is then in sync
//! with its profile; a version one host's fail2ban cannot load (its filter is missing there),
//! whose rollout stops at that host, rolls back the host confirmed before it, never touches the
//! last one, and leaves every host's files byte for byte as they were; and a hub killed while the
//! canary is watched, whose rollout is resumed after the restart and ends with every host
//! confirmed.

use std::path::Path;
use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::enrolled::wait_server_online;
use banhub_tests::fleet::snapshot;
use banhub_tests::profiles::{create_web_profile, wait_drift, web_fleet};
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);
const NAMES: [&str; 3] = ["ro-a", "ro-b", "ro-c"];

const JAIL_V1: &str = "[testauth]\nenabled = true\nmaxretry = 4\n";
/// Needs the filter `rollout-app`, which the test puts on some hosts only.
const JAIL_V2: &str = "[testauth]\nenabled = true\nmaxretry = 4\nfilter = rollout-app\n";
const JAIL_V3: &str = "[testauth]\nenabled = true\nmaxretry = 6\n";

/// Waits until rollout `id` is no longer running; returns it.
async fn wait_finished(fleet: &TestFleet, id: &str) -> Value {
    let api = fleet.api();
    let path = format!("/api/rollouts/{id}");
    wait_for_async(DEADLINE, "the rollout to end", || {
        let (api, path) = (api.clone(), path.clone());
        async move {
            let (status, rollout) = api.get(&path).await;
            (status == StatusCode::OK && rollout["state"] != "running").then_some(rollout)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()))
}

/// Starts a rollout; returns its id.
async fn start(fleet: &TestFleet, body: Value) -> String {
    let (status, started) = fleet.api().post("/api/rollouts", &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["state"], "running", "{started}");
    started["id"].as_str().expect("id").to_owned()
}

async fn save_version(fleet: &TestFleet, content: &str) -> i64 {
    let (status, saved) = fleet
        .api()
        .post(
            "/api/profiles/web/versions",
            &json!({"files": [{"path": "jail.d/testauth.local", "content": content}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    saved["version"]["version"].as_i64().expect("version")
}

fn states(rollout: &Value) -> Vec<(String, String)> {
    rollout["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            (
                h["serverName"].as_str().unwrap_or_default().to_owned(),
                h["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn expect_states(rollout: &Value, expected: [&str; 3]) {
    let want: Vec<(String, String)> = NAMES
        .iter()
        .zip(expected)
        .map(|(n, s)| ((*n).to_owned(), s.to_owned()))
        .collect();
    assert_eq!(states(rollout), want, "{rollout}");
}

fn override_text(conf: &Path) -> String {
    std::fs::read_to_string(conf.join("jail.d/testauth.local")).unwrap_or_default()
}

/// Waits until every host's drift is `in_sync`.
async fn wait_in_sync(fleet: &TestFleet) {
    for host in &fleet.hosts {
        wait_drift(fleet, &host.id, "in_sync", |_| true).await;
    }
}

#[tokio::test]
async fn rollouts_confirm_roll_back_and_resume_after_a_hub_restart() {
    let mut fleet = web_fleet(&NAMES).await;
    let api = fleet.api();
    create_web_profile(&fleet, JAIL_V1, "").await;

    // Bad requests are refused and start nothing.
    for (body, want) in [
        (
            json!({"profile": "web", "version": 1, "canary": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"profile": "web", "version": 1, "watchSecs": 120, "confirmSecs": 60}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"profile": "web", "version": 9}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"profile": "nope", "version": 1}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"profile": "web", "version": 1, "servers": ["no-such-host"]}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"profile": "web", "version": 1, "batchSize": 101}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (status, refused) = api.post("/api/rollouts", &body).await;
        assert_eq!(status, want, "{body}: {refused}");
    }
    let (_, listed) = api.get("/api/rollouts").await;
    assert_eq!(listed["items"], json!([]), "{listed}");

    // (a) Canary first, then a batch of two: every host confirmed, and in sync afterwards.
    let id = start(
        &fleet,
        json!({"profile": "web", "version": 1, "canary": 1, "batchSize": 2,
               "watchSecs": 1, "confirmSecs": 30}),
    )
    .await;
    let (status, conflict) = api
        .post("/api/rollouts", &json!({"profile": "web", "version": 1}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    let done = wait_finished(&fleet, &id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    expect_states(&done, ["confirmed", "confirmed", "confirmed"]);
    let batches: Vec<i64> = done["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["batch"].as_i64())
        .collect();
    assert_eq!(batches, [0, 1, 1], "{done}");
    for host in done["hosts"].as_array().expect("hosts") {
        let checks = host["checks"].as_array().expect("checks");
        assert_eq!(checks.len(), 4, "{host}");
        assert!(checks.iter().all(|c| c["ok"] == true), "{host}");
        let change = host["changeId"].as_str().expect("a change id");
        let (_, recorded) = api
            .get(&format!(
                "/api/servers/{}/config-changes/{change}",
                host["serverId"].as_str().unwrap_or_default()
            ))
            .await;
        assert_eq!(recorded["state"], "confirmed", "{recorded}");
    }
    for host in &fleet.hosts {
        assert_eq!(
            override_text(&host.sandbox.conf_dir()),
            JAIL_V1,
            "{}",
            host.name
        );
    }
    wait_in_sync(&fleet).await;

    // (b) A version the middle host's fail2ban cannot load: its filter is missing there.
    let filter = std::fs::read(
        fleet
            .host(0)
            .sandbox
            .conf_dir()
            .join("filter.d/testauth.conf"),
    )
    .expect("testauth filter");
    for host in &fleet.hosts {
        std::fs::write(
            host.sandbox.conf_dir().join("filter.d/rollout-app.conf"),
            &filter,
        )
        .expect("filter");
    }
    let v2 = save_version(&fleet, JAIL_V2).await;
    std::fs::remove_file(
        fleet
            .host(1)
            .sandbox
            .conf_dir()
            .join("filter.d/rollout-app.conf"),
    )
    .expect("remove the filter");
    let before: Vec<_> = fleet
        .hosts
        .iter()
        .map(|h| snapshot(&h.sandbox.conf_dir()))
        .collect();
    let untouched = &fleet.host(2).id;
    let (_, changes_before) = api
        .get(&format!("/api/servers/{untouched}/config-changes"))
        .await;
    let id = start(
        &fleet,
        json!({"profile": "web", "version": v2, "canary": 1, "batchSize": 1,
               "watchSecs": 1, "confirmSecs": 30}),
    )
    .await;
    let done = wait_finished(&fleet, &id).await;
    assert_eq!(done["state"], "rolledBack", "{done}");
    expect_states(&done, ["rolledBack", "failed", "skipped"]);
    assert!(
        done["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("ro-b:")),
        "{done}"
    );
    assert!(done["hosts"][1]["error"].as_str().is_some(), "{done}");
    assert!(done["hosts"][2]["changeId"].is_null(), "{done}");
    for (host, before) in fleet.hosts.iter().zip(&before) {
        assert_eq!(
            &snapshot(&host.sandbox.conf_dir()),
            before,
            "{}'s files changed",
            host.name
        );
    }
    let (_, changes_after) = api
        .get(&format!("/api/servers/{untouched}/config-changes"))
        .await;
    assert_eq!(changes_after, changes_before, "the last host was touched");
    let (_, audit) = api.get("/api/audit?limit=20").await;
    assert!(
        audit["entries"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["action"] == "rollout rollback" && e["detail"]["rollout"] == id.as_str())),
        "{audit}"
    );

    // (c) The hub is killed while the canary is watched; after the restart the rollout resumes.
    let v3 = save_version(&fleet, JAIL_V3).await;
    let id = start(
        &fleet,
        json!({"profile": "web", "version": v3, "canary": 1, "batchSize": 2,
               "watchSecs": 15, "confirmSecs": 90}),
    )
    .await;
    let path = format!("/api/rollouts/{id}");
    let watched = wait_for_async(DEADLINE, "the canary watched", || {
        let (api, path) = (api.clone(), path.clone());
        async move {
            let (_, rollout) = api.get(&path).await;
            (rollout["hosts"][0]["state"] == "watching").then_some(rollout)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    expect_states(&watched, ["watching", "pending", "pending"]);
    let canary_change = watched["hosts"][0]["changeId"].clone();
    assert!(canary_change.is_string(), "{watched}");
    fleet.hub.kill().expect("kill the hub");
    fleet.hub.restart().expect("restart the hub");
    // The first requests may meet a connection to the killed hub; wait until the agents are back.
    for host in &fleet.hosts {
        wait_server_online(&fleet.hub.client(), &fleet.hub.url(""), &host.id, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", host.name, fleet.logs()));
    }
    let api = fleet.api();
    let (_, resumed) = api.get(&path).await;
    assert_eq!(resumed["state"], "running", "{resumed}");
    // Resumed, not started again: the canary keeps the change it had before the kill.
    assert_eq!(resumed["hosts"][0]["changeId"], canary_change, "{resumed}");
    let done = wait_finished(&fleet, &id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    expect_states(&done, ["confirmed", "confirmed", "confirmed"]);
    assert_eq!(done["hosts"][0]["changeId"], canary_change, "{done}");
    for host in &fleet.hosts {
        assert_eq!(
            override_text(&host.sandbox.conf_dir()),
            JAIL_V3,
            "{}",
            host.name
        );
    }
    let (_, listed) = api.get("/api/rollouts?limit=2").await;
    let listed_ids: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(listed_ids.first(), Some(&id.as_str()), "{listed}");
    assert_eq!(listed_ids.len(), 2, "{listed}");
    assert!(listed["items"][0].get("hosts").is_none(), "{listed}");

    // Stopping a rollout that ended is refused.
    let (status, refused) = api.post(&format!("{path}/stop"), &json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
}
