//! One `AgentGateway.Session` stream, from hello to its end: one task whose `select!` lists every
//! trigger (frames from the hub, the heartbeat tick, the hub's silence deadline, results of commands,
//! frames waiting to go out, and shutdown).

use std::collections::VecDeque;
use std::time::Duration;

use banhub_proto::v1::agent_gateway_client::AgentGatewayClient;
use banhub_proto::v1::{
    Ack, AgentFrame, Command, CommandResult, Drain, ErrorCode, Heartbeat, Hello, HubFrame, Welcome,
    agent_frame, hub_frame,
};
use futures::StreamExt;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tracing::Instrument;

use super::commands;
use super::delivery::{self, Delivery};
use super::recent::Seen;
use super::{Link, SessionReport, now_unix_ms};
use crate::spool::SpoolError;
use crate::tls::{self, ConnectProblem};

/// Frames the channel to tonic holds before `pending` takes over.
const OUTBOUND_CAPACITY: usize = 64;
/// Frames allowed to wait for the hub to read; past this the hub is stuck and the session is dropped
/// (commands it is waiting for are answered from the cache when it redelivers them).
const MAX_PENDING_FRAMES: usize = 1024;
/// A hub that is silent for this many heartbeat intervals is considered gone.
const SILENT_INTERVALS: u32 = 3;
/// Used when a welcome carries no heartbeat interval.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);
/// Bounds on the interval a hub may ask for, so a bad value cannot spin the agent or blind it.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);
const MAX_HEARTBEAT: Duration = Duration::from_secs(600);

/// How a session ended: its kind ([`SessionEnd::kind`]) is the session span's `end` field, so logs
/// can be grouped by it.
#[derive(Debug)]
pub(super) enum SessionEnd {
    /// Shutdown was requested.
    Shutdown,
    /// The hub drained the session without reconnect.
    Removed { reason: String },
    /// The hub drained the session and asked for a reconnect.
    Drained { reason: String },
    /// The stream ended or broke after the welcome, or the hub went silent.
    Lost { reason: String },
    /// The connection closed after the TLS handshake but before the welcome.
    ClosedBeforeWelcome { reason: String },
    /// The hub answered the call with an error status.
    Refused(tonic::Status),
    /// The connection could not be made (TCP, TLS, certificate refused).
    Unreachable(ConnectProblem),
}

/// The kinds of [`SessionEnd`], without their details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndKind {
    Shutdown,
    Removed,
    Drained,
    Lost,
    ClosedBeforeWelcome,
    Refused,
    Unreachable,
}

impl EndKind {
    /// The name logged in the session span's `end` field.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Shutdown => "shutdown",
            Self::Removed => "removed",
            Self::Drained => "drained",
            Self::Lost => "lost",
            Self::ClosedBeforeWelcome => "closed_before_welcome",
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
        }
    }
}

impl SessionEnd {
    pub(super) fn kind(&self) -> EndKind {
        match self {
            Self::Shutdown => EndKind::Shutdown,
            Self::Removed { .. } => EndKind::Removed,
            Self::Drained { .. } => EndKind::Drained,
            Self::Lost { .. } => EndKind::Lost,
            Self::ClosedBeforeWelcome { .. } => EndKind::ClosedBeforeWelcome,
            Self::Refused(_) => EndKind::Refused,
            Self::Unreachable(_) => EndKind::Unreachable,
        }
    }
}

/// Connects, says hello, waits for the welcome and serves the stream until it ends.
pub(super) async fn run(link: &mut Link, shutdown: &CancellationToken) -> SessionReport {
    let opened = tokio::select! {
        biased;
        () = shutdown.cancelled() => Err(SessionEnd::Shutdown),
        opened = open(link) => opened,
    };
    let (tx, inbound, welcome) = match opened {
        Ok(opened) => opened,
        Err(end) => {
            return SessionReport {
                end,
                welcomed_at: None,
            };
        }
    };
    let welcomed_at = Instant::now();
    let interval = heartbeat_interval(&welcome);
    let span = tracing::Span::current();
    span.record("server_id", welcome.server_id.as_str());
    span.record("server", welcome.server_name.as_str());
    tracing::info!(
        server_id = %welcome.server_id,
        server = %welcome.server_name,
        hub_version = %welcome.hub_version,
        heartbeat_interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        "connected to the hub"
    );
    if welcome.protocol_version != banhub_proto::PROTOCOL_VERSION {
        tracing::warn!(
            hub_protocol = welcome.protocol_version,
            agent_protocol = banhub_proto::PROTOCOL_VERSION,
            "the hub speaks another protocol version; upgrade the older side"
        );
    }
    let delivery = match &link.spool {
        Some(spool) => match Delivery::start(spool.clone(), welcome.committed_seq).await {
            Ok(delivery) => Some(delivery),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the event spool; events wait for the next session");
                None
            }
        },
        None => None,
    };
    let mut live = Live {
        link,
        tx,
        inbound,
        pending: VecDeque::new(),
        heartbeat_seq: 0,
        delivery,
    };
    let end = live.serve(interval, shutdown).await;
    SessionReport {
        end,
        welcomed_at: Some(welcomed_at.into_std()),
    }
}

/// How often a session's opening asks fail2ban for its version, and how long it waits in between.
const VERSION_ATTEMPTS: u32 = 3;
const VERSION_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

type Opened = (mpsc::Sender<AgentFrame>, Streaming<HubFrame>, Welcome);

async fn open(link: &Link) -> Result<Opened, SessionEnd> {
    // The hub shows the version the hello carries for the whole session, so a fail2ban that is
    // still starting (or briefly busy) is asked again before the hello goes without it.
    let mut fail2ban_version = None;
    for attempt in 0..VERSION_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(VERSION_RETRY).await;
        }
        fail2ban_version = commands::fail2ban_version(&link.commands).await;
        if fail2ban_version.is_some() {
            break;
        }
    }
    let fail2ban_version = fail2ban_version.unwrap_or_default();
    let channel = link
        .endpoint
        .connect()
        .await
        .map_err(|e| SessionEnd::Unreachable(tls::classify(&e)))?;
    let mut client = AgentGatewayClient::new(channel);
    let (tx, rx) = mpsc::channel(OUTBOUND_CAPACITY);
    let hello = Hello {
        protocol_version: banhub_proto::PROTOCOL_VERSION,
        agent_version: crate::AGENT_VERSION.to_owned(),
        hostname: link.hostname.clone(),
        fail2ban_version,
        capabilities: commands::CAPABILITIES
            .iter()
            .map(|c| (*c).to_owned())
            .collect(),
        spool: match &link.spool {
            Some(spool) => match delivery::head(spool).await {
                Ok(head) => Some(head),
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the event spool; events wait for the next session");
                    None
                }
            },
            None => None,
        },
    };
    // The hub reads the hello before it answers the call, so it must be queued first. The channel is
    // new and empty, so there is room.
    let _ = tx.try_send(AgentFrame {
        body: Some(agent_frame::Body::Hello(hello)),
    });
    let welcome = async {
        let response = client
            .session(ReceiverStream::new(rx))
            .await
            .map_err(early_error)?;
        let mut inbound = response.into_inner();
        match inbound.message().await {
            Ok(Some(HubFrame {
                body: Some(hub_frame::Body::Welcome(welcome)),
            })) => Ok((inbound, welcome)),
            Ok(Some(HubFrame {
                body: Some(hub_frame::Body::Drain(drain)),
            })) => Err(drained(drain)),
            Ok(Some(_)) => Err(SessionEnd::Lost {
                reason: "the hub's first frame was not a welcome".to_owned(),
            }),
            Ok(None) => Err(SessionEnd::ClosedBeforeWelcome {
                reason: "the hub ended the stream".to_owned(),
            }),
            Err(status) => Err(early_error(status)),
        }
    };
    let (inbound, welcome) = tokio::time::timeout(link.welcome_timeout, welcome)
        .await
        .map_err(|_| SessionEnd::Lost {
            reason: format!("no welcome from the hub within {:?}", link.welcome_timeout),
        })??;
    Ok((tx, inbound, welcome))
}

fn heartbeat_interval(welcome: &Welcome) -> Duration {
    if welcome.heartbeat_interval_ms == 0 {
        return DEFAULT_HEARTBEAT;
    }
    Duration::from_millis(u64::from(welcome.heartbeat_interval_ms))
        .clamp(MIN_HEARTBEAT, MAX_HEARTBEAT)
}

fn drained(drain: Drain) -> SessionEnd {
    if drain.reconnect {
        SessionEnd::Drained {
            reason: drain.reason,
        }
    } else {
        SessionEnd::Removed {
            reason: drain.reason,
        }
    }
}

/// A failure between the TLS handshake and the welcome. Under TLS 1.3 the agent finishes its side of
/// the handshake before the hub has judged its certificate, and the hub's refusal alert often loses
/// the race with the closed connection, so a bare "connection closed" here is worth a hint.
fn early_error(status: tonic::Status) -> SessionEnd {
    match stream_error(status) {
        SessionEnd::Lost { reason } => SessionEnd::ClosedBeforeWelcome { reason },
        end => end,
    }
}

/// A status from the stream: a transport failure (it carries its cause) or the hub's own answer.
fn stream_error(status: tonic::Status) -> SessionEnd {
    if std::error::Error::source(&status).is_none() {
        return SessionEnd::Refused(status);
    }
    match tls::classify(&status) {
        ConnectProblem::Other(reason) => SessionEnd::Lost { reason },
        problem => SessionEnd::Unreachable(problem),
    }
}

/// A trigger of the session loop that needs the whole session to handle.
enum Event {
    Inbound(Option<Result<HubFrame, tonic::Status>>),
    Finished(CommandResult),
    Heartbeat,
    /// New events are durable in the spool.
    Spooled,
}

/// A session past its welcome.
struct Live<'a> {
    link: &'a mut Link,
    tx: mpsc::Sender<AgentFrame>,
    inbound: Streaming<HubFrame>,
    /// Frames waiting for room in `tx`, oldest first; nothing is dropped while the session lives.
    pending: VecDeque<AgentFrame>,
    heartbeat_seq: u64,
    /// The spool's delivery, when the agent has a spool and it could be read.
    delivery: Option<Delivery>,
}

impl Live<'_> {
    async fn serve(&mut self, interval: Duration, shutdown: &CancellationToken) -> SessionEnd {
        let silence_limit = interval * SILENT_INTERVALS;
        let silence = tokio::time::sleep(silence_limit);
        tokio::pin!(silence);
        let mut heartbeat = tokio::time::interval_at(Instant::now() + interval, interval);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut durable = self.delivery.as_ref().map(Delivery::durable);
        // Whatever waited in the spool while there was no session goes first.
        if let Err(end) = self.fill().await {
            return end;
        }
        loop {
            let sending = !self.pending.is_empty();
            // Branches that need all of `self` hand an event out of the `select!`, whose futures
            // still borrow parts of `self` while a branch's handler runs.
            let event = tokio::select! {
                biased;
                () = shutdown.cancelled() => return SessionEnd::Shutdown,
                frame = self.inbound.next() => Event::Inbound(frame),
                Some(result) = self.link.results_rx.recv() => Event::Finished(result),
                _ = heartbeat.tick() => Event::Heartbeat,
                spooled = spool_changed(&mut durable) => {
                    if !spooled {
                        // The spool's writer stopped; delivery resumes with the next session.
                        tracing::error!("the event spool closed; no more events are delivered in this session");
                        durable = None;
                    }
                    Event::Spooled
                }
                permit = self.tx.reserve(), if sending => match permit {
                    Ok(permit) => {
                        if let Some(frame) = self.pending.pop_front() {
                            permit.send(frame);
                        }
                        continue;
                    }
                    Err(_) => return closed(),
                },
                () = &mut silence => return SessionEnd::Lost {
                    reason: format!(
                        "the hub was silent for {silence_limit:?} ({SILENT_INTERVALS} heartbeat intervals)"
                    ),
                },
            };
            let step = match event {
                Event::Inbound(Some(Ok(frame))) => {
                    silence.as_mut().reset(Instant::now() + silence_limit);
                    match frame.body {
                        Some(hub_frame::Body::Ack(ack)) => self.on_ack(ack).await,
                        body => self.on_frame(HubFrame { body }),
                    }
                }
                Event::Inbound(Some(Err(status))) => Err(stream_error(status)),
                Event::Inbound(None) => Err(SessionEnd::Lost {
                    reason: "the hub closed the session".to_owned(),
                }),
                Event::Finished(result) => {
                    self.link.recent.finish(&result);
                    self.push_result(result)
                }
                Event::Heartbeat => self.push_heartbeat(),
                Event::Spooled => self.fill().await,
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    fn on_frame(&mut self, frame: HubFrame) -> Result<(), SessionEnd> {
        match frame.body {
            Some(hub_frame::Body::Heartbeat(beat)) => {
                tracing::trace!(seq = beat.seq, "heartbeat from the hub");
                Ok(())
            }
            Some(hub_frame::Body::Command(command)) => self.on_command(command),
            Some(hub_frame::Body::Drain(drain)) => Err(drained(drain)),
            Some(hub_frame::Body::Welcome(_)) => {
                tracing::warn!("the hub sent a second welcome; ignored");
                Ok(())
            }
            Some(hub_frame::Body::Ack(ack)) => {
                // Acks are handled (asynchronously) by the loop before frames reach here.
                tracing::debug!(epoch = ack.epoch, seq = ack.seq, "ack from the hub");
                Ok(())
            }
            None => {
                // A frame kind newer than this agent; the silence deadline was still reset.
                tracing::debug!("ignoring a frame this agent does not know");
                Ok(())
            }
        }
    }

    fn on_command(&mut self, command: Command) -> Result<(), SessionEnd> {
        let kind = commands::kind_name(&command);
        tracing::info!(
            command = %command.id,
            kind,
            requested_by = %command.requested_by,
            deadline_unix_ms = command.deadline_unix_ms,
            "command from the hub"
        );
        if command.id.is_empty() {
            return self.push_result(commands::error_result(
                "",
                ErrorCode::InvalidArgument,
                "the command has no id",
            ));
        }
        match self.link.recent.seen(&command.id) {
            Seen::Done(result) => {
                tracing::info!(command = %command.id, "command delivered again; sending the earlier result");
                let result = result.clone();
                return self.push_result(result);
            }
            Seen::Running => {
                tracing::info!(command = %command.id, "command delivered again while running; its result follows");
                return Ok(());
            }
            Seen::New => {}
        }
        if let Some(refusal) = commands::refuse_if_expired(&command, now_unix_ms()) {
            tracing::warn!(command = %command.id, kind, "command arrived after its deadline; refused");
            self.link.recent.finish(&refusal);
            return self.push_result(refusal);
        }
        self.link.recent.start(&command.id);
        let context = std::sync::Arc::clone(&self.link.commands);
        let results = self.link.results_tx.clone();
        let span = tracing::info_span!("command", command = %command.id, kind);
        // Commands run beside the loop so a slow fail2ban never delays heartbeats or other frames.
        tokio::spawn(
            async move {
                let started = std::time::Instant::now();
                let result = commands::execute(&context, command).await;
                tracing::info!(
                    outcome = outcome_name(&result),
                    elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "command done"
                );
                // Fails only when the link is gone, and then nobody is left to tell.
                let _ = results.send(result).await;
            }
            .instrument(span),
        );
        Ok(())
    }

    /// The hub committed events: acknowledge them in the spool and send what now fits in flight.
    async fn on_ack(&mut self, ack: Ack) -> Result<(), SessionEnd> {
        let Some(delivery) = self.delivery.as_mut() else {
            tracing::warn!("an ack from the hub, but this session delivers no events");
            return Ok(());
        };
        delivery
            .on_ack(ack.epoch, ack.seq)
            .await
            .map_err(spool_failed)?;
        self.fill().await
    }

    /// Queues event batches while the in-flight window has room and the spool has more.
    async fn fill(&mut self) -> Result<(), SessionEnd> {
        loop {
            let Some(delivery) = self.delivery.as_mut() else {
                return Ok(());
            };
            match delivery.next_batch().await.map_err(spool_failed)? {
                Some(frame) => {
                    if let Some(body) = frame.body {
                        self.push(body)?;
                    }
                }
                None => return Ok(()),
            }
        }
    }

    fn push_heartbeat(&mut self) -> Result<(), SessionEnd> {
        self.heartbeat_seq += 1;
        self.push(agent_frame::Body::Heartbeat(Heartbeat {
            seq: self.heartbeat_seq,
            sent_at_unix_ms: now_unix_ms(),
        }))
    }

    fn push_result(&mut self, result: CommandResult) -> Result<(), SessionEnd> {
        self.push(agent_frame::Body::Result(result))
    }

    /// Queues a frame without waiting: straight into the channel when it has room and nothing is
    /// ahead of it, else behind the frames already waiting.
    fn push(&mut self, body: agent_frame::Body) -> Result<(), SessionEnd> {
        let frame = AgentFrame { body: Some(body) };
        if self.pending.is_empty() {
            match self.tx.try_send(frame) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(frame)) => self.pending.push_back(frame),
                Err(TrySendError::Closed(_)) => return Err(closed()),
            }
        } else {
            self.pending.push_back(frame);
        }
        if self.pending.len() > MAX_PENDING_FRAMES {
            return Err(SessionEnd::Lost {
                reason: format!(
                    "the hub has not read {MAX_PENDING_FRAMES} frames; dropping the session"
                ),
            });
        }
        Ok(())
    }
}

/// Waits until the spool has new durable events; false when it closed. Never ready without a spool.
async fn spool_changed(durable: &mut Option<watch::Receiver<u64>>) -> bool {
    match durable {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The spool failed under the session: end it, and retry from the spool's state next time.
fn spool_failed(e: SpoolError) -> SessionEnd {
    SessionEnd::Lost {
        reason: format!("the event spool failed: {e}"),
    }
}

fn closed() -> SessionEnd {
    SessionEnd::Lost {
        reason: "the stream to the hub was closed".to_owned(),
    }
}

fn outcome_name(result: &CommandResult) -> &'static str {
    use banhub_proto::v1::command_result::Outcome;
    match &result.outcome {
        Some(Outcome::Error(_)) => "error",
        Some(_) => "ok",
        None => "none",
    }
}
