//! The hub's typed configuration: defaults in code, then a TOML file, then `BANHUB_…` environment
//! variables (`__` between levels), then command-line flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub mod auth;
mod base_path;
mod trusted_proxies;

pub use auth::{AuthConfig, AuthMode, MAX_SESSION_SECS};
pub use base_path::{BasePath, BasePathError};
pub use trusted_proxies::{TrustedProxies, TrustedProxiesError};

/// Longest allowed enrollment token lifetime: 30 days.
pub const MAX_TOKEN_TTL_SECS: u64 = 30 * 24 * 3600;

/// Everything the hub can be told at start-up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory for the SQLite database, the internal CA and other state. Created if missing.
    pub data_dir: PathBuf,
    pub http: HttpConfig,
    pub grpc: GrpcConfig,
    pub database: DatabaseConfig,
    pub enrollment: EnrollmentConfig,
    pub agents: AgentsConfig,
    pub events: EventsConfig,
    /// The end-to-end delivery probe.
    pub probe: ProbeConfig,
    /// Bans and allowlist entries that need an admin's explicit override.
    pub guards: GuardsConfig,
    /// Fleet defence: the storm breaker of shared bans.
    pub defence: DefenceConfig,
    /// Profiles: how often hosts are compared with their profile.
    pub profiles: ProfilesConfig,
    /// Bans with a duration.
    pub timed_bans: TimedBansConfig,
    pub secrets: SecretsConfig,
    /// Hub replicas on one PostgreSQL database, and the CA they share.
    pub cluster: ClusterConfig,
    /// Operator login: local administrator or OpenID Connect, sessions, API tokens.
    pub auth: AuthConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Address of the REST API and web UI.
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub body_limit_bytes: usize,
    /// URL prefix everything is served under, for a reverse proxy forwarding a sub-path (e.g.
    /// `/banhub`); empty for the root.
    pub base_path: BasePath,
    /// HTTPS on the listener itself, for installations without a TLS-terminating proxy.
    pub tls: HttpTlsConfig,
    /// Reverse proxies whose `X-Forwarded-For` names the client (for the audit log and the
    /// operators' protected addresses); empty: the socket peer is the client.
    pub trusted_proxies: TrustedProxies,
}

/// The HTTP listener's own certificate. Both paths or neither.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpTlsConfig {
    /// PEM certificate chain, leaf first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_path: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_path: Option<PathBuf>,
}

impl HttpTlsConfig {
    /// The certificate and key paths when HTTPS is configured.
    pub fn paths(&self) -> Option<(&Path, &Path)> {
        Some((self.cert_path.as_deref()?, self.key_path.as_deref()?))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Address of the agent gateway (mutual TLS).
    pub listen: SocketAddr,
    /// `host:port` that agents dial, written into enrollment tokens. Empty: the listen address, or this
    /// machine's host name when listening on every interface.
    pub advertise: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://…` for PostgreSQL, `sqlite://…` for a given SQLite file; empty: SQLite in the data dir.
    pub url: String,
    /// Largest number of pooled connections.
    pub max_connections: u32,
    /// Agents' event batches stored at once by this hub (the rest wait and are merged into larger
    /// transactions); at most `max_connections`, so API reads keep connections during a burst.
    pub ingest_writers: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EnrollmentConfig {
    /// How long an enrollment token stays valid, in seconds.
    pub token_ttl_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// How often hub and agent send heartbeats, in milliseconds. A side silent for three intervals is
    /// dropped.
    pub heartbeat_interval_ms: u32,
    /// Deadline given to quick commands sent to agents (status, bans, reads), in milliseconds.
    pub command_timeout_ms: u64,
    /// Deadline given to slow commands: config writes, reloads, restarts, filter tests.
    pub slow_command_timeout_ms: u64,
    /// Validity of agent client certificates, in days.
    pub certificate_days: u32,
}

/// Where the key that seals stored secrets (SMTP password, webhook URLs and tokens) lives.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// A file holding 32 random bytes as hex, mode 0600, kept outside the database (back it up
    /// with it). Created on first start. Empty: `<data_dir>/secrets.key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// Events older than this many days are pruned in the background; 0 keeps them forever.
    pub retention_days: u32,
    /// How often pruning runs, in seconds.
    pub prune_interval_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This replica's name among the hub replicas sharing one PostgreSQL database (letters,
    /// digits, `.`, `_`, `@`, `-`). Empty: `<hostname>-<random>`, new at every start.
    pub replica_id: String,
    /// How long an agent lease lives without renewal, in seconds; renewed every third of it. A dead
    /// replica's agents count as offline at most this long (they usually reconnect sooner).
    pub lease_ttl_secs: u64,
    /// How often queued fleet actions are delivered and their deadlines swept, in milliseconds.
    pub sweep_interval_ms: u64,
    /// Directory of the internal CA. Empty: `<data_dir>/ca`. Every replica must use the same CA.
    pub ca_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter directives; `RUST_LOG` overrides.
    pub filter: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

/// The end-to-end probe: a ban and an unban of a documentation address in each agent's probe jail,
/// watched coming back through the real event path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeConfig {
    /// Seconds between scheduled probes of every online server; 0 turns the schedule off (probes
    /// on demand still work).
    pub interval_secs: u64,
    /// How long a probe waits for each of its two events, in seconds.
    pub timeout_secs: u64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            interval_secs: 3600,
            timeout_secs: 15,
        }
    }
}

/// How wide a network may be banned, or allowlisted, without an admin's explicit override.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct GuardsConfig {
    /// An IPv4 network with a shorter prefix than this needs the override.
    pub ban_min_prefix_v4: u8,
    /// An IPv6 network with a shorter prefix than this needs the override.
    pub ban_min_prefix_v6: u8,
    /// How long after its last use an API token's client address stays protected, in seconds;
    /// 0: only sessions' addresses are protected.
    pub operator_token_window_secs: u64,
    /// How often the protected networks are read again from the database (changes on other
    /// replicas, sessions that ended), in seconds.
    pub protected_refresh_secs: u64,
}

impl Default for GuardsConfig {
    fn default() -> Self {
        Self {
            ban_min_prefix_v4: 16,
            ban_min_prefix_v6: 32,
            operator_token_window_secs: 24 * 3600,
            protected_refresh_secs: 5,
        }
    }
}

/// Fleet defence's limits: the storm breaker pauses sharing from a source server past either.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DefenceConfig {
    /// Origin bans of one source server that cause sharing (by sharing policies and recidive
    /// rules) within a sliding minute, whatever the number of targets.
    pub storm_origin_bans_per_minute: u32,
    /// Shared bans one source server's bans may cause within a sliding minute (each origin ban
    /// counts once per target); unset: no such limit.
    pub storm_limit_per_minute: Option<u32>,
}

impl Default for DefenceConfig {
    fn default() -> Self {
        Self {
            storm_origin_bans_per_minute: crate::domain::breaker::DEFAULT_ORIGIN_BANS_PER_MINUTE,
            storm_limit_per_minute: None,
        }
    }
}

impl DefenceConfig {
    /// The storm breaker's limits.
    pub fn storm_limits(&self) -> crate::domain::breaker::StormLimits {
        crate::domain::breaker::StormLimits {
            origin_bans: self.storm_origin_bans_per_minute,
            shared_bans: self.storm_limit_per_minute,
        }
    }
}

/// Profiles and drift.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProfilesConfig {
    /// Seconds between two comparisons of every host with its profile (besides the one when an
    /// agent connects and after each change banhub makes on a host).
    pub drift_interval_secs: u64,
}

impl Default for ProfilesConfig {
    fn default() -> Self {
        Self {
            drift_interval_secs: 300,
        }
    }
}

/// Bans with a duration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TimedBansConfig {
    /// The shortest `durationSecs` a ban may carry.
    pub min_duration_secs: u64,
}

impl Default for TimedBansConfig {
    fn default() -> Self {
        Self {
            min_duration_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("banhub-data"),
            http: HttpConfig::default(),
            grpc: GrpcConfig::default(),
            database: DatabaseConfig::default(),
            enrollment: EnrollmentConfig::default(),
            agents: AgentsConfig::default(),
            events: EventsConfig::default(),
            probe: ProbeConfig::default(),
            guards: GuardsConfig::default(),
            defence: DefenceConfig::default(),
            profiles: ProfilesConfig::default(),
            timed_bans: TimedBansConfig::default(),
            secrets: SecretsConfig::default(),
            cluster: ClusterConfig::default(),
            auth: AuthConfig::default(),
            log: LogConfig::default(),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            body_limit_bytes: 256 * 1024,
            base_path: BasePath::root(),
            tls: HttpTlsConfig::default(),
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 50051)),
            advertise: String::new(),
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            max_connections: 16,
            ingest_writers: crate::store::DEFAULT_INGEST_WRITERS,
        }
    }
}

impl Default for EnrollmentConfig {
    fn default() -> Self {
        Self {
            token_ttl_secs: 24 * 3600,
        }
    }
}

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 10_000,
            command_timeout_ms: 10_000,
            slow_command_timeout_ms: 120_000,
            certificate_days: 365,
        }
    }
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            retention_days: 180,
            prune_interval_secs: 3600,
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            replica_id: String::new(),
            lease_ttl_secs: 30,
            sweep_interval_ms: 5000,
            ca_dir: PathBuf::new(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            filter: "info,sqlx=warn,h2=warn,sea_orm=warn,sea_orm_migration=warn".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// A configuration that could not be loaded, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {path} does not exist")]
    MissingFile { path: PathBuf },
    #[error("invalid configuration: {0}")]
    Parse(Box<figment::Error>),
    #[error("invalid configuration: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl Config {
    /// Loads defaults, then `file` (if given), then `BANHUB_…` variables, then `overrides`.
    pub fn load(file: Option<&Path>, overrides: Figment) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::MissingFile {
                    path: path.to_owned(),
                });
            }
            figment = figment.merge(Toml::file(path));
        }
        let config: Config = figment
            .merge(
                Env::prefixed("BANHUB_")
                    // BANHUB_AGENT_… variables belong to the agent, which may share this environment.
                    .filter(|key| !key.as_str().to_ascii_lowercase().starts_with("agent_"))
                    .split("__")
                    .ignore(&["config"]),
            )
            .merge(overrides)
            .extract()
            .map_err(|e| ConfigError::Parse(Box::new(e)))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_owned(),
            })
        };
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty");
        }
        if self.http.body_limit_bytes < 1024 {
            return invalid("http.body_limit_bytes", "must be at least 1024");
        }
        match (&self.http.tls.cert_path, &self.http.tls.key_path) {
            (Some(_), None) => {
                return invalid(
                    "http.tls.key_path",
                    "must be set when http.tls.cert_path is",
                );
            }
            (None, Some(_)) => {
                return invalid(
                    "http.tls.cert_path",
                    "must be set when http.tls.key_path is",
                );
            }
            _ => {}
        }
        let url = &self.database.url;
        let known_scheme = ["postgres://", "postgresql://", "sqlite:"]
            .iter()
            .any(|scheme| url.starts_with(scheme));
        if !url.is_empty() && !known_scheme {
            return invalid(
                "database.url",
                "must start with postgres://, postgresql:// or sqlite: (or be empty for SQLite in the data dir)",
            );
        }
        if self.database.max_connections == 0 {
            return invalid("database.max_connections", "must be at least 1");
        }
        if !(1..=self.database.max_connections).contains(&self.database.ingest_writers) {
            return invalid(
                "database.ingest_writers",
                "must be at least 1 and at most database.max_connections",
            );
        }
        if !(1..=MAX_TOKEN_TTL_SECS).contains(&self.enrollment.token_ttl_secs) {
            return invalid(
                "enrollment.token_ttl_secs",
                "must be between 1 and 2592000 seconds (30 days)",
            );
        }
        if self.probe.interval_secs != 0 && !(60..=7 * 86_400).contains(&self.probe.interval_secs) {
            return invalid(
                "probe.interval_secs",
                "must be 0 (off) or between 60 and 604800 seconds (a week)",
            );
        }
        if !(1..=300).contains(&self.probe.timeout_secs) {
            return invalid("probe.timeout_secs", "must be between 1 and 300 seconds");
        }
        if !(1..=32).contains(&self.guards.ban_min_prefix_v4) {
            return invalid(
                "guards.ban_min_prefix_v4",
                "must be between 1 and 32 (1: no IPv4 network needs the override)",
            );
        }
        if !(1..=128).contains(&self.guards.ban_min_prefix_v6) {
            return invalid(
                "guards.ban_min_prefix_v6",
                "must be between 1 and 128 (1: no IPv6 network needs the override)",
            );
        }
        if !(1..=3600).contains(&self.guards.protected_refresh_secs) {
            return invalid(
                "guards.protected_refresh_secs",
                "must be between 1 and 3600 seconds",
            );
        }
        if self.guards.operator_token_window_secs > 365 * 24 * 3600 {
            return invalid(
                "guards.operator_token_window_secs",
                "must be at most a year (31536000 seconds); 0 protects no token's address",
            );
        }
        if !(1..=3600).contains(&self.timed_bans.min_duration_secs) {
            return invalid(
                "timed_bans.min_duration_secs",
                "must be between 1 and 3600 seconds",
            );
        }
        if !(1..=86_400).contains(&self.profiles.drift_interval_secs) {
            return invalid(
                "profiles.drift_interval_secs",
                "must be between 1 and 86400 seconds",
            );
        }
        if !(1..=1_000_000).contains(&self.defence.storm_origin_bans_per_minute) {
            return invalid(
                "defence.storm_origin_bans_per_minute",
                "must be between 1 and 1000000 origin bans per minute",
            );
        }
        if self
            .defence
            .storm_limit_per_minute
            .is_some_and(|limit| !(1..=100_000_000).contains(&limit))
        {
            return invalid(
                "defence.storm_limit_per_minute",
                "must be between 1 and 100000000 shared bans per minute, or unset",
            );
        }
        if self.agents.heartbeat_interval_ms < 100 {
            return invalid("agents.heartbeat_interval_ms", "must be at least 100");
        }
        if self.agents.command_timeout_ms < 100 {
            return invalid("agents.command_timeout_ms", "must be at least 100");
        }
        if self.agents.slow_command_timeout_ms < self.agents.command_timeout_ms {
            return invalid(
                "agents.slow_command_timeout_ms",
                "must be at least agents.command_timeout_ms",
            );
        }
        if !(1..=3650).contains(&self.agents.certificate_days) {
            return invalid("agents.certificate_days", "must be between 1 and 3650");
        }
        if self.events.retention_days > 36_500 {
            return invalid(
                "events.retention_days",
                "must be at most 36500 (100 years); 0 keeps events forever",
            );
        }
        if !(60..=86_400).contains(&self.events.prune_interval_secs) {
            return invalid(
                "events.prune_interval_secs",
                "must be between 60 and 86400 seconds",
            );
        }
        if !self.cluster.replica_id.is_empty()
            && banhub_proto::rules::check_name(&self.cluster.replica_id).is_err()
        {
            return invalid(
                "cluster.replica_id",
                "must be 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit",
            );
        }
        if !(3..=3600).contains(&self.cluster.lease_ttl_secs) {
            return invalid(
                "cluster.lease_ttl_secs",
                "must be between 3 and 3600 seconds",
            );
        }
        if !(100..=3_600_000).contains(&self.cluster.sweep_interval_ms) {
            return invalid(
                "cluster.sweep_interval_ms",
                "must be between 100 and 3600000 milliseconds",
            );
        }
        if !self.grpc.advertise.is_empty() && !self.grpc.advertise.contains(':') {
            return invalid(
                "grpc.advertise",
                "must be host:port, e.g. hub.example.com:50051",
            );
        }
        self.auth.validate().map_err(|e| ConfigError::Invalid {
            field: e.field,
            reason: e.reason,
        })?;
        Ok(())
    }

    /// The database URL actually used: the configured one, or SQLite in the data directory.
    pub fn database_url(&self) -> String {
        if self.database.url.is_empty() {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("banhub.db").display()
            )
        } else {
            self.database.url.clone()
        }
    }

    /// The file of the key that seals stored secrets.
    pub fn secrets_key_file(&self) -> PathBuf {
        self.secrets
            .key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("secrets.key"))
    }

    /// The internal CA's directory.
    pub fn ca_dir(&self) -> PathBuf {
        if self.cluster.ca_dir.as_os_str().is_empty() {
            self.data_dir.join("ca")
        } else {
            self.cluster.ca_dir.clone()
        }
    }

    /// The `host:port` agents dial.
    pub fn grpc_advertise(&self, bound: SocketAddr) -> String {
        if !self.grpc.advertise.is_empty() {
            return self.grpc.advertise.clone();
        }
        if bound.ip().is_unspecified() {
            let host = hostname::get()
                .ok()
                .and_then(|h| h.into_string().ok())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".to_owned());
            format!("{host}:{}", bound.port())
        } else {
            bound.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_config_start_uses_sqlite_in_the_data_dir() {
        let config = Config::load(None, Figment::new()).expect("defaults are valid");
        assert!(config.database_url().starts_with("sqlite://"));
        assert!(config.database_url().contains("banhub-data"));
        assert!(config.http.listen.ip().is_loopback());
    }

    #[test]
    fn file_then_overrides_apply_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("banhub.toml");
        std::fs::write(
            &path,
            "data_dir = \"/srv/banhub\"\n[http]\nlisten = \"127.0.0.1:9000\"\n",
        )
        .expect("write");
        let overrides = Figment::from(Serialized::default("http.listen", "127.0.0.1:9100"));
        let config = Config::load(Some(&path), overrides).expect("valid");
        assert_eq!(config.data_dir, PathBuf::from("/srv/banhub"));
        assert_eq!(config.http.listen.port(), 9100);
    }

    #[test]
    fn bad_values_say_which_field() {
        let overrides = Figment::from(Serialized::default("database.url", "mysql://x"));
        let err = Config::load(None, overrides).expect_err("refused");
        assert!(err.to_string().contains("database.url"), "{err}");
        let unknown = Figment::from(Serialized::default("http.lisen", "x"));
        assert!(Config::load(None, unknown).is_err());
    }

    #[test]
    fn guard_limits_are_prefix_lengths_of_their_family() {
        let config = Config::load(None, Figment::new()).expect("defaults are valid");
        assert_eq!(config.guards, GuardsConfig::default());
        for (key, bad) in [
            ("guards.ban_min_prefix_v4", 0),
            ("guards.ban_min_prefix_v4", 33),
            ("guards.ban_min_prefix_v6", 0),
            ("guards.ban_min_prefix_v6", 129),
            ("guards.protected_refresh_secs", 0),
            ("guards.protected_refresh_secs", 3601),
            ("guards.operator_token_window_secs", 365 * 24 * 3600 + 1),
        ] {
            let overrides = Figment::from(Serialized::default(key, bad));
            let err = Config::load(None, overrides).expect_err("refused");
            assert!(err.to_string().contains(key), "{err}");
        }
        let overrides = Figment::from(Serialized::default("guards.ban_min_prefix_v6", 48));
        let config = Config::load(None, overrides).expect("valid");
        assert_eq!(config.guards.ban_min_prefix_v6, 48);
    }

    #[test]
    fn the_storm_limit_is_a_positive_count() {
        let config = Config::load(None, Figment::new()).expect("defaults are valid");
        assert_eq!(config.defence.storm_limit_per_minute, None);
        assert_eq!(config.defence.storm_origin_bans_per_minute, 300);
        let overrides = Figment::from(Serialized::default("defence.storm_limit_per_minute", 0));
        let err = Config::load(None, overrides).expect_err("refused");
        assert!(
            err.to_string().contains("defence.storm_limit_per_minute"),
            "{err}"
        );
        let overrides = Figment::from(Serialized::default("defence.storm_limit_per_minute", 5));
        let config = Config::load(None, overrides).expect("valid");
        assert_eq!(config.defence.storm_limit_per_minute, Some(5));
        let overrides = Figment::from(Serialized::default(
            "defence.storm_origin_bans_per_minute",
            0,
        ));
        let err = Config::load(None, overrides).expect_err("refused");
        assert!(
            err.to_string()
                .contains("defence.storm_origin_bans_per_minute"),
            "{err}"
        );
    }

    #[test]
    fn ingest_writers_stay_within_the_pool() {
        let config = Config::load(None, Figment::new()).expect("defaults are valid");
        assert_eq!(config.database.ingest_writers, 4);
        for bad in [0, 17] {
            let overrides = Figment::from(Serialized::default("database.ingest_writers", bad));
            let err = Config::load(None, overrides).expect_err("refused");
            assert!(err.to_string().contains("database.ingest_writers"), "{err}");
        }
        let all = Figment::from(Serialized::default("database.ingest_writers", 16));
        assert_eq!(
            Config::load(None, all)
                .expect("valid")
                .database
                .ingest_writers,
            16
        );
    }

    #[test]
    // figment's own error type is large; this is its test harness, not our API.
    #[allow(clippy::result_large_err)]
    fn environment_overrides_and_agent_variables_are_left_alone() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BANHUB_HTTP__LISTEN", "127.0.0.1:9200");
            jail.set_env("BANHUB_AGENT_LINK__BACKOFF_MAX_MS", "1000");
            jail.set_env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500");
            let config = Config::load(None, Figment::new()).map_err(|e| e.to_string())?;
            assert_eq!(config.http.listen.port(), 9200);
            assert_eq!(config.agents.heartbeat_interval_ms, 500);
            Ok(())
        });
    }

    #[test]
    fn events_settings_load_and_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("banhub.toml");
        std::fs::write(&path, "[events]\nretention_days = 30\n").expect("write");
        let config = Config::load(Some(&path), Figment::new()).expect("valid");
        assert_eq!(config.events.retention_days, 30);
        assert_eq!(config.events.prune_interval_secs, 3600);
        let forever = Figment::from(Serialized::default("events.retention_days", 0));
        assert_eq!(
            Config::load(None, forever)
                .expect("valid")
                .events
                .retention_days,
            0
        );
        for (key, value) in [
            ("events.retention_days", 40_000u64),
            ("events.prune_interval_secs", 5),
        ] {
            let err = Config::load(None, Figment::from(Serialized::default(key, value)))
                .expect_err("refused");
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn base_path_and_tls_load_and_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("banhub.toml");
        std::fs::write(
            &path,
            "[http]\nbase_path = \"/banhub/\"\n[http.tls]\ncert_path = \"/c.pem\"\nkey_path = \"/k.pem\"\n",
        )
        .expect("write");
        let config = Config::load(Some(&path), Figment::new()).expect("valid");
        assert_eq!(config.http.base_path.as_str(), "/banhub");
        assert_eq!(
            config.http.tls.paths(),
            Some((Path::new("/c.pem"), Path::new("/k.pem")))
        );
        let defaults = Config::load(None, Figment::new()).expect("valid");
        assert!(defaults.http.base_path.is_root());
        assert_eq!(defaults.http.tls.paths(), None);

        let bad = Figment::from(Serialized::default("http.base_path", "banhub"));
        let err = Config::load(None, bad).expect_err("refused");
        assert!(err.to_string().contains("base_path"), "{err}");
        let half = Figment::from(Serialized::default("http.tls.cert_path", "/c.pem"));
        let err = Config::load(None, half).expect_err("refused");
        assert!(err.to_string().contains("http.tls.key_path"), "{err}");
    }

    #[test]
    fn trusted_proxies_load_and_a_bad_entry_stops_the_load() {
        let defaults = Config::load(None, Figment::new()).expect("valid");
        assert!(defaults.http.trusted_proxies.is_empty());
        let list = Figment::from(Serialized::default(
            "http.trusted_proxies",
            vec!["10.0.0.5", "10.1.0.0/16"],
        ));
        let config = Config::load(None, list).expect("valid");
        assert!(
            config
                .http
                .trusted_proxies
                .trusts("10.1.2.3".parse().expect("ip"))
        );
        let bad = Figment::from(Serialized::default("http.trusted_proxies", "10.0.0.0/40"));
        let err = Config::load(None, bad).expect_err("refused");
        assert!(err.to_string().contains("trusted_proxies"), "{err}");
        assert!(err.to_string().contains("10.0.0.0/40"), "{err}");
    }

    #[test]
    fn cluster_settings_load_and_are_checked() {
        let config = Config::load(None, Figment::new()).expect("valid");
        assert_eq!(config.ca_dir(), config.data_dir.join("ca"));
        let overrides = Figment::from(Serialized::default("cluster.replica_id", "hub-a"))
            .merge(Serialized::default("cluster.ca_dir", "/srv/shared-ca"));
        let config = Config::load(None, overrides).expect("valid");
        assert_eq!(config.cluster.replica_id, "hub-a");
        assert_eq!(config.ca_dir(), PathBuf::from("/srv/shared-ca"));
        for (key, value) in [
            ("cluster.replica_id", "bad id"),
            ("cluster.lease_ttl_secs", "1"),
            ("cluster.sweep_interval_ms", "10"),
        ] {
            let err = Config::load(None, Figment::from(Serialized::default(key, value)))
                .expect_err("refused");
            assert!(err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn missing_file_is_reported() {
        let err = Config::load(Some(Path::new("/nonexistent/banhub.toml")), Figment::new())
            .expect_err("refused");
        assert!(matches!(err, ConfigError::MissingFile { .. }));
    }
}
