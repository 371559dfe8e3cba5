//! The step most end-to-end tests begin with: register a server through the hub's API, enroll an
//! agent for it with the one-time token, and start that agent beside a fail2ban sandbox.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::agent::AgentProcess;
use crate::fail2ban::Fail2banSandbox;
use crate::wait::wait_until_async;

/// Reconnect delay ceiling every test agent runs with, so a restarted hub is found quickly.
const BACKOFF_MAX_MS: (&str, &str) = ("BANHUB_AGENT_LINK__BACKOFF_MAX_MS", "500");

/// A server registered on the hub and its running agent.
#[derive(Debug)]
pub struct EnrolledAgent {
    /// The server's id, as the API gives it.
    pub server_id: String,
    pub agent: AgentProcess,
    /// Holds the agent's state directory, [`EnrolledAgent::state_dir`].
    pub state: TempDir,
}

impl EnrolledAgent {
    /// Registers `name` with `POST {api}/api/servers` (`api` is the hub's base URL including any
    /// base path; `client` is signed in as an admin), enrolls an agent with the returned token and
    /// starts it beside `sandbox` with `env` added to its environment. Returns once the agent is
    /// spawned; see [`EnrolledAgent::wait_online`].
    pub async fn register(
        client: &reqwest::Client,
        api: &str,
        name: &str,
        sandbox: &Fail2banSandbox,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::register_under(client, api, name, sandbox, env, &[]).await
    }

    /// [`EnrolledAgent::register`] with the agent run under a command prefix, e.g. in a network
    /// namespace ([`crate::netns::NetNs::launcher`]); the enrollment itself runs here.
    pub async fn register_under(
        client: &reqwest::Client,
        api: &str,
        name: &str,
        sandbox: &Fail2banSandbox,
        env: &[(&str, &str)],
        launcher: &[OsString],
    ) -> anyhow::Result<Self> {
        let response = client
            .post(format!("{api}/api/servers"))
            .json(&json!({ "name": name }))
            .send()
            .await
            .context("POST /api/servers")?;
        let status = response.status();
        let created: Value = response.json().await.context("the answer is not JSON")?;
        if !status.is_success() {
            bail!("POST /api/servers answered {status}: {created}");
        }
        let server_id = created["server"]["id"]
            .as_str()
            .context("no server.id in the answer")?
            .to_owned();
        let token = created["enrollment"]["token"]
            .as_str()
            .context("no enrollment.token in the answer")?;
        let state = tempfile::tempdir().context("creating the agent's state directory")?;
        let dir = state.path().join("agent");
        let out = AgentProcess::enroll(token, &dir)?;
        if !out.status.success() {
            bail!(
                "banhub-agent enroll failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut all_env = vec![BACKOFF_MAX_MS];
        all_env.extend_from_slice(env);
        let agent = AgentProcess::start_under(
            launcher,
            &dir,
            &sandbox.socket_path(),
            &sandbox.conf_dir(),
            &all_env,
        )?;
        Ok(Self {
            server_id,
            agent,
            state,
        })
    }

    /// The agent's state directory (its certificate, spool, relay secret, `relay.json`).
    pub fn state_dir(&self) -> PathBuf {
        self.state.path().join("agent")
    }

    /// Polls `GET {api}/api/servers/{id}` until the hub reports the server online; the agent's
    /// log is in the error when it does not come online within `deadline`.
    pub async fn wait_online(
        &self,
        client: &reqwest::Client,
        api: &str,
        deadline: Duration,
    ) -> anyhow::Result<()> {
        wait_server_online(client, api, &self.server_id, deadline)
            .await
            .with_context(|| self.agent.logs())
    }
}

/// Polls `GET {api}/api/servers/{server_id}` until the hub reports it online.
pub async fn wait_server_online(
    client: &reqwest::Client,
    api: &str,
    server_id: &str,
    deadline: Duration,
) -> anyhow::Result<()> {
    let url = format!("{api}/api/servers/{server_id}");
    wait_until_async(deadline, "the agent to be online", || async {
        match client.get(&url).send().await {
            Ok(response) => response
                .json::<Value>()
                .await
                .is_ok_and(|server| server["status"] == "online"),
            Err(_) => false,
        }
    })
    .await
}
