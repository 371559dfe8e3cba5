//! fail2ban's own programs (`fail2ban-client`, `fail2ban-regex`) run without a shell, with a
//! time limit, and the messages in their output picked out for operators.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Default time limit for `fail2ban-client -t` and `fail2ban-regex`.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time limit for one filter test: a regular expression that backtracks catastrophically
/// would otherwise hold a core for as long as the tool timeout.
pub const DEFAULT_FILTER_TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Default time limit for `reload` (stopping a jail takes seconds; many jails take longer).
pub const DEFAULT_RELOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// Where fail2ban's programs are, and how long they may take.
#[derive(Debug, Clone)]
pub struct Fail2banTools {
    /// `fail2ban-client` (the agent's `fail2ban.client` setting).
    pub client: PathBuf,
    /// `fail2ban-regex`; by default next to `client`.
    pub regex: PathBuf,
    /// Limit for config tests and filter compile checks.
    pub timeout: Duration,
    /// Limit for a filter test on log lines; the process is killed when it is up.
    pub filter_test_timeout: Duration,
    /// Limit for `reload`.
    pub reload_timeout: Duration,
}

/// Why a program could not be run to the end.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(
        "cannot run {}: {source}; install fail2ban or set fail2ban.client in the agent's configuration",
        program.display()
    )]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} did not finish within {after:?} and was killed", program.display())]
    Timeout { program: PathBuf, after: Duration },
}

/// What a finished program printed.
#[derive(Debug, Clone)]
pub(crate) struct ToolOutput {
    /// `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl ToolOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl Fail2banTools {
    /// Uses `client`, with `fail2ban-regex` beside it (or on `PATH` when `client` is a bare
    /// program name).
    pub fn new(client: impl Into<PathBuf>) -> Self {
        let client = client.into();
        let regex = match client.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.join("fail2ban-regex"),
            _ => PathBuf::from("fail2ban-regex"),
        };
        Self {
            client,
            regex,
            timeout: DEFAULT_TOOL_TIMEOUT,
            filter_test_timeout: DEFAULT_FILTER_TEST_TIMEOUT,
            reload_timeout: DEFAULT_RELOAD_TIMEOUT,
        }
    }

    /// Runs `fail2ban-client` with `args`.
    pub(crate) async fn client(
        &self,
        args: &[OsString],
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        run(&self.client, args, timeout, None).await
    }

    /// Runs `fail2ban-regex` with `args` in `cwd`, killed after `timeout`.
    pub(crate) async fn regex(
        &self,
        args: &[OsString],
        cwd: &Path,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        run(&self.regex, args, timeout, Some(cwd)).await
    }
}

/// Runs a program directly (no shell), stdin closed, killed when the time is up.
pub(crate) async fn run(
    program: &Path,
    args: &[OsString],
    timeout: Duration,
    cwd: Option<&Path>,
) -> Result<ToolOutput, ToolError> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(program);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ToolError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| ToolError::Timeout {
            program: program.to_owned(),
            after: timeout,
        })?
        .map_err(|source| ToolError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    let result = ToolOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    };
    tracing::debug!(
        program = %program.display(),
        code = ?result.code,
        elapsed_ms = u64::try_from(result.elapsed.as_millis()).unwrap_or(u64::MAX),
        "fail2ban tool finished"
    );
    Ok(result)
}

/// A fail2ban log line: `2026-11-23 08:08:47,319 fail2ban.jailreader     [9855]: ERROR   text`.
fn log_line(line: &str) -> Option<(&str, &str)> {
    let bytes = line.as_bytes();
    let stamp = bytes.len() > 24
        && bytes[4] == b'-'
        && bytes[10] == b' '
        && bytes[19] == b','
        && bytes[..4].iter().all(u8::is_ascii_digit);
    if !stamp {
        return None;
    }
    let (_, rest) = line.split_once("]: ")?;
    let rest = rest.trim_start();
    let (level, text) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((level, text.trim_start()))
}

/// The messages an operator needs from `fail2ban-client` output: errors and warnings from its
/// log (continuation lines kept with their message), then what it printed on stdout, without
/// routine noise; paths under `from` shown under `to` (the shadow copy under the live dir).
pub(crate) fn client_messages(output: &ToolOutput, rename: Option<(&Path, &Path)>) -> Vec<String> {
    let mut messages: Vec<String> = Vec::new();
    let mut keep_continuation = false;
    for line in output.stderr.lines() {
        match log_line(line) {
            Some((level, text)) => {
                keep_continuation = matches!(level, "ERROR" | "CRITICAL" | "WARNING")
                    && !(text.contains("not defined in") && text.contains("Using default one"))
                    // Repeats the line before it.
                    && text != "ERROR: test configuration failed";
                if keep_continuation {
                    messages.push(format!("{level} {text}"));
                }
            }
            None if keep_continuation && !line.trim().is_empty() => {
                if let Some(last) = messages.last_mut() {
                    last.push('\n');
                    last.push_str(line.trim_end());
                }
            }
            None => {
                // A traceback or other text outside the log format: its last line says why.
                if !line.trim().is_empty()
                    && !line.starts_with(' ')
                    && !line.starts_with("Traceback")
                {
                    messages.push(line.trim_end().to_owned());
                }
            }
        }
    }
    for line in output.stdout.lines() {
        let line = line.trim_end();
        if !line.is_empty() && line != "OK" && !line.starts_with("OK: ") {
            messages.push(line.to_owned());
        }
    }
    if let Some((from, to)) = rename {
        let (from, to) = (from.to_string_lossy(), to.to_string_lossy());
        for message in &mut messages {
            *message = message.replace(from.as_ref(), to.as_ref());
        }
    }
    if messages.is_empty() && !output.success() {
        messages.push(format!(
            "fail2ban-client exited with {} and printed no message",
            output
                .code
                .map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"))
        ));
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(code: i32, stdout: &str, stderr: &str) -> ToolOutput {
        ToolOutput {
            code: Some(code),
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn regex_tool_sits_beside_the_client() {
        assert_eq!(
            Fail2banTools::new("/usr/bin/fail2ban-client").regex,
            Path::new("/usr/bin/fail2ban-regex")
        );
        assert_eq!(
            Fail2banTools::new("fail2ban-client").regex,
            Path::new("fail2ban-regex")
        );
    }

    #[test]
    fn messages_from_a_failed_config_test() {
        // Captured from `fail2ban-client -c DIR -t` (fail2ban 1.0.2).
        let stderr = "\
2026-11-23 08:08:47,318 fail2ban.configreader   [9855]: WARNING 'dbpurgeage' not defined in 'Definition'. Using default one: '1d'
2026-11-23 08:08:47,319 fail2ban.configreader   [9855]: ERROR   Found no accessible config files for 'filter.d/nosuch' under /tmp/shadow
2026-11-23 08:08:47,319 fail2ban.jailreader     [9855]: ERROR   Unable to read the filter 'nosuch'
2026-11-23 08:08:47,319 fail2ban.jailsreader    [9855]: ERROR   Errors in jail 'testauth'.
2026-11-23 08:08:47,321 fail2ban                [9855]: ERROR   ERROR: test configuration failed
";
        let messages = client_messages(
            &output(255, "", stderr),
            Some((Path::new("/tmp/shadow"), Path::new("/etc/fail2ban"))),
        );
        assert_eq!(
            messages,
            [
                "ERROR Found no accessible config files for 'filter.d/nosuch' under /etc/fail2ban",
                "ERROR Unable to read the filter 'nosuch'",
                "ERROR Errors in jail 'testauth'.",
            ]
        );

        let stderr = "\
2026-11-23 08:08:47,473 fail2ban                [9857]: ERROR   Failed during configuration: Source contains parsing errors: '/tmp/shadow/jail.d/testauth.local'
\t[line  2]: 'foo\\n'
2026-11-23 08:08:47,473 fail2ban                [9857]: ERROR   ERROR: test configuration failed
";
        let messages = client_messages(
            &output(255, "", stderr),
            Some((Path::new("/tmp/shadow"), Path::new("/etc/fail2ban"))),
        );
        assert_eq!(
            messages,
            [
                "ERROR Failed during configuration: Source contains parsing errors: \
              '/etc/fail2ban/jail.d/testauth.local'\n\t[line  2]: 'foo\\n'"
            ]
        );
    }

    #[test]
    fn messages_from_a_failed_reload() {
        let stderr = "2026-11-23 08:09:01,363 fail2ban                [9983]: ERROR   NOK: (\"Unknown backend nosuch.\",)\n";
        let stdout = "Unknown backend nosuch. Must be among ['pyinotify', 'gamin', 'polling', 'systemd'] or 'auto'\n";
        assert_eq!(
            client_messages(&output(255, stdout, stderr), None),
            [
                "ERROR NOK: (\"Unknown backend nosuch.\",)",
                "Unknown backend nosuch. Must be among ['pyinotify', 'gamin', 'polling', 'systemd'] or 'auto'",
            ]
        );
        assert_eq!(
            client_messages(&output(0, "OK\n", ""), None),
            Vec::<String>::new()
        );
        assert_eq!(
            client_messages(&output(3, "", ""), None),
            ["fail2ban-client exited with status 3 and printed no message"]
        );
        let traceback =
            "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: boom\n";
        assert_eq!(
            client_messages(&output(1, "", traceback), None),
            ["ValueError: boom"]
        );
    }

    #[tokio::test]
    async fn run_reports_missing_programs_and_timeouts() {
        let err = run(
            Path::new("/nonexistent/fail2ban-client"),
            &[],
            Duration::from_secs(5),
            None,
        )
        .await
        .expect_err("missing");
        assert!(err.to_string().contains("install fail2ban"), "{err}");
        let err = run(
            Path::new("sleep"),
            &["5".into()],
            Duration::from_millis(100),
            None,
        )
        .await
        .expect_err("slow");
        assert!(matches!(err, ToolError::Timeout { .. }), "{err}");
        let done = run(
            Path::new("sh"),
            &["-c".into(), "echo out; echo err >&2; exit 3".into()],
            Duration::from_secs(5),
            None,
        )
        .await
        .expect("runs");
        assert_eq!(
            (done.code, done.stdout.as_str(), done.stderr.as_str()),
            (Some(3), "out\n", "err\n")
        );
    }
}
