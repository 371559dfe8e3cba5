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

/// Why a session is being closed, told to the agent in a `Drain` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReason {
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
    pub commands: mpsc::Receiver<Outgoing>,
    pub stop: CancellationToken,
    drain: Arc<Mutex<Option<DrainReason>>>,
}

impl Registration {
    /// Why the session was told to stop; a hub shutdown when nobody said otherwise.
    pub fn drain_reason(&self) -> DrainReason {
        lock(&self.drain).clone().unwrap_or(DrainReason {
            reason: "the hub is shutting down".to_owned(),
            reconnect: true,
        })
    }
}

#[derive(Debug)]
struct Live {
    session_id: u64,
    info: SessionInfo,
    commands: mpsc::Sender<Outgoing>,
    stop: CancellationToken,
    drain: Arc<Mutex<Option<DrainReason>>>,
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
        };
        if let Some(older) = lock(&self.live).insert(server, live) {
            tracing::info!(%server, older = older.session_id, newer = session_id, "a newer session replaces the older one");
            older.stop(DrainReason {
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

    /// Forgets `session_id` of `server` if it is still the current one.
    pub fn unregister(&self, server: ServerId, session_id: u64) {
        let mut live = lock(&self.live);
        if live
            .get(&server)
            .is_some_and(|l| l.session_id == session_id)
        {
            live.remove(&server);
        }
    }

    /// Stops the session of `server`, if any, telling the agent why.
    pub fn disconnect(&self, server: ServerId, reason: DrainReason) -> bool {
        match lock(&self.live).remove(&server) {
            Some(live) => {
                live.stop(reason);
                true
            }
            None => false,
        }
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
                .send(Outgoing { command, reply })
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
    fn disconnect_tells_the_reason() {
        let sessions = Sessions::new(CancellationToken::new());
        let server = ServerId::new();
        let reg = sessions.register(server, info());
        let reason = DrainReason {
            reason: "removed".to_owned(),
            reconnect: false,
        };
        assert!(sessions.disconnect(server, reason.clone()));
        assert!(reg.stop.is_cancelled());
        assert_eq!(reg.drain_reason(), reason);
        assert!(!sessions.disconnect(server, reason));
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
