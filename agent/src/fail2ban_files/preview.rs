//! Filter previews: a proposed filter (or the jail's own) run with `fail2ban-regex` over the
//! recent end of the jail's own log files, counted into what fail2ban would ban under the jail's
//! (or the proposed) `maxretry` and `findtime`. Bounded in bytes per file, in time and in matches
//! kept; a bound that cuts the run short is reported, never an error. Nothing is written to the
//! configuration: the filter under test lives in a scratch directory, as for filter tests.
//!
//! `fail2ban-regex -o '<time> <fid>'` prints one line per failure, read as it comes, so a large
//! log never sits in memory; [`PreviewPlan::new`] decides what runs from the effective
//! configuration, [`run`] runs it.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::time::Instant;

use super::content;
use super::filter_test::{self, FilterSource, FilterTestError};
use super::names::{FilterName, JailName};
use super::policy::Policy;
use super::preview_count::{Counted, DEFAULT_MAX_MATCHES, IgnoreList, Tally, Thresholds};
use super::preview_logs::{self, DEFAULT_MAX_BYTES, LogSlice, MAX_FILES};
use super::reader::EffectiveConfig;
use super::running;
use super::tools::{Fail2banTools, ToolError};
use crate::config::PolicySettings;

/// How long a preview may run unless the request says otherwise.
pub const DEFAULT_TIME_BUDGET: Duration = Duration::from_secs(20);
/// The longest time budget a request may ask for.
pub const MAX_TIME_BUDGET: Duration = Duration::from_secs(60);
/// fail2ban's own defaults when neither the jail nor `[DEFAULT]` sets them.
const FAIL2BAN_MAXRETRY: u32 = 5;
const FAIL2BAN_FINDTIME: u64 = 600;
/// Lines of the tool's output that are not matches, kept for an error message.
const KEPT_MESSAGES: usize = 50;
/// Bytes of the tool's standard error kept.
const KEPT_STDERR: u64 = 64 * 1024;

/// The filter a preview runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposedFilter {
    /// The jail's filter as configured (with its options).
    JailOwn,
    /// Another filter of the host.
    Name(FilterName),
    /// A whole filter file of its own.
    Text(String),
    /// The jail's filter with its `.local` holding this text (an edit being proposed).
    Local(String),
}

/// What a preview may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviewBounds {
    /// Bytes read from the end of each log file.
    pub max_bytes: u64,
    pub time_budget: Duration,
    /// Matches kept; the run stops at this many.
    pub max_matches: usize,
}

impl Default for PreviewBounds {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            time_budget: DEFAULT_TIME_BUDGET,
            max_matches: DEFAULT_MAX_MATCHES,
        }
    }
}

/// A preview as asked for, its values already checked for size.
#[derive(Debug, Clone)]
pub struct PreviewRequest {
    pub jail: JailName,
    pub filter: ProposedFilter,
    pub maxretry: Option<u32>,
    pub findtime_secs: Option<u64>,
    /// Replaces the jail's log paths; each passes the host policy's log directories.
    pub log_paths: Vec<String>,
    pub bounds: PreviewBounds,
}

/// What a preview runs, resolved from the effective configuration.
#[derive(Debug, Clone)]
pub struct PreviewPlan {
    source: FilterSource,
    options: Option<String>,
    label: String,
    logs: Vec<PathBuf>,
    thresholds: Thresholds,
    ignoreip: IgnoreList,
    bounds: PreviewBounds,
}

/// A bound that cut a preview short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bound {
    /// A log file was longer than the bytes read from its end.
    Size,
    /// The time budget ran out.
    Time,
    /// The cap on matches kept was reached.
    Matches,
}

impl Bound {
    /// The bound's stable name: `size`, `time`, `matches`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Size => "size",
            Self::Time => "time",
            Self::Matches => "matches",
        }
    }
}

/// One log file read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewedLog {
    pub path: PathBuf,
    pub bytes_read: u64,
    pub truncated: bool,
}

/// What a preview found.
#[derive(Debug, Clone)]
pub struct PreviewReport {
    pub logs: Vec<PreviewedLog>,
    pub lines_read: u64,
    pub counted: Counted,
    pub thresholds: Thresholds,
    pub ignoreip: Vec<String>,
    pub bounds_hit: Vec<Bound>,
    /// The filter that ran, for people.
    pub filter: String,
}

/// Why a preview did not run.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("jail {0} does not exist in the configuration")]
    UnknownJail(JailName),
    #[error("jail {0} has no filter; name one to preview")]
    NoFilter(JailName),
    #[error(
        "jail {jail} reads the systemd journal (backend {backend}); a preview reads log files: \
         give log paths to read"
    )]
    Journal { jail: JailName, backend: String },
    #[error("the jail's {key} cannot be read: {reason}")]
    BadSetting { key: &'static str, reason: String },
    #[error("log path refused: {0}")]
    BadLogPath(String),
    #[error("none of the log files exists: {}", list(.0))]
    NoLogFile(Vec<PathBuf>),
    #[error("a preview reads at most {MAX_FILES} log files; these paths name {0}")]
    TooManyFiles(usize),
    #[error(transparent)]
    Filter(#[from] FilterTestError),
    #[error("fail2ban-regex refused the filter:\n{}", messages.join("\n"))]
    Rejected { messages: Vec<String> },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tool(#[from] ToolError),
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PreviewError + '_ {
    move |source| PreviewError::Io {
        path: path.to_owned(),
        source,
    }
}

impl PreviewPlan {
    /// Resolves `request` against the configuration: the filter, the log files, the thresholds
    /// and `ignoreip` of the jail, with the request's overrides.
    pub fn new(
        config: &EffectiveConfig,
        policy: &PolicySettings,
        request: PreviewRequest,
    ) -> Result<Self, PreviewError> {
        let jail = config
            .jail(request.jail.as_str())
            .ok_or_else(|| PreviewError::UnknownJail(request.jail.clone()))?;
        let resolved = |key: &'static str| -> Result<Option<String>, PreviewError> {
            match jail.settings.get(key).map(|s| s.value.clone()) {
                None => Ok(None),
                Some(Ok(value)) => Ok(Some(value)),
                Some(Err(reason)) => Err(PreviewError::BadSetting { key, reason }),
            }
        };
        let own = || {
            let filter = jail
                .filter
                .as_ref()
                .ok_or_else(|| PreviewError::NoFilter(request.jail.clone()))?;
            let name = FilterName::parse(&filter.name).map_err(|e| PreviewError::BadSetting {
                key: "filter",
                reason: e.to_string(),
            })?;
            Ok::<_, PreviewError>((name, filter.options.clone(), filter.spec.clone()))
        };
        let (source, options, label) = match request.filter {
            ProposedFilter::JailOwn => {
                let (name, options, spec) = own()?;
                (FilterSource::Installed(name), options, spec)
            }
            ProposedFilter::Local(local) => {
                let (name, options, spec) = own()?;
                let label = format!("{spec} with the proposed filter.d/{name}.local");
                (FilterSource::Edited { name, local }, options, label)
            }
            ProposedFilter::Name(name) => {
                let label = name.to_string();
                (FilterSource::Installed(name), None, label)
            }
            ProposedFilter::Text(text) => (
                FilterSource::Text(text),
                None,
                "(the filter text)".to_owned(),
            ),
        };
        let logs = if request.log_paths.is_empty() {
            if jail.backend.starts_with("systemd") {
                return Err(PreviewError::Journal {
                    jail: request.jail,
                    backend: jail.backend,
                });
            }
            let value = resolved("logpath")?.unwrap_or_default();
            for path in preview_logs::expand(&value) {
                if !plain_absolute(&path) {
                    return Err(PreviewError::BadLogPath(format!(
                        "the jail's log path {} is not absolute without `..`",
                        path.display()
                    )));
                }
            }
            preview_logs::expand(&value)
        } else {
            let policy = Policy::new(policy, BTreeSet::new());
            for path in &request.log_paths {
                if path.contains(['\n', '\r', '\0']) {
                    return Err(PreviewError::BadLogPath(
                        "give one path per entry".to_owned(),
                    ));
                }
                policy
                    .logpath(path)
                    .map_err(|refusal| PreviewError::BadLogPath(refusal.reason))?;
            }
            preview_logs::expand(&request.log_paths.join("\n"))
        };
        if logs.len() > MAX_FILES {
            return Err(PreviewError::TooManyFiles(logs.len()));
        }
        let maxretry = match request.maxretry {
            Some(n) => n,
            None => match resolved("maxretry")? {
                None => FAIL2BAN_MAXRETRY,
                Some(v) => v.trim().parse().map_err(|_| PreviewError::BadSetting {
                    key: "maxretry",
                    reason: format!("{v:?} is not a whole number"),
                })?,
            },
        };
        let findtime_secs = match request.findtime_secs {
            Some(n) => n,
            None => match resolved("findtime")? {
                None => FAIL2BAN_FINDTIME,
                Some(v) => running::seconds(&v)
                    .and_then(|s| u64::try_from(s).ok())
                    .ok_or_else(|| PreviewError::BadSetting {
                        key: "findtime",
                        reason: format!("{v:?} is not a time fail2ban reads"),
                    })?,
            },
        };
        Ok(Self {
            source,
            options,
            label,
            logs,
            thresholds: Thresholds {
                maxretry,
                findtime_secs,
            },
            ignoreip: IgnoreList::parse(&resolved("ignoreip")?.unwrap_or_default()),
            bounds: request.bounds,
        })
    }

    /// The log files the preview reads.
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    /// The thresholds the preview counts under.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }
}

fn plain_absolute(path: &Path) -> bool {
    path.is_absolute() && !path.components().any(|c| c == Component::ParentDir)
}

/// Runs `plan` with scratch space under `work_dir`.
pub async fn run(
    tools: &Fail2banTools,
    config_dir: &Path,
    work_dir: &Path,
    plan: PreviewPlan,
) -> Result<PreviewReport, PreviewError> {
    let deadline = Instant::now() + plan.bounds.time_budget;
    let (config_dir, work_dir) = (config_dir.to_owned(), work_dir.to_owned());
    let (source, logs, max_bytes) = (
        plan.source.clone(),
        plan.logs.clone(),
        plan.bounds.max_bytes,
    );
    let (prepared, slices) = tokio::task::spawn_blocking(move || {
        let prepared = filter_test::prepare(
            &config_dir,
            &work_dir,
            &source,
            content::DEFAULT_MAX_FILE_BYTES,
        )?;
        let mut slices = Vec::new();
        for (index, path) in logs.iter().enumerate() {
            let scratch = prepared.dir.path().join(format!("tail-{index}.log"));
            if let Some(slice) = preview_logs::slice(path, max_bytes, &scratch).map_err(io(path))? {
                slices.push(slice);
            }
        }
        Ok::<_, PreviewError>((prepared, slices))
    })
    .await
    .map_err(|e| PreviewError::Io {
        path: PathBuf::from("(preview)"),
        source: std::io::Error::other(e),
    })??;
    if slices.is_empty() {
        return Err(PreviewError::NoLogFile(plan.logs));
    }
    let filter_arg = match &plan.options {
        Some(options) => format!("{}[{options}]", prepared.arg),
        None => prepared.arg.clone(),
    };
    let mut tally = Tally::default();
    let mut bounds_hit = BTreeSet::new();
    if slices.iter().any(|s| s.truncated) {
        bounds_hit.insert(Bound::Size);
    }
    for slice in &slices {
        let log = run_on(slice, prepared.dir.path());
        let args: Vec<OsString> = [
            "-c",
            ".",
            "-e",
            "UTF-8",
            // Raw hosts: never resolve names found in the log.
            "-r",
            "-o",
            "<time> <fid>",
        ]
        .iter()
        .map(OsString::from)
        .chain([log, OsString::from(&filter_arg)])
        .collect();
        match regex_stream(
            tools,
            prepared.dir.path(),
            &args,
            deadline,
            &mut tally,
            plan.bounds.max_matches,
        )
        .await?
        {
            RunEnd::Finished { success: true, .. } => {}
            RunEnd::Finished {
                success: false,
                messages,
                stderr,
            } => {
                return Err(PreviewError::Rejected {
                    messages: filter_test::regex_messages(
                        &messages.join("\n"),
                        &stderr,
                        &filter_test::display_name(&plan.source),
                    ),
                });
            }
            RunEnd::Stopped(bound) => {
                bounds_hit.insert(bound);
                break;
            }
        }
    }
    drop(prepared);
    Ok(PreviewReport {
        logs: slices
            .iter()
            .map(|s| PreviewedLog {
                path: s.path.clone(),
                bytes_read: s.bytes_read,
                truncated: s.truncated,
            })
            .collect(),
        lines_read: slices.iter().map(|s| s.lines).sum(),
        counted: tally.count(plan.thresholds, &plan.ignoreip),
        thresholds: plan.thresholds,
        ignoreip: plan.ignoreip.entries().map(str::to_owned).collect(),
        bounds_hit: bounds_hit.into_iter().collect(),
        filter: plan.label,
    })
}

/// What `fail2ban-regex` reads for `slice`: the log file itself, or the copy of its end in the
/// scratch directory (named relative to it, the tool's working directory).
fn run_on(slice: &LogSlice, scratch: &Path) -> OsString {
    match slice.run_on.strip_prefix(scratch) {
        Ok(inside) => Path::new(".").join(inside).into_os_string(),
        Err(_) => slice.run_on.clone().into_os_string(),
    }
}

/// How one `fail2ban-regex` run ended.
enum RunEnd {
    Finished {
        success: bool,
        /// Lines of its output that are not matches.
        messages: Vec<String>,
        stderr: String,
    },
    /// Killed when a bound was reached; the matches read so far stay in the tally.
    Stopped(Bound),
}

/// Runs `fail2ban-regex` with `args`, recording each match line into `tally` as it comes.
async fn regex_stream(
    tools: &Fail2banTools,
    cwd: &Path,
    args: &[OsString],
    deadline: Instant,
    tally: &mut Tally,
    max_matches: usize,
) -> Result<RunEnd, PreviewError> {
    let program = &tools.regex;
    let spawn_error = |source| ToolError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = tokio::process::Command::new(program)
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_error)?;
    let stderr = child.stderr.take().map(|pipe| {
        tokio::spawn(async move {
            let mut bytes = Vec::new();
            let _ = pipe.take(KEPT_STDERR).read_to_end(&mut bytes).await;
            String::from_utf8_lossy(&bytes).into_owned()
        })
    });
    let Some(stdout) = child.stdout.take() else {
        return Err(spawn_error(std::io::Error::other("no standard output")).into());
    };
    let mut stdout = tokio::io::BufReader::with_capacity(1 << 16, stdout);
    let mut messages = Vec::new();
    let mut line = Vec::new();
    let stopped = loop {
        line.clear();
        match tokio::time::timeout_at(deadline, stdout.read_until(b'\n', &mut line)).await {
            Err(_) => break Some(Bound::Time),
            Ok(Ok(0)) => break None,
            Ok(Ok(_)) => {
                let text = String::from_utf8_lossy(&line);
                if !tally.record_line(&text) && messages.len() < KEPT_MESSAGES {
                    messages.push(text.trim_end().to_owned());
                }
                if tally.matches() >= max_matches {
                    break Some(Bound::Matches);
                }
            }
            Ok(Err(e)) => {
                return Err(PreviewError::Io {
                    path: program.clone(),
                    source: e,
                });
            }
        }
    };
    let status = match stopped {
        Some(bound) => {
            stop(&mut child).await;
            return Ok(RunEnd::Stopped(bound));
        }
        None => match tokio::time::timeout_at(deadline, child.wait()).await {
            Err(_) => {
                stop(&mut child).await;
                return Ok(RunEnd::Stopped(Bound::Time));
            }
            Ok(status) => status.map_err(spawn_error)?,
        },
    };
    let stderr = match stderr {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    Ok(RunEnd::Finished {
        success: status.success(),
        messages,
        stderr,
    })
}

/// Kills and reaps a run, so no tool outlives the preview that started it.
async fn stop(child: &mut tokio::process::Child) {
    if let Err(error) = child.kill().await {
        tracing::warn!(%error, "could not stop fail2ban-regex at a preview's bound");
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;
    use crate::fail2ban_files::ConfigReader;

    /// A configuration directory with the `testauth` filter and jail reading `auth.log`.
    fn host(log: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        std::fs::create_dir(d.join("filter.d")).expect("filter.d");
        std::fs::write(
            d.join("filter.d/testauth.conf"),
            "[Definition]\nfailregex = ^\\s*Failed login for \\S+ from <HOST>$\n\
             datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n",
        )
        .expect("filter");
        std::fs::write(
            d.join("jail.conf"),
            format!(
                "[DEFAULT]\nmaxretry = 3\nfindtime = 10m\nignoreip = 127.0.0.1/8 198.51.100.0/24\n\n\
                 [testauth]\nenabled = true\nfilter = testauth\nlogpath = {}/auth.log\n\n\
                 [journal]\nenabled = true\nfilter = testauth\nbackend = systemd\n",
                d.display()
            ),
        )
        .expect("jail.conf");
        std::fs::write(d.join("auth.log"), log).expect("log");
        dir
    }

    fn log() -> String {
        let mut text = String::new();
        // 192.0.2.1: 4 within a minute; 198.51.100.7: 3 (ignoreip); 203.0.113.9: 3 spread over
        // an hour; 2001:db8::5: 2.
        for (ip, n, step) in [
            ("192.0.2.1", 4, 10),
            ("198.51.100.7", 3, 10),
            ("203.0.113.9", 3, 1200),
            ("2001:db8::5", 2, 10),
        ] {
            for i in 0..n {
                let t = chrono::NaiveDate::from_ymd_opt(2026, 11, 27)
                    .and_then(|d| d.and_hms_opt(6, 0, 0))
                    .expect("time")
                    + chrono::Duration::seconds(i * step);
                let _ = writeln!(
                    text,
                    "{} Failed login for root from {ip}",
                    t.format("%Y-%m-%d %H:%M:%S")
                );
            }
        }
        text.push_str("2026-11-27 06:00:00 Accepted login for root from 192.0.2.1\n");
        text
    }

    fn request(jail: &str) -> PreviewRequest {
        PreviewRequest {
            jail: JailName::parse(jail).expect("jail"),
            filter: ProposedFilter::JailOwn,
            maxretry: None,
            findtime_secs: None,
            log_paths: Vec::new(),
            bounds: PreviewBounds::default(),
        }
    }

    async fn preview(dir: &Path, request: PreviewRequest) -> Result<PreviewReport, PreviewError> {
        let config = ConfigReader::new(dir).load().expect("config");
        let plan = PreviewPlan::new(&config, &PolicySettings::default(), request)?;
        let work = tempfile::tempdir().expect("work");
        let tools = Fail2banTools::new("/usr/bin/fail2ban-client");
        assert!(
            tools.regex.exists(),
            "{} is missing: install fail2ban (tests/install-components.sh)",
            tools.regex.display()
        );
        run(&tools, dir, work.path(), plan).await
    }

    fn ids(list: &[super::super::preview_count::AddressCount]) -> Vec<&str> {
        list.iter().map(|a| a.id.as_str()).collect()
    }

    #[tokio::test]
    async fn the_jails_log_is_counted_under_its_thresholds() {
        let dir = host(&log());
        let report = preview(dir.path(), request("testauth"))
            .await
            .expect("preview");
        assert_eq!(report.lines_read, 13);
        assert_eq!(report.counted.matches, 12);
        assert_eq!(report.counted.distinct, 4);
        assert_eq!(
            report.thresholds,
            Thresholds {
                maxretry: 3,
                findtime_secs: 600
            }
        );
        assert_eq!(
            ids(&report.counted.would_ban),
            ["192.0.2.1", "198.51.100.7"]
        );
        assert_eq!(
            report.counted.would_ban[1].ignored_by.as_deref(),
            Some("198.51.100.0/24")
        );
        assert_eq!(report.ignoreip, ["127.0.0.1/8", "198.51.100.0/24"]);
        assert!(report.bounds_hit.is_empty());
        assert_eq!(report.filter, "testauth");

        // A lower maxretry bans more; a wider findtime catches the slow address.
        let mut two = request("testauth");
        two.maxretry = Some(2);
        two.findtime_secs = Some(3600);
        let report = preview(dir.path(), two).await.expect("preview");
        assert_eq!(report.counted.would_ban_total, 4);
    }

    #[tokio::test]
    async fn bounds_are_reported_not_failed() {
        let dir = host(&log());
        let mut small = request("testauth");
        // The last two lines: one match of 2001:db8::5 and the accepted login.
        small.bounds.max_bytes = 120;
        let report = preview(dir.path(), small).await.expect("preview");
        assert_eq!(report.bounds_hit, [Bound::Size]);
        assert!(report.logs[0].truncated);
        assert_eq!(report.counted.matches, 1);

        let mut few = request("testauth");
        few.bounds.max_matches = 2;
        let report = preview(dir.path(), few).await.expect("preview");
        assert_eq!(report.bounds_hit, [Bound::Matches]);
        assert_eq!(report.counted.matches, 2);
    }

    #[tokio::test]
    async fn a_proposed_filter_replaces_the_jails_and_bad_ones_are_refused() {
        let dir = host(&log());
        let mut text = request("testauth");
        text.filter = ProposedFilter::Text(
            "[Definition]\nfailregex = ^\\s*Accepted login for \\S+ from <HOST>$\n".to_owned(),
        );
        let report = preview(dir.path(), text).await.expect("preview");
        assert_eq!(report.counted.matches, 1);
        assert_eq!(ids(&report.counted.top), ["192.0.2.1"]);

        let mut broken = request("testauth");
        broken.filter =
            ProposedFilter::Local("[Definition]\nfailregex = no host here\n".to_owned());
        let err = preview(dir.path(), broken).await.expect_err("no <HOST>");
        assert!(matches!(err, PreviewError::Rejected { .. }), "{err}");

        let err = preview(dir.path(), request("journal"))
            .await
            .expect_err("journal");
        assert!(matches!(err, PreviewError::Journal { .. }), "{err}");
        let err = preview(dir.path(), request("nosuch"))
            .await
            .expect_err("unknown");
        assert!(matches!(err, PreviewError::UnknownJail(_)), "{err}");

        let mut outside = request("testauth");
        outside.log_paths = vec![format!("{}/auth.log", dir.path().display())];
        let err = preview(dir.path(), outside)
            .await
            .expect_err("outside /var/log");
        assert!(matches!(err, PreviewError::BadLogPath(_)), "{err}");
        let mut dotdot = request("testauth");
        dotdot.log_paths = vec!["/var/log/../etc/shadow".to_owned()];
        let err = preview(dir.path(), dotdot).await.expect_err("traversal");
        assert!(matches!(err, PreviewError::BadLogPath(_)), "{err}");
    }
}
