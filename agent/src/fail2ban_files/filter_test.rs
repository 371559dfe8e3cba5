//! Filter tests: `fail2ban-regex` on given log lines with an installed filter, an edited
//! `.local` for it, or a whole filter text, parsed into matched lines, addresses and per-regex
//! hit counts.
//!
//! Nothing is written into the live config directory: the test runs in a scratch directory
//! whose `filter.d/` links to the live filters (so `[INCLUDES]` like `common.conf` resolve) and
//! holds the filter under test as `banhub-test.conf`/`.local`. A fixed alias is used because
//! `fail2ban-regex` takes an argument it cannot read as a plain path (`[\w/_\-.]+`) for a
//! regular expression, which would silently test the wrong thing.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::content;
use super::error::ConfigError;
use super::names::FilterName;
use super::staging::FILTER_TEST_PREFIX;
use super::tools::{Fail2banTools, ToolError};

/// Most log lines one test takes.
pub const MAX_TEST_LINES: usize = 5_000;
/// Longest log line.
pub const MAX_TEST_LINE_BYTES: usize = 8 * 1024;
/// Most bytes of log lines in one test.
pub const MAX_TEST_BYTES: usize = 1 << 20;
/// The stem the filter under test gets in the scratch directory.
const ALIAS: &str = "banhub-test";

/// The filter to test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterSource {
    /// `filter.d/<name>.conf` and `.local` as installed.
    Installed(FilterName),
    /// The installed filter as it would be if `filter.d/<name>.local` held `local` (what
    /// writing that filter would produce).
    Edited { name: FilterName, local: String },
    /// A whole filter file of its own (it may include installed files like `common.conf`).
    Text(String),
}

/// What `fail2ban-regex` found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilterTestReport {
    /// Lines a failregex matched (and no ignoreregex), with their index in the request.
    pub matched: Vec<MatchedLine>,
    /// Indexes of lines an ignoreregex matched.
    pub ignored: Vec<usize>,
    /// Indexes of lines no failregex matched.
    pub missed: Vec<usize>,
    /// Indexes of lines `fail2ban-regex` skips: empty, or starting with `#`.
    pub skipped: Vec<usize>,
    /// Addresses found, in order of first appearance, each once.
    pub ips: Vec<IpAddr>,
    /// Failure ids that are not addresses (host names, `<F-ID>` values), each once.
    pub other_ids: Vec<String>,
    /// Each failregex in the filter's order with its hits.
    pub failregex: Vec<RegexHits>,
    /// Each ignoreregex with its hits.
    pub ignoreregex: Vec<RegexHits>,
    /// fail2ban-regex's own line counts.
    pub counts: LineCounts,
}

/// A matched line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedLine {
    pub index: usize,
    pub line: String,
}

/// A regular expression and how many lines it matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexHits {
    pub regex: String,
    pub hits: u64,
}

/// `Lines: N lines, I ignored, M matched, X missed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineCounts {
    pub lines: u64,
    pub ignored: u64,
    pub matched: u64,
    pub missed: u64,
}

/// Why a filter test did not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum FilterTestError {
    #[error("at most {limit} log lines can be tested at once")]
    TooManyLines { limit: usize },
    #[error("at most {limit} bytes of log lines can be tested at once")]
    TooLarge { limit: usize },
    #[error("log line {index} is refused: {reason}")]
    BadLine { index: usize, reason: String },
    #[error("filter {0} does not exist (no filter.d/{0}.conf or .local)")]
    UnknownFilter(FilterName),
    #[error("the filter text is refused: {0}")]
    BadFilter(String),
    #[error("fail2ban-regex refused the filter:\n{}", messages.join("\n"))]
    Rejected { messages: Vec<String> },
    #[error(
        "the filter test did not finish within {after:?} and was stopped; a regular expression \
         that backtracks catastrophically (like `(a+)+`) on these lines does this: simplify it"
    )]
    TimedOut { after: std::time::Duration },
    #[error("fail2ban-regex printed something this agent cannot read: {0}")]
    UnexpectedOutput(String),
    #[error("scratch files for the filter test: {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FilterTestError + '_ {
    move |source| FilterTestError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Checks the request's lines: count, size, one line each (no line breaks, no NUL).
fn check_lines(lines: &[String]) -> Result<(), FilterTestError> {
    if lines.len() > MAX_TEST_LINES {
        return Err(FilterTestError::TooManyLines {
            limit: MAX_TEST_LINES,
        });
    }
    let mut total = 0usize;
    for (index, line) in lines.iter().enumerate() {
        let bad = |reason: &str| FilterTestError::BadLine {
            index,
            reason: reason.to_owned(),
        };
        if line.len() > MAX_TEST_LINE_BYTES {
            return Err(bad(&format!("longer than {MAX_TEST_LINE_BYTES} bytes")));
        }
        if line.contains(['\n', '\r']) {
            return Err(bad("it contains a line break; send one line per entry"));
        }
        if line.contains('\0') {
            return Err(bad("it contains a NUL byte"));
        }
        total += line.len() + 1;
    }
    if total > MAX_TEST_BYTES {
        return Err(FilterTestError::TooLarge {
            limit: MAX_TEST_BYTES,
        });
    }
    Ok(())
}

/// A scratch directory with `filter.d/` mirroring `config_dir/filter.d` and the filter under
/// test as `banhub-test.*`; `arg` is what to pass to `fail2ban-regex` (relative to `dir`).
pub(crate) struct PreparedFilter {
    pub dir: tempfile::TempDir,
    pub arg: String,
}

/// Builds the scratch directory (blocking I/O).
pub(crate) fn prepare(
    config_dir: &Path,
    parent: &Path,
    source: &FilterSource,
    max_filter_bytes: usize,
) -> Result<PreparedFilter, FilterTestError> {
    match source {
        FilterSource::Edited { local: text, .. } | FilterSource::Text(text) => {
            content::check_text(text, max_filter_bytes).map_err(FilterTestError::BadFilter)?;
            content::check_filter(text).map_err(FilterTestError::BadFilter)?;
        }
        FilterSource::Installed(_) => {}
    }
    let live = config_dir.join("filter.d");
    let dir = tempfile::Builder::new()
        .prefix(FILTER_TEST_PREFIX)
        .tempdir_in(parent)
        .map_err(io(parent))?;
    let filters = dir.path().join("filter.d");
    std::fs::create_dir(&filters).map_err(io(&filters))?;
    if let Ok(entries) = std::fs::read_dir(&live) {
        for entry in entries {
            let entry = entry.map_err(io(&live))?;
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if text.starts_with('.') || text.starts_with(ALIAS) {
                continue;
            }
            let link = filters.join(&name);
            std::os::unix::fs::symlink(entry.path(), &link).map_err(io(&link))?;
        }
    }
    let link_if_exists = |from: PathBuf, alias: &str| -> Result<bool, FilterTestError> {
        if from.exists() {
            let link = filters.join(alias);
            std::os::unix::fs::symlink(&from, &link).map_err(io(&link))?;
            Ok(true)
        } else {
            Ok(false)
        }
    };
    let write = |alias: &str, text: &str| -> Result<(), FilterTestError> {
        let path = filters.join(alias);
        std::fs::write(&path, text).map_err(io(&path))
    };
    let alias_conf = format!("{ALIAS}.conf");
    let alias_local = format!("{ALIAS}.local");
    let has_conf = match source {
        FilterSource::Installed(name) => {
            link_if_exists(live.join(format!("{name}.d")), &format!("{ALIAS}.d"))?;
            let conf = link_if_exists(live.join(format!("{name}.conf")), &alias_conf)?;
            let local = link_if_exists(live.join(format!("{name}.local")), &alias_local)?;
            if !conf && !local {
                return Err(FilterTestError::UnknownFilter(name.clone()));
            }
            conf
        }
        FilterSource::Edited { name, local } => {
            link_if_exists(live.join(format!("{name}.d")), &format!("{ALIAS}.d"))?;
            let conf = link_if_exists(live.join(format!("{name}.conf")), &alias_conf)?;
            write(&alias_local, local)?;
            conf
        }
        FilterSource::Text(text) => {
            write(&alias_conf, text)?;
            true
        }
    };
    let arg = format!(
        "./filter.d/{}",
        if has_conf { alias_conf } else { alias_local }
    );
    Ok(PreparedFilter { dir, arg })
}

/// How the filter under test is named in messages instead of the alias.
pub(crate) fn display_name(source: &FilterSource) -> String {
    match source {
        FilterSource::Installed(name) | FilterSource::Edited { name, .. } => {
            format!("filter.d/{name}")
        }
        FilterSource::Text(_) => "(the filter text)".to_owned(),
    }
}

/// The messages of a run that failed: `ERROR: ...` and `Wrong config file: ...` with their
/// continuation lines, and the last line of a Python traceback.
pub(crate) fn regex_messages(stdout: &str, stderr: &str, alias_as: &str) -> Vec<String> {
    let mut messages: Vec<String> = Vec::new();
    let mut in_message = false;
    for line in stdout.lines() {
        if line.starts_with("ERROR") || line.starts_with("Wrong config file") {
            messages.push(line.trim_end().to_owned());
            in_message = true;
        } else if in_message && !line.trim().is_empty() && !line.starts_with("Use ") {
            if let Some(last) = messages.last_mut() {
                last.push('\n');
                last.push_str(line.trim_end());
            }
        } else {
            in_message = false;
        }
    }
    if let Some(last) = stderr.lines().rev().find(|l| !l.trim().is_empty())
        && !last.starts_with(' ')
    {
        messages.push(last.trim_end().to_owned());
    }
    if messages.is_empty() {
        messages.push("fail2ban-regex failed without a message".to_owned());
    }
    let alias_path = format!("./filter.d/{ALIAS}");
    messages
        .into_iter()
        .map(|m| m.replace(&alias_path, alias_as).replace(ALIAS, alias_as))
        .collect()
}

/// Runs `fail2ban-regex` on `lines` with the filter `source` from `config_dir`, using scratch
/// space under `work_dir`.
pub async fn test_filter(
    tools: &Fail2banTools,
    config_dir: &Path,
    work_dir: &Path,
    source: &FilterSource,
    lines: &[String],
) -> Result<FilterTestReport, FilterTestError> {
    check_lines(lines)?;
    let (config_dir, work_dir, owned_source) =
        (config_dir.to_owned(), work_dir.to_owned(), source.clone());
    let lines_text = lines.iter().fold(String::new(), |mut text, line| {
        text.push_str(line);
        text.push('\n');
        text
    });
    let prepared = tokio::task::spawn_blocking(move || {
        let prepared = prepare(
            &config_dir,
            &work_dir,
            &owned_source,
            content::DEFAULT_MAX_FILE_BYTES,
        )?;
        let log = prepared.dir.path().join("lines.log");
        std::fs::write(&log, lines_text).map_err(io(&log))?;
        Ok::<_, FilterTestError>(prepared)
    })
    .await
    .map_err(|e| FilterTestError::Io {
        path: PathBuf::from("(filter test)"),
        source: std::io::Error::other(e),
    })??;
    let args: Vec<OsString> = [
        "-c",
        ".",
        "-e",
        "UTF-8",
        // Raw hosts: never resolve names found in the lines.
        "-r",
        // Lists the failure id under each regex.
        "-v",
        "--print-all-matched",
        "--print-all-missed",
        "--print-all-ignored",
        "./lines.log",
        &prepared.arg,
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let output = tools
        .regex(&args, prepared.dir.path(), tools.filter_test_timeout)
        .await
        .map_err(|e| match e {
            ToolError::Timeout { after, .. } => FilterTestError::TimedOut { after },
            e => FilterTestError::Tool(e),
        })?;
    if !output.success() {
        return Err(FilterTestError::Rejected {
            messages: regex_messages(&output.stdout, &output.stderr, &display_name(source)),
        });
    }
    parse_report(&output.stdout, lines).map_err(FilterTestError::UnexpectedOutput)
}

/// Compiles a filter (with `options`, e.g. `mode=aggressive`) by running `fail2ban-regex` on
/// no lines; `Err` holds fail2ban's messages. `fail2ban-client -t` does not compile regular
/// expressions, and a reload that fails on one stops every jail until the next reload.
pub(crate) async fn compile_check(
    tools: &Fail2banTools,
    config_dir: &Path,
    work_dir: &Path,
    filter: &FilterName,
    options: Option<&str>,
) -> Result<(), Vec<String>> {
    let source = FilterSource::Installed(filter.clone());
    let (dir, parent, owned) = (config_dir.to_owned(), work_dir.to_owned(), source.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        let prepared = prepare(&dir, &parent, &owned, usize::MAX)?;
        let log = prepared.dir.path().join("lines.log");
        std::fs::write(&log, "").map_err(io(&log))?;
        Ok::<_, FilterTestError>(prepared)
    })
    .await
    .map_err(|e| vec![e.to_string()])?
    .map_err(|e| vec![e.to_string()])?;
    let arg = match options {
        Some(options) => format!("{}[{options}]", prepared.arg),
        None => prepared.arg.clone(),
    };
    let args: Vec<OsString> = ["-c", ".", "-e", "UTF-8", "-r", "./lines.log", &arg]
        .iter()
        .map(OsString::from)
        .collect();
    let output = tools
        .regex(&args, prepared.dir.path(), tools.timeout)
        .await
        .map_err(|e| vec![e.to_string()])?;
    if output.success() {
        Ok(())
    } else {
        Err(regex_messages(
            &output.stdout,
            &output.stderr,
            &display_name(&source),
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Fail,
    Ignore,
    Other,
    Matched,
    Ignored,
    Missed,
}

/// Reads the report `fail2ban-regex -v --print-all-*` prints.
fn parse_report(stdout: &str, lines: &[String]) -> Result<FilterTestReport, String> {
    let mut report = FilterTestReport::default();
    let (mut matched, mut ignored, mut missed) = (Vec::new(), Vec::new(), Vec::new());
    let mut ids: Vec<String> = Vec::new();
    let mut block = Block::None;
    let mut saw_counts = false;
    let body = stdout
        .split_once("\nResults\n=======\n")
        .map(|(_, body)| body)
        .ok_or("no Results section")?;
    for line in body.lines() {
        if let Some(item) = line.strip_prefix("|  ") {
            match block {
                Block::Fail | Block::Ignore => {
                    let list = if block == Block::Fail {
                        &mut report.failregex
                    } else {
                        &mut report.ignoreregex
                    };
                    if let Some(id_line) = item.strip_prefix("    ") {
                        // `    <id>  <time>[ (multiple regex matched)]`
                        let id = id_line.split("  ").next().unwrap_or(id_line).trim();
                        if block == Block::Fail && !id.is_empty() {
                            ids.push(id.to_owned());
                        }
                    } else {
                        list.push(regex_line(item)?);
                    }
                }
                Block::Matched => matched.push(item.to_owned()),
                Block::Ignored => ignored.push(item.to_owned()),
                Block::Missed => missed.push(item.to_owned()),
                Block::None | Block::Other => {}
            }
            continue;
        }
        if line == "`-" {
            block = Block::None;
        } else if line.starts_with("Failregex: ") {
            block = Block::Fail;
        } else if line.starts_with("Ignoreregex: ") {
            block = Block::Ignore;
        } else if line.starts_with("Prefregex: ") || line.starts_with("Date template hits:") {
            block = Block::Other;
        } else if line == "|- Matched line(s):" {
            block = Block::Matched;
        } else if line == "|- Ignored line(s):" {
            block = Block::Ignored;
        } else if line == "|- Missed line(s):" {
            block = Block::Missed;
        } else if let Some(counts) = line.strip_prefix("Lines: ") {
            report.counts = line_counts(counts)?;
            saw_counts = true;
        } else if !line.starts_with("|- ") && !line.is_empty() {
            // A multi-line match prints the rest of its lines without the prefix.
            let target = match block {
                Block::Matched => matched.last_mut(),
                Block::Ignored => ignored.last_mut(),
                Block::Missed => missed.last_mut(),
                _ => None,
            };
            if let Some(last) = target {
                last.push('\n');
                last.push_str(line);
            }
        }
    }
    if !saw_counts {
        return Err("no `Lines:` summary".to_owned());
    }
    // Tested lines are those fail2ban-regex does not skip; each printed list is in their order.
    let tested: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| (i, l.trim_end()))
        .collect();
    report.skipped = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_empty() || l.starts_with('#'))
        .map(|(i, _)| i)
        .collect();
    report.matched = locate(&tested, &matched)
        .into_iter()
        .map(|index| MatchedLine {
            index,
            line: lines[index].clone(),
        })
        .collect();
    report.ignored = locate(&tested, &ignored);
    report.missed = locate(&tested, &missed);
    let mut seen = BTreeSet::new();
    for id in ids {
        if !seen.insert(id.clone()) {
            continue;
        }
        match id.parse::<IpAddr>() {
            Ok(ip) => report.ips.push(ip),
            Err(_) => report.other_ids.push(id),
        }
    }
    Ok(report)
}

/// ` 1) [3] ^\s*Failed login ...`.
fn regex_line(item: &str) -> Result<RegexHits, String> {
    let bad = || format!("unexpected regex line {item:?}");
    let (_, rest) = item.split_once(") [").ok_or_else(bad)?;
    let (hits, regex) = rest.split_once("] ").ok_or_else(bad)?;
    Ok(RegexHits {
        regex: regex.to_owned(),
        hits: hits.parse().map_err(|_| bad())?,
    })
}

/// `5 lines, 0 ignored, 3 matched, 2 missed`.
fn line_counts(text: &str) -> Result<LineCounts, String> {
    let numbers: Vec<u64> = text
        .split(", ")
        .map(|part| part.split(' ').next().and_then(|n| n.parse().ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("unexpected line counts {text:?}"))?;
    match numbers[..] {
        [lines, ignored, matched, missed] => Ok(LineCounts {
            lines,
            ignored,
            matched,
            missed,
        }),
        _ => Err(format!("unexpected line counts {text:?}")),
    }
}

/// The request indexes of printed lines, in order: each printed line (or each line of a
/// multi-line match) is the next tested line with the same text (fail2ban-regex strips trailing
/// white space when printing).
fn locate(tested: &[(usize, &str)], printed: &[String]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut next = 0;
    for item in printed {
        for part in item.split('\n') {
            if let Some(offset) = tested[next..]
                .iter()
                .position(|(_, l)| *l == part.trim_end())
            {
                found.push(tested[next + offset].0);
                next += offset + 1;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: [&str; 7] = [
        "2026-11-22 10:00:00 Failed login for bob from 192.0.2.1",
        "2026-11-22 10:00:01 Accepted login for bob from 192.0.2.1",
        "# a comment",
        "2026-11-22 10:00:02 Failed login for eve from 2001:db8::7",
        "garbage line   ",
        "",
        "2026-11-22 10:00:03 Failed login for root from 192.0.2.1",
    ];

    /// Captured from `fail2ban-regex -v --print-all-matched --print-all-missed` (1.0.2) on
    /// [`LINES`], with one ignoreregex added to the filter.
    const OUTPUT: &str = "
Running tests
=============

Use   failregex filter file : banhub-test, basedir: .
Use      datepattern : {^LN-BEG}%Y-%m-%d %H:%M:%S : {^LN-BEG}Year-Month-Day 24hour:Minute:Second
Use         log file : ./lines.log
Use         encoding : UTF-8


Results
=======

Failregex: 3 total
|-  #) [# of hits] regular expression
|   1) [3] ^\\s*Failed login for \\S+ from <HOST>$
|      192.0.2.1  Sun Nov 22 10:00:00 2026
|      2001:db8::7  Sun Nov 22 10:00:02 2026
|      192.0.2.1  Sun Nov 22 10:00:03 2026
|   2) [0] ^never <HOST>$
`-

Ignoreregex: 0 total
|-  #) [# of hits] regular expression
|   1) [0] ^ignored$
`-

Date template hits:
|- [# of hits] date format
|  [4] {^LN-BEG}Year-Month-Day 24hour:Minute:Second
`-

Lines: 5 lines, 0 ignored, 3 matched, 2 missed
[processed in 0.00 sec]

|- Matched line(s):
|  2026-11-22 10:00:00 Failed login for bob from 192.0.2.1
|  2026-11-22 10:00:02 Failed login for eve from 2001:db8::7
|  2026-11-22 10:00:03 Failed login for root from 192.0.2.1
`-
|- Missed line(s):
|  2026-11-22 10:00:01 Accepted login for bob from 192.0.2.1
|  garbage line
`-
";

    fn lines() -> Vec<String> {
        LINES.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn report_is_read_from_the_verbose_output() {
        let report = parse_report(OUTPUT, &lines()).expect("parses");
        assert_eq!(
            report.matched.iter().map(|m| m.index).collect::<Vec<_>>(),
            [0, 3, 6]
        );
        assert_eq!(report.matched[1].line, LINES[3]);
        assert_eq!(report.missed, [1, 4]);
        assert_eq!(report.ignored, Vec::<usize>::new());
        assert_eq!(report.skipped, [2, 5]);
        let ips: Vec<String> = report.ips.iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["192.0.2.1", "2001:db8::7"]);
        assert!(report.other_ids.is_empty());
        assert_eq!(
            report.failregex,
            [
                RegexHits {
                    regex: "^\\s*Failed login for \\S+ from <HOST>$".to_owned(),
                    hits: 3
                },
                RegexHits {
                    regex: "^never <HOST>$".to_owned(),
                    hits: 0
                },
            ]
        );
        assert_eq!(report.ignoreregex.len(), 1);
        assert_eq!(
            report.counts,
            LineCounts {
                lines: 5,
                ignored: 0,
                matched: 3,
                missed: 2
            }
        );
    }

    #[test]
    fn log_lines_that_look_like_report_syntax_stay_lines() {
        let tricky = vec![
            "`-".to_owned(),
            "|- Matched line(s):".to_owned(),
            "Lines: 9 lines, 9 ignored, 9 matched, 9 missed".to_owned(),
        ];
        let output = "\nResults\n=======\n\nFailregex: 0 total\n\nIgnoreregex: 0 total\n\n\
                      Lines: 3 lines, 0 ignored, 0 matched, 3 missed\n\n|- Missed line(s):\n\
                      |  `-\n|  |- Matched line(s):\n\
                      |  Lines: 9 lines, 9 ignored, 9 matched, 9 missed\n`-\n";
        let report = parse_report(output, &tricky).expect("parses");
        assert_eq!(report.missed, [0, 1, 2]);
        assert_eq!(report.counts.lines, 3);
        assert!(report.matched.is_empty());
    }

    #[test]
    fn unreadable_output_is_an_error() {
        assert!(parse_report("nothing", &[]).is_err());
        assert!(parse_report("\nResults\n=======\n", &[]).is_err());
        assert!(regex_line("junk").is_err());
        assert!(line_counts("5 lines, 0 ignored").is_err());
    }

    #[test]
    fn lines_are_checked() {
        let ok = vec!["a".to_owned(); 3];
        assert!(check_lines(&ok).is_ok());
        let many = vec![String::new(); MAX_TEST_LINES + 1];
        assert!(matches!(
            check_lines(&many),
            Err(FilterTestError::TooManyLines { .. })
        ));
        for bad in ["a\nb", "a\rb", "a\0b", &"x".repeat(MAX_TEST_LINE_BYTES + 1)] {
            let err = check_lines(&["ok".to_owned(), bad.to_owned()]).expect_err("bad");
            assert!(
                matches!(err, FilterTestError::BadLine { index: 1, .. }),
                "{err}"
            );
        }
        let big = vec!["x".repeat(MAX_TEST_LINE_BYTES); MAX_TEST_BYTES / MAX_TEST_LINE_BYTES + 1];
        assert!(matches!(
            check_lines(&big),
            Err(FilterTestError::TooLarge { .. })
        ));
    }

    #[test]
    fn failure_messages_name_the_filter() {
        let stdout = "\nRunning tests\n=============\n\n\
                      Use   failregex filter file : banhub-test, basedir: .\n\
                      Wrong config file: Source contains parsing errors: './filter.d/banhub-test.conf'\n\
                      \t[line  3]: '^y\\n'\n\
                      ERROR: failed to load filter ./filter.d/banhub-test.conf\n";
        assert_eq!(
            regex_messages(stdout, "", "filter.d/mine"),
            [
                "Wrong config file: Source contains parsing errors: 'filter.d/mine.conf'\n\t[line  3]: '^y\\n'",
                "ERROR: failed to load filter filter.d/mine.conf",
            ]
        );
        let traceback = "Traceback (most recent call last):\n  File \"x\"\nconfigparser.InterpolationMissingOptionError: Bad value\n";
        assert_eq!(
            regex_messages("", traceback, "x"),
            ["configparser.InterpolationMissingOptionError: Bad value"]
        );
    }

    #[test]
    fn scratch_dir_links_filters_and_hides_the_live_dir() {
        let live = tempfile::tempdir().expect("live");
        let fd = live.path().join("filter.d");
        std::fs::create_dir(&fd).expect("mkdir");
        std::fs::write(fd.join("common.conf"), "[DEFAULT]\n").expect("write");
        std::fs::write(fd.join("sshd.conf"), "[Definition]\nfailregex = a <HOST>\n")
            .expect("write");
        let work = tempfile::tempdir().expect("work");
        let sshd = FilterName::parse("sshd").expect("name");

        let installed = prepare(
            live.path(),
            work.path(),
            &FilterSource::Installed(sshd.clone()),
            1024,
        )
        .expect("prepare");
        assert_eq!(installed.arg, "./filter.d/banhub-test.conf");
        let scratch = installed.dir.path().join("filter.d");
        assert!(scratch.join("common.conf").exists());
        assert_eq!(
            std::fs::read_link(scratch.join("banhub-test.conf")).expect("link"),
            fd.join("sshd.conf")
        );

        let edited = FilterSource::Edited {
            name: sshd,
            local: "[Definition]\nfailregex = b <HOST>\n".to_owned(),
        };
        let prepared = prepare(live.path(), work.path(), &edited, 1024).expect("prepare");
        let local = prepared.dir.path().join("filter.d/banhub-test.local");
        assert_eq!(
            std::fs::read_to_string(local).expect("local"),
            "[Definition]\nfailregex = b <HOST>\n"
        );
        assert!(!fd.join("sshd.local").exists(), "the live dir is untouched");

        let missing = FilterSource::Installed(FilterName::parse("nosuch").expect("name"));
        assert!(matches!(
            prepare(live.path(), work.path(), &missing, 1024),
            Err(FilterTestError::UnknownFilter(_))
        ));
        let escape = FilterSource::Text("[INCLUDES]\nbefore = ../../jail.conf\n".to_owned());
        assert!(matches!(
            prepare(live.path(), work.path(), &escape, 1024),
            Err(FilterTestError::BadFilter(_))
        ));
        let big = FilterSource::Text("#".repeat(2000));
        assert!(matches!(
            prepare(live.path(), work.path(), &big, 1024),
            Err(FilterTestError::BadFilter(_))
        ));
    }
}
