//! The log files a filter preview reads: a jail's `logpath` lines expanded as fail2ban expands
//! them (a glob in the file name), and the recent end of each file, bounded in bytes. A file longer
//! than the bound is read from the first whole line of its last bytes into a scratch copy, so
//! `fail2ban-regex` (which reads whole regular files only) sees just that end.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Bytes read from the end of each log file unless the request says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Most bytes a request may ask to read from the end of each log file.
pub const MAX_BYTES: u64 = 256 << 20;
/// Most log files one preview reads.
pub const MAX_FILES: usize = 16;

/// The end of one log file, ready for `fail2ban-regex`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSlice {
    /// The log file.
    pub path: PathBuf,
    /// What `fail2ban-regex` reads: the file itself, or the scratch copy of its end.
    pub run_on: PathBuf,
    pub bytes_read: u64,
    /// The file is longer than what was read.
    pub truncated: bool,
    /// Lines `fail2ban-regex` tests: not empty, not starting with `#`.
    pub lines: u64,
}

/// The paths of a `logpath` value, one a line with an optional ` head`/` tail`; a `*` or `?`
/// in a file name matches the files of its directory, in name order.
pub fn expand(value: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for line in value.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = Path::new(
            line.strip_suffix(" head")
                .or_else(|| line.strip_suffix(" tail"))
                .unwrap_or(line)
                .trim_end(),
        );
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match path.parent() {
            Some(dir) if name.contains(['*', '?']) => {
                let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| e.file_name().to_str().is_some_and(|n| wildcard(name, n)))
                    .map(|e| e.path())
                    .collect();
                found.sort();
                paths.extend(found);
            }
            _ => paths.push(path.to_owned()),
        }
    }
    paths.dedup();
    paths
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and `?` one character.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The end of `path` of at most `max_bytes` (blocking I/O); a longer file's end is copied to
/// `scratch` from its first whole line. `None` when the file does not exist.
pub fn slice(path: &Path, max_bytes: u64, scratch: &Path) -> io::Result<Option<LogSlice>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let len = meta.len();
    let mut lines = LineCounter::default();
    if len <= max_bytes {
        copy_counting(&mut file, None, &mut lines)?;
        return Ok(Some(LogSlice {
            path: path.to_owned(),
            run_on: path.to_owned(),
            bytes_read: len,
            truncated: false,
            lines: lines.finish(),
        }));
    }
    file.seek(SeekFrom::Start(len - max_bytes))?;
    let mut reader = io::BufReader::new(file.take(max_bytes));
    // The first line is cut somewhere inside; it starts after its line break.
    let mut partial = Vec::new();
    io::BufRead::read_until(&mut reader, b'\n', &mut partial)?;
    let mut out = io::BufWriter::new(File::create(scratch)?);
    let copied = copy_counting(&mut reader, Some(&mut out), &mut lines)?;
    out.flush()?;
    Ok(Some(LogSlice {
        path: path.to_owned(),
        run_on: scratch.to_owned(),
        bytes_read: copied,
        truncated: true,
        lines: lines.finish(),
    }))
}

/// Copies `from` into `to` (when given) and counts its lines on the way; returns the bytes.
fn copy_counting(
    from: &mut impl Read,
    mut to: Option<&mut dyn Write>,
    lines: &mut LineCounter,
) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        lines.feed(&buf[..n]);
        if let Some(to) = to.as_mut() {
            to.write_all(&buf[..n])?;
        }
        total += n as u64;
    }
}

/// Counts the lines `fail2ban-regex` tests: it skips empty lines and lines starting with `#`.
#[derive(Debug, Default)]
struct LineCounter {
    lines: u64,
    /// Bytes of the current line that are not `\r`.
    current: u64,
    comment: bool,
}

impl LineCounter {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            match b {
                b'\n' => self.end_line(),
                b'\r' => {}
                b'#' if self.current == 0 => {
                    self.comment = true;
                    self.current += 1;
                }
                _ => self.current += 1,
            }
        }
    }

    fn end_line(&mut self) {
        if self.current > 0 && !self.comment {
            self.lines += 1;
        }
        self.current = 0;
        self.comment = false;
    }

    fn finish(mut self) -> u64 {
        self.end_line();
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_file_names() {
        let check = |p: &str, n: &str, expected: bool| {
            assert_eq!(wildcard(p, n), expected, "{p} ~ {n}");
        };
        check("*.log", "auth.log", true);
        check("*.log", "auth.log.1", false);
        check("access*.log", "access.log", true);
        check("a?c", "abc", true);
        check("a?c", "ac", false);
        check("*", "", true);
        check("x*y*z", "xaaybbz", true);
        check("x*y*z", "xaaybb", false);
    }

    #[test]
    fn logpath_lines_and_globs_are_expanded() {
        let dir = tempfile::tempdir().expect("dir");
        for name in ["b.log", "a.log", "c.txt"] {
            std::fs::write(dir.path().join(name), "x\n").expect("write");
        }
        let d = dir.path().display();
        let value = format!("{d}/*.log tail\n  {d}/missing.log\n{d}/c.txt head\n");
        assert_eq!(
            expand(&value),
            [
                dir.path().join("a.log"),
                dir.path().join("b.log"),
                dir.path().join("missing.log"),
                dir.path().join("c.txt"),
            ]
        );
    }

    #[test]
    fn a_short_file_is_read_in_place_and_its_lines_counted() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("auth.log");
        std::fs::write(&log, "one\n\n# comment\r\ntwo\r\n\r\nthree").expect("write");
        let slice = slice(&log, 1024, &dir.path().join("tail"))
            .expect("read")
            .expect("exists");
        assert_eq!(slice.run_on, log);
        assert!(!slice.truncated);
        assert_eq!(slice.lines, 3);
        assert_eq!(slice.bytes_read, 28);
        assert!(!dir.path().join("tail").exists());
    }

    #[test]
    fn a_long_file_is_cut_at_a_whole_line_of_its_end() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("auth.log");
        let text: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
        std::fs::write(&log, &text).expect("write");
        let scratch = dir.path().join("tail");
        // 9 bytes a line: the last 50 bytes hold 5 whole lines and the end of one more.
        let slice = slice(&log, 50, &scratch).expect("read").expect("exists");
        assert!(slice.truncated);
        assert_eq!(slice.run_on, scratch);
        let copy = std::fs::read_to_string(&scratch).expect("copy");
        assert_eq!(copy, "line 095\nline 096\nline 097\nline 098\nline 099\n");
        assert_eq!(slice.lines, 5);
        assert_eq!(slice.bytes_read, 45);
    }

    #[test]
    fn a_missing_file_is_none_and_a_directory_an_error() {
        let dir = tempfile::tempdir().expect("dir");
        let scratch = dir.path().join("tail");
        assert_eq!(
            slice(&dir.path().join("none"), 10, &scratch).expect("ok"),
            None
        );
        assert!(slice(dir.path(), 10, &scratch).is_err());
    }
}
