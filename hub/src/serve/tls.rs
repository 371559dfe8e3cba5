//! HTTPS for the HTTP listener when `http.tls.cert_path` and `key_path` are set: the rustls server
//! configuration read from PEM files, and an axum [`Listener`] over the hub's one TLS accept loop
//! ([`accept_tls`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::serve::Listener;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::fleet::{TlsListenerKind, accept_tls};

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} holds no PEM certificate (http.tls.cert_path wants the certificate chain, leaf first)"
    )]
    NoCertificate { path: PathBuf },
    #[error(
        "{path} holds no PEM private key (http.tls.key_path wants a PKCS#8, PKCS#1 or SEC1 key)"
    )]
    NoKey { path: PathBuf },
    #[error("the HTTPS certificate and key cannot be used together: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The server configuration for `cert_path` (PEM chain, leaf first) and `key_path` (PEM key), with
/// HTTP/2 and HTTP/1.1 offered by ALPN.
pub fn server_config(cert_path: &Path, key_path: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            what,
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read("the HTTPS certificate", cert_path)?;
    let key_pem = read("the HTTPS private key", key_path)?;
    let chain = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Read {
            what: "the HTTPS certificate",
            path: cert_path.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_owned(),
        });
    }
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|source| TlsError::Read {
            what: "the HTTPS private key",
            path: key_path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::NoKey {
            path: key_path.to_owned(),
        })?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// TLS connections accepted on a TCP listener, for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener {
    local: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Starts accepting on `listener` (the accept loop of [`accept_tls`]); the loop ends with
    /// `shutdown`.
    pub fn new(
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let accepted = accept_tls(listener, config, TlsListenerKind::Https, shutdown);
        Ok(Self { local, accepted })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop ended (shutdown): axum's graceful shutdown is already under way and
            // stops calling accept; until it does, there is nothing more to hand out.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn errors_name_the_file() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let cert = write(dir.path(), "cert.pem", &generated.cert.pem());
        let key = write(
            dir.path(),
            "key.pem",
            &generated.signing_key.serialize_pem(),
        );
        let empty = write(dir.path(), "empty.pem", "");
        let missing = dir.path().join("missing.pem");

        server_config(&cert, &key).expect("a matching pair loads");
        let err = server_config(&missing, &key).expect_err("missing");
        assert!(err.to_string().contains("missing.pem"), "{err}");
        let err = server_config(&empty, &key).expect_err("no cert");
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        let err = server_config(&cert, &empty).expect_err("no key");
        assert!(matches!(err, TlsError::NoKey { .. }), "{err}");
        // A key of another certificate.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let other_key = write(dir.path(), "other.pem", &other.signing_key.serialize_pem());
        let err = server_config(&cert, &other_key).expect_err("mismatch");
        assert!(matches!(err, TlsError::Rustls(_)), "{err}");
    }
}
