//! Filter tests: `fail2ban-regex` runs on given log lines (TestFilter), with an installed filter or
//! a filter text that is never written to the configuration. The list of filters is `create`'s
//! catalog.

use std::net::IpAddr;

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::test_filter::Filter;
use banhub_proto::v1::{FilterTestReport, MatchedLine, RegexHits, TestFilter};

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use crate::fail2ban_files::content;
use crate::fail2ban_files::filter_test::{MAX_TEST_BYTES, MAX_TEST_LINE_BYTES, MAX_TEST_LINES};
use crate::fail2ban_files::{self, FilterSource};

/// `TestFilter`: which lines the filter matches, the addresses it finds, and hits per regex.
pub async fn test_filter(context: &Context, request: TestFilter) -> Reply {
    let editor = context.editor()?;
    let source = match request.filter {
        Some(Filter::Name(name)) => FilterSource::Installed(args::filter(&name)?),
        Some(Filter::Text(text)) => {
            let limit = editor.settings().max_file_bytes;
            content::check_text(&text, limit).map_err(|reason| {
                Failure::invalid(format!("the filter text is refused: {reason}"))
            })?;
            FilterSource::Text(text)
        }
        None => {
            return Err(Failure::invalid(
                "name a filter of the host or send a filter text to test",
            ));
        }
    };
    check_lines(&request.lines)?;
    let report = editor.test_filter(&source, &request.lines).await?;
    Ok(Outcome::FilterTest(test_report(report)))
}

/// The caps of the config module's filter tests, checked here first so the hub hears a plain
/// INVALID_ARGUMENT before anything runs.
fn check_lines(lines: &[String]) -> Result<(), Failure> {
    if lines.is_empty() {
        return Err(Failure::invalid("send at least one log line to test"));
    }
    if lines.len() > MAX_TEST_LINES {
        return Err(Failure::invalid(format!(
            "at most {MAX_TEST_LINES} log lines can be tested at once, not {}",
            lines.len()
        )));
    }
    let mut total = 0usize;
    for (index, line) in lines.iter().enumerate() {
        if line.len() > MAX_TEST_LINE_BYTES {
            return Err(Failure::invalid(format!(
                "log line {index} is longer than {MAX_TEST_LINE_BYTES} bytes"
            )));
        }
        if line.contains(['\n', '\r', '\0']) {
            return Err(Failure::invalid(format!(
                "log line {index} holds a line break or NUL; send one line per entry"
            )));
        }
        total += line.len() + 1;
    }
    if total > MAX_TEST_BYTES {
        return Err(Failure::invalid(format!(
            "at most {MAX_TEST_BYTES} bytes of log lines can be tested at once"
        )));
    }
    Ok(())
}

fn test_report(report: fail2ban_files::FilterTestReport) -> FilterTestReport {
    let ids: Vec<String> = report
        .ips
        .iter()
        .map(IpAddr::to_string)
        .chain(report.other_ids.iter().cloned())
        .collect();
    FilterTestReport {
        matched: report
            .matched
            .iter()
            .map(|m| MatchedLine {
                index: u32::try_from(m.index).unwrap_or(u32::MAX),
                ip: id_in_line(&m.line, &ids).unwrap_or_default(),
                line: m.line.clone(),
            })
            .collect(),
        ips: report.ips.iter().map(IpAddr::to_string).collect(),
        regex_hits: report
            .failregex
            .iter()
            .enumerate()
            .map(|(index, hits)| RegexHits {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                regex: hits.regex.clone(),
                hits: hits.hits,
            })
            .collect(),
        lines: report.counts.lines,
        matched_count: report.counts.matched,
        missed: report.counts.missed,
        ignored: report.counts.ignored,
    }
}

/// The failure id found in a matched line: fail2ban-regex reports ids per regex, not per line,
/// so this is the id (of those it found) that appears in the line as a whole token; the
/// longest wins (`192.0.2.10` over `192.0.2.1`).
fn id_in_line(line: &str, ids: &[String]) -> Option<String> {
    let boundary =
        |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '.' || c == ':'));
    ids.iter()
        .filter(|id| {
            line.match_indices(id.as_str()).any(|(at, _)| {
                boundary(line[..at].chars().next_back())
                    && boundary(line[at + id.len()..].chars().next())
            })
        })
        .max_by_key(|id| id.len())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use banhub_proto::v1::ErrorCode;

    #[test]
    fn ids_are_found_as_whole_tokens() {
        let ids = [
            "192.0.2.1".to_owned(),
            "192.0.2.10".to_owned(),
            "2001:db8::7".to_owned(),
        ];
        let check = |line: &str, expected: Option<&str>| {
            assert_eq!(id_in_line(line, &ids).as_deref(), expected, "{line}");
        };
        check("Failed login for bob from 192.0.2.1", Some("192.0.2.1"));
        check(
            "Failed login for bob from 192.0.2.10 port 22",
            Some("192.0.2.10"),
        );
        check("Failed login from [2001:db8::7]:22", Some("2001:db8::7"));
        check("Failed login from 192.0.2.100", None);
        check("nothing here", None);
    }

    #[test]
    fn line_caps() {
        let code = |lines: Vec<String>| check_lines(&lines).err().map(|f| f.code());
        assert_eq!(code(vec!["a".to_owned()]), None);
        assert_eq!(code(vec![]), Some(ErrorCode::InvalidArgument));
        assert_eq!(
            code(vec!["a".to_owned(); MAX_TEST_LINES + 1]),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(vec!["a\nb".to_owned()]),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(vec!["x".repeat(MAX_TEST_LINE_BYTES + 1)]),
            Some(ErrorCode::InvalidArgument)
        );
        assert_eq!(
            code(vec!["x".repeat(MAX_TEST_LINE_BYTES); MAX_TEST_LINES]),
            Some(ErrorCode::InvalidArgument),
            "over the byte cap"
        );
    }
}
