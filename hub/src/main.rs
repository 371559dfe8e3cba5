//! The `banhub` binary: parses the command line, loads the configuration, starts logging and runs the
//! hub.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use banhub::app::App;
use banhub::config::{Config, LogFormat};
use clap::{Parser, Subcommand};
use figment::Figment;
use figment::providers::Serialized;
use tokio_util::sync::CancellationToken;

/// banhub hub: the REST API, web UI and agent gateway for a fleet of fail2ban hosts.
///
/// Configuration comes from defaults, then the TOML file (--config), then BANHUB_… environment
/// variables (`__` between levels, e.g. BANHUB_HTTP__LISTEN=127.0.0.1:9000), then these flags.
/// `banhub config` prints the result.
#[derive(Debug, Parser)]
#[command(name = "banhub", version, about, long_about)]
struct Cli {
    /// TOML configuration file.
    #[arg(long, short = 'c', env = "BANHUB_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Directory for the SQLite database, the internal CA and other state [default: banhub-data].
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Address of the REST API and web UI [default: 127.0.0.1:8080]. Loopback only until operator
    /// login is configured.
    #[arg(long, global = true)]
    http_listen: Option<SocketAddr>,
    /// Address of the agent gateway (gRPC, mutual TLS) [default: 0.0.0.0:50051].
    #[arg(long, global = true)]
    grpc_listen: Option<SocketAddr>,
    /// host:port that agents dial, written into enrollment tokens [default: the gRPC listen address,
    /// or this machine's host name when listening on every interface].
    #[arg(long, global = true)]
    grpc_advertise: Option<String>,
    /// postgres://user:pass@host/db for PostgreSQL, sqlite://path for a given SQLite file [default:
    /// SQLite in the data directory].
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Log format [default: text].
    #[arg(long, global = true)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the hub (the default).
    Serve,
    /// Print the effective configuration as TOML and exit.
    Config,
    /// Print the OpenAPI document of the REST API and exit.
    Openapi,
    /// Copy the live hub (database, CA, secrets key, manifest) into a new or empty directory.
    Backup {
        /// Where the backup goes.
        dir: PathBuf,
    },
    /// Restore a backup into the data directory (and database) of a stopped hub.
    Restore {
        /// The backup's directory.
        dir: PathBuf,
        /// Replace an existing database, CA and secrets key.
        #[arg(long)]
        force: bool,
    },
}

impl Cli {
    fn overrides(&self) -> Figment {
        let mut figment = Figment::new();
        let mut set = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                figment = std::mem::take(&mut figment).merge(Serialized::default(key, value));
            }
        };
        set(
            "data_dir",
            self.data_dir.as_ref().map(|p| p.display().to_string()),
        );
        set("http.listen", self.http_listen.map(|a| a.to_string()));
        set("grpc.listen", self.grpc_listen.map(|a| a.to_string()));
        set("grpc.advertise", self.grpc_advertise.clone());
        set("database.url", self.database_url.clone());
        set(
            "log.format",
            self.log_format.map(|f| match f {
                LogFormat::Text => "text".to_owned(),
                LogFormat::Json => "json".to_owned(),
            }),
        );
        figment
    }
}

fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log.filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match config.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted, shutting down"),
        _ = term.recv() => tracing::info!("terminated, shutting down"),
    }
}

/// mimalloc instead of the C library's allocator: ingest allocates and frees many small values per
/// event (decoded protobuf strings, row values, TLS records) across threads, where glibc's arenas
/// are slow (figures in bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref(), cli.overrides()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("banhub: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Serve) {
        Command::Config => match toml::to_string_pretty(&config) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("banhub: cannot print the configuration: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Openapi => match banhub::api::openapi().to_pretty_json() {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("banhub: cannot render the OpenAPI document: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Backup { dir } => match banhub::backup::backup(&config, &dir).await {
            Ok(taken) => {
                println!(
                    "backup of {} ({} schema {}) written to {} in {:.1} s",
                    config.data_dir.display(),
                    format!("{:?}", taken.manifest.database).to_lowercase(),
                    taken.manifest.schema_version,
                    dir.display(),
                    taken.elapsed.as_secs_f64()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("banhub: backup refused: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Restore { dir, force } => {
            match banhub::backup::restore(&config, &dir, force).await {
                Ok(restored) => {
                    println!(
                        "restored the backup of {} (banhub {}, schema {}) from {} in {:.1} s",
                        restored.manifest.created_at.to_rfc3339(),
                        restored.manifest.banhub_version,
                        restored.manifest.schema_version,
                        dir.display(),
                        restored.elapsed.as_secs_f64()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("banhub: restore refused: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve => {
            init_tracing(&config);
            let app = match App::build(config).await {
                Ok(app) => app,
                Err(e) => {
                    tracing::error!("cannot start: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let stop = CancellationToken::new();
            let signals = {
                let stop = stop.clone();
                async move {
                    wait_for_signal().await;
                    stop.cancel();
                }
            };
            tokio::spawn(tracing::Instrument::instrument(
                signals,
                tracing::info_span!("task", task = "signals"),
            ));
            match app.run(stop).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("stopped with an error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
