//! The fleet jail view end to end on three real hosts: one row per jail with the servers that run
//! it and the banned and failing counts, in sum and per server, filtered by label; a jail disabled
//! on two servers at once stops there and keeps running on the third (as `fail2ban-client status`
//! says); bad input is refused at its field.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// The row of `jail` in a view.
fn row<'a>(view: &'a Value, jail: &str) -> &'a Value {
    view["jails"]
        .as_array()
        .and_then(|jails| jails.iter().find(|j| j["name"] == jail))
        .unwrap_or_else(|| panic!("no jail {jail} in {view}"))
}

/// `jail`'s entry for server `name`.
fn on<'a>(row: &'a Value, name: &str) -> &'a Value {
    row["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["serverName"] == name))
        .unwrap_or_else(|| panic!("no server {name} in {row}"))
}

fn running_jails(fleet: &TestFleet, name: &str) -> String {
    fleet
        .host_named(name)
        .sandbox
        .client(&["status"])
        .expect("fail2ban answers")
}

#[tokio::test]
async fn the_fleet_jail_view_counts_and_switches_jails_across_servers() {
    let fleet = TestFleet::start(&["fj-0", "fj-1", "fj-2"])
        .await
        .expect("fleet");
    for (host, env) in [("fj-0", "prod"), ("fj-1", "prod"), ("fj-2", "staging")] {
        let id = &fleet.host_named(host).id;
        let (status, body) = fleet
            .api()
            .put(
                &format!("/api/servers/{id}/labels"),
                &json!({"labels": {"env": env}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // One address banned on fj-0, one failing (once, below maxretry) on fj-1.
    let fj0 = fleet.api().for_server(&fleet.host_named("fj-0").id);
    fj0.ban("testauth", "192.0.2.40").await.expect("ban");
    let fj1 = &fleet.host_named("fj-1").sandbox;
    fj1.append_failures(&fj1.log_path("testauth"), "198.51.100.5", 1)
        .expect("a failure in the log");

    let api = fleet.api();
    let view = wait_for_async(DEADLINE, "the failure to be counted", || async {
        let (status, view) = api.get("/api/fleet/jails").await;
        assert_eq!(status, StatusCode::OK, "{view}");
        (row(&view, "testauth")["failingNow"] == 1).then_some(view)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let testauth = row(&view, "testauth");
    assert_eq!(testauth["runningOn"], 3, "{testauth}");
    assert_eq!(testauth["enabledOn"], 3, "{testauth}");
    assert_eq!(testauth["bannedNow"], 1, "{testauth}");
    assert_eq!(on(testauth, "fj-0")["currentlyBanned"], 1, "{testauth}");
    assert_eq!(on(testauth, "fj-1")["currentlyBanned"], 0, "{testauth}");
    assert_eq!(on(testauth, "fj-1")["currentlyFailed"], 1, "{testauth}");
    assert_eq!(row(&view, "dummyjail")["runningOn"], 3, "{view}");
    assert!(
        !view["jails"]
            .as_array()
            .expect("jails")
            .iter()
            .any(|j| j["name"].as_str().is_some_and(|n| n.starts_with("banhub-"))),
        "banhub's own jails are left out: {view}"
    );
    let servers = view["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 3, "{view}");
    assert!(
        servers
            .iter()
            .all(|s| s["status"] == "online" && s["answeredAt"].is_string()),
        "{view}"
    );

    // Filtered by label: the two prod servers only.
    let (status, prod) = api.get("/api/fleet/jails?labels=env%3Dprod").await;
    assert_eq!(status, StatusCode::OK, "{prod}");
    assert_eq!(prod["servers"].as_array().map(Vec::len), Some(2), "{prod}");
    assert_eq!(row(&prod, "testauth")["runningOn"], 2, "{prod}");

    // Bad input changes nothing.
    let (status, problem) = api.get("/api/fleet/jails?labels=env").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "labels", "{problem}");
    let ids: Vec<&str> = ["fj-0", "fj-1"]
        .iter()
        .map(|n| fleet.host_named(n).id.as_str())
        .collect();
    for (path, body, field) in [
        (
            "/api/fleet/jails/banhub-probe/enabled",
            json!({"enabled": false, "servers": ids}),
            "jail",
        ),
        (
            "/api/fleet/jails/dummyjail/enabled",
            json!({"enabled": false, "servers": []}),
            "servers",
        ),
    ] {
        let (status, problem) = api.post(path, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    assert!(running_jails(&fleet, "fj-0").contains("dummyjail"));

    // Disabled on the two prod servers at once; the third keeps it.
    let (status, switched) = api
        .post(
            "/api/fleet/jails/dummyjail/enabled",
            &json!({"enabled": false, "servers": ids}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{switched}");
    let results = switched["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{switched}");
    assert!(results.iter().all(|r| r["ok"] == true), "{switched}");
    assert!(!running_jails(&fleet, "fj-0").contains("dummyjail"));
    assert!(!running_jails(&fleet, "fj-1").contains("dummyjail"));
    assert!(running_jails(&fleet, "fj-2").contains("dummyjail"));

    // The view asks the switched servers again at once.
    let (_, view) = api.get("/api/fleet/jails").await;
    let dummy = row(&view, "dummyjail");
    assert_eq!(dummy["runningOn"], 1, "{dummy}");
    assert_eq!(dummy["enabledOn"], 1, "{dummy}");
    assert_eq!(on(dummy, "fj-0")["enabled"], false, "{dummy}");
    assert_eq!(on(dummy, "fj-2")["running"], true, "{dummy}");

    // Every switch is in the audit log.
    let (_, audit) = api.get("/api/audit?limit=50").await;
    assert!(
        audit["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["action"] == "POST /api/fleet/jails/{jail}/enabled" && e["status"] == 200),
        "{audit}"
    );
}
