//! Small measuring helpers: percentiles, the machine's load, CPU time of processes, and where the
//! binaries under test are.

use std::path::PathBuf;
use std::time::Duration;

/// Median, 99th percentile and maximum.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub n: usize,
}

impl Summary {
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let n = samples.len();
        if n == 0 {
            return Self::default();
        }
        let at = |p: f64| samples[(((n - 1) as f64) * p).round() as usize];
        Self {
            p50: at(0.50),
            p99: at(0.99),
            max: samples[n - 1],
            n,
        }
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The 1-, 5- and 15-minute load averages: other work on this 2-core machine slows every figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// User plus system CPU seconds of process `pid` (and its waited-for children), from
/// `/proc/<pid>/stat`; `self` for this process.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime, stime, cutime, cstime are fields 14 to 17 of the line: 11 to 14 after the name.
    (ticks(11) + ticks(12) + ticks(13) + ticks(14)) / 100.0
}

/// CPU seconds of every process whose command name is `comm` (e.g. `postgres`).
pub fn cpu_seconds_of_command(comm: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .map(|pid| cpu_seconds(&pid))
        .sum()
}

/// When `path` was last modified (UTC), to tell which build of a binary a run drove.
pub fn modified(path: &std::path::Path) -> String {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map(|t| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .format("built %Y-%m-%d %H:%M:%S UTC")
                .to_string()
        })
        .unwrap_or_else(|_| "build time unknown".to_owned())
}

/// A workspace binary of the given profile (`debug` or `release`), or how to build it.
pub fn binary(profile: &str, name: &str) -> anyhow::Result<PathBuf> {
    let path = banhub_tests::process::target_dir().join(profile).join(name);
    if !path.is_file() {
        anyhow::bail!(
            "{} does not exist; build it first: cargo build{} -p banhub -p banhub-agent",
            path.display(),
            if profile == "release" {
                " --release"
            } else {
                ""
            }
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let s = Summary::of((1..=100).map(Duration::from_millis).collect());
        assert_eq!(s.p50, Duration::from_millis(51));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(Summary::of(Vec::new()).n, 0);
        assert!(cpu_seconds("self") >= 0.0);
    }
}
