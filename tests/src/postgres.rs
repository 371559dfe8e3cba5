//! Throwaway PostgreSQL servers for tests: `initdb` into a temporary directory, `pg_ctl start` on
//! 127.0.0.1 with a free port, trust authentication and `fsync=off`; stopped and removed when dropped.
//!
//! `initdb` refuses to run as root, so as root every server-side command runs as the `postgres` system
//! user (`runuser -u postgres --`) in a directory handed over to that user (COMPONENTS.md section 2).

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::process::tail;
use crate::wait::POLL_INTERVAL;

const INSTALL_HINT: &str =
    "install it with .ci/install-deps (Debian package `postgresql`, version 15)";
/// Where Debian puts the server binaries; `BANHUB_TEST_PG_BIN` overrides.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
const PREFERRED_VERSION: &str = "15";
const SUPERUSER: &str = "postgres";
/// `pg_ctl -w` polls for readiness itself; this bounds it.
const START_TIMEOUT_SECS: u32 = 30;
const READY_DEADLINE: Duration = Duration::from_secs(10);
/// A port picked as free can be taken by someone else before the server binds it; try again then.
const PORT_ATTEMPTS: usize = 5;

/// Settings appended to `postgresql.conf`: loopback only, a private socket directory, and no
/// durability (a test database is thrown away).
const SETTINGS: &str = "
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 32MB
log_min_messages = warning
";

/// A running PostgreSQL server owned by the test. Layout of [`PostgresServer::dir`]: `data/` (the
/// cluster), `postgres.log` (the server log), the Unix socket.
#[derive(Debug)]
pub struct PostgresServer {
    dir: TempDir,
    bin_dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
    running: bool,
    /// Stops the server if this process dies without running `Drop` (a killed test).
    watchdog: Option<Child>,
}

impl PostgresServer {
    /// Creates a cluster in a new temporary directory and starts it on a free port of 127.0.0.1.
    pub fn start() -> anyhow::Result<Self> {
        let bin_dir = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("banhub-pg-")
            .tempdir()
            .context("creating the PostgreSQL directory")?;
        // The directory was just created by this process, so its owner tells who we run as.
        let as_postgres_user = fs::metadata(dir.path())?.uid() == 0;
        if as_postgres_user {
            let (uid, gid) = system_user(SUPERUSER)?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .with_context(|| format!("handing {} to {SUPERUSER}", dir.path().display()))?;
        }
        let mut server = Self {
            dir,
            bin_dir,
            port: 0,
            as_postgres_user,
            running: false,
            watchdog: None,
        };
        server.init()?;
        server.start_on_free_port()?;
        server.watchdog = server.spawn_watchdog().ok();
        Ok(server)
    }

    /// The temporary directory holding the cluster and its log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// URL of the default database (`postgres`), as the superuser.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// URL of database `name` on this server, as the superuser.
    pub fn url_for(&self, name: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates an empty database and returns its URL. Names are `[a-z_][a-z0-9_]*`, at most 63 bytes.
    pub fn create_database(&self, name: &str) -> anyhow::Result<String> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            bail!("database name {name:?} must match [a-z_][a-z0-9_]{{0,62}}");
        }
        let output = Command::new(self.bin_dir.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                SUPERUSER,
            ])
            .arg(name)
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running createdb; {INSTALL_HINT}"))?;
        if !output.status.success() {
            bail!(
                "createdb {name} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            );
        }
        Ok(self.url_for(name))
    }

    /// The end of the server log, for failure messages.
    pub fn logs(&self) -> String {
        let log = self.log_path();
        format!(
            "--- end of {} ---\n{}",
            log.display(),
            tail(&fs::read_to_string(&log).unwrap_or_default(), 30)
        )
    }

    /// Stops the server at once (`pg_ctl -m immediate stop`); the directory stays until drop.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if !self.running {
            return Ok(());
        }
        let output = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "-t", "10", "stop"])
            .output()
            .with_context(|| format!("running pg_ctl stop; {INSTALL_HINT}"))?;
        self.running = false;
        if !output.status.success() {
            bail!(
                "pg_ctl stop failed ({}): {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end(),
                self.logs()
            );
        }
        Ok(())
    }

    /// Starts a server that [`PostgresServer::stop`] stopped, on the same port and with the same
    /// data, and waits until it accepts connections; does nothing when it runs.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.running {
            return Ok(());
        }
        self.pg_ctl_start()?;
        self.running = true;
        self.wait_accepting()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join("postgres.log")
    }

    /// A command for a server binary, as the `postgres` user when we are root. It runs in the
    /// temporary directory, which that user can enter (unlike, say, /root).
    fn server_command(&self, program: &str) -> Command {
        let binary = self.bin_dir.join(program);
        let mut command = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", SUPERUSER, "--"]).arg(binary);
            c
        } else {
            Command::new(binary)
        };
        command.current_dir(self.dir()).stdin(Stdio::null());
        command
    }

    fn init(&self) -> anyhow::Result<()> {
        let output = self
            .server_command("initdb")
            .arg("-D")
            .arg(self.data_dir())
            .args([
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ])
            .output()
            .with_context(|| format!("running initdb; {INSTALL_HINT}"))?;
        if !output.status.success() {
            bail!(
                "initdb failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end(),
                String::from_utf8_lossy(&output.stdout).trim_end()
            );
        }
        // Appending keeps the file's owner, so this works as root and as the owner alike.
        let conf = self.data_dir().join("postgresql.conf");
        let mut file = OpenOptions::new()
            .append(true)
            .open(&conf)
            .with_context(|| format!("opening {}", conf.display()))?;
        let socket_dir = self.dir().display().to_string().replace('\'', "''");
        writeln!(file, "{SETTINGS}unix_socket_directories = '{socket_dir}'")
            .with_context(|| format!("writing {}", conf.display()))?;
        Ok(())
    }

    fn start_on_free_port(&mut self) -> anyhow::Result<()> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            self.port = free_port()?;
            match self.pg_ctl_start() {
                Ok(()) => {
                    self.running = true;
                    return self.wait_accepting();
                }
                Err(e) => {
                    let log = fs::read_to_string(self.log_path()).unwrap_or_default();
                    let port_taken =
                        log.contains("could not bind") || log.contains("Address already in use");
                    if !port_taken {
                        return Err(e);
                    }
                    last_error = Some(e);
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow::anyhow!("no attempt made"))
            .context(format!("no free port after {PORT_ATTEMPTS} attempts")))
    }

    fn pg_ctl_start(&self) -> anyhow::Result<()> {
        // `-w -t` makes pg_ctl poll until the server accepts connections, with a deadline. The
        // postmaster's output goes to the log file, so no pipe of ours is held open by it.
        let output = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .arg("-o")
            .arg(format!("-p {}", self.port))
            .args(["-w", "-t", &START_TIMEOUT_SECS.to_string(), "start"])
            .output()
            .with_context(|| format!("running pg_ctl start; {INSTALL_HINT}"))?;
        if !output.status.success() {
            bail!(
                "pg_ctl start failed ({}): {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end(),
                self.logs()
            );
        }
        Ok(())
    }

    /// pg_ctl may report readiness through the Unix socket; the tests use TCP, so check that too.
    fn wait_accepting(&self) -> anyhow::Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "PostgreSQL does not accept connections on {addr} after {READY_DEADLINE:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// A detached shell (its own session, so a test runner killing our process group spares it) that
    /// stops the server and removes the directory once this process is gone. `pg_ctl` detaches the
    /// postmaster, so without this a test killed on timeout would leave the server running.
    fn spawn_watchdog(&self) -> anyhow::Result<Child> {
        let mut stop: Vec<String> = Vec::new();
        if self.as_postgres_user {
            stop.extend(["runuser", "-u", SUPERUSER, "--"].map(str::to_owned));
        }
        stop.push(self.bin_dir.join("pg_ctl").display().to_string());
        stop.extend(["-D".to_owned(), self.data_dir().display().to_string()]);
        stop.extend(["-m", "immediate", "stop"].map(str::to_owned));
        let script = "parent=$1; dir=$2; shift 2\n\
                      while kill -0 \"$parent\" 2>/dev/null; do sleep 1; done\n\
                      \"$@\" >/dev/null 2>&1\n\
                      rm -rf \"$dir\"\n";
        Command::new("setsid")
            .args(["sh", "-c", script, "banhub-pg-watchdog"])
            .arg(std::process::id().to_string())
            .arg(self.dir())
            .args(stop)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the PostgreSQL watchdog")
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = self.stop();
    }
}

/// The server binaries: `BANHUB_TEST_PG_BIN`, else Debian's version 15, else the newest installed.
fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("BANHUB_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() {
            return Ok(dir);
        }
        bail!(
            "BANHUB_TEST_PG_BIN={} holds no initdb; {INSTALL_HINT}",
            dir.display()
        );
    }
    find_bin_dir(Path::new(DEBIAN_ROOT))
}

fn find_bin_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let preferred = root.join(PREFERRED_VERSION).join("bin");
    if preferred.join("initdb").is_file() {
        return Ok(preferred);
    }
    let newest = fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    match newest {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "PostgreSQL is not installed ({}/{PREFERRED_VERSION}/bin/initdb is missing); {INSTALL_HINT}",
            root.display()
        ),
    }
}

/// The uid and gid of a system user, from /etc/passwd.
fn system_user(name: &str) -> anyhow::Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == name)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .with_context(|| {
            format!("there is no `{name}` system user to run PostgreSQL as root; {INSTALL_HINT}")
        })
}

/// A port that was free a moment ago (the caller retries if it is taken before use).
fn free_port() -> anyhow::Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_install_script() {
        let empty = tempfile::tempdir().expect("tempdir");
        let err = find_bin_dir(empty.path()).expect_err("nothing installed");
        let message = format!("{err:#}");
        assert!(message.contains(".ci/install-deps"), "{message}");
        assert!(message.contains("initdb"), "{message}");
    }

    #[test]
    fn server_starts_creates_databases_and_is_removed_on_drop() {
        let server = PostgresServer::start().expect("postgres");
        let dir = server.dir().to_owned();
        assert_ne!(server.port(), 5432);
        assert!(
            TcpStream::connect((Ipv4Addr::LOCALHOST, server.port())).is_ok(),
            "{}",
            server.logs()
        );
        let url = server.create_database("harness_db").expect("createdb");
        assert_eq!(
            url,
            format!("postgres://postgres@127.0.0.1:{}/harness_db", server.port())
        );
        assert!(server.create_database("harness_db").is_err(), "exists");
        assert!(server.create_database("Bad-Name").is_err());
        assert!(server.create_database("x; drop").is_err());
        let conf = fs::read_to_string(dir.join("data/postgresql.conf")).expect("conf");
        assert!(conf.contains("fsync = off"), "{conf}");
        let port = server.port();
        drop(server);
        assert!(!dir.exists(), "{} was not removed", dir.display());
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err());
    }

    #[test]
    fn a_stopped_server_starts_again_on_its_port_with_its_data() {
        let mut server = PostgresServer::start().expect("postgres");
        server.create_database("kept_db").expect("createdb");
        let port = server.port();
        server.stop().expect("stop");
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err());
        server.start_again().expect("start again");
        assert_eq!(server.port(), port);
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok());
        assert!(
            server.create_database("kept_db").is_err(),
            "the database is still there"
        );
    }

    #[test]
    fn two_servers_run_side_by_side() {
        let a = PostgresServer::start().expect("first");
        let b = PostgresServer::start().expect("second");
        assert_ne!(a.port(), b.port());
        assert_ne!(a.url(), b.url());
    }
}
