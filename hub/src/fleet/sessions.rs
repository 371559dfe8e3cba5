//! The registry of live agent sessions, one per server, and the command round trip through them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use banhub_proto::v1::{Command, CommandResult};
use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::domain::{AgentId, ServerId};

/// What the hub knows about a live session.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub agent_id: AgentId,
    pub connected_at: DateTime<Utc>,
    pub agent_version: String,
    pub fail2ban_version: String,
    pub hostname: String,
    pub address: String,
    pub capabilities: Vec<String>,
}

/// Why an agent session ended: the `reason` of its log line and the label of
/// `banhub_agent_sessions_ended_total`, so both can be grouped. The words go with it as a detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionEnd {
    /// A newer session of the same server started, here or on another replica.
    Superseded,
    /// The server was removed from the hub, or another agent enrolled for it.
    Revoked,
    /// The hub is shutting down.
    Shutdown,
    /// The agent closed the stream.
    AgentClosed,
    /// The stream failed under the session (connection reset, TLS or HTTP/2 error).
    StreamFailed,
    /// The agent sent nothing for three heartbeat intervals.
    Timeout,
    /// The agent stopped reading what the hub sent.
    AgentStalled,
    /// The agent broke the protocol (a second hello, an empty frame).
    ProtocolError,
    /// An event batch could not be stored; the agent sends it again.
    StoreFailed,
    /// Something failed inside the hub.
    Internal,
}

impl SessionEnd {
    /// The stable snake_case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Superseded => "superseded",
            Self::Revoked => "revoked",
            Self::Shutdown => "shutdown",
            Self::AgentClosed => "agent_closed",
            Self::StreamFailed => "stream_failed",
            Self::Timeout => "timeout",
            Self::AgentStalled => "agent_stalled",
            Self::ProtocolError => "protocol_error",
            Self::StoreFailed => "store_failed",
            Self::Internal => "internal",
        }
    }
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session is being closed, told to the agent in a `Drain` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReason {
    /// The kind of ending, for the hub's log and metrics.
    pub end: SessionEnd,
    /// The words the agent is told.
    pub reason: String,
    /// Whether the agent should reconnect (false once it was removed from the hub).
    pub reconnect: bool,
}

/// A command on its way to a session, with where to send the agent's answer.
#[derive(Debug)]
pub struct Outgoing {
    pub command: Command,
    pub reply: oneshot::Sender<CommandResult>,
}

/// What a session task holds: its inbox of commands and the signal to stop.
#[derive(Debug)]
pub struct Registration {
    pub session_id: u64,
    /// Boxed: a channel allocates its slots in blocks up front, and thousands of sessions each
    /// holding a block of whole commands would cost more than the sessions themselves.
    pub commands: mpsc::Receiver<Box<Outgoing>>,
    pub stop: CancellationToken,
    drain: Arc<Mutex<Option<DrainReason>>>,
}

impl Registration {
    /// Why the session was told to stop; a hub shutdown when nobody said otherwise.
    pub fn drain_reason(&self) -> DrainReason {
        lock(&self.drain).clone().unwrap_or(DrainReason {
            end: SessionEnd::Shutdown,
            reason: "the hub is shutting down".to_owned(),
            reconnect: true,
        })
    }
}

#[derive(Debug)]
struct Live {
    session_id: u64,
    info: SessionInfo,
    commands: mpsc::Sender<Box<Outgoing>>,
    stop: CancellationToken,
    drain: Arc<Mutex<Option<DrainReason>>>,
    /// The generation of this session's lease in the database (replicas on PostgreSQL), once taken.
    generation: Option<i64>,
    /// A lease generation another replica announced before this session knew its own: if this
    /// session's turns out lower, it was replaced.
    superseded_by: i64,
}

/// A live session as the lease keeper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLease {
    pub server: ServerId,
    pub session_id: u64,
    pub agent: AgentId,
    pub generation: Option<i64>,
}

fn replaced_elsewhere() -> DrainReason {
    DrainReason {
        end: SessionEnd::Superseded,
        reason: "replaced by a newer session of this agent on another hub replica".to_owned(),
        reconnect: true,
    }
}

impl Live {
    fn stop(&self, reason: DrainReason) {
        *lock(&self.drain) = Some(reason);
        self.stop.cancel();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a command did not come back with an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("the server's agent is not connected")]
    Offline,
    #[error("the agent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the agent's session ended before it answered")]
    SessionEnded,
}

/// Live sessions by server; cheap to clone.
#[derive(Debug, Clone)]
pub struct Sessions {
    live: Arc<Mutex<HashMap<ServerId, Live>>>,
    next_id: Arc<AtomicU64>,
    shutdown: CancellationToken,
}

impl Sessions {
    /// Sessions end when `shutdown` is cancelled.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            live: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
            shutdown,
        }
    }

    /// Records a new session for `server`, replacing (and stopping) an older one of the same server.
    pub fn register(&self, server: ServerId, info: SessionInfo) -> Registration {
        let (tx, rx) = mpsc::channel(64);
        let stop = self.shutdown.child_token();
        let drain = Arc::new(Mutex::new(None));
        let session_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let live = Live {
            session_id,
            info,
            commands: tx,
            stop: stop.clone(),
            drain: drain.clone(),
            generation: None,
            superseded_by: 0,
        };
        if let Some(older) = lock(&self.live).insert(server, live) {
            tracing::info!(%server, older = older.session_id, newer = session_id, "a newer session replaces the older one");
            older.stop(DrainReason {
                end: SessionEnd::Superseded,
                reason: "replaced by a newer session of this agent".to_owned(),
                reconnect: true,
            });
        }
        Registration {
            session_id,
            commands: rx,
            stop,
            drain,
        }
    }

    /// Forgets `session_id` of `server` if it is still the current one; returns its lease
    /// generation, which is then to be released.
    pub fn unregister(&self, server: ServerId, session_id: u64) -> Option<i64> {
        let mut live = lock(&self.live);
        if live
            .get(&server)
            .is_some_and(|l| l.session_id == session_id)
        {
            return live.remove(&server).and_then(|l| l.generation);
        }
        None
    }

    /// Records the lease generation of `session_id` of `server` (only ever upwards). Stops the
    /// session if another replica already announced a newer one.
    pub fn set_generation(&self, server: ServerId, session_id: u64, generation: i64) {
        let mut live = lock(&self.live);
        let Some(l) = live.get_mut(&server).filter(|l| l.session_id == session_id) else {
            return;
        };
        l.generation = Some(l.generation.map_or(generation, |g| g.max(generation)));
        if generation < l.superseded_by
            && let Some(l) = live.remove(&server)
        {
            l.stop(replaced_elsewhere());
        }
    }

    /// Another replica took the lease of `server` at `generation`: a session here with an older
    /// lease ends (with `reconnect` false, whatever its lease: the server is gone).
    pub fn drop_older(&self, server: ServerId, generation: i64, reconnect: bool) -> bool {
        let mut live = lock(&self.live);
        let Some(l) = live.get_mut(&server) else {
            return false;
        };
        let older = match l.generation {
            Some(own) => own < generation,
            None => {
                l.superseded_by = l.superseded_by.max(generation);
                false
            }
        };
        if (older || !reconnect)
            && let Some(l) = live.remove(&server)
        {
            l.stop(if reconnect {
                replaced_elsewhere()
            } else {
                DrainReason {
                    end: SessionEnd::Revoked,
                    reason: "this server was removed from the hub or enrolled again".to_owned(),
                    reconnect: false,
                }
            });
            return true;
        }
        false
    }

    /// Stops the session of `server` unless its agent is `keep`, telling the agent why.
    pub fn disconnect_unless(
        &self,
        server: ServerId,
        keep: Option<AgentId>,
        reason: DrainReason,
    ) -> bool {
        let mut live = lock(&self.live);
        if live
            .get(&server)
            .is_some_and(|l| Some(l.info.agent_id) != keep)
            && let Some(l) = live.remove(&server)
        {
            l.stop(reason);
            return true;
        }
        false
    }

    /// Every live session with its lease generation.
    pub fn local_leases(&self) -> Vec<LocalLease> {
        lock(&self.live)
            .iter()
            .map(|(server, l)| LocalLease {
                server: *server,
                session_id: l.session_id,
                agent: l.info.agent_id,
                generation: l.generation,
            })
            .collect()
    }

    /// The servers with a live session here.
    pub fn live_servers(&self) -> Vec<ServerId> {
        lock(&self.live).keys().copied().collect()
    }

    /// Whether `server` has a live session here.
    pub fn is_live(&self, server: ServerId) -> bool {
        lock(&self.live).contains_key(&server)
    }

    pub fn info(&self, server: ServerId) -> Option<SessionInfo> {
        lock(&self.live).get(&server).map(|l| l.info.clone())
    }

    /// Every live session, for listings.
    pub fn snapshot(&self) -> HashMap<ServerId, SessionInfo> {
        lock(&self.live)
            .iter()
            .map(|(id, l)| (*id, l.info.clone()))
            .collect()
    }

    /// The token whose cancellation ends every session (the hub's shutdown).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    pub fn count(&self) -> usize {
        lock(&self.live).len()
    }

    /// Sends `command` to the session of `server` and waits up to `timeout` for its result.
    pub async fn call(
        &self,
        server: ServerId,
        command: Command,
        timeout: Duration,
    ) -> Result<CommandResult, SendError> {
        let sender = lock(&self.live)
            .get(&server)
            .map(|l| l.commands.clone())
            .ok_or(SendError::Offline)?;
        let (reply, answer) = oneshot::channel();
        let work = async {
            sender
                .send(Box::new(Outgoing { command, reply }))
                .await
                .map_err(|_| SendError::SessionEnded)?;
            answer.await.map_err(|_| SendError::SessionEnded)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| SendError::Timeout(timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> SessionInfo {
        SessionInfo {
            agent_id: AgentId::new(),
            connected_at: Utc::now(),
            agent_version: "0.1.0".to_owned(),
            fail2ban_version: "1.0.2".to_owned(),
            hostname: "web-1".to_owned(),
            address: "192.0.2.1:5000".to_owned(),
            capabilities: vec![],
        }
    }

    #[test]
    fn newer_session_replaces_older() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let first = sessions.register(server, info());
        let second = sessions.register(server, info());
        assert!(first.stop.is_cancelled());
        assert!(first.drain_reason().reconnect);
        assert!(first.drain_reason().reason.contains("replaced"));
        assert!(!second.stop.is_cancelled());
        // The older session's exit must not remove the newer one.
        sessions.unregister(server, first.session_id);
        assert_eq!(sessions.count(), 1);
        sessions.unregister(server, second.session_id);
        assert_eq!(sessions.count(), 0);
    }

    #[test]
    fn a_newer_lease_elsewhere_stops_the_session_here() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        sessions.set_generation(server, reg.session_id, 4);
        // An older or equal generation is this session's own past: nothing happens.
        assert!(!sessions.drop_older(server, 4, true));
        assert!(!reg.stop.is_cancelled());
        assert!(sessions.drop_older(server, 5, true));
        assert!(reg.stop.is_cancelled());
        assert!(reg.drain_reason().reconnect);
        assert!(reg.drain_reason().reason.contains("another hub replica"));
        assert_eq!(sessions.unregister(server, reg.session_id), None);
    }

    #[test]
    fn a_newer_lease_announced_before_ours_is_known_still_wins() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        assert!(!sessions.drop_older(server, 7, true));
        assert!(!reg.stop.is_cancelled());
        sessions.set_generation(server, reg.session_id, 6);
        assert!(reg.stop.is_cancelled());

        // The other way round: our lease is the newer one and stays.
        let reg = sessions.register(server, info());
        assert!(!sessions.drop_older(server, 7, true));
        sessions.set_generation(server, reg.session_id, 8);
        assert!(!reg.stop.is_cancelled());
        assert_eq!(sessions.unregister(server, reg.session_id), Some(8));
    }

    #[test]
    fn removal_elsewhere_stops_whatever_the_lease() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        sessions.set_generation(server, reg.session_id, 9);
        assert!(sessions.drop_older(server, 1, false));
        assert!(!reg.drain_reason().reconnect);
    }

    #[test]
    fn every_stop_names_the_kind_of_ending() {
        let shutdown = CancellationToken::new();
        let sessions = Sessions::new(shutdown.clone());
        let server = ServerId::new();
        let first = sessions.register(server, info());
        let second = sessions.register(server, info());
        assert_eq!(first.drain_reason().end, SessionEnd::Superseded);
        sessions.set_generation(server, second.session_id, 3);
        assert!(sessions.drop_older(server, 4, true));
        assert_eq!(second.drain_reason().end, SessionEnd::Superseded);
        let third = sessions.register(server, info());
        assert!(sessions.drop_older(server, 1, false));
        assert_eq!(third.drain_reason().end, SessionEnd::Revoked);
        let fourth = sessions.register(server, info());
        shutdown.cancel();
        assert!(fourth.stop.is_cancelled());
        assert_eq!(fourth.drain_reason().end, SessionEnd::Shutdown);
        assert_eq!(SessionEnd::AgentClosed.as_str(), "agent_closed");
        assert_eq!(SessionEnd::Timeout.to_string(), "timeout");
    }

    #[test]
    fn disconnect_unless_keeps_the_named_agent() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        let agent = sessions.info(server).expect("live").agent_id;
        let reason = DrainReason {
            end: SessionEnd::Revoked,
            reason: "enrolled again".to_owned(),
            reconnect: false,
        };
        assert!(!sessions.disconnect_unless(server, Some(agent), reason.clone()));
        assert!(!reg.stop.is_cancelled());
        assert!(sessions.disconnect_unless(server, Some(AgentId::new()), reason));
        assert!(reg.stop.is_cancelled());
    }

    #[test]
    fn disconnect_tells_the_reason() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        let reason = DrainReason {
            end: SessionEnd::Revoked,
            reason: "removed".to_owned(),
            reconnect: false,
        };
        assert!(sessions.disconnect_unless(server, None, reason.clone()));
        assert!(reg.stop.is_cancelled());
        assert_eq!(reg.drain_reason(), reason);
        assert!(!sessions.disconnect_unless(server, None, reason));
    }

    #[test]
    fn shutdown_stops_every_session() {
        let shutdown = CancellationToken::new();
        let sessions = Sessions::new(shutdown.clone());
        let reg = sessions.register(ServerId::new(), info());
        shutdown.cancel();
        assert!(reg.stop.is_cancelled());
        assert!(reg.drain_reason().reason.contains("shutting down"));
    }

    #[tokio::test]
    async fn call_round_trips_and_times_out() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        assert_eq!(
            sessions
                .call(server, Command::default(), Duration::from_millis(50))
                .await,
            Err(SendError::Offline)
        );
        let mut reg = sessions.register(server, info());
        let answering = tokio::spawn(async move {
            let out = reg.commands.recv().await.expect("a command");
            let id = out.command.id.clone();
            let _ = out.reply.send(CommandResult { id, outcome: None });
            reg
        });
        let command = Command {
            id: "c1".to_owned(),
            ..Command::default()
        };
        let result = sessions
            .call(server, command, Duration::from_secs(5))
            .await
            .expect("answered");
        assert_eq!(result.id, "c1");
        let _reg = answering.await.expect("task");
        assert_eq!(
            sessions
                .call(server, Command::default(), Duration::from_millis(50))
                .await,
            Err(SendError::Timeout(Duration::from_millis(50)))
        );
    }
}
