//! Applied means running: after a configuration change through the API, fail2ban runs what the
//! files say (the jail's own action back after a revert, a removed `ignorecommand` gone), and the
//! API shows what fail2ban runs beside the files, flagging any difference.

use std::time::Duration;

use banhub_tests::TestFleet;
use banhub_tests::wait::wait_until;
use reqwest::StatusCode;
use serde_json::{Value, json};

const BAN_DEADLINE: Duration = Duration::from_secs(20);

async fn fleet() -> TestFleet {
    TestFleet::start(&["alpha"]).await.expect("fleet starts")
}

/// `GET /api/jails/testauth/config` of the fleet's only host.
async fn jail_config(fleet: &TestFleet) -> Value {
    let server = Some(fleet.host(0).id.as_str());
    let (status, config) = fleet.get("/api/jails/testauth/config", server).await;
    assert_eq!(status, StatusCode::OK, "{config}");
    config
}

/// Writes (or, with empty content, removes) `jail.d/testauth.local` through the API.
async fn write_override(fleet: &TestFleet, content: &str) -> (StatusCode, Value) {
    let config = jail_config(fleet).await;
    let version = config["jailOverride"]["version"]
        .as_str()
        .unwrap_or_default();
    fleet
        .post(
            "/api/jails/testauth/config",
            Some(fleet.host(0).id.as_str()),
            &json!({"jailOverride": {"content": content, "version": version}}),
        )
        .await
}

/// fail2ban's answer to `get testauth <setting>` in the host's sandbox.
fn running(fleet: &TestFleet, setting: &str) -> String {
    fleet
        .host(0)
        .sandbox
        .client(&["get", "testauth", setting])
        .expect("fail2ban answers")
}

#[tokio::test]
async fn a_reverted_action_runs_the_jails_own_action_again() {
    let fleet = fleet().await;
    let sandbox = &fleet.host(0).sandbox;
    assert!(running(&fleet, "actions").ends_with("filelog"));

    let (status, change) = write_override(&fleet, "[testauth]\naction = noop\n").await;
    assert_eq!(status, StatusCode::OK, "{change}\n{}", fleet.logs());
    assert_eq!(change["failedJails"], json!([]), "{change}");
    assert!(
        running(&fleet, "actions").ends_with("\nnoop"),
        "{}",
        running(&fleet, "actions")
    );

    // The review's reproduction: the empty override is the revert a plain reload got wrong.
    let (status, change) = write_override(&fleet, "").await;
    assert_eq!(status, StatusCode::OK, "{change}\n{}", fleet.logs());
    assert_eq!(
        running(&fleet, "actions"),
        "The jail testauth has the following actions:\nfilelog"
    );
    assert!(
        change["message"]
            .as_str()
            .unwrap_or_default()
            .contains("restarted testauth"),
        "{change}"
    );

    // A real ban after the revert reaches the jail's own action.
    sandbox
        .append_failures(&sandbox.log_path("testauth"), "203.0.113.45", 3)
        .expect("failures written");
    wait_until(BAN_DEADLINE, "the file action to record the ban", || {
        std::fs::read_to_string(sandbox.actions_path())
            .is_ok_and(|text| text.contains("ban testauth 203.0.113.45 "))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    let config = jail_config(&fleet).await;
    assert_eq!(config["runningSettings"]["actions"], "filelog", "{config}");
    assert_eq!(config["drift"], json!([]), "{config}");
}

#[tokio::test]
async fn a_removed_ignorecommand_no_longer_runs() {
    let fleet = fleet().await;
    let sandbox = &fleet.host(0).sandbox;
    // Root's own file sets the command (the hub may not), and fail2ban runs it.
    std::fs::create_dir_all(sandbox.conf_dir().join("jail.d")).expect("jail.d");
    std::fs::write(
        sandbox.conf_dir().join("jail.d/testauth.local"),
        "[testauth]\nignorecommand = /bin/false\n",
    )
    .expect("override written");
    sandbox
        .client(&["reload", "testauth"])
        .expect("fail2ban reloads");
    assert_eq!(running(&fleet, "ignorecommand"), "/bin/false");
    let config = jail_config(&fleet).await;
    assert_eq!(config["runningSettings"]["ignorecommand"], "/bin/false");
    assert_eq!(config["drift"], json!([]), "{config}");

    let (status, change) = write_override(&fleet, "").await;
    assert_eq!(status, StatusCode::OK, "{change}\n{}", fleet.logs());
    assert!(!sandbox.conf_dir().join("jail.d/testauth.local").exists());
    let now = running(&fleet, "ignorecommand");
    assert!(!now.contains("/bin/false"), "still running {now:?}");
    let config = jail_config(&fleet).await;
    assert_eq!(config["runningSettings"]["ignorecommand"], "", "{config}");
    assert_eq!(config["drift"], json!([]), "{config}");
}

/// The drift entry of `setting` in a jail config or jail summary.
fn drift_of<'a>(jail: &'a Value, setting: &str) -> Option<&'a Value> {
    jail["drift"]
        .as_array()?
        .iter()
        .find(|d| d["setting"] == setting)
}

#[tokio::test]
async fn the_api_shows_what_runs_and_flags_what_differs_from_the_files() {
    let fleet = fleet().await;
    let server = Some(fleet.host(0).id.as_str());
    let (status, change) = write_override(&fleet, "[testauth]\nmaxretry = 5\n").await;
    assert_eq!(status, StatusCode::OK, "{change}");

    // After a clean write fail2ban runs what the files say.
    let config = jail_config(&fleet).await;
    assert_eq!(config["runningSettings"]["maxretry"], "5", "{config}");
    assert_eq!(config["effective"]["maxretry"], "5", "{config}");
    assert_eq!(config["drift"], json!([]), "{config}");
    let (status, list) = fleet.get("/api/jails/manage", server).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    for jail in list["jails"].as_array().expect("jails") {
        assert_eq!(jail["drift"], json!([]), "{jail}");
    }

    // Someone changes the running jail behind the files' back: both reads flag it.
    fleet
        .host(0)
        .sandbox
        .client(&["set", "testauth", "maxretry", "99"])
        .expect("fail2ban takes it");
    let config = jail_config(&fleet).await;
    let drift = drift_of(&config, "maxretry").unwrap_or_else(|| panic!("no drift: {config}"));
    assert_eq!(drift["fileValue"], "5");
    assert_eq!(drift["runningValue"], "99");
    assert_eq!(config["runningSettings"]["maxretry"], "99");
    let (_, list) = fleet.get("/api/jails/manage", server).await;
    let testauth = list["jails"]
        .as_array()
        .and_then(|jails| jails.iter().find(|j| j["name"] == "testauth"))
        .unwrap_or_else(|| panic!("no testauth: {list}"));
    assert!(drift_of(testauth, "maxretry").is_some(), "{testauth}");
    let dummy = list["jails"]
        .as_array()
        .and_then(|jails| jails.iter().find(|j| j["name"] == "dummyjail"))
        .unwrap_or_else(|| panic!("no dummyjail: {list}"));
    assert_eq!(dummy["drift"], json!([]), "{dummy}");

    // A failure expression added at run time is a filter the files do not name.
    fleet
        .host(0)
        .sandbox
        .client(&["set", "testauth", "addfailregex", "^evil <HOST>$"])
        .expect("fail2ban takes it");
    let config = jail_config(&fleet).await;
    let drift = drift_of(&config, "failregex").unwrap_or_else(|| panic!("no drift: {config}"));
    assert!(
        drift["runningValue"]
            .as_str()
            .is_some_and(|r| r.contains("^evil ")),
        "{drift}"
    );

    // The next write of the jail leaves it running its files again.
    let (status, change) = write_override(&fleet, "[testauth]\nmaxretry = 6\n").await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert_eq!(running(&fleet, "maxretry"), "6");
    assert_eq!(jail_config(&fleet).await["drift"], json!([]));
}
