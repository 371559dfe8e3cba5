//! The durable record of the host's latest config-set change: what each file held before it, the
//! deadline for the hub's confirmation, and what became of it. Written atomically (temp file,
//! fsync, rename, fsync of the directory) before any file of the change is touched, so an agent
//! that dies at any point finds at start what to put back.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fail2ban_files::files::{DEFAULTS_STEM, EditableFile};
use crate::fail2ban_files::names::{FilterName, JailName};

/// The record's file name in the agent's state directory.
pub const RECORD_FILE: &str = "config-change.json";

/// What became of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Applied (or being applied); restored unless confirmed before the deadline.
    Pending,
    Confirmed,
    Reverted,
}

/// One file as it was before the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    /// The logical path, e.g. `jail.d/sshd.local`.
    pub path: String,
    /// `None`: the file did not exist.
    pub content: Option<String>,
}

/// The record of one change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub change_id: String,
    pub phase: Phase,
    /// Why it is in this phase.
    pub reason: String,
    /// When the previous files come back unless confirmed; 0 when no confirmation is needed.
    pub deadline_unix_ms: i64,
    pub previous: Vec<SavedFile>,
    /// The files the change wrote with their versions after it (`path`, `version`).
    pub applied: Vec<(String, String)>,
}

impl Record {
    /// A pending change whose deadline has passed.
    pub fn overdue(&self, now_unix_ms: i64) -> bool {
        self.phase == Phase::Pending
            && self.deadline_unix_ms > 0
            && now_unix_ms >= self.deadline_unix_ms
    }
}

/// Why the record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is damaged: {detail}; it records a config change, remove it only after \
             checking fail2ban's jail.d and filter.d by hand", path.display())]
    Damaged { path: PathBuf, detail: String },
}

/// The record at `path`, `None` when there is none.
pub fn load(path: &Path) -> Result<Option<Record>, RecordError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RecordError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| RecordError::Damaged {
            path: path.to_owned(),
            detail: e.to_string(),
        })
}

/// Writes the record durably: a temp file beside it, fsync, rename, fsync of the directory.
pub fn save(path: &Path, record: &Record) -> Result<(), RecordError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RecordError::Io { path, source }
    };
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Damaged {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let tmp = path.with_extension("json.tmp");
    let mut out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    out.write_all(&bytes)
        .and_then(|()| out.sync_all())
        .map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
    }
    Ok(())
}

/// The file a logical path names: `jail.d/<jail>.local`, `filter.d/<filter>.local` or
/// `jail.d/banhub-defaults.local`; anything else (absolute, traversal, another suffix) is refused.
pub fn logical_file(path: &str) -> Result<EditableFile, String> {
    let refuse = || {
        format!(
            "{path:?} is not a logical path banhub writes: use jail.d/<jail>.local, \
             filter.d/<filter>.local or jail.d/{DEFAULTS_STEM}.local"
        )
    };
    let (dir, file) = path.split_once('/').ok_or_else(refuse)?;
    let stem = file.strip_suffix(".local").ok_or_else(refuse)?;
    match dir {
        "jail.d" if stem == DEFAULTS_STEM => Ok(EditableFile::Defaults),
        "jail.d" => JailName::parse(stem)
            .map(EditableFile::JailOverride)
            .map_err(|e| format!("{}: {e}", refuse())),
        "filter.d" => FilterName::parse(stem)
            .map(EditableFile::FilterLocal)
            .map_err(|e| format!("{}: {e}", refuse())),
        _ => Err(refuse()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            change_id: "c1".to_owned(),
            phase: Phase::Pending,
            reason: "applied".to_owned(),
            deadline_unix_ms: 1_000,
            previous: vec![SavedFile {
                path: "jail.d/sshd.local".to_owned(),
                content: Some("[sshd]\n".to_owned()),
            }],
            applied: vec![("jail.d/sshd.local".to_owned(), "absent".to_owned())],
        }
    }

    #[test]
    fn the_record_round_trips_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(RECORD_FILE);
        assert_eq!(load(&path).expect("load"), None);
        save(&path, &record()).expect("save");
        assert_eq!(load(&path).expect("load"), Some(record()));
        std::fs::write(&path, b"{").expect("write");
        assert!(matches!(load(&path), Err(RecordError::Damaged { .. })));
    }

    #[test]
    fn overdue_only_when_pending_past_a_deadline() {
        let mut r = record();
        assert!(!r.overdue(999));
        assert!(r.overdue(1_000));
        r.phase = Phase::Confirmed;
        assert!(!r.overdue(2_000));
        r.phase = Phase::Pending;
        r.deadline_unix_ms = 0;
        assert!(!r.overdue(2_000));
    }

    #[test]
    fn logical_paths_are_the_only_paths() {
        let check = |path: &str, ok: bool| assert_eq!(logical_file(path).is_ok(), ok, "{path}");
        check("jail.d/sshd.local", true);
        check("filter.d/nginx-x.local", true);
        check("jail.d/banhub-defaults.local", true);
        for bad in [
            "/etc/fail2ban/jail.d/sshd.local",
            "jail.d/../jail.local",
            "jail.d/sshd.conf",
            "action.d/x.local",
            "jail.local",
            "jail.d/a/b.local",
            "jail.d/.local",
            "filter.d/..local",
        ] {
            check(bad, false);
        }
    }
}
