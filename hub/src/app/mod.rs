//! The composition root: `App::build` opens the store and the CA, puts the services together into
//! one `AppState` and binds both sockets; `App::run` starts the background tasks (`tasks`, the one
//! place that starts them), joins the API and the UI into one router, and serves HTTP and gRPC
//! until the shutdown token is cancelled.

mod tasks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::alerts::Alerts;
use crate::alerts::geoip::GeoIp;
pub use crate::api::AppState;
use crate::auth::{Auth, AuthError, Site};
use crate::cluster::{Cluster, JoinError};
use crate::config::Config;
use crate::config_changes::ConfigChanges;
use crate::defence::Defence;
use crate::domain::{Guards, PrefixLimits};
use crate::events::Events;
use crate::feeds::Feeds;
use crate::fleet::{Fleet, FleetParts};
use crate::fleet_jails::FleetJails;
use crate::lookups::Lookups;
use crate::metrics::Metrics;
use crate::pki::{Ca, PkiError, RevocationList, server_tls_config};
use crate::profiles::Profiles;
use crate::protected::{Protection, ProtectionParts};
use crate::rollouts::Rollouts;
use crate::settings::{SecretsKey, SettingsError, SettingsService};
use crate::sharing::Sharing;
use crate::store::{Store, StoreError};
use crate::timed_bans::TimedBans;

/// Why the hub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create or use the data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the database: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Cluster(#[from] JoinError),
    #[error("http.tls: {0}")]
    HttpTls(#[from] crate::serve::TlsError),
    #[error("settings: {0}")]
    Settings(#[from] SettingsError),
    #[error("cannot listen on {addr} ({what}): {source}; is another process using it?")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("auth: {0}")]
    Auth(#[from] AuthError),
}

/// A hub with its listeners bound, ready to [`run`](App::run).
#[derive(Debug)]
pub struct App {
    state: AppState,
    http: TcpListener,
    grpc: TcpListener,
    grpc_tls: rustls::ServerConfig,
    /// HTTPS on the HTTP listener, when `http.tls` names a certificate.
    http_tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
}

/// Where the hub is listening, as written to `<data_dir>/listening.json`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Listening {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub pid: u32,
}

impl App {
    /// Opens the store and the CA and binds both listeners. Nothing is served until [`App::run`].
    pub async fn build(config: Config) -> Result<Self, StartError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Read before anything is created, so a wrong path fails fast and changes nothing.
        let http_tls = match config.http.tls.paths() {
            Some((cert, key)) => Some(Arc::new(crate::serve::server_config(cert, key)?)),
            None => None,
        };
        create_private_dir(&config.data_dir)?;
        let store = Store::connect(&config.database_url(), config.database.max_connections)
            .await?
            .with_ingest_writers(config.database.ingest_writers);
        let ca = Ca::load_or_create(&config.ca_dir())?;
        let revocations = RevocationList::default();
        revocations.replace_all(store.revoked_serials().await?);

        let http = bind("HTTP", config.http.listen).await?;
        let grpc = bind("gRPC", config.grpc.listen).await?;
        let grpc_addr = grpc.local_addr().map_err(|source| StartError::Bind {
            what: "gRPC",
            addr: config.grpc.listen,
            source,
        })?;
        let advertise = config.grpc_advertise(grpc_addr);
        let (hub_cert, hub_key) = ca.issue_hub_cert(&[])?;
        let grpc_tls = server_tls_config(ca.cert_der(), &hub_cert, &hub_key, revocations.clone())?;

        let shutdown = CancellationToken::new();
        let metrics = Metrics::default();
        let events = Events::new(store.clone(), &config.events, shutdown.clone());
        let cluster = Cluster::new(store.clone(), &config.cluster, shutdown.clone());
        cluster.join(ca.fingerprint()).await?;
        let key_file = config.secrets_key_file();
        let key = SecretsKey::load_or_create(&key_file).map_err(SettingsError::from)?;
        let settings = SettingsService::load(store.clone(), key, |path, kind| {
            GeoIp::open_kind(path, kind).map(drop)
        })
        .await?;
        // Every API route needs a session or a token (there is always a way to log in: the OpenID
        // provider or the local administrator), so any listen address is safe.
        let auth = Auth::new(
            &config.auth,
            &config.data_dir,
            Site {
                https: http_tls.is_some(),
                base_path: config.http.base_path.as_str().to_owned(),
            },
            store.clone(),
        )
        .await?;
        let alerts = Alerts::new(
            store.clone(),
            settings.clone(),
            events.clone(),
            shutdown.clone(),
        );
        let defence = Defence::new(
            store.clone(),
            alerts.clone(),
            metrics.clone(),
            config.defence.storm_limits(),
        );
        let guards = Guards::new(
            PrefixLimits {
                v4: config.guards.ban_min_prefix_v4,
                v6: config.guards.ban_min_prefix_v6,
            },
            crate::hub_addresses::discover(&config, &advertise),
        );
        tracing::info!(hub_addresses = ?guards.hub_addresses(), "bans of these addresses are refused");
        let guards = Arc::new(guards);
        let fleet = Fleet::new(FleetParts {
            store: store.clone(),
            ca,
            revocations,
            metrics: metrics.clone(),
            agents: config.agents.clone(),
            token_ttl: Duration::from_secs(config.enrollment.token_ttl_secs),
            advertise,
            shutdown: shutdown.clone(),
            events: events.clone(),
            settings: settings.clone(),
            probe: config.probe.clone(),
            cluster: cluster.clone(),
            guards: guards.clone(),
        });
        let protection = Protection::new(ProtectionParts {
            store: store.clone(),
            auth: auth.clone(),
            fleet: fleet.clone(),
            guards: guards.clone(),
            token_window: chrono::TimeDelta::seconds(
                i64::try_from(config.guards.operator_token_window_secs).unwrap_or(i64::MAX / 1000),
            ),
            refresh: Duration::from_secs(config.guards.protected_refresh_secs),
            cluster: cluster.clone(),
            shutdown: shutdown.clone(),
        });
        // Bans are checked against the stored protected networks from the first request on.
        protection.refresh().await;
        let feeds = Feeds::new(
            store.clone(),
            guards.clone(),
            events.clone(),
            shutdown.clone(),
        );
        let sharing = Sharing::new(
            store.clone(),
            fleet.clone(),
            events.clone(),
            Arc::clone(&guards),
            shutdown.clone(),
        );
        sharing.set_defence(defence.clone());
        let profiles = Profiles::new(
            store.clone(),
            fleet.clone(),
            alerts.clone(),
            Duration::from_secs(config.profiles.drift_interval_secs),
        );
        let config_changes = ConfigChanges::new(store.clone(), fleet.clone(), shutdown.clone());
        let lookups = Lookups::new(settings.clone());
        let rollouts = Rollouts::new(
            store.clone(),
            fleet.clone(),
            profiles.clone(),
            config_changes.clone(),
            shutdown.clone(),
        );
        let timed_bans = TimedBans::new(store.clone(), fleet.clone(), auth.clone());
        let fleet_jails = FleetJails::new(fleet.clone());
        tracing::info!(
            database = store.backend_name(),
            data_dir = %config.data_dir.display(),
            agents_dial = fleet.advertise(),
            replica = cluster.replica(),
            "hub ready to serve"
        );
        Ok(Self {
            state: AppState {
                config: Arc::new(config),
                store,
                fleet,
                events,
                cluster,
                metrics,
                settings,
                alerts,
                auth,
                guards,
                protection,
                feeds,
                sharing,
                defence,
                profiles,
                config_changes,
                lookups,
                rollouts,
                timed_bans,
                fleet_jails,
            },
            http,
            grpc,
            grpc_tls,
            http_tls,
            shutdown,
        })
    }

    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.local_addr().ok()
    }

    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.local_addr().ok()
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `stop` is cancelled, then drains agent sessions and finishes open requests.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let Self {
            state,
            http,
            grpc,
            grpc_tls,
            http_tls,
            shutdown,
        } = self;
        let listening = Listening {
            http: http.local_addr()?,
            grpc: grpc.local_addr()?,
            pid: std::process::id(),
        };
        let marker = state.config.data_dir.join("listening.json");
        write_atomically(&marker, &serde_json::to_vec(&listening)?)?;
        tracing::info!(http = %listening.http, grpc = %listening.grpc, "listening");

        // One token stops everything: the caller's, or a listener failing.
        {
            let shutdown = shutdown.clone();
            tasks::spawn("stop", async move {
                stop.cancelled().await;
                shutdown.cancel();
            });
        }
        let alert_worker = tasks::spawn_all(&state, &shutdown);
        let cluster = state.cluster.clone();
        let fleet = state.fleet.clone();
        let grpc_task = {
            let shutdown = shutdown.clone();
            tasks::spawn("grpc", async move {
                let result = fleet.serve_grpc(grpc, grpc_tls, shutdown.clone()).await;
                shutdown.cancel();
                result
            })
        };
        let base_path = state.config.http.base_path.clone();
        let ui = crate::ui::fallback(&base_path.home());
        let router = crate::serve::mount(crate::api::router(state, ui), &base_path);
        let http_result = crate::serve::serve_http(http, router, http_tls, shutdown.clone()).await;
        shutdown.cancel();
        let grpc_result = grpc_task.await;
        cluster.leave().await;
        let _ = alert_worker.await;
        let _ = std::fs::remove_file(&marker);
        http_result?;
        grpc_result??;
        tracing::info!("hub stopped");
        Ok(())
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { what, addr, source })
}

fn create_private_dir(path: &Path) -> Result<(), StartError> {
    use std::os::unix::fs::DirBuilderExt;
    let err = |source| StartError::DataDir {
        path: path.to_owned(),
        source,
    };
    if !path.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(err)?;
    }
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
