//! Drift: what a host has compared with what its profile says it should have. Each file of the
//! profile's version must hold its text (or be absent when the version says so); the other
//! `.local` files the host had when it was last in sync (its baseline) must not change either, so
//! a hand edit of `jail.local` shows too. banhub's defaults file is compared only when the profile
//! holds it: the hub itself rewrites it when the protected networks change.

use std::collections::BTreeMap;

use banhub_proto::config_path::{ConfigPath, DEFAULTS_STEM};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ProfileFile, ProfileName, diff::unified_diff};
use crate::domain::{ServerId, sha256_hex};

/// Where a server stands against its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftState {
    /// Every file is as the profile says.
    InSync,
    /// At least one file differs.
    Drifted,
    /// Not compared: no profile, agent offline or too old, or the files could not be read.
    Unknown,
}

impl DriftState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InSync => "in_sync",
            Self::Drifted => "drifted",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [Self::InSync, Self::Drifted, Self::Unknown]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// How one file differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileDriftKind {
    /// The profile has the file; the host does not.
    Missing,
    /// Both have it, with different text.
    Different,
    /// The profile says the file must not exist; the host has it.
    Unexpected,
    /// A file outside the profile changed (or appeared, or went) since the host was in sync.
    ChangedOutsideProfile,
}

/// One file that differs, with the unified diff from what it should be to what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDrift {
    pub path: String,
    pub kind: FileDriftKind,
    pub diff: String,
}

/// The path of banhub's defaults file, which only a profile that holds it compares.
fn defaults_path() -> String {
    format!("jail.d/{DEFAULTS_STEM}.local")
}

/// The files of `actual` (path → text) that differ from the profile's `desired` files, and from
/// `baseline` for the files outside the profile. Sorted by path.
pub fn compare(
    desired: &[ProfileFile],
    actual: &BTreeMap<String, String>,
    baseline: Option<&BTreeMap<String, String>>,
) -> Vec<FileDrift> {
    let mut drifts = Vec::new();
    for file in desired {
        let path = file.path.to_string();
        let have = actual.get(&path).map(String::as_str);
        let Some(diff) = unified_diff(&path, file.content.as_deref(), have) else {
            continue;
        };
        let kind = match (&file.content, have) {
            (Some(_), None) => FileDriftKind::Missing,
            (None, Some(_)) => FileDriftKind::Unexpected,
            _ => FileDriftKind::Different,
        };
        drifts.push(FileDrift { path, kind, diff });
    }
    if let Some(baseline) = baseline {
        let now = outside_files(desired, actual);
        let mut paths: Vec<&String> = baseline.keys().chain(now.keys()).collect();
        paths.sort();
        paths.dedup();
        for path in paths {
            let (was, is) = (baseline.get(path), now.get(path));
            if let Some(diff) = unified_diff(path, was.map(String::as_str), is.map(String::as_str))
            {
                drifts.push(FileDrift {
                    path: path.clone(),
                    kind: FileDriftKind::ChangedOutsideProfile,
                    diff,
                });
            }
        }
    }
    drifts.sort_by(|a, b| a.path.cmp(&b.path));
    drifts
}

/// The files of `actual` outside the profile (banhub's defaults file aside): the baseline kept
/// when a host is in sync.
pub fn outside_files(
    desired: &[ProfileFile],
    actual: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let named: Vec<String> = desired.iter().map(|f| f.path.to_string()).collect();
    actual
        .iter()
        .filter(|(path, _)| !named.contains(path) && **path != defaults_path())
        .filter(|(path, _)| *path == "jail.local" || ConfigPath::parse(path).is_ok())
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect()
}

/// A short fingerprint of a drift: the same files differing the same way give the same one, so
/// an unchanged drift raises no second alert.
pub fn fingerprint(drifts: &[FileDrift]) -> String {
    let mut text = String::new();
    for d in drifts {
        text.push_str(&d.path);
        text.push('\0');
        text.push_str(&d.diff);
        text.push('\0');
    }
    sha256_hex(text.as_bytes())
}

/// What the hub knows of one server's drift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftRecord {
    pub server: ServerId,
    pub state: DriftState,
    pub profile: Option<ProfileName>,
    pub version: Option<i64>,
    /// Why the state is `unknown`, or a word on the comparison.
    pub reason: String,
    pub files: Vec<FileDrift>,
    /// [`fingerprint`] of `files`.
    pub fingerprint: String,
    /// The fingerprint of the drift last alerted about; `None` when nothing was.
    pub alerted: Option<String>,
    /// The files outside the profile when the host was last in sync with `version`.
    pub baseline: Option<BTreeMap<String, String>>,
    pub checked_at: DateTime<Utc>,
    /// When the server entered `state`.
    pub since: DateTime<Utc>,
}

impl DriftRecord {
    /// Whether this record calls for an alert: drifted, and not the drift alerted last.
    pub fn needs_alert(&self) -> bool {
        self.state == DriftState::Drifted
            && self.alerted.as_deref() != Some(self.fingerprint.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::profiles::parse_files;

    fn desired() -> Vec<ProfileFile> {
        parse_files(vec![
            (
                "jail.d/sshd.local".to_owned(),
                Some("[sshd]\nmaxretry = 3\n".to_owned()),
            ),
            ("jail.d/old.local".to_owned(), None),
        ])
        .expect("files")
    }

    fn host(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect()
    }

    fn kinds(drifts: &[FileDrift]) -> Vec<(&str, FileDriftKind)> {
        drifts.iter().map(|d| (d.path.as_str(), d.kind)).collect()
    }

    #[test]
    fn a_host_with_the_profiles_files_is_in_sync() {
        let actual = host(&[
            ("jail.d/sshd.local", "[sshd]\nmaxretry = 3\n"),
            ("jail.local", "[DEFAULT]\n"),
        ]);
        assert!(compare(&desired(), &actual, None).is_empty());
        let baseline = outside_files(&desired(), &actual);
        assert_eq!(baseline, host(&[("jail.local", "[DEFAULT]\n")]));
        assert!(compare(&desired(), &actual, Some(&baseline)).is_empty());
    }

    #[test]
    fn missing_different_and_unexpected_files_drift() {
        assert_eq!(
            kinds(&compare(&desired(), &host(&[]), None)),
            [("jail.d/sshd.local", FileDriftKind::Missing)]
        );
        let actual = host(&[
            ("jail.d/sshd.local", "[sshd]\nmaxretry = 10\n"),
            ("jail.d/old.local", "[old]\n"),
        ]);
        let drifts = compare(&desired(), &actual, None);
        assert_eq!(
            kinds(&drifts),
            [
                ("jail.d/old.local", FileDriftKind::Unexpected),
                ("jail.d/sshd.local", FileDriftKind::Different),
            ]
        );
        // The diff reads from what should be to what is.
        assert!(
            drifts[1].diff.contains("-maxretry = 3\n+maxretry = 10\n"),
            "{}",
            drifts[1].diff
        );
    }

    #[test]
    fn a_hand_edit_outside_the_profile_drifts_against_the_baseline() {
        let synced = host(&[
            ("jail.d/sshd.local", "[sshd]\nmaxretry = 3\n"),
            ("jail.local", "[DEFAULT]\nbantime = 600\n"),
            (
                "jail.d/banhub-defaults.local",
                "[DEFAULT]\nignoreip = 10.0.0.1\n",
            ),
        ]);
        let baseline = outside_files(&desired(), &synced);
        let mut edited = synced.clone();
        edited.insert(
            "jail.local".to_owned(),
            "[DEFAULT]\nbantime = 1\n".to_owned(),
        );
        // The hub's own defaults file changes without drift.
        edited.insert(
            "jail.d/banhub-defaults.local".to_owned(),
            "[DEFAULT]\nignoreip = 10.0.0.2\n".to_owned(),
        );
        edited.insert("filter.d/new.local".to_owned(), "[Definition]\n".to_owned());
        let drifts = compare(&desired(), &edited, Some(&baseline));
        assert_eq!(
            kinds(&drifts),
            [
                ("filter.d/new.local", FileDriftKind::ChangedOutsideProfile),
                ("jail.local", FileDriftKind::ChangedOutsideProfile),
            ]
        );
        assert!(drifts[1].diff.contains("-bantime = 600\n+bantime = 1\n"));
    }

    #[test]
    fn the_same_drift_alerts_once() {
        let drifts = compare(&desired(), &host(&[]), None);
        let mut record = DriftRecord {
            server: ServerId::new(),
            state: DriftState::Drifted,
            profile: None,
            version: Some(1),
            reason: String::new(),
            fingerprint: fingerprint(&drifts),
            files: drifts,
            alerted: None,
            baseline: None,
            checked_at: Utc::now(),
            since: Utc::now(),
        };
        assert!(record.needs_alert());
        record.alerted = Some(record.fingerprint.clone());
        assert!(!record.needs_alert());
        let other = compare(&desired(), &host(&[("jail.d/sshd.local", "x\n")]), None);
        record.fingerprint = fingerprint(&other);
        assert!(record.needs_alert());
        record.state = DriftState::InSync;
        assert!(!record.needs_alert());
    }
}
