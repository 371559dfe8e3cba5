//! `banhub-agent`: parses the command line, loads the configuration, starts logging and calls the library.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use banhub_agent::config::{LogFormat, Settings};
use banhub_agent::enroll::{self, EnrollOptions};
use banhub_agent::link::{self, LinkExit};
use banhub_agent::{action, reconcile, relay, spool};
use clap::{Args, Parser, Subcommand};
use figment::Figment;
use figment::providers::Serialized;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Success.
const EXIT_OK: u8 = 0;
/// A failure at run time: the hub refused the enrollment, the state directory is unusable, …
const EXIT_FAILURE: u8 = 1;
/// Bad usage or configuration (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// The hub removed this server: the session was drained without reconnect, or the hub refused the
/// agent's certificate as revoked.
const EXIT_REMOVED: u8 = 3;

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success, or stopped by SIGINT/SIGTERM
  1  failure (e.g. the hub refused the enrollment token, the state directory is unusable,
     the agent is not enrolled)
  2  bad command line or configuration
  3  the hub removed this server (its session was drained without reconnect, or its certificate
     was refused as revoked); re-enroll with `banhub-agent enroll --force <TOKEN>` to bring the
     host back

Every setting is also a config file key and a BANHUB_AGENT_… variable, with `__` between levels,
e.g. BANHUB_AGENT_FAIL2BAN__SOCKET or BANHUB_AGENT_LINK__BACKOFF_MAX_MS. Precedence: defaults,
then the config file, then variables, then flags. RUST_LOG overrides log.filter.";

#[derive(Debug, Parser)]
#[command(
    name = "banhub-agent",
    version,
    about = "banhub agent: runs beside fail2ban, dials out to the banhub hub over mutual TLS and \
             drives fail2ban for it",
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    /// TOML configuration file. Its keys mirror the BANHUB_AGENT_… variables (e.g. `state_dir`,
    /// `[fail2ban] socket`, `[link] backoff_max_ms`, `[log] format`).
    #[arg(long, global = true, env = "BANHUB_AGENT_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Log format on stderr [config: log.format].
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    log_format: Option<LogFormat>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Enroll this host with a hub, once, using the one-time token the hub printed when the server
    /// was added. Creates a key, has the hub sign it, and stores the key, certificate, hub CA and
    /// identity.json in the state directory.
    #[command(after_help = EXIT_CODES_HELP)]
    Enroll(EnrollArgs),
    /// Keep the session to the hub open and run its commands until stopped (SIGINT/SIGTERM) or until
    /// the hub removes this server.
    #[command(after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Install banhub's fail2ban action into the fail2ban configuration directory, attach it to
    /// every jail (also jails with their own `action =`), add the probe jail `banhub-probe`, and
    /// make fail2ban run it. Validated by fail2ban first; running it again changes nothing. Works
    /// while fail2ban is stopped (the files are written and read when it starts).
    #[command(name = "install-action", after_help = EXIT_CODES_HELP)]
    InstallAction(ActionArgs),
    /// Remove what install-action added and put back what it replaced, byte for byte.
    #[command(name = "uninstall-action", after_help = EXIT_CODES_HELP)]
    UninstallAction(ActionArgs),
}

#[derive(Debug, Args)]
struct ActionArgs {
    /// fail2ban's configuration directory [config: fail2ban.config_dir; default: /etc/fail2ban].
    #[arg(long, visible_alias = "fail2ban-config-dir", value_name = "DIR")]
    config_dir: Option<PathBuf>,

    /// The agent's state directory, where the relay secret lives [config: state_dir; default:
    /// /var/lib/banhub-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// fail2ban's control socket [config: fail2ban.socket].
    #[arg(long, value_name = "PATH")]
    fail2ban_socket: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct EnrollArgs {
    /// The enrollment token (`bh1.…`). `-` reads it from standard input, which keeps it out of the
    /// process list.
    #[arg(value_name = "TOKEN")]
    token: String,

    /// Directory for the agent's key, certificate, hub CA and identity [config: state_dir; default:
    /// /var/lib/banhub-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Replace an existing identity in the state directory (the old certificate stops being used).
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Directory holding the identity written by `enroll` [config: state_dir; default:
    /// /var/lib/banhub-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// fail2ban's control socket [config: fail2ban.socket; default: /var/run/fail2ban/fail2ban.sock].
    #[arg(long, value_name = "PATH")]
    fail2ban_socket: Option<PathBuf>,

    /// fail2ban's configuration directory [config: fail2ban.config_dir; default: /etc/fail2ban].
    #[arg(long, value_name = "DIR")]
    fail2ban_config_dir: Option<PathBuf>,
}

impl Cli {
    /// The command-line flags as the highest-precedence settings layer.
    fn overrides(&self) -> Figment {
        let mut figment = Figment::new();
        let mut set = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                figment = std::mem::take(&mut figment).merge(Serialized::default(key, value));
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        set(
            "log.format",
            self.log_format.map(|f| match f {
                LogFormat::Text => "text".to_owned(),
                LogFormat::Json => "json".to_owned(),
            }),
        );
        match &self.command {
            Command::Enroll(args) => set("state_dir", path(&args.state_dir)),
            Command::Run(args) => {
                set("state_dir", path(&args.state_dir));
                set("fail2ban.socket", path(&args.fail2ban_socket));
                set("fail2ban.config_dir", path(&args.fail2ban_config_dir));
            }
            Command::InstallAction(args) | Command::UninstallAction(args) => {
                set("state_dir", path(&args.state_dir));
                set("fail2ban.socket", path(&args.fail2ban_socket));
                set("fail2ban.config_dir", path(&args.config_dir));
            }
        }
        figment
    }
}

/// mimalloc instead of the C library's allocator, as in the hub: every callback allocates and frees
/// small values across the relay's threads (request, parsed body, spool record, delivered
/// message), where glibc's arenas are slow.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref(), cli.overrides()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_tracing(&settings);
    banhub_agent::tls::install_crypto_provider();
    match run(cli.command, &settings) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn run(command: Command, settings: &Settings) -> anyhow::Result<u8> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match command {
            Command::Enroll(args) => enroll_command(args, settings).await,
            Command::Run(_) => run_command(settings).await,
            Command::InstallAction(_) => install_action_command(settings).await,
            Command::UninstallAction(_) => uninstall_action_command(settings).await,
        }
    })
}

async fn enroll_command(args: EnrollArgs, settings: &Settings) -> anyhow::Result<u8> {
    let token = if args.token == "-" {
        let mut token = String::new();
        std::io::stdin()
            .read_to_string(&mut token)
            .context("cannot read the token from standard input")?;
        token
    } else {
        args.token
    };
    let options = EnrollOptions {
        state_dir: settings.state_dir.clone(),
        force: args.force,
        connect_timeout: Duration::from_millis(settings.link.connect_timeout_ms),
        hostname: None,
    };
    match enroll::enroll(&token, &options).await {
        Ok(enrolled) => {
            println!(
                "Enrolled as agent {} for server \"{}\" ({}); identity stored in {}.\n\
                 Start the agent with: banhub-agent run --state-dir {}",
                enrolled.identity.agent_id,
                enrolled.identity.server_name,
                enrolled.identity.server_id,
                enrolled.state_dir.display(),
                enrolled.state_dir.display(),
            );
            Ok(EXIT_OK)
        }
        Err(e) => {
            // The library's message already says what to do; anyhow's chain would repeat it.
            eprintln!("error: {e}");
            Ok(EXIT_FAILURE)
        }
    }
}

/// Prints what install-action did; 0 when every running jail runs the action.
async fn install_action_command(settings: &Settings) -> anyhow::Result<u8> {
    let report = match action::install(settings).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_FAILURE);
        }
    };
    let dir = report.config_dir.display();
    if report.edit.changes.is_empty() && report.edit.restarted.is_empty() {
        println!("banhub's action is already installed in {dir}; nothing changed.");
    } else {
        println!("banhub's action installed in {dir}:");
        for change in &report.edit.changes {
            println!("  wrote {}", change.file);
        }
    }
    if !report.attached.is_empty() {
        println!(
            "  attached to {} jail(s): {}",
            report.attached.len(),
            report.attached.join(", ")
        );
    }
    if !report.already_attached.is_empty() {
        println!(
            "  already in the configuration of: {}",
            report.already_attached.join(", ")
        );
    }
    if !report.edit.restarted.is_empty() {
        println!("  restarted: {}", report.edit.restarted.join(", "));
    }
    for warning in &report.warnings {
        println!("warning: {warning}");
    }
    if !report.edit.fail2ban_running {
        println!(
            "fail2ban is not running (its socket {} does not answer): the files are in place and take effect when fail2ban starts.",
            settings.fail2ban.socket.display()
        );
        return Ok(EXIT_OK);
    }
    let unattached = report.unattached();
    if unattached.is_empty() {
        println!(
            "Every running jail ({}) runs the banhub action.",
            report.running.len()
        );
        Ok(EXIT_OK)
    } else {
        eprintln!(
            "error: these running jails still do not run the banhub action: {}",
            unattached.join(", ")
        );
        Ok(EXIT_FAILURE)
    }
}

async fn uninstall_action_command(settings: &Settings) -> anyhow::Result<u8> {
    match action::uninstall(settings).await {
        Ok(report) if !report.was_installed => {
            println!(
                "banhub's action was not installed by this agent (no {} in {}); nothing changed.",
                action::MANIFEST_FILE,
                settings.state_dir.display()
            );
            Ok(EXIT_OK)
        }
        Ok(report) => {
            println!(
                "banhub's action removed from {}; the directory is as it was before install-action.",
                report.config_dir.display()
            );
            if report.edit.is_some_and(|e| !e.fail2ban_running) {
                println!("fail2ban is not running: it reads the restored files when it starts.");
            }
            Ok(EXIT_OK)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(EXIT_FAILURE)
        }
    }
}

async fn run_command(settings: &Settings) -> anyhow::Result<u8> {
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;
    let (spool, relay) = if settings.relay.enabled {
        let spool = open_spool(settings).await?;
        let belief = reconcile::Belief::load(&settings.state_dir)?;
        let relay = start_relay(settings, spool.clone(), belief.clone(), shutdown.clone()).await?;
        start_reconcile(settings, spool.clone(), belief, shutdown.clone());
        (Some(spool), Some(relay))
    } else {
        tracing::warn!(
            "the callback relay is disabled (relay.enabled = false): this host reports no ban events"
        );
        (None, None)
    };
    let exit = link::run_with_relay(settings, spool.clone(), relay, shutdown.clone()).await;
    // Stop the relay before the spool closes, so no callback is accepted that cannot be stored.
    shutdown.cancel();
    if let Some(spool) = spool {
        spool.close().await;
    }
    match exit {
        Ok(LinkExit::Shutdown) => Ok(EXIT_OK),
        Ok(LinkExit::Removed { .. }) => Ok(EXIT_REMOVED),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(EXIT_FAILURE)
        }
    }
}

/// Opens (or creates) the durable event spool in the state directory.
async fn open_spool(settings: &Settings) -> anyhow::Result<spool::Spool> {
    let dir = spool::default_dir(&settings.state_dir);
    let config = spool::SpoolConfig {
        max_bytes: settings.spool.max_bytes,
        segment_bytes: (settings.spool.max_bytes / 32)
            .clamp(spool::SpoolConfig::MIN_SEGMENT_BYTES, 8 << 20),
        ..spool::SpoolConfig::default()
    };
    spool::Spool::open(&dir, config)
        .await
        .with_context(|| format!("cannot open the event spool in {}", dir.display()))
}

/// Starts the loopback relay fail2ban's action posts to; it stops with `shutdown`.
async fn start_relay(
    settings: &Settings,
    spool: spool::Spool,
    belief: reconcile::Belief,
    shutdown: CancellationToken,
) -> anyhow::Result<link::commands::RelayHandle> {
    let secret_path = settings.state_dir.join(relay::SECRET_FILE);
    let secret = relay::RelaySecret::load_or_create(&secret_path)
        .with_context(|| format!("cannot set up the relay secret {}", secret_path.display()))?;
    let listener = relay::LoopbackAddr::new(settings.relay.listen)?
        .bind()
        .await?;
    // Where the relay really listens (the configured port may be 0), for the action and for tests.
    let bound = listener.local_addr()?;
    let marker = settings.state_dir.join("relay.json");
    let tmp = marker.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::json!({ "listen": bound.to_string() }).to_string(),
    )
    .and_then(|()| std::fs::rename(&tmp, &marker))
    .with_context(|| format!("cannot write {}", marker.display()))?;
    let jails = relay::JailCatalog::from_socket(
        settings.fail2ban.socket.clone(),
        settings.fail2ban_timeout(),
    );
    tokio::spawn(
        jails
            .clone()
            .keep_fresh(shutdown.clone())
            .instrument(tracing::info_span!("jail_catalog")),
    );
    let mut relay = relay::Relay::new(spool, secret).with_jails(jails);
    // The belief is only ever read by reconciliation; with it off, recording every callback in it
    // is work for nothing (and its state file is not written anyway).
    if settings.reconcile.interval_secs != 0 {
        relay = relay.with_belief(belief);
    }
    let handle = link::commands::RelayHandle {
        listen: bound,
        stats: relay.stats(),
    };
    tokio::spawn(
        async move {
            if let Err(e) = relay.serve(listener, shutdown).await {
                tracing::error!(error = %e, "the callback relay stopped");
            }
        }
        .instrument(tracing::info_span!("relay", listen = %bound)),
    );
    Ok(handle)
}

/// Starts reconciliation (at start, periodically, after fail2ban restarts) unless
/// `reconcile.interval_secs` is 0; it stops with `shutdown`.
fn start_reconcile(
    settings: &Settings,
    spool: spool::Spool,
    belief: reconcile::Belief,
    shutdown: CancellationToken,
) {
    if settings.reconcile.interval_secs == 0 {
        tracing::info!("reconciliation is off (reconcile.interval_secs = 0)");
        return;
    }
    let mut config = reconcile::ReconcileConfig::new(
        settings.fail2ban.socket.clone(),
        Some(Duration::from_secs(settings.reconcile.interval_secs)),
    );
    config.timeout = settings.fail2ban_timeout();
    let reconciler = reconcile::Reconciler::new(config, spool, belief);
    tokio::spawn(
        reconciler
            .run(shutdown)
            .instrument(tracing::info_span!("reconcile")),
    );
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM.
fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = terminate.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "stopping");
        shutdown.cancel();
    });
    Ok(())
}

fn init_tracing(settings: &Settings) {
    use tracing_subscriber::EnvFilter;
    // RUST_LOG wins when it is set and valid; the configuration was validated at load.
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, not for journald or a test harness reading the log.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match settings.log.format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_become_the_top_settings_layer() {
        let cli = Cli::try_parse_from([
            "banhub-agent",
            "--log-format",
            "json",
            "run",
            "--state-dir",
            "/srv/agent",
            "--fail2ban-socket",
            "/run/f2b.sock",
            "--fail2ban-config-dir",
            "/srv/f2b",
        ])
        .expect("valid command line");
        let settings: Settings = Figment::from(Serialized::defaults(Settings::default()))
            .merge(cli.overrides())
            .extract()
            .expect("settings");
        assert_eq!(settings.state_dir, PathBuf::from("/srv/agent"));
        assert_eq!(settings.fail2ban.socket, PathBuf::from("/run/f2b.sock"));
        assert_eq!(settings.fail2ban.config_dir, PathBuf::from("/srv/f2b"));
        assert_eq!(settings.log.format, LogFormat::Json);

        let enroll = Cli::try_parse_from(["banhub-agent", "enroll", "bh1.x", "--force"])
            .expect("valid command line");
        assert!(matches!(
            enroll.command,
            Command::Enroll(EnrollArgs { force: true, .. })
        ));
        assert!(Cli::try_parse_from(["banhub-agent", "enroll"]).is_err());
    }
}
