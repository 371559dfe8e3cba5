//! Profiles: a named, versioned config set (jail and filter files plus banhub's defaults file)
//! assigned to servers by label. The rules of a profile's name, of a version's files (logical
//! paths only, sizes, no duplicates), of assignment (one profile per server), the diff between
//! two versions ([`diff`]) and the comparison of a host's files with its profile ([`drift`]).

pub mod diff;
pub mod drift;

use std::collections::BTreeMap;
use std::fmt;

use banhub_proto::config_path::ConfigPath;
use banhub_proto::rules::check_name;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Server;

/// The most files one version holds.
pub const MAX_FILES: usize = 64;
/// The largest file of a version, as the agent's editor accepts it.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// The most bytes over all files of a version.
pub const MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// The longest comment or description.
pub const MAX_TEXT: usize = 1024;

/// A profile's name: the name rule of servers, jails and filters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ProfileName(String);

impl ProfileName {
    pub fn parse(raw: &str) -> Result<Self, String> {
        check_name(raw).map_err(|e| format!("{raw:?} {e}"))?;
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One file of a config set: its logical path and its text, or `None` for "this file must not
/// exist".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileFile {
    pub path: ConfigPath,
    pub content: Option<String>,
}

/// Why a version's files or a profile's fields are refused; `field` names the place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ProfileRuleError {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> ProfileRuleError {
    ProfileRuleError {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks a version's files as sent: `(path, content)` pairs, `None` content for a file that must
/// not exist. Returns them parsed and sorted by path.
pub fn parse_files(
    raw: Vec<(String, Option<String>)>,
) -> Result<Vec<ProfileFile>, ProfileRuleError> {
    if raw.is_empty() || raw.len() > MAX_FILES {
        return Err(refuse(
            "files",
            format!("a version holds 1 to {MAX_FILES} files"),
        ));
    }
    let mut total = 0usize;
    let mut files: Vec<ProfileFile> = Vec::with_capacity(raw.len());
    for (index, (path, content)) in raw.into_iter().enumerate() {
        let field = format!("files[{index}]");
        let parsed = ConfigPath::parse(&path)
            .map_err(|e| refuse(format!("{field}.path"), format!("{path:?} {e}")))?;
        if let Some(text) = &content {
            if text.len() > MAX_FILE_BYTES {
                return Err(refuse(
                    format!("{field}.content"),
                    format!(
                        "is {} bytes; a file holds at most {MAX_FILE_BYTES}",
                        text.len()
                    ),
                ));
            }
            if text
                .chars()
                .any(|c| c == '\0' || (c.is_control() && c != '\n' && c != '\t' && c != '\r'))
            {
                return Err(refuse(
                    format!("{field}.content"),
                    "holds control characters; a file is text (line ends and tabs only)",
                ));
            }
            total += text.len();
        }
        if files.iter().any(|f| f.path == parsed) {
            return Err(refuse(
                format!("{field}.path"),
                format!("{path} is named twice"),
            ));
        }
        files.push(ProfileFile {
            path: parsed,
            content,
        });
    }
    if total > MAX_TOTAL_BYTES {
        return Err(refuse(
            "files",
            format!("hold {total} bytes; a version holds at most {MAX_TOTAL_BYTES}"),
        ));
    }
    files.sort();
    Ok(files)
}

/// Checks a comment or description: at most [`MAX_TEXT`] characters, no control characters
/// but line ends and tabs.
pub fn check_text(field: &str, text: &str) -> Result<(), ProfileRuleError> {
    if text.chars().count() > MAX_TEXT
        || text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(refuse(
            field,
            format!("must be at most {MAX_TEXT} characters without control characters"),
        ));
    }
    Ok(())
}

/// One saved version of a profile; never changed once saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileVersion {
    pub profile: ProfileName,
    /// 1, 2, … in save order.
    pub version: i64,
    pub files: Vec<ProfileFile>,
    pub comment: String,
    pub author: String,
    pub created_at: DateTime<Utc>,
}

/// A profile: its assignment and its versions' numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: ProfileName,
    pub description: String,
    /// The servers it applies to: those carrying every one of these labels; empty: none.
    pub selector: BTreeMap<String, String>,
    /// The version the servers should have; `None`: the latest.
    pub pinned_version: Option<i64>,
    /// The newest version; `None` before the first save.
    pub latest_version: Option<i64>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Profile {
    /// Whether the profile applies to `server`.
    pub fn selects(&self, server: &Server) -> bool {
        selector_matches(&self.selector, server)
    }

    /// The version servers of this profile should have.
    pub fn desired_version(&self) -> Option<i64> {
        self.pinned_version.or(self.latest_version)
    }
}

/// Whether `server` carries every label of a non-empty `selector`.
pub fn selector_matches(selector: &BTreeMap<String, String>, server: &Server) -> bool {
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| server.labels.as_map().get(k) == Some(v))
}

/// A server two profiles would apply to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentConflict {
    pub server: String,
    pub other: ProfileName,
}

/// The first server that `selector` (the selector `profile` is given) and another profile's
/// would both select; one profile per server.
pub fn assignment_conflict(
    profile: &ProfileName,
    selector: &BTreeMap<String, String>,
    others: &[Profile],
    servers: &[Server],
) -> Option<AssignmentConflict> {
    servers
        .iter()
        .filter(|s| selector_matches(selector, s))
        .find_map(|server| {
            others
                .iter()
                .find(|o| &o.name != profile && o.selects(server))
                .map(|o| AssignmentConflict {
                    server: server.name.to_string(),
                    other: o.name.clone(),
                })
        })
}

/// The profile that applies to `server`: `Ok(None)` for none, `Err` naming two that both do.
pub fn profile_of<'a>(
    server: &Server,
    profiles: &'a [Profile],
) -> Result<Option<&'a Profile>, (ProfileName, ProfileName)> {
    let mut matching = profiles.iter().filter(|p| p.selects(server));
    match (matching.next(), matching.next()) {
        (Some(a), Some(b)) => Err((a.name.clone(), b.name.clone())),
        (first, _) => Ok(first),
    }
}

/// How one file differs between two versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FileChangeKind {
    Added,
    Removed,
    Changed,
}

/// One file's difference between two versions, with its unified diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionFileDiff {
    pub path: String,
    pub change: FileChangeKind,
    pub diff: String,
}

/// The files that differ from `from` to `to`, by path. A file that must not exist counts as
/// absent.
pub fn diff_versions(from: &[ProfileFile], to: &[ProfileFile]) -> Vec<VersionFileDiff> {
    let text = |files: &[ProfileFile], path: &ConfigPath| -> Option<String> {
        files
            .iter()
            .find(|f| &f.path == path)
            .and_then(|f| f.content.clone())
    };
    let mut paths: Vec<&ConfigPath> = from.iter().chain(to).map(|f| &f.path).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|path| {
            let (old, new) = (text(from, path), text(to, path));
            let shown = path.to_string();
            let diff = diff::unified_diff(&shown, old.as_deref(), new.as_deref())?;
            let change = match (&old, &new) {
                (None, _) => FileChangeKind::Added,
                (_, None) => FileChangeKind::Removed,
                _ => FileChangeKind::Changed,
            };
            Some(VersionFileDiff {
                path: shown,
                change,
                diff,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(raw: &[(&str, Option<&str>)]) -> Result<Vec<ProfileFile>, ProfileRuleError> {
        parse_files(
            raw.iter()
                .map(|(p, c)| ((*p).to_owned(), c.map(str::to_owned)))
                .collect(),
        )
    }

    fn field_of(raw: &[(&str, Option<&str>)]) -> String {
        files(raw).expect_err("refused").field
    }

    #[test]
    fn files_take_logical_paths_only() {
        let parsed = files(&[
            ("jail.d/sshd.local", Some("[sshd]\nmaxretry = 3\n")),
            (
                "filter.d/app.local",
                Some("[Definition]\nfailregex = x <HOST>\n"),
            ),
            ("jail.d/old.local", None),
        ])
        .expect("files");
        let paths: Vec<String> = parsed.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(
            paths,
            [
                "jail.d/old.local",
                "jail.d/sshd.local",
                "filter.d/app.local"
            ]
        );

        assert_eq!(
            field_of(&[("/etc/fail2ban/jail.local", Some(""))]),
            "files[0].path"
        );
        assert_eq!(
            field_of(&[("jail.d/ok.local", None), ("jail.d/../x.local", None)]),
            "files[1].path"
        );
        assert_eq!(
            field_of(&[("jail.d/zz-banhub.local", Some(""))]),
            "files[0].path"
        );
        assert_eq!(
            field_of(&[("jail.d/a.local", None), ("jail.d/a.local", None)]),
            "files[1].path"
        );
        assert_eq!(
            field_of(&[("jail.d/a.local", Some("a\0b"))]),
            "files[0].content"
        );
        let big = "#".repeat(MAX_FILE_BYTES + 1);
        assert_eq!(
            field_of(&[("jail.d/a.local", Some(&big))]),
            "files[0].content"
        );
        assert_eq!(field_of(&[]), "files");
    }

    fn profile(name: &str, selector: &[(&str, &str)]) -> Profile {
        Profile {
            name: ProfileName::parse(name).expect("name"),
            description: String::new(),
            selector: selector
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            pinned_version: None,
            latest_version: Some(1),
            created_by: "admin".to_owned(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn one_profile_per_server() {
        let servers = [
            Server::example("web-1", &[("role", "web"), ("dc", "a")]),
            Server::example("db-1", &[("role", "db"), ("dc", "a")]),
        ];
        let web = profile("web", &[("role", "web")]);
        let name = ProfileName::parse("dc-a").expect("name");
        let dc_a: BTreeMap<String, String> = [("dc".to_owned(), "a".to_owned())].into();
        let conflict = assignment_conflict(&name, &dc_a, std::slice::from_ref(&web), &servers)
            .expect("conflict");
        assert_eq!(
            (conflict.server.as_str(), conflict.other.as_str()),
            ("web-1", "web")
        );
        let db: BTreeMap<String, String> = [("role".to_owned(), "db".to_owned())].into();
        assert_eq!(
            assignment_conflict(&name, &db, std::slice::from_ref(&web), &servers),
            None
        );
        // A profile may keep or change its own selector.
        assert_eq!(
            assignment_conflict(&web.name, &dc_a, std::slice::from_ref(&web), &servers),
            None
        );

        assert_eq!(
            profile_of(&servers[0], std::slice::from_ref(&web))
                .map(|p| p.map(|p| p.name.to_string())),
            Ok(Some("web".to_owned()))
        );
        assert_eq!(
            profile_of(&servers[1], std::slice::from_ref(&web)),
            Ok(None)
        );
        let unassigned = profile("none", &[]);
        assert_eq!(profile_of(&servers[1], &[unassigned]), Ok(None));
        let both = profile("dc-a", &[("dc", "a")]);
        assert!(profile_of(&servers[0], &[web, both]).is_err());
    }

    #[test]
    fn versions_diff_by_file() {
        let v1 = files(&[
            ("jail.d/sshd.local", Some("[sshd]\nmaxretry = 5\n")),
            ("jail.d/gone.local", Some("[gone]\n")),
        ])
        .expect("v1");
        let v2 = files(&[
            ("jail.d/sshd.local", Some("[sshd]\nmaxretry = 3\n")),
            ("filter.d/app.local", Some("[Definition]\n")),
            ("jail.d/gone.local", None),
        ])
        .expect("v2");
        let diffs = diff_versions(&v1, &v2);
        let summary: Vec<(&str, FileChangeKind)> =
            diffs.iter().map(|d| (d.path.as_str(), d.change)).collect();
        assert_eq!(
            summary,
            [
                ("jail.d/gone.local", FileChangeKind::Removed),
                ("jail.d/sshd.local", FileChangeKind::Changed),
                ("filter.d/app.local", FileChangeKind::Added),
            ]
        );
        assert!(diffs[1].diff.contains("-maxretry = 5\n+maxretry = 3\n"));
        assert!(diff_versions(&v2, &v2).is_empty());
    }
}
