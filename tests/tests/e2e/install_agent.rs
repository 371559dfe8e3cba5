//! `deploy/install-agent.sh` against a real hub and a fail2ban sandbox standing in for a host's
//! `/etc/fail2ban`: the install copies the binary, writes the configuration, enrolls, attaches
//! banhub's action to the running jails and runs the agent (foreground mode: this machine has no
//! systemd), and a real ban reaches the hub; `--uninstall` takes everything away and leaves the
//! fail2ban configuration byte for byte as it was (every file hashed, modes included).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::process::{LogFiles, binary, run_with_timeout, workspace_root};
use banhub_tests::wait::{wait_for_async, wait_until};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

/// `relative path → (mode, sha256)` of every file and directory under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<String, (u32, String)> {
    use sha2::Digest as _;
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = fs::symlink_metadata(&path).expect("metadata");
            let name = path
                .strip_prefix(dir)
                .expect("under dir")
                .display()
                .to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                all.insert(format!("{name}/"), (mode, String::new()));
                stack.push(path);
            } else {
                let digest = sha2::Sha256::digest(fs::read(&path).expect("read"));
                all.insert(name, (mode, format!("{digest:x}")));
            }
        }
    }
    all
}

fn script() -> std::path::PathBuf {
    workspace_root().join("deploy/install-agent.sh")
}

#[tokio::test]
async fn install_attaches_the_action_and_uninstall_restores_fail2ban_byte_for_byte() {
    let hub = HubProcess::builder()
        .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
        .start()
        .expect("hub");
    let sandbox = Fail2banSandbox::start("install").expect("fail2ban sandbox");
    let conf = sandbox.conf_dir();
    let before = snapshot(&conf);

    let created = hub
        .client()
        .post(hub.url("/api/servers"))
        .json(&json!({"name": "installed-host"}))
        .send()
        .await
        .expect("create");
    assert!(created.status().is_success(), "{}", hub.logs());
    let created: Value = created.json().await.expect("json");
    let server_id = created["server"]["id"].as_str().expect("id").to_owned();
    let token = created["enrollment"]["token"]
        .as_str()
        .expect("token")
        .to_owned();

    // The "host": everything the script writes lives in one temporary root.
    let root = tempfile::tempdir().expect("tempdir");
    let bin_dir = root.path().join("usr/local/bin");
    let etc_dir = root.path().join("etc/banhub-agent");
    let state_dir = root.path().join("var/lib/banhub-agent");
    let paths = |command: &mut Command| {
        command
            .arg("--bin-dir")
            .arg(&bin_dir)
            .arg("--etc-dir")
            .arg(&etc_dir)
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--fail2ban-config")
            .arg(&conf)
            .arg("--fail2ban-socket")
            .arg(sandbox.socket_path())
            .env_remove("BANHUB_AGENT_CONFIG");
    };

    // A free loopback port for the relay: the action's URL names it before the agent runs.
    let relay = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .to_string();

    // Install and run in the foreground; the token comes on standard input.
    let logs = LogFiles::new(root.path(), "install");
    let mut install = Command::new("bash");
    install
        .arg(script())
        .arg("--binary")
        .arg(binary("banhub-agent").expect("agent built"))
        .args(["--relay", &relay, "--foreground", "-"]);
    paths(&mut install);
    logs.attach(&mut install).expect("logs");
    install.stdin(Stdio::piped());
    let mut agent = {
        let mut child = install.spawn().expect("install-agent.sh starts");
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "{token}").expect("token");
        drop(stdin);
        Agent(child)
    };
    let installed_agent = bin_dir.join("banhub-agent");
    wait_until(DEADLINE, "the agent to be installed and running", || {
        fs::read_to_string(&logs.stderr).is_ok_and(|t| t.contains("running the agent"))
            || agent.exited()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", logs.tail(60)));
    assert!(
        !agent.exited(),
        "install-agent.sh failed:\n{}",
        logs.tail(60)
    );
    assert!(installed_agent.is_file(), "the binary was installed");
    let config = fs::read_to_string(etc_dir.join("agent.toml")).expect("agent.toml written");
    assert!(config.contains(&conf.display().to_string()), "{config}");
    assert_eq!(
        fs::metadata(&state_dir)
            .expect("state")
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(state_dir.join("identity.json").is_file(), "enrolled");

    // Online in the hub, and the action attached to the running jail.
    let client = hub.client();
    let url = hub.url(&format!("/api/servers/{server_id}"));
    wait_for_async(DEADLINE, "the installed agent online", || async {
        let server: Value = client.get(&url).send().await.ok()?.json().await.ok()?;
        (server["status"] == "online").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", logs.tail(60), hub.logs()));
    let actions = sandbox
        .client(&["get", "testauth", "actions"])
        .expect("actions");
    assert!(
        actions.contains("banhub"),
        "testauth runs banhub: {actions}"
    );
    assert_ne!(
        snapshot(&conf),
        before,
        "the action is in the configuration"
    );

    // A real ban from the log reaches the hub through the installed action.
    sandbox
        .append_failures(&sandbox.log_path("testauth"), "192.0.2.91", 5)
        .expect("failures");
    let events_url = hub.url(&format!(
        "/api/events/bans?serverId={server_id}&ip=192.0.2.91"
    ));
    wait_for_async(DEADLINE, "the ban in the hub", || async {
        let page: Value = client
            .get(&events_url)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        page.to_string().contains("192.0.2.91").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", logs.tail(60), hub.logs()));

    // Stop the agent (what systemd would do), then uninstall.
    agent.stop();
    let uninstall_logs = LogFiles::new(root.path(), "uninstall");
    let mut uninstall = Command::new("bash");
    uninstall.arg(script()).arg("--uninstall");
    paths(&mut uninstall);
    let out = run_with_timeout(
        "install-agent.sh --uninstall",
        uninstall,
        &uninstall_logs,
        DEADLINE,
    )
    .expect("uninstall runs");
    assert!(
        out.status.success(),
        "uninstall failed:\n{}",
        uninstall_logs.tail(60)
    );

    assert_eq!(
        snapshot(&conf),
        before,
        "fail2ban's configuration is byte for byte as before the install"
    );
    for gone in [&installed_agent, &etc_dir, &state_dir] {
        assert!(!gone.exists(), "{} is removed", gone.display());
    }
    // fail2ban runs its jails without the action again.
    let actions = sandbox
        .client(&["get", "testauth", "actions"])
        .expect("actions");
    assert!(
        !actions.contains("banhub"),
        "testauth no longer runs banhub: {actions}"
    );
}

/// The foreground install: the script becomes the agent (`exec`), stopped with SIGTERM.
struct Agent(std::process::Child);

impl Agent {
    fn exited(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(Some(_)))
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !self.exited() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn install_refuses_to_start_a_service_without_systemd_and_says_what_to_do() {
    let root = tempfile::tempdir().expect("tempdir");
    let conf = root.path().join("fail2ban");
    fs::create_dir(&conf).expect("conf");
    let logs = LogFiles::new(root.path(), "refused");
    let mut command = Command::new("bash");
    command
        .arg(script())
        .arg("--binary")
        .arg(binary("banhub-agent").expect("agent built"))
        .arg("--etc-dir")
        .arg(root.path().join("etc"))
        .arg("--state-dir")
        .arg(root.path().join("state"))
        .arg("--fail2ban-config")
        .arg(&conf)
        .arg("bh1.unused");
    let out = run_with_timeout("install-agent.sh", command, &logs, DEADLINE).expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--foreground"), "{stderr}");
    assert!(
        !root.path().join("etc").exists() && !root.path().join("state").exists(),
        "nothing was installed before the refusal"
    );
}
