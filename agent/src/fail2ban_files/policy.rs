//! The host policy: what a configuration write from the hub may introduce on this host, as root
//! set it in the agent's own configuration (`[policy]`, never written by the hub). The editor
//! checks every hub write with it before fail2ban reads the new files.
//!
//! By default the hub chooses no command: no `action*` key in an action's parameters, no
//! `ignorecommand`, none of banhub's own action's program and file parameters, no command key in
//! a filter. Actions are chosen by name among the files root put in `action.d`, their other
//! parameters are free but fail2ban puts them unescaped into shell commands, so they may not
//! hold shell metacharacters; log paths stay under the allowed prefixes. A write is checked on
//! what it introduces: the options its text sets that the file did not hold before (resolved in
//! the new configuration), and every jail whose resolved actions, `ignorecommand` or log paths
//! it changes.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use banhub_proto::rules::check_name;

use super::content::{action_entries, split_entry};
use super::ini::{self, DEFAULT_SECTION, IniFile};
use super::reader::EffectiveConfig;
use crate::config::PolicySettings;

/// Parameters of banhub's own action that name a program, a URL or a file the notifier reads:
/// chosen by the hub they would run a program or send the host's files elsewhere.
const BANHUB_COMMAND_PARAMS: [&str; 3] = ["notify", "relay_url", "secret_file"];
/// banhub's own action.
const BANHUB_ACTION: &str = "banhub";
/// Jail keys that actions put into their commands, through `%(key)s` in the action list or a
/// tag; `true` where a space is part of ordinary values (`REJECT --reject-with …`).
const INTERPOLATED_KEYS: [(&str, bool); 12] = [
    ("port", false),
    ("protocol", false),
    ("chain", false),
    ("blocktype", true),
    ("name", false),
    ("bantime", false),
    ("findtime", false),
    ("maxretry", false),
    ("mta", false),
    ("sender", false),
    ("sendername", true),
    ("destemail", false),
];
/// Characters a shell gives a meaning to, refused in values fail2ban puts into commands.
const SHELL_CHARS: &str = "`$;|&<>\\\"'(){}[]*?!#~%\n\r";

/// Why the policy refuses a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The key at fault (`actionban`, `logpath`, `port`, …).
    pub key: String,
    pub reason: String,
    /// What root can do on the host to allow it (the hub cannot).
    pub widen: String,
}

impl Refusal {
    fn new(key: &str, reason: String, widen: &str) -> Self {
        Self {
            key: key.to_owned(),
            reason,
            widen: widen.to_owned(),
        }
    }
}

/// The policy of one host: its settings and the actions root put in `action.d`.
#[derive(Debug, Clone)]
pub struct Policy<'a> {
    settings: &'a PolicySettings,
    available: BTreeSet<String>,
}

/// One file a write changes, as text: what it held and what it will hold.
#[derive(Debug, Clone, Copy)]
pub enum Written<'a> {
    /// A jail override or the defaults file.
    Jails { old: Option<&'a str>, new: &'a str },
    /// A filter's `.local`.
    Filter { old: Option<&'a str>, new: &'a str },
}

impl<'a> Policy<'a> {
    /// `available`: the action names of `action.d` ([`available_actions`]).
    pub fn new(settings: &'a PolicySettings, available: BTreeSet<String>) -> Self {
        Self {
            settings,
            available,
        }
    }

    /// Checks one write: the files it changes, and its effect on every jail (`live` is the
    /// configuration before, `new` the one after).
    pub fn check(
        &self,
        written: &[Written<'_>],
        live: &EffectiveConfig,
        new: &EffectiveConfig,
    ) -> Result<(), Refusal> {
        for file in written {
            match *file {
                Written::Jails { old, new: text } => {
                    for (section, key) in introduced(old, text) {
                        let setting = if section == DEFAULT_SECTION {
                            new.default_setting(&key)
                        } else {
                            new.get(&section, &key)
                        };
                        if let Some(Ok(value)) = setting.map(|s| s.value) {
                            self.option(&key, &value)?;
                        }
                    }
                }
                Written::Filter { old, new: text } => {
                    for (section, key) in introduced(old, text) {
                        if is_command_key(&key) {
                            let value = ini::parse(text)
                                .ok()
                                .and_then(|f| f.section(&section)?.get(&key).cloned())
                                .map(|o| o.value)
                                .unwrap_or_default();
                            self.command(&key, &value, "a filter")?;
                        }
                    }
                }
            }
        }
        for jail in new.jail_names() {
            self.effect(jail, live, new)?;
        }
        Ok(())
    }

    /// What the write changes in one jail as fail2ban resolves it.
    fn effect(
        &self,
        jail: &str,
        live: &EffectiveConfig,
        new: &EffectiveConfig,
    ) -> Result<(), Refusal> {
        let before = |key: &str| resolved(live, jail, key);
        let after = |key: &str| resolved(new, jail, key);
        let old_entries = action_entries(&before("action").unwrap_or_default());
        for entry in action_entries(&after("action").unwrap_or_default()) {
            if !old_entries.contains(&entry) {
                self.action_list("action", &entry)?;
            }
        }
        let ignore = after("ignorecommand").unwrap_or_default();
        if ignore != before("ignorecommand").unwrap_or_default() {
            self.command("ignorecommand", &ignore, &format!("jail {jail}"))?;
        }
        // A journal jail reads no files; leaving the journal starts reading its log paths.
        let journal = |backend: Option<String>| {
            backend.is_some_and(|b| b.trim_start().starts_with("systemd"))
        };
        let logpath = after("logpath").unwrap_or_default();
        let reads_files_now = !journal(after("backend")) && journal(before("backend"));
        let changed = logpath != before("logpath").unwrap_or_default() || reads_files_now;
        if changed && !journal(after("backend")) {
            self.logpath(&logpath)?;
        }
        Ok(())
    }

    /// One option a write sets, resolved.
    fn option(&self, key: &str, value: &str) -> Result<(), Refusal> {
        if key == "action" || key.starts_with("action_") || key.starts_with("banaction") {
            return self.action_list(key, value);
        }
        if is_command_key(key) {
            return self.command(key, value, "a jail");
        }
        if key == "logpath" {
            return self.logpath(value);
        }
        match INTERPOLATED_KEYS.iter().find(|(k, _)| *k == key) {
            Some((_, spaces)) => self.shell_safe(key, value, *spaces),
            None => Ok(()),
        }
    }

    /// An action list (`name`, `name[param=value, …]`, separated by white space): each action
    /// exists in `action.d` and is allowed, and its parameters pass.
    fn action_list(&self, key: &str, value: &str) -> Result<(), Refusal> {
        for entry in action_entries(value) {
            let Some((name, params)) = split_entry(&entry) else {
                continue;
            };
            // A name that is not plain is refused by the editor's reference check.
            if check_name(name).is_err() {
                continue;
            }
            if !self.available.contains(name) {
                return Err(Refusal::new(
                    key,
                    format!(
                        "action {name:?} is not a file root put in action.d ({name}.conf or \
                         {name}.local)"
                    ),
                    "put the action's file in action.d",
                ));
            }
            if !self.settings.actions.is_empty() && !self.settings.actions.iter().any(|a| a == name)
            {
                return Err(Refusal::new(
                    key,
                    format!("action {name:?} is not among the actions the host allows"),
                    &format!("add {name:?} to policy.actions in the agent's configuration"),
                ));
            }
            let params = parse_params(params).map_err(|reason| {
                Refusal::new(
                    key,
                    format!("the parameters of action {name} cannot be read: {reason}"),
                    "none; write the parameters as name[port=\"ssh\", protocol=\"tcp\"]",
                )
            })?;
            for (param, value) in params {
                let param = param.to_ascii_lowercase();
                let program =
                    name == BANHUB_ACTION && BANHUB_COMMAND_PARAMS.contains(&param.as_str());
                if is_command_key(&param) || program {
                    self.command(&param, &value, &format!("action {name}"))?;
                } else {
                    self.shell_safe(&param, &value, false)?;
                }
            }
        }
        Ok(())
    }

    /// A command key: allowed when empty (no command) or when the policy allows the key.
    fn command(&self, key: &str, value: &str, place: &str) -> Result<(), Refusal> {
        if value.trim().is_empty() || self.settings.allow_commands.allows(key) {
            return Ok(());
        }
        Err(Refusal::new(
            key,
            format!(
                "{key} of {place} is a command, and the hub may not choose commands on this host"
            ),
            &format!(
                "set policy.allow_commands (true, or a list naming \"{key}\") in the agent's \
                 configuration"
            ),
        ))
    }

    /// A value fail2ban puts into a shell command as it is.
    fn shell_safe(&self, key: &str, value: &str, spaces: bool) -> Result<(), Refusal> {
        if self.settings.allow_commands.all() {
            return Ok(());
        }
        match unsafe_char(value, spaces) {
            None => Ok(()),
            Some(what) => Err(Refusal::new(
                key,
                format!(
                    "its value {value:?} holds {what}, which fail2ban would pass to a shell \
                     unescaped"
                ),
                "set policy.allow_commands = true in the agent's configuration",
            )),
        }
    }

    /// Log paths, one a line, each optionally followed by ` head` or ` tail`: absolute, without
    /// `..`, under an allowed prefix (globs are fine below it).
    pub(crate) fn logpath(&self, value: &str) -> Result<(), Refusal> {
        for line in value.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let path = line
                .strip_suffix(" head")
                .or_else(|| line.strip_suffix(" tail"))
                .unwrap_or(line)
                .trim_end();
            let path = Path::new(path);
            let plain = path.is_absolute() && !path.components().any(|c| c == Component::ParentDir);
            let allowed = plain
                && self
                    .settings
                    .log_prefixes
                    .iter()
                    .any(|prefix| path.starts_with(prefix));
            if !allowed {
                let prefixes: Vec<String> = self
                    .settings
                    .log_prefixes
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                return Err(Refusal::new(
                    "logpath",
                    format!(
                        "{} is not an absolute path without `..` under the allowed log \
                         directories ({})",
                        path.display(),
                        prefixes.join(", ")
                    ),
                    "add a directory to policy.log_prefixes in the agent's configuration",
                ));
            }
        }
        Ok(())
    }
}

/// The action names of `<config_dir>/action.d`: `<name>.conf`, `<name>.local`, and Python
/// actions by their file name (`smtp.py`).
pub fn available_actions(config_dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(config_dir.join("action.d")) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|file| {
            if file.ends_with(".py") {
                return Some(file);
            }
            file.strip_suffix(".conf")
                .or_else(|| file.strip_suffix(".local"))
                .map(str::to_owned)
        })
        .collect()
}

/// Keys that make fail2ban run a program: `action…` (an action's commands) and `ignorecommand`.
fn is_command_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.starts_with("action") || key == "ignorecommand"
}

/// The `(section, key)` pairs `new` sets with a value `old` did not hold.
fn introduced(old: Option<&str>, new: &str) -> Vec<(String, String)> {
    let parse = |text: &str| ini::parse(text).unwrap_or_else(|_| IniFile::default());
    let old = old.map(parse).unwrap_or_default();
    let new = parse(new);
    let mut pairs = Vec::new();
    for section in new.sections() {
        for option in &section.options {
            let before = old
                .section(&section.name)
                .and_then(|s| s.get(&option.key))
                .map(|o| o.value.as_str());
            if before != Some(option.value.as_str()) {
                pairs.push((section.name.clone(), option.key.clone()));
            }
        }
    }
    pairs
}

fn resolved(config: &EffectiveConfig, jail: &str, key: &str) -> Option<String> {
    config.get(jail, key)?.value.ok()
}

/// The parameters of `[key=value, key="value", key='value'][…]`, as fail2ban's
/// `extractOptions` reads them.
fn parse_params(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut params = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Ok(params),
            Some('[') => {}
            Some(c) => return Err(format!("unexpected {c:?} after the parameters")),
        }
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.next_if_eq(&']').is_some() {
                break;
            }
            let mut key = String::new();
            loop {
                match chars.next() {
                    Some('=') => break,
                    Some(']') | None => return Err(format!("{:?} has no value", key.trim())),
                    Some(c) => key.push(c),
                }
            }
            let mut value = String::new();
            match chars.next_if(|c| *c == '"' || *c == '\'') {
                Some(q) => {
                    loop {
                        match chars.next() {
                            Some(c) if c == q => break,
                            Some(c) => value.push(c),
                            None => {
                                return Err(format!("the value of {:?} is not closed", key.trim()));
                            }
                        }
                    }
                    while chars.next_if(|c| c.is_whitespace()).is_some() {}
                    match chars.next() {
                        Some(',') => {}
                        Some(']') => {
                            params.push((key.trim().to_owned(), value));
                            break;
                        }
                        _ => {
                            return Err(format!("text after the quoted value of {:?}", key.trim()));
                        }
                    }
                }
                None => loop {
                    match chars.peek() {
                        Some(',') => {
                            chars.next();
                            break;
                        }
                        Some(']') | None => break,
                        Some(c) => {
                            value.push(*c);
                            chars.next();
                        }
                    }
                },
            }
            params.push((key.trim().to_owned(), value));
        }
    }
}

/// The first thing in `value` a shell would give a meaning to, if any. fail2ban's own tags
/// (`<known/chain>`) are fine, except those that carry text from a log line (`<F-USER>`,
/// `<matches>`) or a command (`<actionban>`), and the action's internal ones (`<_x>`).
fn unsafe_char(value: &str, spaces: bool) -> Option<String> {
    let mut rest = value;
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(end) = rest.find('>')
        {
            let tag = &rest[1..end];
            let plain = tag
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
                && tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
            let last = tag.rsplit('/').next().unwrap_or(tag);
            let from_log = last.starts_with("F-") || last.to_ascii_lowercase().ends_with("matches");
            if plain && !from_log && !is_command_key(last) {
                rest = &rest[end + 1..];
                continue;
            }
        }
        if SHELL_CHARS.contains(c) {
            return Some(format!("{c:?}"));
        }
        if c.is_whitespace() && !spaces {
            return Some("white space".to_owned());
        }
        if c.is_control() {
            return Some("a control character".to_owned());
        }
        rest = &rest[c.len_utf8()..];
    }
    None
}

#[cfg(test)]
mod tests;
