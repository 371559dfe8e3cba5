//! Settings end to end against the real `banhub` binary: the document round-trips, secrets are
//! write-only (never in a response, the log or the database file) and kept when omitted, bad values
//! are refused naming the field, a concurrent edit is refused with 409, the test e-mail reaches a
//! real SMTP server (maildev) or fails with an actionable code, retention set in the settings
//! prunes, and fail2ban defaults are pushed to two real fail2ban sandboxes through their agents.

use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::fleet::snapshot;
use banhub_tests::hub::HubProcess;
use banhub_tests::hub::{api_get as get, api_post as post, send_json as send};
use banhub_tests::smtp::SmtpServer;
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
const PASSWORD: &str = "smtp-pass-7Qx9-never-shown";
const URL_SECRET: &str = "T000-B000-url-path-secret";
const TOKEN: &str = "webhook-token-Zk3-never-shown";

/// Saves `doc` (the version read now is added) and returns the saved document.
async fn save(hub: &HubProcess, mut doc: Value) -> Value {
    let (_, current) = get(hub, "/api/settings").await;
    doc["version"] = current["version"].clone();
    let (status, saved) = post(hub, "/api/settings", doc.clone()).await;
    assert_eq!(status, StatusCode::OK, "{doc}\n{saved}");
    saved
}

/// Everything the hub wrote to its log files so far.
fn hub_log(hub: &HubProcess) -> String {
    ["hub.stdout.log", "hub.stderr.log"]
        .iter()
        .map(|name| std::fs::read_to_string(hub.dir().join(name)).unwrap_or_default())
        .collect()
}

/// Whether `needle` occurs in any file under `dir`.
fn any_file_contains(dir: &Path, needle: &[u8]) -> Option<PathBuf> {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                return Some(path);
            }
        }
    }
    None
}

fn full_document(smtp_port: u16) -> Value {
    json!({
        "smtp": {"host": "127.0.0.1", "port": smtp_port, "tls": "none", "username": "banhub",
                 "password": PASSWORD, "from": "banhub <hub@example.test>", "timeoutSecs": 5},
        "alerts": {
            "recipients": ["ops@example.test"],
            "digestWindowSecs": 30,
            "webhooks": [{"name": "chat", "format": "slack",
                          "url": format!("http://127.0.0.1:9/services/{URL_SECRET}"), "token": TOKEN}],
            "rules": [{"name": "every ban", "webhooks": ["chat"]}]
        },
        "events": {"retentionDays": 90},
        "fail2ban": {"defaults": {"maxretry": 4, "ignoreip": ["127.0.0.1/8"]}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_round_trip_and_secrets_stay_write_only() {
    let hub = HubProcess::start().expect("hub starts");
    let (status, initial) = get(&hub, "/api/settings").await;
    assert_eq!(status, StatusCode::OK, "{initial}");
    assert_eq!(initial["version"], 0);
    assert_eq!(initial["smtp"], Value::Null);

    let saved = save(&hub, full_document(2525)).await;
    assert_eq!(saved["version"], 1);
    let (status, read) = get(&hub, "/api/settings").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read, saved, "GET shows what POST answered");
    assert_eq!(read["smtp"]["host"], "127.0.0.1");
    assert_eq!(read["smtp"]["username"], "banhub");
    assert_eq!(read["smtp"]["passwordSet"], true);
    assert_eq!(read["alerts"]["webhooks"][0]["urlSet"], true);
    assert_eq!(read["alerts"]["webhooks"][0]["urlHost"], "127.0.0.1:9");
    assert_eq!(read["alerts"]["webhooks"][0]["tokenSet"], true);
    assert_eq!(read["events"]["retentionDays"], 90);
    assert_eq!(read["fail2ban"]["defaults"]["maxretry"], 4);
    let rule_id = read["alerts"]["rules"][0]["id"]
        .as_str()
        .expect("a rule id")
        .to_owned();
    let text = read.to_string();
    for secret in [PASSWORD, URL_SECRET, TOKEN] {
        assert!(
            !text.contains(secret),
            "{secret} is in the response: {text}"
        );
    }
    assert!(read["smtp"].get("password").is_none());

    // Posting back what was read keeps every secret and the rule's id.
    let (status, again) = post(&hub, "/api/settings", read.clone()).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["version"], 2);
    assert_eq!(again["smtp"]["passwordSet"], true);
    assert_eq!(again["alerts"]["webhooks"][0]["tokenSet"], true);
    assert_eq!(again["alerts"]["rules"][0]["id"], rule_id.as_str());

    // `null` removes a secret; the others stay.
    let mut cleared = again.clone();
    cleared["smtp"]["password"] = Value::Null;
    let (status, cleared) = post(&hub, "/api/settings", cleared).await;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["smtp"]["passwordSet"], false);
    assert_eq!(cleared["alerts"]["webhooks"][0]["urlSet"], true);

    // The key is outside the database, private; the secrets are not readable in any file of the
    // data directory (the SQLite database included), nor in the hub's log.
    let key = hub.data_dir().join("secrets.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key).expect("key file").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    for secret in [URL_SECRET, TOKEN] {
        assert_eq!(
            any_file_contains(hub.data_dir(), secret.as_bytes()),
            None,
            "{secret} at rest"
        );
    }
    let log = hub_log(&hub);
    for secret in [PASSWORD, URL_SECRET, TOKEN] {
        assert!(!log.contains(secret), "{secret} in the hub's log");
    }

    // A restart reads the same settings back (and can still open the secrets: the test e-mail's
    // refusal below is about the server, not the secret).
    let mut hub = hub;
    hub.restart().expect("restart");
    let (_, after) = get(&hub, "/api/settings").await;
    assert_eq!(after, cleared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_refused_naming_the_field_and_change_nothing() {
    let hub = HubProcess::start().expect("hub starts");
    let saved = save(&hub, full_document(2525)).await;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"smtp": {"host": "bad host", "from": "a@b.test"}}),
            "smtp.host",
        ),
        (
            json!({"smtp": {"host": "h", "port": 70000, "from": "a@b.test"}}),
            "smtp.port",
        ),
        (
            json!({"smtp": {"host": "h", "port": "x", "from": "a@b.test"}}),
            "smtp.port",
        ),
        (
            json!({"smtp": {"host": "h", "from": "not an address"}}),
            "smtp.from",
        ),
        (
            json!({"smtp": {"host": "h", "from": "a@b.test", "tls": "ssl3"}}),
            "smtp.tls",
        ),
        (
            json!({"alerts": {"digestWindowSecs": 0}}),
            "alerts.digestWindowSecs",
        ),
        (
            json!({"alerts": {"rules": [{"name": "r", "email": false, "jails": ["../etc"]}]}}),
            "alerts.rules[0].jails[0]",
        ),
        (
            json!({"alerts": {"rules": [{"name": "r", "email": false, "servers": ["0190c6e8-1b2f-7cc4-9a55-2d6f1a0b3c4d"]}]}}),
            "alerts.rules[0].servers[0]",
        ),
        (
            json!({"alerts": {"webhooks": [{"name": "w", "format": "json"}]}}),
            "alerts.webhooks[0].url",
        ),
        (
            json!({"alerts": {"webhooks": [{"name": "w", "format": "json", "url": "file:///etc/passwd"}]}}),
            "alerts.webhooks[0].url",
        ),
        (
            json!({"events": {"retentionDays": -1}}),
            "events.retentionDays",
        ),
        (
            json!({"fail2ban": {"defaults": {"maxretry": 0}}}),
            "fail2ban.defaults.maxretry",
        ),
        (
            json!({"fail2ban": {"defaults": {"ignoreip": ["10.0.0.0/8", "a;b"]}}}),
            "fail2ban.defaults.ignoreip[1]",
        ),
    ];
    for (body, field) in cases {
        let mut body = body;
        body["version"] = saved["version"].clone();
        let (status, problem) = post(&hub, "/api/settings", body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
        assert_eq!(problem["code"], "invalid_field", "{problem}");
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    // No version at all.
    let (status, problem) = post(&hub, "/api/settings", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "version");
    // Not JSON.
    let (status, problem) = send(
        hub.client()
            .post(hub.url("/api/settings"))
            .header("content-type", "application/json")
            .body("{not json"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");

    let (_, after) = get(&hub, "/api/settings").await;
    assert_eq!(after, saved, "refused edits changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_edit_is_refused_not_lost() {
    let hub = HubProcess::start().expect("hub starts");
    let (_, base) = get(&hub, "/api/settings").await;
    // Two operators read version 0.
    let mut first = base.clone();
    first["events"] = json!({"retentionDays": 10});
    let mut second = base.clone();
    second["events"] = json!({"retentionDays": 20});
    let (status, saved) = post(&hub, "/api/settings", first).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["version"], 1);
    let (status, problem) = post(&hub, "/api/settings", second.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "settings_conflict");
    let (_, now) = get(&hub, "/api/settings").await;
    assert_eq!(now["events"]["retentionDays"], 10, "the first edit stands");
    assert_eq!(now["version"], 1);

    // The ETag and If-Match carry the version too.
    let response = hub
        .client()
        .get(hub.url("/api/settings"))
        .send()
        .await
        .expect("GET");
    let etag = response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_owned();
    assert_eq!(etag, "\"1\"");
    let mut body = second;
    body.as_object_mut().expect("object").remove("version");
    let (status, saved) = send(
        hub.client()
            .post(hub.url("/api/settings"))
            .header("If-Match", &etag)
            .json(&body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["events"]["retentionDays"], 20);
    let (status, _) = send(
        hub.client()
            .post(hub.url("/api/settings"))
            .header("If-Match", "\"1\"")
            .json(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_email_arrives_and_failures_say_what_to_fix() {
    let smtp = SmtpServer::start().expect("maildev starts");
    let hub = HubProcess::start().expect("hub starts");

    // Settings not saved yet: tried from the request body.
    let (status, result) = post(
        &hub,
        "/api/settings/test-email",
        json!({"to": ["ops@example.test"],
               "smtp": {"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none",
                        "from": "banhub <hub@example.test>"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{result}\n{}", hub.logs());
    assert!(
        result["reply"].as_str().expect("reply").starts_with("250"),
        "{result}"
    );
    let mails = wait_for_async(DEADLINE, "the test e-mail in maildev", || async {
        let mails = smtp.emails().await.ok()?;
        (!mails.is_empty()).then_some(mails)
    })
    .await
    .expect("the mail arrives");
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    assert_eq!(mail.subject, "banhub test e-mail");
    assert_eq!(mail.from[0].address, "hub@example.test");
    assert_eq!(mail.from[0].name, "banhub");
    assert_eq!(mail.to[0].address, "ops@example.test");
    assert!(
        mail.text
            .as_deref()
            .unwrap_or_default()
            .contains("This is a test e-mail from banhub"),
        "{mail:?}"
    );
    assert!(
        mail.html
            .as_deref()
            .unwrap_or_default()
            .contains("<p>This is a test e-mail"),
        "{mail:?}"
    );

    // Saved settings, no body: the saved server and recipients.
    save(
        &hub,
        json!({"smtp": {"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none",
                        "from": "alerts@example.test"},
               "alerts": {"recipients": ["oncall@example.test", "lead@example.test"]}}),
    )
    .await;
    let (status, result) = post(&hub, "/api/settings/test-email", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(
        result["to"],
        json!(["oncall@example.test", "lead@example.test"])
    );
    wait_for_async(DEADLINE, "the second test e-mail", || async {
        let mails = smtp.emails().await.ok()?;
        mails
            .iter()
            .any(|m| m.from[0].address == "alerts@example.test" && m.to.len() == 2)
            .then_some(())
    })
    .await
    .expect("the second mail arrives");

    // Failures name the cause.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_port = closed.local_addr().expect("addr").port();
    drop(closed);
    let failures = [
        (
            json!({"host": "127.0.0.1", "port": closed_port, "tls": "none", "from": "a@example.test"}),
            "smtp_refused",
        ),
        (
            json!({"host": "no-such-host.invalid", "port": 25, "tls": "none", "from": "a@example.test"}),
            "smtp_dns",
        ),
        (
            json!({"host": smtp.host(), "port": smtp.smtp_port(), "tls": "tls", "from": "a@example.test"}),
            "smtp_tls",
        ),
        (
            json!({"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none", "from": "a@example.test", "timeoutSecs": 0}),
            "invalid_field",
        ),
    ];
    for (smtp_doc, code) in failures {
        let (status, problem) = post(
            &hub,
            "/api/settings/test-email",
            json!({"to": ["ops@example.test"], "smtp": smtp_doc}),
        )
        .await;
        assert_eq!(problem["code"], code, "{smtp_doc}: {problem}");
        let want = if code == "invalid_field" {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_GATEWAY
        };
        assert_eq!(status, want, "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("check") || code == "invalid_field"),
            "{problem}"
        );
    }
    let (status, problem) = post(&hub, "/api/settings/test-email", json!({"to": ["nobody"]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "to[0]");
}

/// A hub with servers, each an agent beside its own fail2ban sandbox.
/// A hub with a server per name, each an agent beside its own fail2ban sandbox, all online.
async fn start(names: &[&str]) -> TestFleet {
    TestFleet::start(names)
        .await
        .unwrap_or_else(|e| panic!("the fleet starts: {e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail2ban_defaults_are_pushed_to_every_server_with_a_result_each() {
    let fleet = start(&["alpha", "beta"]).await;
    let hub = &fleet.hub;

    // Nothing saved yet: nothing to push.
    let (status, problem) = post(hub, "/api/settings/fail2ban-defaults/push", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "fail2ban.defaults");

    // An invalid value is refused when saved, before anything reaches a host.
    let before: Vec<_> = fleet
        .hosts
        .iter()
        .map(|h| snapshot(&h.sandbox.conf_dir()))
        .collect();
    let (_, current) = get(hub, "/api/settings").await;
    let (status, problem) = post(
        hub,
        "/api/settings",
        json!({"version": current["version"], "fail2ban": {"defaults": {"maxretry": 3, "findtime": 0}}}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "fail2ban.defaults.findtime");
    let (status, problem) = post(hub, "/api/settings/fail2ban-defaults/push", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    for (host, before) in fleet.hosts.iter().zip(&before) {
        assert_eq!(
            &snapshot(&host.sandbox.conf_dir()),
            before,
            "{} changed",
            host.name
        );
    }

    save(
        hub,
        json!({"fail2ban": {"defaults": {"bantime": 1200, "findtime": 300, "maxretry": 4,
                                         "ignoreip": ["127.0.0.1/8", "192.0.2.0/24"],
                                         "bantimeIncrement": true}}}),
    )
    .await;
    let (status, pushed) = post(hub, "/api/settings/fail2ban-defaults/push", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{pushed}\n{}", hub.logs());
    let results = pushed["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{pushed}");
    for host in &fleet.hosts {
        let result = results
            .iter()
            .find(|r| r["serverId"] == host.id.as_str())
            .unwrap_or_else(|| panic!("no result for {}: {pushed}", host.name));
        assert_eq!(result["ok"], true, "{result}\n{}", host.agent.logs());
        assert_eq!(result["serverName"], host.name.as_str());
        assert_eq!(
            result["change"]["files"][0]["path"], "jail.d/banhub-defaults.local",
            "{result}"
        );
        let file =
            std::fs::read_to_string(host.sandbox.conf_dir().join("jail.d/banhub-defaults.local"))
                .expect("the defaults file");
        for line in [
            "[DEFAULT]",
            "bantime = 1200",
            "findtime = 300",
            "maxretry = 4",
            "ignoreip = 127.0.0.1/8 192.0.2.0/24",
            "bantime.increment = true",
        ] {
            assert!(
                file.contains(line),
                "{line} missing in {}:\n{file}",
                host.name
            );
        }
        // fail2ban itself runs with them (the sandbox's jail.conf says maxretry 3, findtime 600).
        for jail in host.sandbox.jails() {
            let maxretry = host
                .sandbox
                .client(&["get", jail, "maxretry"])
                .expect("fail2ban answers");
            assert_eq!(maxretry.trim(), "4", "{} {jail}", host.name);
            let findtime = host
                .sandbox
                .client(&["get", jail, "findtime"])
                .expect("fail2ban answers");
            assert_eq!(findtime.trim(), "300", "{} {jail}", host.name);
            let ignored = host
                .sandbox
                .client(&["get", jail, "ignoreip"])
                .expect("fail2ban answers");
            assert!(
                ignored.contains("192.0.2.0/24"),
                "{} {jail}: {ignored}",
                host.name
            );
        }
    }

    // To one server by name: one result, only its file changes.
    save(hub, json!({"fail2ban": {"defaults": {"maxretry": 5}}})).await;
    let beta_before = snapshot(&fleet.hosts[1].sandbox.conf_dir());
    let (status, pushed) = post(
        hub,
        "/api/settings/fail2ban-defaults/push",
        json!({"servers": ["alpha"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    assert_eq!(pushed["results"].as_array().map(Vec::len), Some(1));
    assert_eq!(pushed["results"][0]["serverName"], "alpha");
    let alpha = &fleet.hosts[0];
    let jail = &alpha.sandbox.jails()[0];
    assert_eq!(
        alpha
            .sandbox
            .client(&["get", jail, "maxretry"])
            .expect("answers")
            .trim(),
        "5"
    );
    assert_eq!(snapshot(&fleet.hosts[1].sandbox.conf_dir()), beta_before);

    // An unknown server is refused naming it.
    let (status, problem) = post(
        hub,
        "/api/settings/fail2ban-defaults/push",
        json!({"servers": ["alpha", "gamma"]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "servers[1]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_server_gets_its_own_failed_result() {
    let mut fleet = start(&["gamma", "delta"]).await;
    fleet.hosts[1].agent.stop().expect("agent stops");
    let id = fleet.hosts[1].id.clone();
    wait_for_async(DEADLINE, "the agent to be offline", || async {
        let (_, server) = get(&fleet.hub, &format!("/api/servers/{id}")).await;
        (server["status"] == "offline").then_some(())
    })
    .await
    .expect("offline");
    save(
        &fleet.hub,
        json!({"fail2ban": {"defaults": {"maxretry": 6}}}),
    )
    .await;
    let (status, pushed) = post(
        &fleet.hub,
        "/api/settings/fail2ban-defaults/push",
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    let results = pushed["results"].as_array().expect("results");
    let online = results
        .iter()
        .find(|r| r["serverName"] == "gamma")
        .expect("gamma");
    let offline = results
        .iter()
        .find(|r| r["serverName"] == "delta")
        .expect("delta");
    assert_eq!(online["ok"], true, "{online}");
    assert_eq!(offline["ok"], false, "{offline}");
    assert!(
        offline["error"]
            .as_str()
            .is_some_and(|e| e.contains("offline")),
        "{offline}"
    );
}

/// In process (`App::build` on port 0): the retention saved in the settings replaces the
/// configuration's and prunes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_set_in_the_settings_prunes_old_events() {
    use banhub::app::App;
    use banhub::config::Config;
    use banhub::domain::events::{
        BanFacts, EventBody, EventFilter, EventSource, IpOrCidr, JailName, Logs, NewEvent,
    };
    use banhub::domain::{AgentId, Labels, NewServer, ServerName};
    use chrono::{DateTime, Utc};

    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    config.http.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.grpc.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    // The configuration keeps events forever; only the settings ask for pruning.
    config.events.retention_days = 0;
    let app = App::build(config).await.expect("hub builds");
    let state = app.state().clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(app.run(stop.clone()));

    let server = state
        .store
        .create_server(NewServer {
            name: ServerName::parse("old-and-new").expect("name"),
            description: String::new(),
            labels: Labels::default(),
        })
        .await
        .expect("server");
    let day = 24 * 3_600_000_i64;
    let now = Utc::now().timestamp_millis();
    let event = |ip: &str, ms: i64| NewEvent {
        occurred_at: DateTime::from_timestamp_millis(ms).expect("time"),
        source: EventSource::Action,
        body: EventBody::Ban(BanFacts {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse("sshd").expect("jail"),
            hostname: "h".to_owned(),
            failures: 3,
            logs: Logs::capped(["x"]),
            ban_time: None,
            ban_duration: None,
            ban_count: None,
        }),
    };
    let batch = vec![
        (1, event("192.0.2.1", now - 40 * day)),
        (2, event("192.0.2.2", now - 20 * day)),
        (3, event("192.0.2.3", now - day)),
        (4, event("192.0.2.4", now)),
    ];
    state
        .events
        .ingest_batch(server.id, AgentId::new(), 1, batch)
        .await
        .expect("ingest");
    let stored = || async {
        state
            .events
            .list(&EventFilter::default(), None, 100)
            .await
            .expect("list")
            .events
            .len()
    };
    assert_eq!(stored().await, 4);
    assert_eq!(state.events.retention(), None);

    let mut doc = state.settings.view();
    doc.events.retention_days = Some(10);
    let version = doc.version.expect("a version");
    state.settings.update(doc, version).await.expect("saved");
    wait_for_async(DEADLINE, "the old events to be pruned", || async {
        (stored().await == 2).then_some(())
    })
    .await
    .expect("pruned");
    assert_eq!(
        state.events.retention(),
        Some(Duration::from_secs(10 * 24 * 3600))
    );
    stop.cancel();
    task.await.expect("join").expect("clean stop");
}
