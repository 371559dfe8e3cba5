//! The agent's typed configuration: defaults in code, then a TOML file, then `BANHUB_AGENT_…`
//! environment variables (`__` between levels), then command-line flags. Checked once, at load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// Prefix of the environment variables read as configuration.
pub const ENV_PREFIX: &str = "BANHUB_AGENT_";

/// Everything the agent can be told at start-up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Directory holding the agent's key, certificate, the hub CA and `identity.json`.
    pub state_dir: PathBuf,
    pub fail2ban: Fail2banSettings,
    pub link: LinkSettings,
    pub relay: RelaySettings,
    pub spool: SpoolSettings,
    pub reconcile: ReconcileSettings,
    pub shared_bans: SharedBansSettings,
    pub log: LogSettings,
    /// What the hub may configure on this host; only root's file and environment set it.
    pub policy: PolicySettings,
}

/// The host policy: what fail2ban configuration the hub may write here. The defaults let the hub
/// choose actions by name and tune jails, but never choose a command or a file outside the logs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySettings {
    /// Directories log paths written by the hub may point under (absolute, no `..`).
    pub log_prefixes: Vec<PathBuf>,
    /// Command keys the hub may set: `false` none, `true` all (and values are no longer checked
    /// for shell metacharacters), or a list of keys such as `["actionban", "ignorecommand"]`.
    pub allow_commands: AllowCommands,
    /// Empty: any action root put in `action.d`; otherwise only these action names.
    pub actions: Vec<String>,
}

/// `policy.allow_commands`: every command key, or some by name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum AllowCommands {
    All(bool),
    Keys(Vec<String>),
}

impl AllowCommands {
    /// Whether the command key `key` (lower case) may be set.
    pub fn allows(&self, key: &str) -> bool {
        match self {
            Self::All(all) => *all,
            Self::Keys(keys) => keys.iter().any(|k| k.eq_ignore_ascii_case(key)),
        }
    }

    /// Whether every command key may be set.
    pub fn all(&self) -> bool {
        matches!(self, Self::All(true))
    }
}

impl Default for PolicySettings {
    fn default() -> Self {
        Self {
            log_prefixes: vec![PathBuf::from("/var/log")],
            allow_commands: AllowCommands::All(false),
            actions: Vec::new(),
        }
    }
}

/// Reconciliation of fail2ban's ban list with what the agent reported.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcileSettings {
    /// Seconds between periodic passes (there is always one at start and one after fail2ban
    /// restarts); 0 turns reconciliation off.
    pub interval_secs: u64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        Self { interval_secs: 60 }
    }
}

/// The jail of shared bans (`banhub-shared`) and the agent's keeping of them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SharedBansSettings {
    /// The jail's ban action as fail2ban's `action =` takes it (e.g. `nftables-allports`);
    /// empty: the host's own, `%(banaction_allports)s` where the configuration defines it, else
    /// `%(banaction)s`. `banhub` is always appended. Read by `install-action`.
    pub action: String,
    /// Seconds between two comparisons of the jail's banned list with the agent's set.
    pub reconcile_interval_secs: u64,
}

impl Default for SharedBansSettings {
    fn default() -> Self {
        Self {
            action: String::new(),
            reconcile_interval_secs: 5,
        }
    }
}

/// The loopback relay fail2ban's action posts ban and unban callbacks to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RelaySettings {
    /// Loopback address the relay listens on; the action file's `relay_url` must name it.
    pub listen: std::net::SocketAddr,
    /// Whether to run the relay at all (off: this host reports no events).
    pub enabled: bool,
}

/// The durable queue of events waiting for the hub.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolSettings {
    /// Upper bound on the spool's size on disk, in bytes. When the hub is unreachable long enough
    /// to fill it, the oldest events make room and the loss is reported as a gap event.
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Fail2banSettings {
    /// fail2ban's control socket.
    pub socket: PathBuf,
    /// fail2ban's configuration directory (`-c` of fail2ban-client).
    pub config_dir: PathBuf,
    /// The `fail2ban-client` program, used where the socket is not enough (config validation, reload).
    pub client: PathBuf,
    /// Time allowed to connect to the socket and for each call on it, in milliseconds.
    pub timeout_ms: u64,
    /// Time one filter test (`fail2ban-regex` on log lines) may run before it is killed, in
    /// milliseconds.
    pub filter_test_timeout_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSettings {
    /// First reconnect delay ceiling, in milliseconds; it doubles after each failed attempt.
    pub backoff_initial_ms: u64,
    /// Largest reconnect delay ceiling, in milliseconds.
    pub backoff_max_ms: u64,
    /// Time allowed for the TCP and TLS connection to the hub and for its `Welcome`, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Interval of HTTP/2 keepalive pings on the connection to the hub, in milliseconds.
    pub keepalive_interval_ms: u64,
    /// Time to wait for a keepalive answer before the connection is considered dead, in milliseconds.
    pub keepalive_timeout_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `tracing` filter directives; `RUST_LOG` overrides.
    pub filter: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from("/var/lib/banhub-agent"),
            fail2ban: Fail2banSettings::default(),
            link: LinkSettings::default(),
            relay: RelaySettings::default(),
            spool: SpoolSettings::default(),
            reconcile: ReconcileSettings::default(),
            shared_bans: SharedBansSettings::default(),
            log: LogSettings::default(),
            policy: PolicySettings::default(),
        }
    }
}

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 8721)),
            enabled: true,
        }
    }
}

impl Default for SpoolSettings {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
        }
    }
}

impl Default for Fail2banSettings {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/var/run/fail2ban/fail2ban.sock"),
            config_dir: PathBuf::from("/etc/fail2ban"),
            client: PathBuf::from("fail2ban-client"),
            timeout_ms: 5_000,
            filter_test_timeout_ms: 20_000,
        }
    }
}

impl Default for LinkSettings {
    fn default() -> Self {
        Self {
            backoff_initial_ms: 500,
            backoff_max_ms: 30_000,
            connect_timeout_ms: 10_000,
            keepalive_interval_ms: 20_000,
            keepalive_timeout_ms: 10_000,
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            filter: "info,h2=warn,hyper=warn,tower=warn,rustls=warn".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// Settings that could not be loaded, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration file {} does not exist; check --config or BANHUB_AGENT_CONFIG", path.display())]
    MissingFile { path: PathBuf },
    #[error(
        "invalid configuration: {0}; check the configuration file, the BANHUB_AGENT_… variables \
         and the command-line flags"
    )]
    Parse(Box<figment::Error>),
    #[error("invalid configuration: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl Settings {
    /// Loads defaults, then `file` (if given), then `BANHUB_AGENT_…` variables, then `overrides`
    /// (the command-line flags), and checks the result.
    pub fn load(file: Option<&Path>, overrides: Figment) -> Result<Self, SettingsError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(SettingsError::MissingFile {
                    path: path.to_owned(),
                });
            }
            figment = figment.merge(Toml::file(path));
        }
        let settings: Settings = figment
            // `BANHUB_AGENT_CONFIG` names the file itself and is read by the command line.
            .merge(Env::prefixed(ENV_PREFIX).split("__").ignore(&["config"]))
            .merge(overrides)
            .extract()
            .map_err(|e| SettingsError::Parse(Box::new(e)))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), SettingsError> {
        let invalid = |field, reason: String| Err(SettingsError::Invalid { field, reason });
        let empty = |path: &Path| path.as_os_str().is_empty();
        if empty(&self.state_dir) {
            return invalid(
                "state_dir",
                "must not be empty; set it to a directory only this agent uses, e.g. \
                 /var/lib/banhub-agent"
                    .into(),
            );
        }
        if empty(&self.fail2ban.socket) {
            return invalid(
                "fail2ban.socket",
                "must not be empty; set it to fail2ban's socket (`fail2ban-client get socket` \
                 prints it), e.g. /var/run/fail2ban/fail2ban.sock"
                    .into(),
            );
        }
        if empty(&self.fail2ban.config_dir) {
            return invalid(
                "fail2ban.config_dir",
                "must not be empty; set it to fail2ban's configuration directory, e.g. /etc/fail2ban"
                    .into(),
            );
        }
        if empty(&self.fail2ban.client) {
            return invalid(
                "fail2ban.client",
                "must not be empty; set it to the fail2ban-client program".into(),
            );
        }
        if !self.relay.listen.ip().is_loopback() {
            return invalid(
                "relay.listen",
                format!(
                    "is {}; the relay only listens on loopback (e.g. 127.0.0.1:8721), since \
                     fail2ban calls it from this host",
                    self.relay.listen
                ),
            );
        }
        check_range("spool.max_bytes", self.spool.max_bytes, 1 << 20, 1 << 40)?;
        check_range(
            "reconcile.interval_secs",
            self.reconcile.interval_secs,
            0,
            7 * 86_400,
        )?;
        check_range(
            "shared_bans.reconcile_interval_secs",
            self.shared_bans.reconcile_interval_secs,
            1,
            3_600,
        )?;
        if self
            .shared_bans
            .action
            .chars()
            .any(|c| c.is_control() || c == '#' || c == ';')
            || self.shared_bans.action.trim_start().starts_with('[')
        {
            return invalid(
                "shared_bans.action",
                "must be one action of fail2ban's `action =` on one line (e.g. \
                 `nftables-allports` or `iptables-allports[name=shared]`), with no comment"
                    .into(),
            );
        }
        check_range(
            "fail2ban.timeout_ms",
            self.fail2ban.timeout_ms,
            100,
            600_000,
        )?;
        check_range(
            "fail2ban.filter_test_timeout_ms",
            self.fail2ban.filter_test_timeout_ms,
            100,
            600_000,
        )?;
        check_range(
            "link.backoff_max_ms",
            self.link.backoff_max_ms,
            1,
            3_600_000,
        )?;
        check_range(
            "link.backoff_initial_ms",
            self.link.backoff_initial_ms,
            1,
            self.link.backoff_max_ms,
        )
        .map_err(|_| SettingsError::Invalid {
            field: "link.backoff_initial_ms",
            reason: format!(
                "must be between 1 and link.backoff_max_ms ({}), got {}; lower it or raise \
                 link.backoff_max_ms",
                self.link.backoff_max_ms, self.link.backoff_initial_ms
            ),
        })?;
        check_range(
            "link.connect_timeout_ms",
            self.link.connect_timeout_ms,
            100,
            300_000,
        )?;
        check_range(
            "link.keepalive_interval_ms",
            self.link.keepalive_interval_ms,
            1_000,
            3_600_000,
        )?;
        check_range(
            "link.keepalive_timeout_ms",
            self.link.keepalive_timeout_ms,
            100,
            600_000,
        )?;
        self.policy.validate()?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.filter) {
            return invalid(
                "log.filter",
                format!("is not a valid tracing filter ({e}); write e.g. \"info,h2=warn\""),
            );
        }
        Ok(())
    }

    /// The fail2ban socket timeout as a [`Duration`].
    pub fn fail2ban_timeout(&self) -> Duration {
        Duration::from_millis(self.fail2ban.timeout_ms)
    }
}

impl PolicySettings {
    fn validate(&self) -> Result<(), SettingsError> {
        for prefix in &self.log_prefixes {
            let dotdot = prefix
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            if !prefix.is_absolute() || dotdot || prefix.to_str().is_none() {
                return Err(SettingsError::Invalid {
                    field: "policy.log_prefixes",
                    reason: format!(
                        "{} is not an absolute path without `..`; write e.g. \"/var/log\"",
                        prefix.display()
                    ),
                });
            }
        }
        for name in &self.actions {
            if banhub_proto::rules::check_name(name).is_err() {
                return Err(SettingsError::Invalid {
                    field: "policy.actions",
                    reason: format!(
                        "{name:?} is not an action name; list names of files in action.d \
                         without their extension, e.g. \"iptables-multiport\""
                    ),
                });
            }
        }
        if let AllowCommands::Keys(keys) = &self.allow_commands
            && let Some(bad) = keys
                .iter()
                .find(|k| k.is_empty() || k.contains(char::is_whitespace))
        {
            return Err(SettingsError::Invalid {
                field: "policy.allow_commands",
                reason: format!(
                    "{bad:?} is not a key; write true, false or keys such as [\"actionban\"]"
                ),
            });
        }
        Ok(())
    }
}

fn check_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), SettingsError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(SettingsError::Invalid {
            field,
            reason: format!("must be between {min} and {max}, got {value}"),
        })
    }
}

#[cfg(test)]
// figment's `Jail` closures must return `figment::Error`, which is large; that is its API, not ours.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn set(key: &str, value: impl Serialize) -> Figment {
        Figment::from(Serialized::default(key, value))
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        Jail::expect_with(|_| {
            let settings = Settings::load(None, Figment::new()).expect("defaults are valid");
            assert_eq!(settings.state_dir, PathBuf::from("/var/lib/banhub-agent"));
            assert_eq!(
                settings.fail2ban.socket,
                PathBuf::from("/var/run/fail2ban/fail2ban.sock")
            );
            assert_eq!(settings.fail2ban.config_dir, PathBuf::from("/etc/fail2ban"));
            assert_eq!(settings.fail2ban.client, PathBuf::from("fail2ban-client"));
            assert_eq!(settings.link.backoff_initial_ms, 500);
            assert_eq!(settings.link.backoff_max_ms, 30_000);
            assert_eq!(settings.log.format, LogFormat::Text);
            Ok(())
        });
    }

    #[test]
    fn file_then_env_then_flags_apply_in_order() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "agent.toml",
                "state_dir = \"/from/file\"\n\
                 [fail2ban]\nsocket = \"/file.sock\"\ntimeout_ms = 700\n\
                 [link]\nbackoff_max_ms = 9000\n\
                 [log]\nformat = \"json\"\n",
            )?;
            jail.set_env("BANHUB_AGENT_FAIL2BAN__SOCKET", "/env.sock");
            jail.set_env("BANHUB_AGENT_LINK__BACKOFF_INITIAL_MS", "250");
            jail.set_env("BANHUB_AGENT_CONFIG", "agent.toml");
            let flags = set("state_dir", "/from/flag");
            let settings =
                Settings::load(Some(Path::new("agent.toml")), flags).expect("valid settings");
            assert_eq!(settings.state_dir, PathBuf::from("/from/flag"));
            assert_eq!(settings.fail2ban.socket, PathBuf::from("/env.sock"));
            assert_eq!(settings.fail2ban.timeout_ms, 700);
            assert_eq!(settings.link.backoff_initial_ms, 250);
            assert_eq!(settings.link.backoff_max_ms, 9000);
            assert_eq!(settings.log.format, LogFormat::Json);
            Ok(())
        });
    }

    #[test]
    fn bad_values_name_the_field() {
        fn check(overrides: Figment, field: &str) {
            Jail::expect_with(|_| {
                let err = Settings::load(None, overrides).expect_err("must be refused");
                assert!(err.to_string().contains(field), "{field}: {err}");
                Ok(())
            });
        }
        check(set("link.backoff_initial_ms", 0), "link.backoff_initial_ms");
        check(
            set("link.backoff_initial_ms", 60_000),
            "link.backoff_initial_ms",
        );
        check(set("link.backoff_max_ms", 0), "link.backoff_max_ms");
        check(set("link.connect_timeout_ms", 5), "link.connect_timeout_ms");
        check(set("fail2ban.timeout_ms", 1), "fail2ban.timeout_ms");
        check(
            set("reconcile.interval_secs", 10_000_000),
            "reconcile.interval_secs",
        );
        check(
            set("shared_bans.reconcile_interval_secs", 0),
            "shared_bans.reconcile_interval_secs",
        );
        for action in ["a\nbanaction = x", "[x]", "nftables # comment", "a; b"] {
            check(set("shared_bans.action", action), "shared_bans.action");
        }
        check(set("fail2ban.socket", ""), "fail2ban.socket");
        check(set("state_dir", ""), "state_dir");
        check(set("log.filter", "info,[[["), "log.filter");
        check(set("log.format", "yaml"), "format");
        check(set("link.backof_max_ms", 1), "backof_max_ms");
        check(set("link.backoff_max_ms", "soon"), "backoff_max_ms");
    }

    #[test]
    fn unknown_environment_variables_are_refused() {
        Jail::expect_with(|jail| {
            jail.set_env("BANHUB_AGENT_STATEDIR", "/x");
            let err = Settings::load(None, Figment::new()).expect_err("refused");
            assert!(err.to_string().contains("statedir"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_policy_comes_from_the_file_and_the_environment() {
        Jail::expect_with(|jail| {
            let strict = Settings::load(None, Figment::new()).expect("defaults");
            assert_eq!(strict.policy, PolicySettings::default());
            assert!(!strict.policy.allow_commands.allows("actionban"));
            jail.create_file(
                "agent.toml",
                "[policy]\nallow_commands = [\"actionban\"]\nactions = [\"dummy\"]\n",
            )?;
            jail.set_env("BANHUB_AGENT_POLICY__LOG_PREFIXES", "[/var/log,/srv/logs]");
            let settings =
                Settings::load(Some(Path::new("agent.toml")), Figment::new()).expect("valid");
            assert!(settings.policy.allow_commands.allows("actionban"));
            assert!(!settings.policy.allow_commands.allows("actionstart"));
            assert_eq!(settings.policy.actions, ["dummy"]);
            assert_eq!(
                settings.policy.log_prefixes,
                [PathBuf::from("/var/log"), PathBuf::from("/srv/logs")]
            );
            jail.set_env("BANHUB_AGENT_POLICY__ALLOW_COMMANDS", "true");
            let all = Settings::load(None, Figment::new()).expect("valid");
            assert!(all.policy.allow_commands.all());
            Ok(())
        });
        fn refused(key: &str, value: &str, field: &str) {
            Jail::expect_with(|jail| {
                jail.set_env(key, value);
                let err = Settings::load(None, Figment::new()).expect_err("refused");
                assert!(err.to_string().contains(field), "{value}: {err}");
                Ok(())
            });
        }
        refused(
            "BANHUB_AGENT_POLICY__LOG_PREFIXES",
            "[var/log]",
            "policy.log_prefixes",
        );
        refused(
            "BANHUB_AGENT_POLICY__LOG_PREFIXES",
            "[/var/log/..]",
            "policy.log_prefixes",
        );
        refused("BANHUB_AGENT_POLICY__ACTIONS", "[../x]", "policy.actions");
    }

    #[test]
    fn missing_file_is_reported() {
        let err = Settings::load(Some(Path::new("/nonexistent/agent.toml")), Figment::new())
            .expect_err("refused");
        assert!(matches!(err, SettingsError::MissingFile { .. }), "{err}");
    }
}
