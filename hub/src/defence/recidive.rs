//! Evaluating the fleet recidive rules for one ban event: the address's ban sightings across the
//! fleet are read once for the widest window, each rule whose scope the event is in is evaluated,
//! and each firing is returned as the bans the engine shares with the rule's targets. The engine
//! remembers a firing (for escalation and the cooldown) with its batch, unless the storm breaker
//! dropped its bans; the firings of the batch so far are passed in, so the next event of the same
//! address in the batch sees them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use banhub_proto::rules::IpOrCidr;
use chrono::{DateTime, Utc};

use super::Defence;
use crate::domain::events::{EventId, EventKind, StoredEvent};
use crate::domain::recidive::{Firing, NewFiring, PastFirings, StoredRule, Verdict};
use crate::domain::{Server, ServerId};
use crate::store::{Store, StoreError};

/// How long the rules read from the store are used before they are read again (a change on this
/// replica takes effect at once; one on another replica within this time).
const RULES_TTL: Duration = Duration::from_secs(2);

/// A ban a recidive rule asks for on each of its targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecidiveBan {
    pub rule_id: i64,
    pub rule_name: String,
    pub ip: IpOrCidr,
    pub targets: Vec<ServerId>,
    /// How long the ban lasts, in seconds: the rule's ladder step for `count`.
    pub duration_secs: u32,
    /// The how-manieth firing in a row for this address.
    pub count: u32,
    /// The event that made the rule fire, and when it happened.
    pub origin_event: EventId,
    pub fired_at: DateTime<Utc>,
    pub origin_server: ServerId,
    pub origin_jail: String,
}

/// The recidive rules, read from the store at most every [`RULES_TTL`].
#[derive(Default)]
pub(super) struct RuleCache(Mutex<Option<(Instant, Arc<Vec<StoredRule>>)>>);

impl RuleCache {
    pub(super) fn invalidate(&self) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    async fn get(&self, store: &Store) -> Result<Arc<Vec<StoredRule>>, StoreError> {
        {
            let cached = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((at, rules)) = cached.as_ref()
                && at.elapsed() < RULES_TTL
            {
                return Ok(Arc::clone(rules));
            }
        }
        let rules = Arc::new(store.list_recidive_rules().await?);
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((Instant::now(), Arc::clone(&rules)));
        Ok(rules)
    }
}

impl Defence {
    /// Whether any recidive rule is enabled.
    pub async fn has_recidive_rules(&self) -> Result<bool, StoreError> {
        let rules = self.0.rules.get(&self.0.store).await?;
        Ok(rules.iter().any(|r| r.rule.spec().enabled))
    }

    /// The recidive bans `event` causes: none unless it is a ban in the scope of an enabled rule
    /// that fires. `servers` are the registered servers (for the rules' label selectors);
    /// `batch` the firings the engine remembers from the events of its batch before this one,
    /// which count before the stored ones. Nothing is remembered here.
    pub async fn recidive(
        &self,
        event: &StoredEvent,
        servers: &[Server],
        batch: &HashMap<(i64, IpOrCidr), (PastFirings, EventId)>,
    ) -> Result<Vec<RecidiveBan>, StoreError> {
        let Some(facts) = event
            .body
            .facts()
            .filter(|_| event.kind() == EventKind::Ban)
        else {
            return Ok(Vec::new());
        };
        let Some(origin) = servers.iter().find(|s| s.id == event.server_id) else {
            return Ok(Vec::new());
        };
        let all = self.0.rules.get(&self.0.store).await?;
        let rules: Vec<&StoredRule> = all
            .iter()
            .filter(|r| r.rule.spec().enabled && r.rule.counts(origin, facts.jail.as_str()))
            .collect();
        let Some(widest) = rules.iter().map(|r| r.rule.window()).max() else {
            return Ok(Vec::new());
        };
        let at = event.occurred_at;
        let sightings = self
            .0
            .store
            .ban_sightings(&facts.ip, at - widest, at)
            .await?;
        let mut bans = Vec::new();
        for stored in rules {
            let remembered = match batch.get(&(stored.id, facts.ip)) {
                Some(remembered) => Some(*remembered),
                None => self.0.store.recidive_firings(stored.id, &facts.ip).await?,
            };
            let firing = match remembered {
                // This event made the rule fire already: the same ban again, which the store
                // records once.
                Some((past, fired_by)) if fired_by == event.id => Firing {
                    count: past.count,
                    duration_secs: stored.rule.step(past.count),
                    servers: 0,
                    failures: 0,
                },
                _ => {
                    let previous = remembered.map(|(past, _)| past);
                    let Verdict::Fire(firing) =
                        stored.rule.evaluate(at, &sightings, servers, previous)
                    else {
                        continue;
                    };
                    tracing::info!(
                        rule = %stored.rule.spec().name,
                        ip = %facts.ip,
                        count = firing.count,
                        servers = firing.servers,
                        failures = firing.failures,
                        duration_secs = firing.duration_secs,
                        "recidive rule fired"
                    );
                    firing
                }
            };
            bans.push(RecidiveBan {
                rule_id: stored.id,
                rule_name: stored.rule.spec().name.clone(),
                ip: facts.ip,
                targets: stored.rule.targets(servers).iter().map(|s| s.id).collect(),
                duration_secs: firing.duration_secs,
                count: firing.count,
                origin_event: event.id,
                fired_at: at,
                origin_server: event.server_id,
                origin_jail: facts.jail.as_str().to_owned(),
            });
        }
        Ok(bans)
    }
}

impl RecidiveBan {
    /// The firing to remember for this ban.
    pub fn firing(&self) -> NewFiring {
        NewFiring {
            rule_id: self.rule_id,
            ip: self.ip,
            count: self.count,
            duration_secs: self.duration_secs,
            at: self.fired_at,
            event: self.origin_event,
        }
    }
}
