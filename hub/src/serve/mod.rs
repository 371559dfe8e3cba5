//! How the HTTP router reaches clients: over plain HTTP or HTTPS (`http.tls`), at the root or under
//! a prefix (`http.base_path`) for a reverse proxy that forwards a sub-path, with the security
//! headers on every answer, `Connection: close` where a request's body was left unread, and the
//! client's address behind a trusted reverse proxy.

pub mod base_path;
pub mod forwarded;
pub mod headers;
pub mod problem;
pub mod tls;
pub mod trace;
pub mod unread_body;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use base_path::mount;
pub use tls::{TlsError, TlsListener, server_config};

/// Serves `router` on `listener` until `shutdown`, then lets open requests finish. With `tls`, every
/// connection is HTTPS. Handlers can read the peer address as `ConnectInfo<SocketAddr>` either way.
pub async fn serve_http(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    match tls {
        None => {
            axum::serve(listener, service)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
        Some(config) => {
            // `tap_io` is a no-op here; axum provides `ConnectInfo<SocketAddr>` for any tapped
            // listener whose address is a `SocketAddr`, and for a bare custom listener it does not.
            let listener = TlsListener::new(listener, config, shutdown.clone())?.tap_io(|_| {});
            axum::serve(listener, service)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    }
}
