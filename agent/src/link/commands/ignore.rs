//! Allowlists: fail2ban's `ignoreip`, global (`[DEFAULT]`) and per jail, read as configured and
//! as in effect, and written through the safe editor (which reloads).
//!
//! Where the lists live:
//! * The global list is `ignoreip` in `[DEFAULT]` of `jail.d/banhub-defaults.local`, a file
//!   the agent owns. It is read after `jail.conf`, `jail.local` and the `jail.d/*.conf` files,
//!   so it wins over them; a `[DEFAULT]` in a `jail.d/*.local` that sorts after it would win
//!   instead, and a write says so.
//! * A jail's own list is `ignoreip` in `jail.d/<jail>.local`. Written by banhub, it adds to
//!   the global list (`ignoreip = %(default/ignoreip)s <entries>`) rather than replacing it, so
//!   allowing one more address for a jail never drops the loopback or office networks allowed
//!   everywhere. When no file sets a global list, the reference is left out (fail2ban would
//!   refuse a reference to a missing value), and the jail's list stands alone.
//!
//! A list shows as entries (what the file holding it says, references left out) and as
//! effective (what fail2ban applies: for a running jail its own answer, normalized by fail2ban,
//! else the resolved configuration).

use std::collections::BTreeSet;

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{GetIgnoreList, IgnoreList, SetIgnoreList};

use super::Context;
use super::args;
use super::failure::{Failure, Reply, parse_version, version_text};
use super::jails::config_change;
use crate::fail2ban_files::{EditableFile, EffectiveConfig, JailName, ini};

const OPTION: &str = "ignoreip";
/// What a banhub-written jail list starts with, to include the global list.
const INHERIT: &str = "%(default/ignoreip)s";
/// The first line of a defaults file the agent creates.
const DEFAULTS_HEADER: &str = "# Managed by banhub: settings for every jail. Edit through banhub; \
                               hand edits are kept but may conflict.\n";
/// Stands in for the value while `ini::set_option` places the option (it accepts plain values
/// only, not `%(...)s` references or an empty list).
const PLACEHOLDER: &str = "banhub-ignoreip-value";

/// fail2ban splits `ignoreip` on white space and commas.
fn tokens(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
}

/// The entries of a raw value: interpolation references left out.
fn entries_of(raw: &str) -> Vec<String> {
    tokens(raw)
        .filter(|t| !t.contains("%("))
        .map(str::to_owned)
        .collect()
}

/// `GetIgnoreList`: a jail's list, or (empty jail) the global one.
pub async fn get_ignore_list(context: &Context, request: GetIgnoreList) -> Reply {
    let jail = match request.jail.as_str() {
        "" => None,
        raw => Some(args::jail(raw)?),
    };
    let editor = context.editor()?;
    let config = editor.read(|r| r.load()).await?;
    let (file, entries, effective) = match jail {
        None => {
            let (entries, effective) = global_list(&config);
            (EditableFile::Defaults, entries, effective)
        }
        Some(jail) => {
            let (entries, configured) = jail_list(&config, &jail)?;
            let effective = match context.fail2ban.lease().await {
                Ok(mut socket) => socket.ignore_list(jail.as_str()).await.ok(),
                Err(_) => None,
            };
            (
                EditableFile::JailOverride(jail),
                entries,
                effective.unwrap_or(configured),
            )
        }
    };
    let path = file.to_string();
    let version = editor.read(move |r| r.editable(&file)).await?.version;
    Ok(Outcome::IgnoreList(IgnoreList {
        entries,
        effective,
        path,
        version: version_text(version),
    }))
}

/// The global list: `[DEFAULT] ignoreip` as the files resolve it (entries and effective are the
/// same: fail2ban keeps no global list of its own).
fn global_list(config: &EffectiveConfig) -> (Vec<String>, Vec<String>) {
    let value = config
        .default_setting(OPTION)
        .and_then(|s| s.value.ok())
        .unwrap_or_default();
    let list: Vec<String> = tokens(&value).map(str::to_owned).collect();
    (list.clone(), list)
}

/// A jail's own entries (empty when it only inherits) and its resolved list.
fn jail_list(
    config: &EffectiveConfig,
    jail: &JailName,
) -> Result<(Vec<String>, Vec<String>), Failure> {
    let info = config.jail(jail.as_str()).ok_or_else(|| {
        Failure::not_found(format!(
            "jail {jail} is not defined in fail2ban's configuration"
        ))
    })?;
    let Some(setting) = info.settings.get(OPTION) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let own = if setting.origin.section == jail.as_str() {
        entries_of(&setting.raw)
    } else {
        Vec::new()
    };
    let resolved = setting
        .value
        .as_deref()
        .map(|v| tokens(v).map(str::to_owned).collect())
        .unwrap_or_default();
    Ok((own, resolved))
}

/// `SetIgnoreList`: replaces a jail's own list or the global one, validated by fail2ban and
/// reloaded by the editor.
pub async fn set_ignore_list(context: &Context, request: SetIgnoreList) -> Reply {
    let jail = match request.jail.as_str() {
        "" => None,
        raw => Some(args::writable_jail(raw)?),
    };
    if request.entries.len() > args::MAX_IGNORE_ENTRIES {
        return Err(Failure::invalid(format!(
            "an ignore list holds at most {} entries",
            args::MAX_IGNORE_ENTRIES
        )));
    }
    let mut seen = BTreeSet::new();
    let mut entries = Vec::new();
    for raw in &request.entries {
        let entry = args::ignore_entry(raw)?;
        if seen.insert(entry.clone()) {
            entries.push(entry);
        }
    }
    let file = match &jail {
        Some(jail) => EditableFile::JailOverride(jail.clone()),
        None => EditableFile::Defaults,
    };
    let expected = parse_version(&request.expected_version, &file.to_string())?;
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let config = editor.read(|r| r.load()).await?;
    let read = file.clone();
    let current = editor.read(move |r| r.editable(&read)).await?;
    if current.version != expected {
        return Err(crate::fail2ban_files::EditError::Conflict {
            file,
            current: current.version,
        }
        .into());
    }
    let text = current.content.unwrap_or_default();
    let report = match &jail {
        Some(jail) => {
            config.jail(jail.as_str()).ok_or_else(|| {
                Failure::not_found(format!(
                    "jail {jail} is not defined in fail2ban's configuration"
                ))
            })?;
            let inherit = config.default_setting(OPTION).is_some();
            let value = std::iter::once(INHERIT)
                .filter(|_| inherit)
                .chain(entries.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            let new = set_value(&text, jail.as_str(), &value)?;
            editor.write_jail_override(jail, &new, expected).await?
        }
        None => {
            let base = if text.is_empty() {
                DEFAULTS_HEADER
            } else {
                &text
            };
            let new = set_value(base, ini::DEFAULT_SECTION, &entries.join(" "))?;
            editor.write_defaults(&new, expected).await?
        }
    };
    context.bans.clear();
    let what = match &jail {
        Some(jail) => format!("ignore list of jail {jail}"),
        None => "global ignore list".to_owned(),
    };
    let mut change = config_change(context, &[report], &what).await;
    if jail.is_none()
        && let Ok(config) = editor.read(|r| r.load()).await
        && let Some(setting) = config.default_setting(OPTION)
        && setting.origin.file != EditableFile::Defaults.to_string()
    {
        change.message.push_str(&format!(
            "\nwarning: {} sets [DEFAULT] ignoreip after banhub's file, so fail2ban uses that \
             list instead",
            setting.origin.file
        ));
    }
    Ok(Outcome::ConfigChange(change))
}

/// `text` with `ignoreip = <value>` in `[section]` (added, or replacing the option), the rest
/// kept as it was.
fn set_value(text: &str, section: &str, value: &str) -> Result<String, Failure> {
    if text.contains(PLACEHOLDER) {
        return Err(Failure::internal(format!(
            "the file holding the list contains {PLACEHOLDER:?}; edit it by hand"
        )));
    }
    let placed = ini::set_option(text, section, OPTION, PLACEHOLDER)
        .map_err(|e| Failure::invalid(format!("cannot set {OPTION} in this file: {e}")))?;
    let line = format!("{OPTION} = {PLACEHOLDER}");
    let replacement = if value.is_empty() {
        format!("{OPTION} =")
    } else {
        format!("{OPTION} = {value}")
    };
    if placed.matches(&line).count() != 1 {
        return Err(Failure::internal(format!(
            "cannot set {OPTION} in this file; edit it by hand"
        )));
    }
    Ok(placed.replacen(&line, &replacement, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_set_in_place() {
        assert_eq!(
            set_value("", "sshd", "%(default/ignoreip)s 192.0.2.1").expect("set"),
            "[sshd]\nignoreip = %(default/ignoreip)s 192.0.2.1\n"
        );
        assert_eq!(
            set_value(
                "[sshd]\nmaxretry = 2\nignoreip = 1.2.3.4\n  5.6.7.8\n",
                "sshd",
                ""
            )
            .expect("set"),
            "[sshd]\nmaxretry = 2\nignoreip =\n"
        );
        let defaults = set_value(DEFAULTS_HEADER, "DEFAULT", "10.0.0.0/8 ::1").expect("set");
        assert!(defaults.starts_with("# Managed by banhub"), "{defaults}");
        assert!(
            defaults.ends_with("[DEFAULT]\nignoreip = 10.0.0.0/8 ::1\n"),
            "{defaults}"
        );
        assert!(set_value(PLACEHOLDER, "DEFAULT", "x").is_err());
    }

    #[test]
    fn entries_leave_references_out() {
        assert_eq!(
            entries_of("%(default/ignoreip)s 192.0.2.1,192.0.2.2\n  host.example"),
            ["192.0.2.1", "192.0.2.2", "host.example"]
        );
        assert_eq!(entries_of(""), Vec::<String>::new());
    }
}
