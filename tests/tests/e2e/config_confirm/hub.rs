//! Config changes through the hub with real agents and fail2ban: a change confirmed after the
//! reload stays; one the hub cannot confirm (the hub is down from right after the reload) reverts
//! on the host by itself and the restarted hub records it; an agent killed with a change pending
//! reverts at its restart after the deadline; a revert on request; bad input and a CONFLICT change
//! nothing.

use std::time::Duration;

use banhub_tests::fleet::{TestFleet, TestHost};
use banhub_tests::hub::{bearer_client, send_json};
use banhub_tests::wait::{wait_for_async, wait_until};
use reqwest::StatusCode;
use serde_json::{Value, json};

const OVERRIDE: &str = "jail.d/testauth.local";

fn set(maxretry: u32, version: &str, window: u32) -> Value {
    json!({
        "files": [{
            "path": OVERRIDE,
            "content": format!("[testauth]\nmaxretry = {maxretry}\n"),
            "version": version,
        }],
        "confirmWithinSecs": window,
    })
}

pub(super) fn changes_path(host: &TestHost) -> String {
    format!("/api/servers/{}/config-changes", host.id)
}

fn maxretry(host: &TestHost) -> String {
    host.sandbox
        .client(&["get", "testauth", "maxretry"])
        .expect("get maxretry")
        .trim()
        .to_owned()
}

fn override_text(host: &TestHost) -> Option<String> {
    std::fs::read_to_string(host.sandbox.conf_dir().join(OVERRIDE)).ok()
}

/// The agent's own record of its latest change.
pub(super) fn agent_phase(host: &TestHost) -> String {
    let text = std::fs::read_to_string(host.state_dir().join("config-change.json"))
        .expect("the agent's change record");
    let record: Value = serde_json::from_str(&text).expect("json");
    record["phase"].as_str().unwrap_or_default().to_owned()
}

/// Polls the change until its state is `want`, and returns it.
pub(super) async fn wait_state(
    fleet: &TestFleet,
    path: &str,
    want: &str,
    within: Duration,
) -> Value {
    wait_for_async(within, &format!("the change to be {want}"), || async {
        let (status, body) = fleet.get(path, None).await;
        (status == StatusCode::OK && body["state"] == want).then_some(body)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()))
}

#[tokio::test]
async fn a_confirmed_change_stays_a_revert_on_request_restores_and_bad_input_changes_nothing() {
    let fleet = TestFleet::start(&["cc-hub"]).await.expect("fleet");
    let host = fleet.host(0);
    let path = changes_path(host);

    // Bad input: field-named 422s, and nothing reaches the host.
    for (body, field) in [
        (
            json!({"files": [{"path": "/etc/fail2ban/jail.local", "content": "[x]\n"}], "confirmWithinSecs": 10}),
            "files[0].path",
        ),
        (
            json!({"files": [{"path": "jail.d/../jail.local", "content": "[x]\n"}], "confirmWithinSecs": 10}),
            "files[0].path",
        ),
        (set(5, "absent", 5), "confirmWithinSecs"),
        (json!({"files": [], "confirmWithinSecs": 0}), "files"),
    ] {
        let (status, problem) = fleet.post(&path, None, &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["code"], "invalid_field", "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap_or_default()
                .starts_with(field),
            "{problem}"
        );
    }
    let (_, listed) = fleet.get(&path, None).await;
    assert_eq!(listed, json!([]));
    assert_eq!(override_text(host), None);

    // Applied, then confirmed by the hub once it hears from the agent after the reload.
    let (status, change) = fleet.post(&path, None, &set(7, "absent", 10)).await;
    assert_eq!(status, StatusCode::CREATED, "{change}\n{}", fleet.logs());
    assert_eq!(change["state"], "awaiting_confirm", "{change}");
    assert!(change["deadline"].is_string(), "{change}");
    assert_eq!(maxretry(host), "7");
    let change_path = format!("{path}/{}", change["id"].as_str().expect("id"));
    // A second change while this one is open is refused.
    let (status, problem) = fleet.post(&path, None, &set(8, "absent", 10)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "conflict", "{problem}");

    let confirmed = wait_state(&fleet, &change_path, "confirmed", Duration::from_secs(30)).await;
    assert_eq!(confirmed["applied"][0]["path"], OVERRIDE, "{confirmed}");
    // The agent holds it confirmed, so its deadline no longer reverts it.
    assert_eq!(agent_phase(host), "confirmed");
    assert_eq!(maxretry(host), "7");

    // A stale version: the agent answers CONFLICT, the file stays, the change is recorded failed.
    let (status, problem) = fleet.post(&path, None, &set(9, "absent", 0)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "config_conflict", "{problem}");
    assert_eq!(
        override_text(host).as_deref(),
        Some("[testauth]\nmaxretry = 7\n")
    );
    let (_, listed) = fleet.get(&path, None).await;
    assert_eq!(listed[0]["state"], "failed", "{listed}");

    // A revert on request puts the previous state back (the override did not exist).
    let (status, reverted) = fleet
        .post(&format!("{change_path}/revert"), None, &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{reverted}\n{}", fleet.logs());
    assert_eq!(reverted["state"], "reverted", "{reverted}");
    assert_eq!(override_text(host), None);
    assert_eq!(maxretry(host), "3");
    let (status, problem) = fleet
        .post(&format!("{change_path}/revert"), None, &json!({}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
}

#[tokio::test]
async fn a_change_the_hub_cannot_confirm_reverts_by_itself_and_the_restarted_hub_records_it() {
    let mut fleet = TestFleet::start(&["cc-cut"]).await.expect("fleet");
    let path = changes_path(fleet.host(0));
    let (status, change) = fleet.post(&path, None, &set(6, "absent", 10)).await;
    assert_eq!(status, StatusCode::CREATED, "{change}\n{}", fleet.logs());
    assert_eq!(change["state"], "awaiting_confirm", "{change}");
    // The hub goes away right after the reload, inside its hold: no confirmation can come.
    fleet.hub.kill().expect("kill the hub");
    let host = fleet.host(0);
    assert_eq!(maxretry(host), "6");

    wait_until(
        Duration::from_secs(40),
        "the host to revert by itself",
        || agent_phase(host) == "reverted",
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(override_text(host), None);
    assert_eq!(maxretry(host), "3");

    fleet.hub.restart().expect("restart the hub");
    let change_path = format!("{path}/{}", change["id"].as_str().expect("id"));
    // A new connection pool: the old one holds connections to the killed process.
    let client = bearer_client(fleet.hub.admin_token()).expect("client");
    let recorded = wait_for_async(
        Duration::from_secs(90),
        "the change recorded reverted",
        || async {
            let (status, body) = send_json(client.get(fleet.hub.url(&change_path))).await;
            (status == StatusCode::OK && body["state"] == "reverted").then_some(body)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert!(
        recorded["reason"]
            .as_str()
            .is_some_and(|r| r.contains("deadline")),
        "{recorded}"
    );
}

#[tokio::test]
async fn an_agent_killed_with_a_change_pending_reverts_at_its_restart_after_the_deadline() {
    let mut fleet = TestFleet::start(&["cc-agent"]).await.expect("fleet");
    let path = changes_path(fleet.host(0));
    let (status, change) = fleet.post(&path, None, &set(5, "absent", 10)).await;
    assert_eq!(status, StatusCode::CREATED, "{change}\n{}", fleet.logs());
    // The agent dies inside the hub's hold, before any confirmation.
    fleet.hosts[0].agent.kill().expect("kill the agent");
    let host = fleet.host(0);
    assert_eq!(agent_phase(host), "pending");
    let deadline =
        chrono::DateTime::parse_from_rfc3339(change["deadline"].as_str().expect("deadline"))
            .expect("deadline");
    wait_until(Duration::from_secs(30), "the deadline to pass", || {
        chrono::Utc::now() > deadline
    })
    .expect("time passes");
    // Nobody reverted it while the agent was down.
    assert_eq!(maxretry(host), "5");

    fleet.hosts[0].agent.restart().expect("restart the agent");
    let host = fleet.host(0);
    wait_until(
        Duration::from_secs(40),
        "the agent to revert at start",
        || override_text(host).is_none() && maxretry(host) == "3",
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let change_path = format!("{path}/{}", change["id"].as_str().expect("id"));
    wait_state(&fleet, &change_path, "reverted", Duration::from_secs(60)).await;
}
