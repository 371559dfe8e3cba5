//! The safe writer: changes `jail.d/<jail>.local` and `filter.d/<filter>.local` only, one edit
//! at a time, and never leaves fail2ban on a configuration it has not accepted.
//!
//! Each edit: check the text (size, NUL, sections, includes) → take the lock → compare
//! versions → ping fail2ban → write temp files beside the targets and fsync them → build a
//! shadow of the config dir (symlinks to the live files, the temp files in the targets' places)
//! and run `fail2ban-client -c <shadow> -t` on it, plus our own checks of what `-t` misses
//! (backend names, regular expressions) → back up the old files → rename the temp files into
//! place and fsync the directories → `reload` → check that fail2ban answers and runs the jails
//! it should. If anything after the rename fails, the old bytes are put back, fail2ban is
//! reloaded again and the error carries fail2ban's own messages.
//!
//! The steps after the version check are one pipeline ([`pipeline`]), which the agent's own
//! files ([`agent_files`]) run too.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use banhub_proto::rules::{NameError, check_name};

use super::content;
use super::error::ConfigError;
use super::files::{self, EditableFile};
use super::filter_test::{self, FilterSource, FilterTestError, FilterTestReport};
use super::ini;
use super::names::{FilterName, JailName};
use super::reader::ConfigReader;
use super::staging::{Backup, Change, backup_dir_of, io_err, list_backups, remove_leftovers};
use super::tools::{self, Fail2banTools, ToolError};
use super::version::Version;
use crate::config::PolicySettings;
use crate::fail2ban::{Fail2banError, Fail2banSocket};

mod agent_files;
mod config_set;
mod dry_run;
mod pipeline;
mod settle;
mod validate;
pub use agent_files::{AgentEdit, AgentEditReport, AgentWrite};
pub use config_set::{Previous, SetFile};
use pipeline::{Edit, Scope, Writer};

/// Backups kept per file by default.
pub const DEFAULT_KEEP_BACKUPS: usize = 10;
/// How long an edit waits for another one to finish by default.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(300);
/// Socket timeout for the health checks by default.
pub const DEFAULT_SOCKET_TIMEOUT: Duration = Duration::from_secs(10);
/// Where [`EditorSettings::from_agent`] keeps backups, inside the agent's state directory.
pub const BACKUP_SUBDIR: &str = "config-backups";
/// Serializes edits across processes that share the backup directory.
const LOCK_FILE: &str = ".edit.lock";

/// What the editor works on.
#[derive(Debug, Clone)]
pub struct EditorSettings {
    /// fail2ban's config directory (`fail2ban.config_dir`).
    pub config_dir: PathBuf,
    /// fail2ban's control socket (`fail2ban.socket`).
    pub socket: PathBuf,
    pub tools: Fail2banTools,
    /// Private directory for backups, the lock file and scratch copies (in the agent's state
    /// directory, never inside the config directory).
    pub backup_dir: PathBuf,
    pub keep_backups: usize,
    pub max_file_bytes: usize,
    pub socket_timeout: Duration,
    pub lock_timeout: Duration,
    /// What hub writes may introduce ([`policy`](super::policy)); strict by default.
    pub policy: PolicySettings,
}

impl EditorSettings {
    /// Settings with the defaults of this module; `client` is `fail2ban.client`.
    pub fn new(
        config_dir: impl Into<PathBuf>,
        socket: impl Into<PathBuf>,
        client: impl Into<PathBuf>,
        backup_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            config_dir: config_dir.into(),
            socket: socket.into(),
            tools: Fail2banTools::new(client),
            backup_dir: backup_dir.into(),
            keep_backups: DEFAULT_KEEP_BACKUPS,
            max_file_bytes: content::DEFAULT_MAX_FILE_BYTES,
            socket_timeout: DEFAULT_SOCKET_TIMEOUT,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            policy: PolicySettings::default(),
        }
    }

    /// The agent's `fail2ban.*` settings, with backups in `<state_dir>/config-backups`.
    pub fn from_agent(settings: &crate::config::Settings) -> Self {
        let f2b = &settings.fail2ban;
        let mut editor = Self::new(
            &f2b.config_dir,
            &f2b.socket,
            &f2b.client,
            settings.state_dir.join(BACKUP_SUBDIR),
        );
        editor.socket_timeout = settings.fail2ban_timeout();
        editor.policy = settings.policy.clone();
        editor.tools.filter_test_timeout = Duration::from_millis(f2b.filter_test_timeout_ms);
        editor
    }
}

/// The step at which an applied edit failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Renaming the new files into place.
    Commit,
    /// `fail2ban-client reload`.
    Reload,
    /// fail2ban answering and running the expected jails afterwards.
    HealthCheck,
    /// fail2ban running what the files say in every jail the edit reaches, after restarting
    /// the jails a reload does not change.
    Verify,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Commit => "put the new files in place",
            Self::Reload => "reload",
            Self::HealthCheck => "pass the health check after reloading",
            Self::Verify => "run what the files say",
        })
    }
}

/// What a rollback did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackReport {
    /// Files put back to their previous bytes (or removed, when they did not exist).
    pub restored: Vec<EditableFile>,
    /// Jails that ran before the edit and do not run after the rollback.
    pub missing_jails: Vec<String>,
}

/// Why an edit was refused or undone. Nothing is changed unless the variant says so.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error(
        "{file} has changed since it was read (its version is now {current}); read it again \
         and redo the edit"
    )]
    Conflict {
        file: EditableFile,
        current: Version,
    },
    #[error("the new {file} is refused: {reason}")]
    BadContent { file: EditableFile, reason: String },
    #[error("{name:?} is refused as a name: {source}")]
    BadName {
        name: String,
        #[source]
        source: NameError,
    },
    #[error(
        "the host policy refuses {key}: {reason}; nothing was changed. Only the host's \
         administrator can allow it: {widen}"
    )]
    Policy {
        key: String,
        reason: String,
        /// What root can do on the host to allow it.
        widen: String,
    },
    #[error("jail {0} is not defined in fail2ban's configuration")]
    UnknownJail(JailName),
    #[error("jail {0} is listed twice, once enabled and once disabled")]
    ContradictoryJail(JailName),
    #[error("no jails were given")]
    NothingToDo,
    #[error("{file} is not a regular file; it must be edited by hand")]
    NotARegularFile { file: EditableFile },
    #[error("fail2ban is not answering, so nothing was changed: {0}")]
    Unavailable(#[source] Fail2banError),
    #[error(
        "fail2ban refused the new configuration, so nothing was changed:\n{}",
        messages.join("\n")
    )]
    Invalid { messages: Vec<String> },
    #[error(
        "fail2ban could not {stage} with the new configuration, so the previous files were \
         restored and fail2ban reloaded with them:\n{}",
        messages.join("\n")
    )]
    RolledBack {
        stage: Stage,
        messages: Vec<String>,
        rollback: RollbackReport,
    },
    #[error(
        "fail2ban could not {stage} with the new configuration, and restoring the previous \
         configuration failed too; fail2ban may be running without some jails.\nfirst \
         failure:\n{}\nrestore failure:\n{}",
        messages.join("\n"),
        rollback_messages.join("\n")
    )]
    RollbackFailed {
        stage: Stage,
        messages: Vec<String>,
        rollback_messages: Vec<String>,
    },
    #[error("another config edit still holds the lock after {0:?}")]
    Busy(Duration),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tool(#[from] ToolError),
}

impl EditError {
    /// fail2ban's own messages carried by the error (empty for errors found before fail2ban
    /// was asked).
    pub fn fail2ban_messages(&self) -> &[String] {
        match self {
            Self::Invalid { messages }
            | Self::RolledBack { messages, .. }
            | Self::RollbackFailed { messages, .. } => messages,
            _ => &[],
        }
    }
}

/// One file an edit changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub file: EditableFile,
    pub previous: Version,
    pub current: Version,
}

/// How fail2ban was told about the edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadScope {
    /// Nothing changed.
    NotNeeded,
    /// `reload <jail>`: the one jail edited was running, so only it restarts.
    Jail(String),
    /// `reload`: every jail (a filter edit, several jails, or a jail that was not running).
    All,
}

/// Wall-clock time of an edit's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EditTimings {
    /// Shadow copy, `fail2ban-client -t` and the extra checks.
    pub validate: Duration,
    /// `fail2ban-client reload` and the health check.
    pub reload: Duration,
    pub total: Duration,
}

/// A successful edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditReport {
    /// Empty when the files already held what was asked.
    pub changes: Vec<FileChange>,
    pub reload: ReloadScope,
    /// Jails running afterwards.
    pub running: Vec<String>,
    /// Jails restarted (`reload --restart`) because the reload left them running something else
    /// than the files say.
    pub restarted: Vec<String>,
    /// fail2ban's warnings about the new configuration that did not stop the edit.
    pub warnings: Vec<String>,
    pub timings: EditTimings,
}

/// The safe editor for one fail2ban config directory. Cheap to clone; clones share the lock.
/// Create one per config directory in a process.
#[derive(Debug, Clone)]
pub struct ConfigEditor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: EditorSettings,
    reader: ConfigReader,
    lock: tokio::sync::Mutex<()>,
    /// One filter test at a time on this host: each runs a `fail2ban-regex` process that may use a
    /// core until its time limit; the others wait their turn.
    filter_tests: tokio::sync::Semaphore,
}

/// Held while an edit runs.
struct EditLock<'a> {
    _guard: tokio::sync::MutexGuard<'a, ()>,
    _file: File,
}

/// Runs blocking file work off the async threads.
async fn blocking<T, F>(work: F) -> Result<T, EditError>
where
    F: FnOnce() -> Result<T, EditError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| EditError::Io {
            path: PathBuf::from("(config editor task)"),
            source: std::io::Error::other(e),
        })?
}

impl ConfigEditor {
    /// Creates the backup directory (0700) and removes scratch files a crashed edit left.
    pub fn new(mut settings: EditorSettings) -> Result<Self, EditError> {
        settings.config_dir =
            std::path::absolute(&settings.config_dir).map_err(io_err(&settings.config_dir))?;
        settings.backup_dir =
            std::path::absolute(&settings.backup_dir).map_err(io_err(&settings.backup_dir))?;
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&settings.backup_dir)
            .map_err(io_err(&settings.backup_dir))?;
        remove_leftovers(&settings.config_dir, &settings.backup_dir);
        Ok(Self {
            inner: Arc::new(Inner {
                reader: ConfigReader::new(&settings.config_dir),
                settings,
                lock: tokio::sync::Mutex::new(()),
                filter_tests: tokio::sync::Semaphore::new(1),
            }),
        })
    }

    pub fn settings(&self) -> &EditorSettings {
        &self.inner.settings
    }

    /// The reader of the same config directory (blocking; see [`ConfigEditor::read`]).
    pub fn reader(&self) -> &ConfigReader {
        &self.inner.reader
    }

    /// Runs a read on a blocking thread: `editor.read(|r| r.load()).await`.
    pub async fn read<T, F>(&self, read: F) -> Result<T, ConfigError>
    where
        F: FnOnce(&ConfigReader) -> Result<T, ConfigError> + Send + 'static,
        T: Send + 'static,
    {
        let reader = self.inner.reader.clone();
        tokio::task::spawn_blocking(move || read(&reader))
            .await
            .map_err(|e| ConfigError::Read {
                path: reader_dir(&self.inner.reader),
                source: std::io::Error::other(e),
            })?
    }

    /// Replaces `jail.d/<jail>.local` with `content`, if its version is still `expected`.
    /// The file may hold the `[<jail>]` section only.
    pub async fn write_jail_override(
        &self,
        jail: &JailName,
        content: &str,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::JailOverride(jail.clone());
        let rule = |text: &str| content::check_jail_override(jail, text);
        let scope = Scope::Jails([jail.to_string()].into());
        self.replace(file, content, rule, expected, scope).await
    }

    /// Removes `jail.d/<jail>.local`, if its version is still `expected`.
    pub async fn delete_jail_override(
        &self,
        jail: &JailName,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::JailOverride(jail.clone());
        let scope = Scope::Jails([jail.to_string()].into());
        self.remove(file, expected, scope).await
    }

    /// Replaces `filter.d/<filter>.local` with `content`, if its version is still `expected`.
    pub async fn write_filter(
        &self,
        filter: &FilterName,
        content: &str,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::FilterLocal(filter.clone());
        let scope = Scope::Filter(filter.clone());
        self.replace(file, content, content::check_filter, expected, scope)
            .await
    }

    /// Replaces the agent's own defaults file (`jail.d/banhub-defaults.local`, a `[DEFAULT]`
    /// section only) with `content`, if its version is still `expected`; every jail reloads.
    pub async fn write_defaults(
        &self,
        content: &str,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let scope = Scope::Jails(BTreeSet::new());
        self.replace(
            EditableFile::Defaults,
            content,
            content::check_defaults,
            expected,
            scope,
        )
        .await
    }

    /// Removes `filter.d/<filter>.local`, if its version is still `expected`.
    pub async fn delete_filter_local(
        &self,
        filter: &FilterName,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::FilterLocal(filter.clone());
        let scope = Scope::Filter(filter.clone());
        self.remove(file, expected, scope).await
    }

    /// Replaces `file` with `content`, which must pass the general text checks and `rule`, if the
    /// file's version is still `expected`.
    async fn replace<T>(
        &self,
        file: EditableFile,
        content: &str,
        rule: impl FnOnce(&str) -> Result<T, String>,
        expected: Version,
        scope: Scope,
    ) -> Result<EditReport, EditError> {
        self.check_text(&file, content)?;
        rule(content).map_err(|reason| EditError::BadContent {
            file: file.clone(),
            reason,
        })?;
        let lock = self.lock().await?;
        let change = self
            .versioned_change(&file, expected, Some(content.as_bytes().to_vec()))
            .await?;
        self.edit(&lock, vec![change], scope).await
    }

    /// Removes `file`, if its version is still `expected`.
    async fn remove(
        &self,
        file: EditableFile,
        expected: Version,
        scope: Scope,
    ) -> Result<EditReport, EditError> {
        let lock = self.lock().await?;
        let change = self.versioned_change(&file, expected, None).await?;
        self.edit(&lock, vec![change], scope).await
    }

    /// Sets `enabled = true|false` for several jails in one validated edit with one reload:
    /// all or nothing. Each jail's `jail.d/<jail>.local` keeps its other content; a jail
    /// already in the asked state is left alone.
    pub async fn set_jails_enabled(
        &self,
        jails: &[(JailName, bool)],
    ) -> Result<EditReport, EditError> {
        if jails.is_empty() {
            return Err(EditError::NothingToDo);
        }
        let mut wanted: Vec<(JailName, bool)> = Vec::new();
        for (jail, enabled) in jails {
            match wanted.iter().find(|(j, _)| j == jail) {
                Some((_, e)) if e != enabled => {
                    return Err(EditError::ContradictoryJail(jail.clone()));
                }
                Some(_) => {}
                None => wanted.push((jail.clone(), *enabled)),
            }
        }
        let lock = self.lock().await?;
        let reader = self.inner.reader.clone();
        let config = blocking(move || reader.load().map_err(EditError::from)).await?;
        let mut changes = Vec::new();
        for (jail, enabled) in &wanted {
            let info = config
                .jail(jail.as_str())
                .ok_or_else(|| EditError::UnknownJail(jail.clone()))?;
            if info.enabled == *enabled {
                continue;
            }
            let file = EditableFile::JailOverride(jail.clone());
            let (old, mode) = self.current(&file).await?;
            let text = match &old {
                None => String::new(),
                Some(bytes) => {
                    String::from_utf8(bytes.clone()).map_err(|_| EditError::BadContent {
                        file: file.clone(),
                        reason: "the existing file is not UTF-8 text".to_owned(),
                    })?
                }
            };
            let value = if *enabled { "true" } else { "false" };
            let new = ini::set_option(&text, jail.as_str(), "enabled", value).map_err(|e| {
                EditError::BadContent {
                    file: file.clone(),
                    reason: e.to_string(),
                }
            })?;
            self.check_text(&file, &new)?;
            changes.push(Change {
                file,
                old,
                mode,
                new: Some(new.into_bytes()),
            });
        }
        let targets = wanted.iter().map(|(j, _)| j.to_string()).collect();
        self.edit(&lock, changes, Scope::Jails(targets)).await
    }

    /// Tests a filter with `fail2ban-regex` on `lines`; nothing is written to the config
    /// directory.
    pub async fn test_filter(
        &self,
        source: &FilterSource,
        lines: &[String],
    ) -> Result<FilterTestReport, FilterTestError> {
        // The semaphore is never closed, so acquiring fails only in theory; then the test runs.
        let _turn = self.inner.filter_tests.acquire().await.ok();
        let s = &self.inner.settings;
        filter_test::test_filter(&s.tools, &s.config_dir, &s.backup_dir, source, lines).await
    }

    /// The kept previous versions of a file, newest first.
    pub fn backups(&self, file: &EditableFile) -> Result<Vec<Backup>, EditError> {
        list_backups(&backup_dir_of(&self.inner.settings.backup_dir, file))
    }

    fn check_text(&self, file: &EditableFile, text: &str) -> Result<(), EditError> {
        content::check_text(text, self.inner.settings.max_file_bytes).map_err(|reason| {
            EditError::BadContent {
                file: file.clone(),
                reason,
            }
        })
    }

    /// Takes the in-process lock, then the lock file (for other processes).
    async fn lock(&self) -> Result<EditLock<'_>, EditError> {
        let wait = self.inner.settings.lock_timeout;
        let guard = tokio::time::timeout(wait, self.inner.lock.lock())
            .await
            .map_err(|_| EditError::Busy(wait))?;
        let path = self.inner.settings.backup_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(&path))?;
        let file = match file.try_lock() {
            Ok(()) => file,
            Err(fs::TryLockError::WouldBlock) => {
                let task = tokio::task::spawn_blocking(move || file.lock().map(|()| file));
                tokio::time::timeout(wait, task)
                    .await
                    .map_err(|_| EditError::Busy(wait))?
                    .map_err(|e| EditError::Io {
                        path: path.clone(),
                        source: std::io::Error::other(e),
                    })?
                    .map_err(io_err(&path))?
            }
            Err(fs::TryLockError::Error(source)) => return Err(EditError::Io { path, source }),
        };
        Ok(EditLock {
            _guard: guard,
            _file: file,
        })
    }

    /// The live path of a file, its name checked once more before it touches the disk.
    fn live_path(&self, file: &EditableFile) -> Result<PathBuf, EditError> {
        check_name(file.name()).map_err(|source| EditError::BadName {
            name: file.name().to_owned(),
            source,
        })?;
        Ok(self.inner.settings.config_dir.join(file.relative_path()))
    }

    /// The file's current bytes (`None`: absent) and permission bits.
    async fn current(&self, file: &EditableFile) -> Result<(Option<Vec<u8>>, u32), EditError> {
        let path = self.live_path(file)?;
        let file = file.clone();
        blocking(move || match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, 0o644)),
            Err(source) => Err(EditError::Io { path, source }),
            Ok(meta) if !meta.is_file() => Err(EditError::NotARegularFile { file }),
            Ok(meta) => {
                let bytes = files::read_bytes(&path)?;
                Ok((bytes, meta.permissions().mode() & 0o7777))
            }
        })
        .await
    }

    /// A change to `new`, refused unless the file's version is `expected`.
    async fn versioned_change(
        &self,
        file: &EditableFile,
        expected: Version,
        new: Option<Vec<u8>>,
    ) -> Result<Change, EditError> {
        let (old, mode) = self.current(file).await?;
        let current = Version::of(old.as_deref());
        if current != expected {
            return Err(EditError::Conflict {
                file: file.clone(),
                current,
            });
        }
        Ok(Change {
            file: file.clone(),
            old,
            mode,
            new,
        })
    }

    /// Runs a hub edit of `changes` through the pipeline and reports it.
    async fn edit(
        &self,
        lock: &EditLock<'_>,
        changes: Vec<Change>,
        scope: Scope,
    ) -> Result<EditReport, EditError> {
        let edit = Edit {
            files: changes,
            scope,
            writer: Writer::Hub,
        };
        let applied = self.run(lock, edit).await?;
        let report = EditReport {
            changes: applied.changes,
            reload: applied.reload,
            running: applied.running.unwrap_or_default().into_iter().collect(),
            restarted: applied.restarted,
            warnings: applied.warnings,
            timings: applied.timings,
        };
        if !report.changes.is_empty() {
            tracing::info!(
                files = ?report.changes.iter().map(|c| c.file.to_string()).collect::<Vec<_>>(),
                reload = ?report.reload,
                restarted = ?report.restarted,
                validate_ms = u64::try_from(report.timings.validate.as_millis()).unwrap_or(u64::MAX),
                total_ms = u64::try_from(report.timings.total.as_millis()).unwrap_or(u64::MAX),
                "fail2ban config edited"
            );
        }
        Ok(report)
    }

    /// Names of the running jails; fails when fail2ban does not answer `ping`.
    async fn running_jails(&self) -> Result<BTreeSet<String>, Fail2banError> {
        let s = &self.inner.settings;
        let mut socket = Fail2banSocket::connect(&s.socket, s.socket_timeout).await?;
        socket.ping().await?;
        let names = socket.jail_names().await?;
        // The answers are in; a failed goodbye changes nothing.
        let _ = socket.close().await;
        Ok(names.into_iter().collect())
    }

    /// `fail2ban-client -c <dir> -s <socket> reload [<jail>]`; `Err` carries its messages.
    async fn reload(&self, scope: &ReloadScope) -> Result<Vec<String>, Vec<String>> {
        let s = &self.inner.settings;
        let mut args: Vec<OsString> = vec![
            "-c".into(),
            s.config_dir.clone().into(),
            "-s".into(),
            s.socket.clone().into(),
            "reload".into(),
        ];
        if let ReloadScope::Jail(jail) = scope {
            args.push(jail.into());
        }
        match s.tools.client(&args, s.tools.reload_timeout).await {
            Err(e) => Err(vec![e.to_string()]),
            Ok(output) if output.success() => Ok(tools::client_messages(&output, None)),
            Ok(output) => Err(tools::client_messages(&output, None)),
        }
    }
}

fn reader_dir(reader: &ConfigReader) -> PathBuf {
    reader.dir().to_owned()
}
