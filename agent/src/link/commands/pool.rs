//! Kept-open connections to fail2ban's control socket, shared by all commands.
//!
//! Connecting costs little, but the dashboard asks for status every few seconds and a status is
//! 50 calls and more, so commands borrow a connection ([`Fail2banPool::lease`]) and give it back
//! when the lease is dropped. A connection taken from the pool is first checked with `ping`
//! (one round trip, tens of microseconds): one that broke (fail2ban restarted, a call timed out)
//! is dropped and a new one made, so a command never fails because of an old connection.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fail2ban::{Fail2banError, Fail2banSocket};

/// Idle connections kept; more are opened when commands run side by side, and closed after.
const MAX_IDLE: usize = 4;

/// A pool of connections to one fail2ban socket. Clones share the connections.
#[derive(Debug, Clone)]
pub struct Fail2banPool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    timeout: Duration,
    idle: Mutex<Vec<Fail2banSocket>>,
}

/// A borrowed connection; goes back to the pool when dropped.
#[derive(Debug)]
pub struct Lease {
    pool: Fail2banPool,
    socket: Option<Fail2banSocket>,
}

impl Fail2banPool {
    /// `timeout` bounds connecting and each call.
    pub fn new(path: &Path, timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                timeout,
                idle: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A working connection: an idle one that still answers `ping`, else a new one.
    pub async fn lease(&self) -> Result<Lease, Fail2banError> {
        if let Some(mut socket) = self.take_idle() {
            match socket.ping().await {
                Ok(()) => return Ok(self.wrap(socket)),
                Err(e) => {
                    // fail2ban restarted (or hangs): the other idle connections are no better,
                    // and trying each could cost a timeout apiece.
                    tracing::debug!(error = %e, "dropping stale fail2ban connections");
                    self.clear();
                }
            }
        }
        let socket = Fail2banSocket::connect(&self.inner.path, self.inner.timeout).await?;
        Ok(self.wrap(socket))
    }

    /// Closes every idle connection (after fail2ban was restarted, they are all stale).
    pub fn clear(&self) {
        self.idle().clear();
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Fail2banSocket>> {
        self.inner.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_idle(&self) -> Option<Fail2banSocket> {
        self.idle().pop()
    }

    fn wrap(&self, socket: Fail2banSocket) -> Lease {
        Lease {
            pool: self.clone(),
            socket: Some(socket),
        }
    }
}

impl Lease {
    /// Drops the connection instead of returning it (its state is unknown).
    pub fn discard(mut self) {
        self.socket = None;
    }
}

impl Deref for Lease {
    type Target = Fail2banSocket;
    fn deref(&self) -> &Fail2banSocket {
        self.socket
            .as_ref()
            .expect("a lease holds its socket until dropped")
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Fail2banSocket {
        self.socket
            .as_mut()
            .expect("a lease holds its socket until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(socket) = self.socket.take() {
            let mut idle = self.pool.idle();
            if idle.len() < MAX_IDLE {
                idle.push(socket);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fail2ban::socket::END_COMMAND;
    use crate::link::commands::fake_fail2ban;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn idle(pool: &Fail2banPool) -> usize {
        pool.idle().len()
    }

    #[tokio::test]
    async fn connections_are_reused() {
        let (_dir, path) = fake_fail2ban::spawn(Duration::ZERO);
        let pool = Fail2banPool::new(&path, Duration::from_secs(2));
        {
            let mut a = pool.lease().await.expect("lease");
            let mut b = pool
                .lease()
                .await
                .expect("second lease while the first is out");
            a.ping().await.expect("ping a");
            b.ping().await.expect("ping b");
        }
        assert_eq!(idle(&pool), 2);
        pool.lease()
            .await
            .expect("reused")
            .version()
            .await
            .expect("version");
        assert_eq!(idle(&pool), 2);
        pool.lease().await.expect("lease").discard();
        assert_eq!(idle(&pool), 1);
        pool.clear();
        assert_eq!(idle(&pool), 0);
    }

    /// A server that answers one request per connection and then hangs up, like a fail2ban
    /// that restarted between two commands.
    fn one_answer_server() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f2b.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.ends_with(END_COMMAND) {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let pong = include_bytes!("../../fail2ban/fixtures/ping.pickle");
                let _ = stream.write_all(&[&pong[..], END_COMMAND].concat()).await;
            }
        });
        (dir, path)
    }

    #[tokio::test]
    async fn stale_connections_are_replaced() {
        let (_dir, path) = one_answer_server();
        let pool = Fail2banPool::new(&path, Duration::from_secs(2));
        pool.lease()
            .await
            .expect("lease")
            .ping()
            .await
            .expect("first answer");
        assert_eq!(idle(&pool), 1);
        // The idle connection was hung up on: its check fails and a new one answers.
        pool.lease()
            .await
            .expect("replaced")
            .ping()
            .await
            .expect("new connection");
    }

    #[tokio::test]
    async fn no_server_is_unavailable() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = Fail2banPool::new(&dir.path().join("none.sock"), Duration::from_secs(2));
        let err = pool.lease().await.expect_err("no server");
        assert!(matches!(err, Fail2banError::Unavailable { .. }), "{err}");
        assert_eq!(pool.path(), dir.path().join("none.sock"));
    }
}
