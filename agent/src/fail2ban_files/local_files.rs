//! The `.local` files of a host's fail2ban configuration that banhub compares with a profile:
//! `jail.local`, `jail.d/*.local` and `filter.d/*.local`, each with its text and version, the
//! agent's own files left out. Bounded in number and size; blocking.

use std::fs;
use std::path::Path;

use super::files::{self, AgentFile, EditableFile, VersionedFile};

/// At most this many files are read.
pub const MAX_FILES: usize = 512;
/// At most this many bytes are read over all files.
pub const MAX_TOTAL_BYTES: u64 = 16 << 20;

/// What [`read_local_files`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalFiles {
    /// Existing files, sorted by logical path.
    pub files: Vec<VersionedFile>,
    /// Files left out (not regular, unreadable, not UTF-8, too large), one line each.
    pub warnings: Vec<String>,
    /// Whether [`MAX_FILES`] or [`MAX_TOTAL_BYTES`] cut the list short.
    pub truncated: bool,
}

/// Reads the `.local` files of `config_dir` a profile can hold, plus `jail.local`.
pub fn read_local_files(config_dir: &Path) -> LocalFiles {
    let own: Vec<String> = AgentFile::ALL
        .iter()
        .map(|f| EditableFile::Agent(*f).to_string())
        .collect();
    let mut candidates = vec!["jail.local".to_owned()];
    for dir in ["jail.d", "filter.d"] {
        let Ok(entries) = fs::read_dir(config_dir.join(dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".local") && !n.starts_with('.'))
            .map(|n| format!("{dir}/{n}"))
            .filter(|p| !own.contains(p))
            .collect();
        names.sort();
        candidates.extend(names);
    }
    let mut found = LocalFiles::default();
    let mut total = 0u64;
    for relative in candidates {
        if found.files.len() >= MAX_FILES {
            found.truncated = true;
            break;
        }
        let path = config_dir.join(&relative);
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                found.warnings.push(format!("{relative}: {e}"));
                continue;
            }
            Ok(meta) if !meta.is_file() => {
                found
                    .warnings
                    .push(format!("{relative}: not a regular file; left out"));
                continue;
            }
            Ok(meta) if total + meta.len() > MAX_TOTAL_BYTES => {
                found.truncated = true;
                break;
            }
            Ok(_) => {}
        }
        match files::read_versioned(config_dir, Path::new(&relative)) {
            Ok(file) => {
                total += file.content.as_ref().map_or(0, |c| c.len() as u64);
                if file.content.is_some() {
                    found.files.push(file);
                }
            }
            Err(e) => found.warnings.push(format!("{relative}: {e}")),
        }
    }
    found.files.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_local_files_without_the_agents_own() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        fs::create_dir_all(root.join("jail.d")).expect("dir");
        fs::create_dir_all(root.join("filter.d")).expect("dir");
        fs::write(root.join("jail.local"), "[sshd]\nenabled = true\n").expect("write");
        fs::write(root.join("jail.d/sshd.local"), "[sshd]\nmaxretry = 3\n").expect("write");
        fs::write(root.join("jail.d/zz-banhub.local"), "[sshd]\n").expect("write");
        fs::write(root.join("jail.d/sshd.conf"), "[sshd]\n").expect("write");
        fs::write(root.join("jail.d/.hidden.local"), "[x]\n").expect("write");
        fs::write(root.join("filter.d/app.local"), "[Definition]\n").expect("write");
        fs::write(root.join("filter.d/bad.local"), b"\xff").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", root.join("filter.d/link.local")).expect("link");

        let found = read_local_files(root);
        let paths: Vec<&str> = found.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            ["filter.d/app.local", "jail.d/sshd.local", "jail.local"]
        );
        assert_eq!(
            found.files[1].content.as_deref(),
            Some("[sshd]\nmaxretry = 3\n")
        );
        assert_eq!(found.warnings.len(), 2, "{:?}", found.warnings);
        assert!(!found.truncated);
    }
}
