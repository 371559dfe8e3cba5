//! The real `banhub` binary as a child process on 127.0.0.1, listening on ports the kernel picks.
//!
//! [`HubProcess`] runs `banhub serve --data-dir <tmp>/data --http-listen 127.0.0.1:0 --grpc-listen
//! 127.0.0.1:0` and waits for `<data_dir>/listening.json` (ARCHITECTURE.md, "Hub command line") to learn
//! the bound addresses. A restart reuses the data directory and passes the previously bound ports
//! explicitly, so agents and clients find the hub where it was.
//!
//! Every hub the harness starts accepts an admin API token it generates ([`BootstrapToken`], passed as
//! `BANHUB_AUTH__BOOTSTRAP_TOKEN_SHA256`), and [`HubProcess::client`] sends it: tests act as an admin
//! unless they ask for another client.

use std::ffi::OsString;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Deserialize;
use tempfile::TempDir;

use crate::process::{LogFiles, ManagedChild, binary};
use crate::wait::POLL_INTERVAL;

const BINARY: &str = "banhub";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
const LISTENING_FILE: &str = "listening.json";
/// The variable that makes the hub accept a bootstrap admin token (`auth.bootstrap_token_sha256`).
pub const BOOTSTRAP_TOKEN_VAR: &str = "BANHUB_AUTH__BOOTSTRAP_TOKEN_SHA256";

/// A random admin API token and its SHA-256, for `auth.bootstrap_token_sha256`.
#[derive(Debug, Clone)]
pub struct BootstrapToken {
    /// What a client sends as `Authorization: Bearer …`.
    pub token: String,
    /// Lower-case hex SHA-256 of the token: the configuration value.
    pub sha256: String,
}

impl BootstrapToken {
    pub fn generate() -> Self {
        use sha2::Digest as _;
        let token = format!(
            "bootstrap-{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let sha256 = hex::encode(sha2::Sha256::digest(token.as_bytes()));
        Self { token, sha256 }
    }
}

/// An HTTP client (30 s request timeout) that sends `token` as a bearer token on every request.
pub fn bearer_client(token: &str) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .context("the token is not a valid header value")?;
    value.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .context("building the HTTP client")
}

/// What the hub writes to `<data_dir>/listening.json` once both listeners are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Listening {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub pid: u32,
}

/// Options for a hub; [`HubBuilder::start`] launches it.
#[derive(Debug, Clone)]
pub struct HubBuilder {
    database_url: Option<String>,
    env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
    binary: Option<PathBuf>,
    start_timeout: Duration,
    grpc_ip: IpAddr,
}

impl HubBuilder {
    /// `--database-url`: PostgreSQL or a given SQLite file. Without it the hub uses SQLite in its data
    /// directory.
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database_url = Some(url.into());
        self
    }

    /// Uses the internal CA in `dir` (`cluster.ca_dir`) rather than one in the hub's own data
    /// directory: hub replicas on one database share it. The first hub to start creates it.
    pub fn ca_dir(self, dir: impl Into<PathBuf>) -> Self {
        self.env("BANHUB_CLUSTER__CA_DIR", dir.into())
    }

    /// Sets an environment variable, e.g. `BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS=500`. Inherited
    /// `BANHUB_…` variables are removed, so only these reach the hub.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Logs operators in through `provider` (`auth.mode = "oidc"`, its client, and the role map
    /// of [`OidcProvider::hub_env`](crate::oidc::OidcProvider::hub_env)). The bootstrap admin token
    /// still works, so [`HubProcess::client`] stays an admin.
    pub fn oidc(mut self, provider: &crate::oidc::OidcProvider) -> Self {
        for (key, value) in provider.hub_env() {
            self = self.env(key, value);
        }
        self
    }

    /// Appends an argument after the harness's own `serve …` arguments.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Runs this program instead of the workspace's `banhub` (an older build, or a stand-in with the
    /// same command line and `listening.json` contract).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// The address the agent gateway listens on (`127.0.0.1` by default), e.g. the hub's end of a
    /// veth pair for agents in a network namespace of their own ([`crate::netns`]).
    pub fn grpc_ip(mut self, ip: IpAddr) -> Self {
        self.grpc_ip = ip;
        self
    }

    /// How long to wait for `listening.json` (30 s by default).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Starts the hub in a new temporary directory and waits until it listens.
    pub fn start(self) -> anyhow::Result<HubProcess> {
        let binary = match &self.binary {
            Some(path) => path.clone(),
            None => binary(BINARY)?,
        };
        let dir = tempfile::Builder::new()
            .prefix("banhub-hub-")
            .tempdir()
            .context("creating the hub's directory")?;
        let data_dir = dir.path().join("data");
        fs::create_dir(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let logs = LogFiles::new(dir.path(), "hub");
        let admin = BootstrapToken::generate();
        let client = bearer_client(&admin.token)?;
        let mut hub = HubProcess {
            dir,
            data_dir,
            logs,
            binary,
            options: self,
            child: None,
            // Replaced by the first launch, which succeeds before the hub is handed out.
            listening: Listening {
                http: SocketAddr::from(([127, 0, 0, 1], 0)),
                grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
                pid: 0,
            },
            runs: 0,
            admin,
            client,
        };
        hub.launch(None)?;
        Ok(hub)
    }
}

/// A running hub owned by the test; killed when dropped. Layout of [`HubProcess::dir`]: `data/` (the
/// data directory), `hub.stdout.log`, `hub.stderr.log` (every run, separated by harness lines).
#[derive(Debug)]
pub struct HubProcess {
    dir: TempDir,
    data_dir: PathBuf,
    logs: LogFiles,
    binary: PathBuf,
    options: HubBuilder,
    child: Option<ManagedChild>,
    /// The addresses of the current run, or of the last one after it stopped.
    listening: Listening,
    runs: u32,
    admin: BootstrapToken,
    client: reqwest::Client,
}

impl HubProcess {
    /// Options: database URL, environment, another binary.
    pub fn builder() -> HubBuilder {
        HubBuilder {
            database_url: None,
            env: Vec::new(),
            args: Vec::new(),
            binary: None,
            start_timeout: START_TIMEOUT,
            grpc_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// A hub with default options (SQLite in its data directory).
    pub fn start() -> anyhow::Result<Self> {
        Self::builder().start()
    }

    /// The temporary directory holding the data directory and the logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The hub's `--data-dir`.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The bound addresses (of the last run, if it is not running).
    pub fn listening(&self) -> Listening {
        self.listening
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.listening().http)
    }

    /// `http://127.0.0.1:PORT` + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http_url())
    }

    /// The agent gateway's address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.listening().grpc
    }

    /// The API as the bootstrap admin.
    pub fn api(&self) -> crate::client::ApiClient {
        crate::client::ApiClient::new(self.http_url(), self.client())
    }

    /// An HTTP client for the hub (30 s request timeout) authenticated as an admin with the bootstrap
    /// token; clones share its connection pool.
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }

    /// The bootstrap admin token [`HubProcess::client`] sends.
    pub fn admin_token(&self) -> &str {
        &self.admin.token
    }

    /// A new API token with `role` (`viewer`, `operator`, `admin`), created by the bootstrap admin
    /// through `POST /api/tokens`.
    pub async fn token(&self, role: &str) -> anyhow::Result<String> {
        let response = self
            .client
            .post(self.url("/api/tokens"))
            .json(&serde_json::json!({ "name": format!("test-{role}"), "role": role }))
            .send()
            .await
            .context("POST /api/tokens")?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.context("token answer")?;
        anyhow::ensure!(status.is_success(), "POST /api/tokens: {status} {body}");
        body["token"]
            .as_str()
            .map(str::to_owned)
            .context("the answer has no token")
    }

    /// An HTTP client sending a new API token with `role`.
    pub async fn client_as(&self, role: &str) -> anyhow::Result<reqwest::Client> {
        bearer_client(&self.token(role).await?)
    }

    /// An HTTP client without credentials (30 s request timeout).
    pub fn anonymous_client(&self) -> anyhow::Result<reqwest::Client> {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(ManagedChild::pid)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(ManagedChild::is_running)
    }

    /// SIGKILL: a crash, no graceful shutdown.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        match self.child.as_mut() {
            Some(child) => child.kill(),
            None => Ok(()),
        }
    }

    /// SIGTERM and waits for the exit (graceful shutdown); SIGKILL and an error after 15 s.
    pub fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("the hub was never started");
        };
        child
            .stop(STOP_TIMEOUT)
            .map_err(|e| e.context(self.logs.tail(40)))
    }

    /// Waits for the hub to exit by itself (e.g. after a fatal error).
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("the hub was never started");
        };
        child.wait_exit(timeout)
    }

    /// Stops the hub if it runs (SIGTERM), then starts it again on the same data directory and the
    /// same ports.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            self.stop()?;
        }
        let previous = self.listening;
        self.launch(Some(previous))
    }

    /// The hub's stdout and stderr (the end of each), for failure messages.
    pub fn logs(&self) -> String {
        self.logs.tail(200)
    }

    /// Prints [`HubProcess::logs`] to stderr (shown by the test runner for a failed test).
    pub fn print_logs(&self) {
        eprintln!("{}", self.logs());
    }

    fn launch(&mut self, ports_of: Option<Listening>) -> anyhow::Result<()> {
        let listening_file = self.data_dir.join(LISTENING_FILE);
        match fs::remove_file(&listening_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context(format!("removing {}", listening_file.display())),
        }
        self.runs += 1;
        let (http, grpc) = match ports_of {
            Some(l) => (l.http.to_string(), l.grpc.to_string()),
            None => (
                "127.0.0.1:0".to_owned(),
                SocketAddr::new(self.options.grpc_ip, 0).to_string(),
            ),
        };
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--http-listen", &http, "--grpc-listen", &grpc]);
        if let Some(url) = &self.options.database_url {
            command.args(["--database-url", url]);
        }
        command.args(&self.options.args);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("BANHUB_") {
                command.env_remove(key);
            }
        }
        command
            .env(BOOTSTRAP_TOKEN_VAR, &self.admin.sha256)
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_BACKTRACE", "1")
            .current_dir(self.dir.path());
        self.logs.mark(&format!(
            "run {} of {} (http {http}, grpc {grpc})",
            self.runs,
            self.binary.display()
        ))?;
        self.logs.attach(&mut command)?;
        // Replacing the previous child reaps it (it has exited or is killed here).
        self.child = Some(ManagedChild::spawn(BINARY, command)?);
        let listening = self.wait_listening(&listening_file)?;
        if let Some(previous) = ports_of
            && (previous.http.port() != listening.http.port()
                || previous.grpc.port() != listening.grpc.port())
        {
            bail!(
                "the restarted hub listens on {listening:?}, not on the ports it was given \
                 ({previous:?})\n{}",
                self.logs()
            );
        }
        self.listening = listening;
        Ok(())
    }

    fn wait_listening(&mut self, path: &Path) -> anyhow::Result<Listening> {
        let timeout = self.options.start_timeout;
        let deadline = Instant::now() + timeout;
        let mut last_problem = String::from("not written");
        loop {
            let child = self.child.as_mut().context("the hub process is missing")?;
            if let Some(status) = child.try_status()? {
                bail!(
                    "{} exited during start-up ({status})\n{}",
                    self.binary.display(),
                    self.logs()
                );
            }
            let pid = child.pid();
            match fs::read_to_string(path) {
                Ok(text) => match serde_json::from_str::<Listening>(&text) {
                    Ok(listening) if Some(listening.pid) == pid => return Ok(listening),
                    Ok(listening) => {
                        last_problem =
                            format!("names pid {} but the hub runs as {pid:?}", listening.pid);
                    }
                    Err(e) => last_problem = format!("unreadable ({e}): {text:?}"),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => last_problem = e.to_string(),
            }
            if Instant::now() >= deadline {
                let _ = self.kill();
                bail!(
                    "the hub did not write {} within {timeout:?} ({last_problem}); killed it\n{}",
                    path.display(),
                    self.logs()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

/// Sends `request` and returns its status and body: the JSON value, or the text as a string when
/// the body is not JSON.
pub async fn send_json(
    request: reqwest::RequestBuilder,
) -> (reqwest::StatusCode, serde_json::Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// `GET path` as the hub's bootstrap admin ([`HubProcess::client`]); see [`send_json`].
pub async fn api_get(hub: &HubProcess, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
    send_json(hub.client().get(hub.url(path))).await
}

/// `POST path` with a JSON body as the hub's bootstrap admin; see [`send_json`].
pub async fn api_post(
    hub: &HubProcess,
    path: &str,
    body: serde_json::Value,
) -> (reqwest::StatusCode, serde_json::Value) {
    send_json(hub.client().post(hub.url(path)).json(&body)).await
}

#[cfg(test)]
mod tests {
    //! The harness against a stand-in with the hub's command line and `listening.json` contract, so it
    //! is tested whatever state the real hub is in. The end-to-end tests use the real one.

    use super::*;

    /// Echoes its arguments and one variable, writes `listening.json` with the ports it was given (or
    /// made-up ones for `:0`), exits 0 on SIGTERM, and fails at once with `--fail`.
    const STAND_IN: &str = r#"#!/bin/sh
echo "args: $*"
echo "heartbeat: ${BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS:-unset}"
data=""; http=""; grpc=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) data=$2; shift ;;
    --http-listen) http=$2; shift ;;
    --grpc-listen) grpc=$2; shift ;;
    --fail) echo "fatal: told to fail" >&2; exit 3 ;;
    --silent) data=/nonexistent ;;
  esac
  shift
done
port() { case "$1" in *:0) echo "127.0.0.1:$(( $2 + $$ % 1000 ))" ;; *) echo "$1" ;; esac; }
trap 'echo "stopping"; exit 0' TERM
printf '{"http":"%s","grpc":"%s","pid":%s}' "$(port "$http" 41000)" "$(port "$grpc" 42000)" $$ > "$data/listening.tmp" 2>/dev/null \
  && mv "$data/listening.tmp" "$data/listening.json"
while :; do sleep 0.05; done
"#;

    fn stand_in() -> (TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fake-banhub");
        fs::write(&path, STAND_IN).expect("write stand-in");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        (dir, path)
    }

    #[test]
    fn start_reads_listening_json_and_passes_options() {
        let (_bin_dir, bin) = stand_in();
        let mut hub = HubProcess::builder()
            .binary(&bin)
            .database_url("postgres://postgres@127.0.0.1:1/x")
            .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
            .start()
            .expect("start");
        let listening = hub.listening();
        assert_eq!(Some(listening.pid), hub.pid());
        assert!(listening.http.ip().is_loopback());
        assert_eq!(hub.http_url(), format!("http://{}", listening.http));
        assert_eq!(
            hub.url("/healthz"),
            format!("http://{}/healthz", listening.http)
        );
        assert_eq!(hub.grpc_addr(), listening.grpc);
        crate::wait::wait_until(Duration::from_secs(5), "the stand-in's output", || {
            hub.logs().contains("heartbeat: 500")
        })
        .expect("env reached the hub");
        let logs = hub.logs();
        assert!(
            logs.contains(&format!("serve --data-dir {}", hub.data_dir().display())),
            "{logs}"
        );
        assert!(
            logs.contains("--http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0"),
            "{logs}"
        );
        assert!(
            logs.contains("--database-url postgres://postgres@127.0.0.1:1/x"),
            "{logs}"
        );

        let status = hub.stop().expect("stop");
        assert!(status.success(), "{status}");
        assert!(!hub.is_running());
        assert!(hub.logs().contains("stopping"));
    }

    #[test]
    fn restart_reuses_the_data_dir_and_the_ports() {
        let (_bin_dir, bin) = stand_in();
        let mut hub = HubProcess::builder().binary(&bin).start().expect("start");
        let first = hub.listening();
        fs::write(hub.data_dir().join("state"), "kept").expect("write");

        hub.restart().expect("restart after a running hub");
        let second = hub.listening();
        assert_ne!(first.pid, second.pid);
        assert_eq!((first.http, first.grpc), (second.http, second.grpc));
        assert!(
            hub.logs().contains(&format!(
                "--http-listen {} --grpc-listen {}",
                first.http, first.grpc
            )),
            "{}",
            hub.logs()
        );
        assert!(hub.logs().contains("harness: run 2"), "{}", hub.logs());

        hub.kill().expect("kill");
        assert!(!hub.is_running());
        hub.restart().expect("restart after a crash");
        assert_eq!(hub.listening().http, first.http);
        assert_eq!(
            fs::read_to_string(hub.data_dir().join("state")).expect("state"),
            "kept"
        );
    }

    #[test]
    fn exit_during_start_up_shows_the_logs() {
        let (_bin_dir, bin) = stand_in();
        let err = HubProcess::builder()
            .binary(&bin)
            .arg("--fail")
            .start()
            .expect_err("fails");
        let message = format!("{err:#}");
        assert!(message.contains("exited during start-up"), "{message}");
        assert!(message.contains("fatal: told to fail"), "{message}");
    }

    #[test]
    fn a_hub_that_never_listens_is_killed_after_the_timeout() {
        let (_bin_dir, bin) = stand_in();
        let err = HubProcess::builder()
            .binary(&bin)
            .arg("--silent")
            .start_timeout(Duration::from_millis(300))
            .start()
            .expect_err("times out");
        let message = format!("{err:#}");
        assert!(message.contains("did not write"), "{message}");
        assert!(message.contains("listening.json"), "{message}");
    }

    #[test]
    fn drop_kills_the_hub() {
        let (_bin_dir, bin) = stand_in();
        let hub = HubProcess::builder().binary(&bin).start().expect("start");
        let pid = hub.pid().expect("running");
        drop(hub);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn unstartable_binary_is_reported() {
        let err = HubProcess::builder()
            .binary("/nonexistent/banhub")
            .start()
            .expect_err("missing");
        assert!(format!("{err:#}").contains("starting banhub"), "{err:#}");
    }
}
