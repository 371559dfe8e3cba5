//! Timed bans end to end against a real agent and fail2ban: a ban with `durationSecs` is lifted by
//! the hub at its time, also when the agent was killed meanwhile and came back after the end, and
//! when the hub was killed across the end time and started again; each lift is in the audit log
//! and fail2ban's unban reaches the events. A second timed ban of an address replaces its schedule
//! (one lift, at the later end), and "unban everywhere" ends it (no lift at all). A duration out
//! of range is refused naming the field and bans nothing.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::client::ServerStatus;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

const JAIL: &str = "testauth";
const DEADLINE: Duration = Duration::from_secs(60);

fn ends_at(answer: &Value) -> DateTime<Utc> {
    answer["endsAt"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("no endsAt in {answer}"))
}

/// Waits until the clock passes `at`.
async fn wait_past(at: DateTime<Utc>) {
    wait_until_async(DEADLINE, "the ban's end time", || async { Utc::now() > at })
        .await
        .expect("the clock moves");
}

/// The stored timed bans of `ip`, ended ones included.
async fn timed_bans(fleet: &TestFleet, ip: &str) -> Vec<Value> {
    let (status, list) = fleet
        .api()
        .get(&format!("/api/timed-bans?all=true&ip={ip}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list.as_array().cloned().unwrap_or_default()
}

/// Waits until fail2ban no longer bans `ip` on host 0, then checks the record, the audit log and
/// the unban event.
async fn assert_lifted(fleet: &TestFleet, ip: &str, end: DateTime<Utc>) {
    let host = fleet.host(0);
    wait_until_async(DEADLINE, "the hub to lift the timed ban", || async {
        !host.banned(JAIL).contains(ip)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    // The hub records the lift once the agent has answered, just after fail2ban acted.
    let bans = wait_for_async(DEADLINE, "the lift to be recorded", || async {
        let bans = timed_bans(fleet, ip).await;
        (bans.len() == 1 && bans[0]["state"] == "lifted").then_some(bans)
    })
    .await;
    let bans = match bans {
        Ok(bans) => bans,
        Err(e) => panic!("{e}: {:?}", timed_bans(fleet, ip).await),
    };
    let finished = bans[0]["finishedAt"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .expect("finishedAt");
    assert!(
        finished >= end,
        "lifted at {finished}, before its end {end}"
    );

    let (status, audit) = fleet.api().get("/api/audit?limit=200").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let lift = audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["action"] == "timed ban lifted" && e["detail"]["ip"] == ip)
        .unwrap_or_else(|| panic!("no audit entry of the lift of {ip}: {audit}"));
    assert_eq!(lift["serverId"], host.id.as_str(), "{lift}");
    assert_eq!(lift["detail"]["changed"], true, "{lift}");

    let api = fleet.api();
    wait_until_async(DEADLINE, "fail2ban's unban to reach the events", || async {
        api.all_events_json(&format!("ip={ip}&kind=unban"), 50)
            .await
            .is_ok_and(|events| events.iter().any(|e| e["jail"] == JAIL))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

#[tokio::test]
async fn timed_bans_are_lifted_at_their_time_across_agent_and_hub_restarts() {
    let hub = TestFleet::hub_builder()
        .env("BANHUB_TIMED_BANS__MIN_DURATION_SECS", "5")
        .start()
        .expect("hub starts");
    // One relay port for both runs of the agent: the installed action names it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut fleet = TestFleet::on(hub);
    let sandbox = Fail2banSandbox::start("timed-0").expect("fail2ban sandbox");
    fleet
        .add_host(
            "timed-0",
            sandbox,
            &[("BANHUB_AGENT_RELAY__LISTEN", listen.as_str())],
        )
        .await
        .expect("the host comes online")
        .install_action()
        .expect("install-action");
    let server = fleet.host(0).id.clone();
    let api = fleet.api().for_server(&server);

    // Out of range: refused at its field, nothing banned, nothing scheduled.
    for secs in [1, 31_536_001] {
        let (status, problem) = api
            .post(
                &format!("/api/jails/{JAIL}/ban/192.0.2.30"),
                &json!({"durationSecs": secs}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], "durationSecs", "{problem}");
        let (status, problem) = fleet
            .api()
            .post(
                "/api/fleet/bans",
                &json!({"ip": "192.0.2.30", "jail": JAIL, "all": true, "durationSecs": secs}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], "durationSecs", "{problem}");
    }
    assert!(!fleet.host(0).banned(JAIL).contains("192.0.2.30"));
    assert!(timed_bans(&fleet, "192.0.2.30").await.is_empty());

    // (a) A manual ban of 12 s; the agent is killed and comes back only after the end.
    let before = Utc::now();
    let (status, ban) = api
        .post(
            &format!("/api/jails/{JAIL}/ban/192.0.2.31"),
            &json!({"durationSecs": 12}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ban}");
    assert_eq!(ban["changed"], true, "{ban}");
    let end = ends_at(&ban);
    let expected = before + chrono::Duration::seconds(12);
    assert!(
        (end - expected).num_seconds().abs() <= 2,
        "ends at {end}, not about {expected}"
    );
    assert!(fleet.host(0).banned(JAIL).contains("192.0.2.31"));
    let (status, active) = fleet.api().get("/api/timed-bans").await;
    assert_eq!(status, StatusCode::OK, "{active}");
    assert_eq!(active[0]["ip"], "192.0.2.31", "{active}");
    assert_eq!(active[0]["state"], "active", "{active}");

    fleet.hosts[0].agent.kill().expect("kill the agent");
    fleet
        .wait_status(fleet.host(0), ServerStatus::Offline)
        .await;
    wait_past(end).await;
    // Nobody could lift it while the agent was away: fail2ban still bans it.
    assert!(fleet.host(0).banned(JAIL).contains("192.0.2.31"));
    fleet.hosts[0].agent.restart().expect("restart the agent");
    assert_lifted(&fleet, "192.0.2.31", end).await;

    // (b) A fleet ban of 8 s; the hub is killed before its end and starts again after it.
    let (status, action) = fleet
        .api()
        .post(
            "/api/fleet/bans",
            &json!({"ip": "192.0.2.32", "jail": JAIL, "all": true, "durationSecs": 8}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{action}");
    assert_eq!(action["counts"], json!({"done": 1}), "{action}");
    let end = ends_at(&action);
    let id = action["id"].as_str().expect("id");
    let (_, stored) = fleet.api().get(&format!("/api/fleet/actions/{id}")).await;
    assert_eq!(stored["endsAt"], action["endsAt"], "{stored}");
    assert!(fleet.host(0).banned(JAIL).contains("192.0.2.32"));

    fleet.hub.kill().expect("kill the hub");
    wait_past(end).await;
    assert!(fleet.host(0).banned(JAIL).contains("192.0.2.32"));
    fleet.hub.restart().expect("restart the hub");
    fleet.wait_status(fleet.host(0), ServerStatus::Online).await;
    assert_lifted(&fleet, "192.0.2.32", end).await;

    replaced_then_unbanned_everywhere(&fleet).await;
}

/// The states of the stored timed bans of `ip`, oldest first.
async fn states(fleet: &TestFleet, ip: &str) -> Vec<String> {
    let mut bans = timed_bans(fleet, ip).await;
    let created = |ban: &Value| {
        ban["createdAt"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .unwrap_or_else(|| panic!("no createdAt in {ban}"))
    };
    bans.sort_by_key(created);
    bans.iter()
        .map(|b| b["state"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Whether the audit log holds a lift of `ip`.
async fn lift_audited(fleet: &TestFleet, ip: &str) -> bool {
    let (status, audit) = fleet.api().get("/api/audit?limit=200").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["action"] == "timed ban lifted" && e["detail"]["ip"] == ip)
}

/// (c) A second timed ban of one address replaces the first schedule: when the first end has
/// passed (a later ban of another address was lifted meanwhile, so the lifter has looked), the
/// address is still banned. (d) "Unban everywhere" ends the schedule: it leaves the listing, and
/// after its end has passed (again proven by a later lift) nothing lifted it.
async fn replaced_then_unbanned_everywhere(fleet: &TestFleet) {
    const IP: &str = "192.0.2.33";
    let api = fleet.api().for_server(&fleet.host(0).id);
    let ban = |secs: u64, ip: &'static str| {
        let api = api.clone();
        async move {
            let (status, ban) = api
                .post(
                    &format!("/api/jails/{JAIL}/ban/{ip}"),
                    &json!({"durationSecs": secs}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{ban}");
            ends_at(&ban)
        }
    };
    let first = ban(5, IP).await;
    let second = ban(9, IP).await;
    assert_eq!(states(fleet, IP).await, ["replaced", "active"]);
    let (_, active) = fleet.api().get(&format!("/api/timed-bans?ip={IP}")).await;
    assert_eq!(active.as_array().map(Vec::len), Some(1), "{active}");
    assert_eq!(ends_at(&active[0]), second, "{active}");

    let witness = ban(6, "192.0.2.34").await;
    assert!(witness > first, "the witness ends after the first schedule");
    assert_lifted(fleet, "192.0.2.34", witness).await;
    assert!(
        fleet.host(0).banned(JAIL).contains(IP),
        "the replaced schedule lifted the ban"
    );
    assert!(!lift_audited(fleet, IP).await);

    // (d) Unban everywhere: fail2ban unbans, the schedule is cancelled and no longer listed.
    let (status, unbanned) = fleet
        .api()
        .post("/api/bans/unban-everywhere", &json!({"ip": IP}))
        .await;
    assert_eq!(status, StatusCode::OK, "{unbanned}");
    assert_eq!(unbanned["servers"][0]["ok"], true, "{unbanned}");
    assert!(!fleet.host(0).banned(JAIL).contains(IP));
    assert_eq!(states(fleet, IP).await, ["replaced", "cancelled"]);
    let (_, active) = fleet.api().get("/api/timed-bans").await;
    assert!(
        active
            .as_array()
            .is_some_and(|list| list.iter().all(|b| b["ip"] != IP)),
        "{active}"
    );

    let witness = ban(5, "192.0.2.35").await;
    assert!(
        witness > second,
        "the witness ends after the cancelled schedule"
    );
    assert_lifted(fleet, "192.0.2.35", witness).await;
    assert_eq!(states(fleet, IP).await, ["replaced", "cancelled"]);
    assert!(
        !lift_audited(fleet, IP).await,
        "the cancelled schedule was lifted"
    );
}
