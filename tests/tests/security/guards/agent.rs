//! The agent's own checks of the same rules, reached straight through the protocol as a compromised
//! or buggy hub would send commands: each runs through the agent's command executor against a real
//! fail2ban sandbox, with no hub in front of it.

use banhub_agent::config::{Fail2banSettings, Settings};
use banhub_agent::link::commands::{self, Context};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{Command, ErrorCode, JailToggle, SetBan, SetIgnoreList, SetJailsEnabled};
use banhub_tests::Fail2banSandbox;
use banhub_tests::fleet::snapshot;
use tempfile::TempDir;

/// A fail2ban sandbox and the agent's command context for it.
struct Host {
    sandbox: Fail2banSandbox,
    context: Context,
    _state: TempDir,
}

impl Host {
    fn start(name: &str) -> Self {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        let state = tempfile::tempdir().expect("state dir");
        let client = ["/usr/bin/fail2ban-client", "/usr/local/bin/fail2ban-client"]
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| "fail2ban-client".into());
        let settings = Settings {
            state_dir: state.path().to_owned(),
            fail2ban: Fail2banSettings {
                socket: sandbox.socket_path(),
                config_dir: sandbox.conf_dir(),
                client,
                timeout_ms: 10_000,
                ..Fail2banSettings::default()
            },
            ..Settings::default()
        };
        Self {
            context: Context::new(&settings),
            sandbox,
            _state: state,
        }
    }

    async fn run(&self, kind: Kind) -> Outcome {
        commands::execute(
            &self.context,
            Command {
                id: uuid::Uuid::new_v4().to_string(),
                deadline_unix_ms: chrono::Utc::now().timestamp_millis() + 60_000,
                requested_by: "a compromised hub".to_owned(),
                kind: Some(kind),
            },
        )
        .await
        .outcome
        .expect("an outcome")
    }

    fn banned(&self, jail: &str) -> String {
        self.sandbox
            .client(&["get", jail, "banned"])
            .expect("fail2ban lists its bans")
    }
}

fn ban(jail: &str, ip: &str, ban: bool, guard_override: bool) -> Kind {
    Kind::SetBan(SetBan {
        jail: jail.to_owned(),
        ip: ip.to_owned(),
        ban,
        guard_override,
    })
}

/// The outcome is the error `code`; returns its message.
fn refused(outcome: Outcome, code: ErrorCode) -> String {
    match outcome {
        Outcome::Error(e) => {
            assert_eq!(ErrorCode::try_from(e.code), Ok(code), "{}", e.message);
            e.message
        }
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn the_agent_refuses_what_it_can_know_without_the_hub() {
    let host = Host::start("agentguards");
    let conf = host.sandbox.conf_dir();
    let files = snapshot(&conf);
    let before = host.banned("testauth");

    // The broadcast address needs the override, which only the hub's guard rails give.
    for ip in ["255.255.255.255", "::ffff:255.255.255.255"] {
        let message = refused(
            host.run(ban("testauth", ip, true, false)).await,
            ErrorCode::InvalidArgument,
        );
        assert!(message.contains("broadcast"), "{message}");
    }
    // Every address, and reserved section names as jails, whatever the command says.
    for (jail, ip) in [
        ("testauth", "0.0.0.0/0"),
        ("testauth", "::ffff:0:0/96"),
        ("DEFAULT", "192.0.2.9"),
        ("INCLUDES", "192.0.2.9"),
    ] {
        refused(
            host.run(ban(jail, ip, true, true)).await,
            ErrorCode::InvalidArgument,
        );
    }
    for entries in [vec!["0.0.0.0/0"], vec!["192.0.2.0/24", "::/0"]] {
        let list = SetIgnoreList {
            jail: String::new(),
            entries: entries.iter().map(ToString::to_string).collect(),
            expected_version: String::new(),
        };
        let message = refused(
            host.run(Kind::SetIgnoreList(list)).await,
            ErrorCode::InvalidArgument,
        );
        assert!(message.contains("every address"), "{message}");
    }
    let toggle = SetJailsEnabled {
        changes: vec![JailToggle {
            jail: "Definition".to_owned(),
            enabled: true,
        }],
    };
    let message = refused(
        host.run(Kind::SetJailsEnabled(toggle)).await,
        ErrorCode::NotFound,
    );
    assert!(message.contains("Definition"), "{message}");

    assert_eq!(
        host.banned("testauth"),
        before,
        "a refused ban reached fail2ban"
    );
    assert_eq!(snapshot(&conf), files, "a refused command wrote files");

    // With the hub's word that an admin overrode the rails, the broadcast address is banned.
    match host
        .run(ban("testauth", "255.255.255.255", true, true))
        .await
    {
        Outcome::BanChange(change) => assert!(change.changed),
        other => panic!("expected a ban, got {other:?}"),
    }
    assert!(host.banned("testauth").contains("'255.255.255.255'"));
}

#[tokio::test]
async fn a_mapped_address_is_one_entry_at_the_agent() {
    let host = Host::start("agentmapped");
    for (ip, is_ban) in [("::ffff:198.51.100.7", true), ("198.51.100.7", false)] {
        match host.run(ban("testauth", ip, is_ban, false)).await {
            Outcome::BanChange(change) => assert!(change.changed, "{ip}"),
            other => panic!("expected a change, got {other:?}"),
        }
    }
    assert!(!host.banned("testauth").contains("198.51.100.7"));
}
