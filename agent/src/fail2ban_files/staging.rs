//! The file work of an edit: temp files beside their targets, the shadow config dir that
//! `fail2ban-client -t` reads, the atomic commit and its undo, backups, and clean-up after a
//! crash. All of it blocks; the editor runs it on blocking threads.

use std::collections::BTreeSet;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::editor::EditError;
use super::files::EditableFile;
use super::version::Version;

/// Scratch copies of the config dir, in the backup directory.
const SHADOW_PREFIX: &str = ".shadow-";
/// Scratch directories of filter tests, in the backup directory.
pub(crate) const FILTER_TEST_PREFIX: &str = ".filter-test-";
/// Temp files are `.<file>.banhub-<hex>.tmp`: hidden, so fail2ban's `*.conf`/`*.local` globs
/// never see them.
const TEMP_MARK: &str = ".banhub-";

/// One file an edit changes.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub file: EditableFile,
    pub old: Option<Vec<u8>>,
    /// Permission bits for the new file: the old file's, else 0644.
    pub mode: u32,
    pub new: Option<Vec<u8>>,
}

/// A new file staged beside its target.
#[derive(Debug, Clone)]
pub(crate) struct StagedEntry {
    pub file: EditableFile,
    pub live: PathBuf,
    /// `None`: the edit removes the file.
    pub temp: Option<PathBuf>,
}

/// Removes temp files that were not renamed into place, on every path out of an edit.
#[derive(Debug)]
pub(crate) struct Staged {
    pub entries: Vec<StagedEntry>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        for temp in self.entries.iter().filter_map(|e| e.temp.as_ref()) {
            // Already renamed into place on success: nothing left to remove.
            let _ = fs::remove_file(temp);
        }
    }
}

/// A kept previous version of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// UTC, `20261123T081500.123456Z`.
    pub taken_at: String,
    pub version: Version,
    pub path: PathBuf,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EditError + '_ {
    move |source| EditError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Removes temp files and scratch directories a crashed edit may have left.
pub(crate) fn remove_leftovers(config_dir: &Path, backup_dir: &Path) {
    for dir in ["jail.d", "filter.d", "action.d"].map(|d| config_dir.join(d)) {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(TEMP_MARK) && name.ends_with(".tmp") {
                tracing::info!(file = %entry.path().display(), "removing a leftover temp file");
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    if let Ok(entries) = fs::read_dir(backup_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(SHADOW_PREFIX) || name.starts_with(FILTER_TEST_PREFIX) {
                // Holds only symlinks and scratch files; removing it never follows a link.
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

fn fsync_dir(dir: &Path) -> Result<(), EditError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Writes `bytes` to a new hidden temp file in `dir` and fsyncs it.
fn write_temp(dir: &Path, file_name: &str, bytes: &[u8], mode: u32) -> Result<PathBuf, EditError> {
    let temp = dir.join(format!(
        ".{file_name}{TEMP_MARK}{:016x}.tmp",
        rand::random::<u64>()
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .map_err(io_err(&temp))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_err(&temp));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written.map(|()| temp)
}

/// Replaces `path` with `bytes` atomically: temp file, fsync, rename, fsync the directory.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), EditError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = write_temp(dir, &name, bytes, mode)?;
    if let Err(source) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(EditError::Io {
            path: path.to_owned(),
            source,
        });
    }
    fsync_dir(dir)
}

/// Makes sure `dir` exists (creating it 0755 and fsyncing its parent).
fn ensure_dir(dir: &Path) -> Result<(), EditError> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .map_err(io_err(dir))?;
    fsync_dir(dir.parent().unwrap_or(Path::new(".")))
}

/// Writes each new file as a temp file beside its target.
pub(crate) fn stage(config_dir: &Path, changes: &[Change]) -> Result<Staged, EditError> {
    let mut staged = Staged {
        entries: Vec::new(),
    };
    for change in changes {
        let dir = config_dir.join(change.file.dir_name());
        let live = dir.join(change.file.file_name());
        let temp = match &change.new {
            Some(bytes) => {
                ensure_dir(&dir)?;
                Some(write_temp(
                    &dir,
                    &change.file.file_name(),
                    bytes,
                    change.mode,
                )?)
            }
            None => None,
        };
        staged.entries.push(StagedEntry {
            file: change.file.clone(),
            live,
            temp,
        });
    }
    Ok(staged)
}

/// A directory that reads like the config dir with the staged changes applied: symlinks to
/// every live entry, real directories where files change, the temp files linked in place of
/// their targets. So `-t` reads exactly the bytes that the rename will make live.
pub(crate) fn build_shadow(
    config_dir: &Path,
    parent: &Path,
    entries: &[StagedEntry],
) -> Result<tempfile::TempDir, EditError> {
    let shadow = tempfile::Builder::new()
        .prefix(SHADOW_PREFIX)
        .tempdir_in(parent)
        .map_err(io_err(parent))?;
    let link = |from: &Path, to: &Path| std::os::unix::fs::symlink(from, to).map_err(io_err(to));
    let touched: BTreeSet<&str> = entries.iter().map(|e| e.file.dir_name()).collect();
    for entry in fs::read_dir(config_dir).map_err(io_err(config_dir))? {
        let entry = entry.map_err(io_err(config_dir))?;
        let name = entry.file_name();
        if touched.iter().any(|d| name == *d) {
            continue;
        }
        link(&entry.path(), &shadow.path().join(&name))?;
    }
    for dir_name in touched {
        let shadow_dir = shadow.path().join(dir_name);
        fs::create_dir(&shadow_dir).map_err(io_err(&shadow_dir))?;
        let replaced: Vec<&StagedEntry> = entries
            .iter()
            .filter(|e| e.file.dir_name() == dir_name)
            .collect();
        let live_dir = config_dir.join(dir_name);
        if let Ok(listing) = fs::read_dir(&live_dir) {
            for entry in listing {
                let entry = entry.map_err(io_err(&live_dir))?;
                let name = entry.file_name();
                if replaced.iter().any(|e| name == e.file.file_name().as_str()) {
                    continue;
                }
                link(&entry.path(), &shadow_dir.join(&name))?;
            }
        }
        for entry in replaced {
            if let Some(temp) = &entry.temp {
                link(temp, &shadow_dir.join(entry.file.file_name()))?;
            }
        }
    }
    Ok(shadow)
}

/// Renames the temp files into place (or removes targets) and fsyncs the directories.
pub(crate) fn commit(entries: &[StagedEntry]) -> Result<(), EditError> {
    let mut dirs = BTreeSet::new();
    for entry in entries {
        match &entry.temp {
            Some(temp) => fs::rename(temp, &entry.live).map_err(io_err(&entry.live))?,
            None => match fs::remove_file(&entry.live) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(EditError::Io {
                        path: entry.live.clone(),
                        source: e,
                    });
                }
                _ => {}
            },
        }
        if let Some(dir) = entry.live.parent() {
            dirs.insert(dir.to_owned());
        }
    }
    dirs.iter().try_for_each(|d| fsync_dir(d))
}

/// Puts every changed file back to its old bytes (or removes it if it did not exist).
pub(crate) fn restore(config_dir: &Path, changes: &[Change]) -> Result<(), EditError> {
    for change in changes {
        let path = config_dir.join(change.file.relative_path());
        match &change.old {
            Some(bytes) => write_atomic(&path, bytes, change.mode)?,
            None => match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(EditError::Io { path, source: e });
                }
                _ => fsync_dir(path.parent().unwrap_or(config_dir))?,
            },
        }
    }
    Ok(())
}

pub(crate) fn backup_dir_of(root: &Path, file: &EditableFile) -> PathBuf {
    root.join(file.kind()).join(file.name())
}

/// `<stamp>-<sha256>.local`, newest first.
pub(crate) fn list_backups(dir: &Path) -> Result<Vec<Backup>, EditError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(EditError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut backups = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stamp, version)) = name
            .strip_suffix(".local")
            .and_then(|stem| stem.split_once('-'))
        else {
            continue;
        };
        if let Ok(version) = Version::parse(version) {
            backups.push(Backup {
                taken_at: stamp.to_owned(),
                version,
                path: entry.path(),
            });
        }
    }
    backups.sort_by(|a, b| b.taken_at.cmp(&a.taken_at));
    Ok(backups)
}

/// Keeps the bytes each change replaces (unless the newest backup already holds them), then
/// the newest `keep` backups per file.
pub(crate) fn save_backups(root: &Path, changes: &[Change], keep: usize) -> Result<(), EditError> {
    for change in changes {
        let Some(old) = &change.old else {
            continue;
        };
        let dir = backup_dir_of(root, &change.file);
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(&dir))?;
        let version = Version::of(Some(old));
        let existing = list_backups(&dir)?;
        if existing.first().is_none_or(|b| b.version != version) {
            let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
            write_atomic(&dir.join(format!("{stamp}-{version}.local")), old, 0o600)?;
        }
        for stale in list_backups(&dir)?.iter().skip(keep.max(1)) {
            let _ = fs::remove_file(&stale.path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::fail2ban_files::names::JailName;

    fn jail(name: &str) -> EditableFile {
        EditableFile::JailOverride(JailName::parse(name).expect("name"))
    }

    #[test]
    fn shadow_shows_the_staged_files_and_links_the_rest() {
        let live = tempfile::tempdir().expect("live");
        let work = tempfile::tempdir().expect("work");
        fs::write(live.path().join("jail.conf"), "[a]\n").expect("write");
        fs::create_dir(live.path().join("jail.d")).expect("mkdir");
        fs::write(live.path().join("jail.d/a.local"), "[a]\nx = old\n").expect("write");
        fs::write(live.path().join("jail.d/b.local"), "[b]\n").expect("write");
        let changes = vec![
            Change {
                file: jail("a"),
                old: Some(b"[a]\nx = old\n".to_vec()),
                mode: 0o640,
                new: Some(b"[a]\nx = new\n".to_vec()),
            },
            Change {
                file: jail("b"),
                old: Some(b"[b]\n".to_vec()),
                mode: 0o644,
                new: None,
            },
        ];
        let staged = stage(live.path(), &changes).expect("stage");
        let temp = staged.entries[0].temp.clone().expect("temp");
        assert!(
            temp.file_name()
                .expect("name")
                .to_string_lossy()
                .starts_with(".a.local.banhub-")
        );
        assert_eq!(
            fs::metadata(&temp).expect("meta").permissions().mode() & 0o777,
            0o640
        );
        let shadow = build_shadow(live.path(), work.path(), &staged.entries).expect("shadow");
        let read = |p: &str| fs::read_to_string(shadow.path().join(p)).expect(p);
        assert_eq!(read("jail.conf"), "[a]\n");
        assert_eq!(read("jail.d/a.local"), "[a]\nx = new\n");
        assert!(!shadow.path().join("jail.d/b.local").exists());
        // The live directory still holds the old files.
        assert_eq!(
            fs::read_to_string(live.path().join("jail.d/a.local")).expect("live"),
            "[a]\nx = old\n"
        );

        commit(&staged.entries).expect("commit");
        drop(staged);
        assert_eq!(
            fs::read_to_string(live.path().join("jail.d/a.local")).expect("live"),
            "[a]\nx = new\n"
        );
        assert!(!live.path().join("jail.d/b.local").exists());
        let leftovers: Vec<_> = fs::read_dir(live.path().join("jail.d"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, ["a.local"]);

        restore(live.path(), &changes).expect("restore");
        assert_eq!(
            fs::read(live.path().join("jail.d/a.local")).expect("a"),
            b"[a]\nx = old\n"
        );
        assert_eq!(
            fs::read(live.path().join("jail.d/b.local")).expect("b"),
            b"[b]\n"
        );
    }

    #[test]
    fn dropped_stage_leaves_no_temp_files() {
        let live = tempfile::tempdir().expect("live");
        let changes = vec![Change {
            file: jail("a"),
            old: None,
            mode: 0o644,
            new: Some(b"[a]\n".to_vec()),
        }];
        let staged = stage(live.path(), &changes).expect("stage");
        assert_eq!(
            fs::read_dir(live.path().join("jail.d"))
                .expect("list")
                .count(),
            1
        );
        drop(staged);
        assert_eq!(
            fs::read_dir(live.path().join("jail.d"))
                .expect("list")
                .count(),
            0
        );
    }

    #[test]
    fn backups_are_deduplicated_and_pruned() {
        let root = tempfile::tempdir().expect("root");
        let change = |old: &str| Change {
            file: jail("sshd"),
            old: Some(old.as_bytes().to_vec()),
            mode: 0o644,
            new: Some(b"new".to_vec()),
        };
        for i in 0..5 {
            save_backups(root.path(), &[change(&format!("v{i}"))], 3).expect("backup");
            // Same bytes again: no new backup.
            save_backups(root.path(), &[change(&format!("v{i}"))], 3).expect("backup");
        }
        let backups = list_backups(&backup_dir_of(root.path(), &jail("sshd"))).expect("list");
        assert_eq!(backups.len(), 3);
        let versions: Vec<Version> = backups.iter().map(|b| b.version).collect();
        let expected: Vec<Version> = ["v4", "v3", "v2"]
            .iter()
            .map(|v| Version::of(Some(v.as_bytes())))
            .collect();
        assert_eq!(versions, expected);
        assert_eq!(fs::read(&backups[0].path).expect("read"), b"v4");
        assert!(
            root.path().join("jail/sshd").is_dir(),
            "backups live under <kind>/<name>"
        );
    }

    #[test]
    fn leftovers_of_a_crash_are_removed() {
        let live = tempfile::tempdir().expect("live");
        let work = tempfile::tempdir().expect("work");
        fs::create_dir(live.path().join("jail.d")).expect("mkdir");
        let stale = live.path().join("jail.d/.sshd.local.banhub-00ff.tmp");
        fs::write(&stale, "x").expect("write");
        let keep = live.path().join("jail.d/.keep");
        fs::write(&keep, "x").expect("write");
        let shadow = work.path().join(".shadow-abc");
        fs::create_dir(&shadow).expect("mkdir");
        std::os::unix::fs::symlink(live.path().join("jail.d"), shadow.join("jail.d"))
            .expect("link");
        remove_leftovers(live.path(), work.path());
        assert!(!stale.exists() && keep.exists() && !shadow.exists());
        assert!(
            live.path().join("jail.d").is_dir(),
            "links are not followed"
        );
    }
}
