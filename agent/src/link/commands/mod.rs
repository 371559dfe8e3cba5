//! The commands the hub can send, one function per kind, each returning the result to send back.
//!
//! A new command kind is a new `Kind` arm in [`execute`], a function in the module of its area,
//! and a name in [`CAPABILITIES`]. Everything a command receives is checked again here (names
//! with `JailName`/`FilterName`, addresses with `banhub_proto::rules`, sizes against the caps in
//! `args`) before it reaches fail2ban or a file, whatever the hub already checked.
//!
//! Areas: `status` (ping, the dashboard's status), `bans` (banned lists, ban and unban),
//! `jails` (the effective jail configuration and its safe edits), `filters` (test), `create`
//! (the catalog of filters and jail templates, creating and deleting jails and filters),
//! `ignore` (allowlists), `defaults` (fail2ban's `[DEFAULT]` keys), `restart` (reload and restart), `logtail` (fail2ban's own log),
//! `shared_bans` (the bans held for other hosts), `preview` (a filter over a jail's own log).
//! `shared_bans` (the bans held for other hosts), `config_set` (sets of files with commit-confirm).
//! The socket connections to fail2ban are shared through `pool`.

use std::path::PathBuf;

use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{Command, CommandError, CommandResult, ErrorCode};

use crate::config::Settings;
use crate::fail2ban::Fail2banError;
use crate::fail2ban_files::pending::ConfigChanges;
use crate::fail2ban_files::{ConfigEditor, EditorSettings, Fail2banTools};
use crate::shared_bans::{SharedBans, SharedBansConfig};

mod args;
mod bans;
mod config_files;
mod config_set;
mod create;
mod defaults;
mod diagnostics;
mod failure;
mod filters;
mod ignore;
mod jails;
mod logtail;
mod pool;
mod preview;
mod restart;
mod shared_bans;
mod status;

pub use diagnostics::{DeliveryHandles, RelayHandle};
pub use failure::Failure;
pub use pool::Fail2banPool;
pub use status::fail2ban_version;

/// Feature names announced in the hello: one per command kind this agent runs (the names
/// [`kind_name`] gives them), then the features the hub looks for by name ([`FEATURES`]).
pub const CAPABILITIES: &[&str] = &[
    "ping",
    "status",
    "list_banned",
    "set_ban",
    "list_jails",
    "set_jails_enabled",
    "get_jail_config",
    "write_jail_config",
    "list_filters",
    "test_filter",
    "restart",
    "log_tail",
    "get_ignore_list",
    "set_ignore_list",
    "write_defaults",
    "get_delivery_status",
    "probe_step",
    "sync_shared_bans",
    "create_jail",
    "write_filter",
    "delete_config",
    "preview_filter",
    "get_config_files",
    "validate_config_set",
    "apply_config_set",
    "settle_config_set",
    "config_set_status",
    "shared-bans",
];

/// The capabilities that name a feature rather than a command kind: `shared-bans`, this agent
/// holds shared bans in the jail `banhub-shared` and lifts them at their time.
pub const FEATURES: &[&str] = &["shared-bans"];

/// What commands need from the agent, shared by every command of every session.
#[derive(Debug)]
pub struct Context {
    /// Kept-open connections to fail2ban's control socket.
    fail2ban: Fail2banPool,
    /// The safe config editor, or why it could not be set up (then only the commands that
    /// touch the configuration fail).
    editor: Result<ConfigEditor, String>,
    /// Where the configuration is and how to run `fail2ban-client` (for reload and restart).
    editor_settings: EditorSettings,
    /// Short-lived copies of banned lists with their times, for paging.
    bans: bans::BanCache,
    /// Held by every command that changes the configuration or reloads fail2ban, so two
    /// commands never interleave (the editor also locks each edit, but a command may make
    /// several edits, or reload outside the editor).
    config_gate: tokio::sync::Mutex<()>,
    /// The relay and the spool, for delivery diagnostics (set once by [`Context::set_delivery`]).
    delivery: std::sync::OnceLock<DeliveryHandles>,
    /// The shared bans this host holds, or why their file could not be read.
    shared_bans: Result<SharedBans, String>,
    /// Filter previews take turns.
    previews: preview::PreviewTurns,
    /// Config sets applied with commit-confirm (whose loop reverts them at their deadline).
    config_changes: Result<ConfigChanges, String>,
}

impl Context {
    /// The context of the agent's configuration: fail2ban's socket, config directory and client,
    /// with config backups in `<state_dir>/config-backups`.
    pub fn new(settings: &Settings) -> Self {
        let editor_settings = EditorSettings::from_agent(settings);
        let editor = ConfigEditor::new(editor_settings.clone()).map_err(|e| {
            tracing::warn!(
                error = %e,
                "the config editor cannot start; commands that read or change fail2ban's \
                 configuration will fail"
            );
            format!("the agent's config editor is not available: {e}")
        });
        let shared_bans = SharedBans::open(SharedBansConfig {
            state_dir: settings.state_dir.clone(),
            socket: settings.fail2ban.socket.clone(),
            timeout: settings.fail2ban_timeout(),
            reconcile_interval: std::time::Duration::from_secs(
                settings.shared_bans.reconcile_interval_secs,
            ),
            budget: std::time::Duration::from_millis(settings.shared_bans.budget_ms),
        })
        .map_err(|e| {
            tracing::error!(error = %e, "shared bans are not kept on this host");
            format!("the agent cannot keep shared bans: {e}")
        });
        let config_changes = editor
            .as_ref()
            .map(|editor| ConfigChanges::new(editor.clone(), &settings.state_dir))
            .map_err(Clone::clone);
        Self {
            fail2ban: Fail2banPool::new(&settings.fail2ban.socket, settings.fail2ban_timeout()),
            editor,
            editor_settings,
            bans: bans::BanCache::default(),
            config_gate: tokio::sync::Mutex::new(()),
            delivery: std::sync::OnceLock::new(),
            shared_bans,
            previews: preview::PreviewTurns::default(),
            config_changes,
        }
    }

    /// The config-set changes of this host (whose loop the agent runs beside the session).
    pub fn config_changes(&self) -> Result<&ConfigChanges, Failure> {
        self.config_changes.as_ref().map_err(Failure::internal)
    }

    /// The shared bans this host holds (whose loop the agent runs beside the session).
    pub fn shared_bans(&self) -> Result<&SharedBans, Failure> {
        self.shared_bans.as_ref().map_err(Failure::internal)
    }

    /// Tells the delivery diagnostics where the relay and the spool are; only the first call
    /// counts.
    pub fn set_delivery(&self, handles: DeliveryHandles) {
        let _ = self.delivery.set(handles);
    }

    /// The pool of fail2ban connections.
    pub fn fail2ban(&self) -> &Fail2banPool {
        &self.fail2ban
    }

    fn editor(&self) -> Result<&ConfigEditor, Failure> {
        self.editor.as_ref().map_err(Failure::internal)
    }

    fn tools(&self) -> &Fail2banTools {
        &self.editor_settings.tools
    }

    fn config_dir(&self) -> &PathBuf {
        &self.editor_settings.config_dir
    }
}

/// The name of a command kind, for logs.
pub fn kind_name(command: &Command) -> &'static str {
    match command.kind {
        Some(Kind::Ping(_)) => "ping",
        Some(Kind::Status(_)) => "status",
        Some(Kind::ListBanned(_)) => "list_banned",
        Some(Kind::SetBan(_)) => "set_ban",
        Some(Kind::ListJails(_)) => "list_jails",
        Some(Kind::SetJailsEnabled(_)) => "set_jails_enabled",
        Some(Kind::GetJailConfig(_)) => "get_jail_config",
        Some(Kind::WriteJailConfig(_)) => "write_jail_config",
        Some(Kind::ListFilters(_)) => "list_filters",
        Some(Kind::TestFilter(_)) => "test_filter",
        Some(Kind::Restart(_)) => "restart",
        Some(Kind::LogTail(_)) => "log_tail",
        Some(Kind::GetIgnoreList(_)) => "get_ignore_list",
        Some(Kind::SetIgnoreList(_)) => "set_ignore_list",
        Some(Kind::WriteDefaults(_)) => "write_defaults",
        Some(Kind::GetDeliveryStatus(_)) => "get_delivery_status",
        Some(Kind::ProbeStep(_)) => "probe_step",
        Some(Kind::SyncSharedBans(_)) => "sync_shared_bans",
        Some(Kind::CreateJail(_)) => "create_jail",
        Some(Kind::WriteFilter(_)) => "write_filter",
        Some(Kind::DeleteConfig(_)) => "delete_config",
        Some(Kind::PreviewFilter(_)) => "preview_filter",
        Some(Kind::GetConfigFiles(_)) => "get_config_files",
        Some(Kind::ValidateConfigSet(_)) => "validate_config_set",
        Some(Kind::ApplyConfigSet(_)) => "apply_config_set",
        Some(Kind::SettleConfigSet(_)) => "settle_config_set",
        Some(Kind::ConfigSetStatus(_)) => "config_set_status",
        None => "unknown",
    }
}

/// Refuses a command whose deadline has passed: the hub has given up on it, and running it late could
/// surprise an operator who already saw it fail.
pub fn refuse_if_expired(command: &Command, now_unix_ms: i64) -> Option<CommandResult> {
    if now_unix_ms <= command.deadline_unix_ms {
        return None;
    }
    let message = if command.deadline_unix_ms == 0 {
        "the command carries no deadline; refusing to run it".to_owned()
    } else {
        format!(
            "the command's deadline passed {} ms before it arrived; not run",
            now_unix_ms.saturating_sub(command.deadline_unix_ms)
        )
    };
    Some(error_result(&command.id, ErrorCode::Expired, message))
}

/// Runs one command to completion.
pub async fn execute(context: &Context, command: Command) -> CommandResult {
    let Command { id, kind, .. } = command;
    let result = match kind {
        Some(Kind::Ping(_)) => status::ping(context).await,
        Some(Kind::Status(_)) => status::status(context).await,
        Some(Kind::ListBanned(request)) => bans::list_banned(context, request).await,
        Some(Kind::SetBan(request)) => bans::set_ban(context, request).await,
        Some(Kind::ListJails(_)) => jails::list_jails(context).await,
        Some(Kind::SetJailsEnabled(request)) => jails::set_jails_enabled(context, request).await,
        Some(Kind::GetJailConfig(request)) => jails::get_jail_config(context, request).await,
        Some(Kind::WriteJailConfig(request)) => jails::write_jail_config(context, request).await,
        Some(Kind::ListFilters(_)) => create::list_filters(context).await,
        Some(Kind::TestFilter(request)) => filters::test_filter(context, request).await,
        Some(Kind::Restart(request)) => restart::restart(context, request).await,
        Some(Kind::LogTail(request)) => logtail::log_tail(context, request).await,
        Some(Kind::GetIgnoreList(request)) => ignore::get_ignore_list(context, request).await,
        Some(Kind::SetIgnoreList(request)) => ignore::set_ignore_list(context, request).await,
        Some(Kind::WriteDefaults(request)) => defaults::write_defaults(context, request).await,
        Some(Kind::GetDeliveryStatus(_)) => diagnostics::delivery_status(context).await,
        Some(Kind::ProbeStep(request)) => diagnostics::probe_step(context, request).await,
        Some(Kind::SyncSharedBans(request)) => {
            shared_bans::sync_shared_bans(context, request).await
        }
        Some(Kind::CreateJail(request)) => create::create_jail(context, request).await,
        Some(Kind::WriteFilter(request)) => create::write_filter(context, request).await,
        Some(Kind::DeleteConfig(request)) => create::delete_config(context, request).await,
        Some(Kind::PreviewFilter(request)) => preview::preview_filter(context, request).await,
        Some(Kind::GetConfigFiles(_)) => config_files::get_config_files(context).await,
        Some(Kind::ValidateConfigSet(request)) => {
            config_files::validate_config_set(context, request).await
        }
        Some(Kind::ApplyConfigSet(r)) => config_set::apply_config_set(context, r).await,
        Some(Kind::SettleConfigSet(r)) => config_set::settle_config_set(context, r).await,
        Some(Kind::ConfigSetStatus(r)) => config_set::config_set_status(context, r).await,
        // prost leaves the oneof empty for a kind newer than this build.
        None => Err(Failure::new(
            ErrorCode::Unsupported,
            format!(
                "this agent (version {}) does not know this command; upgrade the agent",
                crate::AGENT_VERSION
            ),
        )),
    };
    CommandResult {
        id,
        outcome: Some(result.unwrap_or_else(Failure::into_outcome)),
    }
}

/// Maps a fail2ban failure to the code the hub shows: not reachable, or reachable but unhappy.
pub fn fail2ban_error(e: &Fail2banError) -> Outcome {
    Failure::from_fail2ban(e).into_outcome()
}

/// An error outcome.
pub fn error(code: ErrorCode, message: impl Into<String>) -> Outcome {
    Outcome::Error(CommandError {
        code: code.into(),
        message: message.into(),
        ..CommandError::default()
    })
}

/// A result carrying an error.
pub fn error_result(id: &str, code: ErrorCode, message: impl Into<String>) -> CommandResult {
    CommandResult {
        id: id.to_owned(),
        outcome: Some(error(code, message)),
    }
}

#[cfg(test)]
pub(crate) mod fake_fail2ban {
    //! A stand-in fail2ban server on a Unix socket that answers `ping` and `version` with the
    //! recorded replies of fail2ban 1.0.2.

    use std::path::PathBuf;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    use crate::fail2ban::socket::{CLOSE_COMMAND, END_COMMAND};

    const PONG: &[u8] = include_bytes!("../../fail2ban/fixtures/ping.pickle");
    const VERSION: &[u8] = include_bytes!("../../fail2ban/fixtures/version.pickle");

    /// Serves until the returned directory is dropped and the runtime ends; `delay` holds every
    /// answer back, like a busy fail2ban.
    pub fn spawn(delay: Duration) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("fail2ban.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let n = match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = find(&buf, END_COMMAND) {
                            let request: Vec<u8> = buf.drain(..end + END_COMMAND.len()).collect();
                            if request.starts_with(CLOSE_COMMAND) {
                                return;
                            }
                            tokio::time::sleep(delay).await;
                            let body = if find(&request, b"version").is_some() {
                                VERSION
                            } else {
                                PONG
                            };
                            let reply = [body, END_COMMAND].concat();
                            if stream.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (dir, path)
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }
}

#[cfg(test)]
mod tests;
