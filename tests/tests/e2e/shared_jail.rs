//! The agent's shared-ban jail against a real fail2ban: `install-action` adds `banhub-shared` with
//! the sandbox's own ban action (`filelog`) and banhub, `SyncSharedBans` bans and lifts through it
//! (each ban and unban reaching the spool once, through the jail's `banhub` action), the agent
//! lifts a ban at its expiry on its own, a still-valid ban comes back after the agent and fail2ban
//! restart while an expired one does not, a full sync replaces the set, a refused entry changes
//! nothing, the hub cannot write the jail, `install-action` run again applies a changed
//! `shared_bans.action`, and `uninstall-action` leaves the directory as it was.
//!
//! The agent runs in the test process the way `banhub-agent run` runs it, minus the session to the
//! hub: the loopback relay on its spool and reconciliation belief, the command context, and the
//! shared-ban loop; commands go through `commands::execute`. One test runs the real `banhub-agent`
//! process beside a hub instead: it keeps the bans of its state file and the hub receives them.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use banhub_agent::action;
use banhub_agent::config::{Fail2banSettings, RelaySettings, Settings};
use banhub_agent::link::commands::{self, Context};
use banhub_agent::reconcile::{Belief, PassOutcome, ReconcileConfig, Reconciler};
use banhub_agent::relay::{JailCatalog, LoopbackAddr, Relay, RelaySecret, SECRET_FILE};
use banhub_agent::shared_bans::STATE_FILE;
use banhub_agent::spool::{self, Event, Spool, SpoolConfig};
use banhub_proto::rules::SHARED_JAIL;
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    ErrorCode, FileEdit, JailToggle, SetBan, SetJailsEnabled, SharedBan, SharedBanReport,
    SyncSharedBans, WriteJailConfig,
};
use banhub_tests::TestFleet;
use banhub_tests::agent::run_command;
use banhub_tests::commands::client_path;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_until, wait_until_async};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);

/// The agent's parts that `banhub-agent run` starts, running in this process.
struct Agent {
    context: Context,
    spool: Spool,
    belief: Belief,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// A fail2ban sandbox with the action installed, and the agent beside it (while it runs).
struct Host {
    sandbox: Fail2banSandbox,
    state: TempDir,
    settings: Settings,
    agent: Option<Agent>,
}

impl Host {
    /// A sandbox, the agent running beside it, and `install-action` done.
    async fn start(name: &str) -> Self {
        let mut host = Self::new(name);
        host.start_agent().await;
        host.install().await;
        host
    }

    /// `install-action`, which needs the relay's address.
    async fn install(&self) {
        let report = action::install(&self.settings)
            .await
            .unwrap_or_else(|e| panic!("install-action: {e}\n{}", self.sandbox.logs()));
        assert!(report.unattached().is_empty(), "{report:?}");
    }

    /// A sandbox and the agent's settings for it; nothing runs beside it yet.
    fn new(name: &str) -> Self {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        let state = tempfile::tempdir().expect("state dir");
        let settings = Settings {
            state_dir: state.path().to_owned(),
            fail2ban: Fail2banSettings {
                socket: sandbox.socket_path(),
                config_dir: sandbox.conf_dir(),
                client: client_path(),
                timeout_ms: 10_000,
                ..Fail2banSettings::default()
            },
            relay: RelaySettings {
                listen: "127.0.0.1:0".parse().expect("address"),
                enabled: true,
            },
            ..Settings::default()
        };
        Self {
            sandbox,
            state,
            settings,
            agent: None,
        }
    }

    /// Starts the relay, the command context and the shared-ban loop, as `banhub-agent run` does.
    /// The relay keeps the port it first got, which the installed action names.
    async fn start_agent(&mut self) {
        assert!(self.agent.is_none(), "the agent already runs");
        let state = self.state.path();
        let spool = Spool::open(spool::default_dir(state), SpoolConfig::default())
            .await
            .expect("spool");
        let belief = Belief::load(state).expect("belief");
        let secret = RelaySecret::load_or_create(&state.join(SECRET_FILE)).expect("secret");
        let listener = LoopbackAddr::new(self.settings.relay.listen)
            .expect("loopback")
            .bind()
            .await
            .expect("relay listens");
        let bound: SocketAddr = listener.local_addr().expect("bound");
        self.settings.relay.listen = bound;
        let shutdown = CancellationToken::new();
        let relay = Relay::new(spool.clone(), secret)
            .with_jails(JailCatalog::from_socket(
                self.settings.fail2ban.socket.clone(),
                self.settings.fail2ban_timeout(),
            ))
            .with_belief(belief.clone());
        let mut tasks = vec![tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                relay.serve(listener, shutdown).await.expect("relay serves");
            }
        })];
        let context = Context::new(&self.settings);
        let shared = context.shared_bans().expect("shared bans").clone();
        tasks.push(tokio::spawn(shared.run(shutdown.clone())));
        self.agent = Some(Agent {
            context,
            spool,
            belief,
            shutdown,
            tasks,
        });
    }

    /// Stops the agent's parts; what the relay recorded is saved, as reconciliation saves it.
    async fn stop_agent(&mut self) {
        let agent = self.agent.take().expect("the agent runs");
        agent.shutdown.cancel();
        for task in agent.tasks {
            task.await.expect("agent task");
        }
        agent.belief.save_if_dirty().await.expect("save the belief");
        agent.spool.close().await;
    }

    /// One reconciliation pass over the agent's spool and belief, as its loop runs them.
    async fn reconcile(&self) -> PassOutcome {
        let mut config = ReconcileConfig::new(self.sandbox.socket_path(), None);
        config.confirm_delay = Duration::from_millis(200);
        config.timeout = Duration::from_secs(10);
        let agent = self.agent();
        Reconciler::new(config, agent.spool.clone(), agent.belief.clone())
            .pass()
            .await
            .expect("reconciliation pass")
    }

    fn agent(&self) -> &Agent {
        self.agent.as_ref().expect("the agent runs")
    }

    async fn run(&self, kind: Kind) -> Outcome {
        let result = commands::execute(
            &self.agent().context,
            banhub_proto::v1::Command {
                id: uuid::Uuid::new_v4().to_string(),
                deadline_unix_ms: now_ms() + 60_000,
                requested_by: "test".to_owned(),
                kind: Some(kind),
            },
        )
        .await;
        result.outcome.expect("an outcome")
    }

    async fn sync(&self, full: bool, bans: &[(&str, i64)], lift: &[&str]) -> SharedBanReport {
        let request = SyncSharedBans {
            full,
            bans: bans
                .iter()
                .map(|(ip, expires)| SharedBan {
                    ip: (*ip).to_owned(),
                    expires_unix_ms: *expires,
                    reason: format!("policy ssh from web-1 for {ip}"),
                })
                .collect(),
            lift: lift.iter().map(|ip| (*ip).to_owned()).collect(),
        };
        match self.run(Kind::SyncSharedBans(request)).await {
            Outcome::SharedBans(report) => report,
            other => panic!("expected a shared-ban report, got {other:?}"),
        }
    }

    /// `fail2ban-client get banhub-shared banned`, as a set.
    fn banned(&self) -> BTreeSet<String> {
        let reply = self
            .sandbox
            .client(&["get", SHARED_JAIL, "banned"])
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.sandbox.logs()));
        reply
            .trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|s| s.trim_matches('\'').to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    fn set(&self, ips: &[&str]) -> BTreeSet<String> {
        ips.iter().map(|ip| (*ip).to_owned()).collect()
    }

    /// The addresses `<state_dir>/shared-bans.json` holds.
    fn file(&self) -> BTreeSet<String> {
        let text = std::fs::read_to_string(self.state.path().join(STATE_FILE)).expect("state file");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        value["bans"]
            .as_array()
            .expect("bans")
            .iter()
            .map(|b| b["ip"].as_str().expect("ip").to_owned())
            .collect()
    }

    /// The `filelog` action's lines for the shared jail.
    fn action_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.sandbox.actions_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!(" {SHARED_JAIL}")))
            .map(str::to_owned)
            .collect()
    }

    /// `(kind, ip)` of every spooled event of the shared jail, oldest first.
    async fn events(&self) -> Vec<(&'static str, String)> {
        self.agent()
            .spool
            .pending(0, 1000)
            .await
            .expect("pending")
            .into_iter()
            .filter_map(|record| match record.event {
                Event::Ban(b) if b.jail.as_str() == SHARED_JAIL => Some(("ban", b.ip.to_string())),
                Event::Unban(b) if b.jail.as_str() == SHARED_JAIL => {
                    Some(("unban", b.ip.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    async fn wait_banned(&self, want: &[&str], what: &str) {
        let want = self.set(want);
        wait_until(DEADLINE, what, || self.banned() == want)
            .unwrap_or_else(|e| panic!("{e}: banned {:?}\n{}", self.banned(), self.sandbox.logs()));
    }

    /// Stops the sandbox's fail2ban and starts it again on the same configuration (its database
    /// is `:memory:`, so it comes back with no bans).
    fn restart_fail2ban(&mut self) {
        self.sandbox
            .restart()
            .unwrap_or_else(|e| panic!("fail2ban restarts: {e:#}"));
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every file under `dir` with its bytes and mode.
fn tree(dir: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt as _;
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let rel = path
                .strip_prefix(root)
                .expect("inside")
                .display()
                .to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.insert(format!("{rel}/"), (mode, Vec::new()));
                walk(root, &path, out);
            } else {
                out.insert(rel, (mode, std::fs::read(&path).expect("read")));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Error(e) => {
            assert_eq!(
                ErrorCode::try_from(e.code),
                Ok(ErrorCode::InvalidArgument),
                "{}",
                e.message
            );
            e.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_adds_the_jail_with_the_hosts_ban_action_and_uninstall_restores_the_directory() {
    let mut host = Host::new("shared-install");
    let before = tree(&host.sandbox.conf_dir());
    host.start_agent().await;
    action::install(&host.settings).await.expect("install");

    // The sandbox's ban action (`banaction = filelog`, no `banaction_allports`), then banhub.
    let actions = host
        .sandbox
        .client(&["get", SHARED_JAIL, "actions"])
        .expect("actions");
    assert!(
        actions.contains("filelog") && actions.contains("banhub"),
        "{actions}"
    );
    let get = |key: &str| {
        host.sandbox
            .client(&["get", SHARED_JAIL, key])
            .expect(key)
            .trim()
            .to_owned()
    };
    assert_eq!(get("bantime"), "-1");
    let logpath = get("logpath");
    assert!(logpath.contains("shared.log"), "{logpath}");
    let ignored = get("ignoreip");
    assert!(ignored.contains("::1"), "the host's ignoreip: {ignored}");
    let attach = std::fs::read_to_string(host.sandbox.conf_dir().join("jail.d/zz-banhub.local"))
        .expect("attach file");
    assert!(
        attach.contains("[banhub-shared]") && attach.contains("action = %(banaction)s\n"),
        "{attach}"
    );

    // The hub cannot write, toggle or manually ban into banhub's own jail.
    let message = refused(
        host.run(Kind::WriteJailConfig(WriteJailConfig {
            jail: SHARED_JAIL.to_owned(),
            jail_override: Some(FileEdit {
                content: "[banhub-shared]\nbantime = 60\n".to_owned(),
                expected_version: String::new(),
            }),
            filter_local: None,
        }))
        .await,
    );
    assert!(message.contains("banhub's own jail"), "{message}");
    refused(
        host.run(Kind::SetJailsEnabled(SetJailsEnabled {
            changes: vec![JailToggle {
                jail: SHARED_JAIL.to_owned(),
                enabled: false,
            }],
        }))
        .await,
    );
    refused(
        host.run(Kind::SetBan(SetBan {
            jail: SHARED_JAIL.to_owned(),
            ip: "198.51.100.4".to_owned(),
            ban: true,
            guard_override: false,
        }))
        .await,
    );
    assert!(host.banned().is_empty());
    assert!(
        !host
            .sandbox
            .conf_dir()
            .join("jail.d/banhub-shared.local")
            .exists(),
        "nothing was written"
    );

    host.stop_agent().await;
    let report = action::uninstall(&host.settings).await.expect("uninstall");
    assert!(report.was_installed);
    assert_eq!(tree(&host.sandbox.conf_dir()), before);
    let status = host.sandbox.client(&["status"]).expect("status");
    assert!(!status.contains(SHARED_JAIL), "{status}");
    assert!(!host.state.path().join("shared.log").exists());
}

/// Changing `shared_bans.action` takes effect when `install-action` runs again, without an
/// uninstall: fail2ban's shared jail runs the new action (then banhub) instead of the old one, and a
/// shared ban reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_again_applies_a_changed_shared_action() {
    let mut host = Host::start("shared-action").await;
    let target = host.sandbox.dir().join("shared-dummy.txt");
    host.settings.shared_bans.action = format!("dummy[target={}]", target.display());
    host.install().await;
    let actions = host
        .sandbox
        .client(&["get", SHARED_JAIL, "actions"])
        .expect("actions");
    assert!(
        actions.contains("dummy") && actions.contains("banhub") && !actions.contains("filelog"),
        "{actions}"
    );
    let attach = std::fs::read_to_string(host.sandbox.conf_dir().join("jail.d/zz-banhub.local"))
        .expect("attach file");
    assert!(attach.contains("action = dummy[target="), "{attach}");

    let report = host.sync(false, &[("198.51.100.21", 0)], &[]).await;
    assert_eq!(report.added, 1, "{report:?}");
    wait_until(DEADLINE, "the new action to ban the shared address", || {
        std::fs::read_to_string(&target).is_ok_and(|t| t.contains("+198.51.100.21"))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", host.sandbox.logs()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_sync_bans_and_a_later_one_lifts_with_one_event_each() {
    let host = Host::start("shared-delta").await;
    let report = host.sync(false, &[("198.51.100.7", 0)], &[]).await;
    assert_eq!(
        (report.held, report.added, report.lifted, report.expired),
        (1, 1, 0, 0)
    );
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert_eq!(host.banned(), host.set(&["198.51.100.7"]));
    assert_eq!(host.file(), host.set(&["198.51.100.7"]));
    assert!(
        host.action_lines()
            .iter()
            .any(|l| l.starts_with("ban banhub-shared 198.51.100.7 ")),
        "{:?}",
        host.action_lines()
    );

    // The same sync again changes nothing in fail2ban.
    let again = host.sync(false, &[("198.51.100.7", 0)], &[]).await;
    assert_eq!((again.held, again.added), (1, 0));

    let report = host.sync(false, &[], &["198.51.100.7"]).await;
    assert_eq!(
        (report.held, report.added, report.lifted, report.expired),
        (0, 0, 1, 0)
    );
    assert!(host.banned().is_empty());
    assert!(host.file().is_empty());
    assert!(
        host.action_lines()
            .iter()
            .any(|l| l == "unban banhub-shared 198.51.100.7"),
        "{:?}",
        host.action_lines()
    );

    // One ban and one unban, through the jail's banhub action, and reconciliation adds nothing.
    let want = vec![
        ("ban", "198.51.100.7".to_owned()),
        ("unban", "198.51.100.7".to_owned()),
    ];
    let waited = wait_until_async(DEADLINE, "the callbacks in the spool", || async {
        host.events().await == want
    })
    .await;
    if let Err(e) = waited {
        panic!("{e}: {:?}", host.events().await);
    }
    assert!(host.reconcile().await.baseline);
    assert_eq!(host.reconcile().await, PassOutcome::default());
    assert_eq!(host.events().await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_lifts_a_ban_at_its_expiry_on_its_own() {
    let host = Host::start("shared-expiry").await;
    let expires = now_ms() + 3_000;
    let report = host
        .sync(
            false,
            &[("198.51.100.8", expires), ("203.0.113.0/24", 0)],
            &[],
        )
        .await;
    assert_eq!((report.held, report.added), (2, 2));
    assert_eq!(host.banned(), host.set(&["198.51.100.8", "203.0.113.0/24"]));
    host.wait_banned(&["203.0.113.0/24"], "the agent to lift the expired ban")
        .await;
    assert!(now_ms() >= expires, "lifted before its time");
    assert_eq!(host.file(), host.set(&["203.0.113.0/24"]));
    assert!(
        host.action_lines()
            .iter()
            .any(|l| l == "unban banhub-shared 198.51.100.8")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_agent_and_fail2ban_restarts_a_valid_ban_comes_back_and_an_expired_one_does_not() {
    let mut host = Host::start("shared-restart").await;
    // Reconciliation's first pass, as at the agent's first start: the baseline.
    assert!(host.reconcile().await.baseline);
    let soon = now_ms() + 4_000;
    host.sync(false, &[("198.51.100.9", 0), ("198.51.100.10", soon)], &[])
        .await;
    assert_eq!(host.banned(), host.set(&["198.51.100.9", "198.51.100.10"]));

    // The agent dies, fail2ban restarts with an empty in-memory database, and the second ban's
    // time passes before the agent is back.
    host.stop_agent().await;
    host.restart_fail2ban();
    assert!(host.banned().is_empty(), "fail2ban kept no bans");
    wait_until(DEADLINE, "the second ban's expiry", || now_ms() > soon).expect("time passes");
    host.start_agent().await;
    host.wait_banned(&["198.51.100.9"], "the valid ban to come back")
        .await;
    assert_eq!(host.file(), host.set(&["198.51.100.9"]));

    // With fail2ban running on, a ban whose time passes while the agent is down stays in
    // fail2ban (bantime -1) until the agent is back and lifts it.
    let soon = now_ms() + 3_000;
    host.sync(false, &[("198.51.100.11", soon)], &[]).await;
    host.stop_agent().await;
    wait_until(DEADLINE, "the third ban's expiry", || now_ms() > soon).expect("time passes");
    assert!(
        host.banned().contains("198.51.100.11"),
        "only the agent lifts it"
    );
    host.start_agent().await;
    host.wait_banned(
        &["198.51.100.9"],
        "the agent to lift the expired ban at start",
    )
    .await;
    assert_eq!(host.file(), host.set(&["198.51.100.9"]));

    // Events: the ban put back after fail2ban's restart is not a second ban; the ban fail2ban
    // lost while the agent was down is reported once, as observed by reconciliation.
    let outcome = host.reconcile().await;
    assert_eq!((outcome.bans, outcome.unbans), (0, 1), "{outcome:?}");
    let mut counts: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for event in host.events().await {
        *counts.entry(event).or_default() += 1;
    }
    let one = |kind: &'static str, ip: &str| ((kind, ip.to_owned()), 1);
    assert_eq!(
        counts,
        BTreeMap::from([
            one("ban", "198.51.100.9"),
            one("ban", "198.51.100.10"),
            one("unban", "198.51.100.10"),
            one("ban", "198.51.100.11"),
            one("unban", "198.51.100.11"),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sync_replaces_the_set() {
    let host = Host::start("shared-full").await;
    host.sync(false, &[("198.51.100.1", 0), ("198.51.100.2", 0)], &[])
        .await;
    let report = host
        .sync(
            true,
            &[
                ("198.51.100.2", 0),
                ("2001:db8::5", 0),
                ("198.51.100.3", now_ms() - 1_000),
            ],
            &["198.51.100.2"],
        )
        .await;
    assert_eq!(
        (report.held, report.added, report.lifted, report.expired),
        (2, 1, 1, 1)
    );
    assert_eq!(host.banned(), host.set(&["198.51.100.2", "2001:db8::5"]));
    assert_eq!(host.file(), host.set(&["198.51.100.2", "2001:db8::5"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_entry_is_reported_and_nothing_else_changes() {
    let host = Host::start("shared-refused").await;
    host.sync(false, &[("198.51.100.1", 0)], &[]).await;
    let file = std::fs::read(host.state.path().join(STATE_FILE)).expect("state file");

    let report = host.sync(false, &[("0.0.0.0/0", 0)], &[]).await;
    assert_eq!(
        (report.held, report.added, report.lifted, report.expired),
        (1, 0, 0, 0)
    );
    assert_eq!(report.refused.len(), 1, "{:?}", report.refused);
    assert!(
        report.refused[0].starts_with("\"0.0.0.0/0\": ")
            && report.refused[0].contains("every address"),
        "{:?}",
        report.refused
    );
    assert_eq!(host.banned(), host.set(&["198.51.100.1"]));
    assert_eq!(
        std::fs::read(host.state.path().join(STATE_FILE)).expect("state file"),
        file
    );

    // Beside a refused entry, the others still apply.
    let report = host
        .sync(false, &[("255.255.255.255", 0), ("198.51.100.2", 0)], &[])
        .await;
    assert_eq!((report.held, report.added, report.refused.len()), (2, 1, 1));
    assert_eq!(host.banned(), host.set(&["198.51.100.1", "198.51.100.2"]));

    // An operator's unban everywhere ends the shared ban: the agent does not put it back.
    match host
        .run(Kind::SetBan(SetBan {
            jail: String::new(),
            ip: "198.51.100.2".to_owned(),
            ban: false,
            guard_override: false,
        }))
        .await
    {
        Outcome::BanChange(change) => assert!(change.changed, "{change:?}"),
        other => panic!("expected a ban change, got {other:?}"),
    }
    assert_eq!(host.file(), host.set(&["198.51.100.1"]));
    assert_eq!(host.banned(), host.set(&["198.51.100.1"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_sync_answers_within_its_budget_and_the_loop_bans_the_rest() {
    let mut host = Host::new("shared-budget");
    host.settings.shared_bans.budget_ms = 200;
    host.start_agent().await;
    host.install().await;
    let ips: Vec<String> = (1..=20).map(|i| format!("198.51.100.{i}")).collect();
    let bans: Vec<(&str, i64)> = ips.iter().map(|ip| (ip.as_str(), 0)).collect();
    let report = host.sync(false, &bans, &[]).await;
    assert_eq!(report.held, 20);
    // Each ban runs the jail's two actions (a shell and the notifier), far over 5 ms apiece.
    assert!(
        (1..20).contains(&report.added),
        "some bans within 200 ms, not all: {report:?}"
    );
    let all: Vec<&str> = ips.iter().map(String::as_str).collect();
    host.wait_banned(&all, "the loop to ban the rest").await;
    assert_eq!(host.file().len(), 20);
}

/// The real `banhub-agent run` keeps the shared bans too: started on a state file that holds a
/// valid ban and one past its expiry (still in fail2ban, as when the agent died before lifting
/// it), it bans the first, lifts the second, and the hub receives the ban as an event of the
/// shared jail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_process_keeps_the_shared_bans_of_its_state_file() {
    // One relay port for both runs of the agent: the installed action names it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut fleet = TestFleet::start_with(
        &["shared-process"],
        &[("BANHUB_AGENT_RELAY__LISTEN", listen.as_str())],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let host = &mut fleet.hosts[0];
    let relay = host.state_dir().join("relay.json");
    wait_until(DEADLINE, "the relay to listen", || relay.exists()).expect("relay.json");
    let conf = host.sandbox.conf_dir();
    let state = host.state_dir();
    let socket = host.sandbox.socket_path();
    let out = run_command(
        &[
            OsStr::new("install-action"),
            OsStr::new("--config-dir"),
            conf.as_os_str(),
            OsStr::new("--state-dir"),
            state.as_os_str(),
            OsStr::new("--fail2ban-socket"),
            socket.as_os_str(),
        ],
        &[],
    )
    .expect("the agent binary runs");
    assert!(
        out.status.success(),
        "install-action: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    host.agent.kill().expect("kill the agent");
    host.sandbox
        .client(&["set", SHARED_JAIL, "banip", "198.51.100.21"])
        .expect("a ban the agent made before it died");
    let file = serde_json::json!({
        "version": 1,
        "bans": [
            {"ip": "198.51.100.20", "expires_unix_ms": now_ms() + 3_600_000, "reason": "policy ssh"},
            {"ip": "198.51.100.21", "expires_unix_ms": now_ms() - 1_000, "reason": "policy ssh"},
        ],
    });
    std::fs::write(state.join(STATE_FILE), file.to_string()).expect("state file");
    host.agent.restart().expect("start the agent again");

    let banned = |host: &banhub_tests::TestHost| {
        host.sandbox
            .client(&["get", SHARED_JAIL, "banned"])
            .unwrap_or_default()
    };
    wait_until(DEADLINE, "the agent to bring the jail in line", || {
        let list = banned(host);
        list.contains("198.51.100.20") && !list.contains("198.51.100.21")
    })
    .unwrap_or_else(|e| panic!("{e}: {}\n{}", banned(host), host.agent.logs()));
    let held = std::fs::read_to_string(state.join(STATE_FILE)).expect("state file");
    assert!(
        held.contains("198.51.100.20") && !held.contains("198.51.100.21"),
        "{held}"
    );

    let url = fleet.hub.url(&format!(
        "/api/events/bans?serverId={}&jail={SHARED_JAIL}&limit=100",
        fleet.hosts[0].id
    ));
    let client = fleet.hub.client();
    let waited = wait_until_async(DEADLINE, "the shared ban at the hub", || async {
        let Ok(response) = client.get(&url).send().await else {
            return false;
        };
        let page: serde_json::Value = response.json().await.unwrap_or_default();
        page["events"].as_array().is_some_and(|events| {
            events
                .iter()
                .any(|e| e["ip"] == "198.51.100.20" && e["jail"] == SHARED_JAIL)
        })
    })
    .await;
    if let Err(e) = waited {
        panic!("{e}\n{}", fleet.logs());
    }
}
