//! The shipped fail2ban action (`deploy/fail2ban/`) against a real fail2ban server and the agent's
//! relay and spool, in process: log lines cause a ban, the action calls the relay, the event is in
//! the spool with its log lines; attacker-written log text never runs; unbans arrive too.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_agent::relay::{JailCatalog, LoopbackAddr, Relay, RelayError, RelaySecret, SECRET_FILE};
use banhub_agent::spool::{BanDuration, BanEvent, Event, Record, Source, Spool, SpoolConfig};
use banhub_tests::process::workspace_root;
use banhub_tests::{Fail2banSandbox, wait_for_async};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const EVENT_DEADLINE: Duration = Duration::from_secs(15);

/// A relay and spool on 127.0.0.1, and a fail2ban sandbox whose `testauth` jail has the banhub
/// action next to its `filelog` action.
struct Setup {
    sandbox: Fail2banSandbox,
    spool: Spool,
    shutdown: CancellationToken,
    relay: JoinHandle<Result<(), RelayError>>,
    /// The relay URL the action calls.
    url: String,
    dir: TempDir,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy").join("fail2ban")
}

/// Runs blocking harness code (fail2ban-client, sandbox start) without stalling the relay's tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn setup(name: &str, relay_url: Option<&str>) -> Setup {
    let dir = TempDir::new().expect("tempdir");
    let spool = Spool::open(dir.path().join("spool"), SpoolConfig::default())
        .await
        .expect("spool");
    let secret_path = dir.path().join(SECRET_FILE);
    let secret = RelaySecret::load_or_create(&secret_path).expect("secret");
    let listener = LoopbackAddr::new("127.0.0.1:0".parse().expect("addr"))
        .expect("loopback")
        .bind()
        .await
        .expect("bind");
    let url = relay_url.map_or_else(
        || format!("http://{}", listener.local_addr().expect("addr")),
        str::to_owned,
    );
    let shutdown = CancellationToken::new();
    let sandbox = blocking(|| Fail2banSandbox::start(name)).expect("sandbox");
    // As the agent runs it: callbacks for jails this fail2ban does not run are refused.
    let jails = JailCatalog::from_socket(sandbox.socket_path(), Duration::from_secs(5));
    let relay = tokio::spawn(
        Relay::new(spool.clone(), secret)
            .with_jails(jails)
            .serve(listener, shutdown.clone()),
    );
    install_action(&sandbox, &url, &secret_path);
    Setup {
        sandbox,
        spool,
        shutdown,
        relay,
        url,
        dir,
    }
}

/// Copies the shipped action into the sandbox, attaches it to `testauth` in `jail.local` and
/// restarts that jail (with `-c`, as the harness's client always passes). A plain `reload` is not
/// enough: fail2ban 1.0.2 removes an action that a reload adds to a running jail as obsolete.
fn install_action(sandbox: &Fail2banSandbox, url: &str, secret: &Path) {
    let conf = sandbox.conf_dir();
    fs::copy(
        deploy_dir().join("action.d").join("banhub.conf"),
        conf.join("action.d").join("banhub.conf"),
    )
    .expect("copy banhub.conf");
    let notify = deploy_dir().join("banhub-notify");
    fs::write(
        conf.join("jail.local"),
        format!(
            "[testauth]\n\
             action = filelog\n         \
             banhub[notify=\"{}\", relay_url=\"{url}\", secret_file=\"{}\", relay_timeout=\"5\"]\n",
            notify.display(),
            secret.display()
        ),
    )
    .expect("write jail.local");
    blocking(|| {
        assert_eq!(
            sandbox.client(&["-t"]).expect("config test"),
            "OK: configuration test is successful"
        );
        sandbox
            .client(&["reload", "--restart", "testauth"])
            .expect("reload");
        let actions = sandbox
            .client(&["get", "testauth", "actions"])
            .expect("actions");
        assert!(actions.contains("banhub"), "{actions}\n{}", sandbox.logs());
    });
}

impl Setup {
    /// Waits until the spool holds at least `n` records and returns them.
    async fn records(&self, n: usize) -> Vec<Record> {
        let spool = self.spool.clone();
        wait_for_async(EVENT_DEADLINE, &format!("{n} events in the spool"), || {
            let spool = spool.clone();
            async move {
                let records = spool.pending(0, 1000).await.expect("pending");
                (records.len() >= n).then_some(records)
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", self.sandbox.logs()))
    }

    fn client(&self, args: &[&str]) -> String {
        blocking(|| self.sandbox.client(args)).expect("fail2ban-client")
    }

    /// Appends raw lines to the `testauth` log, stamped with the current local time.
    fn append_lines(&self, lines: &[String]) {
        use std::io::Write as _;
        let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
        let text: String = lines.iter().map(|l| format!("{now} {l}\n")).collect();
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(self.sandbox.log_path("testauth"))
            .expect("open log");
        file.write_all(text.as_bytes()).expect("append");
    }
}

fn ban_of(record: &Record) -> (&'static str, &BanEvent) {
    match &record.event {
        Event::Ban(ban) => ("ban", ban),
        Event::Unban(ban) => ("unban", ban),
        Event::Gap(gap) => panic!("unexpected gap {gap:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_failures_ban_and_the_event_reaches_the_spool_then_unban_follows() {
    let setup = setup("relay-ban", None).await;
    let log = setup.sandbox.log_path("testauth");
    let started = chrono::Utc::now().timestamp();
    blocking(|| setup.sandbox.append_failures(&log, "203.0.113.7", 3)).expect("append");

    let records = setup.records(1).await;
    let (kind, ban) = ban_of(&records[0]);
    assert_eq!(kind, "ban");
    assert_eq!(records[0].seq, 1);
    assert_eq!(ban.ip.to_string(), "203.0.113.7");
    assert_eq!(ban.jail.as_str(), "testauth");
    assert_eq!(ban.failures, 3);
    assert_eq!(ban.source, Source::Action);
    assert_eq!(ban.ban_duration, Some(BanDuration::Seconds(600)));
    let ban_time = ban.ban_time.expect("ban time");
    assert!(
        (started - 5..=started + 60).contains(&ban_time),
        "{ban_time} vs {started}"
    );
    assert!(ban.ban_count.is_some());
    assert_eq!(ban.hostname, hostname());
    assert_eq!(ban.logs.lines().len(), 3, "{:?}", ban.logs);
    for line in ban.logs.lines() {
        assert!(
            line.ends_with("Failed login for root from 203.0.113.7"),
            "{line}"
        );
    }
    // The filelog action beside it ran as before.
    let actions = fs::read_to_string(setup.sandbox.actions_path()).expect("actions.txt");
    assert!(
        actions.contains("ban testauth 203.0.113.7 failures=3"),
        "{actions}"
    );

    let reply = setup.client(&["set", "testauth", "unbanip", "203.0.113.7"]);
    assert_eq!(reply, "1");
    let records = setup.records(2).await;
    let (kind, unban) = ban_of(&records[1]);
    assert_eq!((kind, records[1].seq), ("unban", 2));
    assert_eq!(unban.ip.to_string(), "203.0.113.7");
    assert_eq!(unban.jail.as_str(), "testauth");
    assert_eq!(records.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_metacharacters_in_log_lines_are_only_data() {
    let setup = setup("relay-shell", None).await;
    let marker = |n: u32| setup.dir.path().join(format!("pwned{n}"));
    // Usernames are `\S+` in the test filter, so `${IFS}` stands in for spaces.
    let users = [
        format!("$(touch${{IFS}}{})", marker(1).display()),
        format!("`touch${{IFS}}{}`", marker(2).display()),
        format!("\";touch${{IFS}}{};\"", marker(3).display()),
        format!("';touch${{IFS}}{};'", marker(4).display()),
        format!("|touch${{IFS}}{}&&<ip><matches>\\n", marker(5).display()),
        format!("\\$(touch${{IFS}}{})", marker(6).display()),
    ];
    // maxretry is 3: each address is banned on its third line, with those three as its matches.
    let ips = ["198.51.100.23", "198.51.100.24"];
    let lines: Vec<String> = users
        .iter()
        .enumerate()
        .map(|(i, user)| format!("Failed login for {user} from {}", ips[i / 3]))
        .collect();
    setup.append_lines(&lines);

    let records = setup.records(2).await;
    for (record, (ip, expected)) in records.iter().zip(ips.iter().zip(lines.chunks(3))) {
        let (kind, ban) = ban_of(record);
        assert_eq!((kind, ban.ip.to_string().as_str()), ("ban", *ip));
        assert_eq!(ban.failures, 3);
        assert_eq!(ban.logs.lines().len(), 3, "{:?}", ban.logs);
        for (line, expected) in ban.logs.lines().iter().zip(expected) {
            assert!(
                line.ends_with(expected.as_str()),
                "{line:?} does not end with {expected:?}"
            );
        }
    }
    for n in 1..=6 {
        assert!(
            !marker(n).exists(),
            "log text ran as a command: {}",
            marker(n).display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_fail2ban_reports_no_unban_storm() {
    let mut setup = setup("relay-stop", None).await;
    let log = setup.sandbox.log_path("testauth");
    blocking(|| {
        setup.sandbox.append_failures(&log, "192.0.2.10", 3)?;
        setup.sandbox.append_failures(&log, "192.0.2.11", 3)
    })
    .expect("append");
    setup.records(2).await;
    // A clean stop has run every action by the time it returns.
    blocking(|| setup.sandbox.stop()).expect("stop");
    let records = setup.spool.pending(0, 100).await.expect("pending");
    let kinds: Vec<&str> = records.iter().map(|r| ban_of(r).0).collect();
    assert_eq!(kinds, ["ban", "ban"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_relay_never_fails_the_ban() {
    // Nothing listens on the relay's address: port 9 (discard) is closed on a test machine.
    let setup = setup("relay-down", Some("http://127.0.0.1:9")).await;
    let log = setup.sandbox.log_path("testauth");
    blocking(|| setup.sandbox.append_failures(&log, "203.0.113.99", 3)).expect("append");
    let actions_path = setup.sandbox.actions_path();
    wait_for_async(EVENT_DEADLINE, "the filelog ban", || {
        let path = actions_path.clone();
        async move {
            fs::read_to_string(path)
                .ok()
                .filter(|a| a.contains("ban testauth 203.0.113.99"))
        }
    })
    .await
    .expect("ban recorded");
    let banned = setup.client(&["get", "testauth", "banned"]);
    assert!(banned.contains("203.0.113.99"), "{banned}");
    // The helper exited 0, so fail2ban logged no failed action.
    let server_log = fs::read_to_string(setup.sandbox.server_log_path()).expect("log");
    assert!(
        !server_log.contains("Failed to execute ban"),
        "{server_log}"
    );
    assert_eq!(setup.spool.pending(0, 10).await.expect("pending"), []);
    assert!(!setup.relay.is_finished());
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_for_a_jail_fail2ban_does_not_run_is_refused_and_not_stored() {
    let setup = setup("relay-jail", None).await;
    let url = setup.url.clone();
    let secret = fs::read_to_string(setup.dir.path().join(SECRET_FILE)).expect("secret");
    let client = reqwest::Client::new();
    let post = |jail: &'static str| {
        let (client, url, secret) = (client.clone(), url.clone(), secret.trim().to_owned());
        async move {
            let response = client
                .post(format!("{url}/api/ban"))
                .header("X-Callback-Secret", secret)
                .json(&serde_json::json!({"ip": "198.51.100.9", "jail": jail, "failures": 1}))
                .send()
                .await
                .expect("relay answers");
            let status = response.status();
            let body: serde_json::Value = response.json().await.expect("json body");
            (status, body)
        }
    };

    let (status, body) = post("sshd-typo").await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["code"], "unknown_jail");
    assert_eq!(body["field"], "jail");
    assert!(
        setup
            .spool
            .pending(0, 10)
            .await
            .expect("pending")
            .is_empty(),
        "a refused callback left something in the spool"
    );

    // `dummyjail` runs in the sandbox without the banhub action: a callback naming it is real.
    let (status, body) = post("dummyjail").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let records = setup.records(1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(ban_of(&records[0]).1.jail.as_str(), "dummyjail");
}
