//! The engine's hooks into fleet defence: the storm breaker decides whether a source server's
//! shared bans are recorded, and the recidive rules a ban makes fire become shared bans of source
//! `rule`, recorded and delivered like a policy's, never origins themselves.

use std::sync::Arc;

use chrono::TimeDelta;

use super::Sharing;
use super::matcher::{self, Breaker, ShareMatch};
use crate::defence::{Defence, RecidiveBan};
use crate::domain::events::{JailName, StoredEvent};
use crate::domain::sharing::{NewSharedBan, ShareSource, SourceKind};
use crate::domain::{Server, ServerId};
use crate::store::StoreError;

impl Breaker for Defence {
    fn admit(&self, origin: ServerId, bans: usize) -> bool {
        Defence::admit(self, origin, bans)
    }
}

impl Sharing {
    /// Hands the engine fleet defence: its breaker from now on, and its recidive rules.
    pub fn set_defence(&self, defence: Defence) {
        self.set_breaker(Arc::new(defence.clone()));
        // Set once at start-up; a second call keeps the first.
        let _ = self.0.defence.set(defence);
    }

    /// The shared bans the recidive rules make of the origin bans in `batch`.
    pub(super) async fn recidive_bans(
        &self,
        batch: &[StoredEvent],
    ) -> Result<Vec<NewSharedBan>, StoreError> {
        let Some(defence) = self.0.defence.get() else {
            return Ok(Vec::new());
        };
        let origins: Vec<&StoredEvent> = batch
            .iter()
            .filter(|e| matcher::origin_ban(e).is_some())
            .collect();
        if origins.is_empty() || !defence.has_recidive_rules().await? {
            return Ok(Vec::new());
        }
        let servers = self.0.store.list_servers().await?;
        let breaker = self.breaker();
        let mut shared = Vec::new();
        for event in origins {
            for ban in defence.recidive(event, &servers).await? {
                let Some(m) = share_match(event, ban, &servers) else {
                    continue;
                };
                shared.extend(matcher::into_shared_bans(
                    m,
                    &self.0.guards,
                    breaker.as_ref(),
                ));
            }
        }
        Ok(shared)
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
        origin_event: Some(ban.origin_event),
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
