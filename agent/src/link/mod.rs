//! The session to the hub: one outbound mutual-TLS `AgentGateway.Session` stream with hello,
//! heartbeats and commands, kept up by reconnecting with full-jitter exponential backoff.
//!
//! [`run`] owns the reconnect loop; `session` runs one stream; `commands` runs what the hub asks.
//! What outlives a single stream lives in [`Link`]: the remembered command ids (so a command
//! redelivered after a reconnect runs once) and the channel on which spawned commands report back.

use std::time::{Duration, Instant};

use banhub_proto::HUB_TLS_NAME;
use banhub_proto::v1::CommandResult;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity as TlsIdentity};
use tracing::Instrument;

use crate::config::Settings;
use crate::enroll::{Credentials, StateError};
use crate::spool::Spool;
use crate::tls::{self, ConnectProblem};

mod backoff;
pub mod commands;
pub mod delivery;
mod recent;
mod session;

pub use backoff::Backoff;
pub use recent::{RecentCommands, Seen};
use session::SessionEnd;

/// A session that got its welcome and stayed up this long was healthy: the next reconnect starts
/// from the initial delay again.
const HEALTHY_SESSION: Duration = Duration::from_secs(10);
/// TCP keepalive on the connection to the hub, below typical NAT and firewall idle timeouts.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);
/// Results of commands still waiting to be sent.
const RESULTS_CAPACITY: usize = 256;

/// Why [`run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkExit {
    /// Asked to stop (SIGINT/SIGTERM).
    Shutdown,
    /// The hub drained the session without reconnect: this server was removed from the hub (or
    /// another agent enrolled in its place). Reconnecting would be refused.
    Removed { reason: String },
}

/// Why the link could not start at all. Failures after start are retried, never returned.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot use the agent's TLS material in {state_dir}: {detail}")]
    Tls { state_dir: String, detail: String },
}

/// Runs the link until `shutdown` is cancelled or the hub removes this agent. Events in `spool` are
/// delivered to the hub over each session.
pub async fn run(
    settings: &Settings,
    spool: Option<Spool>,
    shutdown: CancellationToken,
) -> Result<LinkExit, LinkError> {
    run_with_relay(settings, spool, None, shutdown).await
}

/// [`run`], with the running relay for the delivery diagnostics.
pub async fn run_with_relay(
    settings: &Settings,
    spool: Option<Spool>,
    relay: Option<commands::RelayHandle>,
    shutdown: CancellationToken,
) -> Result<LinkExit, LinkError> {
    let credentials = Credentials::load(&settings.state_dir)?;
    let span = tracing::info_span!("link", agent_id = %credentials.identity.agent_id);
    let mut link = Link::new(settings, &credentials)?;
    link.commands.set_delivery(commands::DeliveryHandles {
        relay,
        spool: spool.clone(),
    });
    link.spool = spool;
    // The shared bans are kept whether or not the hub is reachable; the relay already listens,
    // so their bans and unbans reach the spool.
    if let Ok(shared) = link.commands.shared_bans() {
        tokio::spawn(
            shared
                .clone()
                .run(shutdown.clone())
                .instrument(tracing::info_span!("shared_bans")),
        );
    }
    // A pending config change reverts at its deadline whether or not the hub is reachable; one
    // whose deadline passed while the agent was down reverts now.
    if let Ok(changes) = link.commands.config_changes() {
        tokio::spawn(
            changes
                .clone()
                .run(shutdown.clone())
                .instrument(tracing::info_span!("config_changes")),
        );
    }
    Ok(link.run(shutdown).instrument(span).await)
}

/// State of the link that outlives any one session.
struct Link {
    endpoint: Endpoint,
    hub_address: String,
    welcome_timeout: Duration,
    commands: std::sync::Arc<commands::Context>,
    recent: RecentCommands,
    results_tx: mpsc::Sender<CommandResult>,
    results_rx: mpsc::Receiver<CommandResult>,
    backoff: Backoff,
    hostname: String,
    /// The event spool whose events each session delivers.
    spool: Option<Spool>,
}

impl Link {
    fn new(settings: &Settings, credentials: &Credentials) -> Result<Self, LinkError> {
        let endpoint = endpoint(settings, credentials).map_err(|detail| LinkError::Tls {
            state_dir: settings.state_dir.display().to_string(),
            detail,
        })?;
        let (results_tx, results_rx) = mpsc::channel(RESULTS_CAPACITY);
        Ok(Self {
            endpoint,
            hub_address: credentials.identity.hub_address.clone(),
            welcome_timeout: Duration::from_millis(settings.link.connect_timeout_ms),
            commands: std::sync::Arc::new(commands::Context::new(settings)),
            recent: RecentCommands::default(),
            results_tx,
            results_rx,
            backoff: Backoff::new(
                Duration::from_millis(settings.link.backoff_initial_ms),
                Duration::from_millis(settings.link.backoff_max_ms),
            ),
            hostname: crate::enroll::local_hostname(),
            spool: None,
        })
    }

    async fn run(mut self, shutdown: CancellationToken) -> LinkExit {
        tracing::info!(hub = %self.hub_address, "starting the link to the hub");
        loop {
            let span = tracing::info_span!(
                "session",
                hub = %self.hub_address,
                server_id = tracing::field::Empty,
                server = tracing::field::Empty,
                end = tracing::field::Empty,
            );
            let report = session::run(&mut self, &shutdown)
                .instrument(span.clone())
                .await;
            span.record("end", report.end.kind().as_str());
            if let Some(exit) = span.in_scope(|| log_end(report.end, &self.hub_address)) {
                return exit;
            }
            if report
                .welcomed_at
                .is_some_and(|at| at.elapsed() >= HEALTHY_SESSION)
            {
                self.backoff.reset();
            }
            let delay = self.backoff.next_delay();
            tracing::info!(
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                attempt = self.backoff.attempts(),
                "reconnecting to the hub after a delay"
            );
            tokio::select! {
                () = shutdown.cancelled() => {
                    tracing::info!("shutting down");
                    return LinkExit::Shutdown;
                }
                () = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// Logs why a session ended, in the session's span (whose `end` field names the kind); the link's
/// exit when the agent stops there.
fn log_end(end: SessionEnd, hub: &str) -> Option<LinkExit> {
    match end {
        SessionEnd::Shutdown => {
            tracing::info!("shutting down");
            return Some(LinkExit::Shutdown);
        }
        SessionEnd::Removed { reason } => {
            tracing::error!(
                %reason,
                "the hub removed this server (drain without reconnect); the agent stops. To \
                 bring this host back, add the server on the hub again and run \
                 `banhub-agent enroll --force <TOKEN>`"
            );
            return Some(LinkExit::Removed { reason });
        }
        SessionEnd::Drained { reason } => {
            tracing::info!(%reason, "the hub closed the session and asked to reconnect");
        }
        SessionEnd::Lost { reason } => {
            tracing::warn!(%reason, "the session to the hub ended");
        }
        SessionEnd::ClosedBeforeWelcome { reason } => tracing::error!(
            %hub,
            %reason,
            "the hub closed the connection before the session started; if this repeats, \
             {REENROLL_HINT}"
        ),
        SessionEnd::Refused(status) => log_refusal(&status, hub),
        SessionEnd::Unreachable(ConnectProblem::CertificateRevoked(reason)) => {
            tracing::error!(
                %hub,
                %reason,
                "the hub refused this agent's certificate as revoked: this server was removed \
                 from the hub (or another agent enrolled in its place); the agent stops. To \
                 bring this host back, add the server on the hub again and run \
                 `banhub-agent enroll --force <TOKEN>`"
            );
            return Some(LinkExit::Removed { reason });
        }
        SessionEnd::Unreachable(problem) => log_problem(&problem, hub),
    }
    None
}

/// The hub's endpoint: mutual TLS with our certificate, the pinned CA and the fixed hub name, HTTP/2
/// keepalive, and deliberately no request timeout, which would cut the long-lived stream.
fn endpoint(settings: &Settings, credentials: &Credentials) -> Result<Endpoint, String> {
    let connect_timeout = Duration::from_millis(settings.link.connect_timeout_ms);
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&credentials.ca_pem))
        .identity(TlsIdentity::from_pem(
            &credentials.cert_pem,
            credentials.key_pem(),
        ))
        .domain_name(HUB_TLS_NAME)
        .timeout(connect_timeout);
    Endpoint::from_shared(format!("https://{}", credentials.identity.hub_address))
        .map_err(|e| format!("hub address {:?}: {e}", credentials.identity.hub_address))?
        .connect_timeout(connect_timeout)
        .tcp_keepalive(Some(TCP_KEEPALIVE))
        .http2_keep_alive_interval(Duration::from_millis(settings.link.keepalive_interval_ms))
        .keep_alive_timeout(Duration::from_millis(settings.link.keepalive_timeout_ms))
        .keep_alive_while_idle(true)
        .tls_config(tls)
        .map_err(|e| tls::describe(&e))
}

const REENROLL_HINT: &str = "this agent's certificate may have been revoked (the server was deleted \
     on the hub); to re-enroll, add the server on the hub again and run `banhub-agent enroll \
     --force <TOKEN>`";

fn log_problem(problem: &ConnectProblem, hub: &str) {
    match problem {
        ConnectProblem::CertificateRevoked(detail) | ConnectProblem::CertificateRefused(detail) => {
            tracing::error!(
                %hub,
                error = %detail,
                "the hub refused this agent's certificate in the TLS handshake; {REENROLL_HINT}"
            )
        }
        ConnectProblem::HubUntrusted(detail) => tracing::error!(
            %hub,
            error = %detail,
            "the hub's certificate does not verify against ca.pem in the state directory; the address \
             may lead to another hub, or the hub's CA was replaced (then enroll again)"
        ),
        ConnectProblem::Other(detail) => {
            tracing::warn!(%hub, error = %detail, "cannot reach the hub");
        }
    }
}

fn log_refusal(status: &tonic::Status, hub: &str) {
    // A transport failure surfaces as a status too; its cause says more than its code.
    if std::error::Error::source(status).is_some() {
        return log_problem(&tls::classify(status), hub);
    }
    match status.code() {
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => tracing::error!(
            %hub,
            code = ?status.code(),
            message = status.message(),
            "the hub refused this agent; {REENROLL_HINT}"
        ),
        tonic::Code::FailedPrecondition => tracing::error!(
            %hub,
            message = status.message(),
            "the hub cannot talk with this agent; upgrade the older side"
        ),
        code => tracing::warn!(
            %hub,
            ?code,
            message = status.message(),
            "the hub ended the session with an error"
        ),
    }
}

/// Milliseconds since the Unix epoch, as the protocol's timestamps are.
pub(crate) fn now_unix_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How a session went: why it ended and, if the hub welcomed it, when (for the backoff reset rule).
#[derive(Debug)]
struct SessionReport {
    end: SessionEnd,
    welcomed_at: Option<Instant>,
}

#[cfg(test)]
mod tests;
