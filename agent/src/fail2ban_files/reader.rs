//! The effective jail configuration, read the way fail2ban 1.0's `JailsReader` reads it: the
//! files in fail2ban's order, their `[INCLUDES]`, sections merged across files, `[DEFAULT]`
//! inheritance and `%(name)s` interpolation; plus the raw override and filter files with their
//! versions.
//!
//! Order (fail2ban/client/configreader.py, `ConfigReaderUnshared.read("jail")`): `jail.conf`,
//! `jail.d/*.conf` (sorted), `jail.local`, `jail.d/*.local` (sorted), only those that exist.
//! Each file is replaced by its `before` includes, itself, then its `after` includes
//! (configparserinc.py), where every included `x.conf` also pulls in an existing `x.local`. A
//! later file's options override an earlier one's; the overridden values stay reachable as
//! `%(known/option)s`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use banhub_proto::rules::NameError;

use super::error::ConfigError;
use super::files::{self, EditableFile, VersionedFile};
use super::ini::{self, DEFAULT_SECTION, IniFile};
use super::names::{FilterName, JailName};

/// What fail2ban itself puts into `[DEFAULT]` as `fail2ban_version` (only `fail2ban_agent`
/// uses it).
pub const FAIL2BAN_VERSION: &str = "1.0.2";
/// The jail settings [`JailInfo::settings`] resolves.
pub const JAIL_SETTINGS: [&str; 11] = [
    "enabled",
    "filter",
    "logpath",
    "backend",
    "action",
    "banaction",
    "port",
    "maxretry",
    "findtime",
    "bantime",
    "ignoreip",
];
/// Python's `configparser.MAX_INTERPOLATION_DEPTH`.
const MAX_INTERPOLATION_DEPTH: usize = 10;
/// A bound on files pulled in by `[INCLUDES]` (stock Debian reads 5).
const MAX_FILES: usize = 256;
const INCLUDES: &str = "INCLUDES";
const KNOWN_PREFIX: &str = "KNOWN/";

/// Reads one fail2ban config directory. Cheap to create; every call reads the files afresh.
/// All methods block on file I/O (a few small files).
#[derive(Debug, Clone)]
pub struct ConfigReader {
    dir: PathBuf,
}

/// A jail's resolved configuration and its override file.
#[derive(Debug, Clone)]
pub struct JailView {
    /// `None` when no file defines the section.
    pub jail: Option<JailInfo>,
    /// `jail.d/<jail>.local`, the file the editor writes.
    pub override_file: VersionedFile,
}

/// A filter's two files.
#[derive(Debug, Clone)]
pub struct FilterFiles {
    pub name: FilterName,
    /// `filter.d/<filter>.conf` (read-only for the editor; the distribution owns it).
    pub conf: VersionedFile,
    /// `filter.d/<filter>.local`, the file the editor writes.
    pub local: VersionedFile,
}

/// One jail as fail2ban would configure it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailInfo {
    /// The section name as written (a [`JailName`] only if it passes the name rule).
    pub name: String,
    pub enabled: bool,
    /// `None` when the jail has no filter.
    pub filter: Option<FilterRef>,
    /// `auto` when not set.
    pub backend: String,
    /// The settings of [`JAIL_SETTINGS`] that are set, directly or through `[DEFAULT]`.
    pub settings: BTreeMap<String, Setting>,
    /// Settings that cannot be resolved, with fail2ban's wording.
    pub problems: Vec<String>,
}

/// A jail's `filter = name[options]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRef {
    /// The resolved value, e.g. `sshd[mode=normal]`.
    pub spec: String,
    /// The part before `[`, e.g. `sshd`.
    pub name: String,
    /// What is between the brackets, e.g. `mode=normal`.
    pub options: Option<String>,
}

/// One option's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// As written, before interpolation.
    pub raw: String,
    /// After `%(name)s` interpolation, or why it failed (Python's message).
    pub value: Result<String, String>,
    pub origin: Origin,
}

/// Where a setting comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Relative to the config directory when inside it (`jail.d/defaults-debian.conf`);
    /// `(fail2ban)` for the values fail2ban adds itself.
    pub file: String,
    /// 1-based; 0 for values fail2ban adds itself.
    pub line: usize,
    /// The section it is set in: the jail, or `DEFAULT`.
    pub section: String,
}

#[derive(Debug, Clone)]
struct Entry {
    raw: String,
    file: Option<usize>,
    line: usize,
}

type Options = HashMap<String, Entry>;

/// The merged jail configuration.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    dir: PathBuf,
    files: Vec<PathBuf>,
    warnings: Vec<String>,
    defaults: Options,
    /// Sections in order of first appearance, `KNOWN/...` included (as in Python).
    order: Vec<String>,
    sections: HashMap<String, Options>,
}

impl ConfigReader {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The config directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads and merges the jail configuration.
    pub fn load(&self) -> Result<EffectiveConfig, ConfigError> {
        let metadata = std::fs::metadata(&self.dir).map_err(|source| ConfigError::Dir {
            path: self.dir.clone(),
            source,
        })?;
        if !metadata.is_dir() {
            return Err(ConfigError::Dir {
                path: self.dir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let mut loader = Loader::default();
        let top = jail_files(&self.dir)?;
        let mut full = Vec::new();
        for file in expand_with_local(&top) {
            full.extend(loader.includes(&file, &[])?);
        }
        let mut config = EffectiveConfig {
            dir: self.dir.clone(),
            files: Vec::new(),
            warnings: Vec::new(),
            defaults: HashMap::new(),
            order: Vec::new(),
            sections: HashMap::new(),
        };
        for path in full {
            let Some(Some(ini)) = loader.cache.get(&path) else {
                continue;
            };
            config.files.push(path.clone());
            config.merge(ini, config.files.len() - 1);
        }
        config.warnings = loader.warnings;
        // JailReader adds these before interpolating, over anything a file says.
        for (key, value) in [
            ("fail2ban_version", FAIL2BAN_VERSION.to_owned()),
            (
                "fail2ban_confpath",
                self.dir.to_string_lossy().trim_end_matches('/').to_owned(),
            ),
        ] {
            config.defaults.insert(
                key.to_owned(),
                Entry {
                    raw: value,
                    file: None,
                    line: 0,
                },
            );
        }
        Ok(config)
    }

    /// One jail's resolved settings and its override file.
    pub fn read_jail(&self, jail: &JailName) -> Result<JailView, ConfigError> {
        let config = self.load()?;
        Ok(JailView {
            jail: config.jail(jail.as_str()),
            override_file: self.jail_override(jail)?,
        })
    }

    /// `jail.d/<jail>.local` with its version.
    pub fn jail_override(&self, jail: &JailName) -> Result<VersionedFile, ConfigError> {
        self.editable(&EditableFile::JailOverride(jail.clone()))
    }

    /// A file the editor may write, with its version.
    pub fn editable(&self, file: &EditableFile) -> Result<VersionedFile, ConfigError> {
        files::read_versioned(&self.dir, &file.relative_path())
    }

    /// `filter.d/<filter>.conf` and `filter.d/<filter>.local` with their versions.
    pub fn filter_files(&self, filter: &FilterName) -> Result<FilterFiles, ConfigError> {
        Ok(FilterFiles {
            name: filter.clone(),
            conf: files::read_versioned(
                &self.dir,
                &Path::new("filter.d").join(format!("{filter}.conf")),
            )?,
            local: self.editable(&EditableFile::FilterLocal(filter.clone()))?,
        })
    }

    /// Filter names from `filter.d/*.conf` and `filter.d/*.local`, sorted. Files whose stem
    /// breaks the name rule cannot be addressed and are left out.
    pub fn list_filters(&self) -> Result<Vec<FilterName>, ConfigError> {
        let dir = self.dir.join("filter.d");
        let mut names = BTreeSet::new();
        for path in list_dir(&dir)? {
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let stem = file_name
                .strip_suffix(".conf")
                .or_else(|| file_name.strip_suffix(".local"));
            if let Some(stem) = stem
                && path.is_file()
            {
                match FilterName::parse(stem) {
                    Ok(name) => {
                        names.insert(name);
                    }
                    Err(e) => {
                        tracing::debug!(file = %path.display(), error = %e, "filter name left out")
                    }
                }
            }
        }
        Ok(names.into_iter().collect())
    }
}

/// Regular, non-hidden files in a directory sorted by name (Python's `sorted(glob(...))`);
/// empty when the directory does not exist.
pub(super) fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Read {
            path: dir.to_owned(),
            source,
        })?;
        // glob's `*` does not match a leading dot, which also hides the editor's temp files.
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        paths.push(entry.path());
    }
    paths.sort();
    Ok(paths)
}

/// `jail.conf`, `jail.d/*.conf`, `jail.local`, `jail.d/*.local`: those that exist.
fn jail_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let sub = list_dir(&dir.join("jail.d"))?;
    let with_ext = |ext: &str| {
        sub.iter()
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut files = vec![dir.join("jail.conf")];
    files.extend(with_ext("conf"));
    files.push(dir.join("jail.local"));
    files.extend(with_ext("local"));
    files.retain(|p| p.is_file());
    Ok(files)
}

/// Python's `_expandConfFilesWithLocal`: each `x.conf` is followed by an existing `x.local`
/// not already listed.
fn expand_with_local(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for file in files {
        out.push(file.clone());
        let local = file.with_extension("local");
        if !files.contains(&local) && local.is_file() {
            out.push(local);
        }
    }
    out
}

#[derive(Default)]
struct Loader {
    /// `None`: missing or unreadable, skipped as fail2ban skips it.
    cache: HashMap<PathBuf, Option<IniFile>>,
    warnings: Vec<String>,
    listed: usize,
}

impl Loader {
    fn parse(&mut self, path: &Path) -> Result<Option<&IniFile>, ConfigError> {
        if !self.cache.contains_key(path) {
            let parsed = match files::read_bytes(path) {
                Ok(None) => None,
                Ok(Some(bytes)) => match String::from_utf8(bytes) {
                    Ok(text) => Some(ini::parse(&text).map_err(|source| ConfigError::Parse {
                        path: path.to_owned(),
                        source,
                    })?),
                    Err(_) => {
                        self.warnings.push(format!(
                            "{} is not UTF-8; fail2ban skips it",
                            path.display()
                        ));
                        None
                    }
                },
                Err(ConfigError::Read { source, .. }) => {
                    self.warnings.push(format!(
                        "{} cannot be read ({source}); fail2ban skips it",
                        path.display()
                    ));
                    None
                }
                Err(other) => return Err(other),
            };
            self.cache.insert(path.to_owned(), parsed);
        }
        Ok(self.cache.get(path).and_then(Option::as_ref))
    }

    /// Python's `__getIncludesUncached`: before-includes, the file, after-includes.
    fn includes(&mut self, resource: &Path, seen: &[PathBuf]) -> Result<Vec<PathBuf>, ConfigError> {
        self.listed += 1;
        if self.listed > MAX_FILES {
            return Err(ConfigError::TooManyIncludes {
                path: resource.to_owned(),
                limit: MAX_FILES,
            });
        }
        let Some(ini) = self.parse(resource)? else {
            return Ok(Vec::new());
        };
        let lists: Vec<Vec<String>> = ["before", "after"]
            .iter()
            .map(|key| {
                ini.section(INCLUDES)
                    .and_then(|s| s.get(key))
                    .map(|o| {
                        o.value
                            .split('\n')
                            .filter(|l| !l.is_empty())
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
        let base = resource.parent().unwrap_or(Path::new(""));
        let mut chain = seen.to_vec();
        chain.push(resource.to_owned());
        let mut expanded = [Vec::new(), Vec::new()];
        for (names, out) in lists.iter().zip(expanded.iter_mut()) {
            for name in names {
                let include = base.join(name);
                if seen.contains(&include) {
                    continue;
                }
                for file in expand_with_local(std::slice::from_ref(&include)) {
                    out.extend(self.includes(&file, &chain)?);
                }
            }
        }
        let [before, after] = expanded;
        let mut all = before;
        all.push(resource.to_owned());
        all.extend(after);
        Ok(all)
    }
}

/// `name?cond` sections (fail2ban's `CONDITIONAL_RE`, `^(\w+)(\?.+)$`).
fn conditional(section: &str) -> Option<(&str, &str)> {
    let at = section.find('?')?;
    let (name, cond) = section.split_at(at);
    let word = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    (word && cond.len() > 1).then_some((name, cond))
}

/// fail2ban's `_as_bool`.
pub fn as_bool(value: &str) -> bool {
    matches!(value.to_lowercase().as_str(), "1" | "on" | "true" | "yes")
}

/// Python's `repr` of a str, near enough for messages.
fn py_repr(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('\'', "\\'")
        .replace('\n', "\\n");
    format!("'{escaped}'")
}

impl FilterRef {
    /// Splits `name[options]` as fail2ban's `extractOptions` does.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = || format!("invalid filter definition {}", py_repr(spec));
        let (name, options) = match spec.find('[') {
            None => (spec, None),
            Some(open) => {
                let rest = spec[open..].trim_end();
                let inner = rest
                    .strip_prefix('[')
                    .and_then(|r| r.strip_suffix(']'))
                    .ok_or_else(bad)?;
                (&spec[..open], Some(inner.to_owned()))
            }
        };
        if name.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            spec: spec.to_owned(),
            name: name.to_owned(),
            options,
        })
    }

    /// The filter's name, if it passes the name rule (then `filter.d/<name>.conf`).
    pub fn filter_name(&self) -> Result<FilterName, NameError> {
        FilterName::parse(&self.name)
    }
}

impl JailInfo {
    /// The jail's name, if it passes the name rule.
    pub fn jail_name(&self) -> Result<JailName, NameError> {
        JailName::parse(&self.name)
    }
}

impl EffectiveConfig {
    /// The files read, in order, relative to the config directory when inside it.
    pub fn files(&self) -> Vec<String> {
        self.files.iter().map(|p| self.display(p)).collect()
    }

    /// Files fail2ban would skip (unreadable, not UTF-8).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Jail names in order of first appearance.
    pub fn jail_names(&self) -> Vec<&str> {
        self.order
            .iter()
            .map(String::as_str)
            .filter(|n| *n != INCLUDES && !n.starts_with(KNOWN_PREFIX))
            .collect()
    }

    /// Every jail with its resolved settings.
    pub fn jails(&self) -> Vec<JailInfo> {
        self.jail_names()
            .into_iter()
            .filter_map(|name| self.jail(name))
            .collect()
    }

    /// Names of the jails fail2ban would start.
    pub fn enabled_jails(&self) -> BTreeSet<String> {
        self.jails()
            .into_iter()
            .filter(|j| j.enabled)
            .map(|j| j.name)
            .collect()
    }

    /// One jail, if a file defines its section.
    pub fn jail(&self, name: &str) -> Option<JailInfo> {
        if name == INCLUDES || name.starts_with(KNOWN_PREFIX) || !self.sections.contains_key(name) {
            return None;
        }
        let mut settings = BTreeMap::new();
        let mut problems = Vec::new();
        for key in JAIL_SETTINGS {
            if let Some(setting) = self.get(name, key) {
                if let Err(e) = &setting.value {
                    problems.push(e.clone());
                }
                settings.insert(key.to_owned(), setting);
            }
        }
        let resolved = |key: &str| {
            settings
                .get(key)
                .and_then(|s: &Setting| s.value.as_ref().ok())
                .cloned()
        };
        let enabled = resolved("enabled").is_some_and(|v| as_bool(&v));
        let backend = resolved("backend").unwrap_or_else(|| "auto".to_owned());
        let filter = match resolved("filter").filter(|f| !f.is_empty()) {
            None => None,
            Some(spec) => match FilterRef::parse(&spec) {
                Ok(filter) => Some(filter),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
        };
        Some(JailInfo {
            name: name.to_owned(),
            enabled,
            filter,
            backend,
            settings,
            problems,
        })
    }

    /// Any option of a section (jail), resolved; `None` when neither the section nor
    /// `[DEFAULT]` sets it, or the section does not exist.
    pub fn get(&self, section: &str, option: &str) -> Option<Setting> {
        if !self.sections.contains_key(section) {
            return None;
        }
        let key = option.to_lowercase();
        let (entry, from_default) = self.lookup(section, &key)?;
        let value = self.interpolate(section, &key, &entry.raw);
        Some(Setting {
            raw: entry.raw.clone(),
            value,
            origin: Origin {
                file: entry
                    .file
                    .map_or_else(|| "(fail2ban)".to_owned(), |i| self.display(&self.files[i])),
                line: entry.line,
                section: if from_default {
                    DEFAULT_SECTION.to_owned()
                } else {
                    section.to_owned()
                },
            },
        })
    }

    /// An option of `[DEFAULT]`, resolved; `None` when no file sets it.
    pub fn default_setting(&self, option: &str) -> Option<Setting> {
        let key = option.to_lowercase();
        let entry = self.defaults.get(&key)?;
        Some(Setting {
            raw: entry.raw.clone(),
            value: self.interpolate(DEFAULT_SECTION, &key, &entry.raw),
            origin: Origin {
                file: entry
                    .file
                    .map_or_else(|| "(fail2ban)".to_owned(), |i| self.display(&self.files[i])),
                line: entry.line,
                section: DEFAULT_SECTION.to_owned(),
            },
        })
    }

    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Python's merge in `SafeConfigParserWithIncludes.read`.
    fn merge(&mut self, ini: &IniFile, file: usize) {
        for section in ini.sections() {
            let entries = section.options.iter().map(|o| {
                (
                    o.key.clone(),
                    Entry {
                        raw: o.value.clone(),
                        file: Some(file),
                        line: o.first_line,
                    },
                )
            });
            if section.name == DEFAULT_SECTION {
                self.defaults.extend(entries);
                continue;
            }
            let (name, entries): (&str, Vec<(String, Entry)>) = match conditional(&section.name) {
                Some((name, cond)) => (
                    name,
                    entries.map(|(k, e)| (format!("{k}{cond}"), e)).collect(),
                ),
                None => (&section.name, entries.collect()),
            };
            if let Some(existing) = self.sections.get(name) {
                // Keep the values about to be overridden for `%(known/option)s`.
                let previous: Vec<(String, Entry)> = entries
                    .iter()
                    .filter_map(|(k, _)| existing.get(k).map(|e| (k.clone(), e.clone())))
                    .collect();
                let known_name = format!("{KNOWN_PREFIX}{name}");
                if !self.sections.contains_key(&known_name) {
                    self.order.push(known_name.clone());
                }
                self.sections
                    .entry(known_name)
                    .or_default()
                    .extend(previous);
            } else {
                self.order.push(name.to_owned());
            }
            self.sections
                .entry(name.to_owned())
                .or_default()
                .extend(entries);
        }
    }

    /// The raw value of `key` seen from `section`: the section's own, else `[DEFAULT]`'s.
    fn lookup(&self, section: &str, key: &str) -> Option<(&Entry, bool)> {
        self.sections
            .get(section)
            .and_then(|s| s.get(key))
            .map(|e| (e, false))
            .or_else(|| self.defaults.get(key).map(|e| (e, true)))
    }

    /// The raw value a `%(var)s` reference names, as fail2ban's `BasicInterpolationWithName`
    /// finds it: `__name__` is the section; plain names come from the section, then
    /// `[DEFAULT]`; `section/option` reads another section (`default/...` is `[DEFAULT]`,
    /// `known/...` the value this section had before a later file overrode it).
    fn resolve_var(&self, section: &str, written: &str) -> Option<String> {
        let key = written.to_lowercase();
        if key == "__name__" {
            return Some(section.to_owned());
        }
        if let Some((entry, _)) = self.lookup(section, &key) {
            return Some(entry.raw.clone());
        }
        // Python stores the section/option value under the name as written but looks it up
        // lower-cased, so only an all-lower-case reference resolves.
        let (sec, opt) = written.split_once('/')?;
        let sec_ok = !sec.is_empty()
            && sec
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if written != key || !sec_ok || opt.is_empty() {
            return None;
        }
        let default = || self.defaults.get(opt).map(|e| e.raw.clone());
        match sec {
            "default" => default(),
            "known" => self
                .sections
                .get(&format!("{KNOWN_PREFIX}{section}"))
                .and_then(|s| s.get(opt))
                .map(|e| e.raw.clone())
                .or_else(default),
            other => {
                let found = self.sections.get(other)?;
                found.get(opt).map(|e| e.raw.clone()).or_else(default)
            }
        }
    }

    fn interpolate(&self, section: &str, option: &str, raw: &str) -> Result<String, String> {
        let mut out = String::new();
        self.interpolate_some(section, option, raw, raw, &mut out, 1)?;
        Ok(out)
    }

    /// Python's `BasicInterpolation._interpolate_some`.
    fn interpolate_some(
        &self,
        section: &str,
        option: &str,
        rawval: &str,
        mut rest: &str,
        out: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_INTERPOLATION_DEPTH {
            return Err(format!(
                "Recursion limit exceeded in value substitution: option {} in section {} \
                 contains an interpolation key which cannot be substituted in \
                 {MAX_INTERPOLATION_DEPTH} steps. Raw value: {}",
                py_repr(option),
                py_repr(section),
                py_repr(rawval)
            ));
        }
        loop {
            let Some(p) = rest.find('%') else {
                out.push_str(rest);
                return Ok(());
            };
            out.push_str(&rest[..p]);
            rest = &rest[p..];
            if rest[1..].starts_with('%') {
                out.push('%');
                rest = &rest[2..];
            } else if rest[1..].starts_with('(') {
                let Some((var, tail)) = rest[2..]
                    .split_once(')')
                    .filter(|(var, tail)| !var.is_empty() && tail.starts_with('s'))
                else {
                    return Err(format!(
                        "bad interpolation variable reference {}",
                        py_repr(rest)
                    ));
                };
                rest = &tail[1..];
                let value = self.resolve_var(section, var).ok_or_else(|| {
                    format!(
                        "Bad value substitution: option {} in section {} contains an \
                         interpolation key {} which is not a valid option name. Raw value: {}",
                        py_repr(option),
                        py_repr(section),
                        py_repr(&var.to_lowercase()),
                        py_repr(rawval)
                    )
                })?;
                if value.contains('%') {
                    self.interpolate_some(section, option, rawval, &value, out, depth + 1)?;
                } else {
                    out.push_str(&value);
                }
            } else {
                return Err(format!(
                    "'%' must be followed by '%' or '(', found: {}",
                    py_repr(rest)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
