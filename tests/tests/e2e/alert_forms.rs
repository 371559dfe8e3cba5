//! What the alert forms stand on, against one real hub process: a rule saved with a bad field is
//! refused naming that field and changes nothing; a rule's message previewed in two languages; a
//! test alert through real SMTP (maildev) arriving in the language of `alerts.language`; test
//! alerts to a webhook receiver in the test in Slack's and ntfy's JSON formats; the test alert
//! audited and limited to one per channel at a time; a rule scoped by a server label (a bad
//! selector refused at its field) alerting by e-mail for the bans of the servers carrying it only;
//! and the test alerts' turns shared by two replicas' stores on one PostgreSQL database.

use banhub_tests::hub::HubProcess;
use banhub_tests::hub::{api_get as get, api_post as post};
use banhub_tests::smtp::SmtpServer;
use banhub_tests::wait::wait_for_async;
use banhub_tests::webhook::WebhookReceiver;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);

async fn save(hub: &HubProcess, mut doc: Value) -> (StatusCode, Value) {
    let (_, current) = get(hub, "/api/settings").await;
    doc["version"] = current["version"].clone();
    post(hub, "/api/settings", doc).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_rules_previews_and_test_alerts_through_the_api() {
    let smtp = SmtpServer::start().expect("maildev starts");
    let receiver = WebhookReceiver::start().await.expect("receiver");
    let hub = HubProcess::start().expect("hub starts");
    let (status, saved) = save(
        &hub,
        json!({
            "smtp": {"host": smtp.host(), "port": smtp.smtp_port(), "tls": "none",
                     "from": "banhub alerts <alerts@example.test>"},
            "alerts": {
                "recipients": ["ops@example.test"],
                "language": "de",
                "webhooks": [
                    {"name": "chat", "format": "slack", "url": receiver.url("/hooks/slack")},
                    {"name": "phone", "format": "ntfy-json", "url": receiver.url("/ntfy/banhub-alerts")}
                ],
                "rules": [{"name": "ssh", "jails": ["sshd"], "webhooks": ["chat"]}]
            }
        }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["alerts"]["language"], "de");

    // A bad field: refused with the field named, and nothing changed.
    let mut bad = saved.clone();
    bad["alerts"]["rules"][0]["spike"] = json!({"bans": 1, "windowSecs": 60});
    let (status, problem) = post(&hub, "/api/settings", bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "alerts.rules[0].spike.bans", "{problem}");
    let mut unknown_language = saved.clone();
    unknown_language["alerts"]["language"] = json!("xx");
    let (status, problem) = post(&hub, "/api/settings", unknown_language).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "alerts.language", "{problem}");
    let mut no_topic = saved.clone();
    no_topic["alerts"]["webhooks"][1]["url"] = json!(receiver.url("/"));
    let (status, problem) = post(&hub, "/api/settings", no_topic).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "alerts.webhooks[1].url", "{problem}");
    let (_, now) = get(&hub, "/api/settings").await;
    assert_eq!(
        now["version"], saved["version"],
        "a refused save changes nothing"
    );
    assert_eq!(now["alerts"]["rules"], saved["alerts"]["rules"]);

    // The preview in two languages, in two formats; nothing is sent.
    let (status, en) = post(
        &hub,
        "/api/alerts/preview",
        json!({"ruleName": "ssh", "jail": "sshd", "format": "email", "language": "en"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{en}");
    assert_eq!(en["subject"], "[banhub] ssh: 3 bans on 1 server");
    assert!(
        en["text"].as_str().is_some_and(|t| t.contains("By jail:")),
        "{en}"
    );
    assert!(
        en["html"].as_str().is_some_and(|h| h.contains("<table>")),
        "{en}"
    );
    let (status, de) = post(
        &hub,
        "/api/alerts/preview",
        json!({"ruleName": "ssh", "jail": "sshd", "format": "slack"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{de}");
    assert_eq!(de["language"], "de", "the saved language is the default");
    assert_eq!(
        de["body"]["blocks"][0]["text"]["text"],
        "[banhub] ssh: 3 Sperren auf 1 Server"
    );
    assert!(
        de["body"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Jails: sshd 3")),
        "{de}"
    );
    let (status, problem) = post(
        &hub,
        "/api/alerts/preview",
        json!({"ruleName": "ssh", "jail": "../etc", "format": "email"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "jail");
    assert!(receiver.received().is_empty(), "a preview sends nothing");

    // A test e-mail through real SMTP, in German.
    let (status, sent) = post(&hub, "/api/alerts/test", json!({"channel": "email"})).await;
    assert_eq!(status, StatusCode::OK, "{sent}\n{}", hub.logs());
    assert_eq!(sent["delivered"], true, "{sent}");
    assert!(
        sent["response"]
            .as_str()
            .is_some_and(|r| r.starts_with("250")),
        "{sent}"
    );
    let mails = wait_for_async(DEADLINE, "the test e-mail", || async {
        let mails = smtp.emails().await.ok()?;
        (!mails.is_empty()).then_some(mails)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", hub.logs()));
    let mail = &mails[0];
    assert!(
        mail.subject.starts_with("[banhub] Testalarm: 3 Sperren"),
        "{}",
        mail.subject
    );
    assert_eq!(mail.to[0].address, "ops@example.test");
    let text = mail.text.as_deref().unwrap_or_default();
    assert!(text.starts_with("Dies ist ein Testalarm"), "{text}");
    assert!(text.contains("Nach Jail:"), "{text}");
    // Dates as German write them: day.month.year.
    let year = chrono::Utc::now().format("%Y").to_string();
    assert!(text.contains(&format!(".{year} ")), "{text}");

    // One test per channel at a time; another channel is not held up.
    let (status, problem) = post(&hub, "/api/alerts/test", json!({"channel": "email"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{problem}");
    assert_eq!(problem["code"], "test_alert_too_soon");
    assert_eq!(smtp.emails().await.expect("mails").len(), 1);

    // Slack's incoming-webhook JSON, in English when asked.
    let (status, sent) = post(
        &hub,
        "/api/alerts/test",
        json!({"channel": "webhook", "webhook": "chat", "language": "en"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    assert_eq!(sent["delivered"], true, "{sent}");
    assert_eq!(sent["response"], "HTTP 200 OK");
    // ntfy's JSON publish, to the server's root, naming the topic.
    let (status, sent) = post(
        &hub,
        "/api/alerts/test",
        json!({"channel": "webhook", "webhook": "phone"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    assert_eq!(sent["delivered"], true, "{sent}");
    let received = receiver.received();
    assert_eq!(received.len(), 2, "{received:?}");
    let slack = received[0].json().expect("Slack JSON");
    assert_eq!(received[0].path, "/hooks/slack");
    assert!(
        slack["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("This is a test alert")),
        "{slack}"
    );
    assert_eq!(slack["blocks"][0]["type"], "header");
    assert!(
        slack["blocks"][0]["text"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[banhub] Test alert: 3 bans")),
        "{slack}"
    );
    assert_eq!(slack["blocks"][1]["text"]["type"], "mrkdwn");
    assert_eq!(received[1].path, "/ntfy/");
    let ntfy = received[1].json().expect("ntfy JSON");
    assert_eq!(ntfy["topic"], "banhub-alerts");
    assert!(
        ntfy["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("[banhub] Testalarm")),
        "{ntfy}"
    );
    assert!(
        ntfy["message"]
            .as_str()
            .is_some_and(|m| m.contains("Nach Jail:")),
        "{ntfy}"
    );
    assert_eq!(ntfy["tags"], json!(["rotating_light"]));
    assert_eq!(ntfy["priority"], 4);

    // A channel that is not configured is named.
    let (status, problem) = post(
        &hub,
        "/api/alerts/test",
        json!({"channel": "webhook", "webhook": "pager"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "webhook");

    // Each test alert is in the audit log.
    let (status, page) = get(&hub, "/api/audit?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let tests = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "POST /api/alerts/test")
        .count();
    assert!(tests >= 3, "{page}");

    rule_scoped_by_labels(&hub, &smtp).await;
}

/// A server named `name` carrying `labels`, with a callback secret for direct callbacks.
async fn labelled_server(hub: &HubProcess, name: &str, labels: Value) -> (String, String) {
    let (status, created) =
        post(hub, "/api/servers", json!({"name": name, "labels": labels})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["server"]["id"].as_str().expect("id").to_owned();
    let (status, secret) = post(
        hub,
        &format!("/api/servers/{id}/callback-secret"),
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{secret}");
    (id, secret["secret"].as_str().expect("secret").to_owned())
}

/// A direct ban callback of a host without an agent.
async fn direct_ban(hub: &HubProcess, secret: &str, ip: &str) {
    let response = reqwest::Client::new()
        .post(hub.url("/api/ban"))
        .header("X-Callback-Secret", secret)
        .json(
            &json!({"ip": ip, "jail": "sshd", "hostname": "edge", "failures": 5,
                      "logs": [format!("Failed password for root from {ip} port 22 ssh2")]}),
        )
        .send()
        .await
        .expect("callback");
    assert_eq!(response.status(), StatusCode::OK, "ban {ip}");
}

/// A rule limited to the servers labelled `role=web` alerts by e-mail for web-1's ban and not for
/// db-1's, which is stored first; a selector that breaks the label rule is refused at its field.
async fn rule_scoped_by_labels(hub: &HubProcess, smtp: &SmtpServer) {
    let (_web, web_secret) = labelled_server(hub, "web-1", json!({"role": "web"})).await;
    let (_db, db_secret) = labelled_server(hub, "db-1", json!({"role": "db"})).await;
    let (_, current) = get(hub, "/api/settings").await;
    let mut doc = current.clone();
    doc["alerts"]["digestWindowSecs"] = json!(1);
    doc["alerts"]["rules"] = json!([{"name": "web servers", "labels": {"bad key!": "web"}}]);
    let (status, problem) = post(hub, "/api/settings", doc.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "alerts.rules[0].labels", "{problem}");
    let (_, unchanged) = get(hub, "/api/settings").await;
    assert_eq!(unchanged["version"], current["version"]);

    doc["alerts"]["rules"] = json!([{"name": "web servers", "labels": {"role": "web"}}]);
    let (status, saved) = post(hub, "/api/settings", doc).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(
        saved["alerts"]["rules"][0]["labels"],
        json!({"role": "web"})
    );

    let before = smtp.emails().await.expect("mails").len();
    direct_ban(hub, &db_secret, "198.51.100.20").await;
    direct_ban(hub, &web_secret, "198.51.100.21").await;
    let mails = wait_for_async(DEADLINE, "the label rule's e-mail", || async {
        let mails = smtp.emails().await.ok()?;
        (mails.len() > before).then_some(mails)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", hub.logs()));
    let mail = &mails[before];
    assert!(
        mail.subject.starts_with("[banhub] web servers:"),
        "{}",
        mail.subject
    );
    let text = mail.text.as_deref().unwrap_or_default();
    assert!(text.contains("198.51.100.21"), "{text}");
    assert!(
        !text.contains("198.51.100.20"),
        "db-1's ban is outside the rule: {text}"
    );
    // db-1's ban was stored first, so it was matched by the time web-1's digest went out: the
    // rule's digests hold web-1's ban alone.
    let (status, page) = get(hub, "/api/alerts/digests?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let events: u64 = page["digests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["ruleName"] == "web servers")
        .map(|d| d["events"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(events, 1, "{page}");
}

/// Two stores on one PostgreSQL database stand for two replicas: a channel's turn taken by one is
/// refused to the other until the interval has passed, whichever asks.
#[tokio::test]
async fn test_alert_turns_hold_across_replicas_on_postgresql() {
    let pg = banhub_tests::PostgresServer::start()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = pg
        .create_database("banhub_test_alert_turns")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", pg.logs()));
    let connect = || async {
        banhub::store::Store::connect(&url, 2)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
    };
    let (a, b) = (connect().await, connect().await);
    let interval = Duration::from_secs(10);
    let start = chrono::Utc::now();
    let take = |store: &banhub::store::Store, secs: i64| {
        let at = start + chrono::Duration::seconds(secs);
        let store = store.clone();
        async move {
            store
                .take_test_alert_turn("email", at, interval)
                .await
                .expect("the store answers")
        }
    };
    assert_eq!(take(&a, 0).await, Ok(()));
    assert_eq!(take(&b, 4).await, Err(6));
    assert_eq!(take(&a, 9).await, Err(1));
    assert_eq!(take(&b, 10).await, Ok(()));
    assert_eq!(take(&a, 12).await, Err(8));
    // Both replicas asking at once: exactly one has the turn.
    let (x, y) = tokio::join!(take(&a, 30), take(&b, 30));
    assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
}
