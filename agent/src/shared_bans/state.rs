//! `<state_dir>/shared-bans.json`: the shared bans this host holds, written atomically (temp
//! file, fsync, rename, mode 0600) before fail2ban is told, so the set survives agent, fail2ban
//! and hub restarts.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use banhub_proto::rules::IpOrCidr;
use serde::{Deserialize, Serialize};

use super::set::{BanSet, Held};

/// The file's name in the state directory.
pub const STATE_FILE: &str = "shared-bans.json";
/// The format written; a file of another version is refused rather than misread.
const VERSION: u32 = 1;

/// Why the file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} is damaged ({detail}); move it away to start with no shared bans (the hub sends \
         the whole set again when the session starts)",
        path.display()
    )]
    Damaged { path: PathBuf, detail: String },
}

#[derive(Debug, Serialize, Deserialize)]
struct File {
    version: u32,
    bans: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    ip: String,
    /// 0: until the hub lifts it.
    expires_unix_ms: i64,
    reason: String,
}

/// Reads the set; no file is an empty set.
pub fn load(path: &Path) -> Result<BanSet, StateError> {
    let bytes = match fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BanSet::default()),
        Err(source) => {
            return Err(StateError::Io {
                path: path.to_owned(),
                source,
            });
        }
        Ok(bytes) => bytes,
    };
    let damaged = |detail: String| StateError::Damaged {
        path: path.to_owned(),
        detail,
    };
    let file: File = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
    if file.version != VERSION {
        return Err(damaged(format!(
            "version {} where this agent writes {VERSION}",
            file.version
        )));
    }
    let mut entries = Vec::with_capacity(file.bans.len());
    for entry in file.bans {
        let ip = IpOrCidr::parse(&entry.ip).map_err(|e| damaged(format!("{:?} {e}", entry.ip)))?;
        let held = Held {
            expires_ms: (entry.expires_unix_ms != 0).then_some(entry.expires_unix_ms),
            reason: entry.reason,
        };
        entries.push((ip, held));
    }
    Ok(BanSet::from_entries(entries))
}

/// Writes the set atomically: a temp file beside it, fsync, rename.
pub fn save(path: &Path, set: &BanSet) -> Result<(), StateError> {
    let file = File {
        version: VERSION,
        bans: set
            .iter()
            .map(|(ip, held)| Entry {
                ip: ip.to_string(),
                expires_unix_ms: held.expires_ms.unwrap_or(0),
                reason: held.reason.clone(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| StateError::Damaged {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let tmp = path.with_extension("json.tmp");
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| StateError::Io { path, source }
    };
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    out.write_all(&bytes)
        .and_then(|()| out.sync_all())
        .map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(raw: &str, expires_ms: Option<i64>) -> (IpOrCidr, Held) {
        (
            IpOrCidr::parse(raw).expect("ip"),
            Held {
                expires_ms,
                reason: format!("policy for {raw}"),
            },
        )
    }

    #[test]
    fn a_missing_file_is_an_empty_set() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(load(&dir.path().join(STATE_FILE)).expect("load").is_empty());
    }

    #[test]
    fn the_set_round_trips_with_mode_0600_and_no_temp_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(STATE_FILE);
        let set = BanSet::from_entries([
            entry("198.51.100.1", Some(1_700_000_000_000)),
            entry("2001:db8::/48", None),
        ]);
        save(&path, &set).expect("save");
        assert_eq!(load(&path).expect("load"), set);
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [STATE_FILE]);
        // Saving again replaces the file.
        save(&path, &BanSet::default()).expect("save empty");
        assert!(load(&path).expect("load").is_empty());
    }

    #[test]
    fn a_damaged_file_is_refused_with_how_to_fix_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(STATE_FILE);
        for text in [
            "not json",
            r#"{"version": 2, "bans": []}"#,
            r#"{"version": 1, "bans": [{"ip": "0.0.0.0/0", "expires_unix_ms": 0, "reason": ""}]}"#,
        ] {
            fs::write(&path, text).expect("write");
            let error = load(&path).expect_err(text).to_string();
            assert!(error.contains("move it away"), "{error}");
        }
    }
}
