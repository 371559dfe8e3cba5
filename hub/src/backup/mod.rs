//! Backing a hub up and restoring it (`banhub backup <DIR>`, `banhub restore <DIR>`): a consistent
//! copy of the live database (SQLite's `VACUUM INTO`, or `pg_dump` on PostgreSQL), the internal CA,
//! the secrets key and a manifest of versions and checksums; and a restore that checks all of it
//! before it changes anything.

mod files;
mod manifest;
mod restore;
mod take;

use std::path::PathBuf;

pub use manifest::{
    CA_CERT, CA_KEY, DatabaseKind, FileEntry, MANIFEST, Manifest, ManifestError, PG_DUMP_FILE,
    SECRETS_KEY, SQLITE_FILE,
};
pub use restore::{Restored, restore};
pub use take::{Taken, backup};

use crate::store::StoreError;

/// Why a backup or a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not empty; a backup goes into a new or empty directory", .0.display())]
    NotEmpty(PathBuf),
    #[error("{} is not valid UTF-8; choose a backup directory with a UTF-8 path", .0.display())]
    NotUtf8(PathBuf),
    #[error("there is no database at {}: is --data-dir (or database.url) this hub's?", .0.display())]
    NoDatabase(PathBuf),
    #[error("the database holds no banhub schema: is database.url this hub's?")]
    NoSchema,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(
        "cannot run {program} ({source}); install PostgreSQL's client tools, or run it yourself: \
         {command}"
    )]
    ToolMissing {
        program: &'static str,
        source: std::io::Error,
        command: String,
    },
    #[error("{program} failed ({status}): {stderr}")]
    ToolFailed {
        program: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{} exists; restore replaces it only with --force (stop the hub first)", .0.display())]
    Exists(PathBuf),
    #[error(
        "the backup holds a {backup:?} database but this hub is configured for {configured:?}; \
         set database.url to match"
    )]
    Mismatch {
        backup: DatabaseKind,
        configured: DatabaseKind,
    },
}
