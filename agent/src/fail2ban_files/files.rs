//! The files the editor may change, named by logical name only (`jail.d/<jail>.local`,
//! `filter.d/<filter>.local`), and bounded reads of config files.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::names::{FilterName, JailName};
use super::version::Version;

/// The largest config file the agent reads (stock `jail.conf` is 25 KB).
pub const MAX_READ_BYTES: u64 = 4 << 20;

/// A file the editor may write. There is no way to name any other path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EditableFile {
    /// `jail.d/<jail>.local`: the jail's override, read after `jail.conf` and `jail.local`.
    JailOverride(JailName),
    /// `filter.d/<filter>.local`: read after `filter.d/<filter>.conf`, or a filter of its own.
    FilterLocal(FilterName),
    /// `jail.d/banhub-defaults.local`: the agent's own `[DEFAULT]` section (the global
    /// `ignoreip`), read after `jail.conf` and `jail.local` like every `jail.d/*.local`.
    Defaults,
    /// A file `banhub-agent install-action` installs (the action, its notifier, the probe jail
    /// and the attachment of the action to every jail). Never written by hub commands.
    Agent(AgentFile),
}

/// The files of the banhub action, at fixed paths inside the config directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentFile {
    /// `action.d/banhub.conf`: the shipped action, byte for byte.
    ActionConf,
    /// `action.d/banhub.local`: this host's `[Init]` (notifier path, relay URL, secret file).
    ActionLocal,
    /// `action.d/banhub-notify`: the notifier script the action runs (mode 0755).
    Notify,
    /// `filter.d/banhub-probe.conf`: the probe jail's filter, which never matches a real log.
    ProbeFilter,
    /// `filter.d/banhub-shared.conf`: the shared-ban jail's filter, which never matches either.
    SharedFilter,
    /// `jail.d/zz-banhub.local`: `banhub` appended to every jail's actions, the probe jail and
    /// the shared-ban jail.
    /// Named to sort after the other `jail.d/*.local` files, so it sees their `action`.
    Attach,
}

impl AgentFile {
    /// Every file, in install order.
    pub const ALL: [AgentFile; 6] = [
        Self::ActionConf,
        Self::ActionLocal,
        Self::Notify,
        Self::ProbeFilter,
        Self::SharedFilter,
        Self::Attach,
    ];

    fn dir_name(self) -> &'static str {
        match self {
            Self::ActionConf | Self::ActionLocal | Self::Notify => "action.d",
            Self::ProbeFilter | Self::SharedFilter => "filter.d",
            Self::Attach => "jail.d",
        }
    }

    fn file_name(self) -> &'static str {
        match self {
            Self::ActionConf => "banhub.conf",
            Self::ActionLocal => "banhub.local",
            Self::Notify => "banhub-notify",
            Self::ProbeFilter => "banhub-probe.conf",
            Self::SharedFilter => "banhub-shared.conf",
            Self::Attach => "zz-banhub.local",
        }
    }

    /// A plain name for backups and messages.
    fn name(self) -> &'static str {
        match self {
            Self::ActionConf => "action-conf",
            Self::ActionLocal => "action-local",
            Self::Notify => "notify",
            Self::ProbeFilter => "probe-filter",
            Self::SharedFilter => "shared-filter",
            Self::Attach => "attach",
        }
    }
}

/// The stem of [`EditableFile::Defaults`].
pub const DEFAULTS_STEM: &str = "banhub-defaults";

impl EditableFile {
    /// The directory inside the config directory: `jail.d` or `filter.d`.
    pub fn dir_name(&self) -> &'static str {
        match self {
            Self::JailOverride(_) | Self::Defaults => "jail.d",
            Self::FilterLocal(_) => "filter.d",
            Self::Agent(file) => file.dir_name(),
        }
    }

    /// `<name>.local` (or the agent's own file name).
    pub fn file_name(&self) -> String {
        match self {
            Self::JailOverride(jail) => format!("{jail}.local"),
            Self::FilterLocal(filter) => format!("{filter}.local"),
            Self::Defaults => format!("{DEFAULTS_STEM}.local"),
            Self::Agent(file) => file.file_name().to_owned(),
        }
    }

    /// `jail.d/<jail>.local` or `filter.d/<filter>.local`.
    pub fn relative_path(&self) -> PathBuf {
        Path::new(self.dir_name()).join(self.file_name())
    }

    /// `jail`, `filter` or `defaults`, for messages and the backup layout.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JailOverride(_) => "jail",
            Self::FilterLocal(_) => "filter",
            Self::Defaults => "defaults",
            Self::Agent(_) => "agent",
        }
    }

    /// The jail or filter name.
    pub fn name(&self) -> &str {
        match self {
            Self::JailOverride(jail) => jail.as_str(),
            Self::FilterLocal(filter) => filter.as_str(),
            Self::Defaults => DEFAULTS_STEM,
            Self::Agent(file) => file.name(),
        }
    }
}

impl fmt::Display for EditableFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.dir_name(), self.file_name())
    }
}

/// A config file's text and version as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedFile {
    /// Relative to the config directory, e.g. `jail.d/sshd.local`.
    pub path: String,
    /// `None` when the file does not exist.
    pub content: Option<String>,
    pub version: Version,
}

/// Reads a whole file of at most [`MAX_READ_BYTES`]; `None` when it does not exist.
pub(crate) fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_owned(),
            limit: MAX_READ_BYTES,
        });
    }
    Ok(Some(bytes))
}

/// Reads a file as text with its version.
pub(crate) fn read_versioned(dir: &Path, relative: &Path) -> Result<VersionedFile, ConfigError> {
    let path = dir.join(relative);
    let bytes = read_bytes(&path)?;
    let version = Version::of(bytes.as_deref());
    let content = bytes
        .map(|b| String::from_utf8(b).map_err(|_| ConfigError::NotUtf8 { path: path.clone() }))
        .transpose()?;
    Ok(VersionedFile {
        path: relative.display().to_string(),
        content,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_names_map_to_fixed_paths() {
        let jail = EditableFile::JailOverride(JailName::parse("sshd").expect("name"));
        assert_eq!(jail.relative_path(), Path::new("jail.d/sshd.local"));
        assert_eq!(jail.to_string(), "jail.d/sshd.local");
        let filter = EditableFile::FilterLocal(FilterName::parse("nginx-x").expect("name"));
        assert_eq!(filter.relative_path(), Path::new("filter.d/nginx-x.local"));
        assert_eq!((filter.kind(), filter.name()), ("filter", "nginx-x"));
    }

    #[test]
    fn reads_are_bounded_and_versioned() {
        let dir = tempfile::tempdir().expect("dir");
        let absent = read_versioned(dir.path(), Path::new("jail.d/x.local")).expect("read");
        assert_eq!(absent.content, None);
        assert_eq!(absent.version, Version::Absent);

        std::fs::write(dir.path().join("a.local"), "[a]\n").expect("write");
        let file = read_versioned(dir.path(), Path::new("a.local")).expect("read");
        assert_eq!(file.content.as_deref(), Some("[a]\n"));
        assert_eq!(file.version, Version::of(Some(b"[a]\n")));
        assert_eq!(file.path, "a.local");

        std::fs::write(dir.path().join("bin.local"), b"\xff\xfe").expect("write");
        assert!(matches!(
            read_versioned(dir.path(), Path::new("bin.local")),
            Err(ConfigError::NotUtf8 { .. })
        ));

        let big = vec![b'#'; usize::try_from(MAX_READ_BYTES).expect("fits") + 1];
        std::fs::write(dir.path().join("big.conf"), big).expect("write");
        assert!(matches!(
            read_bytes(&dir.path().join("big.conf")),
            Err(ConfigError::TooLarge { .. })
        ));
    }
}
