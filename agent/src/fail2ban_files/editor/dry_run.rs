//! A set of files checked exactly as an edit of them would be, without writing anything live:
//! the text rules of each file, then, on a shadow of the config directory holding the new files,
//! the host policy, `fail2ban-client -t`, the jails' references and the filters' regular
//! expressions. The temp files and the shadow are removed on every path out.

use std::collections::BTreeSet;

use super::pipeline::Scope;
use super::{ConfigEditor, EditError, blocking};
use crate::fail2ban_files::content;
use crate::fail2ban_files::files::EditableFile;
use crate::fail2ban_files::filter_test;
use crate::fail2ban_files::staging::{self, Change};

impl ConfigEditor {
    /// Checks that `files` (each file with its new text, `None` to remove it) would pass every
    /// check of an edit; returns fail2ban's warnings. Nothing live changes.
    pub async fn validate_set(
        &self,
        files: Vec<(EditableFile, Option<String>)>,
    ) -> Result<Vec<String>, EditError> {
        if files.is_empty() {
            return Err(EditError::NothingToDo);
        }
        let (mut jails, mut filters, mut defaults) = (BTreeSet::new(), Vec::new(), false);
        for (file, text) in &files {
            if let Some(text) = text {
                self.check_text(file, text)?;
                let rule = match file {
                    EditableFile::JailOverride(jail) => {
                        content::check_jail_override(jail, text).map(drop)
                    }
                    EditableFile::FilterLocal(_) => content::check_filter(text).map(drop),
                    EditableFile::Defaults => content::check_defaults(text).map(drop),
                    EditableFile::Agent(_) => {
                        Err("banhub's own files are written by install-action only".to_owned())
                    }
                };
                rule.map_err(|reason| EditError::BadContent {
                    file: file.clone(),
                    reason,
                })?;
            }
            match file {
                EditableFile::JailOverride(jail) => {
                    jails.insert(jail.to_string());
                }
                EditableFile::FilterLocal(filter) if text.is_some() => filters.push(filter.clone()),
                EditableFile::FilterLocal(_) => {}
                EditableFile::Defaults => defaults = true,
                EditableFile::Agent(_) => {}
            }
        }
        let _lock = self.lock().await?;
        let running = self.running_jails().await.map_err(EditError::Unavailable)?;
        let mut changes = Vec::new();
        for (file, text) in files {
            self.live_path(&file)?;
            let (old, mode) = self.current(&file).await?;
            let new = text.map(String::into_bytes);
            if old != new {
                changes.push(Change {
                    file,
                    old,
                    mode,
                    new,
                });
            }
        }
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let s = self.inner.settings.clone();
        let staged = {
            let (dir, changes) = (s.config_dir.clone(), changes.clone());
            blocking(move || staging::stage(&dir, &changes)).await?
        };
        let shadow = {
            let (dir, parent, entries) = (
                s.config_dir.clone(),
                s.backup_dir.clone(),
                staged.entries.clone(),
            );
            blocking(move || staging::build_shadow(&dir, &parent, &entries)).await?
        };
        self.check_policy(shadow.path(), &changes).await?;
        let mut warnings = Vec::new();
        // A `[DEFAULT]` change reaches every enabled jail; the named jails are checked with
        // their filters.
        let mut scopes = Vec::new();
        if defaults {
            scopes.push(Scope::Jails(BTreeSet::new()));
        }
        if !jails.is_empty() || scopes.is_empty() {
            scopes.push(Scope::Jails(jails));
        }
        for scope in &scopes {
            let new = self.validate(shadow.path(), scope, &running).await?;
            warnings.extend(new.warnings);
        }
        for filter in &filters {
            filter_test::compile_check(&s.tools, shadow.path(), &s.backup_dir, filter, None)
                .await
                .map_err(|messages| EditError::Invalid { messages })?;
        }
        drop(shadow);
        drop(staged);
        warnings.dedup();
        Ok(warnings)
    }
}
