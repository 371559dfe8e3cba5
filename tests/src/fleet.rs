//! A hub with enrolled fail2ban hosts, the fixture most end-to-end tests start from: one [`TestFleet`]
//! is a hub process plus, per host name, a fail2ban sandbox and an agent enrolled for it and online.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use reqwest::StatusCode;
use serde_json::Value;

use tempfile::TempDir;

use crate::agent::AgentProcess;
use crate::client::{ApiClient, ServerStatus};
use crate::enrolled::EnrolledAgent;
use crate::fail2ban::Fail2banSandbox;
use crate::hub::{HubBuilder, HubProcess, send_json};
use crate::wait::wait_until_async;

/// How long a host may take to come online.
const ONLINE_DEADLINE: Duration = Duration::from_secs(30);

/// One fail2ban host of a [`TestFleet`]: its sandbox and the agent enrolled for it.
#[derive(Debug)]
pub struct TestHost {
    /// The name the server was registered with.
    pub name: String,
    /// The server id the hub gave this host.
    pub id: String,
    pub sandbox: Fail2banSandbox,
    pub agent: AgentProcess,
    /// Holds the agent's state directory, [`TestHost::state_dir`].
    pub state: TempDir,
}

impl TestHost {
    /// The agent's state directory (its certificate, spool, relay secret, `relay.json`).
    pub fn state_dir(&self) -> PathBuf {
        self.state.path().join("agent")
    }

    /// The addresses this host's fail2ban bans in `jail` (`get <jail> banned`).
    pub fn banned(&self, jail: &str) -> String {
        self.sandbox
            .client(&["get", jail, "banned"])
            .unwrap_or_else(|e| panic!("fail2ban lists its bans: {e:#}\n{}", self.sandbox.logs()))
    }

    /// Runs `banhub-agent install-action` on this host's fail2ban once its agent's relay listens:
    /// the banhub action on every jail, the probe jail and the shared-ban jail.
    pub fn install_action(&self) -> anyhow::Result<()> {
        let relay = self.state_dir().join("relay.json");
        crate::wait::wait_until(Duration::from_secs(45), "the relay to listen", || {
            relay.exists()
        })?;
        let conf = self.sandbox.conf_dir();
        let state = self.state_dir();
        let socket = self.sandbox.socket_path();
        let args: Vec<&OsStr> = vec![
            OsStr::new("install-action"),
            OsStr::new("--config-dir"),
            conf.as_os_str(),
            OsStr::new("--state-dir"),
            state.as_os_str(),
            OsStr::new("--fail2ban-socket"),
            socket.as_os_str(),
        ];
        let out = crate::agent::run_command(&args, &[])?;
        anyhow::ensure!(
            out.status.success(),
            "install-action on {}: {}\n{}\n{}",
            self.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.sandbox.logs()
        );
        Ok(())
    }
}

/// A hub and its hosts; everything stops when it is dropped.
#[derive(Debug)]
pub struct TestFleet {
    pub hub: HubProcess,
    pub hosts: Vec<TestHost>,
}

impl TestFleet {
    /// A hub (heartbeats every 500 ms) with one host per name, each a sandbox with the jails
    /// `testauth` and `dummyjail`, all online.
    pub async fn start(names: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(names, &[]).await
    }

    /// Like [`TestFleet::start`], with `agent_env` added to every agent's environment.
    pub async fn start_with(names: &[&str], agent_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_configured(names, &[], agent_env).await
    }

    /// Like [`TestFleet::start`], with `hub_env` added to the hub's environment and `agent_env`
    /// to every agent's.
    pub async fn start_configured(
        names: &[&str],
        hub_env: &[(&str, &str)],
        agent_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut builder = Self::hub_builder();
        for (key, value) in hub_env {
            builder = builder.env(*key, *value);
        }
        let mut fleet = Self::on(builder.start()?);
        for name in names {
            let sandbox = Fail2banSandbox::start(name)?;
            fleet.add_host(name, sandbox, agent_env).await?;
        }
        Ok(fleet)
    }

    /// A hub started by `hub` with one online host per name, each with `install-action` run: the
    /// banhub action on every jail, the probe jail and the shared-ban jail.
    pub async fn with_action_installed(hub: HubBuilder, names: &[&str]) -> anyhow::Result<Self> {
        let mut fleet = Self::on(hub.start()?);
        for name in names {
            let sandbox = Fail2banSandbox::start(name)?;
            fleet.add_host(name, sandbox, &[]).await?.install_action()?;
        }
        Ok(fleet)
    }

    /// How a fleet's hub starts: heartbeats every 500 ms, so that a stopped agent is soon offline.
    pub fn hub_builder() -> HubBuilder {
        HubProcess::builder().env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
    }

    /// A fleet of `hub` without hosts yet; see [`TestFleet::add_host`].
    pub fn on(hub: HubProcess) -> Self {
        Self {
            hub,
            hosts: Vec::new(),
        }
    }

    /// Registers `name` on the hub, enrolls an agent beside `sandbox` and waits until it is online.
    pub async fn add_host(
        &mut self,
        name: &str,
        sandbox: Fail2banSandbox,
        agent_env: &[(&str, &str)],
    ) -> anyhow::Result<&TestHost> {
        self.add_host_under(name, sandbox, agent_env, &[]).await
    }

    /// [`TestFleet::add_host`] with the agent run under a command prefix, e.g. in a network
    /// namespace ([`crate::netns::NetNs::launcher`]).
    pub async fn add_host_under(
        &mut self,
        name: &str,
        sandbox: Fail2banSandbox,
        agent_env: &[(&str, &str)],
        launcher: &[OsString],
    ) -> anyhow::Result<&TestHost> {
        let api = self.hub.http_url();
        let client = self.hub.client();
        let enrolled =
            EnrolledAgent::register_under(&client, &api, name, &sandbox, agent_env, launcher)
                .await?;
        enrolled
            .wait_online(&client, &api, ONLINE_DEADLINE)
            .await
            .with_context(|| self.hub.logs())?;
        let EnrolledAgent {
            server_id,
            agent,
            state,
        } = enrolled;
        self.hosts.push(TestHost {
            name: (*name).to_owned(),
            id: server_id,
            sandbox,
            agent,
            state,
        });
        Ok(self.hosts.last().expect("just pushed"))
    }

    /// The host at `index`, in the order they were added.
    pub fn host(&self, index: usize) -> &TestHost {
        &self.hosts[index]
    }

    /// The host registered as `name`.
    pub fn host_named(&self, name: &str) -> &TestHost {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// The API as the bootstrap admin.
    pub fn api(&self) -> ApiClient {
        self.hub.api()
    }

    /// Waits until the hub reports `host` as `want`; the logs are in the panic when it does not.
    pub async fn wait_status(&self, host: &TestHost, want: ServerStatus) {
        let api = self.api();
        wait_until_async(ONLINE_DEADLINE, "the server's status", || async {
            api.server(&host.id).await.is_ok_and(|s| s.status == want)
        })
        .await
        .unwrap_or_else(|e| panic!("{} {want:?}: {e}\n{}", host.name, self.logs()));
    }

    /// `GET path` as the bootstrap admin, addressed to `server` (the `X-BanDaemon-Server` header)
    /// when given.
    pub async fn get(&self, path: &str, server: Option<&str>) -> (StatusCode, Value) {
        self.send(self.hub.client().get(self.hub.url(path)), server)
            .await
    }

    /// `POST path` with a JSON body as the bootstrap admin, addressed like [`TestFleet::get`].
    pub async fn post(
        &self,
        path: &str,
        server: Option<&str>,
        body: &Value,
    ) -> (StatusCode, Value) {
        self.send(
            self.hub.client().post(self.hub.url(path)).json(body),
            server,
        )
        .await
    }

    /// Sends `request` with the server header when `server` is given.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
        server: Option<&str>,
    ) -> (StatusCode, Value) {
        match server {
            Some(id) => send_json(request.header("X-BanDaemon-Server", id)).await,
            None => send_json(request).await,
        }
    }

    /// The hub's and every agent's and fail2ban's logs, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = self.hub.logs();
        for host in &self.hosts {
            out.push_str(&format!(
                "\n--- host {} ---\n{}\n{}",
                host.name,
                host.agent.logs(),
                host.sandbox.logs()
            ));
        }
        out
    }
}

/// Every file under `dir` with its bytes, to show that a refused request changed nothing.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                files.insert(path, bytes);
            }
        }
    }
    files
}
