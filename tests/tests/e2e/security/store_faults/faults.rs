//! The two ways a test takes the hub's database away and gives it back: SQLite's files made
//! immutable (`chattr +i`, as root), and the PostgreSQL server stopped and started again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use banhub_tests::PostgresServer;

/// Something that makes the hub's database unwritable and writable again.
pub trait StoreFault {
    /// Makes the database unwritable.
    fn engage(&mut self) -> anyhow::Result<()>;
    /// Makes it writable again.
    fn release(&mut self) -> anyhow::Result<()>;
}

/// A SQLite database and its `-wal` file made immutable. Dropping it makes them
/// writable again, also when the test panics; a detached watchdog does the same if the test
/// process is killed, so the temporary directory can still be removed.
pub struct ImmutableFiles {
    paths: Vec<PathBuf>,
    engaged: bool,
    watchdog: Option<Child>,
}

impl ImmutableFiles {
    /// The database at `db` with its `-wal` file. The `-shm` file stays writable: SQLite maps it
    /// into memory, and the kernel answers a write to a mapped page of an immutable file with
    /// SIGBUS, which ends any process; the failed writes to the other two are what a store meets.
    pub fn new(db: &Path) -> Self {
        let side = |suffix: &str| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        Self {
            paths: vec![db.to_owned(), side("-wal")],
            engaged: false,
            watchdog: None,
        }
    }

    /// A shell in its own session that runs `chattr -i` on the files once this process is gone.
    fn spawn_watchdog(&self) -> anyhow::Result<Child> {
        let script = "parent=$1; shift\n\
                      while kill -0 \"$parent\" 2>/dev/null; do sleep 1; done\n\
                      chattr -i \"$@\" >/dev/null 2>&1\n";
        Command::new("setsid")
            .args(["sh", "-c", script, "banhub-chattr-watchdog"])
            .arg(std::process::id().to_string())
            .args(&self.paths)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the chattr watchdog")
    }
}

fn chattr(flag: &str, path: &Path) -> anyhow::Result<()> {
    let output = Command::new("chattr")
        .arg(flag)
        .arg(path)
        .output()
        .context("running chattr (package e2fsprogs)")?;
    if !output.status.success() {
        bail!(
            "chattr {flag} {} failed ({}): {} (the test runs as root on ext4)",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(())
}

impl StoreFault for ImmutableFiles {
    fn engage(&mut self) -> anyhow::Result<()> {
        for path in &self.paths {
            if !path.exists() {
                bail!(
                    "{} does not exist: is the hub on SQLite in WAL mode?",
                    path.display()
                );
            }
        }
        self.watchdog = Some(self.spawn_watchdog()?);
        self.engaged = true;
        for path in &self.paths {
            chattr("+i", path)?;
        }
        Ok(())
    }

    fn release(&mut self) -> anyhow::Result<()> {
        for path in &self.paths {
            chattr("-i", path)?;
        }
        self.engaged = false;
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        Ok(())
    }
}

impl Drop for ImmutableFiles {
    fn drop(&mut self) {
        if self.engaged {
            for path in &self.paths {
                let _ = chattr("-i", path);
            }
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// The PostgreSQL server stopped (immediate shutdown) and started again on the same port.
pub struct StoppedPostgres<'a>(pub &'a mut PostgresServer);

impl StoreFault for StoppedPostgres<'_> {
    fn engage(&mut self) -> anyhow::Result<()> {
        self.0.stop()
    }

    fn release(&mut self) -> anyhow::Result<()> {
        self.0.start_again()
    }
}
