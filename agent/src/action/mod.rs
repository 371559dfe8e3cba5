//! `banhub-agent install-action` and `uninstall-action`: puts banhub's fail2ban action (the files
//! of `deploy/fail2ban`, built into this binary) into the fail2ban configuration directory,
//! attaches it to every jail — also jails that set their own `action =` — adds the probe jail, and
//! takes all of it away again, leaving the directory byte for byte as it was.
//!
//! The files ([`AgentFile`]), all written through the safe editor (validated by fail2ban first):
//! * `action.d/banhub.conf`: the shipped action, unchanged;
//! * `action.d/banhub.local`: this host's `[Init]`: the notifier's path, the relay's URL and the
//!   relay secret's file (the secret itself stays in the agent's state directory, mode 0600, and
//!   the notifier reads it from there, so it never appears on a command line);
//! * `action.d/banhub-notify`: the notifier script (mode 0755);
//! * `filter.d/banhub-probe.conf` and the `[banhub-probe]` jail: a jail whose filter never
//!   matches, watching an empty file in the state directory, with banhub as its only action;
//!   the end-to-end probe bans documentation addresses in it;
//! * `filter.d/banhub-shared.conf` and the `[banhub-shared]` jail ([`shared_jail`]): the same kind
//!   of jail for shared bans, whose actions are the host's own ban action and banhub;
//! * `jail.d/zz-banhub.local`: the two jails of banhub's own, and for every jail, `action = %(known/action)s` plus `banhub`:
//!   fail2ban's own "the value the earlier files gave" (read the way fail2ban reads it), so the
//!   jail keeps whatever actions it has, its own `action =` included.
//!
//! What the files replaced is recorded in `<state_dir>/action-install.json` before they are
//! written, and `uninstall-action` puts exactly that back (and removes directories it created).
//!
//! Applying: a plain `reload` starts the probe jail, then `reload --restart <jail>` for each
//! running jail that does not run banhub yet (fail2ban 1.0.2 does not add an action to a running
//! jail on a plain reload). When fail2ban is not running, the files are validated with
//! `fail2ban-client -t` and written; fail2ban reads them when it starts.

pub mod attachments;
pub mod shared_jail;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, DirBuilder};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use banhub_proto::rules::{JailName, PROBE_JAIL, SHARED_JAIL};
use serde::{Deserialize, Serialize};

pub use attachments::{JailAttachment, running_attachments};

use crate::config::Settings;
use crate::fail2ban_files::content::action_names;
use crate::fail2ban_files::{
    AgentEdit, AgentEditReport, AgentFile, AgentWrite, ConfigEditor, EditError, EditorSettings,
    EffectiveConfig,
};
use crate::relay::{RelaySecret, SECRET_FILE, SecretError};

/// The action's name in fail2ban (`action.d/banhub.conf`).
pub const ACTION_NAME: &str = "banhub";
/// The shipped action file.
pub const ACTION_CONF: &str = include_str!("../../../deploy/fail2ban/action.d/banhub.conf");
/// The shipped notifier script.
pub const NOTIFY_SCRIPT: &str = include_str!("../../../deploy/fail2ban/banhub-notify");
/// What `install-action` replaced, in the state directory.
pub const MANIFEST_FILE: &str = "action-install.json";
/// The probe jail's log: an empty file of the agent's that nothing writes to.
pub const PROBE_LOG: &str = "probe.log";
/// How long a probe ban lasts if its unban never comes (the hub died between the two).
const PROBE_BANTIME_SECS: u32 = 300;

/// Why installing or uninstalling failed. Nothing in the config directory changed unless the
/// editor's error says it rolled back.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error(
        "the callback relay is disabled (relay.enabled = false), so the action would have \
         nowhere to report to; enable it first"
    )]
    RelayDisabled,
    #[error(
        "relay.listen has port 0 and {} does not say where a running agent listens; set \
         relay.listen (BANHUB_AGENT_RELAY__LISTEN) to a fixed loopback address and port",
        path.display()
    )]
    RelayAddressUnknown { path: PathBuf },
    #[error(
        "{} contains characters fail2ban cannot take in an action parameter; use a path of \
         letters, digits and / . _ - + @ only",
        path.display()
    )]
    UnsafePath { path: PathBuf },
    #[error(
        "the action is recorded as installed into {recorded}, not {requested}; run \
         `banhub-agent uninstall-action --config-dir {recorded}` first"
    )]
    OtherConfigDir { recorded: String, requested: String },
    #[error("cannot set up the relay secret: {0}")]
    Secret(#[from] SecretError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is damaged ({detail}); restore the config directory from the editor's backups in the state directory", path.display())]
    Manifest { path: PathBuf, detail: String },
    #[error(transparent)]
    Edit(#[from] EditError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ActionError + '_ {
    move |source| ActionError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What `install-action` did.
#[derive(Debug, Clone)]
pub struct InstallReport {
    pub config_dir: PathBuf,
    pub edit: AgentEditReport,
    /// Jails the attachment file appends banhub to.
    pub attached: Vec<String>,
    /// Jails whose configuration already had banhub (left alone).
    pub already_attached: Vec<String>,
    /// Running jails and their actions afterwards (empty when fail2ban is not running).
    pub running: Vec<JailAttachment>,
    /// Things an operator should know (e.g. a jail whose action a later file sets again).
    pub warnings: Vec<String>,
}

impl InstallReport {
    /// Running jails that still do not run banhub.
    pub fn unattached(&self) -> Vec<&str> {
        self.running
            .iter()
            .filter(|j| !j.attached())
            .map(|j| j.jail.as_str())
            .collect()
    }
}

/// What `uninstall-action` did.
#[derive(Debug, Clone)]
pub struct UninstallReport {
    pub config_dir: PathBuf,
    /// False when there was no install record: nothing was changed.
    pub was_installed: bool,
    pub edit: Option<AgentEditReport>,
}

/// The install record: what each file was before `install-action` first wrote it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Manifest {
    config_dir: String,
    /// By [`AgentFile`] name: the previous bytes (`None`: absent) and mode.
    files: BTreeMap<String, Previous>,
    /// Directories of the config dir that install created (removed again when empty).
    created_dirs: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Previous {
    content: Option<Vec<u8>>,
    mode: u32,
}

fn file_key(file: AgentFile) -> String {
    crate::fail2ban_files::EditableFile::Agent(file)
        .name()
        .to_owned()
}

/// The relay URL the action must post to.
fn relay_url(settings: &Settings) -> Result<String, ActionError> {
    if !settings.relay.enabled {
        return Err(ActionError::RelayDisabled);
    }
    let listen = settings.relay.listen;
    if listen.port() != 0 {
        return Ok(format!("http://{listen}"));
    }
    // Port 0: the running agent wrote where it really listens.
    let path = settings.state_dir.join("relay.json");
    let bound = fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["listen"].as_str().map(str::to_owned))
        .and_then(|s| s.parse::<std::net::SocketAddr>().ok())
        .ok_or(ActionError::RelayAddressUnknown { path })?;
    Ok(format!("http://{bound}"))
}

/// A path fail2ban can take inside a double-quoted action parameter, unchanged by its
/// interpolation (`%`) and by the shell (`"`, `$`, `` ` ``, `\`).
fn safe_path(path: &Path) -> Result<String, ActionError> {
    let text = path.to_str().unwrap_or_default();
    let ok = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(ActionError::UnsafePath {
            path: path.to_owned(),
        })
    }
}

fn absolute(path: &Path) -> Result<PathBuf, ActionError> {
    std::path::absolute(path).map_err(io(path))
}

/// The attachment file: banhub appended to each of `jails`, and the probe jail.
fn attach_text(jails: &[String], probe_log: &str) -> String {
    let mut text = String::from(
        "# Written by `banhub-agent install-action`; `banhub-agent uninstall-action` removes it.\n\
         # Appends the banhub action to every jail, so fail2ban reports each ban and unban to the\n\
         # local banhub agent. `%(known/action)s` is the jail's action list as the files read\n\
         # before this one set it (fail2ban's own syntax), so each jail keeps its own actions.\n",
    );
    for jail in jails {
        let _ = write!(
            text,
            "\n[{jail}]\naction = %(known/action)s\n         {ACTION_NAME}\n"
        );
    }
    let _ = write!(
        text,
        "\n# The end-to-end probe: banhub's only jail of its own. Its filter never matches and its\n\
         # log is an empty file of the agent's; the hub's probe bans and unbans documentation\n\
         # addresses in it through fail2ban's socket, and banhub is its only action.\n\
         [{PROBE_JAIL}]\n\
         enabled = true\n\
         filter = {PROBE_JAIL}\n\
         logpath = {probe_log}\n\
         backend = polling\n\
         action = {ACTION_NAME}\n\
         maxretry = 1\n\
         bantime = {PROBE_BANTIME_SECS}\n\
         bantime.increment = false\n\
         ignoreself = false\n\
         ignoreip = 127.0.0.1/8 ::1\n\
         ignorecommand =\n"
    );
    text
}

fn action_local_text(notify: &str, relay_url: &str, secret_file: &str) -> String {
    format!(
        "# Written by `banhub-agent install-action` for this host; `uninstall-action` removes it.\n\
         [Init]\n\
         notify = {notify}\n\
         relay_url = {relay_url}\n\
         secret_file = {secret_file}\n"
    )
}

const PROBE_FILTER_TEXT: &str = "\
# Written by `banhub-agent install-action`: the filter of banhub's probe jail. It never matches a
# real log line; the probe bans through fail2ban's socket instead.
[Definition]
failregex = ^banhub-probe never-matches 5c0d1b7e <HOST>$
ignoreregex =
";

/// The jails to attach banhub to, and those whose configuration already has it.
fn plan_jails(base: &EffectiveConfig) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut attach = Vec::new();
    let mut already = Vec::new();
    let mut warnings = Vec::new();
    for name in base.jail_names() {
        if name == PROBE_JAIL || name == SHARED_JAIL {
            continue;
        }
        if JailName::parse(name).is_err() {
            warnings.push(format!(
                "jail {name:?} has a name banhub does not handle; banhub is not attached to it"
            ));
            continue;
        }
        let actions = base
            .get(name, "action")
            .and_then(|s| s.value.ok())
            .map(|v| action_names(&v))
            .unwrap_or_default();
        if actions.iter().any(|a| a == ACTION_NAME) {
            already.push(name.to_owned());
        } else {
            attach.push(name.to_owned());
        }
    }
    (attach, already, warnings)
}

fn manifest_path(settings: &Settings) -> PathBuf {
    settings.state_dir.join(MANIFEST_FILE)
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>, ActionError> {
    match fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ActionError::Io {
            path: path.to_owned(),
            source,
        }),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ActionError::Manifest {
                path: path.to_owned(),
                detail: e.to_string(),
            }),
    }
}

/// Writes the manifest atomically (temp file, fsync, rename), mode 0600.
fn write_manifest(path: &Path, manifest: &Manifest) -> Result<(), ActionError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| ActionError::Manifest {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    file.write_all(&bytes)
        .and_then(|()| file.sync_all())
        .map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

fn editor(settings: &Settings) -> Result<ConfigEditor, ActionError> {
    Ok(ConfigEditor::new(EditorSettings::from_agent(settings))?)
}

fn ensure_state_dir(dir: &Path) -> Result<(), ActionError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))
}

/// Installs the action into `settings.fail2ban.config_dir` and attaches it to every jail; see
/// the module documentation. Running it again changes nothing.
pub async fn install(settings: &Settings) -> Result<InstallReport, ActionError> {
    let config_dir = absolute(&settings.fail2ban.config_dir)?;
    let state_dir = absolute(&settings.state_dir)?;
    let relay_url = relay_url(settings)?;
    let config_text = safe_path(&config_dir)?;
    let state_text = safe_path(&state_dir)?;
    ensure_state_dir(&state_dir)?;
    // The action reads the secret from here; create it now so that callbacks work as soon as
    // the agent runs (it loads the same file).
    RelaySecret::load_or_create(&state_dir.join(SECRET_FILE))?;
    for log in [PROBE_LOG, shared_jail::SHARED_LOG] {
        let path = state_dir.join(log);
        if !path.exists() {
            fs::write(&path, b"").map_err(io(&path))?;
        }
    }

    let editor = editor(settings)?;
    let base = editor.load_without_attach().await?;
    let (attach, already_attached, mut warnings) = plan_jails(&base);
    let mut attach_file = attach_text(&attach, &format!("{state_text}/{PROBE_LOG}"));
    attach_file.push_str(&shared_jail::jail_text(
        &shared_jail::ban_action(&base, &settings.shared_bans.action),
        &format!("{state_text}/{}", shared_jail::SHARED_LOG),
    ));
    // The shared jail's section as installed now, to see whether its action changes.
    let attach_path = config_dir
        .join(crate::fail2ban_files::EditableFile::Agent(AgentFile::Attach).relative_path());
    let old_attach = fs::read_to_string(&attach_path).ok();
    let attach_text = attach_file.clone();
    let writes = vec![
        AgentWrite {
            file: AgentFile::ActionConf,
            content: Some(ACTION_CONF.as_bytes().to_vec()),
            mode: 0o644,
        },
        AgentWrite {
            file: AgentFile::ActionLocal,
            content: Some(
                action_local_text(
                    &format!("{config_text}/action.d/banhub-notify"),
                    &relay_url,
                    &format!("{state_text}/{SECRET_FILE}"),
                )
                .into_bytes(),
            ),
            mode: 0o644,
        },
        AgentWrite {
            file: AgentFile::Notify,
            content: Some(NOTIFY_SCRIPT.as_bytes().to_vec()),
            mode: 0o755,
        },
        AgentWrite {
            file: AgentFile::ProbeFilter,
            content: Some(PROBE_FILTER_TEXT.as_bytes().to_vec()),
            mode: 0o644,
        },
        AgentWrite {
            file: AgentFile::SharedFilter,
            content: Some(shared_jail::SHARED_FILTER_TEXT.as_bytes().to_vec()),
            mode: 0o644,
        },
        AgentWrite {
            file: AgentFile::Attach,
            content: Some(attach_file.into_bytes()),
            mode: 0o644,
        },
    ];

    // Record what is about to be replaced, before anything is.
    let manifest_path = manifest_path(settings);
    let existing = read_manifest(&manifest_path)?;
    let config_key = config_dir.display().to_string();
    if let Some(m) = &existing
        && m.config_dir != config_key
    {
        return Err(ActionError::OtherConfigDir {
            recorded: m.config_dir.clone(),
            requested: config_key,
        });
    }
    let mut manifest = existing.clone().unwrap_or_else(|| Manifest {
        config_dir: config_key,
        ..Manifest::default()
    });
    for dir in ["action.d", "filter.d", "jail.d"] {
        if !config_dir.join(dir).is_dir() && !manifest.created_dirs.iter().any(|d| d == dir) {
            manifest.created_dirs.push(dir.to_owned());
        }
    }
    for write in &writes {
        let key = file_key(write.file);
        if manifest.files.contains_key(&key) {
            continue;
        }
        let path =
            config_dir.join(crate::fail2ban_files::EditableFile::Agent(write.file).relative_path());
        let previous = match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Previous {
                content: None,
                mode: 0o644,
            },
            Err(source) => return Err(ActionError::Io { path, source }),
            Ok(meta) => {
                use std::os::unix::fs::PermissionsExt;
                Previous {
                    content: Some(fs::read(&path).map_err(io(&path))?),
                    mode: meta.permissions().mode() & 0o7777,
                }
            }
        };
        manifest.files.insert(key, previous);
    }
    write_manifest(&manifest_path, &manifest)?;

    // Running jails that must be restarted to run banhub: every one whose new configuration has
    // it and that does not run it yet.
    let timeout = settings.fail2ban_timeout();
    let socket = &settings.fail2ban.socket;
    let before = running_attachments(socket, timeout).await.ok();
    let wanted: BTreeSet<&str> = attach
        .iter()
        .chain(&already_attached)
        .map(String::as_str)
        .chain([PROBE_JAIL, SHARED_JAIL])
        .collect();
    let shared_changed = shared_jail::action_changed(old_attach.as_deref(), &attach_text);
    let restart: BTreeSet<String> = before
        .iter()
        .flatten()
        .filter(|j| {
            (!j.attached() && wanted.contains(j.jail.as_str()))
                || (shared_changed && j.jail == SHARED_JAIL)
        })
        .map(|j| j.jail.clone())
        .collect();
    let edit = AgentEdit {
        writes,
        check_jails: [PROBE_JAIL.to_owned(), SHARED_JAIL.to_owned()].into(),
        restart,
        allow_offline: true,
    };
    let edit = match editor.apply_agent_files(edit).await {
        Ok(edit) => edit,
        Err(e) => {
            if existing.is_none() {
                // Nothing was installed: no record of it either.
                let _ = fs::remove_file(&manifest_path);
            }
            return Err(e.into());
        }
    };

    let running = if edit.fail2ban_running {
        running_attachments(socket, timeout)
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let live = editor.reader().load().map_err(EditError::from)?;
    for jail in live.enabled_jails() {
        let actions = live
            .get(&jail, "action")
            .and_then(|s| s.value.ok())
            .map(|v| action_names(&v))
            .unwrap_or_default();
        if !actions.iter().any(|a| a == ACTION_NAME) {
            warnings.push(format!(
                "jail {jail}: a file read after jail.d/zz-banhub.local sets its action again, so \
                 banhub is not attached; add `{ACTION_NAME}` to that file's action list"
            ));
        }
    }
    Ok(InstallReport {
        config_dir,
        edit,
        attached: attach,
        already_attached,
        running,
        warnings,
    })
}

/// Removes what [`install`] added and puts back what it replaced, byte for byte.
pub async fn uninstall(settings: &Settings) -> Result<UninstallReport, ActionError> {
    let config_dir = absolute(&settings.fail2ban.config_dir)?;
    let manifest_path = manifest_path(settings);
    let Some(manifest) = read_manifest(&manifest_path)? else {
        return Ok(UninstallReport {
            config_dir,
            was_installed: false,
            edit: None,
        });
    };
    let config_key = config_dir.display().to_string();
    if manifest.config_dir != config_key {
        return Err(ActionError::OtherConfigDir {
            recorded: manifest.config_dir,
            requested: config_key,
        });
    }
    let mut writes = Vec::new();
    for file in AgentFile::ALL {
        if let Some(previous) = manifest.files.get(&file_key(file)) {
            writes.push(AgentWrite {
                file,
                content: previous.content.clone(),
                mode: previous.mode,
            });
        }
    }
    let editor = editor(settings)?;
    let edit = editor
        .apply_agent_files(AgentEdit {
            writes,
            check_jails: BTreeSet::new(),
            restart: BTreeSet::new(),
            allow_offline: true,
        })
        .await?;
    for dir in &manifest.created_dirs {
        let path = config_dir.join(dir);
        // Only when empty: something else may have been put there since.
        if fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()) {
            fs::remove_dir(&path).map_err(io(&path))?;
        }
    }
    fs::remove_file(&manifest_path).map_err(io(&manifest_path))?;
    for log in [PROBE_LOG, shared_jail::SHARED_LOG] {
        let path = settings.state_dir.join(log);
        if fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
            let _ = fs::remove_file(&path);
        }
    }
    Ok(UninstallReport {
        config_dir,
        was_installed: true,
        edit: Some(edit),
    })
}

/// Whether the action file is in the config directory.
pub fn is_installed(config_dir: &Path) -> bool {
    config_dir
        .join(crate::fail2ban_files::EditableFile::Agent(AgentFile::ActionConf).relative_path())
        .is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_file_appends_banhub_with_known_action() {
        let text = attach_text(
            &["sshd".to_owned(), "web".to_owned()],
            "/var/lib/x/probe.log",
        );
        assert!(text.contains("[sshd]\naction = %(known/action)s\n         banhub\n"));
        assert!(text.contains("[web]\naction = %(known/action)s\n         banhub\n"));
        assert!(text.contains("[banhub-probe]\nenabled = true\n"));
        assert!(text.contains("logpath = /var/lib/x/probe.log\n"));
        assert!(text.contains("action = banhub\n"));
    }

    #[test]
    fn paths_with_shell_or_interpolation_characters_are_refused() {
        assert!(safe_path(Path::new("/etc/fail2ban")).is_ok());
        assert!(safe_path(Path::new("/var/lib/banhub-agent")).is_ok());
        for bad in [
            "/tmp/a b",
            "/tmp/a%b",
            "/tmp/a\"b",
            "/tmp/$x",
            "/tmp/`x`",
            "",
        ] {
            assert!(safe_path(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn shipped_files_are_embedded() {
        assert!(ACTION_CONF.contains("actionban = <_banhub_notify> ban"));
        assert!(NOTIFY_SCRIPT.starts_with("#!/usr/bin/python3"));
    }
}
