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

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use banhub_proto::rules::{NameError, check_name};

use super::content;
use super::error::ConfigError;
use super::files::{self, EditableFile};
use super::filter_test::{self, FilterSource, FilterTestError, FilterTestReport};
use super::ini;
use super::names::{FilterName, JailName};
use super::policy::{self, Policy, Written};
use super::reader::{ConfigReader, EffectiveConfig};
use super::staging::{
    Backup, Change, backup_dir_of, build_shadow, commit, io_err, list_backups, remove_leftovers,
    restore, save_backups, stage,
};
use super::tools::{self, Fail2banTools, ToolError};
use super::version::Version;
use crate::config::PolicySettings;
use crate::fail2ban::{Fail2banError, Fail2banSocket};

mod agent_files;
mod settle;
pub use agent_files::{AgentEdit, AgentEditReport, AgentWrite};

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

/// What an edit is about, for the checks and the reload.
#[derive(Debug, Clone)]
enum Scope {
    Jails(BTreeSet<String>),
    Filter(FilterName),
}

/// What validation learned about the new configuration.
#[derive(Debug)]
struct NewConfig {
    /// Jails fail2ban will start.
    enabled: BTreeSet<String>,
    /// Jails the configuration defines, enabled or not.
    defined: BTreeSet<String>,
    /// fail2ban's warnings that did not stop the edit.
    warnings: Vec<String>,
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
        self.check_text(&file, content)?;
        content::check_jail_override(jail, content).map_err(|reason| EditError::BadContent {
            file: file.clone(),
            reason,
        })?;
        let _lock = self.lock().await?;
        let change = self
            .versioned_change(&file, expected, Some(content.as_bytes().to_vec()))
            .await?;
        self.apply(vec![change], Scope::Jails([jail.to_string()].into()))
            .await
    }

    /// Removes `jail.d/<jail>.local`, if its version is still `expected`.
    pub async fn delete_jail_override(
        &self,
        jail: &JailName,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::JailOverride(jail.clone());
        let _lock = self.lock().await?;
        let change = self.versioned_change(&file, expected, None).await?;
        self.apply(vec![change], Scope::Jails([jail.to_string()].into()))
            .await
    }

    /// Replaces `filter.d/<filter>.local` with `content`, if its version is still `expected`.
    pub async fn write_filter(
        &self,
        filter: &FilterName,
        content: &str,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::FilterLocal(filter.clone());
        self.check_text(&file, content)?;
        content::check_filter(content).map_err(|reason| EditError::BadContent {
            file: file.clone(),
            reason,
        })?;
        let _lock = self.lock().await?;
        let change = self
            .versioned_change(&file, expected, Some(content.as_bytes().to_vec()))
            .await?;
        self.apply(vec![change], Scope::Filter(filter.clone()))
            .await
    }

    /// Replaces the agent's own defaults file (`jail.d/banhub-defaults.local`, a `[DEFAULT]`
    /// section only) with `content`, if its version is still `expected`; every jail reloads.
    pub async fn write_defaults(
        &self,
        content: &str,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::Defaults;
        self.check_text(&file, content)?;
        content::check_defaults(content).map_err(|reason| EditError::BadContent {
            file: file.clone(),
            reason,
        })?;
        let _lock = self.lock().await?;
        let change = self
            .versioned_change(&file, expected, Some(content.as_bytes().to_vec()))
            .await?;
        self.apply(vec![change], Scope::Jails(BTreeSet::new()))
            .await
    }

    /// Removes `filter.d/<filter>.local`, if its version is still `expected`.
    pub async fn delete_filter_local(
        &self,
        filter: &FilterName,
        expected: Version,
    ) -> Result<EditReport, EditError> {
        let file = EditableFile::FilterLocal(filter.clone());
        let _lock = self.lock().await?;
        let change = self.versioned_change(&file, expected, None).await?;
        self.apply(vec![change], Scope::Filter(filter.clone()))
            .await
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
        let _lock = self.lock().await?;
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
        self.apply(changes, Scope::Jails(targets)).await
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

    /// Validates, commits, reloads and checks `changes` (the lock is held by the caller).
    async fn apply(&self, changes: Vec<Change>, scope: Scope) -> Result<EditReport, EditError> {
        let started = Instant::now();
        let s = self.inner.settings.clone();
        let running_before = self.running_jails().await.map_err(EditError::Unavailable)?;
        let changes: Vec<Change> = changes.into_iter().filter(|c| c.old != c.new).collect();
        if changes.is_empty() {
            return Ok(EditReport {
                changes: Vec::new(),
                reload: ReloadScope::NotNeeded,
                running: running_before.into_iter().collect(),
                restarted: Vec::new(),
                warnings: Vec::new(),
                timings: EditTimings {
                    total: started.elapsed(),
                    ..EditTimings::default()
                },
            });
        }
        for change in &changes {
            self.live_path(&change.file)?;
        }

        let validate_started = Instant::now();
        let staged = {
            let (dir, changes) = (s.config_dir.clone(), changes.clone());
            blocking(move || stage(&dir, &changes)).await?
        };
        let shadow = {
            let (dir, parent, entries) = (
                s.config_dir.clone(),
                s.backup_dir.clone(),
                staged.entries.clone(),
            );
            blocking(move || build_shadow(&dir, &parent, &entries)).await?
        };
        self.check_policy(shadow.path(), &changes).await?;
        let NewConfig {
            enabled: enabled_after,
            defined: defined_after,
            warnings,
        } = self
            .validate(shadow.path(), &scope, &running_before)
            .await?;
        drop(shadow);
        let validate = validate_started.elapsed();

        {
            let (root, changes, keep) = (s.backup_dir.clone(), changes.clone(), s.keep_backups);
            blocking(move || save_backups(&root, &changes, keep)).await?;
        }

        let reload_started = Instant::now();
        let commit = {
            let entries = staged.entries.clone();
            blocking(move || commit(&entries)).await
        };
        drop(staged);
        if let Err(e) = commit {
            return Err(self
                .rollback(
                    &changes,
                    Stage::Commit,
                    vec![e.to_string()],
                    &running_before,
                )
                .await);
        }

        let targets: BTreeSet<String> = match &scope {
            Scope::Jails(jails) => jails.clone(),
            Scope::Filter(_) => BTreeSet::new(),
        };
        let reload = match targets.iter().next() {
            // `reload <jail>` fails for a jail the config no longer defines.
            Some(jail)
                if targets.len() == 1
                    && running_before.contains(jail)
                    && defined_after.contains(jail) =>
            {
                ReloadScope::Jail(jail.clone())
            }
            _ => ReloadScope::All,
        };
        let reload_messages = match self.reload(&reload).await {
            Ok(messages) => messages,
            Err(messages) => {
                return Err(self
                    .rollback(&changes, Stage::Reload, messages, &running_before)
                    .await);
            }
        };

        let must_run: BTreeSet<String> = running_before
            .union(&targets)
            .filter(|j| enabled_after.contains(*j))
            .cloned()
            .collect();
        let running = match self.running_jails().await {
            Ok(running) => running,
            Err(e) => {
                let mut messages = reload_messages;
                messages.push(format!("fail2ban does not answer after the reload: {e}"));
                return Err(self
                    .rollback(&changes, Stage::HealthCheck, messages, &running_before)
                    .await);
            }
        };
        let mut problems: Vec<String> = must_run
            .difference(&running)
            .map(|j| format!("jail {j} is not running after the reload; fail2ban's log says why"))
            .collect();
        problems.extend(
            targets
                .iter()
                .filter(|j| !enabled_after.contains(*j) && running.contains(*j))
                .map(|j| format!("jail {j} is still running although it is disabled")),
        );
        if !problems.is_empty() {
            let mut messages = reload_messages;
            messages.extend(problems);
            return Err(self
                .rollback(&changes, Stage::HealthCheck, messages, &running_before)
                .await);
        }
        let restarted = match self.settle(&changes, &running).await {
            Ok(restarted) => restarted,
            Err(problems) => {
                let mut messages = reload_messages;
                messages.extend(problems);
                return Err(self
                    .rollback(&changes, Stage::Verify, messages, &running_before)
                    .await);
            }
        };
        let reload_time = reload_started.elapsed();

        let report = EditReport {
            changes: changes
                .iter()
                .map(|c| FileChange {
                    file: c.file.clone(),
                    previous: Version::of(c.old.as_deref()),
                    current: Version::of(c.new.as_deref()),
                })
                .collect(),
            reload,
            running: running.into_iter().collect(),
            restarted,
            warnings: warnings.into_iter().chain(reload_messages).collect(),
            timings: EditTimings {
                validate,
                reload: reload_time,
                total: started.elapsed(),
            },
        };
        tracing::info!(
            files = ?report.changes.iter().map(|c| c.file.to_string()).collect::<Vec<_>>(),
            reload = ?report.reload,
            restarted = ?report.restarted,
            validate_ms = u64::try_from(validate.as_millis()).unwrap_or(u64::MAX),
            total_ms = u64::try_from(report.timings.total.as_millis()).unwrap_or(u64::MAX),
            "fail2ban config edited"
        );
        Ok(report)
    }

    /// The host policy on what `changes` introduce, with the shadow as the new configuration.
    async fn check_policy(&self, shadow: &Path, changes: &[Change]) -> Result<(), EditError> {
        let settings = self.inner.settings.policy.clone();
        let (dir, shadow, changes) = (
            self.inner.settings.config_dir.clone(),
            shadow.to_owned(),
            changes.to_vec(),
        );
        blocking(move || {
            let live = ConfigReader::new(&dir).load()?;
            let new = ConfigReader::new(&shadow).load()?;
            let texts: Vec<(&EditableFile, Option<String>, String)> = changes
                .iter()
                .map(|c| (&c.file, text_of(&c.old), text_of(&c.new).unwrap_or_default()))
                .collect();
            let written: Vec<Written<'_>> = texts
                .iter()
                .filter_map(|(file, old, new)| match file {
                    EditableFile::JailOverride(_) | EditableFile::Defaults => Some(Written::Jails {
                        old: old.as_deref(),
                        new,
                    }),
                    EditableFile::FilterLocal(_) => Some(Written::Filter {
                        old: old.as_deref(),
                        new,
                    }),
                    EditableFile::Agent(_) => None,
                })
                .collect();
            Policy::new(&settings, policy::available_actions(&dir))
                .check(&written, &live, &new)
                .map_err(|refusal| {
                    tracing::warn!(key = %refusal.key, reason = %refusal.reason, "the host policy refused a config edit");
                    EditError::Policy {
                        key: refusal.key,
                        reason: refusal.reason,
                        widen: refusal.widen,
                    }
                })
        })
        .await
    }

    /// `fail2ban-client -t` on the shadow, then what `-t` does not check: option values it
    /// only warns about, plain names and known backends for the edited jails, and the
    /// regular expressions of the filters that will be used.
    async fn validate(
        &self,
        shadow: &Path,
        scope: &Scope,
        running_before: &BTreeSet<String>,
    ) -> Result<NewConfig, EditError> {
        let s = &self.inner.settings;
        let args: Vec<OsString> = vec!["-c".into(), shadow.into(), "-t".into()];
        let output = s.tools.client(&args, s.tools.timeout).await?;
        let messages = tools::client_messages(&output, Some((shadow, &s.config_dir)));
        if !output.success() {
            return Err(EditError::Invalid { messages });
        }
        let targets: BTreeSet<String> = match scope {
            Scope::Jails(jails) => jails.clone(),
            Scope::Filter(_) => BTreeSet::new(),
        };
        // `maxretry = abc` passes -t with "Wrong value for 'maxretry' in 'sshd'. Using default
        // one": an operator who typed it wants to hear about it.
        let (errors, warnings): (Vec<String>, Vec<String>) = messages.into_iter().partition(|m| {
            m.contains("Wrong value for")
                && targets.iter().any(|j| m.contains(&format!("in '{j}'")))
        });
        if !errors.is_empty() {
            return Err(EditError::Invalid { messages: errors });
        }

        let reader = ConfigReader::new(shadow);
        let config: EffectiveConfig =
            blocking(move || reader.load().map_err(EditError::from)).await?;
        let mut problems = Vec::new();
        let mut filters: BTreeSet<(FilterName, Option<String>)> = BTreeSet::new();
        match scope {
            Scope::Filter(filter) => {
                filters.insert((filter.clone(), None));
            }
            Scope::Jails(jails) => {
                let reader = self.inner.reader.clone();
                let live = blocking(move || reader.load().map_err(EditError::from)).await?;
                if jails.is_empty() {
                    // A `[DEFAULT]` edit reaches every jail: check what each enabled one
                    // would start with (a bad backend would stop them all at reload).
                    for jail in config.enabled_jails() {
                        problems.extend(content::check_jail_references(&config, &jail));
                    }
                }
                for jail in jails {
                    problems.extend(content::check_jail_references(&config, jail));
                    let Some(info) = config.jail(jail).filter(|j| j.enabled) else {
                        continue;
                    };
                    // A running jail whose filter line is unchanged compiled it at its last
                    // start; compiling again would only add fail2ban-regex's ~0.5 s start-up.
                    let unchanged = running_before.contains(jail)
                        && live.jail(jail).map(|j| j.filter) == Some(info.filter.clone());
                    if let Some(filter) = info.filter
                        && let Ok(name) = filter.filter_name()
                        && !unchanged
                    {
                        filters.insert((name, filter.options));
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(EditError::Invalid { messages: problems });
        }
        for (filter, options) in &filters {
            filter_test::compile_check(&s.tools, shadow, &s.backup_dir, filter, options.as_deref())
                .await
                .map_err(|messages| EditError::Invalid { messages })?;
        }
        Ok(NewConfig {
            enabled: config.enabled_jails(),
            defined: config.jail_names().into_iter().map(str::to_owned).collect(),
            warnings,
        })
    }

    /// Puts the old bytes back, reloads everything and reports; the returned error says
    /// whether that worked.
    async fn rollback(
        &self,
        changes: &[Change],
        stage: Stage,
        messages: Vec<String>,
        running_before: &BTreeSet<String>,
    ) -> EditError {
        tracing::warn!(%stage, ?messages, "config edit failed; restoring the previous files");
        let restored = {
            let (dir, changes) = (self.inner.settings.config_dir.clone(), changes.to_vec());
            blocking(move || restore(&dir, &changes)).await
        };
        if let Err(e) = restored {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages: vec![e.to_string()],
            };
        }
        if let Err(rollback_messages) = self.reload(&ReloadScope::All).await {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages,
            };
        }
        let running = match self.running_jails().await {
            Ok(running) => running,
            Err(e) => {
                return EditError::RollbackFailed {
                    stage,
                    messages,
                    rollback_messages: vec![format!(
                        "fail2ban does not answer after reloading the previous files: {e}"
                    )],
                };
            }
        };
        // The reload back has the same blind spots as the one forward.
        if let Err(rollback_messages) = self.settle(changes, &running).await {
            return EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages,
            };
        }
        EditError::RolledBack {
            stage,
            messages,
            rollback: RollbackReport {
                restored: changes.iter().map(|c| c.file.clone()).collect(),
                missing_jails: running_before.difference(&running).cloned().collect(),
            },
        }
    }
}

/// A file's bytes as text (`None`: absent; bytes that are not UTF-8 read as nothing).
fn text_of(bytes: &Option<Vec<u8>>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8(b.clone()).unwrap_or_default())
}

fn reader_dir(reader: &ConfigReader) -> PathBuf {
    reader.dir().to_owned()
}
