//! The rules of a new jail or custom filter, shared so the hub (at its HTTP edge) and the agent
//! (before a file is written) check exactly the same thing: log paths, journal matches, backends,
//! ports, the numeric ranges and the lines of a filter's regular expressions. Names follow
//! [`crate::rules`]. A refusal names the field as the REST API spells it.

use std::ops::RangeInclusive;

/// Most log paths of one jail.
pub const MAX_LOG_PATHS: usize = 16;
/// Longest log path.
pub const MAX_LOG_PATH_LEN: usize = 1024;
/// Longest journal match.
pub const MAX_JOURNAL_MATCH_LEN: usize = 512;
/// Longest `port` value.
pub const MAX_PORT_LEN: usize = 64;
/// `maxretry`.
pub const MAXRETRY: RangeInclusive<u32> = 1..=1000;
/// `findtime` in seconds: up to a year.
pub const FINDTIME: RangeInclusive<u64> = 1..=31_536_000;
/// `bantime` in seconds when not permanent (-1): up to ten years.
pub const BANTIME: RangeInclusive<i64> = 1..=315_360_000;
/// The backends a new jail may use.
pub const BACKENDS: [&str; 4] = ["auto", "pyinotify", "polling", "systemd"];
/// Most `failregex` (and `ignoreregex`) lines of one filter.
pub const MAX_REGEXES: usize = 32;
/// Longest regular expression.
pub const MAX_REGEX_LEN: usize = 2048;
/// Longest `datepattern`.
pub const MAX_DATEPATTERN_LEN: usize = 256;

/// Why a field of a new jail or filter is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct SpecError {
    /// The field as the REST API names it (`logPaths[1]`, `maxretry`, ...).
    pub field: String,
    pub reason: String,
}

impl SpecError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// What a new jail says besides its name and filter, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailSettings {
    pub log_paths: Vec<String>,
    /// Empty when the jail reads log files.
    pub journal_match: String,
    /// Empty: `auto` for log files, `systemd` for a journal match.
    pub backend: String,
    pub maxretry: u32,
    pub findtime: u64,
    /// -1: for good.
    pub bantime: i64,
    /// Empty: the default of the host's configuration.
    pub port: String,
    pub enabled: bool,
}

impl JailSettings {
    /// Checks every field and fills in the backend; the first refusal is returned.
    pub fn checked(mut self) -> Result<Self, SpecError> {
        if self.journal_match.is_empty() {
            if self.log_paths.is_empty() {
                return Err(SpecError::new(
                    "logPaths",
                    "must hold at least one log path, or give a journalMatch instead",
                ));
            }
            if self.log_paths.len() > MAX_LOG_PATHS {
                return Err(SpecError::new(
                    "logPaths",
                    format!("must hold at most {MAX_LOG_PATHS} log paths"),
                ));
            }
            for (i, path) in self.log_paths.iter().enumerate() {
                check_log_path(path).map_err(|r| SpecError::new(format!("logPaths[{i}]"), r))?;
            }
            if self.backend.is_empty() {
                "auto".clone_into(&mut self.backend);
            }
            if self.backend == "systemd" {
                return Err(SpecError::new(
                    "backend",
                    "systemd reads the journal, not log files: give a journalMatch instead of \
                     logPaths, or another backend",
                ));
            }
        } else {
            if !self.log_paths.is_empty() {
                return Err(SpecError::new(
                    "journalMatch",
                    "cannot be given with logPaths: a jail reads log files or the journal",
                ));
            }
            check_journal_match(&self.journal_match)
                .map_err(|r| SpecError::new("journalMatch", r))?;
            if self.backend.is_empty() {
                "systemd".clone_into(&mut self.backend);
            }
            if self.backend != "systemd" {
                return Err(SpecError::new(
                    "backend",
                    "must be systemd with a journalMatch",
                ));
            }
        }
        if !BACKENDS.contains(&self.backend.as_str()) {
            return Err(SpecError::new(
                "backend",
                format!("must be one of {}", BACKENDS.join(", ")),
            ));
        }
        if !MAXRETRY.contains(&self.maxretry) {
            return Err(SpecError::new(
                "maxretry",
                format!("must be from {} to {}", MAXRETRY.start(), MAXRETRY.end()),
            ));
        }
        if !FINDTIME.contains(&self.findtime) {
            return Err(SpecError::new(
                "findtime",
                format!(
                    "must be from {} to {} seconds",
                    FINDTIME.start(),
                    FINDTIME.end()
                ),
            ));
        }
        if self.bantime != -1 && !BANTIME.contains(&self.bantime) {
            return Err(SpecError::new(
                "bantime",
                format!(
                    "must be -1 (for good) or from {} to {} seconds",
                    BANTIME.start(),
                    BANTIME.end()
                ),
            ));
        }
        if !self.port.is_empty() {
            check_port(&self.port).map_err(|r| SpecError::new("port", r))?;
        }
        Ok(self)
    }
}

/// The lines of a new custom filter, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterLines {
    pub failregex: Vec<String>,
    pub ignoreregex: Vec<String>,
    /// Empty: fail2ban's default date detection.
    pub datepattern: String,
}

impl FilterLines {
    /// Checks every line and trims the white space around each; the first refusal is returned.
    pub fn checked(self) -> Result<Self, SpecError> {
        if self.failregex.is_empty() {
            return Err(SpecError::new(
                "failregex",
                "must hold at least one regular expression",
            ));
        }
        let lines = |field: &str, lines: Vec<String>| -> Result<Vec<String>, SpecError> {
            if lines.len() > MAX_REGEXES {
                return Err(SpecError::new(
                    field,
                    format!("must hold at most {MAX_REGEXES} regular expressions"),
                ));
            }
            lines
                .into_iter()
                .enumerate()
                .map(|(i, line)| {
                    check_regex(&line)
                        .map(|()| line.trim().to_owned())
                        .map_err(|r| SpecError::new(format!("{field}[{i}]"), r))
                })
                .collect()
        };
        let failregex = lines("failregex", self.failregex)?;
        let ignoreregex = lines("ignoreregex", self.ignoreregex)?;
        let datepattern = self.datepattern.trim().to_owned();
        if datepattern.len() > MAX_DATEPATTERN_LEN || datepattern.chars().any(char::is_control) {
            return Err(SpecError::new(
                "datepattern",
                format!("must be one line of at most {MAX_DATEPATTERN_LEN} bytes"),
            ));
        }
        Ok(Self {
            failregex,
            ignoreregex,
            datepattern,
        })
    }
}

/// An absolute, normalized path: no `.` or `..` component, no empty one, no trailing `/`, and
/// only characters a file name of a log needs (letters, digits, `._-+@` and the globs `*?`);
/// nothing fail2ban would interpolate (`%`) or split on (white space).
pub fn check_log_path(path: &str) -> Result<(), String> {
    if path.len() > MAX_LOG_PATH_LEN {
        return Err(format!("must be at most {MAX_LOG_PATH_LEN} bytes"));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("{path:?} must be an absolute path (start with /)"));
    };
    if let Some(c) = path
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "/._-+@*?".contains(*c)))
    {
        return Err(format!(
            "{path:?} holds {c:?}; a log path may hold letters, digits, / . _ - + @ * ? only"
        ));
    }
    for component in rest.split('/') {
        match component {
            "" => return Err(format!("{path:?} is not normalized: an empty component")),
            "." | ".." => {
                return Err(format!(
                    "{path:?} is not normalized: {component:?} is not allowed"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A journal match as fail2ban's `journalmatch` takes it: `FIELD=value` terms separated by
/// single spaces, `+` between alternatives; fields upper case, values without white space.
pub fn check_journal_match(raw: &str) -> Result<(), String> {
    if raw.len() > MAX_JOURNAL_MATCH_LEN {
        return Err(format!("must be at most {MAX_JOURNAL_MATCH_LEN} bytes"));
    }
    let mut previous_plus = true;
    for term in raw.split(' ') {
        if term == "+" {
            if previous_plus {
                return Err(format!("{raw:?}: `+` must stand between two matches"));
            }
            previous_plus = true;
            continue;
        }
        let Some((field, value)) = term.split_once('=') else {
            return Err(format!(
                "{raw:?}: {term:?} is not FIELD=value (terms are separated by one space)"
            ));
        };
        let field_ok = !field.is_empty()
            && field
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        let value_ok = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-@:/".contains(c));
        if !field_ok || !value_ok {
            return Err(format!(
                "{raw:?}: {term:?} must be an upper-case field, `=`, and a value of letters, \
                 digits and . _ - @ : /"
            ));
        }
        previous_plus = false;
    }
    if previous_plus {
        return Err(format!("{raw:?} must end with a match"));
    }
    Ok(())
}

/// A port list as the actions take it: names or numbers, `,` between them, `:` for a range.
pub fn check_port(raw: &str) -> Result<(), String> {
    if raw.len() > MAX_PORT_LEN {
        return Err(format!("must be at most {MAX_PORT_LEN} bytes"));
    }
    let ok = raw.split(',').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':')
    });
    if !ok {
        return Err(format!(
            "{raw:?} must be port names or numbers separated by commas (a range as 1000:2000)"
        ));
    }
    Ok(())
}

/// One regular expression of a filter: one line, not empty, no control character, not read as a
/// comment by fail2ban's parser.
pub fn check_regex(raw: &str) -> Result<(), String> {
    let line = raw.trim();
    if line.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if raw.len() > MAX_REGEX_LEN {
        return Err(format!("must be at most {MAX_REGEX_LEN} bytes"));
    }
    if raw.chars().any(char::is_control) {
        return Err("must be one line without control characters".to_owned());
    }
    if line.starts_with('#') || line.starts_with(';') {
        return Err("must not start with # or ; (fail2ban reads it as a comment)".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jail() -> JailSettings {
        JailSettings {
            log_paths: vec!["/var/log/auth.log".to_owned()],
            journal_match: String::new(),
            backend: String::new(),
            maxretry: 5,
            findtime: 600,
            bantime: 3600,
            port: "ssh".to_owned(),
            enabled: true,
        }
    }

    fn refused_field(settings: JailSettings) -> Option<String> {
        settings.checked().err().map(|e| e.field)
    }

    #[test]
    fn log_paths_are_absolute_and_normalized() {
        for good in [
            "/var/log/auth.log",
            "/var/log/nginx/*error.log",
            "/tmp/banhub-f2b-x-Ab1/ssh.log",
        ] {
            assert_eq!(check_log_path(good), Ok(()), "{good}");
        }
        for bad in [
            "var/log/auth.log",
            "/var/log/../../etc/shadow",
            "/var/log/./auth.log",
            "/var//log",
            "/var/log/",
            "/var/log/a b",
            "/var/log/%(x)s",
            "/var/log/a\nb",
            "",
        ] {
            assert!(check_log_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_jail_reads_files_or_the_journal() {
        let checked = jail().checked().expect("valid");
        assert_eq!(checked.backend, "auto");
        let journal = JailSettings {
            log_paths: vec![],
            journal_match: "_SYSTEMD_UNIT=sshd.service + _COMM=sshd".to_owned(),
            ..jail()
        };
        assert_eq!(journal.checked().expect("valid").backend, "systemd");
        let both = JailSettings {
            journal_match: "_COMM=sshd".to_owned(),
            ..jail()
        };
        assert_eq!(refused_field(both).as_deref(), Some("journalMatch"));
        let neither = JailSettings {
            log_paths: vec![],
            ..jail()
        };
        assert_eq!(refused_field(neither).as_deref(), Some("logPaths"));
        let files_on_systemd = JailSettings {
            backend: "systemd".to_owned(),
            ..jail()
        };
        assert_eq!(refused_field(files_on_systemd).as_deref(), Some("backend"));
        for bad in [
            "_COMM",
            "comm=sshd",
            "+ _COMM=sshd",
            "_COMM=sshd +",
            "A=b  C=d",
        ] {
            assert!(check_journal_match(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn numbers_stay_in_range() {
        let check = |settings: JailSettings, field: Option<&str>| {
            assert_eq!(refused_field(settings).as_deref(), field);
        };
        check(
            JailSettings {
                maxretry: 0,
                ..jail()
            },
            Some("maxretry"),
        );
        check(
            JailSettings {
                findtime: 0,
                ..jail()
            },
            Some("findtime"),
        );
        check(
            JailSettings {
                bantime: -1,
                ..jail()
            },
            None,
        );
        check(
            JailSettings {
                bantime: 0,
                ..jail()
            },
            Some("bantime"),
        );
        check(
            JailSettings {
                port: "22;rm".to_owned(),
                ..jail()
            },
            Some("port"),
        );
        check(
            JailSettings {
                log_paths: vec!["/var/log/a".to_owned(); MAX_LOG_PATHS + 1],
                ..jail()
            },
            Some("logPaths"),
        );
        check(
            JailSettings {
                log_paths: vec!["/var/log/a".to_owned(), "relative".to_owned()],
                ..jail()
            },
            Some("logPaths[1]"),
        );
    }

    #[test]
    fn filter_lines_are_single_lines() {
        let lines = |failregex: Vec<&str>| FilterLines {
            failregex: failregex.into_iter().map(str::to_owned).collect(),
            ignoreregex: vec![],
            datepattern: String::new(),
        };
        let checked = lines(vec!["  ^Failed from <HOST>$ "])
            .checked()
            .expect("valid");
        assert_eq!(checked.failregex, vec!["^Failed from <HOST>$"]);
        for bad in [vec![], vec![""], vec!["a\nb"], vec!["# comment"]] {
            assert!(lines(bad.clone()).checked().is_err(), "{bad:?} accepted");
        }
    }
}
