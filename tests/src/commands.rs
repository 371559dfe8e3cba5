//! The agent's command layer beside a fail2ban sandbox, in the test process: [`CommandHost`] builds
//! the command context the way `banhub-agent run` does (from the agent's settings) and runs typed
//! commands through `commands::execute`, with no hub and no session in between.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use banhub_agent::config::{Fail2banSettings, Settings};
use banhub_agent::link::commands::{self, Context};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    BannedPage, Command, FileEdit, GetIgnoreList, GetJailConfig, IgnoreList, JailConfig,
    JailToggle, ListBanned, SetBan, SetIgnoreList, SetJailsEnabled, StatusReport, WriteJailConfig,
};
use tempfile::TempDir;

use crate::fail2ban::Fail2banSandbox;

/// A fail2ban sandbox and the agent's command context for it.
pub struct CommandHost {
    pub sandbox: Fail2banSandbox,
    pub context: Context,
    _state: TempDir,
}

/// Where Debian (or a local install) keeps `fail2ban-client`.
pub fn client_path() -> PathBuf {
    ["/usr/bin/fail2ban-client", "/usr/local/bin/fail2ban-client"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("fail2ban-client"))
}

impl CommandHost {
    /// A sandbox named `name` ([`Fail2banSandbox::start`]) and its command context.
    pub fn start(name: &str) -> Self {
        Self::on(Fail2banSandbox::start(name).expect("fail2ban sandbox"))
    }

    /// The command context for `sandbox`, with a state directory of its own.
    pub fn on(sandbox: Fail2banSandbox) -> Self {
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
            ..Settings::default()
        };
        Self {
            context: Context::new(&settings),
            sandbox,
            _state: state,
        }
    }

    /// Runs `kind` as a hub asking for it (`requested_by: test`) and returns its outcome.
    pub async fn run(&self, kind: Kind) -> Outcome {
        self.run_as("test", kind).await
    }

    /// Runs `kind` with `requested_by` as the hub's caller and returns its outcome.
    pub async fn run_as(&self, requested_by: &str, kind: Kind) -> Outcome {
        let result = commands::execute(
            &self.context,
            Command {
                id: uuid::Uuid::new_v4().to_string(),
                deadline_unix_ms: chrono::Utc::now().timestamp_millis() + 60_000,
                requested_by: requested_by.to_owned(),
                kind: Some(kind),
            },
        )
        .await;
        result.outcome.expect("an outcome")
    }

    /// GetStatus: fail2ban's version and every jail's counters.
    pub async fn status(&self) -> StatusReport {
        match self.run(Kind::Status(Default::default())).await {
            Outcome::Status(status) => status,
            other => panic!("expected a status, got {other:?}"),
        }
    }

    /// ListBanned: one page of `jail`'s banned addresses matching `search`.
    pub async fn banned(&self, jail: &str, search: &str, offset: u32, limit: u32) -> BannedPage {
        let request = ListBanned {
            jail: jail.to_owned(),
            search: search.to_owned(),
            offset,
            limit,
        };
        match self.run(Kind::ListBanned(request)).await {
            Outcome::Banned(page) => page,
            other => panic!("expected a page, got {other:?}"),
        }
    }

    /// SetBan: bans (or unbans) `ip` in `jail`; whether that changed anything, and where.
    pub async fn set_ban(&self, jail: &str, ip: &str, ban: bool) -> (bool, Vec<String>) {
        let request = SetBan {
            jail: jail.to_owned(),
            ip: ip.to_owned(),
            ban,
            guard_override: false,
        };
        match self.run(Kind::SetBan(request)).await {
            Outcome::BanChange(change) => (change.changed, change.jails),
            other => panic!("expected a ban change, got {other:?}"),
        }
    }

    /// GetJailConfig: `jail`'s files and effective settings.
    pub async fn jail_config(&self, jail: &str) -> JailConfig {
        let request = GetJailConfig {
            jail: jail.to_owned(),
        };
        match self.run(Kind::GetJailConfig(request)).await {
            Outcome::JailConfig(config) => config,
            other => panic!("expected a jail config, got {other:?}"),
        }
    }

    /// WriteJailConfig of `jail`'s override file, expected at version `expected`.
    pub async fn write_override(&self, jail: &str, content: &str, expected: &str) -> Outcome {
        self.run(Kind::WriteJailConfig(WriteJailConfig {
            jail: jail.to_owned(),
            jail_override: Some(FileEdit {
                content: content.to_owned(),
                expected_version: expected.to_owned(),
            }),
            filter_local: None,
        }))
        .await
    }

    /// SetJailsEnabled for one jail.
    pub async fn set_enabled(&self, jail: &str, enabled: bool) -> Outcome {
        self.run(Kind::SetJailsEnabled(SetJailsEnabled {
            changes: vec![JailToggle {
                jail: jail.to_owned(),
                enabled,
            }],
        }))
        .await
    }

    /// GetIgnoreList of `jail`.
    pub async fn ignore_list(&self, jail: &str) -> IgnoreList {
        let request = GetIgnoreList {
            jail: jail.to_owned(),
        };
        match self.run(Kind::GetIgnoreList(request)).await {
            Outcome::IgnoreList(list) => list,
            other => panic!("expected an ignore list, got {other:?}"),
        }
    }

    /// SetIgnoreList of `jail`, expected at version `expected`.
    pub async fn set_ignore_list(&self, jail: &str, entries: &[&str], expected: &str) -> Outcome {
        self.run(Kind::SetIgnoreList(SetIgnoreList {
            jail: jail.to_owned(),
            entries: entries.iter().map(|e| (*e).to_owned()).collect(),
            expected_version: expected.to_owned(),
        }))
        .await
    }

    /// `fail2ban-client` with `args`, against the sandbox; its answer.
    pub fn client(&self, args: &[&str]) -> String {
        self.sandbox.client(args).expect("fail2ban-client")
    }

    /// `get <jail> banned` as a set, from fail2ban-client.
    pub fn banned_by_client(&self, jail: &str) -> BTreeSet<String> {
        let reply = self.client(&["get", jail, "banned"]);
        reply
            .trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|s| s.trim_matches('\'').to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The `Jail list:` line of `fail2ban-client status`.
    pub fn jail_list(&self) -> String {
        let status = self.client(&["status"]);
        status
            .lines()
            .find_map(|l| l.split_once("Jail list:\t").map(|(_, v)| v.to_owned()))
            .unwrap_or_default()
    }

    /// Every file under the config directory with its bytes (a temp file or any change shows).
    pub fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.insert(path.clone(), std::fs::read(&path).unwrap_or_default());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&self.sandbox.conf_dir(), &mut files);
        files
    }
}
