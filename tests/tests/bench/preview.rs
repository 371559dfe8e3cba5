//! A filter preview over a 100 MB log beside `fail2ban-regex` alone on the same file, the floor
//! (a benchmark, not a timed test: it asserts only correctness and prints figures). Run with
//! `cargo test --release -p banhub-tests --test bench -- --ignored --nocapture preview::`.
//!
//! The floor prints the same `-o '<time> <fid>'` lines the preview reads, so the ratio is the
//! preview's own cost: reading the end of the file, counting its lines, and counting the matches.
//!
//! The log (testauth lines, one in ten a failure from one of 1,000 addresses) is written under
//! `target/` and deleted at the end. Each round runs the floor and then the agent's preview
//! (`fail2ban_files::preview::run`: the tail, `fail2ban-regex -o`, the counting), alternating.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::{Duration, Instant};

use banhub_agent::config::PolicySettings;
use banhub_agent::fail2ban_files::preview::{
    self, PreviewBounds, PreviewPlan, PreviewRequest, ProposedFilter,
};
use banhub_agent::fail2ban_files::{ConfigReader, Fail2banTools, JailName};

const LOG_BYTES: u64 = 100 << 20;
const ROUNDS: usize = 3;
const FILTER: &str = "[Definition]\nfailregex = ^\\s*Failed login for \\S+ from <HOST>$\n\
                      datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n";

/// A configuration directory with the `testauth` jail reading `auth.log`, under `target/`.
fn host() -> tempfile::TempDir {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    std::fs::create_dir_all(&target).expect("target dir");
    // The jail's log path must be absolute without `..`, as the agent requires of every jail.
    let target = target.canonicalize().expect("target dir");
    let dir = tempfile::Builder::new()
        .prefix("preview-bench-")
        .tempdir_in(target)
        .expect("dir");
    let d = dir.path();
    std::fs::create_dir(d.join("filter.d")).expect("filter.d");
    std::fs::write(d.join("filter.d/testauth.conf"), FILTER).expect("filter");
    std::fs::write(
        d.join("jail.conf"),
        format!(
            "[DEFAULT]\nmaxretry = 5\nfindtime = 10m\nignoreip = 127.0.0.1/8\n\n\
             [testauth]\nenabled = true\nfilter = testauth\nlogpath = {}/auth.log\n",
            d.display()
        ),
    )
    .expect("jail.conf");
    dir
}

/// Writes about `bytes` of log: one line a second, one in ten a failure; returns the lines and
/// the failures written.
fn write_log(path: &Path, bytes: u64) -> (u64, u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("log"));
    let start = chrono::NaiveDate::from_ymd_opt(2026, 11, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("start");
    let (mut written, mut lines, mut failures) = (0u64, 0u64, 0u64);
    let mut line = String::new();
    while written < bytes {
        line.clear();
        let t = (start + chrono::Duration::seconds(i64::try_from(lines).unwrap_or(0)))
            .format("%Y-%m-%d %H:%M:%S");
        if lines % 10 == 0 {
            let n = failures % 1000;
            let _ = writeln!(
                line,
                "{t} Failed login for root from 198.18.{}.{}",
                n / 250,
                n % 250 + 1
            );
            failures += 1;
        } else {
            let _ = writeln!(
                line,
                "{t} Accepted publickey for deploy from 192.0.2.1 port 22 ssh2"
            );
        }
        out.write_all(line.as_bytes()).expect("write");
        written += line.len() as u64;
        lines += 1;
    }
    out.flush().expect("flush");
    (lines, failures)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[tokio::test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn preview_over_100_mb_beside_fail2ban_regex_alone() {
    let dir = host();
    let log = dir.path().join("auth.log");
    let (lines, failures) = write_log(&log, LOG_BYTES);
    let size = std::fs::metadata(&log).expect("log").len();
    println!("log: {size} bytes, {lines} lines, {failures} failures from 1,000 addresses");
    let tools = Fail2banTools::new("/usr/bin/fail2ban-client");
    let work = tempfile::tempdir_in(dir.path()).expect("work");
    let (mut floor, mut previews) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let started = Instant::now();
        let out = Process::new(&tools.regex)
            .args(["-r", "-e", "UTF-8", "-o", "<time> <fid>"])
            .arg(&log)
            .arg(dir.path().join("filter.d/testauth.conf"))
            .output()
            .expect("fail2ban-regex");
        let took = started.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = out.stdout.iter().filter(|b| **b == b'\n').count() as u64;
        assert_eq!(printed, failures, "the floor prints every failure");
        floor.push(took);

        let config = ConfigReader::new(dir.path()).load().expect("config");
        let request = PreviewRequest {
            jail: JailName::parse("testauth").expect("jail"),
            filter: ProposedFilter::JailOwn,
            maxretry: None,
            findtime_secs: None,
            log_paths: Vec::new(),
            bounds: PreviewBounds {
                max_bytes: 256 << 20,
                time_budget: Duration::from_secs(1800),
                ..PreviewBounds::default()
            },
        };
        let plan = PreviewPlan::new(&config, &PolicySettings::default(), request).expect("plan");
        let started = Instant::now();
        let report = preview::run(&tools, dir.path(), work.path(), plan)
            .await
            .expect("preview");
        let took_preview = started.elapsed();
        assert_eq!(report.counted.matches, failures);
        assert_eq!(report.lines_read, lines);
        assert!(report.bounds_hit.is_empty(), "{:?}", report.bounds_hit);
        assert_eq!(report.counted.distinct, 1000);
        previews.push(took_preview);
        println!(
            "round {round}: fail2ban-regex alone {took:.2?}, preview {took_preview:.2?} \
             ({:.2}×); would ban {} of {} addresses",
            took_preview.as_secs_f64() / took.as_secs_f64(),
            report.counted.would_ban_total,
            report.counted.distinct
        );
    }
    let (floor, preview) = (median(floor), median(previews));
    println!(
        "median of {ROUNDS}: fail2ban-regex alone {floor:.2?}, preview {preview:.2?}, ratio {:.2}×",
        preview.as_secs_f64() / floor.as_secs_f64()
    );
    std::fs::remove_file(&log).expect("delete the log");
}
