//! The engine's hooks into fleet defence: the storm breaker of each batch (built from the store's
//! window and pauses) decides whether a source server's shared bans are recorded, and the recidive
//! rules a ban makes fire become shared bans of source `rule`, recorded and delivered like a
//! policy's, never origins themselves; a firing whose bans the breaker dropped is not remembered.

use std::collections::HashMap;

use banhub_proto::rules::IpOrCidr;
use chrono::TimeDelta;

use super::Sharing;
use super::matcher::{self, ShareMatch};
use crate::defence::{Defence, RecidiveBan};
use crate::domain::breaker::{StormBreaker, Trip};
use crate::domain::events::{EventId, JailName, StoredEvent};
use crate::domain::recidive::{NewFiring, PastFirings};
use crate::domain::sharing::{NewSharedBan, ShareSource, SourceKind};
use crate::domain::{Server, ServerId};
use crate::store::StoreError;

impl Sharing {
    /// Hands the engine fleet defence: its breaker and its recidive rules.
    pub fn set_defence(&self, defence: Defence) {
        // Set once at start-up; a second call keeps the first.
        let _ = self.0.defence.set(defence);
    }

    /// The storm breaker of `batch`: the window and pauses of its sources as stored at `now_ms`,
    /// or one that admits everything without fleet defence or when `batch` has no origin ban.
    pub(super) async fn breaker_for(
        &self,
        batch: &[StoredEvent],
        now_ms: i64,
    ) -> Result<StormBreaker, StoreError> {
        let Some(defence) = self.0.defence.get() else {
            return Ok(StormBreaker::unlimited());
        };
        let mut sources: Vec<ServerId> = batch
            .iter()
            .filter(|e| matcher::origin_ban(e).is_some())
            .map(|e| e.server_id)
            .collect();
        sources.sort();
        sources.dedup();
        if sources.is_empty() {
            return Ok(StormBreaker::unlimited());
        }
        defence.breaker(&sources, now_ms).await
    }

    /// Announces the pauses the engine stored with its batch.
    pub(super) fn tripped(&self, trips: Vec<Trip>) {
        if let Some(defence) = self.0.defence.get() {
            defence.tripped(trips);
        }
    }

    /// The shared bans the recidive rules make of the origin bans in `batch`, and the firings to
    /// remember with them (none whose bans `breaker` dropped).
    pub(super) async fn recidive_bans(
        &self,
        batch: &[StoredEvent],
        breaker: &mut StormBreaker,
    ) -> Result<(Vec<NewSharedBan>, Vec<NewFiring>), StoreError> {
        let Some(defence) = self.0.defence.get() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let origins: Vec<&StoredEvent> = batch
            .iter()
            .filter(|e| matcher::origin_ban(e).is_some())
            .collect();
        if origins.is_empty() || !defence.has_recidive_rules().await? {
            return Ok((Vec::new(), Vec::new()));
        }
        let servers = self.0.store.list_servers().await?;
        let mut shared = Vec::new();
        let mut firings = Vec::new();
        let mut remembered: HashMap<(i64, IpOrCidr), (PastFirings, EventId)> = HashMap::new();
        for event in origins {
            if breaker.is_paused(event.server_id) {
                continue;
            }
            for ban in defence.recidive(event, &servers, &remembered).await? {
                let firing = ban.firing();
                let Some(m) = share_match(event, ban, &servers) else {
                    continue;
                };
                shared.extend(matcher::into_shared_bans(m, &self.0.guards, breaker));
                if breaker.is_paused(event.server_id) {
                    // The breaker dropped the firing's bans: it did not fire.
                    break;
                }
                remembered.insert(
                    (firing.rule_id, firing.ip),
                    (
                        PastFirings {
                            count: firing.count,
                            last_fired_at: firing.at,
                        },
                        firing.event,
                    ),
                );
                firings.push(firing);
            }
        }
        Ok((shared, firings))
    }
}

/// A recidive ban as a match of source `rule`: on the rule's targets that have an agent, for the
/// rule's step from when the origin banned.
fn share_match(event: &StoredEvent, ban: RecidiveBan, servers: &[Server]) -> Option<ShareMatch> {
    let facts = matcher::origin_ban(event)?;
    let targets = ban
        .targets
        .iter()
        .filter(|id| servers.iter().any(|s| s.id == **id && s.agent_id.is_some()))
        .copied()
        .collect();
    let origin_jail = JailName::parse(&ban.origin_jail).ok()?;
    Some(ShareMatch {
        ip: ban.ip,
        origin_server: ban.origin_server,
        origin_jail,
        origin_event: ban.origin_event,
        source: ShareSource {
            kind: SourceKind::Rule,
            id: ban.rule_id.to_string(),
            name: ban.rule_name,
        },
        step: ban.count,
        expires_at: Some(
            matcher::banned_at(event, facts) + TimeDelta::seconds(i64::from(ban.duration_secs)),
        ),
        targets,
    })
}
