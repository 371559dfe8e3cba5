//! `manifest.json`, the table of contents of a backup: banhub's version, the schema version, when it
//! was taken, and the size and SHA-256 of every file; and the check that a backup directory matches
//! it before anything is restored.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "manifest.json";
/// The SQLite database's copy.
pub const SQLITE_FILE: &str = "banhub.db";
/// `pg_dump --format=custom` of a PostgreSQL database.
pub const PG_DUMP_FILE: &str = "banhub.pgdump";
/// The internal CA's certificate.
pub const CA_CERT: &str = "ca/ca.pem";
/// The internal CA's private key.
pub const CA_KEY: &str = "ca/ca.key";
/// The key that seals stored secrets.
pub const SECRETS_KEY: &str = "secrets.key";

/// The manifest layout this binary writes and reads.
pub const FORMAT: u32 = 1;

/// Which database a backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseKind {
    Sqlite,
    Postgres,
}

impl DatabaseKind {
    /// The database's file in the backup.
    pub fn file(self) -> &'static str {
        match self {
            Self::Sqlite => SQLITE_FILE,
            Self::Postgres => PG_DUMP_FILE,
        }
    }
}

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    pub bytes: u64,
    pub sha256: String,
}

/// The contents of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    /// The banhub release that took the backup.
    pub banhub_version: String,
    /// The last migration applied to the database.
    pub schema_version: String,
    pub database: DatabaseKind,
    pub created_at: DateTime<Utc>,
    /// Every file but the manifest, by its path inside the backup.
    pub files: BTreeMap<String, FileEntry>,
}

/// Why a backup directory cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{MANIFEST} is not a banhub backup manifest: {0}")]
    Invalid(serde_json::Error),
    #[error("{MANIFEST}: format {0} is not one this banhub reads (it reads {FORMAT})")]
    Format(u32),
    #[error(
        "{MANIFEST}: schema_version {found:?} is not a migration of this banhub {version} (its last \
         is {latest:?}); restore with banhub {taken_by} or newer"
    )]
    NewerSchema {
        found: String,
        latest: String,
        version: &'static str,
        taken_by: String,
    },
    #[error("{MANIFEST} does not list {0}, which every {1:?} backup holds")]
    Unlisted(&'static str, DatabaseKind),
    #[error("{MANIFEST} lists {0:?}, which is no part of a banhub backup")]
    Unexpected(String),
    #[error("{0} is listed in {MANIFEST} but missing from the backup")]
    Missing(String),
    #[error("{file} is damaged: its SHA-256 is {actual}, {MANIFEST} says {expected}")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
}

/// The size and SHA-256 of the file at `path`, read in blocks.
pub fn describe(path: &Path) -> std::io::Result<FileEntry> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(FileEntry {
        bytes,
        sha256: hex::encode(hasher.finalize()),
    })
}

impl Manifest {
    /// The files a backup of `database` holds besides the manifest.
    pub fn expected_files(database: DatabaseKind) -> [&'static str; 4] {
        [database.file(), CA_CERT, CA_KEY, SECRETS_KEY]
    }

    /// Reads `dir/manifest.json` and checks the backup against it and against this binary's
    /// migrations (`known`, oldest first): the format, the schema version, that it lists exactly
    /// the files of a backup, and every file's checksum.
    pub fn verify(dir: &Path, known: &[String]) -> Result<Self, ManifestError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read(&path).map_err(|source| ManifestError::Io { path, source })?;
        let manifest: Self = serde_json::from_slice(&text).map_err(ManifestError::Invalid)?;
        manifest.check_schema(known)?;
        manifest.check_listing()?;
        for (file, entry) in &manifest.files {
            let path = dir.join(file);
            let actual = match describe(&path) {
                Ok(actual) => actual,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ManifestError::Missing(file.clone()));
                }
                Err(source) => return Err(ManifestError::Io { path, source }),
            };
            if actual.sha256 != entry.sha256 {
                return Err(ManifestError::Checksum {
                    file: file.clone(),
                    expected: entry.sha256.clone(),
                    actual: actual.sha256,
                });
            }
        }
        Ok(manifest)
    }

    fn check_schema(&self, known: &[String]) -> Result<(), ManifestError> {
        if self.format != FORMAT {
            return Err(ManifestError::Format(self.format));
        }
        if known.contains(&self.schema_version) {
            return Ok(());
        }
        Err(ManifestError::NewerSchema {
            found: self.schema_version.clone(),
            latest: known.last().cloned().unwrap_or_default(),
            version: env!("CARGO_PKG_VERSION"),
            taken_by: self.banhub_version.clone(),
        })
    }

    fn check_listing(&self) -> Result<(), ManifestError> {
        let expected = Self::expected_files(self.database);
        if let Some(unexpected) = self
            .files
            .keys()
            .find(|file| !expected.contains(&file.as_str()))
        {
            return Err(ManifestError::Unexpected(unexpected.clone()));
        }
        match expected
            .into_iter()
            .find(|file| !self.files.contains_key(*file))
        {
            Some(unlisted) => Err(ManifestError::Unlisted(unlisted, self.database)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        vec![
            "migration".into(),
            "m0002_events".into(),
            "m0017_defence".into(),
        ]
    }

    /// A complete SQLite backup in a temporary directory, with its manifest written.
    fn backup() -> (tempfile::TempDir, Manifest) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("ca")).expect("ca dir");
        let mut files = BTreeMap::new();
        for (file, contents) in [
            (SQLITE_FILE, "database"),
            (CA_CERT, "certificate"),
            (CA_KEY, "ca key"),
            (SECRETS_KEY, "secrets key"),
        ] {
            let path = dir.path().join(file);
            std::fs::write(&path, contents).expect("file");
            files.insert(file.to_owned(), describe(&path).expect("describe"));
        }
        let manifest = Manifest {
            format: FORMAT,
            banhub_version: "0.1.0".into(),
            schema_version: "m0017_defence".into(),
            database: DatabaseKind::Sqlite,
            created_at: Utc::now(),
            files,
        };
        write(dir.path(), &manifest);
        (dir, manifest)
    }

    fn write(dir: &Path, manifest: &Manifest) {
        let text = serde_json::to_vec_pretty(manifest).expect("json");
        std::fs::write(dir.join(MANIFEST), text).expect("manifest");
    }

    fn refusal(dir: &Path) -> String {
        Manifest::verify(dir, &known())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_complete_backup_verifies() {
        let (dir, manifest) = backup();
        assert_eq!(
            Manifest::verify(dir.path(), &known()).expect("ok"),
            manifest
        );
        assert_eq!(
            manifest.files[SECRETS_KEY].sha256,
            crate::domain::sha256_hex(b"secrets key")
        );
        assert_eq!(manifest.files[SECRETS_KEY].bytes, 11);
    }

    #[test]
    fn a_changed_byte_names_the_file() {
        let (dir, _) = backup();
        std::fs::write(dir.path().join(CA_KEY), "ca kez").expect("damage");
        let message = refusal(dir.path());
        assert!(message.starts_with("ca/ca.key is damaged"), "{message}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let (dir, _) = backup();
        std::fs::remove_file(dir.path().join(SQLITE_FILE)).expect("remove");
        assert_eq!(
            refusal(dir.path()),
            "banhub.db is listed in manifest.json but missing from the backup"
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let (dir, mut manifest) = backup();
        manifest.schema_version = "m9999_future".into();
        write(dir.path(), &manifest);
        let message = refusal(dir.path());
        assert!(
            message
                .starts_with("manifest.json: schema_version \"m9999_future\" is not a migration"),
            "{message}"
        );
    }

    #[test]
    fn the_listing_must_be_exactly_a_backup() {
        let (dir, mut manifest) = backup();
        let entry = manifest.files.remove(SECRETS_KEY).expect("listed");
        write(dir.path(), &manifest);
        assert_eq!(
            refusal(dir.path()),
            "manifest.json does not list secrets.key, which every Sqlite backup holds"
        );
        manifest.files.insert(SECRETS_KEY.into(), entry.clone());
        manifest.files.insert("../etc/passwd".into(), entry);
        write(dir.path(), &manifest);
        assert_eq!(
            refusal(dir.path()),
            "manifest.json lists \"../etc/passwd\", which is no part of a banhub backup"
        );
    }

    #[test]
    fn garbage_and_other_formats_are_refused() {
        let (dir, mut manifest) = backup();
        manifest.format = 2;
        write(dir.path(), &manifest);
        assert!(refusal(dir.path()).contains("format 2"));
        std::fs::write(dir.path().join(MANIFEST), "{").expect("garbage");
        assert!(refusal(dir.path()).starts_with("manifest.json is not a banhub backup manifest"));
    }
}
