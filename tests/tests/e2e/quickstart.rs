//! `deploy/quickstart`, the README's first command, run headless as a newcomer would: it starts the
//! hub, a sandboxed fail2ban server, an enrolled agent and the simulated attack; the login it prints
//! works; the API shows the sandbox online and real bans; Ctrl-C (SIGINT to its process group) and
//! SIGTERM stop everything it started; a second run reuses the same data.
//!
//! The script runs in a process group of its own, so "everything it started" is checked twice: no
//! process of that group is left, and none of the processes seen while it ran (found through the
//! group and through the pids its components write down) is still alive.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use banhub_tests::process::{LogFiles, ManagedChild, target_dir, workspace_root};
use banhub_tests::wait::{wait_for, wait_for_async};
use serde_json::{Value, json};

/// Start-up (the hub's migrations, fail2ban, enrollment) plus the first ban from the simulated
/// attack, on a busy 2-core machine.
const READY: Duration = Duration::from_secs(120);
const STOP: Duration = Duration::from_secs(60);

/// One run of the script with its output in files.
struct Quickstart {
    child: ManagedChild,
    pid: u32,
    logs: LogFiles,
    /// The script's data directory, where its components write their pids.
    data: PathBuf,
}

/// A run that ends without [`stop_and_check`] (an assertion failed half-way) must not leave its
/// fail2ban, hub and agent running for the rest of the suite: everything it started is killed.
impl Drop for Quickstart {
    fn drop(&mut self) {
        let left: Vec<String> = started_by(self, &self.data.clone())
            .into_keys()
            .map(|pid| pid.to_string())
            .collect();
        if left.is_empty() {
            return;
        }
        eprintln!("killing what the quickstart left running: {left:?}");
        let group = format!("-{}", self.pid);
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = Command::new("kill").arg("-KILL").args(&left).status();
    }
}

impl Quickstart {
    /// `grpc`: the address agents dial. Both runs use the same one, as a user's default does: the
    /// enrolled agent keeps the hub address from its token.
    fn start(data: &Path, logs_dir: &Path, run: u32, grpc: &str) -> Self {
        let script = workspace_root().join("deploy/quickstart");
        let logs = LogFiles::new(logs_dir, &format!("quickstart-{run}"));
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .env("BANHUB_QUICKSTART_DIR", data)
            .env("BANHUB_QUICKSTART_HTTP", "127.0.0.1:0")
            .env("BANHUB_QUICKSTART_GRPC", grpc)
            .env("BANHUB_QUICKSTART_RELAY", "127.0.0.1:0")
            // The binaries the suite was built with, instead of a `cargo build` inside a test.
            .env("BANHUB_QUICKSTART_BIN", target_dir().join("debug"))
            .current_dir(logs_dir)
            // Like a job started from a terminal: its own process group, which Ctrl-C signals.
            .process_group(0)
            .stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("BANHUB_") && key != "BANHUB_QUICKSTART_DIR" {
                command.env_remove(&key);
            }
        }
        logs.attach(&mut command).expect("log files");
        let child = ManagedChild::spawn("deploy/quickstart", command).expect("quickstart starts");
        let pid = child.pid().expect("pid");
        Self {
            child,
            pid,
            logs,
            data: data.to_owned(),
        }
    }

    fn output(&self) -> String {
        format!(
            "{}{}",
            fs::read_to_string(&self.logs.stdout).unwrap_or_default(),
            fs::read_to_string(&self.logs.stderr).unwrap_or_default()
        )
    }

    /// The URL and login from the banner the script prints once everything runs.
    fn banner(&mut self) -> (String, String, String) {
        let found = wait_for(READY, "the quickstart's banner", || {
            if let Ok(Some(status)) = self.child.try_status() {
                panic!(
                    "the quickstart exited ({status}) before it was ready:\n{}",
                    self.output()
                );
            }
            let output = self.output();
            let url = field(&output, "Web UI and API:")?;
            let login = field(&output, "Login:")?;
            Some((url, login))
        });
        let (url, login) = found.unwrap_or_else(|e| panic!("{e}\n{}", self.output()));
        let url = url
            .split_whitespace()
            .next()
            .expect("url")
            .trim_end_matches('/')
            .to_owned();
        // "admin / PASSWORD   (from FILE)"
        let mut words = login.split_whitespace();
        let user = words.next().expect("user").to_owned();
        assert_eq!(words.next(), Some("/"), "login line: {login}");
        let password = words.next().expect("password").to_owned();
        (url, user, password)
    }
}

/// The rest of the banner line that starts with `label`.
fn field(output: &str, label: &str) -> Option<String> {
    output
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .map(|rest| rest.trim().to_owned())
}

/// `pid → (process group, start time)` of every process, from `/proc`.
fn processes() -> BTreeMap<u32, (u32, u64)> {
    let mut all = BTreeMap::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return all;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(info) = stat(pid) {
            all.insert(pid, info);
        }
    }
    all
}

/// `(process group, start time)` of a live (not zombie) process.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything; the fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) ... starttime(19).
    if fields.first() == Some(&"Z") {
        return None;
    }
    Some((fields.get(2)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn command_line(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}

/// Every process the script started that runs now: its process group, plus the pids its components
/// wrote down (in case one left the group).
fn started_by(run: &Quickstart, data: &Path) -> BTreeMap<u32, (u64, String)> {
    let mut seen: BTreeMap<u32, (u64, String)> = processes()
        .into_iter()
        .filter(|(pid, (group, _))| *group == run.pid && *pid != run.pid)
        .map(|(pid, (_, start))| (pid, (start, command_line(pid))))
        .collect();
    let hub: Value = fs::read_to_string(data.join("hub/listening.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let written = [
        hub["pid"].as_u64().map(|p| p as u32),
        fs::read_to_string(data.join("fail2ban/f2b.pid"))
            .ok()
            .and_then(|t| t.trim().parse().ok()),
    ];
    for pid in written.into_iter().flatten() {
        if let Some((_, start)) = stat(pid) {
            seen.insert(pid, (start, command_line(pid)));
        }
    }
    seen
}

/// Waits for the script to exit after `signal`, then checks nothing it started is left.
fn stop_and_check(mut run: Quickstart, data: &Path, signal: &str, whole_group: bool) {
    let started = started_by(&run, data);
    let names: Vec<&str> = started.values().map(|(_, cmd)| cmd.as_str()).collect();
    for expected in ["fail2ban-server", "banhub serve", "banhub-agent run"] {
        assert!(
            names.iter().any(|cmd| cmd.contains(expected)),
            "{expected} runs while the quickstart does: {names:?}"
        );
    }
    let target = if whole_group {
        format!("-{}", run.pid)
    } else {
        run.pid.to_string()
    };
    let status = Command::new("kill")
        .args([&format!("-{signal}"), "--", &target])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {target}");
    let exit = run.child.wait_exit(STOP).unwrap_or_else(|e| {
        panic!(
            "{e}: the quickstart did not stop on {signal}\n{}",
            run.output()
        )
    });
    assert!(
        run.output().contains("stopped; data kept in"),
        "the quickstart says it stopped ({exit}):\n{}",
        run.output()
    );
    let left_in_group: Vec<(u32, String)> = processes()
        .into_iter()
        .filter(|(_, (group, _))| *group == run.pid)
        .map(|(pid, _)| (pid, command_line(pid)))
        .collect();
    assert!(
        left_in_group.is_empty(),
        "processes of the quickstart's group still run after {signal}: {left_in_group:?}"
    );
    let still: Vec<&String> = started
        .iter()
        .filter(|(pid, (start, _))| stat(**pid).is_some_and(|(_, now)| now == *start))
        .map(|(_, (_, cmd))| cmd)
        .collect();
    assert!(still.is_empty(), "still running after {signal}: {still:?}");
    assert!(
        !data.join("fail2ban/f2b.sock").exists(),
        "the sandbox's fail2ban socket is gone"
    );
}

/// A client logged in with the printed credentials: it sends the session cookie the login set.
async fn log_in(url: &str, user: &str, password: &str) -> reqwest::Client {
    let response = reqwest::Client::new()
        .post(format!("{url}/auth/login"))
        .header("origin", url)
        .json(&json!({"username": user, "password": password}))
        .send()
        .await
        .expect("login request");
    assert!(
        response.status().is_success(),
        "logging in with the printed login: {} {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    let cookies: Vec<String> = response
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(str::to_owned)
        .collect();
    assert!(!cookies.is_empty(), "the login set a session cookie");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::COOKIE,
        cookies.join("; ").parse().expect("cookie header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

async fn get_json(client: &reqwest::Client, url: &str) -> Option<Value> {
    let response = client.get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json().await.ok()
}

/// The sandbox server's id once the API shows it online.
async fn wait_sandbox_online(client: &reqwest::Client, url: &str, run: &Quickstart) -> String {
    let last = std::sync::Mutex::new(String::new());
    wait_for_async(READY, "the sandbox server online in the API", || async {
        let response = client.get(format!("{url}/api/servers")).send().await.ok()?;
        let status = response.status();
        let body = response.text().await.ok()?;
        *last.lock().expect("lock") = format!("{status} {body}");
        let servers: Value = serde_json::from_str(&body).ok()?;
        let list = servers
            .as_array()
            .cloned()
            .or_else(|| servers["servers"].as_array().cloned())?;
        list.iter()
            .find(|s| s["name"] == "sandbox" && s["status"] == "online")
            .and_then(|s| s["id"].as_str().map(str::to_owned))
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}; the last answer of GET /api/servers: {}\n{}",
            last.lock().expect("lock"),
            run.output()
        )
    })
}

#[tokio::test]
async fn quickstart_fills_the_hub_with_real_bans_and_stops_everything_it_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");

    // First run: everything from nothing.
    // A port free now, for both runs (the HTTP and relay ports may change between runs; the agents'
    // hub address may not).
    let grpc = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let mut run = Quickstart::start(&data, dir.path(), 1, &grpc);
    let (url, user, password) = run.banner();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let password_file = data.join("hub/initial-admin-password");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let meta = fs::metadata(&password_file).expect("the initial password file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            fs::read_to_string(&password_file).expect("read").trim(),
            password,
            "the printed password is the generated one"
        );
    }
    let client = log_in(&url, &user, &password).await;
    let server_id = wait_sandbox_online(&client, &url, &run).await;

    // Real bans from the simulated attack, reported through the action and the agent.
    let events = wait_for_async(READY, "a ban event from the sandbox", || async {
        let page = get_json(
            &client,
            &format!("{url}/api/events/bans?serverId={server_id}&kind=ban"),
        )
        .await?;
        let items = page
            .as_array()
            .cloned()
            .or_else(|| page["items"].as_array().cloned())
            .or_else(|| page["events"].as_array().cloned())?;
        (!items.is_empty()).then_some(items)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", run.output()));
    let first = &events[0];
    assert_eq!(first["jail"], "demo-auth", "{first}");
    let ip = first["ip"].as_str().expect("ip");
    assert!(
        ["192.0.2.", "198.51.100.", "203.0.113."]
            .iter()
            .any(|net| ip.starts_with(net)),
        "a documentation address from the simulated attack: {ip}"
    );
    // The sandbox really banned it (its file action recorded the ban) and nothing else was touched.
    let actions = fs::read_to_string(data.join("fail2ban/actions.txt")).unwrap_or_default();
    assert!(
        actions.contains(&format!("ban demo-auth {ip}")),
        "{actions}"
    );
    assert!(
        fs::read_to_string(data.join("fail2ban/conf/jail.d/zz-banhub.local")).is_ok(),
        "the action is attached in the sandbox's own configuration"
    );

    stop_and_check(run, &data, "INT", true);

    // Second run on the same data: the same server, the same login, and SIGTERM stops it.
    let mut again = Quickstart::start(&data, dir.path(), 2, &grpc);
    let (url, user, second_password) = again.banner();
    assert_eq!(second_password, password, "the login stays the same");
    let client = log_in(&url, &user, &second_password).await;
    let again_id = wait_sandbox_online(&client, &url, &again).await;
    assert_eq!(again_id, server_id, "the agent is not enrolled twice");
    let servers = get_json(&client, &format!("{url}/api/servers"))
        .await
        .expect("servers");
    assert_eq!(
        servers.to_string().matches("\"sandbox\"").count(),
        1,
        "one sandbox server: {servers}"
    );
    stop_and_check(again, &data, "TERM", false);
}
