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
/// All methods block on file I/O (a few small files; about a millisecond for stock Debian).
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
fn list_dir(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
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
mod tests {
    use super::*;

    /// A config directory from `(relative path, text)` pairs.
    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    fn load(files: &[(&str, &str)]) -> (tempfile::TempDir, EffectiveConfig) {
        let d = dir(files);
        let config = ConfigReader::new(d.path()).load().expect("loads");
        (d, config)
    }

    fn value(config: &EffectiveConfig, section: &str, option: &str) -> Result<String, String> {
        config
            .get(section, option)
            .map(|s| s.value)
            .unwrap_or_else(|| Err("<unset>".to_owned()))
    }

    #[test]
    fn file_order_matches_fail2ban() {
        let (_d, config) = load(&[
            (
                "jail.conf",
                "[INCLUDES]\nbefore = paths.conf\nafter = after.conf\n[j]\nx = conf\n",
            ),
            ("paths.conf", "[DEFAULT]\np = paths\n"),
            ("paths.local", "[DEFAULT]\np = paths-local\n"),
            ("after.conf", "[j]\nx = after\n"),
            ("jail.local", "[j]\nx = local\n"),
            ("jail.d/b.conf", "[j]\nx = b.conf\n"),
            ("jail.d/a.conf", "[j]\nx = a.conf\n"),
            ("jail.d/a.local", "[j]\nx = a.local\n"),
            ("jail.d/.hidden.local", "[j]\nx = hidden\n"),
            ("jail.d/notes.txt", "not config"),
        ]);
        assert_eq!(
            config.files(),
            [
                "paths.conf",
                "paths.local",
                "jail.conf",
                "after.conf",
                "jail.d/a.conf",
                "jail.d/b.conf",
                "jail.local",
                "jail.d/a.local",
            ]
        );
        assert_eq!(value(&config, "j", "x"), Ok("a.local".to_owned()));
        assert_eq!(value(&config, "j", "p"), Ok("paths-local".to_owned()));
        let origin = config.get("j", "x").expect("x").origin;
        assert_eq!((origin.file.as_str(), origin.line), ("jail.d/a.local", 2));
    }

    #[test]
    fn include_cycles_and_missing_includes_are_harmless() {
        let (_d, config) = load(&[
            (
                "jail.conf",
                "[INCLUDES]\nbefore = a.conf\n  missing.conf\n[j]\nx = 1\n",
            ),
            (
                "a.conf",
                "[INCLUDES]\nbefore = jail.conf\n[DEFAULT]\ny = 2\n",
            ),
        ]);
        assert_eq!(config.files(), ["a.conf", "jail.conf"]);
        assert_eq!(value(&config, "j", "y"), Ok("2".to_owned()));
    }

    #[test]
    fn interpolation_follows_python() {
        let (d, config) = load(&[
            (
                "jail.conf",
                "[DEFAULT]\n\
                 a = 1\n\
                 Port = 22\n\
                 action_ = %(banaction)s[port=\"%(port)s\"]\n\
                 action = %(action_)s\n\
                 banaction = iptables\n\
                 filter = %(__name__)s[mode=%(mode)s]\n\
                 mode = normal\n\
                 loop = %(loop)s\n\
                 [Foo]\n\
                 bar = x\n\
                 [foo]\n\
                 bar = lower\n\
                 [t1]\n\
                 v1 = %(Foo/bar)s\n\
                 v2 = %(foo/bar)s\n\
                 v3 = %(PORT)s\n\
                 v4 = %(default/a)s-%(known/a)s\n\
                 v5 = 100%%\n\
                 v6 = %(nosuch)s\n\
                 v7 = 5%\n\
                 v8 = %(x\n\
                 v9 = %(loop)s\n\
                 v10 = %(foo/a)s\n\
                 v11 = %(default/action_)s[name=%(__name__)s-tcp]\n\
                 port = ssh\n\
                 v12 = %(fail2ban_confpath)s\n",
            ),
            (
                "jail.local",
                "[t1]\nv4 = %(known/v4)s+\nport = %(known/port)s,2222\n",
            ),
        ]);
        let ok = |s: &str| Ok(s.to_owned());
        let cases: [(&str, Result<String, String>); 11] = [
            ("v2", ok("lower")),
            ("v3", ok("ssh,2222")),
            ("v4", ok("1-1+")),
            ("v5", ok("100%")),
            ("v10", ok("1")),
            ("v11", ok("iptables[port=\"ssh,2222\"][name=t1-tcp]")),
            ("filter", ok("t1[mode=normal]")),
            ("action", ok("iptables[port=\"ssh,2222\"]")),
            ("port", ok("ssh,2222")),
            ("v12", ok(&d.path().display().to_string())),
            ("v1", Err(String::new())),
        ];
        for (option, expected) in cases {
            let got = value(&config, "t1", option);
            match expected {
                Ok(v) => assert_eq!(got, Ok(v), "{option}"),
                Err(_) => assert!(got.is_err(), "{option}: {got:?}"),
            }
        }
        let err = |option: &str| value(&config, "t1", option).expect_err(option);
        assert!(
            err("v1").contains("interpolation key 'foo/bar'"),
            "{}",
            err("v1")
        );
        assert_eq!(
            err("v6"),
            "Bad value substitution: option 'v6' in section 't1' contains an interpolation \
             key 'nosuch' which is not a valid option name. Raw value: '%(nosuch)s'"
        );
        assert!(
            err("v7").starts_with("'%' must be followed by"),
            "{}",
            err("v7")
        );
        assert!(err("v8").starts_with("bad interpolation variable reference"));
        assert!(
            err("v9").starts_with("Recursion limit exceeded"),
            "{}",
            err("v9")
        );
    }

    #[test]
    fn default_settings_resolve_across_files() {
        let (_d, config) = load(&[
            (
                "jail.conf",
                "[DEFAULT]\nlocal = 127.0.0.1/8\nignoreip = %(local)s ::1\n[sshd]\nport = 22\n",
            ),
            (
                "jail.d/banhub-defaults.local",
                "[DEFAULT]\nignoreip = %(local)s 192.0.2.1\n",
            ),
        ]);
        let ignoreip = config.default_setting("IgnoreIP").expect("set");
        assert_eq!(ignoreip.origin.file, "jail.d/banhub-defaults.local");
        assert_eq!(
            (ignoreip.origin.line, ignoreip.origin.section.as_str()),
            (2, "DEFAULT")
        );
        assert_eq!(ignoreip.value, Ok("127.0.0.1/8 192.0.2.1".to_owned()));
        assert_eq!(
            config.default_setting("local").map(|s| s.value),
            Some(Ok("127.0.0.1/8".to_owned()))
        );
        assert!(config.default_setting("nosuch").is_none());
    }

    #[test]
    fn jails_resolve_enabled_filter_and_backend() {
        let (_d, config) = load(&[
            (
                "jail.conf",
                "[INCLUDES]\nbefore = paths.conf\n\
                 [DEFAULT]\nenabled = false\nfilter = %(__name__)s[mode=%(mode)s]\nmode = normal\n\
                 backend = auto\nlogpath = /dev/null\n\
                 [sshd]\nbackend = %(sshd_backend)s\nlogpath = %(sshd_log)s\n\
                 [web]\nenabled = yes\nfilter =\n\
                 [odd]\nfilter = a[b\nenabled = %(nope)s\n\
                 [cond?x=1]\nport = 1\n",
            ),
            (
                "paths.conf",
                "[DEFAULT]\nsshd_backend = polling\nsshd_log = /var/log/auth.log\n",
            ),
            ("jail.d/defaults-debian.conf", "[sshd]\nenabled = true\n"),
        ]);
        assert_eq!(config.jail_names(), ["sshd", "web", "odd", "cond"]);
        let sshd = config.jail("sshd").expect("sshd");
        assert!(sshd.enabled);
        assert_eq!(sshd.backend, "polling");
        let filter = sshd.filter.clone().expect("filter");
        assert_eq!(
            (filter.name.as_str(), filter.options.as_deref()),
            ("sshd", Some("mode=normal"))
        );
        assert_eq!(filter.filter_name().expect("valid").as_str(), "sshd");
        assert_eq!(
            sshd.settings["logpath"].value.as_deref(),
            Ok("/var/log/auth.log")
        );
        assert_eq!(
            sshd.settings["enabled"].origin.file,
            "jail.d/defaults-debian.conf"
        );
        assert!(sshd.problems.is_empty(), "{:?}", sshd.problems);

        let web = config.jail("web").expect("web");
        assert!(web.enabled && web.filter.is_none());
        let odd = config.jail("odd").expect("odd");
        assert!(!odd.enabled && odd.filter.is_none());
        assert_eq!(odd.problems.len(), 2, "{:?}", odd.problems);
        let cond = config.jail("cond").expect("cond");
        assert_eq!(
            config.get("cond", "port?x=1").map(|s| s.raw),
            Some("1".to_owned())
        );
        assert_eq!(cond.settings.get("port"), None);
        assert_eq!(
            config.enabled_jails().into_iter().collect::<Vec<_>>(),
            ["sshd", "web"]
        );
        assert!(config.jail("INCLUDES").is_none() && config.jail("nosuch").is_none());
    }

    #[test]
    fn bool_values_follow_fail2ban() {
        for (text, expected) in [
            ("true", true),
            ("True", true),
            ("yes", true),
            ("on", true),
            ("1", true),
            ("false", false),
            ("", false),
            ("y", false),
            ("enabled", false),
        ] {
            assert_eq!(as_bool(text), expected, "{text:?}");
        }
    }

    #[test]
    fn filter_refs_follow_extract_options() {
        type Expected<'a> = Option<(&'a str, Option<&'a str>)>;
        let cases: [(&str, Expected); 6] = [
            ("sshd", Some(("sshd", None))),
            (
                "sshd[mode=aggressive]",
                Some(("sshd", Some("mode=aggressive"))),
            ),
            ("sshd[a=1][b=2] ", Some(("sshd", Some("a=1][b=2")))),
            ("sshd[mode=x", None),
            ("[x]", None),
            ("sshd[x]y", None),
        ];
        for (spec, expected) in cases {
            let got = FilterRef::parse(spec).ok();
            assert_eq!(
                got.as_ref()
                    .map(|f| (f.name.as_str(), f.options.as_deref())),
                expected,
                "{spec:?}"
            );
        }
    }

    #[test]
    fn parse_errors_name_the_file_and_line() {
        let d = dir(&[
            ("jail.conf", "[a]\nx = 1\n"),
            ("jail.d/bad.local", "[a]\nbroken\n"),
        ]);
        let err = ConfigReader::new(d.path()).load().expect_err("bad file");
        let text = err.to_string();
        assert!(
            text.contains("jail.d/bad.local") && text.contains("line 2"),
            "{text}"
        );
    }

    #[test]
    fn missing_dir_is_reported() {
        let err = ConfigReader::new("/nonexistent/banhub")
            .load()
            .expect_err("missing");
        assert!(matches!(err, ConfigError::Dir { .. }), "{err}");
    }

    #[test]
    fn filters_and_overrides_are_listed_and_versioned() {
        let d = dir(&[
            ("filter.d/sshd.conf", "[Definition]\nfailregex = x\n"),
            ("filter.d/sshd.local", "[Definition]\nignoreregex = y\n"),
            ("filter.d/mine.local", "[Definition]\nfailregex = z\n"),
            ("filter.d/bad name.conf", ""),
            ("filter.d/.hidden.conf", ""),
            ("filter.d/readme.txt", ""),
            ("jail.d/sshd.local", "[sshd]\nmaxretry = 2\n"),
        ]);
        let reader = ConfigReader::new(d.path());
        let names: Vec<String> = reader
            .list_filters()
            .expect("list")
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(names, ["mine", "sshd"]);
        let sshd = FilterName::parse("sshd").expect("name");
        let files = reader.filter_files(&sshd).expect("files");
        assert_eq!(files.conf.path, "filter.d/sshd.conf");
        assert_eq!(
            files.local.content.as_deref(),
            Some("[Definition]\nignoreregex = y\n")
        );
        let jail = JailName::parse("sshd").expect("name");
        let view = reader.read_jail(&jail).expect("jail");
        assert_eq!(view.override_file.path, "jail.d/sshd.local");
        assert_eq!(
            view.override_file.version,
            super::super::version::Version::of(Some(b"[sshd]\nmaxretry = 2\n"))
        );
        assert_eq!(
            view.jail.expect("defined").settings["maxretry"]
                .value
                .as_deref(),
            Ok("2")
        );
        let none = reader
            .read_jail(&JailName::parse("other").expect("name"))
            .expect("read");
        assert!(none.jail.is_none() && none.override_file.content.is_none());
    }
}
