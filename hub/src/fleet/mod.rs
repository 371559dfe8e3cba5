//! The fleet: servers and their agents. Owns the gRPC services agents talk to (enrollment and the
//! session), the registry of live sessions, command dispatch, and the server lifecycle (create with an
//! enrollment token, revoke on delete). This is the only module that names protocol types.

mod actions;
mod callback_jails;
mod capability;
mod config_create;
mod config_files;
mod config_sets;
mod control;
mod defaults;
mod direct_callbacks;
mod enrollment;
mod filter_tests;
mod forward;
mod gateway;
mod ingest;
mod listener;
mod previews;
mod probe;
mod sessions;
mod shared_bans;

use std::sync::Arc;
use std::time::{Duration, Instant};

use banhub_proto::token::EnrollmentToken;
use banhub_proto::v1::agent_gateway_server::AgentGatewayServer;
use banhub_proto::v1::enrollment_server::EnrollmentServer;
use banhub_proto::v1::{Command, ErrorCode, Ping, command, command_result};
use chrono::{DateTime, Utc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::{Cluster, ClusterStatus};
use crate::config::{AgentsConfig, ProbeConfig};
use crate::domain::{Guards, NewServer, Server, ServerId, ServerStatus};
use crate::events::Events;
use crate::metrics::{CommandLabels, Metrics};
use crate::pki::{Ca, RevocationList, random_secret};
use crate::settings::SettingsService;
use crate::store::{Store, StoreError};

pub use actions::{ActionError, FleetBan, Selector};
pub use config_create::{
    CatalogFilter, CreatedConfig, FilterCatalog, JailTemplate, NewFilter, NewJail,
};
pub use config_files::{CONFIG_FILES_CAPABILITY, HostConfigFiles, VALIDATE_SET_CAPABILITY};
pub use config_sets::{AgentChange, AgentPhase};
pub use control::*;
pub use defaults::{DefaultsPush, DefaultsPushResult, DefaultsTargets, PushDefaultsError};
pub use direct_callbacks::{DirectCallbackError, RecordedCallback, UnreadBody};
pub use filter_tests::RETRY_AFTER_SECS as FILTER_TEST_RETRY_AFTER_SECS;
pub use listener::{TlsListenerKind, accept_tls};
pub use previews::{
    FilterPreviewResult, PreviewAddress, PreviewInput, PreviewLog, PreviewProtection, PreviewSource,
};
pub use probe::{
    DeliveryReport, JailDelivery, ProbeFailure, ProbeFailureCode, ProbeResult, ProbeStepTiming,
    RelayDiagnostics, SpoolDiagnostics,
};
pub use sessions::{DrainReason, SessionEnd, SessionInfo};
use sessions::{SendError, Sessions};
pub use shared_bans::SharedBanReport;

/// Writes told to a drift loop that has not read them yet; past it, the loop checks every host.
const FILES_WRITTEN: usize = 64;

/// A server with what the fleet knows about its agent right now.
#[derive(Debug, Clone)]
pub struct ServerView {
    pub server: Server,
    pub status: ServerStatus,
    pub session: Option<SessionInfo>,
    /// The hub replica holding the agent's session, when several replicas share the database.
    pub replica: Option<String>,
}

/// A freshly issued enrollment token; the only time its secret exists outside the agent.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// The answer to a connection test.
#[derive(Debug, Clone)]
pub struct PingReport {
    /// Hub → agent → fail2ban → back.
    pub round_trip: Duration,
    /// The part spent waiting for fail2ban, as the agent measured it.
    pub fail2ban_latency: Duration,
    pub agent_version: String,
    pub fail2ban_version: String,
}

/// What an agent said went wrong with a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentErrorKind {
    InvalidArgument,
    Expired,
    Fail2banUnavailable,
    Fail2banError,
    Unsupported,
    Internal,
    /// A file changed since it was read.
    Conflict,
    /// fail2ban refused a new configuration; nothing changed.
    ValidationFailed,
    /// No such jail or filter on the host.
    NotFound,
    /// The host's own policy refuses the change; nothing changed.
    PolicyRefused,
}

/// Why a fleet operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No server has this id or name (the value the caller sent).
    #[error("no server has the id or name {0:?}")]
    UnknownServer(String),
    #[error("no agent has enrolled for this server yet; run the enroll command on the host")]
    NotEnrolled,
    #[error("the server's agent is offline")]
    Offline,
    #[error("the agent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the agent's session ended before it answered")]
    SessionEnded,
    #[error("{message}")]
    Agent {
        kind: AgentErrorKind,
        message: String,
        /// fail2ban's own messages, line by line.
        details: Vec<String>,
        /// For a conflict: the file's version now.
        current_version: Option<String>,
    },
    #[error(
        "this server already runs a filter test and another one waits its turn; try again in \
         {} s",
        filter_tests::RETRY_AFTER_SECS
    )]
    FilterTestsBusy,
    #[error("the agent sent an answer that makes no sense: {0}")]
    Protocol(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SendError> for FleetError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Offline => Self::Offline,
            SendError::Timeout(after) => Self::Timeout(after),
            SendError::SessionEnded => Self::SessionEnded,
        }
    }
}

struct Inner {
    store: Store,
    ca: Ca,
    revocations: RevocationList,
    sessions: Sessions,
    metrics: Metrics,
    agents: AgentsConfig,
    token_ttl: Duration,
    /// `host:port` written into enrollment tokens.
    advertise: String,
    events: Events,
    /// The saved settings: the callback policy and fail2ban's defaults.
    settings: SettingsService,
    cluster: Cluster,
    /// The delivery probe's settings and last results.
    probe: probe::ProbeState,
    /// The jails direct callbacks are checked against, per server.
    callback_jails: callback_jails::CallbackJails,
    /// The filter tests running and waiting per server.
    filter_tests: filter_tests::FilterTestSlots,
    /// The guard rails, whose protected networks every pushed `ignoreip` carries.
    guards: Arc<Guards>,
    /// Agent sessions started here, for the sharing engine.
    session_started: tokio::sync::broadcast::Sender<ServerId>,
    /// Servers whose fail2ban files a command from here wrote, for the drift loop.
    files_written: tokio::sync::broadcast::Sender<ServerId>,
}

/// The fleet; cheap to clone.
#[derive(Clone)]
pub struct Fleet(Arc<Inner>);

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("advertise", &self.0.advertise)
            .field("sessions", &self.0.sessions.count())
            .finish_non_exhaustive()
    }
}

/// What [`Fleet::new`] needs.
#[derive(Debug)]
pub struct FleetParts {
    pub store: Store,
    pub ca: Ca,
    pub revocations: RevocationList,
    pub metrics: Metrics,
    pub agents: AgentsConfig,
    pub token_ttl: Duration,
    pub advertise: String,
    pub shutdown: CancellationToken,
    /// Where agents' event batches are stored.
    pub events: Events,
    /// The saved settings the fleet acts on (the callback policy, fail2ban's defaults).
    pub settings: SettingsService,
    /// The other hub replicas on the same database (if any).
    pub cluster: Cluster,
    pub probe: ProbeConfig,
    pub guards: Arc<Guards>,
}

impl Fleet {
    pub fn new(parts: FleetParts) -> Self {
        Self(Arc::new(Inner {
            store: parts.store,
            ca: parts.ca,
            revocations: parts.revocations,
            sessions: Sessions::new(parts.shutdown),
            metrics: parts.metrics,
            agents: parts.agents,
            token_ttl: parts.token_ttl,
            advertise: parts.advertise,
            events: parts.events,
            settings: parts.settings,
            cluster: parts.cluster,
            probe: probe::ProbeState::new(parts.probe),
            callback_jails: callback_jails::CallbackJails::default(),
            filter_tests: filter_tests::FilterTestSlots::default(),
            guards: parts.guards,
            session_started: tokio::sync::broadcast::channel(shared_bans::SESSION_STARTS).0,
            files_written: tokio::sync::broadcast::channel(FILES_WRITTEN).0,
        }))
    }

    pub(crate) fn store(&self) -> &Store {
        &self.0.store
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.0.cluster
    }

    fn events(&self) -> &Events {
        &self.0.events
    }

    fn ca(&self) -> &Ca {
        &self.0.ca
    }

    fn revocations(&self) -> &RevocationList {
        &self.0.revocations
    }

    fn sessions(&self) -> &Sessions {
        &self.0.sessions
    }

    fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    fn heartbeat_interval_ms(&self) -> u32 {
        self.0.agents.heartbeat_interval_ms
    }

    fn certificate_days(&self) -> u32 {
        self.0.agents.certificate_days
    }

    /// The `host:port` agents are told to dial.
    pub fn advertise(&self) -> &str {
        &self.0.advertise
    }

    /// Number of agents with a live session.
    pub fn online_count(&self) -> usize {
        self.0.sessions.count()
    }

    /// The replicas sharing the database, with the agents whose session this one holds.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, StoreError> {
        let agents_here = u64::try_from(self.online_count()).unwrap_or(u64::MAX);
        self.0.cluster.status(agents_here).await
    }

    /// Serves enrollment and agent sessions on `listener` until `shutdown`.
    pub async fn serve_grpc(
        &self,
        listener: TcpListener,
        tls: rustls::ServerConfig,
        shutdown: CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        let incoming = listener::tls_incoming(listener, Arc::new(tls), shutdown.clone());
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(EnrollmentServer::new(enrollment::EnrollmentService {
                fleet: self.clone(),
            }))
            .add_service(AgentGatewayServer::new(gateway::Gateway {
                fleet: self.clone(),
            }))
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
            .await
    }

    /// Registers a server and issues its first enrollment token.
    pub async fn create_server(
        &self,
        new: NewServer,
    ) -> Result<(ServerView, IssuedToken), FleetError> {
        let server = self.0.store.create_server(new).await?;
        let token = self.issue_token(server.id).await?;
        tracing::info!(server_id = %server.id, server = %server.name, "server created");
        Ok((self.view(server), token))
    }

    /// Issues a new one-time enrollment token for an existing server (e.g. after rebuilding its host).
    pub async fn issue_token(&self, server: ServerId) -> Result<IssuedToken, FleetError> {
        if self.0.store.get_server(server).await?.is_none() {
            return Err(FleetError::UnknownServer(server.to_string()));
        }
        let token_id = uuid::Uuid::now_v7().to_string();
        let secret = random_secret();
        let ttl = chrono::Duration::from_std(self.0.token_ttl).unwrap_or(chrono::Duration::days(1));
        let expires_at = Utc::now() + ttl;
        self.0
            .store
            .create_enrollment_token(server, &token_id, &secret, expires_at)
            .await?;
        let token = EnrollmentToken {
            hub_address: self.0.advertise.clone(),
            ca_fingerprint: self.0.ca.fingerprint().to_owned(),
            token_id,
            secret,
        };
        Ok(IssuedToken {
            token: token.encode(),
            expires_at,
        })
    }

    /// Every server with its live status.
    pub async fn list(&self) -> Result<Vec<ServerView>, FleetError> {
        let live = self.0.sessions.snapshot();
        let mut leases = self.0.cluster.leases().await?;
        Ok(self
            .0
            .store
            .list_servers()
            .await?
            .into_iter()
            .map(|server| {
                let session = live.get(&server.id).cloned();
                let lease = leases.remove(&server.id);
                self.view_with(server, session, lease)
            })
            .collect())
    }

    pub async fn get(&self, id: ServerId) -> Result<ServerView, FleetError> {
        let server = self
            .0
            .store
            .get_server(id)
            .await?
            .ok_or_else(|| FleetError::UnknownServer(id.to_string()))?;
        let session = self.0.sessions.info(server.id);
        let lease = match session {
            Some(_) => None,
            None => self.0.cluster.holder(server.id).await?,
        };
        Ok(self.view_with(server, session, lease))
    }

    fn view(&self, server: Server) -> ServerView {
        let session = self.0.sessions.info(server.id);
        self.view_with(server, session, None)
    }

    /// A server with its session here, or else the lease of its session on another replica.
    fn view_with(
        &self,
        server: Server,
        session: Option<SessionInfo>,
        lease: Option<crate::store::cluster::Lease>,
    ) -> ServerView {
        let here = session
            .is_some()
            .then(|| self.0.cluster.replica().to_owned());
        let (session, replica) = match (session, lease) {
            (Some(session), _) => (Some(session), here),
            (None, Some(lease)) => (
                Some(SessionInfo {
                    agent_id: lease.agent.or(server.agent_id).unwrap_or_default(),
                    connected_at: lease.connected_at,
                    agent_version: server.agent_version.clone().unwrap_or_default(),
                    fail2ban_version: server.fail2ban_version.clone().unwrap_or_default(),
                    hostname: server.hostname.clone().unwrap_or_default(),
                    address: server.last_address.clone().unwrap_or_default(),
                    capabilities: Vec::new(),
                }),
                Some(lease.replica),
            ),
            (None, None) => (None, None),
        };
        let status = if session.is_some() {
            ServerStatus::Online
        } else if server.agent_id.is_none() {
            // Without an agent, `last_seen_at` is the last direct callback.
            if server.last_seen_at.is_some() {
                ServerStatus::Reporting
            } else {
                ServerStatus::Pending
            }
        } else {
            ServerStatus::Offline
        };
        ServerView {
            server,
            status,
            session,
            replica: if self.0.cluster.is_shared() {
                replica
            } else {
                None
            },
        }
    }

    /// Deletes a server: its certificates are revoked (refused at the next handshake) and its live
    /// session is cut now.
    pub async fn delete_server(&self, id: ServerId) -> Result<(), FleetError> {
        let revoked = self
            .0
            .store
            .delete_server(id)
            .await?
            .ok_or_else(|| FleetError::UnknownServer(id.to_string()))?;
        self.revoke_everywhere(&revoked).await;
        self.cut_off(id, None, "this server was removed from the hub")
            .await;
        self.0.callback_jails.forget(id);
        self.0.filter_tests.forget(id);
        tracing::info!(server_id = %id, certificates = revoked.len(), "server deleted and its agent revoked");
        Ok(())
    }

    /// Round trip to the server's agent and on to fail2ban's `ping`.
    pub async fn ping(&self, id: ServerId, requested_by: &str) -> Result<PingReport, FleetError> {
        let view = self.get(id).await?;
        if !view.status.has_agent() {
            return Err(FleetError::NotEnrolled);
        }
        let started = Instant::now();
        let outcome = self
            .call(id, command::Kind::Ping(Ping {}), "ping", requested_by)
            .await?;
        let round_trip = started.elapsed();
        match outcome {
            command_result::Outcome::Pong(pong) => Ok(PingReport {
                round_trip,
                fail2ban_latency: Duration::from_micros(pong.fail2ban_latency_us),
                agent_version: pong.agent_version,
                fail2ban_version: pong.fail2ban_version,
            }),
            other => Err(FleetError::Protocol(format!(
                "expected a pong, got {other:?}"
            ))),
        }
    }

    /// Sends one command to the server's agent and returns its successful outcome.
    async fn call(
        &self,
        id: ServerId,
        kind: command::Kind,
        label: &'static str,
        requested_by: &str,
    ) -> Result<command_result::Outcome, FleetError> {
        self.call_with_id(
            id,
            kind,
            label,
            requested_by,
            uuid::Uuid::now_v7().to_string(),
        )
        .await
    }

    /// [`Fleet::call`] of a command that writes fail2ban's files on the host: its success is told
    /// to the listeners of [`Fleet::files_written`], so every write banhub makes is followed by a
    /// drift check without its callers asking for one.
    async fn write_call(
        &self,
        id: ServerId,
        kind: command::Kind,
        label: &'static str,
        requested_by: &str,
    ) -> Result<command_result::Outcome, FleetError> {
        let outcome = self.call(id, kind, label, requested_by).await?;
        // No listener (the drift loop not started yet) is fine: its first pass reads every host.
        let _ = self.0.files_written.send(id);
        Ok(outcome)
    }

    /// The servers whose fail2ban files a command from this replica writes from now on (a jail
    /// written or toggled, a jail or filter created or deleted, a config set applied or settled).
    pub fn files_written(&self) -> tokio::sync::broadcast::Receiver<ServerId> {
        self.0.files_written.subscribe()
    }

    /// [`Fleet::call`] with the command's id given: a command delivered again keeps its id, so the
    /// agent runs it once. The agent's session may be here or on another replica.
    async fn call_with_id(
        &self,
        id: ServerId,
        kind: command::Kind,
        label: &'static str,
        requested_by: &str,
        command_id: String,
    ) -> Result<command_result::Outcome, FleetError> {
        // A shared-ban sync is not slow: the agent answers within its `shared_bans.budget_ms` and
        // leaves the rest to its own passes, so a sync lost with a dead replica holds its target
        // for the ordinary timeout only.
        let slow = matches!(
            kind,
            command::Kind::SetJailsEnabled(_)
                | command::Kind::WriteJailConfig(_)
                | command::Kind::TestFilter(_)
                | command::Kind::Restart(_)
                | command::Kind::SetIgnoreList(_)
                | command::Kind::WriteDefaults(_)
                | command::Kind::CreateJail(_)
                | command::Kind::WriteFilter(_)
                | command::Kind::DeleteConfig(_)
                | command::Kind::PreviewFilter(_)
                | command::Kind::ValidateConfigSet(_)
                | command::Kind::ApplyConfigSet(_)
                | command::Kind::SettleConfigSet(_)
        );
        let timeout = Duration::from_millis(if slow {
            self.0.agents.slow_command_timeout_ms
        } else {
            self.0.agents.command_timeout_ms
        });
        let deadline = Utc::now() + chrono::Duration::from_std(timeout).unwrap_or_default();
        let command = Command {
            id: command_id,
            deadline_unix_ms: deadline.timestamp_millis(),
            requested_by: requested_by.to_owned(),
            kind: Some(kind),
        };
        let result = if self.0.sessions.is_live(id) || !self.0.cluster.is_shared() {
            self.0
                .sessions
                .call(id, command, timeout)
                .await
                .map_err(FleetError::from)
        } else {
            self.call_elsewhere(id, command, timeout).await
        };
        let outcome = match result {
            Ok(result) => match result.outcome {
                Some(command_result::Outcome::Error(e)) => Err(FleetError::Agent {
                    kind: error_kind(e.code()),
                    current_version: (!e.current_version.is_empty())
                        .then(|| e.current_version.clone()),
                    details: e.details,
                    message: e.message,
                }),
                Some(outcome) => Ok(outcome),
                None => Err(FleetError::Protocol(
                    "a result without an outcome".to_owned(),
                )),
            },
            Err(e) => Err(e),
        };
        let outcome_label = match &outcome {
            Ok(_) => "ok",
            Err(FleetError::Offline) => "offline",
            Err(FleetError::Timeout(_)) => "timeout",
            Err(FleetError::Agent { .. }) => "refused",
            Err(_) => "failed",
        };
        self.0
            .metrics
            .commands
            .get_or_create(&CommandLabels {
                kind: label,
                outcome: outcome_label,
            })
            .inc();
        outcome
    }
}

fn error_kind(code: ErrorCode) -> AgentErrorKind {
    match code {
        ErrorCode::InvalidArgument => AgentErrorKind::InvalidArgument,
        ErrorCode::Expired => AgentErrorKind::Expired,
        ErrorCode::Fail2banUnavailable => AgentErrorKind::Fail2banUnavailable,
        ErrorCode::Fail2banError => AgentErrorKind::Fail2banError,
        ErrorCode::Unsupported => AgentErrorKind::Unsupported,
        ErrorCode::Conflict => AgentErrorKind::Conflict,
        ErrorCode::ValidationFailed => AgentErrorKind::ValidationFailed,
        ErrorCode::NotFound => AgentErrorKind::NotFound,
        ErrorCode::PolicyRefused => AgentErrorKind::PolicyRefused,
        ErrorCode::Unspecified | ErrorCode::Internal => AgentErrorKind::Internal,
    }
}
