//! A config change: a set of fail2ban files the hub applied to one server with commit-confirm,
//! and what became of it. The rules of a set (logical paths, sizes, the confirmation window) live
//! here so the API and the service apply the same ones.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ServerId;
use banhub_proto::rules::check_name;

/// Most files of one set (the agent holds the same limit).
pub const MAX_SET_FILES: usize = 64;
/// The largest file of a set, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// The confirmation window, in seconds (0: none).
pub const CONFIRM_WINDOW_SECS: std::ops::RangeInclusive<u32> = 10..=3600;
/// The stem of the `[DEFAULT]` file banhub manages.
pub const DEFAULTS_FILE: &str = "jail.d/banhub-defaults.local";

/// One file of a set, by logical path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetFile {
    /// `jail.d/<jail>.local`, `filter.d/<filter>.local` or `jail.d/banhub-defaults.local`.
    pub path: String,
    /// The new text (ignored when `exists` is false).
    #[serde(default)]
    pub content: String,
    /// The version the file must have now: `absent`, or the SHA-256 read from the host ("" is
    /// `absent` too).
    #[serde(default)]
    pub version: String,
    /// False removes the file.
    #[serde(default = "yes")]
    pub exists: bool,
}

fn yes() -> bool {
    true
}

/// Where a change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeState {
    /// Sent to the agent; no answer yet.
    Applying,
    /// Applied; the hub confirms it once it hears from the agent after the reload.
    AwaitingConfirm,
    Confirmed,
    /// The agent put the previous files back (deadline passed, or asked to).
    Reverted,
    /// The agent refused or could not apply it; nothing changed on the host.
    Failed,
}

impl ChangeState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applying => "applying",
            Self::AwaitingConfirm => "awaiting_confirm",
            Self::Confirmed => "confirmed",
            Self::Reverted => "reverted",
            Self::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            Self::Applying,
            Self::AwaitingConfirm,
            Self::Confirmed,
            Self::Reverted,
            Self::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }

    /// Whether the hub still has something to do for the change.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Applying | Self::AwaitingConfirm)
    }
}

/// One change as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigChange {
    pub id: String,
    pub server: ServerId,
    pub files: Vec<SetFile>,
    pub confirm_within_secs: u32,
    pub state: ChangeState,
    pub reason: String,
    /// When the agent reverts unless confirmed.
    pub deadline: Option<DateTime<Utc>>,
    /// The versions of the files after the change (`path`, `version`).
    pub applied: Vec<(String, String)>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Why a set is refused; `field` names the offending field of the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SetError {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> SetError {
    SetError {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks a set and its window: 1 to [`MAX_SET_FILES`] files, each a logical path named once,
/// text of at most [`MAX_FILE_BYTES`] without NUL, a version that is `absent`/"" or 64 hex digits.
pub fn check_set(files: &[SetFile], confirm_within_secs: u32) -> Result<(), SetError> {
    if confirm_within_secs != 0 && !CONFIRM_WINDOW_SECS.contains(&confirm_within_secs) {
        return Err(refuse(
            "confirmWithinSecs",
            format!(
                "must be 0 (no confirmation) or {} to {} seconds",
                CONFIRM_WINDOW_SECS.start(),
                CONFIRM_WINDOW_SECS.end()
            ),
        ));
    }
    if files.is_empty() || files.len() > MAX_SET_FILES {
        return Err(refuse(
            "files",
            format!("must hold 1 to {MAX_SET_FILES} files"),
        ));
    }
    for (i, file) in files.iter().enumerate() {
        let field = |name: &str| format!("files[{i}].{name}");
        check_path(&file.path).map_err(|m| refuse(field("path"), m))?;
        if files[..i].iter().any(|f| f.path == file.path) {
            return Err(refuse(field("path"), "names a file already in the set"));
        }
        if file.exists {
            if file.content.len() > MAX_FILE_BYTES {
                return Err(refuse(
                    field("content"),
                    format!("is larger than {MAX_FILE_BYTES} bytes"),
                ));
            }
            if file.content.contains('\0') {
                return Err(refuse(field("content"), "holds a NUL character"));
            }
            if file.content.trim().is_empty() {
                return Err(refuse(
                    field("content"),
                    "is empty; send `exists: false` to remove the file",
                ));
            }
        }
        let version = file.version.as_str();
        let hex = version.len() == 64 && version.bytes().all(|b| b.is_ascii_hexdigit());
        if !(version.is_empty() || version == "absent" || hex) {
            return Err(refuse(
                field("version"),
                "must be \"absent\" or the 64 hex digits of the file's SHA-256, as read from the host",
            ));
        }
    }
    Ok(())
}

/// A logical path: `jail.d/<name>.local` or `filter.d/<name>.local` with a plain name.
fn check_path(path: &str) -> Result<(), String> {
    let refuse = || {
        format!(
            "{path:?} is not a logical path: use jail.d/<jail>.local, filter.d/<filter>.local \
             or {DEFAULTS_FILE}"
        )
    };
    let (dir, file) = path.split_once('/').ok_or_else(refuse)?;
    let stem = file.strip_suffix(".local").ok_or_else(refuse)?;
    if dir != "jail.d" && dir != "filter.d" {
        return Err(refuse());
    }
    check_name(stem).map_err(|e| format!("{}: {e}", refuse()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> SetFile {
        SetFile {
            path: path.to_owned(),
            content: "[sshd]\nmaxretry = 3\n".to_owned(),
            version: String::new(),
            exists: true,
        }
    }

    fn check(files: &[SetFile], window: u32, expected: Result<(), &str>) {
        let got = check_set(files, window).map_err(|e| e.field);
        assert_eq!(got, expected.map_err(str::to_owned), "{files:?} {window}");
    }

    #[test]
    fn sets_are_checked_field_by_field() {
        check(&[file("jail.d/sshd.local")], 0, Ok(()));
        check(&[file("jail.d/sshd.local")], 60, Ok(()));
        check(&[file(DEFAULTS_FILE), file("filter.d/x.local")], 10, Ok(()));
        check(&[file("jail.d/sshd.local")], 5, Err("confirmWithinSecs"));
        check(&[file("jail.d/sshd.local")], 3601, Err("confirmWithinSecs"));
        check(&[], 0, Err("files"));
        for bad in [
            "/etc/fail2ban/jail.local",
            "jail.d/../jail.local",
            "jail.d/sshd.conf",
            "action.d/x.local",
            "jail.d/a/b.local",
        ] {
            check(&[file(bad)], 0, Err("files[0].path"));
        }
        check(
            &[file("jail.d/a.local"), file("jail.d/a.local")],
            0,
            Err("files[1].path"),
        );
        let mut nul = file("jail.d/a.local");
        nul.content.push('\0');
        check(&[nul], 0, Err("files[0].content"));
        let mut version = file("jail.d/a.local");
        version.version = "abc".to_owned();
        check(&[version], 0, Err("files[0].version"));
        let mut gone = file("jail.d/a.local");
        gone.exists = false;
        gone.content = String::new();
        check(&[gone], 0, Ok(()));
    }

    #[test]
    fn states_round_trip() {
        for state in [
            ChangeState::Applying,
            ChangeState::AwaitingConfirm,
            ChangeState::Confirmed,
            ChangeState::Reverted,
            ChangeState::Failed,
        ] {
            assert_eq!(ChangeState::parse(state.as_str()), Some(state));
        }
        assert_eq!(ChangeState::parse("x"), None);
    }
}
