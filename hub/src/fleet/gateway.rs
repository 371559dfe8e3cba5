//! `AgentGateway.Session`: one long-lived bidirectional stream per agent, over mutual TLS.
//!
//! Each session is one task whose `select!` lists every trigger: frames from the agent, the commit
//! of its event transaction in flight, commands to send, the heartbeat tick (which also notices a
//! silent agent), and the stop signal (replacement, revocation, shutdown). The registry entry is
//! removed on every exit path.
//!
//! Event batches are pipelined: one transaction per session commits at a time (in a task of its
//! own), while the session goes on reading the agent's next frames and building their rows; what
//! arrived meanwhile is stored by the next transaction, merged. Under a sustained load (the last
//! transaction held at least [`LINGER_MIN_EVENTS`] events, arrived at [`LINGER_MIN_RATE`] or more
//! since the commit before) the next one waits up to [`LINGER`] for [`COALESCE_EVENTS`] to queue
//! up: every transaction rewrites the index pages its rows land on
//! (the address index's anywhere in the key range), so a few large transactions write far less
//! than many small ones, and the CPU they leave is the relay's. A trickle is stored at once.
//!
//! Everything an agent sends is handled in its order: an ack goes out only after the commit that
//! holds its events, acks go out in sequence order, and a frame read behind event batches is
//! handled after their commit (it ends a linger).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::time::{Duration, Instant};

use banhub_proto::v1::agent_gateway_server::AgentGateway;
use banhub_proto::v1::{
    Ack, AgentFrame, CommandResult, Drain, Heartbeat, Hello, HubFrame, Welcome, agent_frame,
    hub_frame,
};
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::sessions::{Registration, SessionEnd, SessionInfo};
use super::{Fleet, ingest};
use crate::domain::{AgentFacts, AgentId, Server};
use crate::events::{EventBatch, EventsError};
use crate::metrics::SessionEndLabels;
use crate::pki::agent_from_cert;
use crate::store::StoreError;

/// How long an agent may take to send its hello after the stream opens.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// How often the "last seen" time of every server with a live session is refreshed in the store.
const SEEN_WRITE_INTERVAL: Duration = Duration::from_secs(30);
/// Servers per "last seen" statement.
const SEEN_CHUNK: usize = 500;
/// Most events stored in one transaction when an agent's batches queue up behind a commit.
const COALESCE_EVENTS: usize = banhub_proto::pipeline::COALESCE_EVENTS;
/// Events read ahead of the transaction in flight at most; the session stops reading frames
/// beyond (the agent keeps at most as many unacknowledged).
const READ_AHEAD_EVENTS: usize = banhub_proto::pipeline::IN_FLIGHT_EVENTS;
/// Events a session's last transaction must hold for the next one to linger (see the module
/// docs), so a short burst is not held back.
const LINGER_MIN_EVENTS: usize = 100;
/// Events per second, over a session's last transaction and the time since the commit before it,
/// from which the next transaction lingers. The rate, not the size, decides: while the store
/// keeps up, each transaction holds what arrived during the last commit, which is few when
/// commits are quick, so small transactions would keep the next ones small.
const LINGER_MIN_RATE: f64 = 2_000.0;
/// How long the next transaction waits at most, from when the last one committed, for
/// [`COALESCE_EVENTS`] to queue up. Bounds what lingering adds to an event's way to the store.
const LINGER: Duration = Duration::from_millis(250);
/// How long a stopping session waits for its transaction in flight, to acknowledge it.
const STOP_COMMIT_WAIT: Duration = Duration::from_secs(2);

/// What waits, in arrival order, for the transaction in flight to commit.
enum Queued {
    /// Events of one spool epoch for one transaction, rows built as they arrived; `last_seq` is the
    /// highest sequence number received (refused events included), acknowledged with them.
    Events { batch: EventBatch, last_seq: u64 },
    /// Another frame, handled once everything before it is committed and acknowledged.
    Frame(Option<agent_frame::Body>),
}

/// The session's transaction in flight and what to acknowledge once it commits.
struct InFlight {
    task: JoinHandle<Result<u64, EventsError>>,
    epoch: u64,
    last_seq: u64,
    events: usize,
}

/// The frames of a session not handled yet, and its transaction in flight.
#[derive(Default)]
struct Pipeline {
    in_flight: Option<InFlight>,
    queue: VecDeque<Queued>,
    /// Events in `queue`.
    queued_events: usize,
    /// Until when the next transaction may wait for more events: set when a commit shows a
    /// sustained load, cleared when the next transaction starts.
    linger_until: Option<Instant>,
    /// When the last transaction committed.
    last_commit: Option<Instant>,
}

impl Pipeline {
    /// Whether the session may read another frame now.
    fn reads(&self) -> bool {
        self.queued_events < READ_AHEAD_EVENTS
    }

    /// A transaction of `events` committed: the next one may linger if they came fast.
    fn on_commit(&mut self, events: usize) {
        let now = Instant::now();
        let sustained = self
            .last_commit
            .is_some_and(|last| sustained(events, now.saturating_duration_since(last)));
        self.linger_until = sustained.then(|| now + LINGER);
        self.last_commit = Some(now);
    }

    /// Whether the `events` at the head of the queue wait for more: the last transaction was
    /// large and committed less than [`LINGER`] ago, and these are fewer than [`COALESCE_EVENTS`]
    /// with nothing queued behind them.
    fn lingers(&self, events: usize) -> bool {
        lingers(self.linger_until, Instant::now(), events, self.queue.len())
    }

    /// When a lingering transaction starts anyway; `None` while none lingers.
    fn linger_ends(&self) -> Option<Instant> {
        self.linger_until.filter(|_| self.in_flight.is_none())
    }

    /// The commit of the transaction in flight (never ready without one).
    async fn committed(&mut self) -> Result<Result<u64, EventsError>, tokio::task::JoinError> {
        match self.in_flight.as_mut() {
            Some(flight) => (&mut flight.task).await,
            None => std::future::pending().await,
        }
    }
}

/// The tonic service; a thin shell around [`Fleet`].
#[derive(Debug, Clone)]
pub struct Gateway {
    pub(super) fleet: Fleet,
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<HubFrame, Status>> + Send>>;

/// The agent behind a request, from its verified client certificate alone.
pub(super) fn peer_agent<T>(request: &Request<T>) -> Result<(AgentId, String), Status> {
    let certs = request.peer_certs().ok_or_else(|| {
        Status::unauthenticated(
            "a client certificate is required; enroll this agent with `banhub-agent enroll <token>`",
        )
    })?;
    let leaf = certs
        .first()
        .ok_or_else(|| Status::unauthenticated("no client certificate was presented"))?;
    agent_from_cert(leaf).map_err(Status::unauthenticated)
}

#[tonic::async_trait]
impl AgentGateway for Gateway {
    type SessionStream = FrameStream;

    async fn session(
        &self,
        request: Request<Streaming<AgentFrame>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (agent, serial) = peer_agent(&request)?;
        let address = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let fleet = &self.fleet;
        let store = fleet.store();
        if !store
            .cert_is_current(agent, &serial)
            .await
            .map_err(store_failed)?
        {
            // The store is the truth; a replica that missed the revocation's notice learns it here,
            // so the agent's next handshake ends in the alert it takes as final.
            fleet.revoke_here(&serial);
            return Err(Status::permission_denied(
                "this agent's certificate was revoked or replaced; enroll the agent again",
            ));
        }
        let server = store
            .server_of_agent(agent)
            .await
            .map_err(store_failed)?
            .ok_or_else(|| {
                Status::permission_denied(
                    "this agent no longer belongs to a server on this hub; enroll it again",
                )
            })?;
        let mut inbound = request.into_inner();
        let hello = read_hello(&mut inbound).await?;
        let facts = AgentFacts {
            agent_version: clip(&hello.agent_version, 64),
            fail2ban_version: clip(&hello.fail2ban_version, 64),
            hostname: clip(&hello.hostname, 255),
            address,
        };
        store
            .mark_seen(server.id, Some(&facts))
            .await
            .map_err(store_failed)?;
        let info = SessionInfo {
            agent_id: agent,
            connected_at: chrono::Utc::now(),
            agent_version: facts.agent_version.clone(),
            fail2ban_version: facts.fail2ban_version.clone(),
            hostname: facts.hostname.clone(),
            address: facts.address.clone(),
            capabilities: hello
                .capabilities
                .iter()
                .take(64)
                .map(|c| clip(c, 64))
                .collect(),
        };
        // What the hub already holds of this spool epoch, so the agent resends nothing it need not.
        let spool_epoch = hello.spool.as_ref().map(|s| s.epoch);
        let committed_seq = match spool_epoch {
            Some(epoch) => {
                fleet
                    .events()
                    .committed_seq(agent, epoch)
                    .await
                    .map_err(|e| match e {
                        EventsError::Store(e) => store_failed(e),
                        other => internal(other),
                    })?
            }
            None => 0,
        };
        let registration = fleet.sessions().register(server.id, info);
        // Boxed frames, for the same reason as the command channel (see `Registration`).
        let (out, out_rx) = mpsc::channel::<Box<HubFrame>>(64);
        let welcome = HubFrame {
            body: Some(hub_frame::Body::Welcome(Welcome {
                protocol_version: banhub_proto::PROTOCOL_VERSION,
                hub_version: env!("CARGO_PKG_VERSION").to_owned(),
                server_id: server.id.to_string(),
                server_name: server.name.to_string(),
                heartbeat_interval_ms: fleet.heartbeat_interval_ms(),
                committed_seq,
            })),
        };
        // The channel is empty, so this cannot wait.
        let _ = out.try_send(Box::new(welcome));
        fleet.metrics().agent_sessions.inc();
        fleet
            .metrics()
            .agents_connected
            .set(gauge(fleet.sessions().count()));
        let span = tracing::info_span!("agent", server_id = %server.id, server = %server.name, %agent, session = registration.session_id);
        let task = SessionTask {
            fleet: fleet.clone(),
            agent,
            server,
            inbound,
            out,
            registration,
        };
        tokio::spawn(task.run().instrument(span));
        Ok(Response::new(Box::pin(
            ReceiverStream::new(out_rx).map(|frame| Ok(*frame)),
        )))
    }
}

/// Whether `events` stored in one transaction, `since` the commit before it, show a sustained load.
fn sustained(events: usize, since: Duration) -> bool {
    events >= LINGER_MIN_EVENTS && events as f64 >= LINGER_MIN_RATE * since.as_secs_f64()
}

/// Whether, at `now`, the `events` at the head of a queue of `queued` frames wait for more, the
/// last commit having allowed a wait `until` then.
fn lingers(until: Option<Instant>, now: Instant, events: usize, queued: usize) -> bool {
    until.is_some_and(|until| now < until) && events < COALESCE_EVENTS && queued == 1
}

/// Ready at `at`; never without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A store failure while opening a session. While the database is unreachable or takes no writes
/// the agent is told so (`Unavailable`): it keeps its spool and connects again.
fn store_failed(e: StoreError) -> Status {
    if e.is_unavailable() {
        tracing::warn!(error = %e, "agent session refused: the database is unavailable");
        Status::unavailable("the hub's database is unavailable just now; keep the events and retry")
    } else {
        internal(e)
    }
}

fn internal(e: impl std::fmt::Display) -> Status {
    tracing::error!(error = %e, "agent session failed on the hub side");
    Status::internal("the hub could not complete this request; see the hub's log")
}

fn clip(text: &str, max: usize) -> String {
    text.chars().filter(|c| !c.is_control()).take(max).collect()
}

async fn read_hello(inbound: &mut Streaming<AgentFrame>) -> Result<Hello, Status> {
    let first = tokio::time::timeout(HELLO_DEADLINE, inbound.message())
        .await
        .map_err(|_| Status::deadline_exceeded("no hello from the agent in time"))??;
    match first.and_then(|f| f.body) {
        Some(agent_frame::Body::Hello(hello)) => {
            if hello.protocol_version != banhub_proto::PROTOCOL_VERSION {
                return Err(Status::failed_precondition(format!(
                    "this hub speaks protocol version {}, the agent {}; upgrade the older side",
                    banhub_proto::PROTOCOL_VERSION,
                    hello.protocol_version
                )));
            }
            Ok(hello)
        }
        _ => Err(Status::invalid_argument(
            "the first frame of a session must be hello",
        )),
    }
}

/// How a session ended: the kind, and the words for the log line.
struct Ended {
    end: SessionEnd,
    detail: String,
}

fn ended(end: SessionEnd, detail: impl Into<String>) -> Ended {
    Ended {
        end,
        detail: detail.into(),
    }
}

struct SessionTask {
    fleet: Fleet,
    agent: AgentId,
    server: Server,
    inbound: Streaming<AgentFrame>,
    out: mpsc::Sender<Box<HubFrame>>,
    registration: Registration,
}

impl SessionTask {
    async fn run(mut self) {
        tracing::info!("agent connected");
        let server = self.server.id;
        self.fleet
            .take_lease(server, self.registration.session_id, self.agent)
            .await;
        // Fleet actions queued while the agent was away go out now, beside the session.
        let fleet = self.fleet.clone();
        tokio::spawn(async move { fleet.deliver_due(server).await }.in_current_span());
        self.fleet.session_started(server);
        let end = self.serve().await;
        let sessions = self.fleet.sessions();
        let generation = sessions.unregister(self.server.id, self.registration.session_id);
        self.fleet.end_lease(server, generation).await;
        self.fleet
            .metrics()
            .agents_connected
            .set(gauge(sessions.count()));
        if let Err(e) = self.fleet.store().mark_seen(self.server.id, None).await {
            tracing::warn!(error = %e, "could not record when the agent was last seen");
        }
        self.fleet
            .metrics()
            .agent_sessions_ended
            .get_or_create(&SessionEndLabels {
                reason: end.end.as_str(),
            })
            .inc();
        tracing::info!(reason = %end.end, detail = %end.detail, "agent session ended");
    }

    /// Runs the session until it ends; returns why.
    async fn serve(&mut self) -> Ended {
        let interval = Duration::from_millis(u64::from(self.fleet.heartbeat_interval_ms()));
        let silence_limit = interval * 3;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        let mut heartbeat_seq = 0u64;
        let mut pending: HashMap<String, oneshot::Sender<CommandResult>> = HashMap::new();
        let mut pipeline = Pipeline::default();
        loop {
            let linger_ends = pipeline.linger_ends();
            tokio::select! {
                biased;
                () = self.registration.stop.cancelled() => {
                    // The commit in flight goes ahead anyway; acknowledged, the agent need not
                    // send it again. What is queued behind it is the agent's to resend.
                    if let Some(flight) = pipeline.in_flight.take()
                        && let Ok(done) = tokio::time::timeout(STOP_COMMIT_WAIT, flight.task).await
                    {
                        let _ = self.acknowledge(flight.epoch, flight.last_seq, flight.events, done).await;
                    }
                    let drain = self.registration.drain_reason();
                    let frame = hub_frame::Body::Drain(Drain { reason: drain.reason.clone(), reconnect: drain.reconnect });
                    // Best effort: the agent may already be gone.
                    let _ = tokio::time::timeout(Duration::from_secs(1), self.send(frame)).await;
                    return ended(drain.end, drain.reason);
                }
                done = pipeline.committed() => {
                    let Some(flight) = pipeline.in_flight.take() else {
                        continue;
                    };
                    pipeline.on_commit(flight.events);
                    if let Err(reason) = self.acknowledge(flight.epoch, flight.last_seq, flight.events, done).await {
                        return reason;
                    }
                    if let Err(reason) = self.advance(&mut pipeline, &mut pending).await {
                        return reason;
                    }
                }
                () = sleep_until(linger_ends) => {
                    // The wait is over: what is queued goes now, and nothing waits on the timer.
                    pipeline.linger_until = None;
                    if let Err(reason) = self.advance(&mut pipeline, &mut pending).await {
                        return reason;
                    }
                }
                message = self.inbound.message(), if pipeline.reads() => match message {
                    Ok(Some(frame)) => {
                        last_heard = Instant::now();
                        if let Err(reason) = self.accept(frame.body, &mut pipeline) {
                            return reason;
                        }
                        if let Err(reason) = self.advance(&mut pipeline, &mut pending).await {
                            return reason;
                        }
                    }
                    Ok(None) => {
                        return self.finish(pipeline, &mut pending, ended(SessionEnd::AgentClosed, "the agent closed the session")).await;
                    }
                    Err(status) => {
                        let reason = ended(SessionEnd::StreamFailed, format!("the stream failed: {}", status.message()));
                        return self.finish(pipeline, &mut pending, reason).await;
                    }
                },
                Some(outgoing) = self.registration.commands.recv() => {
                    let id = outgoing.command.id.clone();
                    pending.insert(id, outgoing.reply);
                    if !self.send(hub_frame::Body::Command(outgoing.command)).await {
                        return ended(SessionEnd::AgentStalled, "the agent stopped reading");
                    }
                }
                _ = ticker.tick() => {
                    if last_heard.elapsed() > silence_limit {
                        return ended(SessionEnd::Timeout, format!("the agent was silent for more than {silence_limit:?}"));
                    }
                    // Results that will never come must not pile up.
                    pending.retain(|_, reply| !reply.is_closed());
                    heartbeat_seq += 1;
                    let beat = Heartbeat { seq: heartbeat_seq, sent_at_unix_ms: chrono::Utc::now().timestamp_millis() };
                    if !self.send(hub_frame::Body::Heartbeat(beat)).await {
                        return ended(SessionEnd::AgentStalled, "the agent stopped reading");
                    }
                }
            }
        }
    }

    /// Takes one frame from the agent into the pipeline: event batches are converted and their
    /// rows built now (while the transaction in flight commits), merged into the last queued batch
    /// of the same epoch up to [`COALESCE_EVENTS`]; any other frame waits its turn. Events that
    /// break the rules cannot be fixed by sending them again, so they are logged, counted and
    /// acknowledged with the rest rather than blocking the agent's spool forever.
    fn accept(
        &self,
        body: Option<agent_frame::Body>,
        pipeline: &mut Pipeline,
    ) -> Result<(), Ended> {
        let Some(agent_frame::Body::Events(batch)) = body else {
            pipeline.queue.push_back(Queued::Frame(body));
            return Ok(());
        };
        let epoch = batch.epoch;
        let merge = matches!(
            pipeline.queue.back(),
            Some(Queued::Events { batch: last, .. }) if last.epoch() == epoch && last.len() < COALESCE_EVENTS
        );
        if !merge {
            pipeline.queue.push_back(Queued::Events {
                batch: self.fleet.events().batch(self.server.id, self.agent, epoch),
                last_seq: 0,
            });
        }
        let Some(Queued::Events {
            batch: prepared,
            last_seq,
        }) = pipeline.queue.back_mut()
        else {
            return Err(ended(
                SessionEnd::Internal,
                "the session's queue lost a batch",
            ));
        };
        let before = prepared.len();
        for event in batch.events {
            *last_seq = (*last_seq).max(event.seq);
            match ingest::to_new_event(event) {
                Ok((seq, event)) => prepared.add(seq, event).map_err(|e| {
                    ended(
                        SessionEnd::StoreFailed,
                        format!("could not store an event batch: {e}"),
                    )
                })?,
                Err(reason) => {
                    self.fleet.metrics().events_rejected.inc();
                    tracing::warn!(epoch, %reason, "an event from the agent breaks the rules; dropped");
                }
            }
        }
        pipeline.queued_events += prepared.len() - before;
        Ok(())
    }

    /// Handles what is queued, in order, until a transaction is in flight: frames are handled, the
    /// next batch starts its transaction in a task of its own (so the session reads on while it
    /// commits), unless it lingers (see [`Pipeline::lingers`]). `Err` ends the session with the
    /// reason.
    async fn advance(
        &mut self,
        pipeline: &mut Pipeline,
        pending: &mut HashMap<String, oneshot::Sender<CommandResult>>,
    ) -> Result<(), Ended> {
        self.advance_with(pipeline, pending, true).await
    }

    /// [`Self::advance`]; with `linger` false, a transaction never waits (the session is ending).
    async fn advance_with(
        &mut self,
        pipeline: &mut Pipeline,
        pending: &mut HashMap<String, oneshot::Sender<CommandResult>>,
        linger: bool,
    ) -> Result<(), Ended> {
        while pipeline.in_flight.is_none() {
            let waits = match pipeline.queue.front() {
                Some(Queued::Events { batch, .. }) => {
                    let events = batch.len();
                    linger && pipeline.lingers(events)
                }
                _ => false,
            };
            if waits {
                break;
            }
            match pipeline.queue.pop_front() {
                None => break,
                Some(Queued::Frame(body)) => self.on_frame(body, pending)?,
                Some(Queued::Events { batch, last_seq }) => {
                    let epoch = batch.epoch();
                    let events = batch.len();
                    pipeline.queued_events -= events;
                    if batch.is_empty() {
                        // Every event of it was refused: acknowledged all the same.
                        self.acknowledge(epoch, last_seq, 0, Ok(Ok(last_seq)))
                            .await?;
                        continue;
                    }
                    pipeline.linger_until = None;
                    let task = tokio::spawn(async move { batch.commit().await }.in_current_span());
                    pipeline.in_flight = Some(InFlight {
                        task,
                        epoch,
                        last_seq,
                        events,
                    });
                }
            }
        }
        Ok(())
    }

    /// The stream ended: what was read is still stored and acknowledged, in order, before the
    /// session ends with `reason` (or with the reason something failed first).
    async fn finish(
        &mut self,
        mut pipeline: Pipeline,
        pending: &mut HashMap<String, oneshot::Sender<CommandResult>>,
        reason: Ended,
    ) -> Ended {
        loop {
            if let Err(reason) = self.advance_with(&mut pipeline, pending, false).await {
                return reason;
            }
            let Some(flight) = pipeline.in_flight.take() else {
                return reason;
            };
            let done = flight.task.await;
            if let Err(reason) = self
                .acknowledge(flight.epoch, flight.last_seq, flight.events, done)
                .await
            {
                return reason;
            }
        }
    }

    /// Handles a frame other than events; `Err` ends the session with the reason.
    fn on_frame(
        &self,
        body: Option<agent_frame::Body>,
        pending: &mut HashMap<String, oneshot::Sender<CommandResult>>,
    ) -> Result<(), Ended> {
        match body {
            Some(agent_frame::Body::Heartbeat(_)) => {}
            Some(agent_frame::Body::Result(result)) => match pending.remove(&result.id) {
                Some(reply) => {
                    let _ = reply.send(result);
                }
                None => {
                    tracing::debug!(command = %result.id, "result for a command nobody waits for");
                }
            },
            Some(agent_frame::Body::Hello(_)) => {
                return Err(ended(
                    SessionEnd::ProtocolError,
                    "protocol error: a second hello",
                ));
            }
            Some(agent_frame::Body::Events(_)) => {
                return Err(ended(
                    SessionEnd::Internal,
                    "an event batch bypassed the session's queue",
                ));
            }
            None => {
                return Err(ended(
                    SessionEnd::ProtocolError,
                    "protocol error: an empty frame",
                ));
            }
        }
        Ok(())
    }

    /// Acknowledges a transaction once it committed (one cumulative ack: the highest sequence
    /// number committed of the epoch, at least the highest the transaction's frames carried). A
    /// store failure ends the session: the agent resends what is not acknowledged.
    async fn acknowledge(
        &self,
        epoch: u64,
        last_seq: u64,
        events: usize,
        done: Result<Result<u64, EventsError>, tokio::task::JoinError>,
    ) -> Result<(), Ended> {
        let committed = match done {
            Ok(Ok(committed)) => committed,
            Ok(Err(e)) => {
                return Err(ended(
                    SessionEnd::StoreFailed,
                    format!("could not store an event batch: {e}"),
                ));
            }
            Err(e) => {
                return Err(ended(
                    SessionEnd::Internal,
                    format!("the task storing an event batch failed: {e}"),
                ));
            }
        };
        self.fleet.metrics().events_ingested.inc_by(events as u64);
        if self
            .send(hub_frame::Body::Ack(Ack {
                epoch,
                seq: committed.max(last_seq),
            }))
            .await
        {
            Ok(())
        } else {
            Err(ended(SessionEnd::AgentStalled, "the agent stopped reading"))
        }
    }

    /// Queues a frame for the agent; false when the agent is gone or has not read for too long.
    async fn send(&self, body: hub_frame::Body) -> bool {
        let limit = Duration::from_millis(u64::from(self.fleet.heartbeat_interval_ms()) * 3);
        let frame = HubFrame { body: Some(body) };
        matches!(
            tokio::time::timeout(limit, self.out.send(Box::new(frame))).await,
            Ok(Ok(()))
        )
    }
}

/// Refreshes the "last seen" time of every server with a live session here, a few statements every
/// [`SEEN_WRITE_INTERVAL`] for the whole fleet rather than one write per session: with thousands of
/// agents, per-session writes would keep the database busy for nothing.
impl Fleet {
    /// Runs the "last seen" writer until shutdown.
    pub async fn run_seen_writer(self) {
        let shutdown = self.0.sessions.shutdown_token();
        write_seen(self, shutdown).await;
    }
}

async fn write_seen(fleet: Fleet, shutdown: tokio_util::sync::CancellationToken) {
    let mut ticker = tokio::time::interval(SEEN_WRITE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let live = fleet.sessions().live_servers();
        for chunk in live.chunks(SEEN_CHUNK) {
            if let Err(e) = fleet.store().mark_seen_many(chunk).await {
                tracing::warn!(error = %e, "could not record when agents were last seen");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickle_or_a_short_burst_is_stored_at_once() {
        let mut pipeline = Pipeline::default();
        pipeline.on_commit(5_000);
        assert_eq!(pipeline.linger_until, None, "the first commit has no rate");
        pipeline.on_commit(LINGER_MIN_EVENTS - 1);
        assert_eq!(pipeline.linger_until, None, "a short burst");
        assert!(!lingers(pipeline.linger_until, Instant::now(), 1, 1));
        assert_eq!(pipeline.linger_ends(), None);
        // 150 events over a second is 150/s.
        assert!(!sustained(150, Duration::from_secs(1)));
    }

    #[test]
    fn a_sustained_load_lingers_whatever_the_size_of_the_last_transaction() {
        // 300 events 50 ms after the commit before: 6,000/s.
        assert!(sustained(300, Duration::from_millis(50)));
        assert!(sustained(8_000, Duration::from_secs(2)));
        assert!(!sustained(8_000, Duration::from_secs(5)));
    }

    #[test]
    fn after_a_sustained_commit_a_small_batch_waits_until_the_linger_runs_out() {
        let mut pipeline = Pipeline::default();
        pipeline.on_commit(1_000);
        let before = Instant::now();
        pipeline.on_commit(1_000);
        let until = pipeline
            .linger_until
            .expect("1,000 events at once allow a linger");
        assert!(until >= before + LINGER && until <= Instant::now() + LINGER);
        assert_eq!(pipeline.linger_ends(), Some(until));
        assert!(lingers(
            Some(until),
            until - Duration::from_millis(1),
            500,
            1
        ));
        assert!(!lingers(Some(until), until, 500, 1));
    }

    #[test]
    fn a_full_batch_or_a_frame_behind_it_goes_at_once() {
        let until = Some(Instant::now() + LINGER);
        let now = Instant::now();
        assert!(lingers(until, now, COALESCE_EVENTS - 1, 1));
        assert!(!lingers(until, now, COALESCE_EVENTS, 1));
        assert!(!lingers(until, now, 10, 2));
    }
}
