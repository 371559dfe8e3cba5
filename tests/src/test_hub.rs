//! A hub run inside the test process ([`TestHub`]): `banhub::app::App` on port 0 with a fresh
//! database (SQLite in a temporary directory, or a database of a throwaway PostgreSQL), signed in as
//! the bootstrap admin. Tests reach its state (`AppState`) directly, e.g. to ingest batches without
//! an agent; [`crate::HubProcess`] is the choice when the real binary matters.

use std::net::SocketAddr;

use banhub::app::{App, AppState};
use banhub::config::Config;
use reqwest::StatusCode;
use serde_json::Value;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backends::Backend;
use crate::client::{ApiClient, read_checked};
use crate::hub::{BootstrapToken, bearer_client};
use crate::postgres::PostgresServer;

/// Changes a test makes to the hub's configuration before it starts.
type Adjust = Box<dyn FnOnce(&mut Config)>;

/// How to start a [`TestHub`]; [`TestHub::builder`].
#[must_use]
pub struct TestHubBuilder {
    dir: Option<TempDir>,
    backend: Backend,
    database_url: Option<String>,
    adjust: Vec<Adjust>,
}

impl TestHubBuilder {
    /// The store's backend; on PostgreSQL the hub gets a database of a server of its own.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The store at `url` (a database the test manages) instead of one the builder makes.
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// `dir` as the hub's directory (its data directory is `data` in it), e.g. to restart a hub
    /// on the data of one shut down with [`TestHub::shutdown`].
    pub fn dir(mut self, dir: TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    /// Changes the configuration before the hub starts.
    pub fn configure(mut self, adjust: impl FnOnce(&mut Config) + 'static) -> Self {
        self.adjust.push(Box::new(adjust));
        self
    }

    /// Builds the hub and starts serving; panics (with the reason) when it cannot.
    pub async fn start(self) -> TestHub {
        let dir = match self.dir {
            Some(dir) => dir,
            None => tempfile::tempdir().expect("tempdir"),
        };
        let mut config = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        config.http.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.grpc.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut postgres = None;
        if let Some(url) = &self.database_url {
            config.database.url = url.clone();
        } else if self.backend == Backend::Postgres {
            let server = PostgresServer::start()
                .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
            config.database.url = server
                .create_database("banhub_hub")
                .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
            postgres = Some(server);
        }
        for adjust in self.adjust {
            adjust(&mut config);
        }
        // Act as an admin: the hub accepts this token through auth.bootstrap_token_sha256.
        let admin = BootstrapToken::generate();
        config.auth.bootstrap_token_sha256 = admin.sha256.clone();
        let app = App::build(config).await.expect("hub builds");
        let base = format!("http://{}", app.http_addr().expect("bound"));
        let state = app.state().clone();
        if self.database_url.is_none() {
            let name = match self.backend {
                Backend::Sqlite => "sqlite",
                Backend::Postgres => "postgres",
            };
            assert_eq!(state.store.backend_name(), name, "the store's backend");
        }
        let stop = CancellationToken::new();
        let task = tokio::spawn(app.run(stop.clone()));
        TestHub {
            api: ApiClient::new(base, bearer_client(&admin.token).expect("client")),
            state,
            stop,
            task,
            dir,
            _postgres: postgres,
        }
    }
}

/// A hub serving inside the test process; [`TestHub::shutdown`] stops it cleanly.
pub struct TestHub {
    /// The API as the bootstrap admin.
    pub api: ApiClient,
    /// The hub's services and store.
    pub state: AppState,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
    dir: TempDir,
    _postgres: Option<PostgresServer>,
}

impl TestHub {
    /// A hub on SQLite with the default configuration.
    pub async fn start() -> Self {
        Self::builder().start().await
    }

    /// How to start a hub with another backend, directory or configuration.
    pub fn builder() -> TestHubBuilder {
        TestHubBuilder {
            dir: None,
            backend: Backend::Sqlite,
            database_url: None,
            adjust: Vec::new(),
        }
    }

    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        self.api.url(path)
    }

    /// The admin's HTTP client.
    pub fn client(&self) -> &reqwest::Client {
        self.api.http()
    }

    /// `GET path` as the admin; an error answer must be a problem document
    /// ([`read_checked`]).
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        read_checked(self.client().get(self.url(path)).send().await.expect("GET")).await
    }

    /// `POST path` with a JSON body as the admin, checked like [`TestHub::get`].
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let request = self.client().post(self.url(path)).json(&body);
        read_checked(request.send().await.expect("POST")).await
    }

    /// Stops the hub and hands back its directory, for a restart on the same data.
    pub async fn shutdown(self) -> TempDir {
        self.stop.cancel();
        self.task.await.expect("joined").expect("clean stop");
        self.dir
    }
}
