//! TLS for the agent gateway: the server configuration and the client-certificate verifier.
//!
//! Client certificates are optional at the TLS layer so that an agent without one can call
//! `Enrollment.Enroll`; `AgentGateway.Session` then refuses any connection that did not present one. A
//! certificate that *is* presented must chain to our CA and must not be revoked, or the handshake fails.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::PkiError;
use crate::domain::AgentId;

/// Serial numbers (lower-case hex) of revoked agent certificates, shared between the store and the
/// handshake.
#[derive(Debug, Clone, Default)]
pub struct RevocationList(Arc<RwLock<HashSet<String>>>);

impl RevocationList {
    pub fn replace_all(&self, serials: impl IntoIterator<Item = String>) {
        let mut set = self.0.write().unwrap_or_else(|e| e.into_inner());
        set.clear();
        set.extend(serials.into_iter().map(|s| normalize_serial(&s)));
    }

    pub fn revoke(&self, serial: &str) {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(normalize_serial(serial));
    }

    pub fn is_revoked(&self, serial: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&normalize_serial(serial))
    }
}

fn normalize_serial(serial: &str) -> String {
    let trimmed = serial.trim_start_matches("00");
    trimmed.to_ascii_lowercase()
}

/// What the handshake learned about the peer; attached to every request of the connection.
#[derive(Debug, Clone)]
pub struct AgentPeer {
    pub remote_addr: Option<std::net::SocketAddr>,
    /// The agent and certificate serial, when a verified client certificate was presented.
    pub agent: Option<(AgentId, String)>,
}

/// Reads the agent id (URI SAN) and serial (lower-case hex) from a DER certificate.
pub fn agent_from_cert(der: &[u8]) -> Result<(AgentId, String), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let serial = normalize_serial(&hex::encode(cert.tbs_certificate.raw_serial()));
    let san = cert
        .subject_alternative_name()
        .map_err(|e| e.to_string())?
        .ok_or("certificate has no subject alternative name")?;
    for name in &san.value.general_names {
        if let x509_parser::extensions::GeneralName::URI(uri) = name
            && let Some(agent) = AgentId::from_uri(uri)
        {
            return Ok((agent, serial));
        }
    }
    Err("certificate names no banhub agent".to_owned())
}

#[derive(Debug)]
struct AgentCertVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    revoked: RevocationList,
}

impl ClientCertVerifier for AgentCertVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        match agent_from_cert(end_entity) {
            Ok((_, serial)) if self.revoked.is_revoked(&serial) => Err(
                rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked),
            ),
            Ok(_) => Ok(verified),
            Err(reason) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(
                    std::io::Error::other(reason),
                ))),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls configuration of the agent gateway: our certificate (with the CA appended so agents can
/// pin it during enrollment), optional client certificates checked against the CA and the revocation
/// list, HTTP/2 only.
pub fn server_tls_config(
    ca_der: &[u8],
    hub_cert_pem: &str,
    hub_key_pem: &str,
    revoked: RevocationList,
) -> Result<rustls::ServerConfig, PkiError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .map_err(|e| PkiError::BadCsr(format!("CA certificate: {e}")))?;
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| PkiError::BadCsr(format!("client verifier: {e}")))?;
    let verifier = Arc::new(AgentCertVerifier { inner, revoked });

    let mut chain: Vec<CertificateDer<'static>> =
        rustls_pemfile::certs(&mut hub_cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| PkiError::BadCsr(format!("hub certificate: {e}")))?;
    chain.push(CertificateDer::from(ca_der.to_vec()));
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut hub_key_pem.as_bytes())
        .map_err(|e| PkiError::BadCsr(format!("hub key: {e}")))?
        .ok_or_else(|| PkiError::BadCsr("hub key missing".to_owned()))?;

    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PkiError::BadCsr(format!("TLS versions: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| PkiError::BadCsr(format!("hub certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revocation_list_normalizes_serials() {
        let list = RevocationList::default();
        list.revoke("00AbCd");
        assert!(list.is_revoked("abcd"));
        assert!(!list.is_revoked("abce"));
        list.replace_all(vec!["01".to_owned()]);
        assert!(!list.is_revoked("abcd"));
        assert!(list.is_revoked("0001"));
    }
}
