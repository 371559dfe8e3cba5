//! Fleet defence end to end, with three real fail2ban hosts and their agents (each with the banhub
//! action and the `banhub-shared` jail installed): a fleet recidive rule bans an address banned on
//! two of the three hosts on every host, in fail2ban's shared jail, and a second firing climbs to
//! the ladder's next step; the storm breaker pauses sharing from a host whose bans would pass the
//! configured limit, says so through the API, the metrics and a webhook, while every event is
//! still stored, and sharing goes on once an admin resumes the host (both also on PostgreSQL), with
//! the breaker's window counted in the store so two replicas count one (`window`); bad rules are
//! refused with 422s naming the field.

use std::time::Duration;

use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::hub::HubBuilder;
use banhub_tests::wait::{wait_for_async, wait_until};
use banhub_tests::webhook::WebhookReceiver;
use banhub_tests::{PostgresServer, TestFleet, TestHost};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(45);
const SHARED: &str = "banhub-shared";

/// A hub started by `hub` and the hosts `a`, `b`, `c`, each online with the action and the
/// shared jail installed.
async fn start(hub: HubBuilder) -> TestFleet {
    TestFleet::with_action_installed(hub, &["a", "b", "c"])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn wait_banned(fleet: &TestFleet, host: &TestHost, jail: &str, ip: &str) {
    wait_until(
        DEADLINE,
        &format!("{ip} banned in {}'s {jail}", host.name),
        || host.banned(jail).contains(ip),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

/// Three failures of `ip` in `host`'s `testauth` log: fail2ban bans it and its action reports it.
fn attack(fleet: &TestFleet, host: &TestHost, ip: &str) {
    host.sandbox
        .append_failures(&host.sandbox.log_path("testauth"), ip, 3)
        .expect("log lines");
    wait_banned(fleet, host, "testauth", ip);
}

async fn shared_bans(fleet: &TestFleet, query: &str) -> Vec<Value> {
    let (status, bans) = fleet.api().get(&format!("/api/sharing/bans?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{bans}");
    bans.as_array().cloned().unwrap_or_default()
}

/// Waits until `ip` has `n` shared bans made by a recidive rule at ladder step `step`.
async fn wait_rule_bans(fleet: &TestFleet, ip: &str, step: u64, n: usize) -> Vec<Value> {
    let found = wait_for_async(DEADLINE, "the recidive rule's shared bans", || async move {
        let bans: Vec<Value> = shared_bans(fleet, &format!("ip={ip}"))
            .await
            .into_iter()
            .filter(|b| b["sourceKind"] == "rule" && b["step"] == step)
            .collect();
        (bans.len() == n).then_some(bans)
    })
    .await;
    found.unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()))
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// Seconds from the origin's ban to the shared ban's expiry, within a few seconds of rounding.
fn lasts_about(ban: &Value, secs: i64) -> bool {
    let lasts = (time(&ban["expiresAt"]) - time(&ban["createdAt"])).num_seconds();
    (secs - 30..=secs + 5).contains(&lasts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_banned_on_two_hosts_is_banned_on_every_host_and_escalates() {
    recidive_scenario(&start(TestFleet::hub_builder()).await).await;
}

/// The same on PostgreSQL: the rules, their firings and an address's sightings in the other
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recidive_escalates_on_postgresql() {
    let postgres =
        PostgresServer::start().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_recidive")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    recidive_scenario(&start(TestFleet::hub_builder().database_url(url)).await).await;
}

async fn recidive_scenario(fleet: &TestFleet) {
    let (status, rule) = fleet
        .api()
        .post(
            "/api/sharing/recidive",
            &json!({"name": "spread", "sources": {"all": true}, "jails": ["test*"],
                    "minServers": 2, "windowSecs": 600, "targets": {"all": true},
                    "ladderSecs": [600, 7200], "cooldownSecs": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    let ip = "203.0.113.60";
    let (a, b, c) = (&fleet.hosts[0], &fleet.hosts[1], &fleet.hosts[2]);

    // Banned on one host: below the rule's two servers. The hub stores that ban before the second
    // host's, so that the second is the one that fires the rule.
    attack(fleet, a, ip);
    wait_stored_ban(fleet, a, ip, 1).await;
    // Banned on a second host within the window: the rule fires, on every host.
    attack(fleet, b, ip);
    let first = wait_rule_bans(fleet, ip, 1, 3).await;
    for ban in &first {
        assert_eq!(ban["policyName"], "spread", "{ban}");
        assert_eq!(ban["originJail"], "testauth", "{ban}");
        assert_eq!(
            ban["originServerName"], "b",
            "the second ban fired it: {ban}"
        );
        assert!(lasts_about(ban, 600), "the ladder's first step: {ban}");
    }
    // The host that never saw the address bans it in fail2ban's shared jail, and so do the two
    // that did, for the rule's longer time.
    for host in [c, a, b] {
        wait_banned(fleet, host, SHARED, ip);
    }

    // Banned again on two hosts: the second firing takes the next step.
    for host in [a, b] {
        host.sandbox
            .client(&["set", "testauth", "unbanip", ip])
            .expect("unban in testauth");
    }
    attack(fleet, a, ip);
    wait_stored_ban(fleet, a, ip, 2).await;
    attack(fleet, b, ip);
    let second = wait_rule_bans(fleet, ip, 2, 3).await;
    for ban in &second {
        assert!(lasts_about(ban, 7200), "the ladder's second step: {ban}");
    }
    wait_banned(fleet, c, SHARED, ip);
    // The shared jail's own bans never counted as evidence: two firings, six shared bans.
    let all = shared_bans(fleet, &format!("ip={ip}")).await;
    assert_eq!(all.len(), 6, "{all:?}");
}

/// A recidive rule that fires for an address of a protected network records its bans as skipped,
/// naming the lockout guard's rule, and no host's fail2ban bans it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recidive_ban_of_a_protected_network_is_skipped_and_never_sent() {
    let fleet = start(TestFleet::hub_builder()).await;
    let (status, rule) = fleet
        .api()
        .post(
            "/api/sharing/recidive",
            &json!({"name": "spread", "sources": {"all": true}, "jails": ["test*"],
                    "minServers": 2, "windowSecs": 600, "targets": {"all": true},
                    "ladderSecs": [600], "cooldownSecs": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    let (status, entry) = fleet
        .api()
        .post(
            "/api/protected-networks",
            &json!({"network": "198.51.100.0/24", "note": "office VPN"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{entry}");

    // fail2ban's own jails ignore the network now, so the two bans come as its action would
    // report them.
    let ip = "198.51.100.77".to_owned();
    let (a, b) = (&fleet.hosts[0], &fleet.hosts[1]);
    report_bans(a, std::slice::from_ref(&ip)).await;
    report_bans(b, std::slice::from_ref(&ip)).await;

    let found = wait_for_async(DEADLINE, "the rule's bans, all skipped", || {
        let ip = ip.clone();
        let fleet = &fleet;
        async move {
            let bans: Vec<Value> = shared_bans(fleet, &format!("ip={ip}"))
                .await
                .into_iter()
                .filter(|b| b["sourceKind"] == "rule")
                .collect();
            (bans.len() == 3 && bans.iter().all(|b| b["status"] == "skipped")).then_some(bans)
        }
    })
    .await;
    let bans = found.unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    for ban in &bans {
        assert!(
            ban["skipReason"].as_str().is_some_and(
                |r| r.starts_with("protected_network:") && r.contains("198.51.100.0/24")
            ),
            "{ban}"
        );
    }
    for host in &fleet.hosts {
        assert!(
            !host.banned(SHARED).contains(&ip),
            "{} holds a ban of a protected address",
            host.name
        );
    }
}

/// fail2ban's action on `host` reporting `ips` banned in `testauth`, through its agent's relay.
async fn report_bans(host: &TestHost, ips: &[String]) {
    let relay = relay_addr(&host.state_dir()).expect("relay address");
    let secret = relay_secret(&host.state_dir()).expect("relay secret");
    let client = reqwest::Client::new();
    for ip in ips {
        let body = json!({"ip": ip, "jail": "testauth", "hostname": host.name, "failures": 3,
                          "logs": [format!("auth failure from {ip}")]});
        let response = client
            .post(format!("http://{relay}/api/ban"))
            .header("X-Callback-Secret", &secret)
            .json(&body)
            .send()
            .await
            .expect("the relay answers");
        assert_eq!(response.status(), StatusCode::OK, "{ip}");
    }
}

/// Waits until the hub has stored `n` bans of `ip` by `host`'s testauth jail.
async fn wait_stored_ban(fleet: &TestFleet, host: &TestHost, ip: &str, n: usize) {
    wait_for_async(DEADLINE, "the host's ban stored by the hub", || async {
        let (status, page) = fleet
            .api()
            .get(&format!(
                "/api/events/bans?serverId={}&kind=ban&jail=testauth&ip={ip}",
                host.id
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        (page["events"].as_array().map_or(0, Vec::len) >= n).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

async fn stored_bans(fleet: &TestFleet, host: &TestHost) -> usize {
    let (status, page) = fleet
        .api()
        .get(&format!(
            "/api/events/bans?serverId={}&kind=ban&jail=testauth&limit=1000",
            host.id
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["events"].as_array().map_or(0, Vec::len)
}

async fn pauses(fleet: &TestFleet) -> Vec<Value> {
    let (status, pauses) = fleet.api().get("/api/sharing/pauses").await;
    assert_eq!(status, StatusCode::OK, "{pauses}");
    pauses.as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_pauses_sharing_from_its_host_until_an_admin_resumes_it() {
    let hub = TestFleet::hub_builder().env("BANHUB_DEFENCE__STORM_LIMIT_PER_MINUTE", "5");
    storm_scenario(&start(hub).await).await;
}

/// The same on PostgreSQL: the pauses (one open per server) in the other backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_pauses_its_host_on_postgresql() {
    let postgres =
        PostgresServer::start().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_storm")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let hub = TestFleet::hub_builder()
        .database_url(url)
        .env("BANHUB_DEFENCE__STORM_LIMIT_PER_MINUTE", "5");
    storm_scenario(&start(hub).await).await;
}

async fn storm_scenario(fleet: &TestFleet) {
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let (_, current) = fleet.api().get("/api/settings").await;
    let (status, saved) = fleet
        .api()
        .post(
            "/api/settings",
            &json!({"version": current["version"], "alerts": {
                "webhooks": [{"name": "ops", "format": "json", "url": receiver.url("/ops")}]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let (status, policy) = fleet
        .api()
        .post(
            "/api/sharing/policies",
            &json!({"name": "everywhere", "sources": {"all": true}, "targets": {"all": true},
                    "duration": {"mode": "fixed", "seconds": 3600}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{policy}");
    let (a, b) = (&fleet.hosts[0], &fleet.hosts[1]);

    // Twenty bans on A at once, each shared with B and C: the third would pass five shared bans
    // a minute, so A is paused after two.
    let storm: Vec<String> = (1..=20).map(|i| format!("203.0.113.{i}")).collect();
    report_bans(a, &storm).await;
    let paused = wait_for_async(DEADLINE, "A's sharing paused", || async {
        let p = pauses(fleet).await;
        (!p.is_empty()).then_some(p)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0]["server"], a.id.as_str(), "{paused:?}");
    assert_eq!(paused[0]["sharedBans"], 6, "{paused:?}");

    // Ingest was never paused: every ban is stored.
    wait_for_async(DEADLINE, "every ban of the storm stored", || async {
        (stored_bans(fleet, a).await == 20).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    // Only the bans before the trip were shared.
    let shared = shared_bans(
        fleet,
        &format!("policy={}", policy["id"].as_str().unwrap_or_default()),
    )
    .await;
    assert_eq!(shared.len(), 4, "{shared:?}");

    // The alert says so, and the gauge counts it.
    let notice = wait_for_async(DEADLINE, "the pause notice", || async {
        receiver
            .received()
            .into_iter()
            .find(|r| r.path == "/ops")
            .and_then(|r| r.json().ok())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(notice["type"], "banhub.alert.notice", "{notice}");
    assert_eq!(notice["rule"]["id"], "sharing-paused", "{notice}");
    assert_eq!(
        notice["rule"]["name"], "Sharing paused for server a",
        "{notice}"
    );
    let metrics = fleet
        .hub
        .client()
        .get(fleet.hub.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("banhub_sharing_paused_sources 1"),
        "{metrics}"
    );

    // B is not paused: its ban is shared.
    report_bans(b, &["203.0.113.200".to_owned()]).await;
    wait_for_async(DEADLINE, "B's ban shared", || async {
        (shared_bans(fleet, "ip=203.0.113.200").await.len() == 2).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    // Only a paused server can be resumed.
    let (status, problem) = fleet
        .api()
        .post(&format!("/api/sharing/pauses/{}/resume", b.id), &json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    let (status, resumed) = fleet
        .api()
        .post(&format!("/api/sharing/pauses/{}/resume", a.id), &json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert!(resumed["resumedAt"].is_string(), "{resumed}");
    assert!(pauses(fleet).await.is_empty());

    // A's next ban is shared again.
    report_bans(a, &["203.0.113.201".to_owned()]).await;
    wait_for_async(DEADLINE, "A's ban shared after the resume", || async {
        (shared_bans(fleet, "ip=203.0.113.201").await.len() == 2).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_recidive_rules_are_refused_naming_the_field_and_change_nothing() {
    let hub = TestFleet::hub_builder().start().expect("hub starts");
    let api = hub.api();
    let good = json!({"name": "r", "sources": {"all": true}, "minServers": 2,
                      "windowSecs": 600, "targets": {"all": true}, "ladderSecs": [600]});
    let check = |edit: Value, field: &'static str| {
        let mut body = good.clone();
        if let (Some(body), Some(edit)) = (body.as_object_mut(), edit.as_object()) {
            for (k, v) in edit {
                body.insert(k.clone(), v.clone());
            }
        }
        let api = api.clone();
        async move {
            let (status, problem) = api.post("/api/sharing/recidive", &body).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{body}: {problem}"
            );
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with(&format!("{field}:"))),
                "{body}: {problem}"
            );
        }
    };
    check(json!({"name": ""}), "name").await;
    check(json!({"sources": {}}), "sources").await;
    check(
        json!({"targets": {"all": true, "labels": {"env": "prod"}}}),
        "targets",
    )
    .await;
    check(json!({"jails": ["../x"]}), "jails").await;
    check(json!({"minServers": 1}), "minServers").await;
    check(json!({"minServers": null}), "minServers").await;
    check(json!({"minFailures": 0}), "minFailures").await;
    check(json!({"windowSecs": 10}), "windowSecs").await;
    check(json!({"ladderSecs": []}), "ladderSecs").await;
    check(json!({"ladderSecs": [0]}), "ladderSecs").await;
    check(json!({"cooldownSecs": 99_999_999}), "cooldownSecs").await;
    let (status, rules) = api.get("/api/sharing/recidive").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rules, json!([]), "nothing was stored");

    // A good rule is stored; its name is unique, and an unknown rule is a 404.
    let (status, rule) = api.post("/api/sharing/recidive", &good).await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    let (status, _) = api.post("/api/sharing/recidive", &good).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = api.get("/api/sharing/recidive/999999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let id = rule["id"].as_i64().expect("an id");
    let (status, _) = api
        .put(
            &format!("/api/sharing/recidive/{id}"),
            &json!({"name": "r", "sources": {"all": true}, "minServers": 2,
                    "windowSecs": 600, "targets": {"all": true}, "ladderSecs": []}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, kept) = api.get(&format!("/api/sharing/recidive/{id}")).await;
    assert_eq!(kept["ladderSecs"], json!([600]), "{kept}");
    let (status, _) = api.delete(&format!("/api/sharing/recidive/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

/// The storm breaker's window in the store, on both backends: what one replica records with its
/// batch, another counts; a trip opens one pause whichever replica records it; a resume empties
/// the window; and an engine whose cursor is stale records no count.
mod window {
    use std::collections::{HashMap, HashSet};

    use banhub::domain::breaker::{Admission, StormBreaker, StormLimits, WindowCount};
    use banhub::domain::events::{EventId, IpOrCidr, JailName};
    use banhub::domain::sharing::{NewSharedBan, ShareSource, SourceKind};
    use banhub::domain::{Labels, NewServer, ServerId, ServerName};
    use banhub::store::sharing::SharingBatch;
    use banhub::store::{Cursor, Store};
    use banhub_tests::backends::{Backend, TestDatabase};
    use banhub_tests::on_both_backends;
    use chrono::Utc;

    on_both_backends!(two_replicas_count_one_window);

    async fn connect(url: &str) -> Store {
        Store::connect(url, 4)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
    }

    async fn server(store: &Store, name: &str) -> ServerId {
        store
            .create_server(NewServer {
                name: ServerName::parse(name).expect("name"),
                description: String::new(),
                labels: Labels::default(),
            })
            .await
            .expect("server")
            .id
    }

    /// The shared ban of origin ban `event` (of `origin`) on `target`.
    fn shared(event: i64, origin: ServerId, target: ServerId) -> NewSharedBan {
        NewSharedBan {
            ip: IpOrCidr::parse(&format!("203.0.113.{event}")).expect("ip"),
            target,
            origin_server: origin,
            origin_jail: JailName::parse("sshd").expect("jail"),
            origin_event: Some(EventId(event)),
            source: ShareSource {
                kind: SourceKind::Policy,
                id: "p".to_owned(),
                name: "p".to_owned(),
            },
            step: 1,
            expires_at: None,
            skipped: None,
        }
    }

    /// What the engine of a replica does with origin bans `events` of `origin`: a breaker built
    /// from the store's window, each ban asked for, and the batch recorded with its counts and
    /// trips. `None` when the cursor was not at `from`.
    async fn engine_batch(
        store: &Store,
        from: i64,
        events: std::ops::RangeInclusive<i64>,
        (origin, target): (ServerId, ServerId),
        limits: StormLimits,
        now: i64,
    ) -> Option<(Vec<Admission>, usize)> {
        let counts = store.storm_counts(&[origin], now).await.expect("counts");
        let paused: HashSet<ServerId> = store
            .open_pauses()
            .await
            .expect("pauses")
            .into_iter()
            .map(|p| p.server)
            .collect();
        let mut breaker = StormBreaker::new(limits, counts, paused);
        let mut batch = SharingBatch::default();
        let mut admissions = Vec::new();
        let to = *events.end();
        for event in events {
            let admission = breaker.admit(origin, EventId(event), 1);
            if admission == Admission::Admitted {
                batch.bans.push(shared(event, origin, target));
            }
            admissions.push(admission);
        }
        batch.shares = breaker.shares();
        batch.trips = breaker.trips().to_vec();
        let recorded = store
            .record_sharing_batch(from, to, &batch, now)
            .await
            .expect("record")?;
        Some((admissions, recorded.paused.len()))
    }

    async fn two_replicas_count_one_window(backend: Backend) {
        let database = TestDatabase::new(backend, "banhub_storm_window");
        let (one, two) = (connect(&database.url).await, connect(&database.url).await);
        let (origin, target) = (server(&one, "o").await, server(&one, "t").await);
        one.init_cursor(Cursor::Sharing, 0).await.expect("cursor");
        let limits = StormLimits {
            origin_bans: 5,
            shared_bans: None,
        };
        let now = Utc::now().timestamp_millis();

        // Replica one shares three origin bans; replica two counts them.
        let (admitted, _) = engine_batch(&one, 0, 1..=3, (origin, target), limits, now)
            .await
            .expect("the cursor was at 0");
        assert!(admitted.iter().all(|a| *a == Admission::Admitted));
        let counts = two.storm_counts(&[origin], now).await.expect("counts");
        assert_eq!(
            counts.get(&origin),
            Some(&WindowCount {
                origin_bans: 3,
                shared_bans: 3
            })
        );
        // A stale engine on replica one records no count.
        assert!(
            engine_batch(&one, 0, 4..=6, (origin, target), limits, now)
                .await
                .is_none()
        );
        // Replica two (the engine moved there) goes on from that count: two more pass, the
        // third trips and its pause is stored once.
        let (admissions, paused) = engine_batch(&two, 3, 4..=6, (origin, target), limits, now)
            .await
            .expect("the cursor was at 3");
        assert_eq!(
            admissions,
            vec![
                Admission::Admitted,
                Admission::Admitted,
                Admission::Tripped {
                    count: WindowCount {
                        origin_bans: 6,
                        shared_bans: 6
                    }
                }
            ]
        );
        assert_eq!(paused, 1);
        let pauses = one.open_pauses().await.expect("pauses");
        assert_eq!(pauses.len(), 1);
        assert_eq!(pauses[0].server, origin);
        assert_eq!(pauses[0].shared_bans, 6);
        // Paused: replica one shares nothing of the origin, and opens no second pause.
        let (admissions, paused) = engine_batch(&one, 6, 7..=7, (origin, target), limits, now)
            .await
            .expect("the cursor was at 6");
        assert_eq!(admissions, vec![Admission::Paused]);
        assert_eq!(paused, 0);

        // Resumed on replica one, the window starts empty for replica two.
        let resumed_at = Utc::now() + chrono::TimeDelta::milliseconds(1);
        one.resume_source(origin, "admin", resumed_at)
            .await
            .expect("resume")
            .expect("it was paused");
        let later = resumed_at.timestamp_millis() + 1;
        assert_eq!(
            two.storm_counts(&[origin], later).await.expect("counts"),
            HashMap::new()
        );
        let (admissions, _) = engine_batch(&two, 7, 8..=12, (origin, target), limits, later)
            .await
            .expect("the cursor was at 7");
        assert!(admissions.iter().all(|a| *a == Admission::Admitted));

        // A minute later nothing of it counts, and it can be forgotten.
        let minute_later = later + 60_001;
        assert_eq!(
            one.storm_counts(&[origin], minute_later)
                .await
                .expect("counts"),
            HashMap::new()
        );
        assert!(one.prune_origin_shares(minute_later).await.expect("prune") > 0);
    }
}
