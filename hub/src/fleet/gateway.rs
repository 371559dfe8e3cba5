//! `AgentGateway.Session`: one long-lived bidirectional stream per agent, over mutual TLS.
//!
//! Each session is one task whose `select!` lists every trigger: frames from the agent, commands to
//! send, the heartbeat tick (which also notices a silent agent), and the stop signal (replacement,
//! revocation, shutdown). The registry entry is removed on every exit path.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::{Duration, Instant};

use banhub_proto::v1::agent_gateway_server::AgentGateway;
use banhub_proto::v1::{
    Ack, AgentFrame, CommandResult, Drain, EventBatch, Heartbeat, Hello, HubFrame, Welcome,
    agent_frame, hub_frame,
};
use futures::{FutureExt as _, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::sessions::{Registration, SessionInfo};
use super::{Fleet, ingest};
use crate::domain::{AgentFacts, AgentId, Server};
use crate::pki::agent_from_cert;

/// How long an agent may take to send its hello after the stream opens.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// How often the "last seen" time of every server with a live session is refreshed in the store.
const SEEN_WRITE_INTERVAL: Duration = Duration::from_secs(30);
/// Servers per "last seen" statement.
const SEEN_CHUNK: usize = 500;
/// Most events stored in one transaction when an agent's batches queue up behind a commit (four
/// batches of the agent's largest).
const COALESCE_EVENTS: usize = 4_000;

/// What was read after the batches gathered for one transaction.
enum After {
    Nothing,
    /// Another frame, handled after the commit (boxed: a body is large, and rare here).
    Frame(Box<Option<agent_frame::Body>>),
    /// The stream ended (the reason); the gathered batches are still stored and acknowledged.
    End(String),
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
            .map_err(internal)?
        {
            return Err(Status::permission_denied(
                "this agent's certificate was revoked or replaced; enroll the agent again",
            ));
        }
        let server = store
            .server_of_agent(agent)
            .await
            .map_err(internal)?
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
            .map_err(internal)?;
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
            Some(epoch) => fleet
                .events()
                .committed_seq(agent, epoch)
                .await
                .map_err(internal)?,
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

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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
        tracing::info!(reason = %end, "agent session ended");
    }

    /// Runs the session until it ends; returns why.
    async fn serve(&mut self) -> String {
        let interval = Duration::from_millis(u64::from(self.fleet.heartbeat_interval_ms()));
        let silence_limit = interval * 3;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        let mut heartbeat_seq = 0u64;
        let mut pending: HashMap<String, oneshot::Sender<CommandResult>> = HashMap::new();
        loop {
            tokio::select! {
                biased;
                () = self.registration.stop.cancelled() => {
                    let drain = self.registration.drain_reason();
                    let frame = hub_frame::Body::Drain(Drain { reason: drain.reason.clone(), reconnect: drain.reconnect });
                    // Best effort: the agent may already be gone.
                    let _ = tokio::time::timeout(Duration::from_secs(1), self.send(frame)).await;
                    return drain.reason;
                }
                message = self.inbound.message() => match message {
                    Ok(Some(frame)) => {
                        last_heard = Instant::now();
                        if let Err(reason) = self.on_frame(frame.body, &mut pending).await {
                            return reason;
                        }
                    }
                    Ok(None) => return "the agent closed the session".to_owned(),
                    Err(status) => return format!("the stream failed: {}", status.message()),
                },
                Some(outgoing) = self.registration.commands.recv() => {
                    let id = outgoing.command.id.clone();
                    pending.insert(id, outgoing.reply);
                    if !self.send(hub_frame::Body::Command(outgoing.command)).await {
                        return "the agent stopped reading".to_owned();
                    }
                }
                _ = ticker.tick() => {
                    if last_heard.elapsed() > silence_limit {
                        return format!("the agent was silent for more than {silence_limit:?}");
                    }
                    // Results that will never come must not pile up.
                    pending.retain(|_, reply| !reply.is_closed());
                    heartbeat_seq += 1;
                    let beat = Heartbeat { seq: heartbeat_seq, sent_at_unix_ms: chrono::Utc::now().timestamp_millis() };
                    if !self.send(hub_frame::Body::Heartbeat(beat)).await {
                        return "the agent stopped reading".to_owned();
                    }
                }
            }
        }
    }

    /// Handles one frame from the agent; `Err` ends the session with the reason. A frame read while
    /// gathering queued event batches is handled after their commit, in arrival order.
    async fn on_frame(
        &mut self,
        body: Option<agent_frame::Body>,
        pending: &mut HashMap<String, oneshot::Sender<CommandResult>>,
    ) -> Result<(), String> {
        let mut next = Some(body);
        while let Some(body) = next.take() {
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
                    return Err("protocol error: a second hello".to_owned());
                }
                Some(agent_frame::Body::Events(batch)) => {
                    let (batches, after) = self.queued_batches(batch);
                    self.ingest(batches).await?;
                    match after {
                        After::Nothing => {}
                        After::Frame(body) => next = Some(*body),
                        After::End(reason) => return Err(reason),
                    }
                }
                None => return Err("protocol error: an empty frame".to_owned()),
            }
        }
        Ok(())
    }

    /// `first` and the batches of the same spool epoch that already arrived behind it (the agent
    /// keeps several in flight), up to [`COALESCE_EVENTS`] events: they are stored in one
    /// transaction, so while one commits the next ones queue up and share the following commit.
    /// Never waits for a frame; what else was read is returned to be handled after the commit.
    fn queued_batches(&mut self, first: EventBatch) -> (Vec<EventBatch>, After) {
        let epoch = first.epoch;
        let mut count = first.events.len();
        let mut batches = vec![first];
        while count < COALESCE_EVENTS {
            // `message` is cancel-safe: a frame not complete yet stays buffered in the stream.
            match self.inbound.message().now_or_never() {
                None => break,
                Some(Ok(Some(frame))) => match frame.body {
                    Some(agent_frame::Body::Events(batch)) if batch.epoch == epoch => {
                        count += batch.events.len();
                        batches.push(batch);
                    }
                    other => return (batches, After::Frame(Box::new(other))),
                },
                Some(Ok(None)) => {
                    return (
                        batches,
                        After::End("the agent closed the session".to_owned()),
                    );
                }
                Some(Err(status)) => {
                    return (
                        batches,
                        After::End(format!("the stream failed: {}", status.message())),
                    );
                }
            }
        }
        (batches, After::Nothing)
    }

    /// Stores batches of one spool epoch in one transaction and acknowledges them (one cumulative
    /// ack) once committed. Events that break the rules cannot be fixed by sending them again, so
    /// they are logged, counted and acknowledged with the rest rather than blocking the agent's
    /// spool forever. A store failure ends the session: the agent resends.
    async fn ingest(&self, batches: Vec<EventBatch>) -> Result<(), String> {
        let epoch = batches.first().map_or(0, |b| b.epoch);
        let mut events = Vec::with_capacity(batches.iter().map(|b| b.events.len()).sum());
        let mut last_seq = 0;
        for event in batches.into_iter().flat_map(|b| b.events) {
            last_seq = last_seq.max(event.seq);
            match ingest::to_new_event(event) {
                Ok(pair) => events.push(pair),
                Err(reason) => {
                    self.fleet.metrics().events_rejected.inc();
                    tracing::warn!(epoch, %reason, "an event from the agent breaks the rules; dropped");
                }
            }
        }
        let committed = if events.is_empty() {
            last_seq
        } else {
            let count = events.len();
            let committed = self
                .fleet
                .events()
                .ingest_batch(self.server.id, self.agent, epoch, events)
                .await
                .map_err(|e| format!("could not store an event batch: {e}"))?;
            self.fleet.metrics().events_ingested.inc_by(count as u64);
            committed.max(last_seq)
        };
        if self
            .send(hub_frame::Body::Ack(Ack {
                epoch,
                seq: committed,
            }))
            .await
        {
            Ok(())
        } else {
            Err("the agent stopped reading".to_owned())
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
pub(super) async fn write_seen(fleet: Fleet, shutdown: tokio_util::sync::CancellationToken) {
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
