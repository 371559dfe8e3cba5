//! The real `banhub-agent` binary: one-shot `enroll`, and `run` as a child process beside a fail2ban
//! sandbox (ARCHITECTURE.md, "Agent command line").

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::time::Duration;

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::process::{LogFiles, ManagedChild, binary, run_with_timeout};

const BINARY: &str = "banhub-agent";
const ENROLL_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// A running `banhub-agent run`, killed when dropped. Its stdout and stderr go to files in a temporary
/// directory of its own ([`AgentProcess::log_dir`]), every run appended.
#[derive(Debug)]
pub struct AgentProcess {
    logs_dir: TempDir,
    logs: LogFiles,
    binary: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    /// A command prefix the agent runs under (e.g. `nsenter --net=…`), empty for none.
    launcher: Vec<OsString>,
    child: Option<ManagedChild>,
    runs: u32,
}

impl AgentProcess {
    /// Runs `banhub-agent enroll <token> --state-dir <state_dir>` to completion (killed after 60 s) and
    /// returns its status and output; a failed enrollment is an `Ok` with a failed status.
    pub fn enroll(token: &str, state_dir: &Path) -> anyhow::Result<Output> {
        Self::enroll_with_env(token, state_dir, &[])
    }

    /// [`AgentProcess::enroll`] with extra environment variables.
    pub fn enroll_with_env(
        token: &str,
        state_dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Output> {
        enroll_with(&binary(BINARY)?, token, state_dir, env)
    }

    /// Starts `banhub-agent run --state-dir D --fail2ban-socket S --fail2ban-config-dir C` with extra
    /// environment variables (e.g. `BANHUB_AGENT_…` settings). Returns once the process is spawned; wait
    /// on the hub for it to come online.
    pub fn start(
        state_dir: &Path,
        fail2ban_socket: &Path,
        fail2ban_conf_dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::start_binary(
            binary(BINARY)?,
            state_dir,
            fail2ban_socket,
            fail2ban_conf_dir,
            env,
        )
    }

    /// [`AgentProcess::start`] under a command prefix, e.g. `nsenter --net=…` to run the agent in
    /// a network namespace ([`crate::netns::NetNs::launcher`]).
    pub fn start_under(
        launcher: &[OsString],
        state_dir: &Path,
        fail2ban_socket: &Path,
        fail2ban_conf_dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let args = run_args(state_dir, fail2ban_socket, fail2ban_conf_dir);
        Self::start_launched(binary(BINARY)?, launcher.to_vec(), args, env)
    }

    /// [`AgentProcess::start`] with a given binary (e.g. a release build, for benchmarks).
    pub fn start_binary(
        binary: PathBuf,
        state_dir: &Path,
        fail2ban_socket: &Path,
        fail2ban_conf_dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let args = run_args(state_dir, fail2ban_socket, fail2ban_conf_dir);
        Self::start_with(binary, args, env)
    }

    fn start_with(
        binary: PathBuf,
        args: Vec<OsString>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        Self::start_launched(binary, Vec::new(), args, env)
    }

    fn start_launched(
        binary: PathBuf,
        launcher: Vec<OsString>,
        args: Vec<OsString>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let logs_dir = tempfile::Builder::new()
            .prefix("banhub-agent-")
            .tempdir()
            .context("creating the agent's log directory")?;
        let logs = LogFiles::new(logs_dir.path(), "agent");
        let mut agent = Self {
            logs_dir,
            logs,
            binary,
            args,
            env: env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            launcher,
            child: None,
            runs: 0,
        };
        agent.launch()?;
        Ok(agent)
    }

    /// The directory of the log files.
    pub fn log_dir(&self) -> &Path {
        self.logs_dir.path()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(ManagedChild::pid)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(ManagedChild::is_running)
    }

    /// SIGKILL: a crash, nothing flushed.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        match self.child.as_mut() {
            Some(child) => child.kill(),
            None => Ok(()),
        }
    }

    /// SIGTERM and waits for the exit; SIGKILL and an error after 15 s.
    pub fn stop(&mut self) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("the agent was never started");
        };
        child
            .stop(STOP_TIMEOUT)
            .map_err(|e| e.context(self.logs.tail(40)))
    }

    /// Waits for the agent to exit by itself (e.g. after its certificate was revoked).
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            bail!("the agent was never started");
        };
        child
            .wait_exit(timeout)
            .map_err(|e| e.context(self.logs.tail(40)))
    }

    /// Stops the agent if it runs (SIGTERM), then starts it again with the same arguments and
    /// environment.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            self.stop()?;
        }
        self.launch()
    }

    /// The agent's stdout and stderr (the end of each), for failure messages.
    pub fn logs(&self) -> String {
        self.logs.tail(200)
    }

    /// Prints [`AgentProcess::logs`] to stderr (shown by the test runner for a failed test).
    pub fn print_logs(&self) {
        eprintln!("{}", self.logs());
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        self.runs += 1;
        let mut command = agent_command(&self.launcher, &self.binary, self.logs_dir.path());
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        self.logs
            .mark(&format!("run {} of {}", self.runs, self.binary.display()))?;
        self.logs.attach(&mut command)?;
        let mut child = ManagedChild::spawn(BINARY, command)?;
        // Catch an agent that cannot even parse its command line; later failures show in its logs.
        if let Some(status) = child.try_status()? {
            bail!("{BINARY} exited at once ({status})\n{}", self.logs());
        }
        self.child = Some(child);
        Ok(())
    }
}

/// Runs `banhub-agent <args>` to completion (killed after 60 s) with the harness's environment
/// (inherited `BANHUB_…` variables removed) plus `env`, e.g. `install-action`; a failed command is
/// an `Ok` with a failed status.
pub fn run_command(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> anyhow::Result<Output> {
    let logs_dir = tempfile::Builder::new()
        .prefix("banhub-agent-cmd-")
        .tempdir()
        .context("creating a directory for the command's output")?;
    let mut command = agent_command(&[], &binary(BINARY)?, logs_dir.path());
    command.args(args).envs(env.iter().copied());
    let name = args
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    run_with_timeout(
        &format!("{BINARY} {name}"),
        command,
        &LogFiles::new(logs_dir.path(), "command"),
        ENROLL_TIMEOUT,
    )
}

fn enroll_with(
    binary: &Path,
    token: &str,
    state_dir: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<Output> {
    let logs_dir = tempfile::Builder::new()
        .prefix("banhub-enroll-")
        .tempdir()
        .context("creating a directory for the enroll output")?;
    let mut command = agent_command(&[], binary, logs_dir.path());
    command
        .arg("enroll")
        .arg(token)
        .arg("--state-dir")
        .arg(state_dir)
        .envs(env.iter().copied());
    run_with_timeout(
        &format!("{BINARY} enroll"),
        command,
        &LogFiles::new(logs_dir.path(), "enroll"),
        ENROLL_TIMEOUT,
    )
}

/// `banhub-agent run`'s arguments.
fn run_args(state_dir: &Path, fail2ban_socket: &Path, fail2ban_conf_dir: &Path) -> Vec<OsString> {
    vec![
        OsString::from("run"),
        "--state-dir".into(),
        state_dir.into(),
        "--fail2ban-socket".into(),
        fail2ban_socket.into(),
        "--fail2ban-config-dir".into(),
        fail2ban_conf_dir.into(),
    ]
}

/// The agent binary, under `launcher` when one is given, with inherited `BANHUB_…` variables
/// removed, running in `cwd`.
fn agent_command(launcher: &[OsString], binary: &Path, cwd: &Path) -> Command {
    let mut command = match launcher.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BANHUB_") {
            command.env_remove(key);
        }
    }
    // Several agents share this machine: each relay takes a free port (written to relay.json in
    // its state directory) unless a test sets BANHUB_AGENT_RELAY__LISTEN itself.
    command
        .env("RUST_BACKTRACE", "1")
        .env("BANHUB_AGENT_RELAY__LISTEN", "127.0.0.1:0")
        .env(POLICY_LOG_PREFIXES, sandbox_log_prefixes())
        .current_dir(cwd);
    command
}

/// The variable of the host policy's allowed log directories.
pub const POLICY_LOG_PREFIXES: &str = "BANHUB_AGENT_POLICY__LOG_PREFIXES";

/// The host policy's log directories for test agents: `/var/log` and the temporary directory
/// that holds the fail2ban sandboxes' logs (a test may set [`POLICY_LOG_PREFIXES`] itself).
pub fn sandbox_log_prefixes() -> String {
    format!("[/var/log,{}]", std::env::temp_dir().display())
}

/// The address of a running agent's callback relay, from `relay.json` in its state directory.
pub fn relay_addr(state_dir: &Path) -> anyhow::Result<std::net::SocketAddr> {
    let path = state_dir.join("relay.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (is the agent running?)", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    value["listen"]
        .as_str()
        .context("relay.json has no listen address")?
        .parse()
        .context("relay.json holds no socket address")
}

/// The relay's callback secret, from the agent's state directory.
pub fn relay_secret(state_dir: &Path) -> anyhow::Result<String> {
    let path = state_dir.join("relay.secret");
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned())
}

#[cfg(test)]
mod tests {
    //! The harness against `sh` stand-ins; the end-to-end tests use the real agent.

    use super::*;

    fn script(body: &str) -> (TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fake-agent");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        (dir, path)
    }

    #[test]
    fn enroll_returns_status_and_output() {
        let (_dir, bin) = script(r#"echo "args: $*"; echo "x=$X" >&2; exit 4"#);
        let state = tempfile::tempdir().expect("state");
        let output = enroll_with(&bin, "bh1.tok", state.path(), &[("X", "1")]).expect("ran");
        assert_eq!(output.status.code(), Some(4));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            stdout.trim(),
            format!(
                "args: enroll bh1.tok --state-dir {}",
                state.path().display()
            )
        );
        assert_eq!(String::from_utf8_lossy(&output.stderr).trim(), "x=1");
    }

    #[test]
    fn run_stop_restart_and_wait_exit() {
        let (_dir, bin) = script(
            r#"trap 'echo bye; exit 0' TERM; echo "args: $* y=$Y"
if [ -e "$0.exit" ]; then sleep 0.2; exit 9; fi
while :; do sleep 0.05; done"#,
        );
        let mut agent = AgentProcess::start_with(
            bin.clone(),
            vec!["run".into(), "--state-dir".into(), "/s".into()],
            &[("Y", "2")],
        )
        .expect("start");
        assert!(agent.is_running());
        crate::wait::wait_until(Duration::from_secs(5), "output", || {
            agent.logs().contains("args: run --state-dir /s y=2")
        })
        .expect("args and env");
        assert!(agent.stop().expect("stop").success());
        assert!(agent.logs().contains("bye"));

        agent.restart().expect("restart");
        let pid = agent.pid().expect("running again");
        agent.kill().expect("kill");
        assert!(!Path::new(&format!("/proc/{pid}")).exists());

        std::fs::write(format!("{}.exit", bin.display()), "").expect("marker");
        agent.restart().expect("restart");
        let status = agent
            .wait_exit(Duration::from_secs(5))
            .expect("exits by itself");
        assert_eq!(status.code(), Some(9));
        assert!(agent.logs().contains("harness: run 3"), "{}", agent.logs());
    }

    #[test]
    fn wait_exit_times_out_on_a_running_agent() {
        let (_dir, bin) = script("while :; do sleep 0.05; done");
        let mut agent = AgentProcess::start_with(bin, vec![], &[]).expect("start");
        let err = agent
            .wait_exit(Duration::from_millis(200))
            .expect_err("still running");
        assert!(format!("{err:#}").contains("did not exit"), "{err:#}");
        let pid = agent.pid().expect("running");
        drop(agent);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }
}
