//! A unified diff of two texts, line by line (`diff -u` with three lines of context), for the
//! diff between two profile versions and between what a host should have and what it has.
//!
//! The longest common subsequence is computed between the common prefix and suffix; past
//! [`MAX_CELLS`] cells of its table the middle is shown as removed and added whole, which is
//! still a correct diff, only not the shortest.

use std::fmt::Write as _;

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// The largest LCS table computed (lines of the old middle × lines of the new middle).
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Keep,
    Remove,
    Add,
}

/// The unified diff turning `old` into `new` (`None`: the file does not exist), with `path` in
/// its header; `None` when both are the same.
pub fn unified_diff(path: &str, old: Option<&str>, new: Option<&str>) -> Option<String> {
    if old == new {
        return None;
    }
    let old_lines: Vec<&str> = old.map(|t| t.lines().collect()).unwrap_or_default();
    let new_lines: Vec<&str> = new.map(|t| t.lines().collect()).unwrap_or_default();
    let ops = edit_script(&old_lines, &new_lines);
    let mut out = String::new();
    let (from, to) = (
        old.map_or("/dev/null".to_owned(), |_| format!("a/{path}")),
        new.map_or("/dev/null".to_owned(), |_| format!("b/{path}")),
    );
    let _ = writeln!(out, "--- {from}\n+++ {to}");
    for hunk in hunks(&ops) {
        write_hunk(&mut out, &ops, hunk, &old_lines, &new_lines);
    }
    if old.is_some_and(|t| !t.is_empty() && !t.ends_with('\n'))
        != new.is_some_and(|t| !t.is_empty() && !t.ends_with('\n'))
    {
        out.push_str("\\ the final newline differs\n");
    }
    Some(out)
}

/// The operations turning `old` into `new`, in order.
fn edit_script(old: &[&str], new: &[&str]) -> Vec<Op> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (a, b) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );
    let mut ops = vec![Op::Keep; prefix];
    if a.len().saturating_mul(b.len()) > MAX_CELLS {
        ops.extend(std::iter::repeat_n(Op::Remove, a.len()));
        ops.extend(std::iter::repeat_n(Op::Add, b.len()));
    } else {
        ops.extend(lcs_script(a, b));
    }
    ops.extend(std::iter::repeat_n(Op::Keep, suffix));
    ops
}

/// The edit script of the longest common subsequence (removals before additions).
fn lcs_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let width = b.len() + 1;
    // lengths[i * width + j]: the LCS of a[i..] and b[j..].
    let mut lengths = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lengths[i * width + j] = if a[i] == b[j] {
                lengths[(i + 1) * width + j + 1] + 1
            } else {
                lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j, mut ops) = (0, 0, Vec::with_capacity(a.len() + b.len()));
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            ops.push(Op::Keep);
            (i, j) = (i + 1, j + 1);
        } else if lengths[(i + 1) * width + j] >= lengths[i * width + j + 1] {
            ops.push(Op::Remove);
            i += 1;
        } else {
            ops.push(Op::Add);
            j += 1;
        }
    }
    ops.extend(std::iter::repeat_n(Op::Remove, a.len() - i));
    ops.extend(std::iter::repeat_n(Op::Add, b.len() - j));
    ops
}

/// The ranges of `ops` each hunk covers: every change with its context, close changes merged.
fn hunks(ops: &[Op]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (at, op) in ops.iter().enumerate() {
        if *op == Op::Keep {
            continue;
        }
        let (start, end) = (
            at.saturating_sub(CONTEXT),
            (at + 1 + CONTEXT).min(ops.len()),
        );
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

fn write_hunk(
    out: &mut String,
    ops: &[Op],
    (start, end): (usize, usize),
    old: &[&str],
    new: &[&str],
) {
    // Line numbers of the hunk's first line in each text.
    let removed_before = ops[..start].iter().filter(|o| **o != Op::Add).count();
    let added_before = ops[..start].iter().filter(|o| **o != Op::Remove).count();
    let old_len = ops[start..end].iter().filter(|o| **o != Op::Add).count();
    let new_len = ops[start..end].iter().filter(|o| **o != Op::Remove).count();
    let first = |before: usize, len: usize| if len == 0 { before } else { before + 1 };
    let _ = writeln!(
        out,
        "@@ -{},{old_len} +{},{new_len} @@",
        first(removed_before, old_len),
        first(added_before, new_len)
    );
    let (mut i, mut j) = (removed_before, added_before);
    for op in &ops[start..end] {
        match op {
            Op::Keep => {
                let _ = writeln!(out, " {}", old[i]);
                (i, j) = (i + 1, j + 1);
            }
            Op::Remove => {
                let _ = writeln!(out, "-{}", old[i]);
                i += 1;
            }
            Op::Add => {
                let _ = writeln!(out, "+{}", new[j]);
                j += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(old: Option<&str>, new: Option<&str>, expected: Option<&str>) {
        assert_eq!(
            unified_diff("jail.d/sshd.local", old, new).as_deref(),
            expected
        );
    }

    #[test]
    fn equal_texts_have_no_diff() {
        check(Some("a\nb\n"), Some("a\nb\n"), None);
        check(None, None, None);
    }

    #[test]
    fn a_changed_line_shows_with_its_context() {
        check(
            Some(
                "[sshd]\nenabled = true\nport = ssh\nmaxretry = 5\nfindtime = 600\nbantime = 3600\nbackend = auto\nlogpath = /var/log/auth.log\n",
            ),
            Some(
                "[sshd]\nenabled = true\nport = ssh\nmaxretry = 3\nfindtime = 600\nbantime = 3600\nbackend = auto\nlogpath = /var/log/auth.log\n",
            ),
            Some(
                "--- a/jail.d/sshd.local\n+++ b/jail.d/sshd.local\n@@ -1,7 +1,7 @@\n [sshd]\n enabled = true\n port = ssh\n-maxretry = 5\n+maxretry = 3\n findtime = 600\n bantime = 3600\n backend = auto\n",
            ),
        );
    }

    #[test]
    fn added_and_removed_files_diff_against_dev_null() {
        check(
            None,
            Some("[app]\nenabled = true\n"),
            Some(
                "--- /dev/null\n+++ b/jail.d/sshd.local\n@@ -0,0 +1,2 @@\n+[app]\n+enabled = true\n",
            ),
        );
        check(
            Some("x\n"),
            None,
            Some("--- a/jail.d/sshd.local\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-x\n"),
        );
    }

    #[test]
    fn distant_changes_make_two_hunks_and_close_ones_one() {
        let lines: Vec<String> = (1..=20).map(|n| n.to_string()).collect();
        let text = |changes: &[(usize, &str)]| -> String {
            let mut lines = lines.clone();
            for (at, line) in changes {
                lines[*at - 1] = (*line).to_owned();
            }
            lines.iter().map(|l| format!("{l}\n")).collect()
        };
        let old = text(&[]);
        let new = text(&[(2, "two"), (18, "eighteen")]);
        let diff = unified_diff("f", Some(&old), Some(&new)).expect("diff");
        assert_eq!(diff.matches("\n@@ ").count(), 2, "{diff}");
        assert!(
            diff.contains("@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n"),
            "{diff}"
        );
        assert!(
            diff.contains("@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"),
            "{diff}"
        );
        let near = text(&[(5, "five"), (8, "eight")]);
        let diff = unified_diff("f", Some(&old), Some(&near)).expect("diff");
        assert_eq!(diff.matches("\n@@ ").count(), 1, "{diff}");
        assert!(diff.contains("@@ -2,10 +2,10 @@\n"), "{diff}");
    }

    #[test]
    fn insertions_keep_the_common_lines() {
        let diff = unified_diff("f", Some("a\nc\n"), Some("a\nb\nc\n")).expect("diff");
        assert_eq!(diff, "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n+b\n c\n");
    }

    #[test]
    fn a_missing_final_newline_is_said() {
        let diff = unified_diff("f", Some("a\n"), Some("a")).expect("diff");
        assert!(diff.ends_with("\\ the final newline differs\n"), "{diff}");
    }
}
