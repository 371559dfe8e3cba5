//! Jails and filters banhub creates: the text of a new `jail.d/<jail>.local` or
//! `filter.d/<filter>.local`, the marker line that says banhub created it (only such files can be
//! deleted through banhub), and the catalog a new jail is made from (the filters of `filter.d`
//! with their origin, the jails of `jail.conf` as templates, the jails banhub created).
//!
//! The writes themselves go through the editor like every other edit.

use std::fmt::Write as _;
use std::path::Path;

use banhub_proto::new_config::{FilterLines, JailSettings};

use super::error::ConfigError;
use super::files::{self, EditableFile};
use super::ini;
use super::names::{FilterName, JailName};
use super::reader::{ConfigReader, list_dir};

/// The first line of every file banhub creates, followed by the Unix time of its creation.
pub const MANAGED_MARKER: &str = "# Managed by banhub: created ";

/// The marker line of a file created at `created_unix`.
fn marker(created_unix: i64) -> String {
    format!("{MANAGED_MARKER}{created_unix}\n")
}

/// Whether `text` starts with banhub's marker line.
pub fn is_managed(text: &str) -> bool {
    text.lines()
        .next()
        .and_then(|line| line.strip_prefix(MANAGED_MARKER))
        .is_some_and(|time| !time.is_empty() && time.trim_end().parse::<i64>().is_ok())
}

/// A value over several lines, as fail2ban's parser reads them: continuation lines indented.
fn multi_line(out: &mut String, key: &str, values: &[String]) {
    let indent = " ".repeat(key.len() + 3);
    for (i, value) in values.iter().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "{key} = {value}");
        } else {
            let _ = writeln!(out, "{indent}{value}");
        }
    }
}

/// `jail.d/<jail>.local` of a new jail whose settings passed [`JailSettings::checked`].
pub fn jail_file(
    jail: &JailName,
    filter: &FilterName,
    settings: &JailSettings,
    created_unix: i64,
) -> String {
    let mut out = marker(created_unix);
    let _ = writeln!(out, "[{jail}]");
    let _ = writeln!(out, "enabled = {}", settings.enabled);
    let _ = writeln!(out, "filter = {filter}");
    let _ = writeln!(out, "backend = {}", settings.backend);
    if settings.journal_match.is_empty() {
        multi_line(&mut out, "logpath", &settings.log_paths);
    } else {
        let _ = writeln!(out, "journalmatch = {}", settings.journal_match);
    }
    let _ = writeln!(out, "maxretry = {}", settings.maxretry);
    let _ = writeln!(out, "findtime = {}", settings.findtime);
    let _ = writeln!(out, "bantime = {}", settings.bantime);
    if !settings.port.is_empty() {
        let _ = writeln!(out, "port = {}", settings.port);
    }
    out
}

/// `filter.d/<filter>.local` of a new custom filter whose lines passed [`FilterLines::checked`].
pub fn filter_file(lines: &FilterLines, created_unix: i64) -> String {
    let mut out = marker(created_unix);
    out.push_str("[Definition]\n");
    multi_line(&mut out, "failregex", &lines.failregex);
    if lines.ignoreregex.is_empty() {
        out.push_str("ignoreregex =\n");
    } else {
        multi_line(&mut out, "ignoreregex", &lines.ignoreregex);
    }
    if !lines.datepattern.is_empty() {
        let _ = writeln!(out, "datepattern = {}", lines.datepattern);
    }
    out
}

/// A filter of `filter.d` and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogFilter {
    pub name: FilterName,
    /// `filter.d/<name>.conf` exists.
    pub conf: bool,
    /// `filter.d/<name>.local` exists.
    pub local: bool,
    /// The `.local` file carries banhub's marker.
    pub managed: bool,
}

/// A jail of `jail.conf`, resolved as fail2ban would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailTemplate {
    pub name: String,
    pub filter: String,
    pub port: String,
    pub enabled: bool,
}

/// What a new jail can be made from, and what banhub created.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Catalog {
    pub filters: Vec<CatalogFilter>,
    pub jail_templates: Vec<JailTemplate>,
    /// Jails whose `jail.d/<jail>.local` carries banhub's marker.
    pub managed_jails: Vec<JailName>,
}

/// Whether the file exists and starts with banhub's marker.
fn managed_file(dir: &Path, file: &EditableFile) -> Result<bool, ConfigError> {
    let read = files::read_versioned(dir, &file.relative_path())?;
    Ok(read.content.as_deref().is_some_and(is_managed))
}

impl ConfigReader {
    /// The catalog of this configuration directory.
    pub fn catalog(&self) -> Result<Catalog, ConfigError> {
        let dir = self.dir();
        let mut catalog = Catalog::default();
        for name in self.list_filters()? {
            let filter_dir = dir.join("filter.d");
            let conf = filter_dir.join(format!("{name}.conf")).is_file();
            let local = filter_dir.join(format!("{name}.local")).is_file();
            let managed = local && managed_file(dir, &EditableFile::FilterLocal(name.clone()))?;
            catalog.filters.push(CatalogFilter {
                name,
                conf,
                local,
                managed,
            });
        }
        let jail_conf = dir.join("jail.conf");
        if let Some(bytes) = files::read_bytes(&jail_conf)? {
            let text = String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8 {
                path: jail_conf.clone(),
            })?;
            let parsed = ini::parse(&text).map_err(|source| ConfigError::Parse {
                path: jail_conf.clone(),
                source,
            })?;
            let config = self.load()?;
            for section in parsed.sections() {
                let Some(info) = config.jail(&section.name) else {
                    continue;
                };
                let value = |key: &str| {
                    info.settings
                        .get(key)
                        .and_then(|s| s.value.as_ref().ok())
                        .cloned()
                        .unwrap_or_default()
                };
                catalog.jail_templates.push(JailTemplate {
                    filter: info
                        .filter
                        .as_ref()
                        .map(|f| f.name.clone())
                        .unwrap_or_default(),
                    port: value("port"),
                    enabled: info.enabled,
                    name: info.name,
                });
            }
        }
        for path in list_dir(&dir.join("jail.d"))? {
            let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".local"))
            else {
                continue;
            };
            let Ok(jail) = JailName::parse(stem) else {
                continue;
            };
            if managed_file(dir, &EditableFile::JailOverride(jail.clone()))? {
                catalog.managed_jails.push(jail);
            }
        }
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fail2ban_files::content;

    fn settings() -> JailSettings {
        JailSettings {
            log_paths: vec!["/var/log/a.log".to_owned(), "/var/log/b.log".to_owned()],
            journal_match: String::new(),
            backend: String::new(),
            maxretry: 4,
            findtime: 600,
            bantime: -1,
            port: "ssh,2222".to_owned(),
            enabled: true,
        }
        .checked()
        .expect("valid")
    }

    #[test]
    fn a_jail_file_holds_its_section_after_the_marker() {
        let jail = JailName::parse("sshd-web").expect("name");
        let filter = FilterName::parse("sshd").expect("name");
        let text = jail_file(&jail, &filter, &settings(), 1_764_000_000);
        assert_eq!(
            text,
            "# Managed by banhub: created 1764000000\n\
             [sshd-web]\n\
             enabled = true\n\
             filter = sshd\n\
             backend = auto\n\
             logpath = /var/log/a.log\n          /var/log/b.log\n\
             maxretry = 4\n\
             findtime = 600\n\
             bantime = -1\n\
             port = ssh,2222\n"
        );
        assert!(is_managed(&text));
        let parsed = content::check_jail_override(&jail, &text).expect("only its own section");
        let section = parsed.section("sshd-web").expect("section");
        assert_eq!(
            section.get("logpath").map(|o| o.value.as_str()),
            Some("/var/log/a.log\n/var/log/b.log")
        );
    }

    #[test]
    fn a_journal_jail_has_a_match_and_no_log_path() {
        let jail = JailName::parse("sshd-journal").expect("name");
        let filter = FilterName::parse("sshd").expect("name");
        let journal = JailSettings {
            log_paths: vec![],
            journal_match: "_SYSTEMD_UNIT=sshd.service + _COMM=sshd".to_owned(),
            backend: String::new(),
            port: String::new(),
            ..settings()
        }
        .checked()
        .expect("valid");
        let text = jail_file(&jail, &filter, &journal, 1);
        assert!(text.contains("backend = systemd\n"), "{text}");
        assert!(
            text.contains("journalmatch = _SYSTEMD_UNIT=sshd.service + _COMM=sshd\n"),
            "{text}"
        );
        assert!(!text.contains("logpath"), "{text}");
        assert!(!text.contains("port"), "{text}");
    }

    #[test]
    fn a_filter_file_is_a_definition_after_the_marker() {
        let lines = FilterLines {
            failregex: vec!["^a <HOST>$".to_owned(), "^b <HOST>$".to_owned()],
            ignoreregex: vec![],
            datepattern: "{^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S".to_owned(),
        }
        .checked()
        .expect("valid");
        let text = filter_file(&lines, 7);
        assert_eq!(
            text,
            "# Managed by banhub: created 7\n\
             [Definition]\n\
             failregex = ^a <HOST>$\n            ^b <HOST>$\n\
             ignoreregex =\n\
             datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n"
        );
        let parsed = content::check_filter(&text).expect("a filter");
        assert_eq!(
            parsed
                .section("Definition")
                .and_then(|s| s.get("failregex"))
                .map(|o| o.value.as_str()),
            Some("^a <HOST>$\n^b <HOST>$")
        );
    }

    #[test]
    fn only_the_first_line_marks_a_file() {
        assert!(is_managed("# Managed by banhub: created 12\n[x]\n"));
        assert!(!is_managed("[x]\n# Managed by banhub: created 12\n"));
        assert!(!is_managed("# Managed by banhub: created \n[x]\n"));
        assert!(!is_managed("# Managed by banhub: created soon\n"));
        assert!(!is_managed(""));
    }

    #[test]
    fn the_catalog_names_origins_templates_and_managed_files() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        for sub in ["filter.d", "jail.d"] {
            std::fs::create_dir_all(root.join(sub)).expect("dir");
        }
        let write = |path: &str, text: &str| std::fs::write(root.join(path), text).expect("write");
        write("filter.d/sshd.conf", "[Definition]\nfailregex = x <HOST>\n");
        write("filter.d/sshd.local", "[Definition]\n");
        write("filter.d/mine.local", &marker(5));
        write(
            "jail.conf",
            "[DEFAULT]\nport = 0:65535\nfilter = %(__name__)s\n[sshd]\nport = ssh\nlogpath = /var/log/auth.log\n\
             [recidive]\nfilter = recidive\n",
        );
        write(
            "jail.d/made.local",
            &format!("{}[made]\nfilter = mine\n", marker(5)),
        );
        write("jail.d/hand.local", "[hand]\nfilter = sshd\n");
        let catalog = ConfigReader::new(root).catalog().expect("catalog");
        let filters: Vec<(&str, bool, bool, bool)> = catalog
            .filters
            .iter()
            .map(|f| (f.name.as_str(), f.conf, f.local, f.managed))
            .collect();
        assert_eq!(
            filters,
            vec![("mine", false, true, true), ("sshd", true, true, false)]
        );
        let templates: Vec<(&str, &str, &str)> = catalog
            .jail_templates
            .iter()
            .map(|t| (t.name.as_str(), t.filter.as_str(), t.port.as_str()))
            .collect();
        assert_eq!(
            templates,
            vec![("sshd", "sshd", "ssh"), ("recidive", "recidive", "0:65535")]
        );
        let managed: Vec<&str> = catalog.managed_jails.iter().map(JailName::as_str).collect();
        assert_eq!(managed, vec!["made"]);
    }
}
