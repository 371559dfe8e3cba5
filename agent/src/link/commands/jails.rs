//! Jails as configured: the effective configuration (ListJails, GetJailConfig) and its safe edits
//! (SetJailsEnabled, WriteJailConfig) through the config editor, which validates with fail2ban,
//! reloads, health-checks and rolls back.
//!
//! Every edit holds the context's config gate, so commands never interleave their writes. A
//! WriteJailConfig body that is empty (or only white space) removes the file, which returns the
//! jail (or filter) to what the other files say.

use std::collections::BTreeSet;

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    ConfigChange, ConfigFile, FileEdit, FileVersion, GetJailConfig, JailConfig, JailEntry,
    JailList, RunningState, SetJailsEnabled, SettingDrift, WriteJailConfig,
};

use super::Context;
use super::args;
use super::failure::{Failure, Reply, parse_version, version_text};
use super::status::running_jails;
use crate::fail2ban_files::content::{self, action_names};
use crate::fail2ban_files::running::{JailState, running_values};
use crate::fail2ban_files::{
    EditReport, EditableFile, FilterName, JailInfo, JailName, ReloadScope, Version, VersionedFile,
};

/// Settings ListJails shows besides the ones with fields of their own.
const SHOWN_SETTINGS: [&str; 7] = [
    "filter",
    "maxretry",
    "findtime",
    "bantime",
    "port",
    "ignoreip",
    "banaction",
];

/// The running jails, or none and a warning saying why.
async fn running_or_warning(context: &Context) -> (BTreeSet<String>, Option<String>) {
    match running_jails(context).await {
        Ok(names) => (names.into_iter().collect(), None),
        Err(e) => (
            BTreeSet::new(),
            Some(format!(
                "fail2ban does not answer, so no jail is shown as running: {e}"
            )),
        ),
    }
}

/// `ListJails`: every jail of the effective configuration, enabled or not, and whether it runs.
pub async fn list_jails(context: &Context) -> Reply {
    let editor = context.editor()?;
    let config = editor.read(|r| r.load()).await?;
    let (running, warning) = running_or_warning(context).await;
    let mut warnings: Vec<String> = warning.into_iter().collect();
    warnings.extend(config.warnings().iter().cloned());
    let mut jails = Vec::new();
    let mut defined = BTreeSet::new();
    for info in config.jails() {
        warnings.extend(
            info.problems
                .iter()
                .map(|p| format!("jail {}: {p}", info.name)),
        );
        if info.jail_name().is_err() {
            warnings.push(format!(
                "jail {} breaks the name rule, so banhub cannot change it",
                args::quoted(&info.name)
            ));
        }
        defined.insert(info.name.clone());
        jails.push(jail_entry(&info, running.contains(&info.name)));
    }
    match editor.jail_states(&running).await {
        Ok(states) => {
            for entry in &mut jails {
                if let Some(state) = states.iter().find(|s| s.jail == entry.name) {
                    entry.running_state = Some(running_state(state));
                }
            }
        }
        Err(e) => warnings.push(format!(
            "what fail2ban runs could not be read, so it is not compared with the files: {e}"
        )),
    }
    for name in running.difference(&defined) {
        warnings.push(format!(
            "jail {name} runs but no configuration file defines it (it was added at run time)"
        ));
        jails.push(JailEntry {
            name: name.clone(),
            running: true,
            ..JailEntry::default()
        });
    }
    Ok(Outcome::Jails(JailList { jails, warnings }))
}

/// A running jail's values and drift, for JailEntry and JailConfig.
fn running_state(state: &JailState) -> RunningState {
    RunningState {
        settings: running_values(&state.running).into_iter().collect(),
        drift: state
            .drift
            .iter()
            .map(|d| SettingDrift {
                setting: d.setting.to_owned(),
                file_value: d.file.clone(),
                running_value: d.running.clone(),
            })
            .collect(),
    }
}

fn resolved(info: &JailInfo, key: &str) -> Option<String> {
    info.settings
        .get(key)
        .and_then(|s| s.value.as_ref().ok())
        .cloned()
}

fn jail_entry(info: &JailInfo, running: bool) -> JailEntry {
    JailEntry {
        name: info.name.clone(),
        enabled: info.enabled,
        running,
        filter: info
            .filter
            .as_ref()
            .map(|f| f.name.clone())
            .unwrap_or_default(),
        backend: info.backend.clone(),
        log_paths: resolved(info, "logpath")
            .map(|paths| {
                paths
                    .lines()
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        actions: resolved(info, "action")
            .map(|a| action_names(&a))
            .unwrap_or_default(),
        settings: SHOWN_SETTINGS
            .iter()
            .filter_map(|key| resolved(info, key).map(|v| ((*key).to_owned(), v)))
            .collect(),
        ..JailEntry::default()
    }
}

/// `SetJailsEnabled`: one validated edit with one reload, all or nothing.
pub async fn set_jails_enabled(context: &Context, request: SetJailsEnabled) -> Reply {
    if request.changes.is_empty() {
        return Err(Failure::invalid("no jails were given"));
    }
    if request.changes.len() > args::MAX_TOGGLES {
        return Err(Failure::invalid(format!(
            "at most {} jails can be changed at once",
            args::MAX_TOGGLES
        )));
    }
    let toggles = request
        .changes
        .iter()
        .map(|t| Ok((args::writable_jail(&t.jail)?, t.enabled)))
        .collect::<Result<Vec<(JailName, bool)>, Failure>>()?;
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let report = editor.set_jails_enabled(&toggles).await?;
    context.bans.clear();
    let what: Vec<String> = toggles
        .iter()
        .map(|(jail, on)| format!("{} {jail}", if *on { "enabled" } else { "disabled" }))
        .collect();
    Ok(Outcome::ConfigChange(
        config_change(context, &[report], &what.join(", ")).await,
    ))
}

/// What a successful edit did, for the hub.
pub(super) async fn config_change(
    context: &Context,
    reports: &[EditReport],
    what: &str,
) -> ConfigChange {
    let files: Vec<FileVersion> = reports
        .iter()
        .flat_map(|r| &r.changes)
        .map(|c| FileVersion {
            path: c.file.to_string(),
            version: version_text(c.current),
        })
        .collect();
    let running: BTreeSet<String> = reports
        .last()
        .map(|r| r.running.iter().cloned().collect())
        .unwrap_or_default();
    let failed_jails = match context.editor() {
        Ok(editor) => match editor.read(|r| r.load()).await {
            Ok(config) => config
                .enabled_jails()
                .into_iter()
                .filter(|j| !running.contains(j))
                .collect(),
            Err(_) => Vec::new(),
        },
        Err(_) => Vec::new(),
    };
    let mut message = if files.is_empty() {
        format!("{what}: nothing to change, the configuration already says so")
    } else {
        let reload = match reports.last().map(|r| &r.reload) {
            Some(ReloadScope::Jail(jail)) => format!("fail2ban reloaded jail {jail}"),
            Some(ReloadScope::All) => "fail2ban reloaded every jail".to_owned(),
            _ => "fail2ban was not reloaded".to_owned(),
        };
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        format!("{what}: wrote {}; {reload}", paths.join(", "))
    };
    let restarted: Vec<&str> = reports
        .iter()
        .flat_map(|r| &r.restarted)
        .map(String::as_str)
        .collect();
    if !restarted.is_empty() {
        message.push_str(&format!(
            "; restarted {} to run what the files say (a reload does not apply every change)",
            restarted.join(", ")
        ));
    }
    for warning in reports.iter().flat_map(|r| &r.warnings) {
        message.push('\n');
        message.push_str(warning);
    }
    ConfigChange {
        files,
        failed_jails,
        message,
    }
}

/// `GetJailConfig`: the jail's override, its filter's files and its effective settings.
pub async fn get_jail_config(context: &Context, request: GetJailConfig) -> Reply {
    let jail = args::jail(&request.jail)?;
    let editor = context.editor()?;
    let name = jail.clone();
    let view = editor.read(move |r| r.read_jail(&name)).await?;
    let (running, _) = running_or_warning(context).await;
    let running = running.contains(jail.as_str());
    let Some(info) = view.jail else {
        if running {
            return Ok(Outcome::JailConfig(JailConfig {
                jail: jail.to_string(),
                running,
                jail_override: Some(config_file(view.override_file)),
                ..JailConfig::default()
            }));
        }
        return Err(Failure::not_found(format!(
            "jail {jail} is not defined in fail2ban's configuration"
        )));
    };
    let filter = info.filter.as_ref().and_then(|f| f.filter_name().ok());
    let (filter_conf, filter_local) = match &filter {
        Some(name) => {
            let name = name.clone();
            let files = editor.read(move |r| r.filter_files(&name)).await?;
            (
                Some(config_file(files.conf)),
                Some(config_file(files.local)),
            )
        }
        None => (None, None),
    };
    let running_state = if running {
        let states = editor
            .jail_states(&[jail.to_string()].into())
            .await
            .map_err(Failure::from)?;
        states.first().map(|s| Box::new(running_state(s)))
    } else {
        None
    };
    Ok(Outcome::JailConfig(JailConfig {
        jail: jail.to_string(),
        enabled: info.enabled,
        running,
        running_state,
        jail_override: Some(config_file(view.override_file)),
        filter: filter.map(String::from).unwrap_or_default(),
        filter_conf,
        filter_local,
        effective: info
            .settings
            .iter()
            .filter_map(|(key, s)| s.value.as_ref().ok().map(|v| (key.clone(), v.clone())))
            .collect(),
    }))
}

fn config_file(file: VersionedFile) -> ConfigFile {
    ConfigFile {
        path: file.path,
        exists: file.content.is_some(),
        content: file.content.unwrap_or_default(),
        version: version_text(file.version),
    }
}

/// One file of a WriteJailConfig, checked.
struct Edit {
    file: EditableFile,
    /// `None`: remove the file.
    content: Option<String>,
    expected: Version,
}

impl Edit {
    fn parse(edit: FileEdit, file: EditableFile, max_bytes: usize) -> Result<Self, Failure> {
        let expected = parse_version(&edit.expected_version, &file.to_string())?;
        let content = if edit.content.trim().is_empty() {
            None
        } else {
            content::check_text(&edit.content, max_bytes).map_err(|reason| {
                Failure::invalid(format!("the new {file} is refused: {reason}"))
            })?;
            let checked = match &file {
                EditableFile::JailOverride(jail) => {
                    content::check_jail_override(jail, &edit.content).map(drop)
                }
                EditableFile::FilterLocal(_) => content::check_filter(&edit.content).map(drop),
                EditableFile::Defaults => content::check_defaults(&edit.content).map(drop),
                EditableFile::Agent(_) => Err("the agent's own files are changed only by \
                                               `banhub-agent install-action`"
                    .to_owned()),
            };
            checked.map_err(|reason| {
                Failure::invalid(format!("the new {file} is refused: {reason}"))
            })?;
            Some(edit.content)
        };
        Ok(Self {
            file,
            content,
            expected,
        })
    }
}

/// `WriteJailConfig`: the jail's override and/or its filter's local file. Both are checked
/// (content and version) before either is written; each write is then validated by fail2ban
/// and applied on its own (the editor has no two-file edit), the override first.
pub async fn write_jail_config(context: &Context, request: WriteJailConfig) -> Reply {
    let jail = args::writable_jail(&request.jail)?;
    if request.jail_override.is_none() && request.filter_local.is_none() {
        return Err(Failure::invalid(
            "nothing to write: send the jail's override, its filter's local file, or both",
        ));
    }
    let editor = context.editor()?;
    let max_bytes = editor.settings().max_file_bytes;
    let jail_edit = request
        .jail_override
        .map(|e| Edit::parse(e, EditableFile::JailOverride(jail.clone()), max_bytes))
        .transpose()?;
    let _gate = context.config_gate.lock().await;
    let filter_edit = match request.filter_local {
        None => None,
        Some(edit) => {
            let filter = jail_filter(context, &jail).await?;
            Some(Edit::parse(
                edit,
                EditableFile::FilterLocal(filter),
                max_bytes,
            )?)
        }
    };
    for edit in jail_edit.iter().chain(&filter_edit) {
        let file = edit.file.clone();
        let current = editor.read(move |r| r.editable(&file)).await?.version;
        if current != edit.expected {
            return Err(crate::fail2ban_files::EditError::Conflict {
                file: edit.file.clone(),
                current,
            }
            .into());
        }
    }

    let mut reports = Vec::new();
    if let Some(edit) = jail_edit {
        reports.push(apply(context, edit).await?);
    }
    if let Some(edit) = filter_edit {
        match apply(context, edit).await {
            Ok(report) => reports.push(report),
            Err(failure) => {
                let written: Vec<String> = reports
                    .iter()
                    .flat_map(|r| &r.changes)
                    .map(|c| format!("{} (version {})", c.file, c.current))
                    .collect();
                return Err(if written.is_empty() {
                    failure
                } else {
                    failure.prefixed(&format!(
                        "{} was written and is live; then the filter file was refused: ",
                        written.join(", ")
                    ))
                });
            }
        }
    }
    context.bans.clear();
    Ok(Outcome::ConfigChange(
        config_change(context, &reports, &format!("jail {jail}")).await,
    ))
}

/// The filter the jail uses now (whose `.local` a WriteJailConfig edits).
async fn jail_filter(context: &Context, jail: &JailName) -> Result<FilterName, Failure> {
    let name = jail.clone();
    let view = context.editor()?.read(move |r| r.read_jail(&name)).await?;
    let info = view.jail.ok_or_else(|| {
        Failure::not_found(format!(
            "jail {jail} is not defined in fail2ban's configuration, so it has no filter to edit"
        ))
    })?;
    let filter = info
        .filter
        .ok_or_else(|| Failure::invalid(format!("jail {jail} uses no filter")))?;
    filter.filter_name().map_err(|e| {
        Failure::invalid(format!(
            "jail {jail} uses filter {}, whose name banhub cannot edit: it {e}",
            args::quoted(&filter.name)
        ))
    })
}

async fn apply(context: &Context, edit: Edit) -> Result<EditReport, Failure> {
    let editor = context.editor()?;
    let report = match (&edit.file, edit.content) {
        (EditableFile::JailOverride(jail), Some(text)) => {
            editor.write_jail_override(jail, &text, edit.expected).await
        }
        (EditableFile::JailOverride(jail), None) => {
            editor.delete_jail_override(jail, edit.expected).await
        }
        (EditableFile::FilterLocal(filter), Some(text)) => {
            editor.write_filter(filter, &text, edit.expected).await
        }
        (EditableFile::FilterLocal(filter), None) => {
            editor.delete_filter_local(filter, edit.expected).await
        }
        (EditableFile::Defaults, Some(text)) => editor.write_defaults(&text, edit.expected).await,
        (EditableFile::Defaults, None) => {
            return Err(Failure::invalid("the defaults file cannot be removed"));
        }
        (EditableFile::Agent(_), _) => {
            return Err(Failure::invalid(
                "the agent's own files are changed only by `banhub-agent install-action`",
            ));
        }
    };
    Ok(report?)
}
