//! Alerts end to end: bans go through the real event path (fail2ban's callback to an agent's relay,
//! the spool, the session, the hub's ingest), the hub's alert worker matches them against the rules
//! in the settings and delivers digests to a real SMTP server (maildev) and to a webhook receiver
//! in the test, with retries; delivery status is read back through the API.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use banhub_tests::TestFleet;
use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::hub::{api_get as get, api_post as post};
use banhub_tests::smtp::SmtpServer;
use banhub_tests::wait::wait_for_async;
use banhub_tests::webhook::WebhookReceiver;
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

/// A hub (on SQLite) and server `web-1`: a fail2ban sandbox and an agent, online.
async fn start() -> TestFleet {
    start_on(None).await
}

/// With `database_url`, the hub keeps its store there (PostgreSQL); else SQLite.
async fn start_on(database_url: Option<String>) -> TestFleet {
    let mut builder = TestFleet::hub_builder();
    if let Some(url) = database_url {
        builder = builder.database_url(url);
    }
    let hub = builder.start().expect("hub starts");
    // The callbacks below name `sshd` and `nginx-http-auth`; the agent refuses jails its
    // fail2ban does not run.
    let sandbox = Fail2banSandbox::builder()
        .name("web-1")
        .named_jails(&["sshd", "nginx-http-auth"])
        .start()
        .expect("fail2ban sandbox");
    let mut fleet = TestFleet::on(hub);
    fleet
        .add_host("web-1", sandbox, &[])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    fleet
}

/// fail2ban's action reporting `ips` banned in `jail`, through the agent's relay; each call
/// returns once the agent has the event on disk.
async fn ban(fleet: &TestFleet, jail: &str, ips: &[String]) {
    let relay = relay_addr(&fleet.hosts[0].state_dir()).expect("relay address");
    let secret = relay_secret(&fleet.hosts[0].state_dir()).expect("relay secret");
    let client = reqwest::Client::new();
    let refused: Vec<String> = futures::stream::iter(ips.iter().cloned())
        .map(|ip| {
            let (client, secret) = (client.clone(), secret.clone());
            let jail = jail.to_owned();
            async move {
                let body = json!({"ip": ip, "jail": jail, "hostname": "web-1", "failures": 5,
                                  "logs": [format!("auth failure from {ip}")]});
                let ok = client
                    .post(format!("http://{relay}/api/ban"))
                    .header("X-Callback-Secret", &secret)
                    .json(&body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::OK);
                (!ok).then_some(ip)
            }
        })
        .buffer_unordered(16)
        .filter_map(|refused| async move { refused })
        .collect()
        .await;
    assert!(
        refused.is_empty(),
        "the relay refused {refused:?}\n{}",
        fleet.hosts[0].agent.logs()
    );
}

/// How many ban events the hub has stored for this server.
async fn stored_bans(fleet: &TestFleet) -> usize {
    let mut total = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!(
            "/api/events/bans?serverId={}&kind=ban&limit=1000",
            fleet.hosts[0].id
        );
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = get(&fleet.hub, &path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        total += page["events"].as_array().map_or(0, Vec::len);
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return total,
        }
    }
}

async fn save(hub: &HubProcess, mut doc: Value) -> Value {
    let (_, current) = get(hub, "/api/settings").await;
    doc["version"] = current["version"].clone();
    let (status, saved) = post(hub, "/api/settings", doc.clone()).await;
    assert_eq!(status, StatusCode::OK, "{doc}\n{saved}");
    saved
}

fn rule_id(saved: &Value, name: &str) -> String {
    saved["alerts"]["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|r| r["name"] == name))
        .and_then(|r| r["id"].as_str())
        .unwrap_or_else(|| panic!("no rule {name}: {saved}"))
        .to_owned()
}

async fn deliveries(hub: &HubProcess, query: &str) -> Vec<Value> {
    let (status, page) = get(hub, &format!("/api/alerts/deliveries?limit=500{query}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["deliveries"].as_array().cloned().unwrap_or_default()
}

async fn digests(hub: &HubProcess) -> Vec<Value> {
    let (status, page) = get(hub, "/api/alerts/digests?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["digests"].as_array().cloned().unwrap_or_default()
}

fn addresses(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{prefix}.{}.{}", i / 250, i % 250 + 1))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_500_bans_is_one_digest_and_a_rule_that_does_not_match_sends_nothing() {
    let smtp = SmtpServer::start().expect("maildev starts");
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let fleet = start().await;
    let saved = save(
        &fleet.hub,
        json!({
            "smtp": {"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none",
                     "from": "banhub alerts <alerts@example.test>"},
            "alerts": {
                "recipients": ["ops@example.test"],
                "digestWindowSecs": 5,
                "webhooks": [{"name": "never", "format": "json", "url": receiver.url("/never")}],
                "rules": [
                    {"name": "ssh bans", "jails": ["sshd"]},
                    {"name": "nginx only", "jails": ["nginx-http-auth"], "webhooks": ["never"]}
                ]
            }
        }),
    )
    .await;
    let ssh_rule = rule_id(&saved, "ssh bans");
    let nginx_rule = rule_id(&saved, "nginx only");

    let started = Instant::now();
    ban(&fleet, "sshd", &addresses("198.18", 500)).await;
    wait_for_async(DEADLINE, "500 bans stored", || async {
        (stored_bans(&fleet).await == 500).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    eprintln!("500 bans relayed and stored in {:?}", started.elapsed());

    // The digest goes out once its window has passed.
    wait_for_async(DEADLINE, "the digest e-mail", || async {
        let mails = smtp.emails().await.ok()?;
        (!mails.is_empty()).then_some(mails)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    // Every ban is in a closed digest with a delivered e-mail...
    let ssh_digests = wait_for_async(DEADLINE, "every ban in a delivered digest", || async {
        let all = digests(&fleet.hub).await;
        let mine: Vec<Value> = all
            .into_iter()
            .filter(|d| d["ruleId"] == ssh_rule.as_str())
            .collect();
        let total: u64 = mine.iter().filter_map(|d| d["events"].as_u64()).sum();
        let closed = mine.iter().all(|d| !d["closedAt"].is_null());
        let delivered = deliveries(&fleet.hub, &format!("&ruleId={ssh_rule}")).await;
        let all_sent =
            delivered.len() == mine.len() && delivered.iter().all(|d| d["status"] == "delivered");
        (total == 500 && closed && all_sent).then_some(mine)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    // ... and a burst makes one digest (or a few when it straddles a window), never a mail per ban.
    assert!(
        ssh_digests.len() <= 3,
        "{} digests for one burst",
        ssh_digests.len()
    );
    let mails = smtp.emails().await.expect("mails");
    assert_eq!(mails.len(), ssh_digests.len(), "one mail per digest");
    let first = &mails[0];
    assert!(
        first.subject.starts_with("[banhub] ssh bans: "),
        "{}",
        first.subject
    );
    assert!(
        first.subject.contains("bans on 1 server"),
        "{}",
        first.subject
    );
    assert_eq!(first.from[0].address, "alerts@example.test");
    assert_eq!(first.to[0].address, "ops@example.test");
    let text = first.text.as_deref().unwrap_or_default();
    assert!(
        text.contains("By jail:") && text.contains("sshd:"),
        "{text}"
    );
    assert!(text.contains("web-1"), "{text}");
    let html = first.html.as_deref().unwrap_or_default();
    assert!(html.contains("<table>") && html.contains("sshd"), "{html}");
    let delivered = deliveries(&fleet.hub, &format!("&ruleId={ssh_rule}")).await;
    assert!(
        delivered[0]["response"]
            .as_str()
            .is_some_and(|r| r.starts_with("250")),
        "{delivered:?}"
    );
    assert_eq!(delivered[0]["attempts"], 1);

    // The rule that matches nothing made no digest, no delivery, and no request.
    assert!(
        digests(&fleet.hub)
            .await
            .iter()
            .all(|d| d["ruleId"] != nginx_rule.as_str())
    );
    assert!(
        deliveries(&fleet.hub, &format!("&ruleId={nginx_rule}"))
            .await
            .is_empty()
    );
    assert!(receiver.received().is_empty(), "{:?}", receiver.received());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_down_is_retried_then_reported_failed_and_ingest_goes_on() {
    let mut smtp = SmtpServer::start().expect("maildev starts");
    let fleet = start().await;
    save(
        &fleet.hub,
        json!({
            "smtp": {"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none",
                     "from": "alerts@example.test", "timeoutSecs": 2},
            "alerts": {"recipients": ["ops@example.test"], "digestWindowSecs": 1,
                       "maxAttempts": 3, "retryInitialSecs": 1,
                       "rules": [{"name": "all bans"}]}
        }),
    )
    .await;
    smtp.stop().expect("maildev stops");

    // Bans keep being stored promptly while the mail server is down.
    for (i, batch) in addresses("198.19", 30).chunks(10).enumerate() {
        let before = stored_bans(&fleet).await;
        let sent = Instant::now();
        ban(&fleet, "sshd", batch).await;
        wait_for_async(Duration::from_secs(5), "the batch to be stored", || async {
            (stored_bans(&fleet).await == before + batch.len()).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("batch {i}: {e}\n{}", fleet.hub.logs()));
        eprintln!(
            "batch {i}: 10 bans relayed and stored in {:?}",
            sent.elapsed()
        );
    }

    let failed = wait_for_async(DEADLINE, "the delivery to be reported failed", || async {
        let all = deliveries(&fleet.hub, "&status=failed").await;
        (!all.is_empty()).then_some(all)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let delivery = &failed[0];
    assert_eq!(delivery["channel"], "email");
    assert_eq!(delivery["attempts"], 3, "{delivery}");
    let error = delivery["lastError"].as_str().expect("an error");
    assert!(error.contains("nothing accepts connections"), "{error}");
    assert!(delivery["deliveredAt"].is_null());
    // The hub logged the retries.
    let log = std::fs::read_to_string(fleet.hub.dir().join("hub.stdout.log")).unwrap_or_default()
        + &std::fs::read_to_string(fleet.hub.dir().join("hub.stderr.log")).unwrap_or_default();
    assert!(log.contains("will retry"), "no retry in the log");

    // Back up: a later digest is delivered.
    smtp.start_again().expect("maildev starts again");
    ban(&fleet, "sshd", &addresses("10.80", 2)).await;
    wait_for_async(DEADLINE, "a delivery once the server is back", || async {
        let done = deliveries(&fleet.hub, "&status=delivered").await;
        (!done.is_empty()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    assert_eq!(smtp.emails().await.expect("mails").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_delivered_in_three_formats_and_retried_after_a_500() {
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let fleet = start().await;
    webhook_scenario(&fleet, &receiver).await;
}

/// The same on PostgreSQL: the worker's cursor, digests and deliveries in the other backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_delivered_and_retried_on_postgresql() {
    let postgres = banhub_tests::PostgresServer::start()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_alerts")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let fleet = start_on(Some(url)).await;
    webhook_scenario(&fleet, &receiver).await;
}

async fn webhook_scenario(fleet: &TestFleet, receiver: &WebhookReceiver) {
    save(
        &fleet.hub,
        json!({
            "alerts": {
                "digestWindowSecs": 1, "maxAttempts": 4, "retryInitialSecs": 1,
                "webhooks": [
                    {"name": "generic", "format": "json", "url": receiver.url("/hooks/generic"), "token": "hook-token-1"},
                    {"name": "chat", "format": "slack", "url": receiver.url("/hooks/slack")},
                    {"name": "phone", "format": "ntfy", "url": receiver.url("/banhub-alerts")}
                ],
                "rules": [{"name": "web bans", "email": false, "webhooks": ["generic", "chat", "phone"]}]
            }
        }),
    )
    .await;
    // The first request fails with a 500 (whichever channel comes first), the rest succeed.
    receiver.answer(&[500]);
    ban(fleet, "nginx-http-auth", &addresses("10.70", 3)).await;

    let done = wait_for_async(DEADLINE, "three delivered webhooks", || async {
        let all = deliveries(&fleet.hub, "&status=delivered").await;
        (all.len() == 3).then_some(all)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{:?}", fleet.hub.logs(), receiver.received()));
    let received = receiver.received();
    assert_eq!(received.len(), 4, "three posts and one retry: {received:?}");
    assert_eq!(received[0].status, 500);
    let retried = &received[0].path;
    assert_eq!(
        received.iter().filter(|r| &r.path == retried).count(),
        2,
        "the failed post was retried: {received:?}"
    );
    let retried_delivery = done
        .iter()
        .find(|d| d["attempts"] == 2)
        .unwrap_or_else(|| panic!("no delivery took two attempts: {done:?}"));
    assert!(
        retried_delivery["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("500")),
        "{retried_delivery}"
    );
    assert_eq!(retried_delivery["response"], "HTTP 200 OK");

    let generic = received
        .iter()
        .find(|r| r.path == "/hooks/generic" && r.status == 200)
        .expect("the JSON post");
    assert_eq!(generic.headers["authorization"], "Bearer hook-token-1");
    let body = generic.json().expect("JSON");
    assert_eq!(body["type"], "banhub.alert.digest");
    assert_eq!(body["rule"]["name"], "web bans");
    assert_eq!(body["events"], 3);
    assert_eq!(body["byJail"]["nginx-http-auth"], 3);
    assert_eq!(body["samples"].as_array().map(Vec::len), Some(3));

    let slack = received
        .iter()
        .find(|r| r.path == "/hooks/slack" && r.status == 200)
        .expect("the Slack post");
    let text = slack.json().expect("JSON")["text"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(
        text.contains("web bans") && text.contains("3 bans"),
        "{text}"
    );
    assert!(!slack.headers.contains_key("authorization"));

    let ntfy = received
        .iter()
        .find(|r| r.path == "/banhub-alerts" && r.status == 200)
        .expect("the ntfy post");
    assert!(
        ntfy.headers["title"].contains("web bans"),
        "{:?}",
        ntfy.headers
    );
    assert!(
        ntfy.body_text().contains("nginx-http-auth"),
        "{}",
        ntfy.body_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restart_neither_loses_nor_repeats_alerts() {
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let mut fleet = start().await;
    save(
        &fleet.hub,
        json!({"alerts": {"digestWindowSecs": 2,
            "webhooks": [{"name": "generic", "format": "json", "url": receiver.url("/h")}],
            "rules": [{"name": "all", "email": false, "webhooks": ["generic"]}]}}),
    )
    .await;
    ban(&fleet, "sshd", &addresses("10.50", 20)).await;
    wait_for_async(DEADLINE, "the first bans stored", || async {
        (stored_bans(&fleet).await == 20).then_some(())
    })
    .await
    .expect("stored");
    // Stop at once: the digest is still open (or its delivery pending).
    fleet.hub.restart().expect("hub restarts");
    ban(&fleet, "sshd", &addresses("10.60", 15)).await;
    wait_for_async(DEADLINE, "every ban alerted on", || async {
        let total: u64 = receiver
            .received()
            .iter()
            .filter(|r| r.status == 200)
            .filter_map(|r| r.json().ok()?["events"].as_u64())
            .sum();
        (total >= 35 && deliveries(&fleet.hub, "&status=pending").await.is_empty()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    // Every event id is in exactly one digest.
    let mut ids: Vec<i64> = Vec::new();
    for d in digests(&fleet.hub).await {
        let (first, last) = (
            d["firstEventId"].as_i64().expect("id"),
            d["lastEventId"].as_i64().expect("id"),
        );
        assert_eq!(d["events"].as_i64(), Some(last - first + 1), "{d}");
        ids.extend(first..=last);
    }
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "an event was alerted on twice");
    assert_eq!(ids.len(), 35, "{ids:?}");
}

/// The events of the digests of `rule`, summed, and their by-address counts.
async fn rule_matches(
    hub: &HubProcess,
    rule: &str,
) -> (u64, std::collections::BTreeMap<String, u64>) {
    let mut total = 0;
    let mut by_ip = std::collections::BTreeMap::new();
    for d in digests(hub).await.iter().filter(|d| d["ruleId"] == rule) {
        total += d["events"].as_u64().unwrap_or(0);
        if let Some(ips) = d["summary"]["byIp"].as_object() {
            for (ip, n) in ips {
                *by_ip.entry(ip.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
            }
        }
    }
    (total, by_ip)
}

/// The country insights show for each address (`None`: no country field).
async fn insight_countries(hub: &HubProcess) -> std::collections::BTreeMap<String, Option<String>> {
    let (status, insights) = get(hub, "/api/events/bans/insights?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{insights}");
    insights["topIps"]
        .as_array()
        .expect("topIps")
        .iter()
        .map(|ip| {
            (
                ip["ip"].as_str().expect("ip").to_owned(),
                ip["country"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// The insights' tallies: country → (bans, addresses) and network → (bans, addresses).
async fn insight_places(
    hub: &HubProcess,
) -> (BTreeMap<String, (u64, u64)>, BTreeMap<String, (u64, u64)>) {
    let (status, insights) = get(hub, "/api/events/bans/insights?limit=100").await;
    assert_eq!(status, StatusCode::OK, "{insights}");
    assert!(insights["placesCountedAt"].is_string(), "{insights}");
    let tally = |list: &str, key: &str| -> BTreeMap<String, (u64, u64)> {
        insights[list]
            .as_array()
            .unwrap_or_else(|| panic!("{list} in {insights}"))
            .iter()
            .map(|p| {
                (
                    p[key].as_str().expect("name").to_owned(),
                    (
                        p["bans"].as_u64().expect("bans"),
                        p["ips"].as_u64().expect("ips"),
                    ),
                )
            })
            .collect()
    };
    (tally("countries", "country"), tally("networks", "network"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_by_country_use_the_geoip_database_and_follow_its_changes() {
    use banhub_tests::mmdb::{CountryNetwork, documentation_countries, write_country_db};

    let receiver = WebhookReceiver::start().await.expect("receiver");
    let fleet = start().await;
    let dir = tempfile::tempdir().expect("tempdir");

    // A path that is not there, and a file that is not a MaxMind database: refused, naming the
    // field, and nothing changes.
    let (_, before) = get(&fleet.hub, "/api/settings").await;
    let missing = dir.path().join("missing.mmdb");
    let garbage = dir.path().join("garbage.mmdb");
    std::fs::write(&garbage, b"this is not a MaxMind database").expect("write");
    for path in [&missing, &garbage] {
        let (status, problem) = post(
            &fleet.hub,
            "/api/settings",
            json!({"version": before["version"],
                   "geoip": {"databasePath": path.to_str().expect("utf-8")}}),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], "geoip.databasePath", "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(path.to_str().expect("utf-8"))),
            "{problem}"
        );
    }
    let (_, after) = get(&fleet.hub, "/api/settings").await;
    assert_eq!(after, before, "a refused edit changed the settings");

    // 192.0.2.0/24 is in Germany, 198.51.100.0/24 in the United States, 2001:db8::/32 in France.
    let first = dir.path().join("countries.mmdb");
    write_country_db(&first, &documentation_countries()).expect("database");
    let saved = save(
        &fleet.hub,
        json!({"geoip": {"databasePath": first.to_str().expect("utf-8")},
        "alerts": {"digestWindowSecs": 1,
          "webhooks": [{"name": "hook", "format": "json", "url": receiver.url("/geo")}],
          "rules": [
             {"name": "germany", "countries": ["de"], "email": false, "webhooks": ["hook"]},
             {"name": "everything", "email": false, "webhooks": ["hook"]}
          ]}}),
    )
    .await;
    assert_eq!(
        saved["alerts"]["rules"][0]["countries"],
        json!(["DE"]),
        "stored as it matches: {saved}"
    );
    let germany = rule_id(&saved, "germany");
    let everything = rule_id(&saved, "everything");

    ban(
        &fleet,
        "sshd",
        &[
            "192.0.2.10".to_owned(),
            "198.51.100.10".to_owned(),
            "2001:db8::10".to_owned(),
            "203.0.113.10".to_owned(),
        ],
    )
    .await;
    // Once the rule for everything has all four, the country rule has seen them too.
    wait_for_async(DEADLINE, "the four bans matched", || async {
        (rule_matches(&fleet.hub, &everything).await.0 == 4).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let (total, by_ip) = rule_matches(&fleet.hub, &germany).await;
    assert_eq!(total, 1, "{by_ip:?}");
    assert_eq!(by_ip.keys().collect::<Vec<_>>(), ["192.0.2.10"]);
    let all = digests(&fleet.hub).await;
    let german = all
        .iter()
        .find(|d| d["ruleId"] == germany.as_str())
        .expect("the digest of the country rule");
    assert_eq!(german["summary"]["byCountry"], json!({"DE": 1}), "{german}");
    // The webhook of the country rule carried that one ban, with its country.
    let posted = wait_for_async(DEADLINE, "the country rule's webhook", || async {
        receiver
            .received()
            .into_iter()
            .filter(|r| r.status == 200)
            .filter_map(|r| r.json().ok())
            .find(|body| body["rule"]["name"] == "germany")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    assert_eq!(posted["events"], 1, "{posted}");
    assert_eq!(posted["byCountry"], json!({"DE": 1}), "{posted}");
    assert_eq!(posted["samples"][0]["ip"], "192.0.2.10", "{posted}");

    // Insights show each address's country; an address in no network has none.
    let countries = insight_countries(&fleet.hub).await;
    let expect =
        |pairs: &[(&str, Option<&str>)]| -> std::collections::BTreeMap<String, Option<String>> {
            pairs
                .iter()
                .map(|(ip, c)| ((*ip).to_owned(), c.map(str::to_owned)))
                .collect()
        };
    assert_eq!(
        countries,
        expect(&[
            ("192.0.2.10", Some("DE")),
            ("198.51.100.10", Some("US")),
            ("2001:db8::10", Some("FR")),
            ("203.0.113.10", None),
        ])
    );
    // And count bans and addresses per country and per network.
    let (by_country, by_network) = insight_places(&fleet.hub).await;
    let tally = |pairs: &[(&str, u64, u64)]| -> BTreeMap<String, (u64, u64)> {
        pairs
            .iter()
            .map(|(name, bans, ips)| ((*name).to_owned(), (*bans, *ips)))
            .collect()
    };
    assert_eq!(
        by_country,
        tally(&[("DE", 1, 1), ("FR", 1, 1), ("US", 1, 1)])
    );
    assert_eq!(
        by_network,
        tally(&[
            ("192.0.2.0/24", 1, 1),
            ("198.51.100.0/24", 1, 1),
            ("2001:db8::/48", 1, 1),
            ("203.0.113.0/24", 1, 1),
        ])
    );

    // A new path: the hub reads the new database (here the two IPv4 networks swapped).
    let second = dir.path().join("swapped.mmdb");
    let swapped = vec![
        CountryNetwork::new("192.0.2.0/24", "US", "United States"),
        CountryNetwork::new("198.51.100.0/24", "DE", "Germany"),
    ];
    write_country_db(&second, &swapped).expect("database");
    save(
        &fleet.hub,
        json!({"geoip": {"databasePath": second.to_str().expect("utf-8")},
               "alerts": saved["alerts"].clone()}),
    )
    .await;
    assert_eq!(
        insight_countries(&fleet.hub).await,
        expect(&[
            ("192.0.2.10", Some("US")),
            ("198.51.100.10", Some("DE")),
            ("2001:db8::10", None),
            ("203.0.113.10", None),
        ])
    );
    // The tallies are counted again at once with the new database.
    assert_eq!(
        insight_places(&fleet.hub).await.0,
        tally(&[("DE", 1, 1), ("US", 1, 1)])
    );
    ban(
        &fleet,
        "sshd",
        &["198.51.100.20".to_owned(), "192.0.2.20".to_owned()],
    )
    .await;
    wait_for_async(DEADLINE, "the next two bans matched", || async {
        (rule_matches(&fleet.hub, &everything).await.0 == 6).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let (total, by_ip) = rule_matches(&fleet.hub, &germany).await;
    assert_eq!(total, 2, "{by_ip:?}");
    assert_eq!(
        by_ip.keys().collect::<Vec<_>>(),
        ["192.0.2.10", "198.51.100.20"]
    );

    // The file replaced under the same path (as geoipupdate does: write, then rename over it):
    // read again without a settings change.
    let fresh = dir.path().join("fresh.mmdb.tmp");
    write_country_db(&fresh, &documentation_countries()).expect("database");
    std::fs::rename(&fresh, &second).expect("rename over");
    wait_for_async(DEADLINE, "insights from the replaced file", || async {
        let countries = insight_countries(&fleet.hub).await;
        (countries.get("2001:db8::10") == Some(&Some("FR".to_owned()))).then_some(countries)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    assert_eq!(
        insight_countries(&fleet.hub).await["192.0.2.10"].as_deref(),
        Some("DE")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_spike_alerts_once_and_not_twice() {
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let mut fleet = start().await;
    // A spike is five bans within ten minutes (long enough that the test's pace never matters);
    // the rule for everything shows how far the worker has matched.
    let saved = save(
        &fleet.hub,
        json!({"alerts": {"digestWindowSecs": 1,
            "webhooks": [{"name": "hook", "format": "json", "url": receiver.url("/spike")}],
            "rules": [
                {"name": "spike", "spike": {"bans": 5, "windowSecs": 600}, "email": false, "webhooks": ["hook"]},
                {"name": "everything", "email": false, "webhooks": ["hook"]}
            ]}}),
    )
    .await;
    let spike = rule_id(&saved, "spike");
    let everything = rule_id(&saved, "everything");

    // Three bans: under the rate, so no spike yet; all matched by the worker before the stop.
    let before = addresses("10.91", 3);
    ban(&fleet, "sshd", &before).await;
    wait_for_async(DEADLINE, "the first three bans matched", || async {
        (rule_matches(&fleet.hub, &everything).await.0 == 3).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    assert_eq!(rule_matches(&fleet.hub, &spike).await.0, 0);

    fleet.hub.restart().expect("hub restarts");

    // Three more: the fifth and sixth ban within the window are the spike, counted with the
    // three from before the restart.
    let after = addresses("10.92", 3);
    ban(&fleet, "sshd", &after).await;
    wait_for_async(DEADLINE, "all six bans matched", || async {
        (rule_matches(&fleet.hub, &everything).await.0 == 6).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let spike_digests = wait_for_async(DEADLINE, "the spike digest delivered", || async {
        let mine: Vec<Value> = digests(&fleet.hub)
            .await
            .into_iter()
            .filter(|d| d["ruleId"] == spike.as_str())
            .collect();
        let delivered = deliveries(&fleet.hub, &format!("&ruleId={spike}&status=delivered")).await;
        (!mine.is_empty() && delivered.len() == mine.len()).then_some(mine)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let (total, by_ip) = rule_matches(&fleet.hub, &spike).await;
    assert_eq!(
        total, 2,
        "the fifth and sixth ban: {by_ip:?} {spike_digests:?}"
    );
    let matched: Vec<&String> = by_ip.keys().collect();
    assert!(
        matched.iter().all(|ip| after.contains(ip)),
        "only bans after the restart can be the fifth or sixth: {matched:?}"
    );
    // Once: one spike alert went out, not one per process.
    let posts: Vec<Value> = receiver
        .received()
        .into_iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.json().ok())
        .filter(|body| body["rule"]["name"] == "spike")
        .collect();
    assert_eq!(posts.len(), spike_digests.len(), "{posts:?}");
    let posted: u64 = posts.iter().filter_map(|p| p["events"].as_u64()).sum();
    assert_eq!(posted, 2);

    // Another restart with the spike still in its window: the next ban is the seventh in ten
    // minutes and matches once; nothing alerted before is alerted again.
    fleet.hub.restart().expect("hub restarts again");
    ban(&fleet, "sshd", &addresses("10.93", 1)).await;
    wait_for_async(DEADLINE, "the seventh ban matched", || async {
        (rule_matches(&fleet.hub, &spike).await.0 == 3).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hub.logs()));
    let mut ids: Vec<i64> = Vec::new();
    for d in digests(&fleet.hub)
        .await
        .iter()
        .filter(|d| d["ruleId"] == spike.as_str())
    {
        let samples = d["summary"]["samples"].as_array().expect("samples");
        ids.extend(samples.iter().filter_map(|s| s["eventId"].as_i64()));
    }
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((count, ids.len()), (3, 3), "an event was alerted on twice");
}
