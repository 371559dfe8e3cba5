//! The host policy (issue 20, item 1): a jail edit from the hub cannot choose a command or a file
//! outside the logs on a host, unless the host's administrator widened the agent's `[policy]`.
//! Each probe of the review goes through the hub's API to a real agent beside a real fail2ban,
//! and once more straight through the protocol, as a compromised hub would send it
//! ([`rogue`]).

mod rogue;

use std::path::Path;
use std::time::Duration;

use banhub_tests::agent::POLICY_LOG_PREFIXES;
use banhub_tests::fleet::snapshot;
use banhub_tests::{Fail2banSandbox, TestFleet, TestHost, wait_until};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// How long a ban may take to show in the sandbox's action log.
const BAN_DEADLINE: Duration = Duration::from_secs(30);
const JAIL: &str = "testauth";

/// Writes `content` as the jail's override (or its filter's `.local`) through the API, from the
/// version the API reports now.
async fn write(
    fleet: &TestFleet,
    host: &TestHost,
    part: &str,
    content: &str,
) -> (StatusCode, Value) {
    let server = Some(host.id.as_str());
    let path = format!("/api/jails/{JAIL}/config");
    let (status, config) = fleet.get(&path, server).await;
    assert_eq!(status, StatusCode::OK, "{config}");
    let version = config[part]["version"].as_str().unwrap_or_default();
    fleet
        .post(
            &path,
            server,
            &json!({ part: {"content": content, "version": version} }),
        )
        .await
}

/// A 422 problem that names the host policy, the refused key and the setting that would widen it.
fn assert_refused(status: StatusCode, problem: &Value, key: &str, setting: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{key}: {problem}");
    assert_eq!(problem["code"], "host_policy", "{problem}");
    assert_eq!(
        problem["type"], "urn:banhub:problem:host_policy",
        "{problem}"
    );
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("host policy") && detail.contains(&format!("refuses {key}:")),
        "{key}: {detail}"
    );
    assert!(detail.contains(setting), "{key} names {setting}: {detail}");
}

/// Bans `ip` in `testauth` through its log and waits until the `filelog` action recorded it.
fn ban_through_the_log(sandbox: &Fail2banSandbox, ip: &str) {
    sandbox
        .append_failures(&sandbox.log_path(JAIL), ip, 3)
        .expect("failures");
    let line = format!("ban {JAIL} {ip} ");
    wait_until(BAN_DEADLINE, &format!("the ban of {ip}"), || {
        std::fs::read_to_string(sandbox.actions_path()).is_ok_and(|t| t.contains(&line))
    })
    .expect("banned");
}

/// Root installed banhub's action on the host, so `banhub[...]` names an action the host has.
fn root_installs_banhub_action(conf: &Path) {
    std::fs::write(
        conf.join("action.d/banhub.conf"),
        banhub_agent::action::ACTION_CONF,
    )
    .expect("banhub.conf");
}

/// The review's probes: `(which part, content, refused key, setting named)`. `{m}` is a file
/// the command would create.
fn probes(marker: &Path) -> Vec<(&'static str, String, &'static str, &'static str)> {
    let m = marker.display();
    vec![
        (
            "jailOverride",
            format!("[{JAIL}]\naction = filelog[actionban=\"touch {m}\"]\n"),
            "actionban",
            "policy.allow_commands",
        ),
        (
            "jailOverride",
            format!("[{JAIL}]\naction = filelog[actionstart=\"touch {m}\"]\n"),
            "actionstart",
            "policy.allow_commands",
        ),
        (
            "jailOverride",
            format!("[{JAIL}]\nignorecommand = touch {m}\n"),
            "ignorecommand",
            "policy.allow_commands",
        ),
        (
            "jailOverride",
            format!("[{JAIL}]\naction = filelog\n         banhub[notify=\"/some/script\"]\n"),
            "notify",
            "policy.allow_commands",
        ),
        (
            "jailOverride",
            format!("[{JAIL}]\nlogpath = /etc/shadow\n"),
            "logpath",
            "policy.log_prefixes",
        ),
        (
            "jailOverride",
            format!("[{JAIL}]\nport = 22;touch {m}\n"),
            "port",
            "policy.allow_commands",
        ),
        (
            "filterLocal",
            format!("[Definition]\nactionban = touch {m}\n"),
            "actionban",
            "policy.allow_commands",
        ),
    ]
}

#[tokio::test]
async fn commands_and_foreign_files_are_refused_naming_the_host_policy() {
    let fleet = TestFleet::start(&["policy"]).await.expect("fleet");
    let host = fleet.host(0);
    let conf = host.sandbox.conf_dir();
    root_installs_banhub_action(&conf);
    let markers = tempfile::tempdir().expect("marker dir");
    let marker = markers.path().join("ran");

    for (part, content, key, setting) in probes(&marker) {
        let before = snapshot(&conf);
        let (status, problem) = write(&fleet, host, part, &content).await;
        assert_refused(status, &problem, key, setting);
        assert_eq!(snapshot(&conf), before, "{content:?} changed files");
    }

    // A real ban: none of the refused commands runs, neither at the ban nor on a failure.
    ban_through_the_log(&host.sandbox, "192.0.2.10");
    assert!(!marker.exists(), "a refused command ran");
    let logpath = host
        .sandbox
        .client(&["get", JAIL, "logpath"])
        .expect("logpath");
    assert!(!logpath.contains("/etc/shadow"), "{logpath}");
}

#[tokio::test]
async fn everyday_edits_still_apply() {
    let fleet = TestFleet::start(&["everyday"]).await.expect("fleet");
    let host = fleet.host(0);
    let (status, change) = write(
        &fleet,
        host,
        "jailOverride",
        &format!("[{JAIL}]\nmaxretry = 2\n"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert_eq!(
        host.sandbox
            .client(&["get", JAIL, "maxretry"])
            .expect("maxretry"),
        "2"
    );

    // An action root put in action.d, chosen by name with its non-command parameters.
    let content = format!("[{JAIL}]\nmaxretry = 2\naction = filelog[port=2222, protocol=tcp]\n");
    let (status, change) = write(&fleet, host, "jailOverride", &content).await;
    assert_eq!(status, StatusCode::OK, "{change}");
    let actions = host
        .sandbox
        .client(&["get", JAIL, "actions"])
        .expect("actions");
    assert!(actions.contains("filelog"), "{actions}");

    // A log path under an allowed prefix (the harness allows the temporary directory).
    let log = host.sandbox.log_path("dummyjail");
    let content = format!("[{JAIL}]\nmaxretry = 2\nlogpath = {}\n", log.display());
    let (status, change) = write(&fleet, host, "jailOverride", &content).await;
    assert_eq!(status, StatusCode::OK, "{change}");
    let logpath = host
        .sandbox
        .client(&["get", JAIL, "logpath"])
        .expect("logpath");
    assert!(logpath.contains(&log.display().to_string()), "{logpath}");
}

#[tokio::test]
async fn root_widens_the_policy_in_the_agents_own_configuration() {
    let mut fleet = TestFleet::start(&[]).await.expect("hub");
    let strict = Fail2banSandbox::start("strict").expect("sandbox");
    fleet
        .add_host("strict", strict, &[(POLICY_LOG_PREFIXES, "[/var/log]")])
        .await
        .expect("strict host");
    let widened = Fail2banSandbox::start("widened").expect("sandbox");
    fleet
        .add_host(
            "widened",
            widened,
            &[("BANHUB_AGENT_POLICY__ALLOW_COMMANDS", "[actionban]")],
        )
        .await
        .expect("widened host");
    let (strict, widened) = (fleet.host(0), fleet.host(1));
    let markers = tempfile::tempdir().expect("marker dir");
    let marker = markers.path().join("ran");
    let command = format!(
        "[{JAIL}]\naction = filelog[actionban=\"touch {}\"]\n",
        marker.display()
    );

    // The strict host: no log outside /var/log, no command.
    let log = strict.sandbox.log_path("dummyjail");
    let (status, problem) = write(
        &fleet,
        strict,
        "jailOverride",
        &format!("[{JAIL}]\nlogpath = {}\n", log.display()),
    )
    .await;
    assert_refused(status, &problem, "logpath", "policy.log_prefixes");
    let (status, problem) = write(&fleet, strict, "jailOverride", &command).await;
    assert_refused(status, &problem, "actionban", "policy.allow_commands");

    // The widened host: the temporary directory is an allowed prefix, and `actionban` a key
    // root allowed; other command keys stay refused.
    let log = widened.sandbox.log_path("dummyjail");
    let (status, change) = write(
        &fleet,
        widened,
        "jailOverride",
        &format!("[{JAIL}]\nlogpath = {}\n", log.display()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    let (status, problem) = write(
        &fleet,
        widened,
        "jailOverride",
        &format!(
            "[{JAIL}]\naction = filelog[actionstart=\"touch {}\"]\n",
            marker.display()
        ),
    )
    .await;
    assert_refused(status, &problem, "actionstart", "policy.allow_commands");
    let (status, change) = write(&fleet, widened, "jailOverride", &command).await;
    assert_eq!(status, StatusCode::OK, "{change}");
    widened
        .sandbox
        .append_failures(&widened.sandbox.log_path(JAIL), "192.0.2.20", 3)
        .expect("failures");
    wait_until(BAN_DEADLINE, "the allowed actionban to run", || {
        marker.exists()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}
