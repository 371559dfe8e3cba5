//! Timed bans: a manual or fleet ban that carries a duration, lifted by the hub at its time.
//! fail2ban 1.0 takes no ban time per `banip` (a ban lasts the jail's `bantime`), so the schedule
//! is the hub's: each ban is recorded in the store (`timed_bans`) before it is sent, and the
//! lifter, a singleton job, unbans it when due through whichever replica holds the agent. An agent
//! that is away is tried again until it comes back; a hub that was down lifts what fell due
//! meanwhile at its start. Every lift is written to the audit log; fail2ban's unban reaches the
//! events through the agent as any other. A later plain ban or unban of the same address in the
//! same jail, or an unban of it everywhere, ends the schedule, so it never lifts a ban the
//! operator meant to keep; a later timed ban replaces it.

use std::sync::Arc;
use std::time::Duration;

use banhub_proto::rules::{IpOrCidr, JailName};
use chrono::{DateTime, Utc};

use crate::auth::{AuditRecord, Auth, Outcome};
use crate::domain::ServerId;
use crate::fleet::{
    ActionError, AgentErrorKind, BanOutcome, Fleet, FleetBan, FleetError, ServerActionResult,
};
use crate::store::fleet_actions::{FleetActionRecord, TargetState};
use crate::store::timed_bans::{TimedBan, TimedBanFilter, TimedBanState};
use crate::store::{Store, StoreError};

/// Longest duration a ban may carry: one year.
pub const MAX_DURATION_SECS: u64 = 365 * 24 * 3600;
/// How often the lifter looks for bans that are due.
const PASS_EVERY: Duration = Duration::from_secs(1);
/// Bans lifted per pass at most; the rest wait for the next pass.
const PASS_LIMIT: u64 = 200;
/// Longest wait before trying a lift again after a failure worth retrying.
const MAX_RETRY_SECS: u64 = 15;
/// Who the audit log names for a lift.
const LIFTER: &str = "banhub";

/// The timed bans' service: schedules bans with a duration and lifts them.
#[derive(Debug, Clone)]
pub struct TimedBans(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    store: Store,
    fleet: Fleet,
    auth: Auth,
}

impl TimedBans {
    pub fn new(store: Store, fleet: Fleet, auth: Auth) -> Self {
        Self(Arc::new(Inner { store, fleet, auth }))
    }

    /// Bans `ip` in `jail` on one server; with a duration, the hub lifts it at its end (returned).
    /// Without one, any earlier schedule of that address in that jail ends: the ban stays.
    pub async fn ban(
        &self,
        server: ServerId,
        jail: &JailName,
        ip: IpOrCidr,
        duration: Option<Duration>,
        guard_override: bool,
        by: &str,
    ) -> Result<(BanOutcome, Option<DateTime<Utc>>), FleetError> {
        let store = &self.0.store;
        let Some(duration) = duration else {
            let outcome = self
                .0
                .fleet
                .set_ban(server, Some(jail), ip, true, guard_override, by)
                .await?;
            store
                .cancel_timed_bans(&[server], Some(jail.as_str()), &ip.to_string())
                .await?;
            return Ok((outcome, None));
        };
        // Recorded first: a hub that stops right after the ban still lifts it.
        let ends_at = end_of(duration);
        let record = new_timed_ban(server, jail.as_str(), &ip.to_string(), ends_at, by);
        store
            .insert_timed_bans(std::slice::from_ref(&record))
            .await?;
        match self
            .0
            .fleet
            .set_ban(server, Some(jail), ip, true, guard_override, by)
            .await
        {
            Ok(outcome) => Ok((outcome, Some(ends_at))),
            Err(e) => {
                store.delete_timed_bans(&[record.id]).await?;
                Err(e)
            }
        }
    }

    /// Lifts the ban of `ip` in `jail` on one server, and its schedule with it.
    pub async fn unban(
        &self,
        server: ServerId,
        jail: &JailName,
        ip: IpOrCidr,
        by: &str,
    ) -> Result<BanOutcome, FleetError> {
        let outcome = self
            .0
            .fleet
            .set_ban(server, Some(jail), ip, false, false, by)
            .await?;
        self.0
            .store
            .cancel_timed_bans(&[server], Some(jail.as_str()), &ip.to_string())
            .await?;
        Ok(outcome)
    }

    /// Lifts the ban of `ip` in every jail of every server ("unban everywhere"), and ends the
    /// schedules of that address on every server whose unban succeeded; a server that could not
    /// be reached keeps its schedule, so the lifter still lifts the ban there at its time.
    pub async fn unban_everywhere(
        &self,
        ip: IpOrCidr,
        by: &str,
    ) -> Result<Vec<ServerActionResult>, FleetError> {
        let results = self.0.fleet.unban_everywhere(ip, by).await?;
        let unbanned: Vec<ServerId> = results
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| ServerId::parse(&r.server_id).ok())
            .collect();
        self.0
            .store
            .cancel_timed_bans(&unbanned, None, &ip.to_string())
            .await?;
        Ok(results)
    }

    /// A fleet ban or unban; a ban with a duration is lifted on every target at its end
    /// (returned), and stays queued for offline servers no longer than that. A plain ban or an
    /// unban ends the schedules of that address on the selected servers.
    pub async fn fleet_ban(
        &self,
        mut request: FleetBan,
        duration: Option<Duration>,
        by: &str,
    ) -> Result<(FleetActionRecord, Option<DateTime<Utc>>), ActionError> {
        let store = &self.0.store;
        let servers: Vec<ServerId> = store
            .list_servers()
            .await?
            .into_iter()
            .filter(|s| request.selector.matches(s))
            .map(|s| s.id)
            .collect();
        let ip = request.ip.to_string();
        let jail = request.jail.as_ref().map(ToString::to_string);
        let (Some(duration), true, Some(jail)) = (duration, request.ban, jail.clone()) else {
            let action = self.0.fleet.fleet_ban(request, by).await?;
            store
                .cancel_timed_bans(&servers, jail.as_deref(), &ip)
                .await?;
            return Ok((action, None));
        };
        let ends_at = end_of(duration);
        request.queue_for = request.queue_for.min(duration);
        let records: Vec<TimedBan> = servers
            .iter()
            .map(|server| new_timed_ban(*server, &jail, &ip, ends_at, by))
            .collect();
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        store.insert_timed_bans(&records).await?;
        match self.0.fleet.fleet_ban(request, by).await {
            Ok(action) => {
                store.link_timed_bans(&ids, &action.id).await?;
                Ok((action, Some(ends_at)))
            }
            Err(e) => {
                store.delete_timed_bans(&ids).await?;
                Err(e)
            }
        }
    }

    /// Timed bans matching the filter.
    pub async fn list(&self, filter: &TimedBanFilter) -> Result<Vec<TimedBan>, StoreError> {
        self.0.store.timed_bans(filter).await
    }

    /// When the timed bans of these fleet actions end, by action id.
    pub async fn ends_of_actions(
        &self,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, DateTime<Utc>>, StoreError> {
        self.0.store.timed_ban_ends(ids).await
    }

    /// The lifter: lifts every ban that is due, each pass, until the job ends.
    pub async fn run(self) {
        let mut ticker = tokio::time::interval(PASS_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let due = match self.0.store.due_timed_bans(Utc::now(), PASS_LIMIT).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the timed bans that are due");
                    continue;
                }
            };
            futures::future::join_all(due.into_iter().map(|ban| self.lift(ban))).await;
        }
    }

    /// Lifts one due ban and records how it went; a fleet target still on its way waits.
    async fn lift(&self, ban: TimedBan) {
        if self.in_flight(&ban).await {
            return;
        }
        let result = match (IpOrCidr::parse(&ban.ip), JailName::parse(&ban.jail)) {
            (Ok(ip), Ok(jail)) => {
                self.0
                    .fleet
                    .set_ban(ban.server, Some(&jail), ip, false, false, &ban.requested_by)
                    .await
            }
            _ => Err(FleetError::Protocol(format!(
                "the stored address {:?} or jail {:?} breaks its rule",
                ban.ip, ban.jail
            ))),
        };
        let now = Utc::now();
        let store = &self.0.store;
        let settled = match &result {
            Ok(_) => store
                .finish_timed_ban(&ban.id, TimedBanState::Lifted, None, now)
                .await
                .map(Some),
            Err(e) if retryable(e) => {
                let wait = 1u64 << ban.attempts.min(4);
                let next = now + chrono::Duration::seconds(wait.min(MAX_RETRY_SECS) as i64);
                store
                    .retry_timed_ban(&ban.id, next, &e.to_string())
                    .await
                    .map(|()| None)
            }
            Err(e) => store
                .finish_timed_ban(&ban.id, TimedBanState::Failed, Some(&e.to_string()), now)
                .await
                .map(Some),
        };
        match settled {
            Ok(Some(true)) => self.audit(&ban, &result).await,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(timed_ban = %ban.id, error = %e, "cannot record a timed ban's lift")
            }
        }
    }

    /// Whether the ban's fleet target has not reached its agent yet (queued or on its way): its
    /// lift waits until the target settles, so the ban never lands after its own lift.
    async fn in_flight(&self, ban: &TimedBan) -> bool {
        let Some(action) = &ban.fleet_action_id else {
            return false;
        };
        match self.0.fleet.fleet_action(action).await {
            Ok(Some(action)) => action.targets.iter().any(|t| {
                t.server_id == ban.server
                    && matches!(t.state, TargetState::Queued | TargetState::Delivered)
            }),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(timed_ban = %ban.id, error = %e, "cannot read a timed ban's fleet action");
                true
            }
        }
    }

    async fn audit(&self, ban: &TimedBan, result: &Result<BanOutcome, FleetError>) {
        let mut detail = serde_json::Map::new();
        detail.insert("timedBan".into(), ban.id.clone().into());
        detail.insert("ip".into(), ban.ip.clone().into());
        detail.insert("jail".into(), ban.jail.clone().into());
        detail.insert("endsAt".into(), ban.ends_at.to_rfc3339().into());
        detail.insert("bannedBy".into(), ban.requested_by.clone().into());
        if let Some(action) = &ban.fleet_action_id {
            detail.insert("fleetAction".into(), action.clone().into());
        }
        let (status, outcome) = match result {
            Ok(change) => {
                detail.insert("changed".into(), change.changed.into());
                (200, Outcome::Ok)
            }
            Err(e) => {
                detail.insert("error".into(), e.to_string().into());
                (502, Outcome::Failed)
            }
        };
        self.0
            .auth
            .record(AuditRecord {
                id: 0,
                at: Utc::now(),
                actor: LIFTER.to_owned(),
                actor_name: "banhub (timed ban)".to_owned(),
                actor_kind: "system".to_owned(),
                action: "timed ban lifted".to_owned(),
                path: format!("/api/jails/{}/unban/{}", ban.jail, ban.ip),
                server_id: Some(ban.server.to_string()),
                status,
                outcome,
                detail,
                client_addr: None,
            })
            .await;
    }
}

/// Whether a failed lift may succeed later: the agent or fail2ban was away, or the store was.
fn retryable(e: &FleetError) -> bool {
    match e {
        FleetError::Offline
        | FleetError::Timeout(_)
        | FleetError::SessionEnded
        | FleetError::FilterTestsBusy
        | FleetError::Store(_) => true,
        FleetError::Agent { kind, .. } => matches!(
            kind,
            AgentErrorKind::Fail2banUnavailable | AgentErrorKind::Internal
        ),
        FleetError::UnknownServer(_) | FleetError::NotEnrolled | FleetError::Protocol(_) => false,
    }
}

/// When a ban of `duration` from now ends, to the millisecond the store keeps.
fn end_of(duration: Duration) -> DateTime<Utc> {
    let end = Utc::now() + chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::zero());
    DateTime::from_timestamp_millis(end.timestamp_millis()).unwrap_or(end)
}

fn new_timed_ban(
    server: ServerId,
    jail: &str,
    ip: &str,
    ends_at: DateTime<Utc>,
    by: &str,
) -> TimedBan {
    TimedBan {
        id: uuid::Uuid::now_v7().to_string(),
        server,
        jail: jail.to_owned(),
        ip: ip.to_owned(),
        ends_at,
        state: TimedBanState::Active,
        fleet_action_id: None,
        requested_by: by.to_owned(),
        created_at: Utc::now(),
        attempts: 0,
        error: None,
        finished_at: None,
    }
}
