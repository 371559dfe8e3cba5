//! `banhub-agent install-action` / `uninstall-action` against a real fail2ban: the action is
//! attached to every enabled jail (one with the default action, one with its own `action =`), a
//! disabled jail stays disabled, bans from log lines in each jail reach the hub, a second install
//! changes nothing, uninstall leaves the config directory byte for byte as it was, and installing
//! while fail2ban is stopped works once fail2ban starts.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use banhub_tests::agent::run_command;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_for_async, wait_until};
use banhub_tests::{TestFleet, TestHost};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// `banhub-agent <command> --config-dir … --state-dir … --fail2ban-socket …`.
fn action(host: &TestHost, command: &str) -> Output {
    let conf = host.sandbox.conf_dir();
    let state = host.state_dir();
    let socket = host.sandbox.socket_path();
    let args: Vec<&OsStr> = vec![
        OsStr::new(command),
        OsStr::new("--config-dir"),
        conf.as_os_str(),
        OsStr::new("--state-dir"),
        state.as_os_str(),
        OsStr::new("--fail2ban-socket"),
        socket.as_os_str(),
    ];
    run_command(&args, &[]).expect("the agent binary runs")
}

fn actions(host: &TestHost, jail: &str) -> String {
    host.sandbox
        .client(&["get", jail, "actions"])
        .unwrap_or_else(|e| panic!("{e:#}\n{}", host.sandbox.logs()))
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// A sandbox with `testauth` (the default action), `dummyjail` (its own `action =`) and a
/// disabled jail, a hub, and an enrolled agent running beside them.
async fn start(name: &str) -> TestFleet {
    let hub = TestFleet::hub_builder().start().expect("hub starts");
    let sandbox = Fail2banSandbox::builder()
        .name(name)
        .start()
        .expect("fail2ban sandbox");
    // Disabled: fail2ban does not read it until it is enabled, so no reload is needed.
    std::fs::create_dir_all(sandbox.conf_dir().join("jail.d")).expect("jail.d");
    std::fs::write(
        sandbox.conf_dir().join("jail.d/offjail.conf"),
        format!(
            "[offjail]\nenabled = false\nfilter = testauth\nlogpath = {}\n",
            sandbox.dir().join("off.log").display()
        ),
    )
    .expect("disabled jail");
    let mut fleet = TestFleet::on(hub);
    fleet
        .add_host(name, sandbox, &[])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let host = &fleet.hosts[0];
    // install-action reads where the relay really listens (the harness gives it port 0).
    let relay = host.state_dir().join("relay.json");
    wait_until(DEADLINE, "the relay to listen", || relay.exists()).expect("relay.json");
    fleet
}

/// Every entry under `dir` (relative path → kind, permission bits and content), in order.
fn tree(dir: &Path) -> BTreeMap<String, (String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (String, Vec<u8>)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let rel = path
                .strip_prefix(root)
                .expect("inside")
                .display()
                .to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.insert(rel, (format!("dir {mode:o}"), Vec::new()));
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                out.insert(rel, (format!("file {mode:o}"), bytes));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

async fn event(fleet: &TestFleet, query: &str) -> Option<Value> {
    let url = fleet.hub.url(&format!(
        "/api/events/bans?serverId={}&limit=100{query}",
        fleet.hosts[0].id
    ));
    let page: Value = fleet
        .hub
        .client()
        .get(&url)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    page["events"].as_array()?.first().cloned()
}

#[tokio::test]
async fn install_attaches_to_every_enabled_jail_bans_reach_the_hub_and_uninstall_restores_the_dir()
{
    let fleet = start("install").await;
    let conf = fleet.hosts[0].sandbox.conf_dir();
    let before = tree(&conf);
    assert!(actions(&fleet.hosts[0], "testauth").ends_with("filelog"));

    let out = action(&fleet.hosts[0], "install-action");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "install-action failed\n{stdout}\n{}\n{}",
        text(&out.stderr),
        fleet.hosts[0].sandbox.logs()
    );
    assert!(stdout.contains("Every running jail"), "{stdout}");
    // fail2ban runs banhub in each enabled jail, next to the jail's own actions.
    assert_eq!(
        actions(&fleet.hosts[0], "testauth").lines().last(),
        Some("filelog, banhub")
    );
    assert_eq!(
        actions(&fleet.hosts[0], "dummyjail").lines().last(),
        Some("dummy, banhub")
    );
    assert_eq!(
        actions(&fleet.hosts[0], "banhub-probe").lines().last(),
        Some("banhub")
    );
    // The shared-ban jail runs the host's own ban action, then banhub.
    assert_eq!(
        actions(&fleet.hosts[0], "banhub-shared").lines().last(),
        Some("filelog, banhub")
    );
    let status = fleet.hosts[0].sandbox.client(&["status"]).expect("status");
    assert!(
        status.ends_with("banhub-probe, banhub-shared, dummyjail, testauth"),
        "the disabled jail stays off: {status}"
    );
    // The secret stays in the state dir; the action only names its file.
    let local = std::fs::read_to_string(conf.join("action.d/banhub.local")).expect("banhub.local");
    let secret =
        std::fs::read_to_string(fleet.hosts[0].state_dir().join("relay.secret")).expect("secret");
    assert!(!local.contains(secret.trim()), "{local}");
    assert!(local.contains("relay.secret"), "{local}");
    let notify = std::fs::metadata(conf.join("action.d/banhub-notify")).expect("notifier");
    assert_eq!(notify.permissions().mode() & 0o777, 0o755);

    // A ban caused by log lines in each enabled jail arrives at the hub, and the jail's own
    // action still runs.
    for (jail, ip) in [("testauth", "203.0.113.21"), ("dummyjail", "203.0.113.22")] {
        let log = fleet.hosts[0].sandbox.log_path(jail);
        fleet.hosts[0]
            .sandbox
            .append_failures(&log, ip, 3)
            .expect("log lines");
        let ban = wait_for_async(DEADLINE, "the ban event at the hub", || async {
            event(&fleet, &format!("&ip={ip}&kind=ban")).await
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e}\n{}\n{}",
                fleet.hosts[0].agent.logs(),
                fleet.hosts[0].sandbox.logs()
            )
        });
        assert_eq!(ban["jail"], jail, "{ban}");
        assert_eq!(ban["source"], "action", "{ban}");
        assert_eq!(ban["failures"], 3, "{ban}");
    }
    let filelog =
        std::fs::read_to_string(fleet.hosts[0].sandbox.actions_path()).expect("actions.txt");
    assert!(filelog.contains("ban testauth 203.0.113.21"), "{filelog}");
    let dummy =
        std::fs::read_to_string(fleet.hosts[0].sandbox.dir().join("dummy.txt")).expect("dummy.txt");
    assert!(dummy.contains("203.0.113.22"), "{dummy}");

    // Idempotent: a second install changes no byte and restarts nothing.
    let installed = tree(&conf);
    let again = action(&fleet.hosts[0], "install-action");
    let again_out = text(&again.stdout);
    assert!(
        again.status.success(),
        "{again_out}\n{}",
        text(&again.stderr)
    );
    assert!(again_out.contains("nothing changed"), "{again_out}");
    assert_eq!(tree(&conf), installed);

    // Uninstall: the directory is exactly as before, and fail2ban no longer runs banhub.
    let out = action(&fleet.hosts[0], "uninstall-action");
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(tree(&conf), before, "uninstall must restore the config dir");
    assert_eq!(
        actions(&fleet.hosts[0], "testauth").lines().last(),
        Some("filelog")
    );
    assert_eq!(
        actions(&fleet.hosts[0], "dummyjail").lines().last(),
        Some("dummy")
    );
    let status = fleet.hosts[0].sandbox.client(&["status"]).expect("status");
    assert!(status.ends_with("dummyjail, testauth"), "{status}");
    assert!(
        !fleet.hosts[0]
            .state_dir()
            .join("action-install.json")
            .exists()
    );

    // And once more: nothing left to remove.
    let out = action(&fleet.hosts[0], "uninstall-action");
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("nothing changed"));
    assert_eq!(tree(&conf), before);
}

#[tokio::test]
async fn install_while_fail2ban_is_stopped_takes_effect_when_it_starts() {
    let mut fleet = start("offline-install").await;
    fleet.hosts[0].sandbox.stop().expect("stop fail2ban");
    let conf = fleet.hosts[0].sandbox.conf_dir();
    let before = tree(&conf);

    let out = action(&fleet.hosts[0], "install-action");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("fail2ban is not running"), "{stdout}");
    assert!(conf.join("jail.d/zz-banhub.local").is_file());

    // fail2ban started on the new files runs banhub in every enabled jail.
    let server = std::process::Command::new("fail2ban-server")
        .arg("-c")
        .arg(&conf)
        .args(["-f", "-x"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fail2ban-server starts (install it with .ci/install-deps)");
    let mut server = KillOnDrop(server);
    wait_until(DEADLINE, "fail2ban to run banhub's jails", || {
        fleet.hosts[0]
            .sandbox
            .client(&["status"])
            .is_ok_and(|s| s.ends_with("banhub-probe, banhub-shared, dummyjail, testauth"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].sandbox.logs()));
    assert_eq!(
        actions(&fleet.hosts[0], "testauth").lines().last(),
        Some("filelog, banhub")
    );
    assert_eq!(
        actions(&fleet.hosts[0], "dummyjail").lines().last(),
        Some("dummy, banhub")
    );

    let ip = "198.51.100.33";
    fleet.hosts[0]
        .sandbox
        .append_failures(&fleet.hosts[0].sandbox.log_path("testauth"), ip, 3)
        .expect("log lines");
    wait_for_async(DEADLINE, "the ban event at the hub", || async {
        event(&fleet, &format!("&ip={ip}&kind=ban")).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));

    let out = action(&fleet.hosts[0], "uninstall-action");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(tree(&conf), before);
    server.0.kill().ok();
    server.0.wait().ok();
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
