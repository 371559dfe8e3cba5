//! The gRPC listener's TLS accept loop. Handshakes run in their own tasks, bounded in time, so a slow
//! or hostile client cannot hold up others; a refused certificate is logged with its reason, and its
//! alert is given time to reach the agent before the connection closes.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a refused connection stays open after the alert, reading what the agent still sends.
const LINGER: Duration = Duration::from_secs(2);

/// Accepted, handshaken connections for `tonic`'s `serve_with_incoming`.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(128);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
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
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err((e, tcp))) => {
                        tracing::info!(%peer, error = %e, "TLS handshake with an agent refused");
                        linger(tcp).await;
                    }
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Closes a refused connection so that its alert arrives. Under TLS 1.3 the agent has finished its
/// side of the handshake and sent its first request before the hub judged its certificate; closing a
/// socket with that request unread sends a reset, which can overtake the alert (and an agent told
/// only "connection reset" cannot know it was revoked). So: end our side, read until the agent
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
