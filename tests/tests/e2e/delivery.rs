//! Delivery diagnostics, the end-to-end probe and a fail2ban restart through the whole event
//! path (fail2ban's action → the agent's relay → spool → session → the hub's store), with real
//! fail2ban, agent and hub.
//!
//! What a fail2ban restart must store, precisely: stopping fail2ban runs no `actionunban` for the
//! banhub action (its `actionflush` is a no-op) and starting it again re-bans the bans restored from
//! its database without running banhub's `actionban` (`norestored = 1`); so the action posts
//! nothing, and reconciliation, which then sees the same bans as before, adds no observed event. The
//! restart stores no event at all. A ban the action did not report (a jail without banhub) is
//! stored once, as observed, with fail2ban's ban time and duration.

use std::process::{Command, Stdio};
use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::agent::AgentProcess;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_for_async, wait_until, wait_until_async};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

async fn get(fleet: &TestFleet, path: &str) -> (StatusCode, Value) {
    let response = fleet
        .hub
        .client()
        .get(fleet.hub.url(path))
        .send()
        .await
        .expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post(fleet: &TestFleet, path: &str) -> (StatusCode, Value) {
    let response = fleet
        .hub
        .client()
        .post(fleet.hub.url(path))
        .send()
        .await
        .expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn delivery(fleet: &TestFleet) -> Value {
    let (status, body) = get(
        fleet,
        &format!("/api/servers/{}/delivery", fleet.hosts[0].id),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn probe(fleet: &TestFleet) -> Value {
    let (status, body) = post(fleet, &format!("/api/servers/{}/probe", fleet.hosts[0].id)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{body}\n{}",
        fleet.hosts[0].agent.logs()
    );
    body
}

/// Every event of the server matching `query`, newest first.
async fn events(fleet: &TestFleet, query: &str) -> Vec<Value> {
    let (status, page) = get(
        fleet,
        &format!(
            "/api/events/bans?serverId={}&limit=1000{query}",
            fleet.hosts[0].id
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["events"].as_array().cloned().unwrap_or_default()
}

/// Hub, a fail2ban sandbox with bans kept in its database, an enrolled agent, and the action
/// installed with `banhub-agent install-action`.
async fn start(name: &str) -> TestFleet {
    let hub = TestFleet::hub_builder()
        .env("BANHUB_PROBE__TIMEOUT_SECS", "10")
        .start()
        .expect("hub starts");
    let sandbox = Fail2banSandbox::builder()
        .name(name)
        .persistent_db(true)
        .start()
        .expect("fail2ban sandbox");
    let mut fleet = TestFleet::on(hub);
    fleet
        .add_host(
            name,
            sandbox,
            &[(
                "BANHUB_AGENT_LOG__FILTER",
                "info,banhub_agent::reconcile=debug",
            )],
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    fleet.hosts[0]
        .install_action()
        .unwrap_or_else(|e| panic!("{e:#}"));
    fleet
}

async fn ban_from_log(fleet: &TestFleet, jail: &str, ip: &str) -> Value {
    fleet.hosts[0]
        .sandbox
        .append_failures(&fleet.hosts[0].sandbox.log_path(jail), ip, 3)
        .expect("log lines");
    wait_for_async(DEADLINE, "the ban event at the hub", || async {
        events(fleet, &format!("&ip={ip}&kind=ban"))
            .await
            .into_iter()
            .next()
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}\n{}",
            fleet.hosts[0].agent.logs(),
            fleet.hosts[0].sandbox.logs()
        )
    })
}

#[tokio::test]
async fn delivery_status_shows_attachments_relay_spool_and_last_event() {
    let mut fleet = start("diag").await;
    ban_from_log(&fleet, "testauth", "203.0.113.61").await;

    // The hub acknowledges right after it commits; the spool empties a moment later.
    let report = wait_for_async(DEADLINE, "the spool to be empty", || async {
        let report = delivery(&fleet).await;
        (report["spool"]["depth"] == 0).then_some(report)
    })
    .await
    .expect("spool drained");
    assert_eq!(report["serverId"], fleet.hosts[0].id.as_str());
    assert_eq!(report["relay"]["enabled"], true, "{report}");
    assert_eq!(report["relay"]["listening"], true, "{report}");
    let relay =
        std::fs::read_to_string(fleet.hosts[0].state_dir().join("relay.json")).expect("relay.json");
    let listen = report["relay"]["listen"].as_str().expect("listen");
    assert!(relay.contains(listen), "{relay} vs {listen}");
    assert!(report["relay"]["lastCallbackAt"].is_string(), "{report}");
    assert!(report["relay"]["callbacksAccepted"].as_u64() >= Some(1));
    assert_eq!(report["spool"]["depth"], 0, "{report}");
    assert!(report["spool"]["oldestUnackedAt"].is_null(), "{report}");
    assert_eq!(report["fail2banRunning"], true);
    assert_eq!(report["actionInstalled"], true);
    let attached: Vec<(String, bool)> = report["jails"]
        .as_array()
        .expect("jails")
        .iter()
        .map(|j| {
            (
                j["jail"].as_str().expect("jail").to_owned(),
                j["actionAttached"].as_bool().expect("flag"),
            )
        })
        .collect();
    assert_eq!(
        attached,
        [
            ("banhub-probe".to_owned(), true),
            ("banhub-shared".to_owned(), true),
            ("dummyjail".to_owned(), true),
            ("testauth".to_owned(), true)
        ]
    );
    assert_eq!(report["unattachedJails"], json!([]));
    let last_event = events(&fleet, "").await[0]["storedAt"].clone();
    assert_eq!(report["lastEventReceivedAt"], last_event, "{report}");

    // A jail that loses the action shows, and what it bans is reported anyway: reconciliation
    // stores it once as observed, with fail2ban's ban time and duration. That needs the agent's
    // first pass to have recorded its baseline (bans present before it are not reported).
    let state = fleet.hosts[0].state_dir().join("reconcile.json");
    wait_until(DEADLINE, "the reconciliation baseline", || state.exists())
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));
    fleet.hosts[0]
        .sandbox
        .client(&["set", "dummyjail", "delaction", "banhub"])
        .expect("delaction");
    let report = delivery(&fleet).await;
    assert_eq!(report["unattachedJails"], json!(["dummyjail"]), "{report}");
    fleet.hosts[0]
        .sandbox
        .client(&["set", "dummyjail", "banip", "198.51.100.62"])
        .expect("banip");
    // No callback: reconciliation runs every 60 s and after changes; restart the agent to
    // reconcile now (a start always reconciles).
    fleet.hosts[0].agent.restart().expect("agent restarts");
    let observed = wait_for_async(Duration::from_secs(60), "the observed ban", || async {
        events(&fleet, "&ip=198.51.100.62&kind=ban")
            .await
            .into_iter()
            .next()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));
    assert_eq!(observed["source"], "observed", "{observed}");
    assert_eq!(observed["jail"], "dummyjail");
    assert_eq!(observed["banDuration"], 600, "{observed}");
    let ban_time = observed["banTime"].as_str().expect("ban time");
    let ban_time = chrono::DateTime::parse_from_rfc3339(ban_time).expect("rfc3339");
    let age = chrono::Utc::now().signed_duration_since(ban_time);
    assert!(
        age >= chrono::Duration::zero() && age < chrono::Duration::seconds(120),
        "{observed}"
    );
    assert_eq!(events(&fleet, "&ip=198.51.100.62").await.len(), 1);
}

#[tokio::test]
async fn probe_round_trip_succeeds_and_its_events_stay_out_of_lists() {
    let fleet = start("probe").await;
    let result = probe(&fleet).await;
    assert_eq!(
        result["ok"],
        true,
        "{result}\n{}",
        fleet.hosts[0].agent.logs()
    );
    assert!(result["failure"].is_null());
    assert_eq!(result["jail"], "banhub-probe");
    let ip = result["ip"].as_str().expect("ip").to_owned();
    assert!(ip.starts_with("192.0.2."), "{ip}");
    let steps: Vec<&str> = result["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["step"].as_str().expect("step"))
        .collect();
    assert_eq!(steps, ["ban", "banEvent", "unban", "unbanEvent"]);
    for step in result["steps"].as_array().expect("steps") {
        assert!(step["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{step}");
    }
    eprintln!("probe steps: {}", result["steps"]);

    // Stored, through the real path, in the probe jail only; hidden unless asked for.
    let probe_events = events(&fleet, "&jail=banhub-probe").await;
    let kinds: Vec<&str> = probe_events
        .iter()
        .map(|e| e["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["unban", "ban"], "{probe_events:?}");
    assert!(probe_events.iter().all(|e| e["ip"] == ip.as_str()));
    assert!(probe_events.iter().all(|e| e["source"] == "action"));
    assert!(
        events(&fleet, "").await.is_empty(),
        "probe events are hidden"
    );
    assert!(events(&fleet, &format!("&ip={ip}")).await.is_empty());
    let (status, stats) = get(&fleet, "/api/events/bans/stats").await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert!(
        !stats.to_string().contains("banhub-probe"),
        "stats count no probe: {stats}"
    );

    // The result is kept and shown with the diagnostics.
    let report = delivery(&fleet).await;
    assert_eq!(report["lastProbe"]["ok"], true, "{report}");
    assert_eq!(report["lastProbe"]["ip"], ip.as_str());
    assert!(report["lastEventReceivedAt"].is_null(), "{report}");
}

#[tokio::test]
async fn probe_failure_names_the_broken_part_and_bad_requests_are_refused() {
    let mut fleet = start("probe-fail").await;
    fleet.hosts[0]
        .sandbox
        .client(&["set", "banhub-probe", "delaction", "banhub"])
        .expect("delaction");
    let result = probe(&fleet).await;
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["failure"]["code"], "action_missing", "{result}");
    assert!(
        result["failure"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("install-action")),
        "{result}"
    );
    // Nothing was banned, nothing stored.
    assert!(events(&fleet, "&jail=banhub-probe").await.is_empty());
    assert_eq!(
        fleet.hosts[0]
            .sandbox
            .client(&["get", "banhub-probe", "banned"])
            .expect("banned"),
        "[]"
    );
    assert_eq!(delivery(&fleet).await["lastProbe"]["ok"], false);

    // Unknown or malformed server: 404; offline agent: 503.
    for path in [
        "/api/servers/0192f3a4-0000-7000-8000-000000000000/delivery",
        "/api/servers/not-an-id/delivery",
    ] {
        let (status, body) = get(&fleet, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(body["code"].is_string(), "{body}");
    }
    let (status, _) = post(
        &fleet,
        "/api/servers/0192f3a4-0000-7000-8000-000000000000/probe",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    fleet.hosts[0].agent.stop().expect("agent stops");
    let url = format!("/api/servers/{}", fleet.hosts[0].id);
    wait_until_async(DEADLINE, "the agent to be offline", || async {
        get(&fleet, &url).await.1["status"] == "offline"
    })
    .await
    .expect("offline");
    for (status, body) in [
        get(
            &fleet,
            &format!("/api/servers/{}/delivery", fleet.hosts[0].id),
        )
        .await,
        post(&fleet, &format!("/api/servers/{}/probe", fleet.hosts[0].id)).await,
    ] {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["code"], "agent_offline", "{body}");
    }
}

/// Passes of reconciliation the agent has logged so far.
fn passes(agent: &AgentProcess) -> usize {
    agent.logs().matches("reconciliation pass done").count()
}

#[tokio::test]
async fn fail2ban_restart_stores_no_spurious_events() {
    let mut fleet = start("restart").await;
    let ips = ["203.0.113.71", "203.0.113.72", "203.0.113.73"];
    for ip in ips {
        ban_from_log(&fleet, "testauth", ip).await;
    }
    let before = events(&fleet, "").await;
    assert_eq!(before.len(), 3, "{before:?}");
    let accepted = delivery(&fleet).await["relay"]["callbacksAccepted"].clone();

    // SIGTERM, then start again on the same database: the bans are restored.
    fleet.hosts[0].sandbox.stop().expect("fail2ban stops");
    let passes_before = passes(&fleet.hosts[0].agent);
    let out = std::fs::File::create(fleet.hosts[0].sandbox.dir().join("server2.out")).expect("out");
    let child = Command::new("fail2ban-server")
        .arg("-c")
        .arg(fleet.hosts[0].sandbox.conf_dir())
        .args(["-f", "-x"])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone"))
        .stderr(out)
        .spawn()
        .expect("fail2ban-server starts again (install it with .ci/install-deps)");
    let _server = KillOnDrop(child);
    wait_until(DEADLINE, "the bans to be restored", || {
        fleet.hosts[0]
            .sandbox
            .client(&["get", "testauth", "banned"])
            .is_ok_and(|b| ips.iter().all(|ip| b.contains(ip)))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].sandbox.logs()));

    // Reconciliation notices the restart and compares (settle 5 s + confirm 2 s); then nothing
    // may have been stored.
    wait_until(
        Duration::from_secs(60),
        "a reconciliation pass after the restart",
        || passes(&fleet.hosts[0].agent) > passes_before,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));
    let after = events(&fleet, "").await;
    assert_eq!(
        after.len(),
        3,
        "a restart must store nothing: {after:?}\n{}",
        fleet.hosts[0].agent.logs()
    );
    assert!(
        after
            .iter()
            .all(|e| e["kind"] == "ban" && e["source"] == "action")
    );
    assert_eq!(
        delivery(&fleet).await["relay"]["callbacksAccepted"],
        accepted,
        "the action posted during the restart"
    );
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A host whose fail2ban calls the hub directly (with the server's callback secret) is held to
/// the same jail rule as the agent's relay: a jail the server's agent does not list is refused
/// and nothing is stored; a jail it runs is stored.
#[tokio::test]
async fn direct_callbacks_naming_a_jail_the_agent_does_not_list_are_refused() {
    let fleet = start("direct-jail").await;
    let (status, issued) = post(
        &fleet,
        &format!("/api/servers/{}/callback-secret", fleet.hosts[0].id),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let secret = issued["secret"].as_str().expect("secret").to_owned();
    let callback = |jail: &'static str| {
        let (client, url, secret) = (
            reqwest::Client::new(),
            fleet.hub.url("/api/ban"),
            secret.clone(),
        );
        async move {
            let response = client
                .post(url)
                .header("X-Callback-Secret", secret)
                .json(&json!({"ip": "198.51.100.77", "jail": jail, "failures": 2}))
                .send()
                .await
                .expect("request");
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    let (status, problem) = callback("sshd-typo").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "jail", "{problem}");
    assert!(events(&fleet, "&ip=198.51.100.77").await.is_empty());

    let (status, stored) = callback("testauth").await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(stored["serverId"], fleet.hosts[0].id.as_str());
    let events = events(&fleet, "&ip=198.51.100.77").await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["jail"], "testauth");
}
