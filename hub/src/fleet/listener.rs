//! The TLS accept loop of both of the hub's listeners: the agents' gRPC listener here, and the
//! HTTPS listener of `serve`. Handshakes run in their own tasks, bounded in time, so a slow or
//! hostile client cannot hold up others; a refused handshake is logged with its reason, and its
//! alert is given time to reach the client before the connection closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a refused connection stays open after the alert, reading what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// Handshaken connections waiting for the server to pick them up.
const BACKLOG: usize = 128;
/// How long the loop waits after a failed `accept` (out of file descriptors and the like).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Which listener a loop serves: it names the listener in the log, and sets how loudly a refused
/// handshake is logged (an agent refused is news to an operator; a stray HTTPS client is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsListenerKind {
    /// The agents' gRPC listener (mutual TLS).
    Agents,
    /// The HTTP listener with `http.tls` set.
    Https,
}

impl TlsListenerKind {
    fn name(self) -> &'static str {
        match self {
            Self::Agents => "gRPC",
            Self::Https => "HTTPS",
        }
    }
}

/// Accepts TCP connections on `listener` and hands out those whose TLS handshake succeeds, with
/// the peer's address. The loop ends with `shutdown` or when the receiver is dropped.
pub fn accept_tls(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    kind: TlsListenerKind,
    shutdown: CancellationToken,
) -> mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                () = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Back off instead of spinning on an error that lasts.
                    tracing::warn!(listener = kind.name(), error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let accept = acceptor.accept(tcp).into_fallible();
                match tokio::time::timeout(HANDSHAKE_DEADLINE, accept).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send((stream, peer)).await;
                    }
                    Ok(Err((e, tcp))) => {
                        match kind {
                            TlsListenerKind::Agents => tracing::info!(
                                %peer, error = %e, "TLS handshake with an agent refused"
                            ),
                            TlsListenerKind::Https => {
                                tracing::debug!(%peer, error = %e, "HTTPS handshake failed")
                            }
                        }
                        linger(tcp).await;
                    }
                    Err(_) => match kind {
                        TlsListenerKind::Agents => tracing::info!(%peer, "TLS handshake timed out"),
                        TlsListenerKind::Https => {
                            tracing::debug!(%peer, "HTTPS handshake timed out")
                        }
                    },
                }
            });
        }
    });
    rx
}

/// Accepted, handshaken agent connections for `tonic`'s `serve_with_incoming`.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) -> impl tokio_stream::Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
    let accepted = accept_tls(listener, config, TlsListenerKind::Agents, shutdown);
    ReceiverStream::new(accepted).map(|(stream, _)| Ok(stream))
}

/// Closes a refused connection so that its alert arrives. Under TLS 1.3 the client has finished its
/// side of the handshake and sent its first request before the hub judged its certificate; closing a
/// socket with that request unread sends a reset, which can overtake the alert (and an agent told
/// only "connection reset" cannot know it was revoked). So: end our side, read until the client
/// closes or [`LINGER`] passes, then close.
async fn linger(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = tcp.read(&mut sink).await
            && n > 0
        {}
    })
    .await;
}
