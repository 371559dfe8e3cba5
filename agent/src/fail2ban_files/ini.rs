//! fail2ban's INI dialect, read exactly as Python's `configparser` reads it for fail2ban 1.0
//! (`strict`, `=` and `:` as delimiters, `#`/`;` full-line comments, ` ;` inline comments,
//! indented continuation lines, lower-cased option names), and a line-preserving editor that sets
//! one option.
//!
//! The parser answers with the same verdicts as Python (a file Python refuses is refused here,
//! with the line), because the editor uses it to refuse bad content before fail2ban sees it and
//! the reader uses it to show what fail2ban will use.

use std::collections::{BTreeMap, HashSet};

/// The section whose options every other section inherits.
pub const DEFAULT_SECTION: &str = "DEFAULT";

/// One parsed file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IniFile {
    sections: Vec<IniSection>,
}

/// A section with its options in file order. A `[DEFAULT]` header that appears several times
/// is one section, as in Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniSection {
    pub name: String,
    /// 1-based line of the (first) header.
    pub line: usize,
    pub options: Vec<IniOption>,
}

/// One option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniOption {
    /// Lower-cased, as Python's `optionxform` makes it.
    pub key: String,
    /// The raw value (before `%(name)s` interpolation): continuation lines joined with `\n`,
    /// trailing blank lines dropped.
    pub value: String,
    /// 1-based line of `key = ...`.
    pub first_line: usize,
    /// 1-based line of the last continuation line that belongs to the value.
    pub last_line: usize,
}

/// Why a file cannot be read; the same cases make Python's `configparser` raise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct IniError {
    /// 1-based.
    pub line: usize,
    pub kind: IniErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IniErrorKind {
    #[error("an option before any [section] header: {0:?}")]
    MissingSectionHeader(String),
    #[error("neither a [section] header nor `name = value`: {0:?}")]
    NotAnOption(String),
    #[error("section [{0}] appears twice in this file")]
    DuplicateSection(String),
    #[error("option `{option}` appears twice in section [{section}]")]
    DuplicateOption { section: String, option: String },
    #[error("cannot set `{key}` here safely: {reason}")]
    CannotEdit { key: String, reason: String },
}

impl IniFile {
    /// Sections in order of first appearance, `[DEFAULT]` included.
    pub fn sections(&self) -> &[IniSection] {
        &self.sections
    }

    /// A section by its exact (case-sensitive) name.
    pub fn section(&self, name: &str) -> Option<&IniSection> {
        self.sections.iter().find(|s| s.name == name)
    }
}

impl IniSection {
    /// An option by its lower-case key.
    pub fn get(&self, key: &str) -> Option<&IniOption> {
        self.options.iter().find(|o| o.key == key)
    }
}

/// Splits text into lines the way Python's universal-newline reading does (`\n`, `\r\n` and
/// `\r` all end a line); each item keeps its terminator.
fn raw_lines(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..=i]);
                start = i + 1;
            }
            b'\r' => {
                let end = if bytes.get(i + 1) == Some(&b'\n') {
                    i + 1
                } else {
                    i
                };
                lines.push(&text[start..=end]);
                i = end;
                start = end + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

fn strip_terminator(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r'])
}

/// Byte index where a comment starts: the whole line for `#`/`;` first, else the first `;`
/// at the start of the line or after whitespace (Python's `inline_comment_prefixes = ";"`).
/// `#` is not an inline comment in fail2ban.
fn comment_start(line: &str) -> Option<usize> {
    let trimmed = line.trim();
    if trimmed.starts_with('#') || trimmed.starts_with(';') {
        return Some(0);
    }
    let mut previous: Option<char> = None;
    for (i, c) in line.char_indices() {
        if c == ';' && previous.is_none_or(char::is_whitespace) {
            return Some(i);
        }
        previous = Some(c);
    }
    None
}

/// Characters of indentation before the first non-whitespace character.
fn indent_of(line: &str) -> usize {
    line.chars().take_while(|c| c.is_whitespace()).count()
}

/// `[name]` as Python's `SECTCRE` (`\[(?P<header>.+)\]`, matched at the start) reads it:
/// everything up to the last `]`.
fn section_header(value: &str) -> Option<&str> {
    let rest = value.strip_prefix('[')?;
    let end = rest.rfind(']')?;
    let header = &rest[..end];
    (!header.is_empty()).then_some(header)
}

/// `name = value` or `name: value`, split at the first delimiter.
fn option_line(value: &str) -> Option<(&str, &str)> {
    let at = value.find(['=', ':'])?;
    Some((value[..at].trim_end(), value[at + 1..].trim()))
}

/// Parses one file.
pub fn parse(text: &str) -> Result<IniFile, IniError> {
    struct Pending {
        section: usize,
        option: usize,
        pieces: Vec<String>,
    }
    let mut file = IniFile::default();
    let mut added_sections: HashSet<String> = HashSet::new();
    let mut added_options: HashSet<(String, String)> = HashSet::new();
    let mut current: Option<usize> = None;
    let mut pending: Option<Pending> = None;
    let mut indent_level = 0usize;
    let mut finished: Vec<Pending> = Vec::new();
    let mut first_parse_error: Option<IniError> = None;

    for (index, raw) in raw_lines(text).into_iter().enumerate() {
        let lineno = index + 1;
        let line = strip_terminator(raw);
        let comment = comment_start(line);
        let value = line[..comment.unwrap_or(line.len())].trim();
        if value.is_empty() {
            // Python keeps blank lines inside a value (`empty_lines_in_values`), but not
            // comment lines; neither ends the value.
            if comment.is_none()
                && let Some(p) = pending.as_mut()
            {
                p.pieces.push(String::new());
            }
            continue;
        }
        let indent = indent_of(line);
        if let Some(p) = pending.as_mut()
            && indent > indent_level
        {
            p.pieces.push(value.to_owned());
            let section = &mut file.sections[p.section];
            section.options[p.option].last_line = lineno;
            continue;
        }
        indent_level = indent;
        if let Some(header) = section_header(value) {
            finished.extend(pending.take());
            let existing = file.sections.iter().position(|s| s.name == header);
            if header != DEFAULT_SECTION && !added_sections.insert(header.to_owned()) {
                return Err(IniError {
                    line: lineno,
                    kind: IniErrorKind::DuplicateSection(header.to_owned()),
                });
            }
            current = Some(existing.unwrap_or_else(|| {
                file.sections.push(IniSection {
                    name: header.to_owned(),
                    line: lineno,
                    options: Vec::new(),
                });
                file.sections.len() - 1
            }));
            continue;
        }
        let Some(section_index) = current else {
            return Err(IniError {
                line: lineno,
                kind: IniErrorKind::MissingSectionHeader(line.to_owned()),
            });
        };
        match option_line(value) {
            Some((name, option_value)) if !name.is_empty() => {
                finished.extend(pending.take());
                let key = name.to_lowercase();
                let section = &mut file.sections[section_index];
                if !added_options.insert((section.name.clone(), key.clone())) {
                    return Err(IniError {
                        line: lineno,
                        kind: IniErrorKind::DuplicateOption {
                            section: section.name.clone(),
                            option: key,
                        },
                    });
                }
                section.options.push(IniOption {
                    key,
                    value: String::new(),
                    first_line: lineno,
                    last_line: lineno,
                });
                pending = Some(Pending {
                    section: section_index,
                    option: section.options.len() - 1,
                    pieces: vec![option_value.to_owned()],
                });
            }
            _ => {
                // Python reports these together at the end of the file; the first is enough.
                // The line still ends the value before it (it is not a continuation).
                finished.extend(pending.take());
                first_parse_error.get_or_insert(IniError {
                    line: lineno,
                    kind: IniErrorKind::NotAnOption(line.to_owned()),
                });
            }
        }
    }
    finished.extend(pending.take());
    if let Some(error) = first_parse_error {
        return Err(error);
    }
    for p in finished {
        let joined = p.pieces.join("\n");
        file.sections[p.section].options[p.option].value = joined.trim_end().to_owned();
    }
    Ok(file)
}

/// Returns `text` with `key = value` in `[section]`, everything else byte for byte as it was:
/// an existing `key` (with its continuation lines) is replaced in place, else the option goes
/// right after the section header, else the section is appended. The result is parsed again
/// and must differ from the original in exactly that one option, so an unusual layout (for
/// example indented lines that would turn into continuation lines) is refused, never mangled.
pub fn set_option(text: &str, section: &str, key: &str, value: &str) -> Result<String, IniError> {
    let cannot = |reason: &str| IniError {
        line: 0,
        kind: IniErrorKind::CannotEdit {
            key: key.to_owned(),
            reason: reason.to_owned(),
        },
    };
    let key_ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
    let value_ok = !value.is_empty()
        && value.trim() == value
        && !value.contains(['\n', '\r', ';', '#', '%', '[', ']']);
    let section_ok = !section.is_empty()
        && section.trim() == section
        && !section.contains(['\n', '\r', '[', ']', ';', '#']);
    if !key_ok || !value_ok || !section_ok {
        return Err(cannot(
            "only a plain key and a one-line plain value can be set",
        ));
    }
    let before = parse(text)?;
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let lines = raw_lines(text);
    let mut out = String::with_capacity(text.len() + 64);
    match before.section(section) {
        Some(found) => {
            if let Some(option) = found.get(key) {
                let first = lines[option.first_line - 1];
                let indent: String = first.chars().take_while(|c| c.is_whitespace()).collect();
                for line in &lines[..option.first_line - 1] {
                    out.push_str(line);
                }
                out.push_str(&format!("{indent}{key} = {value}{newline}"));
                for line in &lines[option.last_line..] {
                    out.push_str(line);
                }
            } else {
                let header = lines[found.line - 1];
                // Indent like the section's first option, so that its lines stay options.
                let indent: String = found
                    .options
                    .first()
                    .map(|o| lines[o.first_line - 1])
                    .unwrap_or("")
                    .chars()
                    .take_while(|c| c.is_whitespace())
                    .collect();
                for line in &lines[..found.line - 1] {
                    out.push_str(line);
                }
                out.push_str(header);
                if !header.ends_with(['\n', '\r']) {
                    out.push_str(newline);
                }
                out.push_str(&format!("{indent}{key} = {value}{newline}"));
                for line in &lines[found.line..] {
                    out.push_str(line);
                }
            }
        }
        None => {
            out.push_str(text);
            if !text.is_empty() {
                if !text.ends_with(['\n', '\r']) {
                    out.push_str(newline);
                }
                out.push_str(newline);
            }
            out.push_str(&format!("[{section}]{newline}{key} = {value}{newline}"));
        }
    }
    let after = parse(&out)?;
    if flatten_except(&before, section, key) != flatten_except(&after, section, key)
        || after
            .section(section)
            .and_then(|s| s.get(key))
            .map(|o| o.value.as_str())
            != Some(value)
    {
        return Err(cannot(
            "the file's layout would change other options; edit it by hand",
        ));
    }
    Ok(out)
}

/// Every `(section, key) -> value` except one, for comparing two versions of a file.
fn flatten_except<'a>(
    file: &'a IniFile,
    section: &str,
    key: &str,
) -> BTreeMap<(&'a str, &'a str), &'a str> {
    file.sections
        .iter()
        .flat_map(|s| {
            s.options
                .iter()
                .map(move |o| ((s.name.as_str(), o.key.as_str()), o.value.as_str()))
        })
        .filter(|((s, k), _)| !(*s == section && *k == key))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `section.key=value` lines of a parsed file, for compact expectations.
    fn flat(text: &str) -> Result<Vec<String>, IniError> {
        let file = parse(text)?;
        Ok(file
            .sections()
            .iter()
            .flat_map(|s| {
                s.options
                    .iter()
                    .map(move |o| format!("{}.{}={}", s.name, o.key, o.value))
            })
            .collect())
    }

    fn check(text: &str, expected: &[&str]) {
        assert_eq!(
            flat(text),
            Ok(expected.iter().map(|s| (*s).to_owned()).collect()),
            "input {text:?}"
        );
    }

    fn check_err(text: &str, line: usize, kind: IniErrorKind) {
        assert_eq!(flat(text), Err(IniError { line, kind }), "input {text:?}");
    }

    #[test]
    fn values_comments_and_continuations() {
        check("[a]\nx = 1\n", &["a.x=1"]);
        check("[a]\nX_Y = 1\n", &["a.x_y=1"]);
        check("[a]\nx: 1\n", &["a.x=1"]);
        check("[a]\nx=\n", &["a.x="]);
        check("[a]\nx = a = b\n", &["a.x=a = b"]);
        check("[a]\nx = a:b\n", &["a.x=a:b"]);
        check("[a]\nurl: http://h\n", &["a.url=http://h"]);
        // `;` after whitespace starts a comment, `#` inside a value does not.
        check("[a]\nx = a#b;c ;d\n", &["a.x=a#b;c"]);
        check("[a]\nx = 1\t; note\n", &["a.x=1"]);
        check("# c\n; c\n[a]\n  # c\nx = 1\n", &["a.x=1"]);
        // Continuation lines are more indented than the option; blank lines inside stay,
        // comment lines vanish, trailing blank lines are dropped.
        check(
            "[a]\nx = l1\n  l2\n\n  ; c\n  # c\n  l3 ; c\n\ny = 2\n",
            &["a.x=l1\nl2\n\nl3", "a.y=2"],
        );
        check("[a]\nx =\n  l1\n  l2\n", &["a.x=\nl1\nl2"]);
        // An indented `[b]` after an option is part of its value, not a section.
        check("[a]\nx = 1\n  [b]\n", &["a.x=1\n[b]"]);
        // Indented options: only deeper lines continue them.
        check("[a]\n  x = 1\n  y = 2\n    z\n", &["a.x=1", "a.y=2\nz"]);
        check("[a]\r\nx = 1\r\n  2\r\ny = 3", &["a.x=1\n2", "a.y=3"]);
        check("[a]\rx = 1\r", &["a.x=1"]);
    }

    #[test]
    fn sections_and_defaults() {
        check(
            "[DEFAULT]\na = 1\n[s]\nb = 2\n[DEFAULT]\nc = 3\n",
            &["DEFAULT.a=1", "DEFAULT.c=3", "s.b=2"],
        );
        check("[a b]\nx = 1\n", &["a b.x=1"]);
        check("[a] trailing\nx = 1\n", &["a.x=1"]);
        check("[a]b]\nx = 1\n", &["a]b.x=1"]);
        check("[x] = 3\n", &[]);
        check("", &[]);
        check("# only a comment\n", &[]);
    }

    #[test]
    fn python_refuses_these() {
        check_err(
            "x = 1\n",
            1,
            IniErrorKind::MissingSectionHeader("x = 1".to_owned()),
        );
        check_err("[a]\nfoo\n", 2, IniErrorKind::NotAnOption("foo".to_owned()));
        check_err("[a]\n= 1\n", 2, IniErrorKind::NotAnOption("= 1".to_owned()));
        check_err(
            "[]\n",
            1,
            IniErrorKind::MissingSectionHeader("[]".to_owned()),
        );
        check_err(
            "[a]\nx = 1\n[a]\n",
            3,
            IniErrorKind::DuplicateSection("a".to_owned()),
        );
        check_err(
            "[a]\nx = 1\nX = 2\n",
            3,
            IniErrorKind::DuplicateOption {
                section: "a".to_owned(),
                option: "x".to_owned(),
            },
        );
        check_err(
            "[DEFAULT]\nx = 1\n[DEFAULT]\nx = 2\n",
            4,
            IniErrorKind::DuplicateOption {
                section: "DEFAULT".to_owned(),
                option: "x".to_owned(),
            },
        );
        // A bad line is reported even when a later line is fine.
        check_err(
            "[a]\nx = 1\nbad\ny = 2\n",
            3,
            IniErrorKind::NotAnOption("bad".to_owned()),
        );
    }

    #[test]
    fn option_spans_cover_continuations() {
        let file = parse("[a]\nx = 1\n  2\n\n# c\ny = 3\n").expect("parses");
        let a = file.section("a").expect("a");
        let x = a.get("x").expect("x");
        assert_eq!((x.first_line, x.last_line), (2, 3));
        let y = a.get("y").expect("y");
        assert_eq!((y.first_line, y.last_line), (6, 6));
    }

    fn edit(text: &str, expected: &str) {
        assert_eq!(
            set_option(text, "sshd", "enabled", "true").as_deref(),
            Ok(expected),
            "input {text:?}"
        );
    }

    #[test]
    fn set_option_preserves_everything_else() {
        edit("", "[sshd]\nenabled = true\n");
        edit("# mine\n", "# mine\n\n[sshd]\nenabled = true\n");
        edit(
            "[other]\nx = 1",
            "[other]\nx = 1\n\n[sshd]\nenabled = true\n",
        );
        edit("[sshd]\n", "[sshd]\nenabled = true\n");
        edit("[sshd]", "[sshd]\nenabled = true\n");
        edit(
            "[sshd]\nport = 22 ; mine\n",
            "[sshd]\nenabled = true\nport = 22 ; mine\n",
        );
        edit(
            "# head\n[sshd]\nenabled = false ; old\nport = 22\n",
            "# head\n[sshd]\nenabled = true\nport = 22\n",
        );
        edit(
            "[sshd]\nEnabled: no\n  yes\nport = 22\n",
            "[sshd]\nenabled = true\nport = 22\n",
        );
        edit(
            "[sshd]\n  port = 22\n  maxretry = 2\n",
            "[sshd]\n  enabled = true\n  port = 22\n  maxretry = 2\n",
        );
        edit(
            "[sshd]\r\nport = 22\r\n",
            "[sshd]\r\nenabled = true\r\nport = 22\r\n",
        );
    }

    #[test]
    fn set_option_refuses_injection_and_bad_files() {
        for (section, key, value) in [
            ("sshd", "enabled", "true\n[x]"),
            ("sshd", "enabled", "true ; x"),
            ("sshd", "enabled", " true"),
            ("sshd", "enabled", "%(x)s"),
            ("sshd", "en abled", "true"),
            ("sshd", "Enabled", "true"),
            ("sshd", "", "true"),
            ("ss]hd\n[x", "enabled", "true"),
        ] {
            let err = set_option("", section, key, value).expect_err("refused");
            assert!(
                matches!(err.kind, IniErrorKind::CannotEdit { .. }),
                "{section:?} {key:?} {value:?}: {err}"
            );
        }
        assert_eq!(
            set_option("[sshd]\nbad\n", "sshd", "enabled", "true"),
            Err(IniError {
                line: 2,
                kind: IniErrorKind::NotAnOption("bad".to_owned())
            })
        );
    }
}
