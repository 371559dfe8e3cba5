//! The gRPC listener's TLS accept loop. Handshakes run in their own tasks, bounded in time, so a slow
//! or hostile client cannot hold up others; a refused certificate is logged with its reason.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

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
                match tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::info!(%peer, error = %e, "TLS handshake with an agent refused")
                    }
                    Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
