//! Filter previews on a host's real log (`POST /api/jails/{jail}/preview`, `POST /api/previews`):
//! a real fail2ban sandbox, a log the test writes, the agent running `fail2ban-regex` over it.
//! The counts and the would-be-banned set are exactly what was written, a protected network's
//! address is flagged with its entry, `maxretry` changes the answer, a size bound is reported,
//! bad input is a 422 that changes no file, and other commands answer while a long preview runs.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use banhub_tests::fleet::snapshot;
use banhub_tests::process::children_named;
use banhub_tests::{TestFleet, wait_for_async, wait_until_async};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The protected network of the test, and an address of it that fails often.
const OFFICE: &str = "203.0.113.0/24";
const OFFICE_IP: &str = "203.0.113.7";

/// Appends `n` failures of `ip` (timestamped now, as the jail's filter reads them) and one line
/// the filter does not match.
fn write_log(path: &Path, failures: &[(&str, usize)]) -> usize {
    let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
    let mut text = String::new();
    let mut lines = 0;
    for (ip, n) in failures {
        for _ in 0..*n {
            let _ = writeln!(text, "{now} Failed login for root from {ip}");
            lines += 1;
        }
        let _ = writeln!(text, "{now} Accepted login for alice from {ip}");
        lines += 1;
    }
    std::fs::write(path, text).expect("write the log");
    lines
}

fn ips(list: &Value) -> Vec<&str> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|a| a["ip"].as_str().expect("ip"))
        .collect()
}

#[tokio::test]
async fn a_preview_counts_the_jails_own_log_and_flags_a_protected_address() {
    let fleet = TestFleet::start(&["web-1"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let (status, added) = fleet
        .post(
            "/api/protected-networks",
            None,
            &json!({"network": OFFICE, "note": "office VPN"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let lines = write_log(
        &host.sandbox.log_path("testauth"),
        &[("192.0.2.10", 5), (OFFICE_IP, 4), ("198.51.100.20", 2)],
    );

    // The hub writes the protected network into the hosts' ignoreip as well: wait for both, so
    // the configuration is settled before its bytes are compared below.
    let preview = wait_for_async(
        Duration::from_secs(30),
        "the protected network on the host",
        || async {
            let (status, body) = fleet
                .post("/api/jails/testauth/preview", server, &json!({}))
                .await;
            let settled = status == StatusCode::OK
                && body["ignoreip"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|e| e == OFFICE));
            settled.then_some(body)
        },
    )
    .await;
    let preview = match preview {
        Ok(preview) => preview,
        Err(e) => {
            let last = fleet
                .post("/api/jails/testauth/preview", server, &json!({}))
                .await;
            panic!("{e}: {last:?}\n{}", fleet.logs())
        }
    };

    assert_eq!(preview["linesRead"], lines, "{preview}");
    assert_eq!(preview["linesMatched"], 11, "{preview}");
    assert_eq!(preview["addresses"], 3);
    assert_eq!(preview["maxretry"], 3);
    assert_eq!(preview["findtimeSecs"], 600);
    assert_eq!(preview["filter"], "testauth");
    assert_eq!(preview["boundsHit"], json!([]));
    assert_eq!(
        preview["logs"][0]["path"],
        host.sandbox.log_path("testauth").display().to_string()
    );
    assert_eq!(preview["logs"][0]["truncated"], false);
    assert_eq!(ips(&preview["wouldBan"]), ["192.0.2.10", OFFICE_IP]);
    assert_eq!(preview["wouldBanTotal"], 2);
    assert_eq!(
        ips(&preview["top"]),
        ["192.0.2.10", OFFICE_IP, "198.51.100.20"]
    );
    assert_eq!(preview["top"][0]["matches"], 5);
    let office = &preview["wouldBan"][1];
    assert_eq!(office["protectedBy"]["kind"], "configured", "{office}");
    assert_eq!(office["protectedBy"]["entry"], OFFICE);
    assert_eq!(office["protectedBy"]["note"], "office VPN");
    assert_eq!(preview["wouldBan"][0]["protectedBy"], Value::Null);
    assert_eq!(preview["protectedHits"], 1);

    // maxretry changes the answer: 2 bans all three, 5 only the busiest.
    let (_, two) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"maxretry": 2}),
        )
        .await;
    assert_eq!(
        ips(&two["wouldBan"]),
        ["192.0.2.10", OFFICE_IP, "198.51.100.20"],
        "{two}"
    );
    let (_, five) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"maxretry": 5}),
        )
        .await;
    assert_eq!(ips(&five["wouldBan"]), ["192.0.2.10"], "{five}");
    assert_eq!(five["protectedHits"], 0);

    // A size bound: only the end of the log is read, and the answer says so.
    let (status, cut) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"maxBytes": 200}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cut}");
    assert_eq!(cut["boundsHit"], json!(["size"]), "{cut}");
    assert_eq!(cut["logs"][0]["truncated"], true);
    assert!(
        cut["linesRead"].as_u64().expect("lines") < lines as u64,
        "{cut}"
    );
    assert!(cut["logs"][0]["bytesRead"].as_u64().expect("bytes") <= 200);

    // A proposed filter text runs instead of the jail's.
    let (status, accepted) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"filterText": "[Definition]\nfailregex = ^\\s*Accepted login for \\S+ from <HOST>$\ndatepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{accepted}");
    assert_eq!(accepted["linesMatched"], 3, "{accepted}");
    assert_eq!(accepted["wouldBanTotal"], 0);

    // The same preview across the fleet, answered per host.
    let (status, many) = fleet
        .post(
            "/api/previews",
            None,
            &json!({"jail": "testauth", "all": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{many}");
    assert_eq!(many["hosts"][0]["serverName"], "web-1");
    assert_eq!(many["hosts"][0]["status"], "ok", "{many}");
    assert_eq!(many["hosts"][0]["preview"]["protectedHits"], 1);

    // Bad input: a 422 naming the field (or the agent's refusal), and no file changes.
    let conf = host.sandbox.conf_dir();
    let before = snapshot(&conf);
    let refusals = [
        (json!({"maxretry": 0}), "maxretry"),
        (json!({"findtimeSecs": 0}), "findtimeSecs"),
        (json!({"logPaths": ["auth.log"]}), "logPaths[0]"),
        (
            json!({"logPaths": ["/var/log/../../etc/shadow"]}),
            "logPaths[0]",
        ),
        (json!({"filter": "../sshd"}), "filter"),
        (json!({"filter": "testauth", "filterText": "x"}), "filter"),
        (json!({"maxBytes": 0}), "maxBytes"),
        (json!({"timeBudgetMs": 600000}), "timeBudgetMs"),
    ];
    for (body, field) in refusals {
        let (status, problem) = fleet
            .post("/api/jails/testauth/preview", server, &body)
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
        assert_eq!(problem["code"], "invalid_field", "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    // Outside the host policy's log directories: the agent refuses it.
    let (status, problem) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"logPaths": ["/etc/passwd"]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "agent_refused_argument", "{problem}");
    let (status, problem) = fleet
        .post("/api/jails/nosuch/preview", server, &json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["code"], "not_found_on_host", "{problem}");
    let (status, problem) = fleet
        .post(
            "/api/jails/testauth/preview",
            server,
            &json!({"filterLocal": "[Definition]\nfailregex = no host group\n"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["code"], "config_invalid", "{problem}");
    let (status, problem) = fleet
        .post("/api/previews", None, &json!({"jail": "testauth"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "labels", "{problem}");
    assert_eq!(snapshot(&conf), before, "a refused preview changed a file");
}

/// A filter whose regular expression backtracks exponentially on a run of `a`s that ends otherwise.
const CATASTROPHIC: &str = "[Definition]\nfailregex = ^(a+)+x <HOST>$\n";

#[tokio::test]
async fn other_commands_answer_while_a_long_preview_runs() {
    let fleet = TestFleet::start(&["web-1"]).await.expect("fleet");
    let host = fleet.host(0);
    let server = Some(host.id.as_str());
    let slow_log = host.sandbox.dir().join("slow.log");
    let line = format!("{}b\n", "a".repeat(60));
    std::fs::write(&slow_log, line.repeat(20)).expect("slow log");
    let agent_pid = host.agent.pid().expect("the agent runs");

    let body = json!({
        "filterText": CATASTROPHIC,
        "logPaths": [slow_log.display().to_string()],
        "timeBudgetMs": 8000,
    });
    let started = Instant::now();
    let preview = fleet.post("/api/jails/testauth/preview", server, &body);
    let meanwhile = async {
        wait_until_async(Duration::from_secs(20), "fail2ban-regex to run", || async {
            children_named(agent_pid, "fail2ban-regex") > 0
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
        let (status, jails) = fleet.get("/api/jails/manage", server).await;
        (
            status,
            jails,
            started.elapsed(),
            children_named(agent_pid, "fail2ban-regex"),
        )
    };
    let ((status, preview), (jails_status, jails, answered_after, running)) =
        tokio::join!(preview, meanwhile);
    let preview_took = started.elapsed();

    assert_eq!(jails_status, StatusCode::OK, "{jails}");
    assert!(
        jails["jails"].as_array().is_some_and(|l| !l.is_empty()),
        "{jails}"
    );
    assert_eq!(
        running, 1,
        "the preview was still running when the jails answered"
    );
    assert!(
        answered_after < preview_took,
        "the jails answered after {answered_after:?}, the preview took {preview_took:?}"
    );
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["boundsHit"], json!(["time"]), "{preview}");
    wait_until_async(
        Duration::from_secs(10),
        "fail2ban-regex to be gone",
        || async { children_named(agent_pid, "fail2ban-regex") == 0 },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: a preview outlived its time budget"));
}
