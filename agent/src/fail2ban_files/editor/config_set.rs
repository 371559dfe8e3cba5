//! A set of files written as one hub edit: every file checked (text, its kind's rule, its expected
//! version), then all of them through the pipeline together, with one reload, all or none. The
//! commit-confirm record ([`crate::fail2ban_files::pending`]) is written by the caller's hook
//! under the edit lock, after the versions matched and before any file is touched; the restore
//! of a change puts the recorded bytes back through the same pipeline.

use std::collections::BTreeSet;

use super::pipeline::Scope;
use super::{ConfigEditor, EditError, EditReport, blocking};
use crate::fail2ban_files::content;
use crate::fail2ban_files::files::EditableFile;
use crate::fail2ban_files::staging::Change;
use crate::fail2ban_files::version::Version;

/// One file of a set: its new text (`None` removes it) and the version it must have now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetFile {
    pub file: EditableFile,
    pub content: Option<String>,
    pub expected: Version,
}

/// What a file held before a set replaced it (`None`: it did not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Previous {
    pub file: EditableFile,
    pub content: Option<Vec<u8>>,
}

impl ConfigEditor {
    /// The text checks of one file of a set, without touching the disk.
    pub fn check_set_file(&self, file: &EditableFile, text: &str) -> Result<(), EditError> {
        self.check_text(file, text)?;
        let checked = match file {
            EditableFile::JailOverride(jail) => content::check_jail_override(jail, text).map(drop),
            EditableFile::FilterLocal(_) => content::check_filter(text).map(drop),
            EditableFile::Defaults => content::check_defaults(text).map(drop),
            EditableFile::Agent(_) => Err("the agent's own files are changed only by \
                                           `banhub-agent install-action`"
                .to_owned()),
        };
        checked.map_err(|reason| EditError::BadContent {
            file: file.clone(),
            reason,
        })
    }

    /// Writes `set` as one edit if every file still has its expected version. `before_write`
    /// gets what each file holds now, under the lock, before anything is written; its error
    /// stops the edit with nothing changed.
    pub async fn apply_set<F>(
        &self,
        set: Vec<SetFile>,
        before_write: F,
    ) -> Result<EditReport, EditError>
    where
        F: FnOnce(Vec<Previous>) -> Result<(), EditError> + Send + 'static,
    {
        if set.is_empty() {
            return Err(EditError::NothingToDo);
        }
        for item in &set {
            if let Some(text) = &item.content {
                self.check_set_file(&item.file, text)?;
            }
        }
        let lock = self.lock().await?;
        let mut changes = Vec::with_capacity(set.len());
        for item in set {
            let new = item.content.map(String::into_bytes);
            changes.push(
                self.versioned_change(&item.file, item.expected, new)
                    .await?,
            );
        }
        let previous = changes
            .iter()
            .map(|c| Previous {
                file: c.file.clone(),
                content: c.old.clone(),
            })
            .collect();
        blocking(move || before_write(previous)).await?;
        let scope = scope_of(&changes);
        self.edit(&lock, changes, scope).await
    }

    /// Puts `previous` back as one edit, whatever the files hold now.
    pub async fn restore_set(&self, previous: Vec<Previous>) -> Result<EditReport, EditError> {
        let lock = self.lock().await?;
        let mut changes = Vec::with_capacity(previous.len());
        for item in previous {
            let (old, mode) = self.current(&item.file).await?;
            changes.push(Change {
                file: item.file,
                old,
                mode,
                new: item.content,
            });
        }
        let scope = scope_of(&changes);
        self.edit(&lock, changes, scope).await
    }
}

/// The jails a set reaches; a set of one filter file alone is that filter's edit, and a set
/// without jail files (the defaults) reaches every jail.
fn scope_of(changes: &[Change]) -> Scope {
    let jails: BTreeSet<String> = changes
        .iter()
        .filter_map(|c| match &c.file {
            EditableFile::JailOverride(jail) => Some(jail.to_string()),
            _ => None,
        })
        .collect();
    match changes {
        [
            Change {
                file: EditableFile::FilterLocal(filter),
                ..
            },
        ] => Scope::Filter(filter.clone()),
        _ => Scope::Jails(jails),
    }
}
