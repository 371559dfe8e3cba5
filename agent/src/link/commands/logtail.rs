//! The end of fail2ban's own log (LogTail): the file fail2ban names as its `logtarget`, read
//! backwards in blocks from its end, so a log of gigabytes costs what the lines shown cost.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{ErrorCode, LogLines, LogTail};

use super::Context;
use super::args;
use super::failure::{Failure, Reply};

/// Bytes read per step backwards.
const BLOCK: usize = 64 * 1024;
/// How far back a search for one jail's lines goes before it gives up.
const MAX_SCAN: u64 = 64 << 20;
/// Longest line returned; longer ones are cut.
const MAX_LINE: usize = 4 * 1024;

/// `LogTail`: the last lines of fail2ban's log, or of its lines about one jail.
pub async fn log_tail(context: &Context, request: LogTail) -> Reply {
    let jail = match request.jail.as_str() {
        "" => None,
        raw => Some(args::jail(raw)?),
    };
    let wanted = usize::try_from(args::log_lines(request.lines)?).unwrap_or(usize::MAX);
    let target = context.fail2ban.lease().await?.log_target().await?;
    let path = PathBuf::from(&target);
    if !path.is_absolute() {
        return Err(Failure::new(
            ErrorCode::Fail2banError,
            format!(
                "fail2ban writes its log to {}, not to a file, so the agent cannot show it; set \
                 logtarget to a file in fail2ban.local to see the log here",
                args::quoted(&target)
            ),
        ));
    }
    let needle = jail.as_ref().map(|j| format!("[{j}]"));
    let read = path.clone();
    let lines = tokio::task::spawn_blocking(move || tail(&read, wanted, needle.as_deref()))
        .await
        .map_err(|e| Failure::internal(format!("reading fail2ban's log: {e}")))?
        .map_err(|e| {
            Failure::internal(format!(
                "cannot read fail2ban's log {}: {e}",
                path.display()
            ))
        })?;
    Ok(Outcome::LogLines(LogLines {
        path: target,
        lines,
    }))
}

/// The last `wanted` lines of the regular file at `path` (those containing `needle`, if
/// given), oldest first, each cut to [`MAX_LINE`] bytes.
fn tail(path: &Path, wanted: usize, needle: Option<&str>) -> std::io::Result<Vec<String>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut found: Vec<String> = Vec::new();
    let mut end = meta.len();
    // The start of a line whose beginning lies in a block not read yet.
    let mut partial: Vec<u8> = Vec::new();
    let mut scanned = 0u64;
    let keep = |line: &[u8], found: &mut Vec<String>| {
        if line.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(line);
        if needle.is_none_or(|n| text.contains(n)) {
            found.push(cut(text.trim_end_matches('\r')));
        }
    };
    while end > 0 && found.len() < wanted && scanned < MAX_SCAN {
        let size = usize::try_from(end.min(BLOCK as u64)).unwrap_or(BLOCK);
        let start = end - size as u64;
        let mut block = vec![0u8; size];
        file.read_exact_at(&mut block, start)?;
        scanned += size as u64;
        block.extend_from_slice(&partial);
        let mut lines = block.split(|b| *b == b'\n').rev().peekable();
        while let Some(line) = lines.next() {
            if lines.peek().is_none() && start > 0 {
                // The first piece of the block may continue further back.
                partial = line.to_vec();
                partial.truncate(MAX_LINE * 4);
                break;
            }
            keep(line, &mut found);
            if found.len() == wanted {
                break;
            }
        }
        end = start;
    }
    found.truncate(wanted);
    found.reverse();
    Ok(found)
}

fn cut(line: &str) -> String {
    if line.len() <= MAX_LINE {
        return line.to_owned();
    }
    let mut at = MAX_LINE;
    while !line.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}…", &line[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    fn log(lines: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("fail2ban.log");
        let mut text = String::new();
        for i in 0..lines {
            let jail = if i % 3 == 0 { "sshd" } else { "web" };
            // Long enough that blocks end mid-line.
            let _ = writeln!(
                text,
                "2026-11-23 08:00:00,{i:03} fail2ban.filter [1]: INFO [{jail}] Found 192.0.2.{} - {}",
                i % 250,
                "x".repeat(i % 97)
            );
        }
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn last_lines_across_blocks() {
        let (_dir, path) = log(20_000);
        let all: Vec<String> = std::fs::read_to_string(&path)
            .expect("read")
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(tail(&path, 5, None).expect("tail"), all[all.len() - 5..]);
        assert_eq!(
            tail(&path, 1000, None).expect("tail"),
            all[all.len() - 1000..]
        );
        let sshd: Vec<String> = all
            .iter()
            .filter(|l| l.contains("[sshd]"))
            .cloned()
            .collect();
        assert_eq!(
            tail(&path, 1000, Some("[sshd]")).expect("tail"),
            sshd[sshd.len() - 1000..]
        );
        assert_eq!(
            tail(&path, 10, Some("[nosuch]")).expect("tail"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn short_files_and_odd_endings() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("log");
        std::fs::write(&path, "").expect("write");
        assert!(tail(&path, 10, None).expect("tail").is_empty());
        std::fs::write(&path, "a\n\nb\r\nc").expect("write");
        assert_eq!(tail(&path, 10, None).expect("tail"), ["a", "b", "c"]);
        assert_eq!(tail(&path, 2, None).expect("tail"), ["b", "c"]);
        let long = "é".repeat(MAX_LINE);
        std::fs::write(&path, format!("{long}\nshort\n")).expect("write");
        let lines = tail(&path, 10, None).expect("tail");
        assert_eq!(lines[1], "short");
        assert!(lines[0].len() <= MAX_LINE + '…'.len_utf8() && lines[0].ends_with('…'));
        assert!(
            tail(dir.path(), 10, None).is_err(),
            "a directory is refused"
        );
        assert!(tail(&dir.path().join("none"), 10, None).is_err());
    }
}
