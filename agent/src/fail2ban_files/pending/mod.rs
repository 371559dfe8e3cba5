//! Config-set changes with commit-confirm: a set of files applied through the editor, the files
//! they replaced recorded durably first ([`record`]), and put back by the agent itself unless the
//! hub confirms before the deadline, also across an agent restart (a deadline already past
//! reverts at start). One change may be pending at a time on a host.
//!
//! Entry points: [`ConfigChanges::apply`], [`ConfigChanges::settle`], [`ConfigChanges::status`]
//! and [`ConfigChanges::run`], the loop that reverts at the deadline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use super::editor::{ConfigEditor, EditError, EditReport, Previous, SetFile};
use super::version::Version;

pub mod record;

pub use record::{Phase, Record, RecordError, SavedFile, logical_file};

/// The shortest and longest confirmation window an apply may ask for (0: none).
pub const CONFIRM_WINDOW_SECS: std::ops::RangeInclusive<u32> = 10..=3600;
/// How long a failed revert waits before it is tried again.
const REVERT_RETRY: Duration = Duration::from_secs(10);
/// Most files of one set.
pub const MAX_SET_FILES: usize = 64;

/// Why a change was refused or could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error(
        "change {pending} is still pending (deadline {deadline_unix_ms} ms); confirm or revert it first"
    )]
    Busy {
        pending: String,
        deadline_unix_ms: i64,
    },
    #[error("this host holds no record of change {0}")]
    Unknown(String),
    #[error(
        "the confirmation window is {min} to {max} seconds (0: none), got {0}",
        min = CONFIRM_WINDOW_SECS.start(),
        max = CONFIRM_WINDOW_SECS.end()
    )]
    Window(u32),
    #[error(
        "the files changed since change {change_id} was applied ({file}); revert them by hand or apply a new set"
    )]
    ChangedSince { change_id: String, file: String },
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// The host's config-set changes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConfigChanges {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    editor: ConfigEditor,
    path: PathBuf,
    /// Held across an apply, a settle or a revert, so they never interleave.
    state: Mutex<()>,
    /// Wakes [`ConfigChanges::run`] when a deadline is set or cleared.
    wake: Notify,
}

impl ConfigChanges {
    /// Changes of `editor`'s directory, recorded in `<state_dir>/config-change.json`.
    pub fn new(editor: ConfigEditor, state_dir: &Path) -> Self {
        Self {
            inner: Arc::new(Inner {
                editor,
                path: state_dir.join(record::RECORD_FILE),
                state: Mutex::new(()),
                wake: Notify::new(),
            }),
        }
    }

    /// The latest change, or `change_id`'s (an error when another change is the latest).
    pub async fn status(&self, change_id: &str) -> Result<Record, ChangeError> {
        let _turn = self.inner.state.lock().await;
        let record = self.load().await?;
        match record {
            Some(record) if change_id.is_empty() || record.change_id == change_id => Ok(record),
            _ => Err(ChangeError::Unknown(change_id.to_owned())),
        }
    }

    /// Applies `set`; with `confirm_within_secs` > 0 the change stays pending until confirmed and
    /// is reverted at the deadline. The same id again answers what became of it.
    pub async fn apply(
        &self,
        change_id: &str,
        set: Vec<SetFile>,
        confirm_within_secs: u32,
    ) -> Result<(Record, EditReport), ChangeError> {
        if confirm_within_secs != 0 && !CONFIRM_WINDOW_SECS.contains(&confirm_within_secs) {
            return Err(ChangeError::Window(confirm_within_secs));
        }
        let _turn = self.inner.state.lock().await;
        if let Some(current) = self.load().await?
            && current.phase == Phase::Pending
        {
            return Err(ChangeError::Busy {
                pending: current.change_id,
                deadline_unix_ms: current.deadline_unix_ms,
            });
        }
        let window = i64::from(confirm_within_secs) * 1000;
        // While it is applied, even a change without a window reverts if the agent dies
        // half-way; the final deadline is set once the reload is through.
        let applying_window = if window == 0 { 60_000 } else { window };
        let path = self.inner.path.clone();
        let id = change_id.to_owned();
        let pending = move |previous: Vec<Previous>| {
            let record = Record {
                change_id: id,
                phase: Phase::Pending,
                reason: "being applied".to_owned(),
                deadline_unix_ms: now_ms() + applying_window,
                previous: previous.into_iter().map(saved).collect::<Result<_, _>>()?,
                applied: Vec::new(),
            };
            record::save(&path, &record).map_err(|e| EditError::Io {
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })
        };
        let report = match self.inner.editor.apply_set(set, pending).await {
            Ok(report) => report,
            Err(e) => {
                // A failed restore leaves the record pending, so the deadline tries it again.
                if !matches!(e, EditError::RollbackFailed { .. }) {
                    self.forget(change_id).await?;
                }
                self.inner.wake.notify_one();
                return Err(e.into());
            }
        };
        let mut record = self.load().await?.ok_or_else(|| {
            ChangeError::Unknown(format!("{change_id} (its record vanished while applying)"))
        })?;
        record.applied = report
            .changes
            .iter()
            .map(|c| (c.file.to_string(), c.current.to_string()))
            .collect();
        if window == 0 {
            record.phase = Phase::Confirmed;
            record.deadline_unix_ms = 0;
            record.reason = "applied; no confirmation was asked for".to_owned();
        } else {
            record.deadline_unix_ms = now_ms() + window;
            record.reason = "applied; waiting for the hub's confirmation".to_owned();
        }
        self.save(&record).await?;
        self.inner.wake.notify_one();
        tracing::info!(
            change_id,
            deadline_unix_ms = record.deadline_unix_ms,
            files = record.applied.len(),
            "config set applied"
        );
        Ok((record, report))
    }

    /// Confirms the change (`confirm`), or puts back the files it replaced now. A confirmation
    /// after the deadline reverts instead; settling a settled change answers its phase again.
    pub async fn settle(&self, change_id: &str, confirm: bool) -> Result<Record, ChangeError> {
        let _turn = self.inner.state.lock().await;
        let Some(mut record) = self.load().await?.filter(|r| r.change_id == change_id) else {
            return Err(ChangeError::Unknown(change_id.to_owned()));
        };
        let now = now_ms();
        match (record.phase, confirm) {
            (Phase::Pending, true) if !record.overdue(now) => {
                record.phase = Phase::Confirmed;
                record.reason = "confirmed by the hub".to_owned();
                self.save(&record).await?;
                self.inner.wake.notify_one();
                tracing::info!(change_id, "config set confirmed");
                Ok(record)
            }
            (Phase::Pending, true) => {
                self.revert(record, "the confirmation came after the deadline")
                    .await
            }
            (Phase::Pending, false) => self.revert(record, "reverted at the hub's request").await,
            (Phase::Confirmed, false) => {
                self.check_unchanged(&record).await?;
                self.revert(record, "reverted at the hub's request").await
            }
            (Phase::Confirmed | Phase::Reverted, _) => Ok(record),
        }
    }

    /// Reverts the pending change at its deadline, at start when the deadline already passed,
    /// and again after a failed revert, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let wait = match self.due().await {
                Ok(Some(due)) => Duration::from_millis(u64::try_from(due - now_ms()).unwrap_or(0)),
                Ok(None) => Duration::from_secs(3600),
                Err(e) => {
                    tracing::error!(error = %e, "the config change record cannot be read");
                    REVERT_RETRY
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.inner.wake.notified() => continue,
                () = tokio::time::sleep(wait) => {}
            }
            if let Err(e) = self.revert_if_overdue().await {
                tracing::error!(error = %e, "the overdue config change could not be reverted; trying again");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(REVERT_RETRY) => {}
                }
            }
        }
    }

    /// The deadline of the pending change, if any.
    async fn due(&self) -> Result<Option<i64>, ChangeError> {
        let _turn = self.inner.state.lock().await;
        Ok(self
            .load()
            .await?
            .filter(|r| r.phase == Phase::Pending && r.deadline_unix_ms > 0)
            .map(|r| r.deadline_unix_ms))
    }

    /// Reverts the pending change when its deadline has passed.
    pub async fn revert_if_overdue(&self) -> Result<Option<Record>, ChangeError> {
        let _turn = self.inner.state.lock().await;
        match self.load().await? {
            Some(record) if record.overdue(now_ms()) => self
                .revert(
                    record,
                    "the hub did not confirm the change before its deadline",
                )
                .await
                .map(Some),
            _ => Ok(None),
        }
    }

    /// Puts the recorded files back through the editor and records the outcome (the caller holds
    /// the turn). A failure leaves the record as it was.
    async fn revert(&self, mut record: Record, why: &str) -> Result<Record, ChangeError> {
        let mut previous = Vec::with_capacity(record.previous.len());
        for saved in &record.previous {
            let file = logical_file(&saved.path).map_err(|reason| {
                ChangeError::Record(RecordError::Damaged {
                    path: self.inner.path.clone(),
                    detail: reason,
                })
            })?;
            previous.push(Previous {
                file,
                content: saved.content.clone().map(String::into_bytes),
            });
        }
        tracing::warn!(change_id = %record.change_id, reason = why, "reverting a config change");
        self.inner.editor.restore_set(previous).await?;
        record.phase = Phase::Reverted;
        record.reason = why.to_owned();
        self.save(&record).await?;
        self.inner.wake.notify_one();
        tracing::info!(change_id = %record.change_id, "config change reverted");
        Ok(record)
    }

    /// Refuses to revert a confirmed change whose files were changed since.
    async fn check_unchanged(&self, record: &Record) -> Result<(), ChangeError> {
        for (path, version) in &record.applied {
            let file = logical_file(path).map_err(|reason| RecordError::Damaged {
                path: self.inner.path.clone(),
                detail: reason,
            })?;
            let current = self.inner.editor.read(move |r| r.editable(&file)).await;
            let current = current.map_err(EditError::from)?.version;
            if Version::parse(version).ok() != Some(current) {
                return Err(ChangeError::ChangedSince {
                    change_id: record.change_id.clone(),
                    file: path.clone(),
                });
            }
        }
        Ok(())
    }

    async fn load(&self) -> Result<Option<Record>, ChangeError> {
        let path = self.inner.path.clone();
        Ok(run_blocking(move || record::load(&path)).await?)
    }

    async fn save(&self, record: &Record) -> Result<(), ChangeError> {
        let (path, record) = (self.inner.path.clone(), record.clone());
        Ok(run_blocking(move || record::save(&path, &record)).await?)
    }

    /// Removes the record of a change that changed nothing.
    async fn forget(&self, change_id: &str) -> Result<(), ChangeError> {
        if self
            .load()
            .await?
            .is_some_and(|r| r.change_id == change_id && r.phase == Phase::Pending)
        {
            let path = self.inner.path.clone();
            run_blocking(move || match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(RecordError::Io { path, source: e })
                }
                _ => Ok(()),
            })
            .await?;
        }
        Ok(())
    }
}

/// A file's previous bytes as the record keeps them; text only, so a file that is not UTF-8
/// stops the change before anything is written.
fn saved(previous: Previous) -> Result<SavedFile, EditError> {
    let content = previous
        .content
        .map(String::from_utf8)
        .transpose()
        .map_err(|_| EditError::BadContent {
            file: previous.file.clone(),
            reason: "the file on the host is not UTF-8 text, so it cannot be recorded for a revert"
                .to_owned(),
        })?;
    Ok(SavedFile {
        path: previous.file.to_string(),
        content,
    })
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn run_blocking<T, F>(work: F) -> Result<T, RecordError>
where
    F: FnOnce() -> Result<T, RecordError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RecordError::Io {
            path: PathBuf::from("(config change task)"),
            source: std::io::Error::other(e),
        })?
}
