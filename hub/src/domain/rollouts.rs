//! A rollout: one profile version applied to many servers, a canary batch first and then the
//! rest in batches, each host watched before its change is confirmed. The rules that know nothing
//! of the fleet live here: the request's bounds, the batch plan, the jails a version expects to
//! run, and the ban-rate check.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::config_changes::SetFile;
use super::profiles::{ProfileFile, ProfileName};
use super::{ServerId, sha256_hex};

/// The longest watch of a batch, in seconds.
pub const MAX_WATCH_SECS: u32 = 3600;
/// The largest batch.
pub const MAX_BATCH_SIZE: u32 = 100;
/// The ban rate a host is allowed during the watch is measured against at least this many bans
/// over the watch, so a quiet host (a baseline of zero) does not fail on its first ban.
pub const MIN_EXPECTED_BANS: f64 = 1.0;

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum RolloutState {
    /// Batches are being applied and watched.
    Running,
    /// Every host confirmed the version.
    Succeeded,
    /// An operator stopped it; every host it changed was rolled back.
    Stopped,
    /// A rollback could not be completed on some host (its `error` says why).
    Failed,
    /// A check or an apply failed; every host it changed was rolled back.
    RolledBack,
}

impl RolloutState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::RolledBack => "rolledBack",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            Self::Running,
            Self::Succeeded,
            Self::Stopped,
            Self::Failed,
            Self::RolledBack,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }
}

/// Where one host of a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum HostState {
    /// Its batch has not started.
    Pending,
    /// The change is recorded and being sent to the agent.
    Applying,
    /// Applied and unconfirmed: the checks run at the end of the watch.
    Watching,
    /// The hub confirmed the change (or the host already had the version's files).
    Confirmed,
    /// The apply or a check failed, or a rollback could not be completed.
    Failed,
    /// The change is being undone.
    RollingBack,
    /// The change was undone; the host's files are what they were before.
    RolledBack,
    /// Never touched: the rollout ended before its batch.
    Skipped,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Applying => "applying",
            Self::Watching => "watching",
            Self::Confirmed => "confirmed",
            Self::Failed => "failed",
            Self::RollingBack => "rollingBack",
            Self::RolledBack => "rolledBack",
            Self::Skipped => "skipped",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Applying,
            Self::Watching,
            Self::Confirmed,
            Self::Failed,
            Self::RollingBack,
            Self::RolledBack,
            Self::Skipped,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }
}

/// The checks of a watched host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum CheckName {
    /// Every jail the version enables runs.
    JailsRunning,
    /// fail2ban answers its status, and no enabled jail of the host failed to start.
    NoErrors,
    /// The host's agent is still connected.
    Connected,
    /// Bans over the watch are not far above the host's baseline.
    BanRate,
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub name: CheckName,
    pub ok: bool,
    /// What was seen, in a sentence.
    pub detail: String,
}

/// How a rollout goes: batch sizes, the watch, the agent's confirmation window, the ban-rate
/// limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RolloutPlan {
    /// Hosts in the first batch.
    pub canary: u32,
    pub batch_size: u32,
    pub watch_secs: u32,
    /// The agent reverts a change the hub has not confirmed within this time after the reload.
    pub confirm_secs: u32,
    pub max_ban_rate_factor: f64,
}

impl Default for RolloutPlan {
    fn default() -> Self {
        Self {
            canary: 1,
            batch_size: 10,
            watch_secs: 60,
            confirm_secs: 120,
            max_ban_rate_factor: 3.0,
        }
    }
}

/// A field of a rollout request that breaks its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PlanError {
    pub field: &'static str,
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        field,
        message: message.into(),
    }
}

impl RolloutPlan {
    /// Checks each bound; the watch must end before the agent's confirmation window does, or
    /// every change would revert while it is watched.
    pub fn check(&self) -> Result<(), PlanError> {
        if self.canary < 1 {
            return Err(refuse("canary", "must be at least 1"));
        }
        if !(1..=MAX_BATCH_SIZE).contains(&self.batch_size) {
            return Err(refuse(
                "batchSize",
                format!("must be 1 to {MAX_BATCH_SIZE}"),
            ));
        }
        if self.watch_secs > MAX_WATCH_SECS {
            return Err(refuse(
                "watchSecs",
                format!("must be 0 to {MAX_WATCH_SECS} seconds"),
            ));
        }
        let window = super::config_changes::CONFIRM_WINDOW_SECS;
        if !window.contains(&self.confirm_secs) {
            return Err(refuse(
                "confirmSecs",
                format!("must be {} to {} seconds", window.start(), window.end()),
            ));
        }
        if self.watch_secs >= self.confirm_secs {
            return Err(refuse(
                "watchSecs",
                "must be shorter than confirmSecs: the agent reverts a change not confirmed by then",
            ));
        }
        if !self.max_ban_rate_factor.is_finite() || self.max_ban_rate_factor < 1.0 {
            return Err(refuse("maxBanRateFactor", "must be a number of at least 1"));
        }
        Ok(())
    }
}

/// The batch of each of `hosts` hosts in order: the first `canary` are batch 0, then batches of
/// `batch_size`.
pub fn plan_batches(hosts: usize, canary: u32, batch_size: u32) -> Vec<u32> {
    let canary = canary.max(1) as usize;
    let size = batch_size.max(1) as usize;
    (0..hosts)
        .map(|i| {
            if i < canary {
                0
            } else {
                u32::try_from(1 + (i - canary) / size).unwrap_or(u32::MAX)
            }
        })
        .collect()
}

/// The jails a version's files enable (`enabled = true` in a section of a `jail.d` file): these
/// must run once it is applied. Sections without `enabled` adjust jails whose running is not the
/// version's business.
pub fn enabled_jails(files: &[ProfileFile]) -> Vec<String> {
    let mut jails = Vec::new();
    for file in files {
        let Some(text) = file.content.as_deref() else {
            continue;
        };
        if !file.path.to_string().starts_with("jail.d/") {
            continue;
        }
        let mut section: Option<&str> = None;
        for line in text.lines() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let name = name.trim();
                section = (!matches!(name, "DEFAULT" | "INCLUDES" | "Definition" | "Init"))
                    .then_some(name);
                continue;
            }
            let (Some(jail), Some((key, value))) = (section, line.split_once('=')) else {
                continue;
            };
            let on = matches!(
                value.trim().to_ascii_lowercase().as_str(),
                "true" | "yes" | "1" | "on"
            );
            if key.trim() == "enabled" {
                jails.retain(|j| j != jail);
                if on {
                    jails.push(jail.to_owned());
                }
            }
        }
    }
    jails.sort();
    jails.dedup();
    jails
}

/// The ban-rate check: `bans` over a watch of `watch_secs` against `baseline_bans` over
/// `baseline_secs`, allowed up to `factor` times what the baseline expects (at least
/// [`MIN_EXPECTED_BANS`]).
pub fn ban_rate_check(
    bans: u64,
    watch_secs: u32,
    baseline_bans: u64,
    baseline_secs: u64,
    factor: f64,
) -> Check {
    let rate = if baseline_secs == 0 {
        0.0
    } else {
        baseline_bans as f64 / baseline_secs as f64
    };
    let expected = (rate * f64::from(watch_secs)).max(MIN_EXPECTED_BANS);
    let allowed = expected * factor;
    let ok = bans as f64 <= allowed;
    Check {
        name: CheckName::BanRate,
        ok,
        detail: format!(
            "{bans} ban(s) during the watch; up to {allowed:.1} allowed ({factor} × {expected:.1} expected from {baseline_bans} ban(s) in the baseline)"
        ),
    }
}

/// The config set that brings a host from its `current` files (logical path → text) to a
/// version's: each file that differs, with the version it must have now; empty when the host
/// already has them.
pub fn set_for(
    version: &[ProfileFile],
    current: &std::collections::BTreeMap<String, String>,
) -> Vec<SetFile> {
    version
        .iter()
        .filter_map(|file| {
            let path = file.path.to_string();
            let now = current.get(&path);
            if now.map(String::as_str) == file.content.as_deref() {
                return None;
            }
            Some(SetFile {
                content: file.content.clone().unwrap_or_default(),
                exists: file.content.is_some(),
                version: now.map_or_else(|| "absent".to_owned(), |t| sha256_hex(t.as_bytes())),
                path,
            })
        })
        .collect()
}

/// One host of a rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutHost {
    pub server: ServerId,
    pub server_name: String,
    /// 0 is the canary batch.
    pub batch: u32,
    /// The host's place in the rollout's order.
    pub position: u32,
    pub state: HostState,
    pub checks: Vec<Check>,
    pub error: Option<String>,
    /// The config change that applied the version on the host.
    pub change_id: Option<String>,
    /// When the host's watch began (after its apply).
    pub watch_started_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub id: String,
    pub profile: ProfileName,
    pub version: i64,
    pub state: RolloutState,
    pub plan: RolloutPlan,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Why it stopped or failed.
    pub reason: Option<String>,
    /// Who asked to stop it, while the engine has not acted on it yet.
    pub stop_requested_by: Option<String>,
    /// In rollout order; empty in listings.
    pub hosts: Vec<RolloutHost>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use banhub_proto::config_path::ConfigPath;

    #[test]
    fn batches_start_with_the_canary() {
        let check = |hosts, canary, size, expected: &[u32]| {
            assert_eq!(
                plan_batches(hosts, canary, size),
                expected,
                "{hosts} {canary} {size}"
            );
        };
        check(0, 1, 10, &[]);
        check(1, 1, 10, &[0]);
        check(3, 1, 2, &[0, 1, 1]);
        check(3, 1, 1, &[0, 1, 2]);
        check(5, 2, 2, &[0, 0, 1, 1, 2]);
        check(2, 5, 10, &[0, 0]);
        check(12, 1, 10, &[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
    }

    #[test]
    fn plans_are_checked_field_by_field() {
        let check = |change: fn(&mut RolloutPlan), expected: Result<(), &str>| {
            let mut plan = RolloutPlan::default();
            change(&mut plan);
            assert_eq!(plan.check().map_err(|e| e.field), expected, "{plan:?}");
        };
        check(|_| {}, Ok(()));
        check(|p| p.canary = 0, Err("canary"));
        check(|p| p.batch_size = 0, Err("batchSize"));
        check(|p| p.batch_size = 101, Err("batchSize"));
        check(|p| p.watch_secs = 3601, Err("watchSecs"));
        check(|p| p.confirm_secs = 9, Err("confirmSecs"));
        check(|p| p.confirm_secs = 3601, Err("confirmSecs"));
        check(|p| p.watch_secs = 120, Err("watchSecs"));
        check(|p| p.watch_secs = 0, Ok(()));
        check(|p| p.max_ban_rate_factor = 0.5, Err("maxBanRateFactor"));
        check(
            |p| p.max_ban_rate_factor = f64::NAN,
            Err("maxBanRateFactor"),
        );
    }

    fn file(path: &str, content: &str) -> ProfileFile {
        ProfileFile {
            path: ConfigPath::parse(path).expect("path"),
            content: Some(content.to_owned()),
        }
    }

    #[test]
    fn enabled_jails_are_the_sections_that_enable_themselves() {
        let files = [
            file(
                "jail.d/web.local",
                "[nginx]\nenabled = true\n[sshd]\nmaxretry = 3\n[old]\nenabled = false\n",
            ),
            file(
                "jail.d/banhub-defaults.local",
                "[DEFAULT]\nenabled = true\n",
            ),
            file("filter.d/web.local", "[Definition]\nenabled = true\n"),
            file("jail.d/late.local", "[sshd]\nenabled = yes\n"),
        ];
        assert_eq!(enabled_jails(&files), ["nginx", "sshd"]);
    }

    #[test]
    fn a_set_holds_what_differs_with_the_version_on_the_host() {
        let mut gone = file("jail.d/old.local", "");
        gone.content = None;
        let mut absent = file("jail.d/never.local", "");
        absent.content = None;
        let version = [
            file("jail.d/same.local", "[a]\nenabled = true\n"),
            file("jail.d/new.local", "[b]\nenabled = true\n"),
            file(
                "filter.d/edit.local",
                "[Definition]\nfailregex = x <HOST>\n",
            ),
            gone,
            absent,
        ];
        let current: std::collections::BTreeMap<String, String> = [
            ("jail.d/same.local", "[a]\nenabled = true\n"),
            (
                "filter.d/edit.local",
                "[Definition]\nfailregex = y <HOST>\n",
            ),
            ("jail.d/old.local", "[c]\n"),
            ("jail.local", "[DEFAULT]\n"),
        ]
        .into_iter()
        .map(|(p, t)| (p.to_owned(), t.to_owned()))
        .collect();
        let set = set_for(&version, &current);
        let got: Vec<(&str, bool, &str)> = set
            .iter()
            .map(|f| (f.path.as_str(), f.exists, f.version.as_str()))
            .collect();
        let edit = sha256_hex(b"[Definition]\nfailregex = y <HOST>\n");
        let old = sha256_hex(b"[c]\n");
        assert_eq!(
            got,
            [
                ("jail.d/new.local", true, "absent"),
                ("filter.d/edit.local", true, edit.as_str()),
                ("jail.d/old.local", false, old.as_str()),
            ]
        );
        assert!(set_for(&version[..1], &current).is_empty());
        crate::domain::config_changes::check_set(&set, 60).expect("a valid set");
    }

    #[test]
    fn the_ban_rate_is_held_against_the_baseline_with_a_floor() {
        let check = |bans, watch, baseline, secs, ok| {
            let got = ban_rate_check(bans, watch, baseline, secs, 3.0);
            assert_eq!(got.ok, ok, "{got:?}");
            assert_eq!(got.name, CheckName::BanRate);
        };
        // A quiet host: the floor allows a few bans.
        check(0, 60, 0, 86_400, true);
        check(3, 60, 0, 86_400, true);
        check(4, 60, 0, 86_400, false);
        // 1 ban a second in the baseline: 60 expected over a minute, 180 allowed.
        check(180, 60, 86_400, 86_400, true);
        check(181, 60, 86_400, 86_400, false);
        // No baseline window at all counts as a quiet host.
        check(2, 60, 10, 0, true);
    }

    #[test]
    fn states_round_trip() {
        for state in [
            RolloutState::Running,
            RolloutState::Succeeded,
            RolloutState::Stopped,
            RolloutState::Failed,
            RolloutState::RolledBack,
        ] {
            assert_eq!(RolloutState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).expect("json");
            assert_eq!(json, state.as_str());
        }
        for state in [
            HostState::Pending,
            HostState::Applying,
            HostState::Watching,
            HostState::Confirmed,
            HostState::Failed,
            HostState::RollingBack,
            HostState::RolledBack,
            HostState::Skipped,
        ] {
            assert_eq!(HostState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).expect("json");
            assert_eq!(json, state.as_str());
        }
    }
}
