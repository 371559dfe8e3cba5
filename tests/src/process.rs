//! The workspace's own binaries as child processes: where they are built, their log files, and stopping
//! them. Shared by the hub and agent harnesses.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::wait::POLL_INTERVAL;

/// The workspace root (the directory of the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root when relative), else
/// `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

/// The path of a workspace binary in the debug profile, or an error saying how to build it.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    locate_binary(&target_dir(), name)
}

fn locate_binary(target: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = target.join("debug").join(name);
    if !path.is_file() {
        bail!(
            "{} does not exist: the end-to-end tests run the real binaries; build them first with \
             `cargo build --workspace`",
            path.display()
        );
    }
    Ok(path)
}

/// A child's stdout and stderr, each appended to its own file so that every run of a restarted process
/// stays on record.
#[derive(Debug, Clone)]
pub struct LogFiles {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl LogFiles {
    /// `<dir>/<stem>.stdout.log` and `<dir>/<stem>.stderr.log`.
    pub fn new(dir: &Path, stem: &str) -> Self {
        Self {
            stdout: dir.join(format!("{stem}.stdout.log")),
            stderr: dir.join(format!("{stem}.stderr.log")),
        }
    }

    /// Appends a line to both files (written by the harness, to separate runs).
    pub fn mark(&self, line: &str) -> anyhow::Result<()> {
        for path in [&self.stdout, &self.stderr] {
            writeln!(append(path)?, "----- harness: {line} -----")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Points `command`'s stdin at /dev/null and its output at the files.
    pub fn attach(&self, command: &mut Command) -> anyhow::Result<()> {
        command
            .stdin(Stdio::null())
            .stdout(append(&self.stdout)?)
            .stderr(append(&self.stderr)?);
        Ok(())
    }

    /// The last `lines` lines of each file, labelled with its path.
    pub fn tail(&self, lines: usize) -> String {
        let mut text = String::new();
        for path in [&self.stdout, &self.stderr] {
            let content = fs::read_to_string(path).unwrap_or_default();
            text.push_str(&format!(
                "--- {} ---\n{}\n",
                path.display(),
                tail(&content, lines)
            ));
        }
        text
    }
}

fn append(path: &Path) -> anyhow::Result<fs::File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A child process that is killed when dropped, with its exit status kept once it has been reaped.
#[derive(Debug)]
pub struct ManagedChild {
    name: String,
    child: Option<Child>,
    exited: Option<ExitStatus>,
}

impl ManagedChild {
    /// Spawns `command`; `name` labels the process in errors.
    pub fn spawn(name: &str, mut command: Command) -> anyhow::Result<Self> {
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({command:?})"))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            exited: None,
        })
    }

    /// The process id while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status if the process has exited (reaping it), `None` while it runs.
    pub fn try_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child
                .try_wait()
                .with_context(|| format!("checking on {}", self.name))?
        {
            self.child = None;
            self.exited = Some(status);
        }
        Ok(self.exited)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.try_status(), Ok(None))
    }

    /// SIGKILL and reap. Does nothing if it already exited.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            // `kill` fails only when the child was already reaped, which `take` rules out; an exited but
            // unreaped child is simply reaped below.
            let _ = child.kill();
            let status = child
                .wait()
                .with_context(|| format!("reaping {}", self.name))?;
            self.exited = Some(status);
        }
        Ok(())
    }

    /// SIGTERM, then waits up to `timeout` for the exit; SIGKILL and an error if it does not exit.
    pub fn stop(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_status()? {
            return Ok(status);
        }
        if let Some(pid) = self.pid() {
            // `kill(1)` rather than libc: the workspace forbids unsafe code.
            let status = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .stdin(Stdio::null())
                .status()
                .context("running kill -TERM")?;
            if !status.success() && self.try_status()?.is_none() {
                bail!("kill -TERM {pid} ({}) failed: {status}", self.name);
            }
        }
        match self.wait_exit(timeout) {
            Ok(status) => Ok(status),
            Err(e) => {
                self.kill()?;
                Err(e.context(format!("{} ignored SIGTERM and was killed", self.name)))
            }
        }
    }

    /// Waits up to `timeout` for the process to exit by itself; an error (leaving it running) if not.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} did not exit within {timeout:?}", self.name);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Runs `command` to completion with its output in `logs`, killing it after `timeout`. Returns what
/// `Command::output` would, read back from the files.
pub fn run_with_timeout(
    name: &str,
    mut command: Command,
    logs: &LogFiles,
    timeout: Duration,
) -> anyhow::Result<std::process::Output> {
    for path in [&logs.stdout, &logs.stderr] {
        fs::write(path, "").with_context(|| format!("creating {}", path.display()))?;
    }
    logs.attach(&mut command)?;
    let mut child = ManagedChild::spawn(name, command)?;
    let status = match child.wait_exit(timeout) {
        Ok(status) => status,
        Err(e) => {
            child.kill()?;
            return Err(e.context(format!("{name} was killed\n{}", logs.tail(40))));
        }
    };
    Ok(std::process::Output {
        status,
        stdout: fs::read(&logs.stdout).unwrap_or_default(),
        stderr: fs::read(&logs.stderr).unwrap_or_default(),
    })
}

/// How many processes named `name` (their command name, as `/proc/<pid>/stat` gives it) are
/// children of `parent` now, e.g. the `fail2ban-regex` runs an agent has started.
pub fn children_named(parent: u32, name: &str) -> usize {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    let comm = format!("({name}");
    let parent = parent.to_string();
    entries
        .flatten()
        .filter_map(|entry| fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            // `pid (comm) state ppid …`; comm may hold spaces, so split after its closing parenthesis.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            head.contains(&comm) && rest.split_whitespace().nth(1) == Some(parent.as_str())
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_says_how_to_build_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = locate_binary(dir.path(), "banhub").expect_err("missing");
        let message = err.to_string();
        assert!(message.contains("cargo build --workspace"), "{message}");
        assert!(message.contains("debug/banhub"), "{message}");
    }

    #[test]
    fn target_dir_is_under_the_workspace() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(target_dir().starts_with(workspace_root()) || target_dir().is_absolute());
    }

    #[test]
    fn stop_sends_sigterm_and_reports_the_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogFiles::new(dir.path(), "sh");
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "trap 'echo term; exit 7' TERM; echo up; while :; do sleep 0.05; done",
        ]);
        logs.attach(&mut command).expect("attach");
        let mut child = ManagedChild::spawn("sh", command).expect("spawn");
        crate::wait::wait_until(Duration::from_secs(5), "sh to start", || {
            fs::read_to_string(&logs.stdout).is_ok_and(|s| s.contains("up"))
        })
        .expect("started");
        let status = child.stop(Duration::from_secs(5)).expect("stopped");
        assert_eq!(status.code(), Some(7));
        assert!(logs.tail(5).contains("term"), "{}", logs.tail(5));
        assert!(!child.is_running());
        assert_eq!(
            child.stop(Duration::from_secs(1)).expect("again").code(),
            Some(7)
        );
    }

    #[test]
    fn stop_kills_a_process_that_ignores_sigterm() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogFiles::new(dir.path(), "stubborn");
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
        ]);
        logs.attach(&mut command).expect("attach");
        let mut child = ManagedChild::spawn("stubborn", command).expect("spawn");
        // Until the trap is set, SIGTERM would simply end the shell.
        crate::wait::wait_until(Duration::from_secs(5), "the trap to be set", || {
            fs::read_to_string(&logs.stdout).is_ok_and(|s| s.contains("ready"))
        })
        .expect("ready");
        let err = child
            .stop(Duration::from_millis(300))
            .expect_err("ignored SIGTERM");
        assert!(format!("{err:#}").contains("ignored SIGTERM"), "{err:#}");
        assert!(!child.is_running());
    }

    #[test]
    fn children_named_counts_the_children_of_one_parent_by_name() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let me = std::process::id();
        crate::wait::wait_until(Duration::from_secs(5), "the child to run", || {
            children_named(me, "sleep") >= 1
        })
        .expect("counted");
        assert_eq!(children_named(me, "no-such-program"), 0);
        assert_eq!(children_named(child.id(), "sleep"), 0);
        child.kill().expect("kill");
        child.wait().expect("reap");
    }

    #[test]
    fn run_with_timeout_captures_output_and_kills_hangs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogFiles::new(dir.path(), "echo");
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let output =
            run_with_timeout("echo", command, &logs, Duration::from_secs(5)).expect("output");
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(output.stdout, b"out\n");
        assert_eq!(output.stderr, b"err\n");

        let mut command = Command::new("sleep");
        command.arg("30");
        let started = Instant::now();
        let err = run_with_timeout("sleep", command, &logs, Duration::from_millis(200))
            .expect_err("hangs");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(format!("{err:#}").contains("sleep was killed"), "{err:#}");
    }
}
