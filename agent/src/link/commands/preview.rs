//! `PreviewFilter`: a proposed filter (or the jail's own) over the recent end of the jail's own
//! log, answering what fail2ban would ban. It runs in its own command task like every command,
//! one preview at a time on this host (a second waits its turn), and never writes the
//! configuration.

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::preview_filter::Filter;
use banhub_proto::v1::{ErrorCode, FilterPreview, PreviewFilter, PreviewedAddress, PreviewedLog};

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use crate::fail2ban_files::content;
use crate::fail2ban_files::preview::{
    self, MAX_TIME_BUDGET, PreviewBounds, PreviewError, PreviewPlan, PreviewRequest, ProposedFilter,
};
use crate::fail2ban_files::preview_count::AddressCount;
use crate::fail2ban_files::preview_logs::{MAX_BYTES, MAX_FILES};

/// One preview runs on this host at a time; the next waits (each is bounded in time).
#[derive(Debug)]
pub struct PreviewTurns(tokio::sync::Semaphore);

impl Default for PreviewTurns {
    fn default() -> Self {
        Self(tokio::sync::Semaphore::new(1))
    }
}

/// `PreviewFilter`: checks the request, resolves it against the effective configuration and runs
/// it when this host's turn comes.
pub async fn preview_filter(context: &Context, request: PreviewFilter) -> Reply {
    let editor = context.editor()?;
    let request = parse(request, editor.settings().max_file_bytes)?;
    let policy = editor.settings().policy.clone();
    let plan = editor
        .read(move |reader| Ok(PreviewPlan::new(&reader.load()?, &policy, request)))
        .await?
        .map_err(Failure::from)?;
    // The semaphore is never closed, so acquiring fails only in theory; then the preview runs.
    let _turn = context.previews.0.acquire().await.ok();
    let settings = editor.settings();
    let report = preview::run(
        &settings.tools,
        &settings.config_dir,
        &settings.backup_dir,
        plan,
    )
    .await?;
    Ok(Outcome::FilterPreview(to_proto(report)))
}

/// The request's fields through the agent's own rules.
fn parse(request: PreviewFilter, max_file_bytes: usize) -> Result<PreviewRequest, Failure> {
    let jail = args::jail(&request.jail)?;
    let text = |text: String| {
        content::check_text(&text, max_file_bytes)
            .map(|()| text)
            .map_err(|reason| Failure::invalid(format!("the filter text is refused: {reason}")))
    };
    let filter = match request.filter {
        None => ProposedFilter::JailOwn,
        Some(Filter::Name(name)) => ProposedFilter::Name(args::filter(&name)?),
        Some(Filter::Text(t)) => ProposedFilter::Text(text(t)?),
        Some(Filter::Local(t)) => ProposedFilter::Local(text(t)?),
    };
    if request.maxretry == Some(0) {
        return Err(Failure::invalid("maxretry must be at least 1"));
    }
    if request.log_paths.len() > MAX_FILES {
        return Err(Failure::invalid(format!(
            "at most {MAX_FILES} log paths, not {}",
            request.log_paths.len()
        )));
    }
    if request.max_bytes > MAX_BYTES {
        return Err(Failure::invalid(format!(
            "at most {MAX_BYTES} bytes can be read from the end of each log file"
        )));
    }
    let budget = std::time::Duration::from_millis(u64::from(request.time_budget_ms));
    if budget > MAX_TIME_BUDGET {
        return Err(Failure::invalid(format!(
            "a preview may run at most {} s",
            MAX_TIME_BUDGET.as_secs()
        )));
    }
    let defaults = PreviewBounds::default();
    Ok(PreviewRequest {
        jail,
        filter,
        maxretry: request.maxretry,
        findtime_secs: request.findtime_secs,
        log_paths: request.log_paths,
        bounds: PreviewBounds {
            max_bytes: if request.max_bytes == 0 {
                defaults.max_bytes
            } else {
                request.max_bytes
            },
            time_budget: if budget.is_zero() {
                defaults.time_budget
            } else {
                budget
            },
            max_matches: defaults.max_matches,
        },
    })
}

impl From<PreviewError> for Failure {
    fn from(e: PreviewError) -> Self {
        match e {
            PreviewError::UnknownJail(_) => Self::not_found(e.to_string()),
            PreviewError::NoFilter(_)
            | PreviewError::Journal { .. }
            | PreviewError::BadLogPath(_)
            | PreviewError::NoLogFile(_)
            | PreviewError::TooManyFiles(_) => Self::invalid(e.to_string()),
            PreviewError::BadSetting { .. } => {
                Self::new(ErrorCode::ValidationFailed, e.to_string())
            }
            PreviewError::Filter(e) => e.into(),
            PreviewError::Rejected { messages } => Self::new(
                ErrorCode::ValidationFailed,
                "fail2ban-regex refused the filter (nothing was changed)",
            )
            .with_details(messages),
            PreviewError::Io { .. } | PreviewError::Tool(_) => Self::internal(e.to_string()),
        }
    }
}

fn to_proto(report: preview::PreviewReport) -> FilterPreview {
    let address = |a: AddressCount| PreviewedAddress {
        ip: a.id,
        matches: a.matches,
        reaches_maxretry: a.first_ban.is_some(),
        ignored_by: a.ignored_by.unwrap_or_default(),
        first_ban_unix: a.first_ban.unwrap_or_default(),
    };
    let counted = report.counted;
    FilterPreview {
        logs: report
            .logs
            .into_iter()
            .map(|l| PreviewedLog {
                path: l.path.display().to_string(),
                bytes_read: l.bytes_read,
                truncated: l.truncated,
            })
            .collect(),
        lines_read: report.lines_read,
        lines_matched: counted.matches,
        first_match_unix: counted.first_match.unwrap_or_default(),
        last_match_unix: counted.last_match.unwrap_or_default(),
        maxretry: report.thresholds.maxretry,
        findtime_secs: report.thresholds.findtime_secs,
        would_ban: counted.would_ban.into_iter().map(address).collect(),
        top: counted.top.into_iter().map(address).collect(),
        ignoreip: report.ignoreip,
        bounds_hit: report
            .bounds_hit
            .iter()
            .map(|b| b.as_str().to_owned())
            .collect(),
        filter: report.filter,
        addresses: counted.distinct,
        would_ban_total: counted.would_ban_total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> PreviewFilter {
        PreviewFilter {
            jail: "sshd".to_owned(),
            ..PreviewFilter::default()
        }
    }

    #[test]
    fn requests_are_checked_and_defaults_filled() {
        let parsed = parse(request(), 1024).expect("plain request");
        assert_eq!(parsed.filter, ProposedFilter::JailOwn);
        assert_eq!(parsed.bounds, PreviewBounds::default());

        let code = |r: PreviewFilter| parse(r, 1024).err().map(|f| f.code());
        let invalid = Some(ErrorCode::InvalidArgument);
        assert_eq!(
            code(PreviewFilter {
                jail: "../x".to_owned(),
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                maxretry: Some(0),
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                max_bytes: MAX_BYTES + 1,
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                time_budget_ms: 61_000,
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                log_paths: vec!["/var/log/x".to_owned(); MAX_FILES + 1],
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                filter: Some(Filter::Text("x".repeat(2000))),
                ..request()
            }),
            invalid
        );
        assert_eq!(
            code(PreviewFilter {
                filter: Some(Filter::Name("a/b".to_owned())),
                ..request()
            }),
            invalid
        );
        let bounded = parse(
            PreviewFilter {
                max_bytes: 10,
                time_budget_ms: 500,
                ..request()
            },
            1024,
        )
        .expect("bounded");
        assert_eq!(bounded.bounds.max_bytes, 10);
        assert_eq!(bounded.bounds.time_budget.as_millis(), 500);
    }
}
