//! `banhub restore <DIR>`: checks a backup against its manifest and this binary, refuses to replace
//! an existing hub's files without `--force`, copies every file next to its place, checks the
//! copies, and only then moves them into place, so a refused or failed restore changes nothing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::BackupError;
use super::files::{
    copy_private, io_error, private_dir, remove_if_present, run_tool, sync_dir, with_suffix,
};
use super::manifest::{CA_CERT, CA_KEY, DatabaseKind, Manifest, SECRETS_KEY, describe};
use crate::config::Config;
use crate::store::backup as db;

/// A restore done.
#[derive(Debug)]
pub struct Restored {
    pub manifest: Manifest,
    pub elapsed: Duration,
}

/// Suffix of a file copied next to its place, before the move.
const STAGED: &str = ".restoring";

/// Restores the backup in `dir` into the hub that `config` describes (which must not be running).
pub async fn restore(config: &Config, dir: &Path, force: bool) -> Result<Restored, BackupError> {
    let started = Instant::now();
    let manifest = Manifest::verify(dir, &db::migration_names())?;
    let url = config.database_url();
    let sqlite = db::sqlite_file(&url);
    let configured = match sqlite {
        Some(_) => DatabaseKind::Sqlite,
        None => DatabaseKind::Postgres,
    };
    if manifest.database != configured {
        return Err(BackupError::Mismatch {
            backup: manifest.database,
            configured,
        });
    }
    let ca_dir = config.ca_dir();
    let mut places: Vec<(&str, PathBuf)> = vec![
        (CA_CERT, ca_dir.join("ca.pem")),
        (CA_KEY, ca_dir.join("ca.key")),
        (SECRETS_KEY, config.secrets_key_file()),
    ];
    if let Some(file) = &sqlite {
        places.push((manifest.database.file(), file.clone()));
    }
    if !force {
        if let Some((_, existing)) = places.iter().find(|(_, place)| place.exists()) {
            return Err(BackupError::Exists(existing.clone()));
        }
        if sqlite.is_none() && db::has_schema(&url).await? {
            return Err(BackupError::Exists(PathBuf::from(
                "the PostgreSQL database's banhub schema",
            )));
        }
    }
    private_dir(&config.data_dir)?;
    let staged = match stage(dir, &manifest, &places) {
        Ok(staged) => staged,
        Err(e) => {
            for (_, place) in &places {
                let _ = remove_if_present(&with_suffix(place, STAGED));
            }
            return Err(e);
        }
    };
    if sqlite.is_none() {
        pg_restore(&url, &dir.join(manifest.database.file()))?;
    }
    for (staged, place) in staged {
        if sqlite.as_deref() == Some(place.as_path()) {
            // A write-ahead log left by the replaced database would be replayed into the restored one.
            remove_if_present(&with_suffix(&place, "-wal"))?;
            remove_if_present(&with_suffix(&place, "-shm"))?;
        }
        std::fs::rename(&staged, &place).map_err(io_error(&place))?;
        if let Some(parent) = place.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(Restored {
        manifest,
        elapsed: started.elapsed(),
    })
}

/// Copies each backup file next to its place and checks the copy against the manifest.
fn stage(
    dir: &Path,
    manifest: &Manifest,
    places: &[(&str, PathBuf)],
) -> Result<Vec<(PathBuf, PathBuf)>, BackupError> {
    let mut staged = Vec::new();
    for (name, place) in places {
        if let Some(parent) = place.parent() {
            private_dir(parent)?;
        }
        let copy = with_suffix(place, STAGED);
        remove_if_present(&copy)?;
        copy_private(&dir.join(name), &copy)?;
        let written = describe(&copy).map_err(io_error(&copy))?;
        if let Some(expected) = manifest.files.get(*name)
            && expected.sha256 != written.sha256
        {
            return Err(super::ManifestError::Checksum {
                file: copy.display().to_string(),
                expected: expected.sha256.clone(),
                actual: written.sha256,
            }
            .into());
        }
        staged.push((copy, place.clone()));
    }
    Ok(staged)
}

/// Loads a `pg_dump --format=custom` file into the database at `url` in one transaction, replacing
/// the objects it holds.
fn pg_restore(url: &str, dump: &Path) -> Result<(), BackupError> {
    let dump_str = dump
        .to_str()
        .ok_or_else(|| BackupError::NotUtf8(dump.to_owned()))?;
    let shown = format!(
        "pg_restore --clean --if-exists --no-owner --single-transaction --dbname=\"$DATABASE_URL\" {dump_str}"
    );
    run_tool(
        "pg_restore",
        &[
            "--clean",
            "--if-exists",
            "--no-owner",
            "--single-transaction",
            "--dbname",
            url,
            dump_str,
        ],
        shown,
    )
}
