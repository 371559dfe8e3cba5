//! What a new configuration must pass before it goes live, checked on the shadow directory: the
//! host policy on what a hub edit introduces, `fail2ban-client -t`, and what `-t` misses (option
//! values it only warns about, jail references, the filters' regular expressions).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use super::pipeline::{NewConfig, Scope};
use super::{ConfigEditor, EditError, blocking};
use crate::fail2ban_files::content;
use crate::fail2ban_files::files::EditableFile;
use crate::fail2ban_files::filter_test;
use crate::fail2ban_files::names::FilterName;
use crate::fail2ban_files::policy::{self, Policy, Written};
use crate::fail2ban_files::reader::{ConfigReader, EffectiveConfig};
use crate::fail2ban_files::staging::Change;
use crate::fail2ban_files::tools;

impl ConfigEditor {
    /// The host policy on what `changes` introduce, with the shadow as the new configuration.
    pub(super) async fn check_policy(
        &self,
        shadow: &Path,
        changes: &[Change],
    ) -> Result<(), EditError> {
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
    pub(super) async fn validate(
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
                // A filter of its own whose file was removed has nothing left to compile; a jail
                // still using it already failed `-t` above.
                let dir = shadow.join("filter.d");
                let exists = ["conf", "local"]
                    .iter()
                    .any(|ext| dir.join(format!("{filter}.{ext}")).exists());
                if exists {
                    filters.insert((filter.clone(), None));
                }
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
                    // start; compiling again would only add fail2ban-regex's start-up.
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
}

/// A file's bytes as text (`None`: absent; bytes that are not UTF-8 read as nothing).
fn text_of(bytes: &Option<Vec<u8>>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8(b.clone()).unwrap_or_default())
}
