//! Real fail2ban servers in throwaway directories, for integration tests and benchmarks.
//!
//! Each [`Fail2banSandbox`] writes a private config directory (COMPONENTS.md section 1: file
//! actions only, no firewall, `dbfile = :memory:`), runs `fail2ban-server -f` on it as a child
//! process and kills that process when dropped. Nothing touches `/etc/fail2ban` or the system
//! service, so tests run as any user and side by side.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;

const SERVER: &str = "fail2ban-server";
const CLIENT: &str = "fail2ban-client";
const INSTALL_HINT: &str = "install it with .ci/install-deps (Debian package `fail2ban`)";
/// The stock action the `dummyjail` jail uses.
const DUMMY_ACTION: &str = "/etc/fail2ban/action.d/dummy.conf";
/// The filters the installed fail2ban package ships.
const SHIPPED_FILTERS: &str = "/etc/fail2ban/filter.d";
const READY_DEADLINE: Duration = Duration::from_secs(10);
/// Stopping runs `actionunban` for every banned address (a shell each for `filelog`).
const STOP_DEADLINE: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// `pickle.dumps(['status'], 2)` + terminator: the harness checks readiness without depending on
/// the agent code under test.
const STATUS_REQUEST: &[u8] = b"\x80\x02]q\x00X\x06\x00\x00\x00statusq\x01a.<F2B_END_COMMAND>";
const END_COMMAND: &[u8] = b"<F2B_END_COMMAND>";

/// Options for a sandbox; [`SandboxBuilder::start`] launches it.
#[derive(Debug, Clone)]
pub struct SandboxBuilder {
    name: String,
    extra_jails: usize,
    named_jails: Vec<String>,
    persistent_db: bool,
    backend: String,
    shipped_filters: bool,
    launcher: Vec<OsString>,
}

impl SandboxBuilder {
    /// Names the sandbox (part of its temporary directory's name, to tell servers apart).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Adds `n` jails `extra01`, `extra02`, ... watching `<jail>.log`, with a no-op action so
    /// that banning thousands of addresses takes about a second instead of a shell per ban.
    /// They use `backend = polling`: each pyinotify jail holds an inotify instance, and a user
    /// gets only `fs.inotify.max_user_instances` (128 by default) across all servers.
    pub fn extra_jails(mut self, n: usize) -> Self {
        self.extra_jails = n;
        self
    }

    /// Adds extra jails (like [`Self::extra_jails`]) with these names, after the numbered ones, for
    /// tests whose callbacks name jails such as `sshd`: the agent refuses callbacks for jails its
    /// fail2ban does not run.
    pub fn named_jails(mut self, names: &[&str]) -> Self {
        self.named_jails
            .extend(names.iter().map(|name| (*name).to_owned()));
        self
    }

    /// Keeps bans in `f2b.sqlite3` in the sandbox (restored after a restart) instead of
    /// `:memory:`.
    pub fn persistent_db(mut self, persistent: bool) -> Self {
        self.persistent_db = persistent;
        self
    }

    /// The log backend: `auto` (pyinotify, ~0.06 s from log line to ban; the default) or
    /// `polling` (~0.6 s).
    pub fn backend(mut self, backend: &str) -> Self {
        self.backend = backend.to_owned();
        self
    }

    /// Copies the filters the installed fail2ban ships (`/etc/fail2ban/filter.d`: `sshd`,
    /// `nginx-http-auth`, `common.conf`, ...) into the sandbox's `filter.d`, beside `testauth`.
    pub fn shipped_filters(mut self) -> Self {
        self.shipped_filters = true;
        self
    }

    /// Runs the server under this command prefix, e.g. `nsenter --net=…` to put it and its
    /// actions into a network namespace ([`crate::netns::NetNs::launcher`]).
    pub fn launcher(mut self, prefix: Vec<OsString>) -> Self {
        self.launcher = prefix;
        self
    }

    /// Writes the config, starts the server and waits until it has started every jail.
    pub fn start(self) -> anyhow::Result<Fail2banSandbox> {
        let server = find_program(SERVER)?;
        let client = find_program(CLIENT)?;
        let label: String = self
            .name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(24)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("banhub-f2b-{label}-"))
            .tempdir()
            .context("creating the sandbox directory")?;
        let socket = dir.path().join("f2b.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "socket path {} is longer than {MAX_SOCKET_PATH} bytes; point TMPDIR at a shorter directory",
                socket.display()
            );
        }
        let mut jails = vec!["testauth".to_owned(), "dummyjail".to_owned()];
        jails.extend((1..=self.extra_jails).map(|i| format!("extra{i:02}")));
        jails.extend(self.named_jails.iter().cloned());
        let mut sandbox = Fail2banSandbox {
            dir,
            child: None,
            client,
            jails,
            launcher: self.launcher.clone(),
        };
        sandbox.write_config(&self)?;
        sandbox.spawn(&server)?;
        sandbox.wait_ready()?;
        Ok(sandbox)
    }
}

/// A running `fail2ban-server` with its own config, socket, logs and action records.
///
/// Layout of [`Fail2banSandbox::dir`]: `conf/` (the config directory), `f2b.sock`, `f2b.pid`,
/// `fail2ban.log` (the server's log), `server.out` (its stdout/stderr), `auth.log` (watched by
/// `testauth`), `auth2.log` (watched by `dummyjail`), `<jail>.log` for extra jails,
/// `actions.txt` (`start`/`ban`/`unban` lines from the `filelog` action) and `dummy.txt`
/// (`+ip`/`-ip` lines from the stock `dummy` action of `dummyjail`).
#[derive(Debug)]
pub struct Fail2banSandbox {
    dir: TempDir,
    child: Option<Child>,
    client: PathBuf,
    jails: Vec<String>,
    launcher: Vec<OsString>,
}

impl Fail2banSandbox {
    /// Options beyond the default two jails; see [`SandboxBuilder`].
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder {
            name: "sandbox".to_owned(),
            extra_jails: 0,
            named_jails: Vec::new(),
            persistent_db: false,
            backend: "auto".to_owned(),
            shipped_filters: false,
            launcher: Vec::new(),
        }
    }

    /// Starts a server with the jails `testauth` and `dummyjail`.
    pub fn start(name: &str) -> anyhow::Result<Self> {
        Self::builder().name(name).start()
    }

    /// The sandbox directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The config directory (pass it as `-c` to `fail2ban-client reload`).
    pub fn conf_dir(&self) -> PathBuf {
        self.dir().join("conf")
    }

    /// The control socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir().join("f2b.sock")
    }

    /// The log file a jail watches.
    pub fn log_path(&self, jail: &str) -> PathBuf {
        match jail {
            "testauth" => self.dir().join("auth.log"),
            "dummyjail" => self.dir().join("auth2.log"),
            other => self.dir().join(format!("{other}.log")),
        }
    }

    /// Where the `filelog` action records `start`, `ban`, `unban` and `stop` lines.
    pub fn actions_path(&self) -> PathBuf {
        self.dir().join("actions.txt")
    }

    /// The server's own log.
    pub fn server_log_path(&self) -> PathBuf {
        self.dir().join("fail2ban.log")
    }

    /// The configured jails: `testauth`, `dummyjail`, then any extra jails.
    pub fn jails(&self) -> &[String] {
        &self.jails
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Appends `n` lines `YYYY-mm-dd HH:MM:SS Failed login for root from <ip>` (local time now,
    /// so they fall inside `findtime`) to a watched log, in one write.
    pub fn append_failures(&self, jail_log: &Path, ip: &str, n: usize) -> anyhow::Result<()> {
        let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
        let mut lines = String::new();
        for _ in 0..n {
            let _ = writeln!(lines, "{now} Failed login for root from {ip}");
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(jail_log)
            .with_context(|| format!("opening {}", jail_log.display()))?;
        file.write_all(lines.as_bytes())
            .with_context(|| format!("appending to {}", jail_log.display()))
    }

    /// Runs `fail2ban-client -c <conf> -s <socket> <args>` and returns its stdout without the
    /// trailing newline; a non-zero exit is an error carrying stderr.
    pub fn client(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = Command::new(&self.client)
            .arg("-c")
            .arg(self.conf_dir())
            .arg("-s")
            .arg(self.socket_path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {CLIENT}; {INSTALL_HINT}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned();
        if !output.status.success() {
            bail!(
                "`{CLIENT} {}` failed ({})\nstderr: {}\nstdout: {stdout}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end(),
            );
        }
        Ok(stdout)
    }

    /// Stops the server cleanly and starts it again on the same configuration (with the default
    /// in-memory database its bans are gone); returns once every jail that ran before runs again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let before = self.running_jails()?;
        self.stop()?;
        let server = find_program(SERVER)?;
        self.spawn(&server)?;
        let deadline = Instant::now() + STOP_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "{SERVER} exited while restarting ({status})\n{}",
                    self.logs()
                );
            }
            if self
                .running_jails()
                .is_ok_and(|now| before.iter().all(|j| now.contains(j)))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{SERVER} did not run {before:?} again within {STOP_DEADLINE:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The jails the server runs, from the `Jail list:` line of `status`.
    pub fn running_jails(&self) -> anyhow::Result<Vec<String>> {
        let status = self.client(&["status"])?;
        Ok(status
            .lines()
            .find_map(|l| l.split_once("Jail list:"))
            .map(|(_, list)| {
                list.split(',')
                    .map(|j| j.trim().to_owned())
                    .filter(|j| !j.is_empty())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Stops the server with SIGTERM (a clean shutdown: `actionstop`, unbans, socket removed)
    /// and waits for it; SIGKILL if it has not exited after 30 s.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        // The child stays in `self.child` until it has been reaped, so that on any error below
        // `Drop` still kills it.
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        if child.try_wait()?.is_none() {
            // `kill(1)` rather than libc: the workspace forbids unsafe code.
            let status = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status()
                .context("running kill")?;
            if !status.success() {
                bail!("kill -TERM {} failed: {status}", child.id());
            }
            let deadline = Instant::now() + STOP_DEADLINE;
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    child.kill()?;
                    child.wait()?;
                    self.child = None;
                    bail!(
                        "{SERVER} ignored SIGTERM for {STOP_DEADLINE:?} and was killed\n{}",
                        self.logs()
                    );
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        self.child = None;
        Ok(())
    }

    /// The server's stdout/stderr, the errors in its log and the end of its log, for messages.
    pub fn logs(&self) -> String {
        let read = |path: &Path| fs::read_to_string(path).unwrap_or_default();
        let tail = |text: &str, n: usize| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        let log = read(&self.server_log_path());
        // Shutting down after an error logs a line per jail, pushing the error out of the tail.
        let errors: Vec<String> = log
            .lines()
            .filter(|line| line.contains(" ERROR "))
            .take(10)
            .map(|line| line.chars().take(600).collect())
            .collect();
        format!(
            "--- {out} ---\n{}\n--- errors in {log_path} ---\n{}\n--- end of {log_path} ---\n{}",
            tail(&read(&self.dir().join("server.out")), 20),
            errors.join("\n"),
            tail(&log, 30),
            out = self.dir().join("server.out").display(),
            log_path = self.server_log_path().display(),
        )
    }

    fn write_config(&self, options: &SandboxBuilder) -> anyhow::Result<()> {
        let dir = self.dir();
        let d = dir.display();
        let conf = self.conf_dir();
        fs::create_dir_all(conf.join("filter.d"))?;
        fs::create_dir_all(conf.join("action.d"))?;
        let dbfile = if options.persistent_db {
            format!("{d}/f2b.sqlite3")
        } else {
            ":memory:".to_owned()
        };
        let files = [
            (
                "fail2ban.conf",
                format!(
                    "[Definition]\n\
                     loglevel = INFO\n\
                     logtarget = {d}/fail2ban.log\n\
                     socket = {d}/f2b.sock\n\
                     pidfile = {d}/f2b.pid\n\
                     dbfile = {dbfile}\n\
                     dbpurgeage = 1d\n\
                     syslogsocket = auto\n\
                     allowipv6 = auto\n"
                ),
            ),
            (
                "filter.d/testauth.conf",
                "[Definition]\n\
                 failregex = ^\\s*Failed login for \\S+ from <HOST>$\n\
                 ignoreregex =\n\
                 datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n"
                    .to_owned(),
            ),
            (
                "action.d/filelog.conf",
                format!(
                    "[Definition]\n\
                     actionstart = echo \"start <name>\" >> <target>\n\
                     actionstop = echo \"stop <name>\" >> <target>\n\
                     actioncheck =\n\
                     actionban = echo \"ban <name> <ip> failures=<failures> bantime=<bantime>\" >> <target>\n\
                     actionunban = echo \"unban <name> <ip>\" >> <target>\n\
                     [Init]\n\
                     target = {d}/actions.txt\n"
                ),
            ),
            // Empty commands make fail2ban skip the shell entirely ("Nothing to do").
            (
                "action.d/noop.conf",
                "[Definition]\n\
                 actionstart =\n\
                 actionstop =\n\
                 actioncheck =\n\
                 actionban =\n\
                 actionunban =\n"
                    .to_owned(),
            ),
            ("jail.conf", self.jail_conf(&options.backend)),
        ];
        for (name, text) in files {
            fs::write(conf.join(name), text).with_context(|| format!("writing conf/{name}"))?;
        }
        fs::copy(DUMMY_ACTION, conf.join("action.d/dummy.conf"))
            .with_context(|| format!("copying {DUMMY_ACTION}; {INSTALL_HINT}"))?;
        if options.shipped_filters {
            let shipped = fs::read_dir(SHIPPED_FILTERS)
                .with_context(|| format!("reading {SHIPPED_FILTERS}; {INSTALL_HINT}"))?;
            for entry in shipped {
                let path = entry?.path();
                if let Some(name) = path.file_name().filter(|_| path.is_file()) {
                    fs::copy(&path, conf.join("filter.d").join(name))
                        .with_context(|| format!("copying {}", path.display()))?;
                }
            }
        }
        for jail in &self.jails {
            let log = self.log_path(jail);
            fs::write(&log, "").with_context(|| format!("creating {}", log.display()))?;
        }
        Ok(())
    }

    fn jail_conf(&self, backend: &str) -> String {
        let d = self.dir().display();
        let mut text = format!(
            "[DEFAULT]\n\
             bantime = 600\n\
             findtime = 600\n\
             maxretry = 3\n\
             backend = {backend}\n\
             banaction = filelog\n\
             action = %(banaction)s\n\
             ignoreip = 127.0.0.1/8 ::1\n\
             \n\
             [testauth]\n\
             enabled = true\n\
             filter = testauth\n\
             logpath = {d}/auth.log\n\
             port = 22\n\
             \n\
             [dummyjail]\n\
             enabled = true\n\
             filter = testauth\n\
             logpath = {d}/auth2.log\n\
             action = dummy[target={d}/dummy.txt]\n"
        );
        for jail in self.jails.iter().skip(2) {
            let _ = write!(
                text,
                "\n[{jail}]\n\
                 enabled = true\n\
                 filter = testauth\n\
                 logpath = {}\n\
                 backend = polling\n\
                 action = noop\n",
                self.log_path(jail).display()
            );
        }
        text
    }

    fn spawn(&mut self, server: &Path) -> anyhow::Result<()> {
        let out_path = self.dir().join("server.out");
        let out = fs::File::create(&out_path)?;
        let mut command = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(server);
                command
            }
            None => Command::new(server),
        };
        let child = command
            .arg("-c")
            .arg(self.conf_dir())
            .args(["-f", "-x"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}; {INSTALL_HINT}", server.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the server has configured and started every jail. The socket answers before
    /// that, and "Server ready" is printed even when configuring failed (the server then exits
    /// with 255), so ready means: "Server ready" printed, no `NOK` (a failed config command) in
    /// the log, and `status` over the socket listing exactly the configured jails.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_DEADLINE;
        let out_path = self.dir().join("server.out");
        let mut jails = self.jails.clone();
        jails.sort();
        let jail_list = jails.join(", ");
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "{SERVER} exited during start-up ({status})\n{}",
                    self.logs()
                );
            }
            let configured =
                fs::read_to_string(&out_path).is_ok_and(|out| out.contains("Server ready"));
            if configured {
                let log = fs::read_to_string(self.server_log_path()).unwrap_or_default();
                if log.contains("NOK: ") {
                    bail!(
                        "{SERVER} failed to apply its configuration\n{}",
                        self.logs()
                    );
                }
                // The pickled reply holds the jail list as one UTF-8 string.
                let status = raw_status(&self.socket_path());
                if status.is_ok_and(|reply| contains(&reply, jail_list.as_bytes())) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                let status = match raw_status(&self.socket_path()) {
                    Ok(reply) => format!("status: {}", String::from_utf8_lossy(&reply)),
                    Err(e) => format!("status: {e:#}"),
                };
                bail!(
                    "{SERVER} was not ready after {READY_DEADLINE:?} (\"Server ready\" {}, expected \
                     jails {jail_list}, {status})\n{}",
                    if configured { "seen" } else { "not seen" },
                    self.logs()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Fail2banSandbox {
    /// Never leaves a server running: SIGKILL (use [`Fail2banSandbox::stop`] for a clean stop).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends `status` over the socket and returns the raw reply.
fn raw_status(socket: &Path) -> anyhow::Result<Vec<u8>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(STATUS_REQUEST)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(END_COMMAND) {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("connection closed");
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(reply)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Finds a program on PATH (or in /usr/bin and /usr/sbin, where Debian puts fail2ban).
fn find_program(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("{name} is not installed; {INSTALL_HINT}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_program_names_the_install_script() {
        let err = find_program("fail2ban-no-such-program").expect_err("not installed");
        let message = format!("{err:#}");
        assert!(
            message.contains("fail2ban-no-such-program is not installed"),
            "{message}"
        );
        assert!(message.contains(".ci/install-deps"), "{message}");
    }

    #[test]
    fn sandbox_starts_and_stops_cleanly() {
        let mut sandbox = Fail2banSandbox::start("harness").expect("sandbox");
        let pid = sandbox.pid().expect("running");
        assert!(sandbox.socket_path().exists());
        assert_eq!(
            sandbox.client(&["ping"]).expect("ping"),
            "Server replied: pong"
        );
        let conf = fs::read_to_string(sandbox.conf_dir().join("fail2ban.conf")).expect("conf");
        assert!(
            conf.contains("dbfile = :memory:") && conf.contains("allowipv6 = auto"),
            "{conf}"
        );
        assert!(sandbox.log_path("testauth").exists() && sandbox.log_path("dummyjail").exists());

        sandbox.stop().expect("stop");
        assert!(sandbox.pid().is_none());
        assert!(
            !sandbox.socket_path().exists(),
            "a clean stop removes the socket"
        );
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still exists"
        );
        let actions = fs::read_to_string(sandbox.actions_path()).expect("actions.txt");
        assert_eq!(actions, "start testauth\nstop testauth\n");
        assert!(sandbox.client(&["ping"]).is_err());
    }

    #[test]
    fn builder_options_reach_the_server() {
        let sandbox = Fail2banSandbox::builder()
            .name("options")
            .backend("polling")
            .persistent_db(true)
            .extra_jails(2)
            .start()
            .expect("sandbox");
        let db = sandbox.dir().join("f2b.sqlite3");
        let reply = sandbox.client(&["get", "dbfile"]).expect("dbfile");
        assert!(reply.ends_with(&db.display().to_string()), "{reply}");
        let status = sandbox.client(&["status"]).expect("status");
        assert!(
            status.ends_with("dummyjail, extra01, extra02, testauth"),
            "{status}"
        );
        assert_eq!(
            sandbox.jails(),
            ["testauth", "dummyjail", "extra01", "extra02"]
        );
        let log = fs::read_to_string(sandbox.server_log_path()).expect("log");
        assert!(log.contains("Jail 'testauth' uses poller"), "{log}");
    }

    #[test]
    fn drop_kills_the_server() {
        let sandbox = Fail2banSandbox::start("drop").expect("sandbox");
        let pid = sandbox.pid().expect("running");
        drop(sandbox);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still exists"
        );
    }

    #[test]
    fn failed_start_reports_the_server_log() {
        let err = Fail2banSandbox::builder()
            .name("broken")
            .backend("no-such-backend")
            .start()
            .expect_err("bad backend");
        let message = format!("{err:#}");
        assert!(message.contains("fail2ban.log"), "{message}");
        assert!(message.contains("no-such-backend"), "{message}");
    }
}
