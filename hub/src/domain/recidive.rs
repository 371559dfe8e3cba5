//! Fleet recidive: a rule that bans an address on every target server once it was banned on
//! several servers (or for enough failures summed across servers) within a window, escalating
//! along a ladder of durations for repeat offenders. Pure: the evaluation is a function of the
//! rule, the address's recent ban sightings across the fleet and its previous firings.

use std::collections::{BTreeMap, BTreeSet};

use banhub_proto::rules::{PROBE_JAIL, SHARED_JAIL};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::jail_pattern::JailPattern;
use super::{Labels, Server, ServerId};

/// Longest a rule's name may be, in characters.
pub const MAX_RULE_NAME: usize = 100;
/// Most steps of a ladder.
pub const MAX_LADDER_STEPS: usize = 16;
/// Most jail names or patterns of a rule.
pub const MAX_JAILS: usize = 64;
/// Longest window, lookback, cooldown or ban a rule may name: a year.
pub const MAX_SECS: u32 = 365 * 86_400;
/// Shortest window: a minute.
pub const MIN_WINDOW_SECS: u32 = 60;

/// Servers named by `all: true` or by labels (every one of them carried), as the fleet actions
/// name them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScopeSpec {
    /// Every registered server.
    #[serde(default)]
    pub all: bool,
    /// Servers carrying every one of these labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A recidive rule as an admin writes it (and as it is stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecidiveSpec {
    /// 1 to 100 printable characters.
    pub name: String,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Servers whose bans count.
    pub sources: ScopeSpec,
    /// Jails whose bans count: names, or patterns with `*` and `?`; empty for every jail. The
    /// shared-ban and probe jails never count.
    #[serde(default)]
    pub jails: Vec<String>,
    /// Fire once the address was banned on at least this many distinct servers (2 or more).
    #[serde(default)]
    pub min_servers: Option<u32>,
    /// Fire once the failures of its bans, summed across servers, reach this (1 or more).
    #[serde(default)]
    pub min_failures: Option<u32>,
    /// How far back bans count, in seconds (60 to a year).
    pub window_secs: u32,
    /// Servers that get the ban.
    pub targets: ScopeSpec,
    /// Ban durations in seconds: the k-th firing for an address within `lookbackSecs` of the
    /// previous one gets the k-th step; the last step repeats.
    pub ladder_secs: Vec<u32>,
    /// How long a firing is remembered for escalation, in seconds.
    #[serde(default = "default_lookback")]
    pub lookback_secs: u32,
    /// After a firing, the rule stays quiet for this address at least this long, in seconds.
    #[serde(default = "default_cooldown")]
    pub cooldown_secs: u32,
}

fn enabled_by_default() -> bool {
    true
}

fn default_lookback() -> u32 {
    7 * 86_400
}

fn default_cooldown() -> u32 {
    300
}

/// A field of a rule that breaks its rule; `field` is the JSON name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RuleError {
    pub field: &'static str,
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> RuleError {
    RuleError {
        field,
        message: message.into(),
    }
}

/// Servers selected by a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Labels(BTreeMap<String, String>),
}

impl Scope {
    fn parse(spec: &ScopeSpec, field: &'static str) -> Result<Self, RuleError> {
        match (spec.all, spec.labels.is_empty()) {
            (true, true) => Ok(Self::All),
            (false, false) => Labels::parse(spec.labels.clone())
                .map(|labels| Self::Labels(labels.into_map()))
                .map_err(|e| refuse(field, e.to_string())),
            (true, false) => Err(refuse(
                field,
                "give either `all: true` or `labels`, not both",
            )),
            (false, true) => Err(refuse(
                field,
                "name the servers: `all: true` for every server, or `labels` to select some",
            )),
        }
    }

    pub fn matches(&self, server: &Server) -> bool {
        match self {
            Self::All => true,
            Self::Labels(wanted) => wanted
                .iter()
                .all(|(k, v)| server.labels.as_map().get(k) == Some(v)),
        }
    }
}

/// A checked recidive rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecidiveRule {
    spec: RecidiveSpec,
    sources: Scope,
    targets: Scope,
    jails: Vec<JailPattern>,
}

/// A rule as stored, with its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRule {
    pub id: i64,
    pub rule: RecidiveRule,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A ban of the address seen on some server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    pub server: ServerId,
    pub jail: String,
    pub failures: u32,
    pub at: DateTime<Utc>,
}

/// What a rule remembers of an address it fired for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PastFirings {
    /// Firings in a row, each within the lookback of the one before.
    pub count: u32,
    pub last_fired_at: DateTime<Utc>,
}

/// A firing to remember: rule `rule_id` fired for `ip` at `at`, the `count`-th time in a row, for
/// ban `event`, banning for `duration_secs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFiring {
    pub rule_id: i64,
    pub ip: banhub_proto::rules::IpOrCidr,
    pub count: u32,
    pub duration_secs: u32,
    pub at: DateTime<Utc>,
    pub event: super::events::EventId,
}

/// A rule firing for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    /// 1 for the first firing (within the lookback), 2 for the next, …
    pub count: u32,
    /// How long the ban lasts, in seconds: the ladder's step for `count`.
    pub duration_secs: u32,
    /// Distinct servers and summed failures that made it fire.
    pub servers: u32,
    pub failures: u64,
}

/// Why a rule did not fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    Disabled,
    /// Neither threshold is reached by the bans within the window (after the last firing).
    BelowThreshold,
    /// It fired for this address too recently.
    CoolingDown,
}

/// Whether a rule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fire(Firing),
    Quiet(Quiet),
}

impl RecidiveRule {
    /// Checks a rule as written; the error names the first field that breaks its rule.
    pub fn parse(spec: RecidiveSpec) -> Result<Self, RuleError> {
        let name = spec.name.trim();
        if name.is_empty() || name.chars().count() > MAX_RULE_NAME {
            return Err(refuse(
                "name",
                format!("must be 1 to {MAX_RULE_NAME} characters"),
            ));
        }
        if spec.name.chars().any(char::is_control) {
            return Err(refuse("name", "must not contain control characters"));
        }
        let sources = Scope::parse(&spec.sources, "sources")?;
        let targets = Scope::parse(&spec.targets, "targets")?;
        if spec.jails.len() > MAX_JAILS {
            return Err(refuse(
                "jails",
                format!("at most {MAX_JAILS} names or patterns"),
            ));
        }
        let jails = spec
            .jails
            .iter()
            .map(|raw| JailPattern::parse(raw).map_err(|e| refuse("jails", format!("{raw:?} {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        match (spec.min_servers, spec.min_failures) {
            (None, None) => {
                return Err(refuse(
                    "minServers",
                    "give minServers, minFailures or both: what makes the rule fire",
                ));
            }
            (Some(n), _) if n < 2 => {
                return Err(refuse(
                    "minServers",
                    "must be at least 2 (one server's own bans are its own jails' business)",
                ));
            }
            (_, Some(0)) => return Err(refuse("minFailures", "must be at least 1")),
            _ => {}
        }
        if !(MIN_WINDOW_SECS..=MAX_SECS).contains(&spec.window_secs) {
            return Err(refuse(
                "windowSecs",
                format!("must be between {MIN_WINDOW_SECS} and {MAX_SECS} seconds"),
            ));
        }
        if spec.ladder_secs.is_empty() || spec.ladder_secs.len() > MAX_LADDER_STEPS {
            return Err(refuse(
                "ladderSecs",
                format!("must have 1 to {MAX_LADDER_STEPS} steps"),
            ));
        }
        if let Some(bad) = spec
            .ladder_secs
            .iter()
            .find(|s| !(1..=MAX_SECS).contains(*s))
        {
            return Err(refuse(
                "ladderSecs",
                format!("step {bad} is not between 1 and {MAX_SECS} seconds"),
            ));
        }
        if spec.lookback_secs > MAX_SECS {
            return Err(refuse(
                "lookbackSecs",
                format!("must be at most {MAX_SECS} seconds"),
            ));
        }
        if spec.cooldown_secs > MAX_SECS {
            return Err(refuse(
                "cooldownSecs",
                format!("must be at most {MAX_SECS} seconds"),
            ));
        }
        let spec = RecidiveSpec {
            name: name.to_owned(),
            ..spec
        };
        Ok(Self {
            spec,
            sources,
            targets,
            jails,
        })
    }

    pub fn spec(&self) -> &RecidiveSpec {
        &self.spec
    }

    pub fn window(&self) -> TimeDelta {
        TimeDelta::seconds(i64::from(self.spec.window_secs))
    }

    /// Whether a ban on `server` in `jail` counts for this rule. Shared and probe bans never do:
    /// a ban the fleet made is no evidence of another attack.
    pub fn counts(&self, server: &Server, jail: &str) -> bool {
        jail != SHARED_JAIL
            && jail != PROBE_JAIL
            && self.sources.matches(server)
            && (self.jails.is_empty() || self.jails.iter().any(|p| p.matches(jail)))
    }

    /// The servers that get the rule's bans.
    pub fn targets<'a>(&self, servers: &'a [Server]) -> Vec<&'a Server> {
        servers.iter().filter(|s| self.targets.matches(s)).collect()
    }

    /// The ladder's step for the `count`-th firing (1-based); the last step repeats.
    pub fn step(&self, count: u32) -> u32 {
        let ladder = &self.spec.ladder_secs;
        let index = usize::try_from(count.max(1) - 1).unwrap_or(usize::MAX);
        ladder
            .get(index)
            .or_else(|| ladder.last())
            .copied()
            .unwrap_or(0)
    }

    /// Whether the rule fires for an address at `at`, given its ban `sightings` across the fleet
    /// (any order; those outside the rule's scope or window are left out), the registered
    /// `servers`, and what the rule remembers of the address. Bans up to the last firing were
    /// used by it and do not count again, so one burst fires once.
    pub fn evaluate(
        &self,
        at: DateTime<Utc>,
        sightings: &[Sighting],
        servers: &[Server],
        previous: Option<PastFirings>,
    ) -> Verdict {
        if !self.spec.enabled {
            return Verdict::Quiet(Quiet::Disabled);
        }
        let cooldown = TimeDelta::seconds(i64::from(self.spec.cooldown_secs));
        if let Some(past) = previous
            && at < past.last_fired_at + cooldown
        {
            return Verdict::Quiet(Quiet::CoolingDown);
        }
        let from = at - self.window();
        let mut banned_on = BTreeSet::new();
        let mut failures = 0u64;
        for sighting in sightings {
            let in_window = sighting.at >= from
                && sighting.at <= at
                && previous.is_none_or(|p| sighting.at > p.last_fired_at);
            if !in_window {
                continue;
            }
            let Some(server) = servers.iter().find(|s| s.id == sighting.server) else {
                continue;
            };
            if !self.counts(server, &sighting.jail) {
                continue;
            }
            banned_on.insert(sighting.server);
            failures += u64::from(sighting.failures);
        }
        let servers_reached = self
            .spec
            .min_servers
            .is_some_and(|n| banned_on.len() >= n as usize);
        let failures_reached = self
            .spec
            .min_failures
            .is_some_and(|m| failures >= u64::from(m));
        if !servers_reached && !failures_reached {
            return Verdict::Quiet(Quiet::BelowThreshold);
        }
        let lookback = TimeDelta::seconds(i64::from(self.spec.lookback_secs));
        let count = match previous {
            Some(past) if at <= past.last_fired_at + lookback => past.count.saturating_add(1),
            _ => 1,
        };
        Verdict::Fire(Firing {
            count,
            duration_secs: self.step(count),
            servers: u32::try_from(banned_on.len()).unwrap_or(u32::MAX),
            failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RecidiveSpec {
        RecidiveSpec {
            name: "spread ssh".to_owned(),
            enabled: true,
            sources: ScopeSpec {
                all: true,
                labels: BTreeMap::new(),
            },
            jails: vec!["ssh*".to_owned()],
            min_servers: Some(2),
            min_failures: None,
            window_secs: 3600,
            targets: ScopeSpec {
                all: true,
                labels: BTreeMap::new(),
            },
            ladder_secs: vec![3600, 86_400, 604_800],
            lookback_secs: 7 * 86_400,
            cooldown_secs: 300,
        }
    }

    fn rule(spec: RecidiveSpec) -> RecidiveRule {
        RecidiveRule::parse(spec).expect("a valid rule")
    }

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("a time")
    }

    fn seen(server: &Server, jail: &str, failures: u32, at: i64) -> Sighting {
        Sighting {
            server: server.id,
            jail: jail.to_owned(),
            failures,
            at: t(at),
        }
    }

    fn fleet() -> Vec<Server> {
        vec![
            Server::example("a", &[("env", "prod")]),
            Server::example("b", &[("env", "prod")]),
            Server::example("c", &[("env", "test")]),
        ]
    }

    /// Checks that `spec` changed by `edit` is refused naming `field`.
    fn check_refused(edit: impl FnOnce(&mut RecidiveSpec), field: &str) {
        let mut spec = spec();
        edit(&mut spec);
        let err = RecidiveRule::parse(spec).expect_err("refused");
        assert_eq!(err.field, field, "{err}");
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        check_refused(|s| s.name = "  ".to_owned(), "name");
        check_refused(|s| s.name = "x".repeat(101), "name");
        check_refused(|s| s.name = "a\nb".to_owned(), "name");
        check_refused(|s| s.sources.all = false, "sources");
        check_refused(
            |s| {
                s.targets.labels.insert("env".to_owned(), "prod".to_owned());
            },
            "targets",
        );
        check_refused(
            |s| {
                s.sources.all = false;
                s.sources
                    .labels
                    .insert("bad key!".to_owned(), "x".to_owned());
            },
            "sources",
        );
        check_refused(|s| s.jails = vec!["../etc".to_owned()], "jails");
        check_refused(|s| s.jails = vec![String::new()], "jails");
        check_refused(|s| s.jails = vec!["j".to_owned(); 65], "jails");
        check_refused(|s| s.min_servers = None, "minServers");
        check_refused(|s| s.min_servers = Some(1), "minServers");
        check_refused(|s| s.min_failures = Some(0), "minFailures");
        check_refused(|s| s.window_secs = 59, "windowSecs");
        check_refused(|s| s.window_secs = MAX_SECS + 1, "windowSecs");
        check_refused(|s| s.ladder_secs.clear(), "ladderSecs");
        check_refused(|s| s.ladder_secs = vec![60; 17], "ladderSecs");
        check_refused(|s| s.ladder_secs = vec![60, 0], "ladderSecs");
        check_refused(|s| s.lookback_secs = MAX_SECS + 1, "lookbackSecs");
        check_refused(|s| s.cooldown_secs = MAX_SECS + 1, "cooldownSecs");
    }

    #[test]
    fn a_rule_needs_only_one_threshold() {
        let mut only_failures = spec();
        only_failures.min_servers = None;
        only_failures.min_failures = Some(10);
        assert!(RecidiveRule::parse(only_failures).is_ok());
    }

    #[test]
    fn the_name_is_kept_trimmed() {
        let mut s = spec();
        s.name = "  spread ssh ".to_owned();
        assert_eq!(rule(s).spec().name, "spread ssh");
    }

    #[test]
    fn bans_on_enough_distinct_servers_within_the_window_fire() {
        let servers = fleet();
        let rule = rule(spec());
        let one = [seen(&servers[0], "sshd", 5, 0)];
        assert_eq!(
            rule.evaluate(t(10), &one, &servers, None),
            Verdict::Quiet(Quiet::BelowThreshold)
        );
        // Twice on one server is still one server.
        let same = [
            seen(&servers[0], "sshd", 5, 0),
            seen(&servers[0], "sshd", 5, 5),
        ];
        assert_eq!(
            rule.evaluate(t(10), &same, &servers, None),
            Verdict::Quiet(Quiet::BelowThreshold)
        );
        let two = [
            seen(&servers[0], "sshd", 5, 0),
            seen(&servers[2], "sshd", 3, 5),
        ];
        assert_eq!(
            rule.evaluate(t(10), &two, &servers, None),
            Verdict::Fire(Firing {
                count: 1,
                duration_secs: 3600,
                servers: 2,
                failures: 8,
            })
        );
    }

    #[test]
    fn bans_outside_the_window_scope_or_jails_do_not_count() {
        let servers = fleet();
        let mut s = spec();
        s.sources = ScopeSpec {
            all: false,
            labels: [("env".to_owned(), "prod".to_owned())].into(),
        };
        let rule = rule(s);
        let check = |sightings: &[Sighting]| {
            assert_eq!(
                rule.evaluate(t(4000), sightings, &servers, None),
                Verdict::Quiet(Quiet::BelowThreshold),
                "{sightings:?}"
            );
        };
        let a = seen(&servers[0], "sshd", 5, 3900);
        // Too old: the window is an hour.
        check(&[a.clone(), seen(&servers[1], "sshd", 5, 300)]);
        // Not a source: server c is labelled env=test.
        check(&[a.clone(), seen(&servers[2], "sshd", 5, 3950)]);
        // Not a jail of the rule.
        check(&[a.clone(), seen(&servers[1], "nginx", 5, 3950)]);
        // The fleet's own bans are never evidence.
        check(&[a.clone(), seen(&servers[1], SHARED_JAIL, 5, 3950)]);
        check(&[a.clone(), seen(&servers[1], PROBE_JAIL, 5, 3950)]);
        // A server no longer registered.
        let gone = Server::example("gone", &[("env", "prod")]);
        check(&[a.clone(), seen(&gone, "sshd", 5, 3950)]);
        // From the future of the evaluation (a later event not yet reached).
        check(&[a, seen(&servers[1], "sshd", 5, 4001)]);
    }

    #[test]
    fn failures_summed_across_servers_fire_below_each_hosts_maxretry() {
        let servers = fleet();
        let mut s = spec();
        s.min_servers = None;
        s.min_failures = Some(10);
        let rule = rule(s);
        let below = [
            seen(&servers[0], "sshd", 4, 0),
            seen(&servers[1], "sshd", 5, 1),
        ];
        assert_eq!(
            rule.evaluate(t(2), &below, &servers, None),
            Verdict::Quiet(Quiet::BelowThreshold)
        );
        let reached = [
            seen(&servers[0], "sshd", 4, 0),
            seen(&servers[1], "sshd", 5, 1),
            seen(&servers[0], "sshd", 1, 2),
        ];
        let Verdict::Fire(firing) = rule.evaluate(t(2), &reached, &servers, None) else {
            panic!("the sum reached 10");
        };
        assert_eq!((firing.failures, firing.servers), (10, 2));
    }

    #[test]
    fn either_threshold_fires_when_both_are_set() {
        let servers = fleet();
        let mut s = spec();
        s.min_servers = Some(3);
        s.min_failures = Some(10);
        let rule = rule(s);
        let by_failures = [
            seen(&servers[0], "sshd", 6, 0),
            seen(&servers[1], "sshd", 6, 1),
        ];
        assert!(matches!(
            rule.evaluate(t(2), &by_failures, &servers, None),
            Verdict::Fire(_)
        ));
        let by_servers = [
            seen(&servers[0], "sshd", 1, 0),
            seen(&servers[1], "sshd", 1, 1),
            seen(&servers[2], "sshd", 1, 2),
        ];
        assert!(matches!(
            rule.evaluate(t(3), &by_servers, &servers, None),
            Verdict::Fire(_)
        ));
    }

    #[test]
    fn repeat_offenders_climb_the_ladder_and_stay_on_its_last_step() {
        let servers = fleet();
        let rule = rule(spec());
        let burst = |at: i64| {
            [
                seen(&servers[0], "sshd", 5, at),
                seen(&servers[1], "sshd", 5, at + 1),
            ]
        };
        let mut previous = None;
        let mut durations = Vec::new();
        for round in 0..5 {
            let at = round * 7200;
            let Verdict::Fire(firing) = rule.evaluate(t(at + 1), &burst(at), &servers, previous)
            else {
                panic!("round {round} fires");
            };
            assert_eq!(firing.count, u32::try_from(round + 1).expect("small"));
            durations.push(firing.duration_secs);
            previous = Some(PastFirings {
                count: firing.count,
                last_fired_at: t(at + 1),
            });
        }
        assert_eq!(durations, [3600, 86_400, 604_800, 604_800, 604_800]);
    }

    #[test]
    fn escalation_forgets_a_firing_older_than_the_lookback() {
        let servers = fleet();
        let rule = rule(spec());
        let previous = Some(PastFirings {
            count: 2,
            last_fired_at: t(0),
        });
        let later = 7 * 86_400 + 10;
        let burst = [
            seen(&servers[0], "sshd", 5, later - 5),
            seen(&servers[1], "sshd", 5, later),
        ];
        let Verdict::Fire(firing) = rule.evaluate(t(later), &burst, &servers, previous) else {
            panic!("fires");
        };
        assert_eq!((firing.count, firing.duration_secs), (1, 3600));
    }

    #[test]
    fn one_burst_fires_once() {
        let servers = fleet();
        let rule = rule(spec());
        let burst = [
            seen(&servers[0], "sshd", 5, 0),
            seen(&servers[1], "sshd", 5, 1),
        ];
        assert!(matches!(
            rule.evaluate(t(1), &burst, &servers, None),
            Verdict::Fire(_)
        ));
        let previous = Some(PastFirings {
            count: 1,
            last_fired_at: t(1),
        });
        // A third server's ban within the cooldown: quiet.
        let more = [
            burst[0].clone(),
            burst[1].clone(),
            seen(&servers[2], "sshd", 5, 100),
        ];
        assert_eq!(
            rule.evaluate(t(100), &more, &servers, previous),
            Verdict::Quiet(Quiet::CoolingDown)
        );
        // Past the cooldown, the bans the firing used do not count again: one new ban alone is
        // below the threshold.
        assert_eq!(
            rule.evaluate(t(400), &more, &servers, previous),
            Verdict::Quiet(Quiet::BelowThreshold)
        );
        // Two new ones fire again, one step up.
        let again = [
            burst[0].clone(),
            burst[1].clone(),
            seen(&servers[2], "sshd", 5, 390),
            seen(&servers[0], "sshd", 5, 400),
        ];
        let Verdict::Fire(firing) = rule.evaluate(t(400), &again, &servers, previous) else {
            panic!("fires again");
        };
        assert_eq!(firing.count, 2);
    }

    #[test]
    fn a_disabled_rule_never_fires() {
        let servers = fleet();
        let mut s = spec();
        s.enabled = false;
        let burst = [
            seen(&servers[0], "sshd", 5, 0),
            seen(&servers[1], "sshd", 5, 1),
        ];
        assert_eq!(
            rule(s).evaluate(t(1), &burst, &servers, None),
            Verdict::Quiet(Quiet::Disabled)
        );
    }

    #[test]
    fn targets_are_the_servers_the_scope_selects() {
        let servers = fleet();
        let mut s = spec();
        s.targets = ScopeSpec {
            all: false,
            labels: [("env".to_owned(), "prod".to_owned())].into(),
        };
        let names: Vec<&str> = rule(s)
            .targets(&servers)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(rule(spec()).targets(&servers).len(), 3);
    }

    #[test]
    fn the_spec_reads_from_camel_case_json_with_defaults() {
        let spec: RecidiveSpec = serde_json::from_str(
            r#"{"name":"r","sources":{"all":true},"minServers":2,"windowSecs":600,
                "targets":{"labels":{"env":"prod"}},"ladderSecs":[60]}"#,
        )
        .expect("parses");
        assert!(spec.enabled);
        assert_eq!(spec.lookback_secs, 7 * 86_400);
        assert_eq!(spec.cooldown_secs, 300);
        assert!(spec.jails.is_empty());
        assert!(RecidiveRule::parse(spec).is_ok());
    }
}
