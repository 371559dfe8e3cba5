//! Delivery diagnostics and the end-to-end probe.
//!
//! Diagnostics: the agent's `GetDeliveryStatus` (its relay, its spool, and whether each running
//! jail runs the banhub action) joined with what the hub knows: when it last stored an event of
//! the server and the last probe's result.
//!
//! The probe proves the whole event path: the agent bans a documentation address in its probe
//! jail (`banhub-probe`, whose only action is banhub's), fail2ban runs the action, the action posts
//! to the agent's relay, the event goes through the spool and the session into the hub's store —
//! and the hub waits until it has committed it; then the same for the unban. Probe events live in
//! the reserved probe jail, which lists, stats and insights leave out unless asked for it.
//! Results (the last one per server) are kept in memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use banhub_proto::rules::{IpOrCidr, JailName, PROBE_JAIL};
use banhub_proto::v1::{GetDeliveryStatus, ProbeStep, ProbeStepReport, command, command_result};
use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use super::{Fleet, FleetError};
use crate::config::ProbeConfig;
use crate::domain::ServerId;
use crate::domain::events::{EventFilter, EventKind, StoredEvent};
use crate::events::EventsError;

/// How often a waiting probe also looks in the store, in case the live feed lagged.
const STORE_POLL: Duration = Duration::from_millis(250);

/// The callback relay on the host.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelayDiagnostics {
    /// Whether the agent runs its relay at all (`relay.enabled`).
    pub enabled: bool,
    /// Whether the relay accepts connections.
    pub listening: bool,
    /// Where it listens (the action's `relay_url`).
    pub listen: Option<String>,
    /// When the relay last stored a callback (since the agent started).
    pub last_callback_at: Option<DateTime<Utc>>,
    /// Callbacks stored since the agent started.
    pub callbacks_accepted: u64,
    /// Callbacks refused since the agent started (wrong secret, bad body, ...).
    pub callbacks_rejected: u64,
}

/// The agent's durable event spool.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpoolDiagnostics {
    pub epoch: u64,
    /// Highest sequence number written.
    pub last_seq: u64,
    /// Highest sequence number the hub acknowledged.
    pub acked_seq: u64,
    /// Events waiting for the hub's acknowledgement.
    pub depth: u64,
    /// When the oldest unacknowledged event was received.
    pub oldest_unacked_at: Option<DateTime<Utc>>,
    /// Its age in seconds, now.
    pub oldest_unacked_age_secs: Option<f64>,
}

/// One running jail.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailDelivery {
    pub jail: String,
    /// Whether fail2ban runs the banhub action in this jail (`get <jail> actions`).
    pub action_attached: bool,
    /// The jail's running actions.
    pub actions: Vec<String>,
}

/// How a server's ban events reach the hub.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryReport {
    pub server_id: String,
    pub relay: RelayDiagnostics,
    /// Absent when the agent runs no relay.
    pub spool: Option<SpoolDiagnostics>,
    pub fail2ban_running: bool,
    /// Why fail2ban could not be asked about its jails.
    pub fail2ban_error: Option<String>,
    /// Whether `action.d/banhub.conf` is in the host's fail2ban configuration.
    pub action_installed: bool,
    /// Every running jail, the probe jail included.
    pub jails: Vec<JailDelivery>,
    /// Running jails without the banhub action: their bans never reach the hub.
    pub unattached_jails: Vec<String>,
    /// When the hub last stored an event of this server (probe events left out).
    pub last_event_received_at: Option<DateTime<Utc>>,
    /// The last end-to-end probe of this server since the hub started.
    pub last_probe: Option<ProbeResult>,
}

/// Why a probe failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeFailureCode {
    /// The host has no probe jail: `banhub-agent install-action` was not run (or was undone).
    ProbeJailMissing,
    /// The probe jail does not run the banhub action.
    ActionMissing,
    /// The agent's callback relay is off or not listening.
    RelayDown,
    /// fail2ban did not answer the agent.
    Fail2banUnavailable,
    /// The agent refused or failed the probe step.
    AgentError,
    /// The ban event did not reach the hub in time.
    BanTimeout,
    /// The unban event did not reach the hub in time.
    UnbanTimeout,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeFailure {
    pub code: ProbeFailureCode,
    pub message: String,
}

/// One step of a probe with its duration.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeStepTiming {
    /// `ban` (the agent had fail2ban ban the address), `banEvent` (from the ban's start until the
    /// hub committed the event), `unban`, `unbanEvent`.
    pub step: String,
    pub ms: f64,
}

/// The result of an end-to-end probe.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeResult {
    pub ok: bool,
    /// The documentation address banned and unbanned in the probe jail.
    pub ip: String,
    pub jail: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// Run by the schedule (`probe.interval_secs`) rather than on demand.
    pub scheduled: bool,
    pub steps: Vec<ProbeStepTiming>,
    pub failure: Option<ProbeFailure>,
}

/// The probe's configuration and the last result per server.
#[derive(Debug, Default)]
pub(crate) struct ProbeState {
    config: ProbeConfig,
    last: Mutex<HashMap<ServerId, ProbeResult>>,
    /// Servers with a probe running, so two never overlap on one host.
    running: Mutex<std::collections::HashSet<ServerId>>,
}

impl ProbeState {
    pub(crate) fn new(config: ProbeConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    fn last(&self, server: ServerId) -> Option<ProbeResult> {
        lock(&self.last).get(&server).cloned()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn events_error(e: EventsError) -> FleetError {
    match e {
        EventsError::Store(e) => FleetError::Store(e),
        other => FleetError::Protocol(other.to_string()),
    }
}

fn at_ms(ms: i64) -> Option<DateTime<Utc>> {
    (ms > 0)
        .then(|| Utc.timestamp_millis_opt(ms).single())
        .flatten()
}

/// A random address of TEST-NET-1 (192.0.2.0/24, RFC 5737), never .0 or .255.
fn probe_address() -> IpOrCidr {
    let host = rand::random_range(1u8..=254);
    IpOrCidr::Ip(std::net::IpAddr::from([192, 0, 2, host]))
}

/// Frees a server's probe slot however the probe ends.
struct Running<'a> {
    state: &'a ProbeState,
    server: ServerId,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.state.running).remove(&self.server);
    }
}

impl Fleet {
    fn enrolled(&self, view: &super::ServerView) -> Result<(), FleetError> {
        if !view.status.has_agent() {
            return Err(FleetError::NotEnrolled);
        }
        Ok(())
    }

    /// The delivery diagnostics of one server; its agent must be online.
    pub async fn delivery_status(
        &self,
        id: ServerId,
        requested_by: &str,
    ) -> Result<DeliveryReport, FleetError> {
        let view = self.get(id).await?;
        self.enrolled(&view)?;
        let outcome = self
            .call(
                id,
                command::Kind::GetDeliveryStatus(GetDeliveryStatus {}),
                "get_delivery_status",
                requested_by,
            )
            .await?;
        let command_result::Outcome::DeliveryStatus(status) = outcome else {
            return Err(FleetError::Protocol(format!(
                "expected a delivery status, got {outcome:?}"
            )));
        };
        let last_event = self
            .events()
            .list(
                &EventFilter {
                    server: Some(id),
                    ..EventFilter::default()
                },
                None,
                1,
            )
            .await
            .map_err(events_error)?
            .events
            .into_iter()
            .next()
            .map(|e| e.stored_at);
        let now = Utc::now();
        let spool = status.spool.map(|head| {
            let oldest = at_ms(head.oldest_unacked_unix_ms).filter(|_| head.depth > 0);
            SpoolDiagnostics {
                epoch: head.epoch,
                last_seq: head.last_seq,
                acked_seq: head.acked_seq,
                depth: head.depth,
                oldest_unacked_at: oldest,
                oldest_unacked_age_secs: oldest
                    .map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
            }
        });
        let jails: Vec<JailDelivery> = status
            .jails
            .into_iter()
            .map(|j| JailDelivery {
                jail: j.jail,
                action_attached: j.action_attached,
                actions: j.actions,
            })
            .collect();
        Ok(DeliveryReport {
            server_id: id.to_string(),
            relay: RelayDiagnostics {
                enabled: status.relay_enabled,
                listening: !status.relay_listen.is_empty(),
                listen: (!status.relay_listen.is_empty()).then_some(status.relay_listen),
                last_callback_at: at_ms(status.last_callback_unix_ms),
                callbacks_accepted: status.callbacks_accepted,
                callbacks_rejected: status.callbacks_rejected,
            },
            spool,
            fail2ban_running: status.fail2ban_running,
            fail2ban_error: (!status.fail2ban_error.is_empty()).then_some(status.fail2ban_error),
            action_installed: status.action_installed,
            unattached_jails: jails
                .iter()
                .filter(|j| !j.action_attached)
                .map(|j| j.jail.clone())
                .collect(),
            jails,
            last_event_received_at: last_event,
            last_probe: self.0.probe.last(id),
        })
    }

    /// Runs one end-to-end probe of a server and keeps its result. Errors are for a server that
    /// cannot be probed at all (unknown, not enrolled, offline, a probe already running); a probe
    /// that ran and failed is an `Ok` result with `ok: false` and the reason.
    pub async fn probe(
        &self,
        id: ServerId,
        scheduled: bool,
        requested_by: &str,
    ) -> Result<ProbeResult, FleetError> {
        let view = self.get(id).await?;
        self.enrolled(&view)?;
        let state = &self.0.probe;
        if !lock(&state.running).insert(id) {
            return Err(FleetError::Agent {
                kind: super::AgentErrorKind::Conflict,
                message: "a probe of this server is already running; wait for its result"
                    .to_owned(),
                details: Vec::new(),
                current_version: None,
            });
        }
        let _running = Running { state, server: id };
        let ip = probe_address();
        let started_at = Utc::now();
        let mut result = ProbeResult {
            ok: false,
            ip: ip.to_string(),
            jail: PROBE_JAIL.to_owned(),
            started_at,
            finished_at: started_at,
            scheduled,
            steps: Vec::new(),
            failure: None,
        };
        let timeout = Duration::from_secs(state.config.timeout_secs);
        let outcome = async {
            self.probe_step(id, &ip, true, timeout, &mut result, requested_by)
                .await?;
            self.probe_step(id, &ip, false, timeout, &mut result, requested_by)
                .await
        }
        .await;
        match outcome {
            Ok(()) => result.ok = true,
            Err(StepError::Failed(failure)) => result.failure = Some(failure),
            Err(StepError::Fleet(FleetError::Offline | FleetError::SessionEnded))
                if result.steps.is_empty() =>
            {
                return Err(FleetError::Offline);
            }
            Err(StepError::Fleet(e)) => {
                result.failure = Some(ProbeFailure {
                    code: match &e {
                        FleetError::Agent {
                            kind: super::AgentErrorKind::Fail2banUnavailable,
                            ..
                        } => ProbeFailureCode::Fail2banUnavailable,
                        _ => ProbeFailureCode::AgentError,
                    },
                    message: e.to_string(),
                });
            }
        }
        result.finished_at = Utc::now();
        match &result.failure {
            None => {
                tracing::info!(server_id = %id, ip = %result.ip, steps = ?result.steps, "delivery probe succeeded")
            }
            Some(f) => {
                tracing::warn!(server_id = %id, code = ?f.code, message = %f.message, "delivery probe failed")
            }
        }
        lock(&state.last).insert(id, result.clone());
        Ok(result)
    }

    /// Has the agent ban (or unban) `ip` in the probe jail and waits for the event in the store.
    async fn probe_step(
        &self,
        id: ServerId,
        ip: &IpOrCidr,
        ban: bool,
        timeout: Duration,
        result: &mut ProbeResult,
        requested_by: &str,
    ) -> Result<(), StepError> {
        let (name, kind) = if ban {
            ("ban", EventKind::Ban)
        } else {
            ("unban", EventKind::Unban)
        };
        // Subscribed before the command, so the event cannot slip by in between.
        let mut live = self.events().subscribe();
        let started = Instant::now();
        let since = Utc::now();
        let outcome = self
            .call(
                id,
                command::Kind::ProbeStep(ProbeStep {
                    ip: ip.to_string(),
                    ban,
                }),
                "probe_step",
                requested_by,
            )
            .await
            .map_err(StepError::Fleet)?;
        let command_result::Outcome::ProbeStep(report) = outcome else {
            return Err(StepError::Fleet(FleetError::Protocol(format!(
                "expected a probe step report, got {outcome:?}"
            ))));
        };
        precondition(&report)?;
        if !report.changed {
            return Err(StepError::Failed(ProbeFailure {
                code: ProbeFailureCode::AgentError,
                message: format!(
                    "fail2ban did not {name} {ip} in the probe jail: it was already {}",
                    if ban { "banned" } else { "not banned" }
                ),
            }));
        }
        result.steps.push(ProbeStepTiming {
            step: name.to_owned(),
            ms: started.elapsed().as_secs_f64() * 1000.0,
        });
        let wanted = |event: &StoredEvent| {
            event.server_id == id
                && event.kind() == kind
                && event
                    .body
                    .facts()
                    .is_some_and(|f| f.jail.as_str() == PROBE_JAIL && &f.ip == ip)
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut poll = tokio::time::interval(STORE_POLL);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    return Err(StepError::Failed(self.timeout_failure(id, ban, timeout, since, requested_by).await));
                }
                received = live.recv() => match received {
                    Ok(event) if wanted(&event) => break,
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return Err(StepError::Fleet(FleetError::SessionEnded)),
                },
                _ = poll.tick() => {
                    if self.stored_since(id, ip, kind, since).await.map_err(StepError::Fleet)? {
                        break;
                    }
                }
            }
        }
        result.steps.push(ProbeStepTiming {
            step: format!("{name}Event"),
            ms: started.elapsed().as_secs_f64() * 1000.0,
        });
        Ok(())
    }

    /// Whether the store holds the probe event (the live feed may have lagged).
    async fn stored_since(
        &self,
        id: ServerId,
        ip: &IpOrCidr,
        kind: EventKind,
        since: DateTime<Utc>,
    ) -> Result<bool, FleetError> {
        let jail = JailName::parse(PROBE_JAIL).map_err(|e| FleetError::Protocol(e.to_string()))?;
        let page = self
            .events()
            .list(
                &EventFilter {
                    server: Some(id),
                    jail: Some(jail),
                    ip: Some(*ip),
                    kinds: vec![kind],
                    ..EventFilter::default()
                },
                None,
                1,
            )
            .await
            .map_err(events_error)?;
        // The relay stamps events when it receives them, on the host's clock; allow for a little
        // skew rather than miss the event.
        let earliest = since - chrono::Duration::seconds(5);
        Ok(page.events.first().is_some_and(|e| e.stored_at >= earliest))
    }

    /// Why an event did not come: asks the agent where the path is broken.
    async fn timeout_failure(
        &self,
        id: ServerId,
        ban: bool,
        timeout: Duration,
        since: DateTime<Utc>,
        requested_by: &str,
    ) -> ProbeFailure {
        let code = if ban {
            ProbeFailureCode::BanTimeout
        } else {
            ProbeFailureCode::UnbanTimeout
        };
        let what = if ban { "ban" } else { "unban" };
        let mut message = format!(
            "fail2ban {what}ned the probe address, but the {what} event did not reach the hub \
             within {}s",
            timeout.as_secs()
        );
        match self.delivery_status(id, requested_by).await {
            Ok(report) => {
                let callback_since = report.relay.last_callback_at.is_some_and(|t| t >= since);
                if !report.relay.listening {
                    message.push_str("; the agent's relay is not listening");
                } else if !callback_since {
                    message.push_str(&format!(
                        "; the relay received no callback since the probe started ({} refused \
                         so far): the action's notifier cannot reach the relay or uses the wrong \
                         secret (fail2ban's log and syslog `banhub-notify` say which)",
                        report.relay.callbacks_rejected
                    ));
                } else if let Some(spool) = &report.spool
                    && spool.depth > 0
                {
                    message.push_str(&format!(
                        "; the relay stored it, but {} event(s) wait in the agent's spool \
                         (oldest {:.0}s): delivery to the hub is stalled",
                        spool.depth,
                        spool.oldest_unacked_age_secs.unwrap_or_default()
                    ));
                }
            }
            Err(e) => message.push_str(&format!(
                "; the agent's delivery status is unavailable: {e}"
            )),
        }
        ProbeFailure { code, message }
    }

    /// Probes every online server that can be probed, one after the other, every
    /// `probe.interval_secs` (0: never) until `shutdown`.
    pub async fn run_probe_schedule(self, shutdown: CancellationToken) {
        let interval = self.0.probe.config.interval_secs;
        if interval == 0 {
            tracing::info!("scheduled delivery probes are off (probe.interval_secs = 0)");
            return;
        }
        let mut ticks = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(interval),
            Duration::from_secs(interval),
        );
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let servers: Vec<ServerId> = self
                .sessions()
                .snapshot()
                .into_iter()
                .filter(|(_, info)| info.capabilities.iter().any(|c| c == "probe_step"))
                .map(|(id, _)| id)
                .collect();
            for id in servers {
                if shutdown.is_cancelled() {
                    return;
                }
                if let Err(e) = self.probe(id, true, "schedule").await {
                    tracing::debug!(server_id = %id, error = %e, "scheduled probe skipped");
                }
            }
        }
    }
}

/// How a probe step ended early.
enum StepError {
    /// The probe ran and found the path broken.
    Failed(ProbeFailure),
    /// The command could not be run.
    Fleet(FleetError),
}

/// The agent checked the probe jail, its action and the relay before banning.
fn precondition(report: &ProbeStepReport) -> Result<(), StepError> {
    let failed = |code, message: &str| {
        Err(StepError::Failed(ProbeFailure {
            code,
            message: message.to_owned(),
        }))
    };
    if !report.probe_jail_running {
        return failed(
            ProbeFailureCode::ProbeJailMissing,
            "fail2ban runs no banhub-probe jail on the host; run `banhub-agent install-action` \
             there",
        );
    }
    if !report.action_attached {
        return failed(
            ProbeFailureCode::ActionMissing,
            "the banhub action is not attached to the probe jail, so fail2ban reports nothing to \
             the agent; run `banhub-agent install-action` on the host",
        );
    }
    if !report.relay_listening {
        return failed(
            ProbeFailureCode::RelayDown,
            "the agent's callback relay is not listening (relay.enabled = false, or it failed to \
             start; the agent's log says why)",
        );
    }
    Ok(())
}
