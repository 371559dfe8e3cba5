//! Guard rails and the name and address rules, probed through the hub against real fail2ban hosts:
//! wide and broadcast bans need an admin's override, allowlists never cover everything, the hub's
//! own addresses are never banned, a mapped IPv6 address is its IPv4 address, reserved section
//! names are refused on every route, and a jail the host does not define cannot be enabled.

mod agent;

use std::time::Duration;

use banhub_tests::fleet::snapshot;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use banhub_tests::{TestFleet, TestHost};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(20);

/// The address the hub under test is told it is reached at (`auth.public_url`).
const HUB_ADDRESS: &str = "203.0.113.9";

/// fail2ban's allowlist of `jail`, as it applies it.
fn ignored(host: &TestHost, jail: &str) -> String {
    host.sandbox
        .client(&["get", jail, "ignoreip"])
        .expect("fail2ban lists its allowlist")
}

/// The path of a ban (or unban) of `ip` in `jail`, `/` encoded.
fn ban_path(verb: &str, jail: &str, ip: &str) -> String {
    format!("/api/jails/{jail}/{verb}/{}", ip.replace('/', "%2F"))
}

/// `POST path` with `body` as the given client (an operator's, say), to `server`.
async fn post_as(
    fleet: &TestFleet,
    client: &reqwest::Client,
    path: &str,
    server: Option<&str>,
    body: &Value,
) -> (StatusCode, Value) {
    fleet
        .send(client.post(fleet.hub.url(path)).json(body), server)
        .await
}

/// The audit entries of the hub, newest first.
async fn audit(fleet: &TestFleet) -> Vec<Value> {
    let (status, page) = fleet.get("/api/audit?limit=500", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["entries"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn wide_and_broadcast_bans_need_an_admin_override() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let operator = fleet.hub.client_as("operator").await.expect("operator");

    // The review's probes, then networks that cover no address of any machine (reserved class E
    // space, the IPv6 documentation prefix of RFC 9637) and one that covers loopback, a hub
    // address on every machine. Whether the review's wide probes cover one of this machine's own addresses
    // depends on its interfaces: such a ban is refused even with the override.
    let mut accepted = 0;
    for (ip, expected) in [
        ("128.0.0.0/1", None),
        ("64.0.0.0/2", Some("guard_hub_address")),
        ("8000::/1", None),
        ("2000::/3", None),
        ("255.255.255.255", Some("guard_broadcast")),
        ("240.0.0.0/5", Some("guard_wide_network")),
        ("3fff::/20", Some("guard_wide_network")),
    ] {
        let path = ban_path("ban", "testauth", ip);
        let before = host.banned("testauth");

        let (status, problem) = fleet.post(&path, server, &json!({})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{ip}: {problem}");
        let rule = problem["code"].as_str().unwrap_or_default().to_owned();
        match expected {
            Some(expected) => assert_eq!(rule, expected, "{ip}: {problem}"),
            None => assert!(
                rule == "guard_wide_network" || rule == "guard_hub_address",
                "{ip}: {problem}"
            ),
        }
        assert_eq!(problem["field"], "ip", "{ip}: {problem}");
        let first_detail = problem["detail"].as_str().unwrap_or_default().to_owned();
        assert_eq!(host.banned("testauth"), before, "{ip} reached fail2ban");

        let (status, problem) =
            post_as(&fleet, &operator, &path, server, &json!({"override": true})).await;
        assert!(
            status == StatusCode::FORBIDDEN || rule == "guard_hub_address",
            "{ip}: {status} {problem}"
        );
        assert_eq!(host.banned("testauth"), before, "{ip} reached fail2ban");

        let (status, outcome) = fleet.post(&path, server, &json!({"override": true})).await;
        if rule == "guard_hub_address" {
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{ip}: {outcome}");
            assert_eq!(outcome["code"], "guard_hub_address", "{ip}: {outcome}");
            let detail = outcome["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("no override"), "{ip}: {detail}");
            assert_eq!(host.banned("testauth"), before, "{ip} reached fail2ban");
            continue;
        }
        assert!(
            first_detail.contains("\"override\": true"),
            "{ip}: {first_detail}"
        );
        assert_eq!(status, StatusCode::OK, "{ip}: {outcome}\n{}", fleet.logs());
        assert_eq!(outcome["changed"], true, "{ip}: {outcome}");
        assert!(
            host.banned("testauth").contains(&format!("'{ip}'")),
            "{ip} not in {}",
            host.banned("testauth")
        );
        accepted += 1;
    }
    assert!(accepted >= 3, "the override lifted only {accepted} rails");

    // The same rails on fleet bans: refused without the override, nothing queued; done with it.
    let fleet_ban = json!({"ip": "255.255.255.255", "jail": "dummyjail", "all": true});
    let (status, problem) = fleet.post("/api/fleet/bans", None, &fleet_ban).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "guard_broadcast", "{problem}");
    let (status, problem) = post_as(
        &fleet,
        &operator,
        "/api/fleet/bans",
        None,
        &json!({"ip": "255.255.255.255", "jail": "dummyjail", "all": true, "override": true}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let (_, actions) = fleet.get("/api/fleet/actions", None).await;
    assert_eq!(actions, json!([]), "a refused fleet ban was queued");
    assert!(!host.banned("dummyjail").contains("255.255.255.255"));
    let (status, action) = fleet
        .post(
            "/api/fleet/bans",
            None,
            &json!({"ip": "255.255.255.255", "jail": "dummyjail", "all": true, "override": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{action}");
    assert_eq!(action["counts"], json!({"done": 1}), "{action}");
    assert!(host.banned("dummyjail").contains("'255.255.255.255'"));

    // Each override is in the audit log with the rule it lifted.
    let entries = wait_for_async(DEADLINE, "the overrides in the audit log", || async {
        let entries: Vec<Value> = audit(&fleet)
            .await
            .into_iter()
            .filter(|e| {
                e["detail"]["guardOverride.ip"].is_object()
                    && (e["status"] == 200 || e["status"] == 201)
            })
            .collect();
        (entries.len() == accepted + 1).then_some(entries)
    })
    .await
    .expect("every override audited");
    let rules: Vec<&str> = entries
        .iter()
        .filter_map(|e| e["detail"]["guardOverride.ip"]["rule"].as_str())
        .collect();
    assert_eq!(
        rules.iter().filter(|r| **r == "wide_network").count(),
        accepted - 1,
        "{rules:?}"
    );
}

#[tokio::test]
async fn allowlists_refuse_everything_and_ask_for_the_override_on_wide_networks() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let conf = host.sandbox.conf_dir();
    let files = snapshot(&conf);
    let lists = [ignored(host, "testauth"), ignored(host, "dummyjail")];

    let (status, list) = fleet.get("/api/ignoreip", server).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let version = list["version"].as_str().unwrap_or_default().to_owned();

    for (path, entries) in [
        ("/api/ignoreip", json!(["0.0.0.0/0", "::/0"])),
        ("/api/ignoreip", json!(["192.0.2.0/24", "::ffff:0:0/96"])),
        ("/api/jails/testauth/ignoreip", json!(["::/0"])),
    ] {
        for override_rails in [false, true] {
            let body = json!({"entries": entries, "version": version, "override": override_rails});
            let (status, problem) = fleet.post(path, server, &body).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {entries}: {problem}"
            );
            assert_eq!(problem["code"], "guard_covers_everything", "{problem}");
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("no override")),
                "{problem}"
            );
        }
    }
    let wide = json!({"entries": ["192.0.2.0/24", "64.0.0.0/2"], "version": version});
    let (status, problem) = fleet.post("/api/ignoreip", server, &wide).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "guard_wide_network", "{problem}");
    assert_eq!(problem["field"], "entries[1]", "{problem}");

    assert_eq!(
        snapshot(&conf),
        files,
        "a refused allowlist changed the files"
    );
    assert_eq!(
        [ignored(host, "testauth"), ignored(host, "dummyjail")],
        lists,
        "a refused allowlist reached fail2ban"
    );

    // With an admin's override the wide network is written and every jail applies it.
    let mut forced = wide.clone();
    forced["override"] = json!(true);
    let (status, change) = fleet.post("/api/ignoreip", server, &forced).await;
    assert_eq!(status, StatusCode::OK, "{change}\n{}", fleet.logs());
    wait_until_async(DEADLINE, "every jail to ignore 64.0.0.0/2", || async {
        ignored(host, "testauth").contains("64.0.0.0/2")
            && ignored(host, "dummyjail").contains("64.0.0.0/2")
    })
    .await
    .expect("the allowlist applies");
}

#[tokio::test]
async fn the_hubs_own_addresses_are_never_banned() {
    let public_url = format!("http://{HUB_ADDRESS}:8080");
    let fleet = TestFleet::start_configured(
        &["alpha"],
        &[("BANHUB_AUTH__PUBLIC_URL", public_url.as_str())],
        &[],
    )
    .await
    .expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let before = host.banned("testauth");

    let loopback = ["127.0.0.1", "::1", "::ffff:127.0.0.1"];
    let public = [HUB_ADDRESS, "203.0.113.0/24", "203.0.0.0/16", "203.0.0.0/8"];
    for ip in loopback.into_iter().chain(public) {
        let (status, problem) = fleet
            .post(
                &ban_path("ban", "testauth", ip),
                server,
                &json!({"override": true}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{ip}: {problem}");
        // Loopback is refused by the address rule itself, before any guard rail.
        if loopback.contains(&ip) {
            continue;
        }
        assert_eq!(problem["code"], "guard_hub_address", "{ip}: {problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(HUB_ADDRESS)),
            "{problem}"
        );
    }
    let (status, problem) = fleet
        .post(
            "/api/fleet/bans",
            None,
            &json!({"ip": HUB_ADDRESS, "jail": "testauth", "all": true, "override": true}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "guard_hub_address", "{problem}");
    let (_, actions) = fleet.get("/api/fleet/actions", None).await;
    assert_eq!(actions, json!([]), "a refused fleet ban was queued");
    assert_eq!(
        host.banned("testauth"),
        before,
        "a hub address reached fail2ban"
    );

    // An address beside the hub's is an ordinary ban.
    let (status, outcome) = fleet
        .post(
            &ban_path("ban", "testauth", "203.0.113.10"),
            server,
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert!(host.banned("testauth").contains("'203.0.113.10'"));
}

#[tokio::test]
async fn a_mapped_ipv6_ban_and_its_unban_act_on_one_entry() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());

    let (status, outcome) = fleet
        .post(
            &ban_path("ban", "testauth", "::ffff:192.0.2.7"),
            server,
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["ip"], "192.0.2.7", "{outcome}");
    assert_eq!(outcome["changed"], true, "{outcome}");
    assert!(host.banned("testauth").contains("'192.0.2.7'"));

    let (status, outcome) = fleet
        .post(
            &ban_path("unban", "testauth", "::ffff:192.0.2.7"),
            server,
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["changed"], true, "{outcome}");
    let left = host.banned("testauth");
    assert!(
        !left.contains("192.0.2.7"),
        "the ban stayed in fail2ban: {left}"
    );
}

#[tokio::test]
async fn reserved_section_names_are_refused_by_fleet_bans() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let before = [host.banned("testauth"), host.banned("dummyjail")];

    for jail in ["DEFAULT", "INCLUDES", "default", "KNOWN", "banhub-defaults"] {
        let body = json!({"ip": "192.0.2.9", "jail": jail, "all": true});
        let (status, problem) = fleet.post("/api/fleet/bans", None, &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{jail}: {problem}"
        );
        assert_eq!(problem["field"], "jail", "{jail}: {problem}");
        // The jail routes give the same answer, from the same rule.
        let (status, same) = fleet
            .post(
                &ban_path("ban", jail, "192.0.2.9"),
                Some(host.id.as_str()),
                &json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{jail}: {same}");
        assert_eq!(same["detail"], problem["detail"], "{jail}");
    }
    let (status, actions) = fleet.get("/api/fleet/actions", None).await;
    assert_eq!(status, StatusCode::OK, "{actions}");
    assert_eq!(actions, json!([]), "a refused fleet ban was queued");
    assert_eq!([host.banned("testauth"), host.banned("dummyjail")], before);
}

#[tokio::test]
async fn banhubs_own_jails_are_refused_by_every_write_of_the_hub() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let files = snapshot(&host.sandbox.conf_dir());

    for jail in ["banhub-shared", "banhub-probe"] {
        let writes = [
            (
                format!("/api/jails/{jail}/config"),
                json!({"jailOverride": {"content": format!("[{jail}]\nenabled = false\n")}}),
            ),
            (
                "/api/jails/manage".to_owned(),
                json!({"jails": [{"name": jail, "enabled": false}]}),
            ),
            (
                format!("/api/jails/{jail}/ignoreip"),
                json!({"entries": ["192.0.2.0/24"]}),
            ),
            (ban_path("ban", jail, "192.0.2.9"), json!({})),
        ];
        for (path, body) in writes {
            let (status, problem) = fleet.post(&path, server, &body).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path}: {problem}"
            );
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("banhub's own jail")),
                "{path}: {problem}"
            );
        }
    }
    assert_eq!(snapshot(&host.sandbox.conf_dir()), files);
}

#[tokio::test]
async fn enabling_a_jail_the_host_does_not_define_is_a_404() {
    let fleet = TestFleet::start(&["alpha"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let conf = host.sandbox.conf_dir();
    let files = snapshot(&conf);

    for enabled in [true, false] {
        let body = json!({"jails": [{"name": "Definition", "enabled": enabled}]});
        let (status, problem) = fleet.post("/api/jails/manage", server, &body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{problem}\n{}", fleet.logs());
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("Definition")),
            "{problem}"
        );
    }
    // One unknown jail among known ones: the whole change is refused.
    let body = json!({"jails": [{"name": "dummyjail", "enabled": false},
                                {"name": "Definition", "enabled": true}]});
    let (status, problem) = fleet.post("/api/jails/manage", server, &body).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");

    assert!(!conf.join("jail.d/Definition.local").exists());
    assert_eq!(snapshot(&conf), files, "a refused change wrote files");
    assert!(
        host.sandbox
            .client(&["status"])
            .expect("status")
            .contains("dummyjail"),
        "dummyjail stopped"
    );
}
