//! The lockout guard end to end against a real agent and fail2ban host: an admin protects a
//! network (bad input refused, field by field); manual and fleet bans covering it answer 422
//! naming the protecting entry, even with the override, and reach no fail2ban; the network lands
//! in the host's `ignoreip`, so fail2ban's own jail does not ban it from log lines while it bans
//! another address; lifting the protection takes it out of `ignoreip` and lets the ban through,
//! while an entry of the host's global allowlist written by hand stays throughout. What each host's
//! `ignoreip` was given is kept in the database: a restarted hub still takes out a network it
//! protected before the restart. An operator's client address is protected while their session
//! lives, read from `X-Forwarded-For` only when the peer is one of `http.trusted_proxies`.

use std::time::Duration;

use banhub_tests::wait::wait_until_async;
use banhub_tests::{TestFleet, TestHost};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
const OFFICE: &str = "198.51.100.0/24";
const HAND_ENTRY: &str = "192.0.2.99";

/// fail2ban's allowlist of `jail`, as it applies it.
fn ignored(host: &TestHost, jail: &str) -> String {
    host.sandbox
        .client(&["get", jail, "ignoreip"])
        .expect("fail2ban lists its allowlist")
}

/// Waits until fail2ban's allowlist of `testauth` on `host` holds `OFFICE` (`present`) or no
/// longer holds it; the fleet's logs are in the panic when it does not.
async fn wait_office(fleet: &TestFleet, host: &TestHost, present: bool, what: &str) {
    wait_until_async(DEADLINE, what, || async {
        ignored(host, "testauth").contains(OFFICE) == present
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

/// Asserts that the hub's writes of `ignoreip` kept the entry written by hand.
fn assert_hand_entry_kept(host: &TestHost) {
    assert!(
        ignored(host, "testauth").contains(HAND_ENTRY),
        "the hand-written entry was dropped: {}",
        ignored(host, "testauth")
    );
}

/// Asserts a refusal by the protected network `OFFICE`, naming it in `protectedBy`.
fn assert_protected(what: &str, status: StatusCode, problem: &Value) {
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{what}: {problem}"
    );
    assert_eq!(
        problem["code"], "guard_protected_network",
        "{what}: {problem}"
    );
    assert_eq!(problem["field"], "ip", "{what}: {problem}");
    assert_eq!(
        problem["protectedBy"]["network"], OFFICE,
        "{what}: {problem}"
    );
    assert_eq!(
        problem["protectedBy"]["kind"], "configured",
        "{what}: {problem}"
    );
    assert_eq!(
        problem["protectedBy"]["note"], "office VPN",
        "{what}: {problem}"
    );
}

async fn start() -> TestFleet {
    let hub = TestFleet::hub_builder()
        .env("BANHUB_GUARDS__PROTECTED_REFRESH_SECS", "1")
        .start()
        .expect("hub starts");
    let mut fleet = TestFleet::on(hub);
    let sandbox = banhub_tests::fail2ban::Fail2banSandbox::start("guarded").expect("sandbox");
    fleet
        .add_host("guarded", sandbox, &[])
        .await
        .expect("the host comes online");
    fleet
}

#[tokio::test]
async fn a_protected_network_is_refused_by_every_ban_and_ignored_by_fail2ban() {
    let fleet = start().await;
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let api = fleet.api();

    // An entry of the global allowlist written by hand, which the pushes keep.
    let (status, global) = fleet.get("/api/ignoreip", server).await;
    assert_eq!(status, StatusCode::OK, "{global}");
    let mut entries: Vec<Value> = global["entries"].as_array().cloned().unwrap_or_default();
    entries.push(json!(HAND_ENTRY));
    let (status, written) = fleet
        .post(
            "/api/ignoreip",
            server,
            &json!({"entries": entries, "version": global["version"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{written}");

    // Bad input: a field-named 422 (or 403 for a non-admin), and nothing stored.
    for (body, code, field) in [
        (json!({"network": "office"}), "invalid_field", "network"),
        (
            json!({"network": "192.0.2.0/33"}),
            "invalid_field",
            "network",
        ),
        (
            json!({"network": "192.0.2.0/24", "note": "x".repeat(201)}),
            "invalid_field",
            "note",
        ),
        (
            json!({"network": "192.0.2.0/24", "note": "a\nb"}),
            "invalid_field",
            "note",
        ),
        (
            json!({"network": "10.0.0.0/8"}),
            "guard_wide_network",
            "network",
        ),
        (
            json!({"network": "255.255.255.255"}),
            "guard_broadcast",
            "network",
        ),
        (
            json!({"network": "0.0.0.0/0", "override": true}),
            "guard_covers_everything",
            "network",
        ),
        (
            json!({"network": "::/0", "override": true}),
            "guard_covers_everything",
            "network",
        ),
    ] {
        let (status, problem) = api.post("/api/protected-networks", &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
        assert_eq!(problem["code"], code, "{body}: {problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let operator = fleet.hub.client_as("operator").await.expect("operator");
    let (status, problem) = fleet
        .send(
            operator
                .post(fleet.hub.url("/api/protected-networks"))
                .json(&json!({"network": OFFICE})),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let (status, list) = api.get("/api/protected-networks").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["configured"], json!([]), "{list}");
    assert!(
        list["automatic"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["kind"] == "hub_address")),
        "the hub's own addresses are listed: {list}"
    );

    // A wide network with the override is accepted (and lifted again at once).
    let (status, wide) = api
        .post(
            "/api/protected-networks",
            &json!({"network": "10.0.0.0/8", "override": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{wide}");
    let (status, _) = api
        .delete(&format!("/api/protected-networks/{}", wide["id"]))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, office) = api
        .post(
            "/api/protected-networks",
            &json!({"network": "198.51.100.77/24", "note": "office VPN"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{office}");
    assert_eq!(office["network"], OFFICE, "normalized: {office}");
    assert_eq!(office["note"], "office VPN");
    let (status, problem) = api
        .post("/api/protected-networks", &json!({"network": OFFICE}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let (_, list) = api.get("/api/protected-networks").await;
    assert_eq!(
        list["configured"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    assert_eq!(list["configured"][0]["network"], OFFICE, "{list}");

    // The ban forms' check names the entry.
    let (status, check) = api
        .get("/api/protected-networks/check?ip=198.51.100.7")
        .await;
    assert_eq!(status, StatusCode::OK, "{check}");
    assert_eq!(check["protectedBy"]["network"], OFFICE, "{check}");
    assert_eq!(check["coversYou"], false, "{check}");
    let (_, check) = api.get("/api/protected-networks/check?ip=192.0.2.7").await;
    assert!(check.get("protectedBy").is_none(), "{check}");
    let (status, problem) = api.get("/api/protected-networks/check?ip=nope").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "ip", "{problem}");

    // Manual bans: refused, with or without the override; fail2ban untouched.
    let before = host.banned("testauth");
    for (path, body) in [
        ("/api/jails/testauth/ban/198.51.100.7", json!({})),
        (
            "/api/jails/testauth/ban/198.51.100.7",
            json!({"override": true}),
        ),
        ("/api/jails/testauth/ban/198.51.0.0%2F16", json!({})),
    ] {
        let (status, problem) = fleet.post(path, server, &body).await;
        assert_protected(path, status, &problem);
    }
    assert_eq!(
        host.banned("testauth"),
        before,
        "a protected address reached fail2ban"
    );

    // Fleet bans: refused, nothing queued.
    for body in [
        json!({"ip": "198.51.100.7", "jail": "testauth", "all": true}),
        json!({"ip": "198.51.100.0/25", "jail": "testauth", "all": true, "override": true}),
    ] {
        let (status, problem) = fleet.post("/api/fleet/bans", None, &body).await;
        assert_protected(&body.to_string(), status, &problem);
    }
    let (_, actions) = fleet.get("/api/fleet/actions", None).await;
    assert!(
        actions.as_array().is_some_and(Vec::is_empty),
        "a refused fleet ban was recorded: {actions}"
    );
    assert_eq!(
        host.banned("testauth"),
        before,
        "a protected address reached fail2ban"
    );

    // fail2ban's own jail ignores it: in `ignoreip`, and log lines from it ban nothing while
    // another address's lines ban that one.
    wait_office(
        &fleet,
        host,
        true,
        "the protected network in the host's ignoreip",
    )
    .await;
    assert_hand_entry_kept(host);
    let log = host.sandbox.log_path("testauth");
    host.sandbox
        .append_failures(&log, "198.51.100.7", 5)
        .expect("append");
    host.sandbox
        .append_failures(&log, "203.0.113.50", 5)
        .expect("append");
    wait_until_async(
        DEADLINE,
        "fail2ban bans the unprotected address",
        || async { host.banned("testauth").contains("203.0.113.50") },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert!(
        !host.banned("testauth").contains("198.51.100.7"),
        "fail2ban banned a protected address: {}",
        host.banned("testauth")
    );

    // Lifting the protection: out of `ignoreip`, and the ban goes through.
    let path = format!("/api/protected-networks/{}", office["id"]);
    let (status, _) = api.delete(&path).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, problem) = api.delete(&path).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    wait_office(
        &fleet,
        host,
        false,
        "the network out of the host's ignoreip",
    )
    .await;
    assert_hand_entry_kept(host);
    let (status, outcome) = fleet
        .post("/api/jails/testauth/ban/198.51.100.7", server, &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert!(host.banned("testauth").contains("198.51.100.7"));

    // Every change was audited.
    let (_, page) = fleet.get("/api/audit?limit=500", None).await;
    let actions: Vec<String> = page["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| format!("{} {}", e["action"], e["status"]))
        .collect();
    assert!(
        actions
            .iter()
            .filter(|a| a.contains("protected-networks"))
            .count()
            >= 4,
        "{actions:?}"
    );
}

/// Two replicas on one PostgreSQL database: a network protected on one is refused on the other at
/// once (the change is announced; the hour-long refresh interval plays no part), and lifting it
/// there lets bans through on both.
#[tokio::test]
async fn a_network_protected_on_one_replica_is_refused_on_the_other() {
    use banhub_tests::hub::{HubProcess, api_get, api_post};
    use banhub_tests::postgres::PostgresServer;

    let pg = PostgresServer::start().unwrap_or_else(|e| panic!("PostgreSQL: {e:#}"));
    let url = pg.create_database("banhub_protected").expect("database");
    let ca = tempfile::TempDir::new().expect("ca dir");
    let replica = |id: &str| {
        HubProcess::builder()
            .database_url(&url)
            .ca_dir(ca.path())
            .env("BANHUB_CLUSTER__REPLICA_ID", id)
            .env("BANHUB_GUARDS__PROTECTED_REFRESH_SECS", "3600")
            .start()
            .unwrap_or_else(|e| panic!("replica {id} starts: {e:#}"))
    };
    let a = replica("a");
    let b = replica("b");
    let fleet_ban = json!({"ip": "198.51.100.7", "jail": "testauth", "all": true});

    let (status, office) = api_post(
        &a,
        "/api/protected-networks",
        json!({"network": OFFICE, "note": "office VPN"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{office}");
    wait_until_async(
        DEADLINE,
        "replica b refuses the protected network",
        || async {
            let (status, problem) = api_post(&b, "/api/fleet/bans", fleet_ban.clone()).await;
            status == StatusCode::UNPROCESSABLE_ENTITY
                && problem["code"] == "guard_protected_network"
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", a.logs(), b.logs()));
    let (status, problem) = api_post(&b, "/api/fleet/bans", fleet_ban.clone()).await;
    assert_protected("fleet ban on b", status, &problem);
    let (_, list) = api_get(&b, "/api/protected-networks").await;
    assert_eq!(list["configured"][0]["network"], OFFICE, "{list}");

    let (status, _) = b
        .client()
        .delete(b.url(&format!("/api/protected-networks/{}", office["id"])))
        .send()
        .await
        .map(|r| (r.status(), ()))
        .expect("delete");
    assert_eq!(status, StatusCode::NO_CONTENT);
    // With the protection lifted, the ban passes the guard on a and fails only for want of servers.
    wait_until_async(
        DEADLINE,
        "replica a lets the ban through the guard",
        || async {
            let (status, problem) = api_post(&a, "/api/fleet/bans", fleet_ban.clone()).await;
            status == StatusCode::UNPROCESSABLE_ENTITY && problem["field"] == "labels"
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", a.logs(), b.logs()));
}

/// What a host's `ignoreip` was given outlives the hub: protected before a restart, the network is
/// taken out of `ignoreip` by the restarted hub when the protection is lifted, while the
/// hand-written entry stays.
#[tokio::test]
async fn a_restarted_hub_knows_what_each_hosts_ignoreip_holds() {
    let mut fleet = start().await;
    let server = fleet.host(0).id.clone();
    let (_, global) = fleet.get("/api/ignoreip", Some(&server)).await;
    let mut entries: Vec<Value> = global["entries"].as_array().cloned().unwrap_or_default();
    entries.push(json!(HAND_ENTRY));
    let (status, written) = fleet
        .post(
            "/api/ignoreip",
            Some(&server),
            &json!({"entries": entries, "version": global["version"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{written}");
    let (status, office) = fleet
        .api()
        .post("/api/protected-networks", &json!({"network": OFFICE}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{office}");
    let host = fleet.host(0);
    wait_office(
        &fleet,
        host,
        true,
        "the protected network in the host's ignoreip",
    )
    .await;

    fleet.hub.restart().expect("the hub restarts");
    // Polled through failures: the client's pooled connections to the stopped hub fail once.
    banhub_tests::enrolled::wait_server_online(
        &fleet.hub.client(),
        &fleet.hub.url(""),
        &server,
        DEADLINE,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let (status, _) = fleet
        .api()
        .delete(&format!("/api/protected-networks/{}", office["id"]))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let host = fleet.host(0);
    wait_office(
        &fleet,
        host,
        false,
        "the network out of the host's ignoreip after the restart",
    )
    .await;
    assert_hand_entry_kept(host);
}

/// The proxy the hub trusts in [`an_operators_address_is_protected_while_the_session_lives`].
const PROXY: &str = "127.0.0.9";

/// Logs the local administrator in from `from` (the client's local address), with
/// `X-Forwarded-For: forwarded` if given, and uses the session once; its cookie.
async fn log_in_from(
    hub: &banhub_tests::hub::HubProcess,
    from: &str,
    forwarded: Option<&str>,
) -> String {
    let client = reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().expect("address"))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let with_header = |request: reqwest::RequestBuilder| match forwarded {
        Some(client) => request.header("X-Forwarded-For", client),
        None => request,
    };
    let path = hub.data_dir().join("initial-admin-password");
    let password = std::fs::read_to_string(&path).expect("initial password");
    let response = with_header(client.post(hub.url("/auth/login")))
        .json(&json!({"username": "admin", "password": password.trim()}))
        .send()
        .await
        .expect("POST /auth/login");
    assert_eq!(response.status(), StatusCode::OK, "login from {from}");
    let cookie = response
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("banhub_session="))
        .map(|v| v.split(';').next().unwrap_or_default().to_owned())
        .expect("a session cookie");
    let used = with_header(client.get(hub.url("/api/servers")))
        .header(reqwest::header::COOKIE, &cookie)
        .send()
        .await
        .expect("GET /api/servers");
    assert_eq!(used.status(), StatusCode::OK);
    cookie
}

/// An operator's session protects the address it is used from: straight from 127.0.0.7; through
/// the trusted proxy [`PROXY`], the client its `X-Forwarded-For` names (203.0.113.7), not the
/// proxy; from an untrusted peer (127.0.0.6), that peer, whatever its header says (203.0.113.8).
/// A manual ban of the proxied client's address is a 422 naming the operator's session and reaches
/// no fail2ban; the address the untrusted header named is banned. (Loopback addresses are never
/// banned at all, so the direct and the untrusted cases are read from the list of protections.)
#[tokio::test]
async fn an_operators_address_is_protected_while_the_session_lives() {
    let hub = TestFleet::hub_builder()
        .env("BANHUB_GUARDS__PROTECTED_REFRESH_SECS", "1")
        .env("BANHUB_HTTP__TRUSTED_PROXIES", PROXY)
        .start()
        .expect("hub starts");
    let mut fleet = TestFleet::on(hub);
    let sandbox = banhub_tests::fail2ban::Fail2banSandbox::start("guarded").expect("sandbox");
    fleet
        .add_host("guarded", sandbox, &[])
        .await
        .expect("the host comes online");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let ban = |ip: &str| format!("/api/jails/testauth/ban/{ip}");

    log_in_from(&fleet.hub, "127.0.0.7", None).await;
    log_in_from(&fleet.hub, PROXY, Some("203.0.113.7")).await;
    log_in_from(&fleet.hub, "127.0.0.6", Some("203.0.113.8")).await;
    let want = ["127.0.0.6/32", "127.0.0.7/32", "203.0.113.7/32"];
    wait_until_async(
        DEADLINE,
        "the three sessions' addresses protected",
        || async {
            let (_, list) = fleet.api().get("/api/protected-networks").await;
            let mut sessions: Vec<String> = list["automatic"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["kind"] == "operator_session")
                .filter_map(|e| e["network"].as_str().map(str::to_owned))
                .collect();
            sessions.sort();
            sessions == want
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    let (status, problem) = fleet.post(&ban("203.0.113.7"), server, &json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "guard_protected_network", "{problem}");
    assert_eq!(
        problem["protectedBy"]["kind"], "operator_session",
        "{problem}"
    );
    assert_eq!(
        problem["protectedBy"]["network"], "203.0.113.7/32",
        "{problem}"
    );
    assert!(
        !host.banned("testauth").contains("203.0.113.7"),
        "a protected address reached fail2ban: {}",
        host.banned("testauth")
    );
    // The untrusted peer's header named nobody.
    let (status, outcome) = fleet.post(&ban("203.0.113.8"), server, &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert!(host.banned("testauth").contains("203.0.113.8"));
}
