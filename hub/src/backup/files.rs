//! The file operations of a backup and a restore: private directories and files (mode 0700 and
//! 0600, since they hold keys), copies flushed to disk, and the PostgreSQL client tools.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::BackupError;

pub fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Creates `dir` and its missing parents, each new one readable by the owner only.
pub fn private_dir(dir: &Path) -> Result<(), BackupError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error(dir))
}

/// A new file at `path` with mode 0600, failing if it exists.
pub fn create_private(path: &Path) -> Result<fs::File, BackupError> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(path))
}

/// Copies `from` into a new private file `to`, flushed to disk.
pub fn copy_private(from: &Path, to: &Path) -> Result<(), BackupError> {
    let mut source = fs::File::open(from).map_err(io_error(from))?;
    let mut target = create_private(to)?;
    std::io::copy(&mut source, &mut target).map_err(io_error(to))?;
    target.sync_all().map_err(io_error(to))
}

/// Writes `contents` into a new private file `path`, flushed to disk.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), BackupError> {
    let mut file = create_private(path)?;
    file.write_all(contents).map_err(io_error(path))?;
    file.sync_all().map_err(io_error(path))
}

/// Flushes a directory's entries (new and renamed files) to disk.
pub fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Removes `path` if it exists.
pub fn remove_if_present(path: &Path) -> Result<(), BackupError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BackupError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Runs a PostgreSQL client tool; `shown` is the command line to suggest without the database URL
/// (which may hold a password).
pub fn run_tool(program: &'static str, args: &[&str], shown: String) -> Result<(), BackupError> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| BackupError::ToolMissing {
            program,
            source,
            command: shown,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(BackupError::ToolFailed {
        program,
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}
