//! Control of fail2ban through the hub and the agents, end to end: two real fail2ban sandboxes enrolled
//! as two servers, every request through the REST API, every effect checked in fail2ban itself.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::fleet::snapshot;
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(20);

/// A hub with a server per name, each an agent beside its own fail2ban sandbox, all online.
async fn start(names: &[&str]) -> TestFleet {
    TestFleet::start(names)
        .await
        .unwrap_or_else(|e| panic!("the fleet starts: {e:#}"))
}

fn banned_in(sandbox: &Fail2banSandbox, jail: &str) -> String {
    sandbox
        .client(&["get", jail, "banned"])
        .expect("fail2ban answers")
}

#[tokio::test]
async fn the_header_routes_to_the_right_server() {
    let fleet = start(&["alpha", "beta"]).await;
    let (alpha, beta) = (fleet.host(0), fleet.host(1));

    let (status, outcome) = fleet
        .post(
            "/api/jails/testauth/ban/192.0.2.10",
            Some(&beta.id),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["changed"], true);
    assert!(banned_in(&beta.sandbox, "testauth").contains("192.0.2.10"));
    assert!(!banned_in(&alpha.sandbox, "testauth").contains("192.0.2.10"));

    // By name too, and without the header the default (oldest) server answers.
    let (status, _) = fleet
        .post(
            "/api/jails/testauth/ban/192.0.2.11",
            Some("alpha"),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(banned_in(&alpha.sandbox, "testauth").contains("192.0.2.11"));
    let (status, summary) = fleet.get("/api/summary", None).await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(summary["server"]["id"], alpha.id.as_str());

    let (status, summary) = fleet.get("/api/summary", Some(&beta.id)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(summary["server"]["name"], "beta");
    let jails: Vec<&str> = summary["jails"]
        .as_array()
        .expect("jails")
        .iter()
        .map(|j| j["name"].as_str().expect("name"))
        .collect();
    assert!(
        jails.contains(&"testauth") && jails.contains(&"dummyjail"),
        "{summary}"
    );

    // An unknown server is a 404; garbage in the header is refused.
    let (status, problem) = fleet
        .get("/api/summary", Some("00000000-0000-0000-0000-000000000000"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["code"], "unknown_server");
    let (status, _) = fleet.get("/api/summary", Some("../etc")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_log_burst_bans_an_ip_that_shows_in_summary_and_banned_list() {
    let fleet = start(&["alpha"]).await;
    let host = fleet.host(0);
    let log = host.sandbox.log_path("testauth");
    host.sandbox
        .append_failures(&log, "203.0.113.77", 5)
        .expect("log lines");
    let summary = wait_for_async(DEADLINE, "the ban to show in the summary", || async {
        let (_, summary) = fleet.get("/api/summary", Some(&host.id)).await;
        summary["jails"]
            .as_array()?
            .iter()
            .find(|j| j["name"] == "testauth" && j["currentlyBanned"] == 1)
            .cloned()
    })
    .await
    .expect("banned");
    assert!(
        summary["totalFailed"].as_u64().is_some_and(|n| n >= 3),
        "{summary}"
    );
    assert!(
        summary["fileList"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    );

    let (status, page) = fleet
        .get("/api/jails/testauth/banned", Some(&host.id))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 1);
    let item = &page["items"][0];
    assert_eq!(item["ip"], "203.0.113.77");
    assert!(item["bannedAt"].is_string(), "{item}");
    assert!(item["expiresAt"].is_string(), "{item}");
}

#[tokio::test]
async fn manual_bans_paging_and_unbans_reach_fail2ban() {
    let fleet = start(&["alpha"]).await;
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    for i in 1..=12 {
        let (status, body) = fleet
            .post(
                &format!("/api/jails/dummyjail/ban/198.51.100.{i}"),
                server,
                &json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = fleet
        .post("/api/jails/dummyjail/ban/2001:db8::7", server, &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let banned = banned_in(&host.sandbox, "dummyjail");
    assert!(
        banned.contains("198.51.100.12") && banned.contains("2001:db8::7"),
        "{banned}"
    );

    // Paging and search.
    let (_, page) = fleet
        .get("/api/jails/dummyjail/banned?limit=5&offset=10", server)
        .await;
    assert_eq!(page["total"], 13, "{page}");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(3), "{page}");
    let (_, found) = fleet
        .get("/api/jails/dummyjail/banned?search=2001:db8", server)
        .await;
    assert_eq!(found["total"], 1, "{found}");
    assert_eq!(found["items"][0]["ip"], "2001:db8::7");

    // Banning again changes nothing; unbanning lifts it in fail2ban.
    let (_, again) = fleet
        .post("/api/jails/dummyjail/ban/198.51.100.1", server, &json!({}))
        .await;
    assert_eq!(again["changed"], false, "{again}");
    let (status, body) = fleet
        .post(
            "/api/jails/dummyjail/unban/198.51.100.1",
            server,
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], true);
    assert!(!banned_in(&host.sandbox, "dummyjail").contains("198.51.100.1'"));

    // Unban everywhere lifts it in every jail of every server.
    let (_, _) = fleet
        .post("/api/jails/testauth/ban/198.51.100.2", server, &json!({}))
        .await;
    let (status, result) = fleet
        .post(
            "/api/bans/unban-everywhere",
            None,
            &json!({"ip": "198.51.100.2"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["servers"][0]["ok"], true, "{result}");
    assert!(!banned_in(&host.sandbox, "dummyjail").contains("198.51.100.2'"));
    assert!(!banned_in(&host.sandbox, "testauth").contains("198.51.100.2'"));
}

#[tokio::test]
async fn enabling_a_jail_with_a_broken_filter_is_refused_and_nothing_changes() {
    let fleet = start(&["alpha"]).await;
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let conf = host.sandbox.conf_dir();
    // The operator's existing configuration has a disabled jail whose filter does not compile.
    std::fs::write(
        conf.join("filter.d/broken.conf"),
        "[Definition]\nfailregex = ^Failed (unclosed <HOST>\n",
    )
    .expect("filter");
    std::fs::write(
        conf.join("jail.local"),
        format!(
            "[brokenjail]\nenabled = false\nfilter = broken\nlogpath = {}\n",
            host.sandbox.log_path("testauth").display()
        ),
    )
    .expect("jail.local");
    let before = snapshot(&conf);

    let (status, list) = fleet.get("/api/jails/manage", server).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let broken = list["jails"]
        .as_array()
        .expect("jails")
        .iter()
        .find(|j| j["name"] == "brokenjail")
        .cloned()
        .unwrap_or_else(|| panic!("brokenjail not listed: {list}"));
    assert_eq!(broken["enabled"], false);

    let (status, problem) = fleet
        .post(
            "/api/jails/manage",
            server,
            &json!({"jails": [{"name": "brokenjail", "enabled": true}]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "config_invalid", "{problem}");
    assert_eq!(
        snapshot(&conf),
        before,
        "a refused change left files behind"
    );
    assert_eq!(
        host.sandbox.client(&["ping"]).expect("fail2ban answers"),
        "Server replied: pong"
    );
    let status_text = host.sandbox.client(&["status"]).expect("status");
    assert!(
        !status_text.contains("brokenjail") && status_text.contains("testauth"),
        "{status_text}"
    );

    // Disabling and enabling a healthy jail works, in one request.
    let (status, change) = fleet
        .post(
            "/api/jails/manage",
            server,
            &json!({"jails": [{"name": "dummyjail", "enabled": false}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert!(
        !host
            .sandbox
            .client(&["status"])
            .expect("status")
            .contains("dummyjail")
    );
    let (status, change) = fleet
        .post(
            "/api/jails/manage",
            server,
            &json!({"jails": [{"name": "dummyjail", "enabled": true}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert!(
        host.sandbox
            .client(&["status"])
            .expect("status")
            .contains("dummyjail")
    );
}

#[tokio::test]
async fn jail_config_is_versioned_validated_and_applied() {
    let fleet = start(&["alpha"]).await;
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let (status, config) = fleet.get("/api/jails/testauth/config", server).await;
    assert_eq!(status, StatusCode::OK, "{config}");
    assert_eq!(config["filter"], "testauth", "{config}");
    let version = config["jailOverride"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let (status, change) = fleet
        .post(
            "/api/jails/testauth/config",
            server,
            &json!({
                "jailOverride": {"content": "[testauth]\nmaxretry = 7\n", "version": version}
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert_eq!(
        host.sandbox
            .client(&["get", "testauth", "maxretry"])
            .expect("maxretry"),
        "7"
    );

    // The old version is stale now: refused, nothing changed.
    let (status, problem) = fleet
        .post(
            "/api/jails/testauth/config",
            server,
            &json!({
                "jailOverride": {"content": "[testauth]\nmaxretry = 9\n", "version": version}
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(
        host.sandbox
            .client(&["get", "testauth", "maxretry"])
            .expect("maxretry"),
        "7"
    );

    // A filter fail2ban cannot compile is refused with fail2ban's words, and the old one stays.
    let (_, config) = fleet.get("/api/jails/testauth/config", server).await;
    let filter_version = config["filterLocal"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let before = snapshot(&host.sandbox.conf_dir());
    let (status, problem) = fleet.post("/api/jails/testauth/config", server, &json!({
        "filterLocal": {"content": "[Definition]\nfailregex = ^(unclosed <HOST>\n", "version": filter_version}
    })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "config_invalid");
    assert!(
        problem["details"].as_array().is_some_and(|d| !d.is_empty()),
        "{problem}"
    );
    assert_eq!(snapshot(&host.sandbox.conf_dir()), before);
    assert_eq!(
        host.sandbox.client(&["ping"]).expect("ping"),
        "Server replied: pong"
    );
}

#[tokio::test]
async fn filter_test_and_restart() {
    let fleet = start(&["alpha"]).await;
    let server = Some(fleet.host(0).id.as_str());
    let (status, filters) = fleet.get("/api/filters", server).await;
    assert_eq!(status, StatusCode::OK, "{filters}");
    assert!(
        filters["filters"]
            .as_array()
            .is_some_and(|f| f.iter().any(|n| n == "testauth")),
        "{filters}"
    );

    let lines = [
        "2026-11-22 10:00:00 Failed login for bob from 192.0.2.1",
        "2026-11-22 10:00:01 Accepted login for bob from 192.0.2.2",
        "2026-11-22 10:00:02 Failed login for eve from 2001:db8::9",
    ];
    let (status, result) = fleet
        .post(
            "/api/filters/test",
            server,
            &json!({"filter": "testauth", "lines": lines}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["matchedCount"], 2, "{result}");
    let indexes: Vec<u64> = result["matched"]
        .as_array()
        .expect("matched")
        .iter()
        .map(|m| m["index"].as_u64().expect("index"))
        .collect();
    assert_eq!(indexes, vec![0, 2]);
    let ips = result["ips"].as_array().expect("ips");
    assert!(
        ips.iter().any(|ip| ip == "192.0.2.1") && ips.iter().any(|ip| ip == "2001:db8::9"),
        "{result}"
    );

    // Edited filter text that is not saved.
    let text = "[Definition]\nfailregex = ^\\s*Accepted login for \\S+ from <HOST>$\ndatepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n";
    let (status, result) = fleet
        .post(
            "/api/filters/test",
            server,
            &json!({"filterText": text, "lines": lines}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["matchedCount"], 1, "{result}");

    for mode in ["reload", "restart"] {
        let (status, result) = fleet
            .post("/api/bandaemon/restart", server, &json!({"mode": mode}))
            .await;
        assert_eq!(status, StatusCode::OK, "{mode}: {result}");
        assert_eq!(result["ok"], true, "{mode}: {result}");
        let running = result["runningJails"].as_array().expect("running");
        assert!(running.iter().any(|j| j == "testauth"), "{mode}: {result}");
        assert_eq!(
            result["failedJails"].as_array().map(Vec::len),
            Some(0),
            "{mode}: {result}"
        );
    }
    assert_eq!(
        fleet.host(0).sandbox.client(&["ping"]).expect("ping"),
        "Server replied: pong"
    );
}

#[tokio::test]
async fn attacks_are_refused_without_side_effects() {
    let fleet = start(&["alpha"]).await;
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let conf = host.sandbox.conf_dir();
    let before = snapshot(&conf);
    let banned_before = banned_in(&host.sandbox, "testauth");

    for path in [
        "/api/jails/..%2F..%2Fetc/config",
        "/api/jails/%2Fetc%2Fpasswd/config",
        "/api/jails/a%0Ab/config",
        "/api/jails/%5BDEFAULT%5D/config",
        "/api/jails/DEFAULT/config",
        "/api/jails/INCLUDES/config",
    ] {
        let (status, problem) = fleet.get(path, server).await;
        assert!(status.is_client_error(), "{path}: {status} {problem}");
        let (status, problem) = fleet
            .post(path, server, &json!({"jailOverride": {"content": "[x]\n"}}))
            .await;
        assert!(status.is_client_error(), "{path}: {status} {problem}");
    }
    for ip in [
        "not-an-ip",
        "1.2.3.4%3B%20reboot",
        "0.0.0.0%2F0",
        "999.1.1.1",
        "127.0.0.1",
    ] {
        let (status, problem) = fleet
            .post(&format!("/api/jails/testauth/ban/{ip}"), server, &json!({}))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{ip}: {problem}");
    }
    // Section and newline injection in config values.
    let injections = [
        json!({"jailOverride": {"content": "[testauth]\nmaxretry = 3\n[DEFAULT]\nignoreip = 0.0.0.0/0\n"}}),
        json!({"jailOverride": {"content": "[dummyjail]\nenabled = false\n"}}),
        json!({"filterLocal": {"content": "[Definition]\nfailregex = x\n[testauth]\nenabled = false\n"}}),
        json!({"jailOverride": {"content": "[testauth]\nmaxretry = 3\u{0}\n"}}),
    ];
    for body in injections {
        let (status, problem) = fleet
            .post("/api/jails/testauth/config", server, &body.clone())
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
    }
    for entries in [
        json!(["192.0.2.1\nbantime = 1"]),
        json!(["[DEFAULT]"]),
        json!(["a b"]),
    ] {
        let (status, problem) = fleet
            .post(
                "/api/jails/testauth/ignoreip",
                server,
                &json!({"entries": entries}),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{entries}: {problem}"
        );
    }
    // An oversized body.
    let huge = "#".repeat(300 * 1024);
    let (status, problem) = fleet
        .post(
            "/api/jails/testauth/config",
            server,
            &json!({"jailOverride": {"content": huge}}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{problem}");

    assert_eq!(
        snapshot(&conf),
        before,
        "a refused request changed the configuration"
    );
    assert_eq!(banned_in(&host.sandbox, "testauth"), banned_before);
}

#[tokio::test]
async fn allowlists_round_trip_and_an_offline_agent_is_a_503() {
    let mut fleet = start(&["alpha"]).await;
    let server_id = fleet.host(0).id.clone();
    let server = Some(server_id.as_str());
    let (status, list) = fleet.get("/api/jails/testauth/ignoreip", server).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let version = list["version"].as_str().unwrap_or_default().to_owned();
    let (status, change) = fleet
        .post(
            "/api/jails/testauth/ignoreip",
            server,
            &json!({
                "entries": ["192.0.2.0/24", "monitor.example.com"], "version": version
            }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    let ignored = fleet
        .host(0)
        .sandbox
        .client(&["get", "testauth", "ignoreip"])
        .expect("ignoreip");
    assert!(ignored.contains("192.0.2.0/24"), "{ignored}");

    // The agent stops: the hub says the agent is offline.
    fleet.hosts[0].agent.stop().expect("agent stops");
    wait_for_async(DEADLINE, "the server to be offline", || async {
        let (_, s) = fleet.get(&format!("/api/servers/{server_id}"), None).await;
        (s["status"] == "offline").then_some(())
    })
    .await
    .expect("offline");
    let (status, problem) = fleet.get("/api/summary", server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert_eq!(problem["code"], "agent_offline");
}
