//! The spool directory's small files and file operations: `spool.json` (format and epoch), atomic
//! replacement, directory creation, listing, truncation and the fsyncs that make them durable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::{SpoolError, now_ms};

const META_FILE: &str = "spool.json";
pub(super) const TMP_SUFFIX: &str = ".tmp";
const FORMAT: u32 = 1;
/// Epochs stay below 2^53 so that they survive JSON readers that use doubles and fit a signed
/// 64-bit database column; 53 random bits are plenty to tell a spool from its predecessors.
const EPOCH_LIMIT: u64 = 1 << 53;

/// What `spool.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    format: u32,
    epoch: u64,
    created_at_ms: i64,
}

pub(super) fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>, SpoolError> {
    let len = usize::try_from(to.saturating_sub(from)).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; len];
    File::open(path)
        .and_then(|file| file.read_exact_at(&mut buf, from))
        .map_err(|e| io_error(path.to_owned(), "reading", e))?;
    Ok(buf)
}

/// Reads the epoch, or picks one for a new spool. A spool that has segments but lost its
/// metadata is refused: starting a new epoch there would orphan the records.
pub(super) fn load_or_create_meta(dir: &Path, has_segments: bool) -> Result<u64, SpoolError> {
    let path = dir.join(META_FILE);
    if let Some(meta) = read_json::<Meta>(&path)? {
        if meta.format != FORMAT {
            return Err(SpoolError::BadMeta {
                path,
                reason: format!("format {} is not {FORMAT}", meta.format),
            });
        }
        return Ok(meta.epoch);
    }
    if has_segments {
        return Err(SpoolError::BadMeta {
            path,
            reason: "missing while segments exist; move the directory aside to start afresh"
                .to_owned(),
        });
    }
    let meta = Meta {
        format: FORMAT,
        epoch: rand::rng().random_range(1..EPOCH_LIMIT),
        created_at_ms: now_ms(),
    };
    let json = serde_json::to_vec_pretty(&meta).map_err(|e| SpoolError::Encode(Arc::new(e)))?;
    write_atomic(&path, &json)?;
    tracing::info!(epoch = meta.epoch, dir = %dir.display(), "created a new spool");
    Ok(meta.epoch)
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(
    path: &Path,
) -> Result<Option<T>, SpoolError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| SpoolError::BadMeta {
                path: path.to_owned(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path.to_owned(), "reading", e)),
    }
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
    let tmp = append_name(path, TMP_SUFFIX);
    let result = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    result.map_err(|e| io_error(path.to_owned(), "replacing", e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(super) fn create_dir(dir: &Path) -> Result<(), SpoolError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io_error(dir.to_owned(), "creating", e))?;
    sync_dir(dir.parent().unwrap_or(Path::new(".")))
}

pub(super) fn list_dir(dir: &Path) -> Result<Vec<String>, SpoolError> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir.to_owned(), "listing", e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir.to_owned(), "listing", e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

pub(super) fn truncate(path: &Path, len: u64) -> Result<(), SpoolError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| {
            file.set_len(len)?;
            file.sync_all()
        })
        .map_err(|e| io_error(path.to_owned(), "truncating", e))
}

/// Makes the directory's entries (created, renamed or removed files) durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir.to_owned(), "syncing", e))
}

pub(super) fn append_name(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

pub(super) fn io_error(path: PathBuf, action: &'static str, source: io::Error) -> SpoolError {
    SpoolError::Io {
        path,
        action,
        source: Arc::new(source),
    }
}
