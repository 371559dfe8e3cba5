//! Creating and deleting jails and filters through the API, on a real fail2ban whose `filter.d`
//! holds the filters the installed package ships: a jail on the shipped `sshd` filter and a jail
//! on a custom filter run and ban from a log the test writes, only what banhub created can be
//! deleted, and bad input is refused with the field or fail2ban's own message and changes no file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{CreateJail, DeleteConfig, ErrorCode, delete_config};
use banhub_tests::fleet::snapshot;
use banhub_tests::wait::wait_until;
use banhub_tests::{CommandHost, Fail2banSandbox, TestFleet};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BAN_DEADLINE: Duration = Duration::from_secs(20);

/// A hub with one host whose sandbox has the shipped filters.
async fn fleet() -> TestFleet {
    let mut fleet = TestFleet::on(
        TestFleet::hub_builder()
            .start()
            .unwrap_or_else(|e| panic!("the hub starts: {e:#}")),
    );
    let sandbox = Fail2banSandbox::builder()
        .name("create")
        .shipped_filters()
        .start()
        .unwrap_or_else(|e| panic!("the sandbox starts: {e:#}"));
    fleet
        .add_host("create", sandbox, &[])
        .await
        .unwrap_or_else(|e| panic!("the host comes online: {e:#}"));
    fleet
}

async fn delete(fleet: &TestFleet, path: &str) -> (StatusCode, Value) {
    let server = fleet.host(0).id.clone();
    fleet
        .send(
            fleet.hub.client().delete(fleet.hub.url(path)),
            Some(&server),
        )
        .await
}

async fn post(fleet: &TestFleet, path: &str, body: &Value) -> (StatusCode, Value) {
    let server = fleet.host(0).id.clone();
    fleet.post(path, Some(&server), body).await
}

/// `n` lines of sshd refusing a password from `ip`, in syslog's format, time now.
fn append_sshd_failures(log: &Path, ip: &str, n: usize) {
    let now = chrono::Local::now().format("%b %e %H:%M:%S");
    let mut text = String::new();
    for i in 0..n {
        let _ = writeln!(
            text,
            "{now} web-1 sshd[{}]: Failed password for invalid user admin from {ip} port {} ssh2",
            4000 + i,
            50000 + i
        );
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .expect("open the log");
    std::io::Write::write_all(&mut file, text.as_bytes()).expect("append");
}

fn wait_banned(fleet: &TestFleet, jail: &str, ip: &str) {
    let host = fleet.host(0);
    wait_until(BAN_DEADLINE, &format!("{ip} banned in {jail}"), || {
        host.banned(jail).contains(ip)
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

fn conf_files(fleet: &TestFleet) -> BTreeMap<PathBuf, Vec<u8>> {
    snapshot(&fleet.host(0).sandbox.conf_dir())
}

#[tokio::test]
async fn jails_on_shipped_and_custom_filters_run_ban_and_are_deleted() {
    let fleet = fleet().await;
    let host = fleet.host(0);
    let conf = host.sandbox.conf_dir();

    let (status, catalog) = fleet.get("/api/filters/catalog", Some(&host.id)).await;
    assert_eq!(status, StatusCode::OK, "{catalog}");
    let sshd = catalog["filters"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "sshd"))
        .unwrap_or_else(|| panic!("the shipped sshd filter is listed: {catalog}"));
    assert_eq!(
        (&sshd["conf"], &sshd["managed"]),
        (&json!(true), &json!(false))
    );
    assert!(
        catalog["jailTemplates"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "testauth")),
        "{catalog}"
    );

    // A jail on the shipped sshd filter, reading a log the test writes.
    let ssh_log = host.sandbox.dir().join("ssh.log");
    std::fs::write(&ssh_log, "").expect("create the log");
    let (status, body) = post(
        &fleet,
        "/api/jails",
        &json!({
            "name": "sshd-web", "filter": "sshd", "logPaths": [ssh_log],
            "backend": "polling", "maxretry": 3, "findtime": 600, "bantime": 3600, "port": "ssh"
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}\n{}", fleet.logs());
    assert_eq!(body["files"][0]["path"], "jail.d/sshd-web.local", "{body}");
    assert_eq!(body["failedJails"], json!([]), "{body}");
    let written = std::fs::read_to_string(conf.join("jail.d/sshd-web.local")).expect("the file");
    assert!(
        written.starts_with("# Managed by banhub: created "),
        "{written}"
    );
    let status = host
        .sandbox
        .client(&["status", "sshd-web"])
        .expect("the jail runs");
    assert!(status.contains("Status for the jail: sshd-web"), "{status}");
    append_sshd_failures(&ssh_log, "192.0.2.71", 3);
    wait_banned(&fleet, "sshd-web", "192.0.2.71");

    // A custom filter, then a jail using it.
    let (status, body) = post(
        &fleet,
        "/api/filters",
        &json!({
            "name": "webapp-login",
            "failregex": ["^\\s*Failed login for \\S+ from <HOST>$"],
            "datepattern": "{^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S"
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}\n{}", fleet.logs());
    assert_eq!(body["files"][0]["path"], "filter.d/webapp-login.local");
    let app_log = host.sandbox.dir().join("webapp.log");
    std::fs::write(&app_log, "").expect("create the log");
    let (status, body) = post(
        &fleet,
        "/api/jails",
        &json!({
            "name": "webapp", "filter": "webapp-login", "logPaths": [app_log],
            "backend": "polling", "maxretry": 2, "findtime": 600, "bantime": -1
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}\n{}", fleet.logs());
    host.sandbox
        .append_failures(&app_log, "198.51.100.72", 2)
        .expect("append");
    wait_banned(&fleet, "webapp", "198.51.100.72");

    let (_, catalog) = fleet.get("/api/filters/catalog", Some(&host.id)).await;
    assert_eq!(catalog["managedJails"], json!(["sshd-web", "webapp"]));
    assert!(
        catalog["filters"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f["name"] == "webapp-login" && f["managed"] == true)),
        "{catalog}"
    );

    // The filter is refused while a jail uses it; then both go.
    let before = conf_files(&fleet);
    let (status, body) = delete(&fleet, "/api/filters/webapp-login").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("webapp")),
        "{body}"
    );
    assert_eq!(
        conf_files(&fleet),
        before,
        "a refused delete changes nothing"
    );
    for path in [
        "/api/jails/webapp",
        "/api/filters/webapp-login",
        "/api/jails/sshd-web",
    ] {
        let (status, body) = delete(&fleet, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}\n{}", fleet.logs());
    }
    assert!(!conf.join("jail.d/webapp.local").exists());
    assert!(!conf.join("jail.d/sshd-web.local").exists());
    assert!(!conf.join("filter.d/webapp-login.local").exists());
    let jails = host
        .sandbox
        .client(&["status"])
        .expect("fail2ban still runs");
    assert!(
        !jails.contains("sshd-web") && !jails.contains("webapp") && jails.contains("testauth"),
        "{jails}"
    );
}

#[tokio::test]
async fn only_what_banhub_created_is_deleted() {
    let fleet = fleet().await;
    let conf = fleet.host(0).sandbox.conf_dir();
    std::fs::create_dir_all(conf.join("jail.d")).expect("jail.d");
    std::fs::write(
        conf.join("jail.d/handmade.local"),
        "[handmade]\nenabled = false\nfilter = sshd\nlogpath = /var/log/auth.log\n",
    )
    .expect("a hand-written jail");
    let before = conf_files(&fleet);

    let (status, body) = delete(&fleet, "/api/jails/handmade").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "host_policy", "{body}");
    for (path, code) in [
        // Defined in jail.conf, no file of its own; and a shipped filter without a `.local`.
        ("/api/jails/testauth", "not_found_on_host"),
        ("/api/filters/sshd", "not_found_on_host"),
        ("/api/jails/banhub-probe", "invalid_field"),
    ] {
        let (status, body) = delete(&fleet, path).await;
        assert_eq!(body["code"], code, "{path}: {status} {body}");
    }
    assert_eq!(conf_files(&fleet), before, "refused deletes change nothing");
    let jails = fleet.host(0).sandbox.client(&["status"]).expect("runs");
    assert!(jails.contains("testauth"), "{jails}");
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let fleet = fleet().await;
    let log = fleet.host(0).sandbox.dir().join("ssh.log");
    std::fs::write(&log, "").expect("create the log");
    let log = log.display().to_string();
    let jail = |changes: Value| {
        let mut body = json!({
            "name": "sshd-new", "filter": "sshd", "logPaths": [log],
            "maxretry": 3, "findtime": 600, "bantime": 600
        });
        if let (Some(body), Some(changes)) = (body.as_object_mut(), changes.as_object()) {
            body.extend(changes.clone());
        }
        body
    };
    let before = conf_files(&fleet);
    for (body, field) in [
        (
            jail(json!({"logPaths": ["/var/log/../../etc/shadow"]})),
            "logPaths[0]",
        ),
        (jail(json!({"logPaths": ["auth.log"]})), "logPaths[0]"),
        (jail(json!({"name": "../x"})), "name"),
        (jail(json!({"name": "banhub-shared"})), "name"),
        (jail(json!({"maxretry": 0})), "maxretry"),
        (jail(json!({"findtime": 0})), "findtime"),
        (jail(json!({"port": "22;reboot"})), "port"),
        (jail(json!({"journalMatch": "_COMM=sshd"})), "journalMatch"),
    ] {
        let (status, answer) = post(&fleet, "/api/jails", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(
            (&answer["code"], &answer["field"]),
            (&json!("invalid_field"), &json!(field)),
            "{body}: {answer}"
        );
    }

    // Taken names: a jail of jail.conf, a shipped filter.
    let (status, answer) = post(&fleet, "/api/jails", &jail(json!({"name": "testauth"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .is_some_and(|d| d.contains("already exists")),
        "{answer}"
    );
    let (status, answer) = post(
        &fleet,
        "/api/filters",
        &json!({"name": "sshd", "failregex": ["^x <HOST>$"]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["code"], "agent_refused_argument", "{answer}");

    // A filter fail2ban refuses: its own message comes back.
    let (status, answer) = post(
        &fleet,
        "/api/filters",
        &json!({"name": "broken", "failregex": ["^Failed from <HOST> (unclosed"]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["code"], "config_invalid", "{answer}");
    let details = answer["details"].to_string();
    assert!(
        details.contains("unclosed") || details.contains("missing )"),
        "fail2ban's message: {answer}"
    );
    // A jail fail2ban cannot start (its log does not exist): refused or rolled back.
    let missing = fleet.host(0).sandbox.dir().join("missing.log");
    let (status, answer) = post(&fleet, "/api/jails", &jail(json!({"logPaths": [missing]}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["code"], "config_invalid", "{answer}");
    // A filter that does not exist on the host.
    let (status, answer) = post(&fleet, "/api/jails", &jail(json!({"filter": "nosuch"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(conf_files(&fleet), before, "refused input changes no file");
}

/// The agent checks a new jail again, whatever the hub sent.
#[tokio::test]
async fn the_agent_refuses_bad_jails_itself() {
    let host = CommandHost::start("create-agent");
    let before = host.files();
    let base = CreateJail {
        jail: "sshd-new".to_owned(),
        filter: "testauth".to_owned(),
        log_paths: vec![host.sandbox.log_path("testauth").display().to_string()],
        maxretry: 3,
        findtime: 600,
        bantime: 600,
        enabled: true,
        ..CreateJail::default()
    };
    for request in [
        CreateJail {
            log_paths: vec!["/var/log/../../etc/shadow".to_owned()],
            ..base.clone()
        },
        CreateJail {
            log_paths: vec!["relative.log".to_owned()],
            ..base.clone()
        },
        CreateJail {
            maxretry: 0,
            ..base.clone()
        },
        CreateJail {
            jail: "a\n[DEFAULT]".to_owned(),
            ..base.clone()
        },
        CreateJail {
            jail: "dummyjail".to_owned(),
            ..base.clone()
        },
    ] {
        match host.run(Kind::CreateJail(request.clone())).await {
            Outcome::Error(e) => assert_eq!(
                ErrorCode::try_from(e.code),
                Ok(ErrorCode::InvalidArgument),
                "{request:?}: {}",
                e.message
            ),
            other => panic!("{request:?} accepted: {other:?}"),
        }
    }
    let delete = DeleteConfig {
        target: Some(delete_config::Target::Jail("testauth".to_owned())),
    };
    match host.run(Kind::DeleteConfig(delete)).await {
        Outcome::Error(e) => assert_eq!(
            ErrorCode::try_from(e.code),
            Ok(ErrorCode::NotFound),
            "{}",
            e.message
        ),
        other => panic!("testauth deleted: {other:?}"),
    }
    assert_eq!(host.files(), before, "refused commands change no file");
}
