//! The checks of a watched host at the end of its watch: its agent still connected, fail2ban
//! answering with every enabled jail started, the version's jails running, and bans over the
//! watch not far above the host's baseline from the stored events.

use chrono::{DateTime, Utc};

use crate::domain::rollouts::{Check, CheckName, ban_rate_check};
use crate::domain::{ServerId, ServerStatus};
use crate::fleet::Fleet;
use crate::store::Store;

/// The window before the watch that the ban-rate baseline is counted over.
const BASELINE_SECS: i64 = 24 * 3600;

/// What the checks of one host need to know.
pub(super) struct Watch<'a> {
    pub server: ServerId,
    /// The jails the version enables.
    pub jails: &'a [String],
    pub started: DateTime<Utc>,
    pub ended: DateTime<Utc>,
    pub max_ban_rate_factor: f64,
    pub by: &'a str,
}

fn check(name: CheckName, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name,
        ok,
        detail: detail.into(),
    }
}

/// Runs every check of `watch`; each says what it saw.
pub(super) async fn run(fleet: &Fleet, store: &Store, watch: &Watch<'_>) -> Vec<Check> {
    let connected = match fleet.get(watch.server).await {
        Ok(view) if view.status == ServerStatus::Online => {
            check(CheckName::Connected, true, "the agent is connected")
        }
        Ok(view) => check(
            CheckName::Connected,
            false,
            format!("the agent is {:?}", view.status).to_lowercase(),
        ),
        Err(e) => check(CheckName::Connected, false, e.to_string()),
    };
    let (jails_running, no_errors) = match fleet.jails(watch.server, watch.by).await {
        Ok(list) => {
            let missing: Vec<&str> = watch
                .jails
                .iter()
                .filter(|name| !list.jails.iter().any(|j| &j.name == *name && j.running))
                .map(String::as_str)
                .collect();
            let running = if missing.is_empty() {
                check(
                    CheckName::JailsRunning,
                    true,
                    format!("{} jail(s) of the version run", watch.jails.len()),
                )
            } else {
                check(
                    CheckName::JailsRunning,
                    false,
                    format!("not running: {}", missing.join(", ")),
                )
            };
            let failed: Vec<&str> = list
                .jails
                .iter()
                .filter(|j| j.enabled && !j.running)
                .map(|j| j.name.as_str())
                .collect();
            let errors = if failed.is_empty() {
                check(
                    CheckName::NoErrors,
                    true,
                    "fail2ban answers and every enabled jail runs",
                )
            } else {
                check(
                    CheckName::NoErrors,
                    false,
                    format!("enabled but not started: {}", failed.join(", ")),
                )
            };
            (running, errors)
        }
        Err(e) => (
            check(CheckName::JailsRunning, false, e.to_string()),
            check(
                CheckName::NoErrors,
                false,
                format!("fail2ban's jails could not be read: {e}"),
            ),
        ),
    };
    let baseline_from = watch.started - chrono::Duration::seconds(BASELINE_SECS);
    let counts = (
        store
            .count_server_bans(watch.server, watch.started, watch.ended)
            .await,
        store
            .count_server_bans(watch.server, baseline_from, watch.started)
            .await,
    );
    let ban_rate = match counts {
        (Ok(bans), Ok(baseline)) => {
            let secs = (watch.ended - watch.started).num_seconds().max(0);
            ban_rate_check(
                bans,
                u32::try_from(secs).unwrap_or(u32::MAX),
                baseline,
                BASELINE_SECS.unsigned_abs(),
                watch.max_ban_rate_factor,
            )
        }
        (Err(e), _) | (_, Err(e)) => check(
            CheckName::BanRate,
            false,
            format!("the ban events could not be counted: {e}"),
        ),
    };
    vec![jails_running, no_errors, connected, ban_rate]
}
