//! `banhub backup <DIR>`: copies a live hub into an empty directory. The database first (a
//! snapshot of one moment), then the CA and the secrets key, then the manifest last, so a backup
//! cut short has no manifest and restore refuses it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::BackupError;
use super::files::{copy_private, io_error, private_dir, run_tool, sync_dir, write_private};
use super::manifest::{
    CA_CERT, CA_KEY, DatabaseKind, FORMAT, MANIFEST, Manifest, PG_DUMP_FILE, SECRETS_KEY,
    SQLITE_FILE, describe,
};
use crate::config::Config;
use crate::store::backup as db;

/// A backup written.
#[derive(Debug)]
pub struct Taken {
    pub manifest: Manifest,
    pub elapsed: Duration,
}

/// Writes a backup of the hub that `config` describes into `dir`, which must be missing or empty.
pub async fn backup(config: &Config, dir: &Path) -> Result<Taken, BackupError> {
    let started = Instant::now();
    empty_target(dir)?;
    let url = config.database_url();
    let database = match db::sqlite_file(&url) {
        Some(file) => {
            if !file.exists() {
                return Err(BackupError::NoDatabase(file));
            }
            DatabaseKind::Sqlite
        }
        None => DatabaseKind::Postgres,
    };
    // Migrations run only as a hub starts, so the list read just before the copy is the copy's.
    let schema_version = db::applied_migrations(&url)
        .await?
        .pop()
        .ok_or(BackupError::NoSchema)?;
    match database {
        DatabaseKind::Sqlite => {
            let target = dir.join(SQLITE_FILE);
            let target_str = target
                .to_str()
                .ok_or_else(|| BackupError::NotUtf8(dir.to_owned()))?;
            // Created empty and private first: `VACUUM INTO` fills an empty file and keeps its mode.
            write_private(&target, b"")?;
            db::sqlite_snapshot(&url, target_str).await?;
        }
        DatabaseKind::Postgres => pg_dump(&url, &dir.join(PG_DUMP_FILE))?,
    }
    private_dir(&dir.join("ca"))?;
    let ca_dir = config.ca_dir();
    let sources: [(&str, PathBuf); 3] = [
        (CA_CERT, ca_dir.join("ca.pem")),
        (CA_KEY, ca_dir.join("ca.key")),
        (SECRETS_KEY, config.secrets_key_file()),
    ];
    for (name, source) in &sources {
        copy_private(source, &dir.join(name))?;
    }
    let mut files = BTreeMap::new();
    for name in Manifest::expected_files(database) {
        let path = dir.join(name);
        files.insert(name.to_owned(), describe(&path).map_err(io_error(&path))?);
    }
    let manifest = Manifest {
        format: FORMAT,
        banhub_version: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version,
        database,
        created_at: Utc::now(),
        files,
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Io {
        path: dir.join(MANIFEST),
        source: e.into(),
    })?;
    sync_dir(&dir.join("ca"))?;
    write_private(&dir.join(MANIFEST), &text)?;
    sync_dir(dir)?;
    Ok(Taken {
        manifest,
        elapsed: started.elapsed(),
    })
}

/// Creates `dir` (mode 0700) or checks that it is empty.
fn empty_target(dir: &Path) -> Result<(), BackupError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(BackupError::NotEmpty(dir.to_owned())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => private_dir(dir),
        Err(source) => Err(BackupError::Io {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// `pg_dump --format=custom` of the database at `url` into `target`.
fn pg_dump(url: &str, target: &Path) -> Result<(), BackupError> {
    let target_str = target
        .to_str()
        .ok_or_else(|| BackupError::NotUtf8(target.to_owned()))?;
    let shown = format!("pg_dump --format=custom --file={target_str} --dbname=\"$DATABASE_URL\"");
    run_tool(
        "pg_dump",
        &[
            "--format=custom",
            "--no-owner",
            "--file",
            target_str,
            "--dbname",
            url,
        ],
        shown,
    )?;
    // pg_dump writes with the umask's mode; the dump holds every secret the database does.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o600))
        .map_err(io_error(target))
}
