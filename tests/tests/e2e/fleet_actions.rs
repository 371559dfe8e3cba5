//! Fleet-wide actions end to end against real agents and fail2ban servers: a ban over a label
//! selector with one result per server, an unban everywhere, a refused target, and commands for an
//! offline agent that wait in the queue until it comes back, or expire at their deadline.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::client::ServerStatus;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// A hub (sweeping its command queue every 200 ms) with one server per `(name, env)`, each an
/// agent beside its own fail2ban sandbox, online and labelled `env`.
async fn start(names: &[(&str, &str)]) -> TestFleet {
    let hub = TestFleet::hub_builder()
        .env("BANHUB_CLUSTER__SWEEP_INTERVAL_MS", "200")
        .start()
        .expect("hub starts");
    let mut fleet = TestFleet::on(hub);
    for (name, env) in names {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        let host = fleet
            .add_host(name, sandbox, &[])
            .await
            .unwrap_or_else(|e| panic!("{name} comes online: {e:#}"));
        let id = host.id.clone();
        // Labels are set afterwards, the way an operator regroups servers.
        let (status, labels) = fleet
            .api()
            .put(
                &format!("/api/servers/{id}/labels"),
                &json!({"labels": {"env": env}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{labels}");
        assert_eq!(labels["labels"]["env"], *env);
    }
    fleet
}

fn banned_in(sandbox: &Fail2banSandbox) -> String {
    sandbox
        .client(&["get", "testauth", "banned"])
        .expect("fail2ban answers")
}

/// The target of `action` for server `name`.
fn target<'a>(action: &'a Value, name: &str) -> &'a Value {
    action["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|t| t["serverName"] == name)
        .unwrap_or_else(|| panic!("no target {name} in {action}"))
}

#[tokio::test]
async fn a_fleet_ban_over_a_label_selector_reports_each_server() {
    let fleet = start(&[("web-0", "prod"), ("web-1", "prod"), ("db-0", "staging")]).await;

    let (status, action) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.20", "jail": "testauth", "labels": {"env": "prod"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{action}");
    assert_eq!(action["action"], "ban");
    assert_eq!(
        action["servers"].as_array().map(Vec::len),
        Some(2),
        "{action}"
    );
    for name in ["web-0", "web-1"] {
        let t = target(&action, name);
        assert_eq!(t["state"], "done", "{t}");
        assert_eq!(t["changed"], true, "{t}");
        assert_eq!(t["jails"], json!(["testauth"]), "{t}");
        assert!(
            banned_in(&fleet.host_named(name).sandbox).contains("192.0.2.20"),
            "{name}"
        );
    }
    assert!(!banned_in(&fleet.host_named("db-0").sandbox).contains("192.0.2.20"));
    assert_eq!(action["counts"], json!({"done": 2}));

    // The stored record says the same, and the listing counts it.
    let id = action["id"].as_str().expect("id");
    let (status, stored) = fleet.api().get(&format!("/api/fleet/actions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stored["servers"], action["servers"]);
    let (_, list) = fleet.api().get("/api/fleet/actions").await;
    assert_eq!(list[0]["id"], id, "{list}");
    assert_eq!(list[0]["counts"]["done"], 2);

    // Unban on every server: changed where it was banned, unchanged where it was not.
    let (status, unban) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.20", "unban": true, "all": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{unban}");
    assert_eq!(unban["counts"], json!({"done": 3}), "{unban}");
    assert_eq!(target(&unban, "web-0")["changed"], true);
    assert_eq!(target(&unban, "db-0")["changed"], false);
    for host in &fleet.hosts {
        assert!(
            !banned_in(&host.sandbox).contains("192.0.2.20"),
            "{}",
            host.name
        );
    }

    // A jail a host does not have: that server fails, with fail2ban's reason.
    let (status, refused) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.21", "jail": "nosuchjail", "all": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{refused}");
    assert_eq!(refused["counts"], json!({"failed": 3}), "{refused}");
    assert!(
        target(&refused, "web-0")["error"]
            .as_str()
            .is_some_and(|e| e.contains("nosuchjail")),
        "{refused}"
    );

    // Bad requests change nothing.
    let (_, before) = fleet.api().get("/api/fleet/actions").await;
    for (body, field) in [
        (
            json!({"ip": "not-an-ip", "jail": "testauth", "all": true}),
            "ip",
        ),
        (json!({"ip": "192.0.2.22", "all": true}), "jail"),
        (json!({"ip": "192.0.2.22", "jail": "testauth"}), "all"),
        (
            json!({"ip": "192.0.2.22", "jail": "testauth", "labels": {"env": "nowhere"}}),
            "labels",
        ),
        (
            json!({"ip": "192.0.2.22", "jail": "testauth", "all": true, "deadlineSecs": 0}),
            "deadlineSecs",
        ),
    ] {
        let (status, problem) = fleet.api().post("/api/fleet/bans", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["code"], "invalid_field", "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    let (_, after) = fleet.api().get("/api/fleet/actions").await;
    assert_eq!(before, after);
    for host in &fleet.hosts {
        assert!(!banned_in(&host.sandbox).contains("192.0.2.22"));
    }
    let (status, missing) = fleet
        .api()
        .get("/api/fleet/actions/0190a3c0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    let (status, _) = fleet
        .api()
        .put(
            &format!("/api/servers/{}/labels", fleet.host_named("web-0").id),
            &json!({"labels": {"bad key": "x"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, server) = fleet
        .api()
        .get(&format!("/api/servers/{}", fleet.host_named("web-0").id))
        .await;
    assert_eq!(server["labels"], json!({"env": "prod"}));
}

#[tokio::test]
async fn commands_for_an_offline_agent_wait_for_it_or_expire() {
    let mut fleet = start(&[("web-0", "prod"), ("web-1", "edge")]).await;
    {
        let host = fleet
            .hosts
            .iter_mut()
            .find(|h| h.name == "web-1")
            .expect("host");
        host.agent.stop().expect("agent stops");
    }
    fleet
        .wait_status(fleet.host_named("web-1"), ServerStatus::Offline)
        .await;

    let (status, queued) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.30", "jail": "testauth", "all": true, "deadlineSecs": 120}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{queued}");
    assert_eq!(target(&queued, "web-0")["state"], "done", "{queued}");
    assert_eq!(target(&queued, "web-1")["state"], "queued", "{queued}");
    assert!(!banned_in(&fleet.host_named("web-1").sandbox).contains("192.0.2.30"));

    // Another one for the offline server with a deadline of two seconds: it expires.
    let (status, expiring) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.31", "jail": "testauth", "labels": {"env": "edge"},
                    "deadlineSecs": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{expiring}");
    assert_eq!(target(&expiring, "web-1")["state"], "queued");
    let expiring_path = format!(
        "/api/fleet/actions/{}",
        expiring["id"].as_str().expect("id")
    );
    let expired = wait_for_async(DEADLINE, "the second action to expire", || async {
        let (_, action) = fleet.api().get(&expiring_path).await;
        (target(&action, "web-1")["state"] == "expired").then_some(action)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    assert_eq!(expired["counts"], json!({"expired": 1}));
    assert!(target(&expired, "web-1")["finishedAt"].is_string());

    // The agent comes back: the first action is delivered, the expired one is not.
    {
        let host = fleet
            .hosts
            .iter_mut()
            .find(|h| h.name == "web-1")
            .expect("host");
        host.agent.restart().expect("agent restarts");
    }
    let queued_path = format!("/api/fleet/actions/{}", queued["id"].as_str().expect("id"));
    let delivered = wait_for_async(DEADLINE, "the queued ban delivered", || async {
        let (_, action) = fleet.api().get(&queued_path).await;
        (target(&action, "web-1")["state"] == "done").then_some(action)
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}\n{}",
            fleet.hub.logs(),
            fleet.host_named("web-1").agent.logs()
        )
    });
    let t = target(&delivered, "web-1");
    assert_eq!(t["changed"], true, "{t}");
    assert!(t["deliveredAt"].is_string(), "{t}");
    assert_eq!(delivered["counts"], json!({"done": 2}));
    assert!(banned_in(&fleet.host_named("web-1").sandbox).contains("192.0.2.30"));
    assert!(!banned_in(&fleet.host_named("web-1").sandbox).contains("192.0.2.31"));
    let (_, still) = fleet.api().get(&expiring_path).await;
    assert_eq!(target(&still, "web-1")["state"], "expired");
}
