//! TLS toward the hub: pinning the hub's CA by fingerprint during enrollment, reading PEM material,
//! and telling an operator in plain words why a connection to the hub failed.

use std::error::Error as StdError;
use std::sync::{Arc, Mutex};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{AlertDescription, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

/// Why PEM material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("{what} is not valid PEM: {source}")]
    Syntax {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} holds no certificate")]
    NoCertificate { what: &'static str },
}

/// Installs ring as rustls' process-wide crypto provider, which tonic's TLS expects. Calling it again
/// (or after another part of the process did) is harmless.
pub fn install_crypto_provider() {
    // An error only means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Lower-case hex SHA-256 of a DER certificate: the form enrollment tokens and `identity.json` use.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// The first certificate of a PEM document, as DER.
pub fn first_certificate(
    pem: &str,
    what: &'static str,
) -> Result<CertificateDer<'static>, PemError> {
    match rustls_pemfile::certs(&mut pem.as_bytes()).next() {
        Some(Ok(der)) => Ok(der),
        Some(Err(source)) => Err(PemError::Syntax { what, source }),
        None => Err(PemError::NoCertificate { what }),
    }
}

/// What the pinning verifier saw during the last handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinOutcome {
    /// No handshake reached certificate verification yet.
    NotYet,
    /// The chain held the pinned CA and the hub's certificate verified against it.
    Pinned(CertificateDer<'static>),
    /// No certificate of the chain has the pinned fingerprint; these are the fingerprints it had.
    Mismatch { seen: Vec<String> },
    /// The pinned CA was there but the hub's certificate did not verify against it.
    Invalid { reason: String },
}

/// A server-certificate verifier that trusts exactly one CA, found in the server's own chain by its
/// SHA-256 fingerprint (from the enrollment token), and checks the end-entity certificate against it
/// for [`banhub_proto::HUB_TLS_NAME`] whatever address was dialled.
///
/// This is how an agent that has nothing yet but a token learns the hub's private CA without trusting
/// whoever answers: a different CA, or a certificate not issued by the pinned one, fails the handshake.
#[derive(Debug)]
pub struct PinnedCaVerifier {
    fingerprint: String,
    provider: Arc<CryptoProvider>,
    outcome: Mutex<PinOutcome>,
}

impl PinnedCaVerifier {
    /// A verifier pinning the CA whose DER has this lower-case hex SHA-256.
    pub fn new(fingerprint: &str) -> Arc<Self> {
        Arc::new(Self {
            fingerprint: fingerprint.to_ascii_lowercase(),
            provider: provider(),
            outcome: Mutex::new(PinOutcome::NotYet),
        })
    }

    /// What the last handshake found.
    pub fn outcome(&self) -> PinOutcome {
        self.outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record(&self, outcome: PinOutcome) {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
    }

    fn refuse(&self, outcome: PinOutcome, reason: String) -> rustls::Error {
        self.record(outcome);
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
            Arc::new(std::io::Error::other(reason)),
        )))
    }
}

impl ServerCertVerifier for PinnedCaVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(ca) = intermediates
            .iter()
            .find(|cert| fingerprint(cert) == self.fingerprint)
        else {
            let seen = std::iter::once(end_entity)
                .chain(intermediates)
                .map(|cert| fingerprint(cert))
                .collect();
            return Err(self.refuse(
                PinOutcome::Mismatch { seen },
                "this hub's CA does not match the token".to_owned(),
            ));
        };
        let ca = ca.clone().into_owned();
        let mut roots = RootCertStore::empty();
        if let Err(e) = roots.add(ca.clone()) {
            return Err(self.refuse(
                PinOutcome::Invalid {
                    reason: format!("the pinned CA certificate is unusable: {e}"),
                },
                "the pinned CA certificate is unusable".to_owned(),
            ));
        }
        let inner = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::clone(&self.provider),
        )
        .build()
        .map_err(|e| rustls::Error::General(format!("pinned CA verifier: {e}")))?;
        // Always the fixed name: the address dialled may be an IP, a load balancer or a new host name.
        let name = ServerName::try_from(banhub_proto::HUB_TLS_NAME)
            .map_err(|e| rustls::Error::General(format!("hub TLS name: {e}")))?;
        match inner.verify_server_cert(end_entity, &[], &name, ocsp_response, now) {
            Ok(verified) => {
                self.record(PinOutcome::Pinned(ca));
                Ok(verified)
            }
            Err(e) => {
                self.record(PinOutcome::Invalid {
                    reason: e.to_string(),
                });
                Err(e)
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What kind of failure a connection attempt to the hub ran into, for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectProblem {
    /// The hub refused our client certificate as revoked (TLS alert `certificate_revoked`): the server
    /// was deleted on the hub, or another agent enrolled in its place. Final, unlike every other problem.
    CertificateRevoked(String),
    /// The hub refused our client certificate in the TLS handshake (unknown CA, expired, …).
    CertificateRefused(String),
    /// We refused the hub's certificate.
    HubUntrusted(String),
    /// Anything else: DNS, TCP, timeouts, the hub going away.
    Other(String),
}

/// Looks through an error's chain for a TLS failure and says which side refused whom.
pub fn classify(err: &(dyn StdError + 'static)) -> ConnectProblem {
    let detail = describe(err);
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(tls) = rustls_error(e) {
            return match tls {
                rustls::Error::AlertReceived(AlertDescription::CertificateRevoked) => {
                    ConnectProblem::CertificateRevoked(detail)
                }
                rustls::Error::AlertReceived(alert) if is_certificate_alert(*alert) => {
                    ConnectProblem::CertificateRefused(detail)
                }
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::UnsupportedNameType => ConnectProblem::HubUntrusted(detail),
                _ => ConnectProblem::Other(detail),
            };
        }
        current = e.source();
    }
    // Some layers flatten the TLS error into text; its alert names are distinctive enough.
    if detail.contains("CertificateRevoked") {
        return ConnectProblem::CertificateRevoked(detail);
    }
    if [
        "BadCertificate",
        "UnknownCA",
        "CertificateRequired",
        "CertificateExpired",
        "AccessDenied",
    ]
    .iter()
    .any(|needle| detail.contains(needle))
    {
        return ConnectProblem::CertificateRefused(detail);
    }
    ConnectProblem::Other(detail)
}

fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    // `io::Error::source` skips the error it wraps, so look inside explicitly.
    e.downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

fn is_certificate_alert(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::AccessDenied
    )
}

/// An error and its causes on one line, without repeating a cause a layer already quoted.
pub fn describe(err: &(dyn StdError + 'static)) -> String {
    // A status's `Display` repeats its source in `Debug` form; its message reads better.
    let mut text = match err.downcast_ref::<tonic::Status>() {
        Some(status) => status.message().to_owned(),
        None => err.to_string(),
    };
    let mut current = err.source();
    while let Some(e) = current {
        let part = e.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            let part = inner.to_string();
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
        }
        current = e.source();
    }
    text
}

#[cfg(test)]
pub(crate) mod test_pki {
    //! Throw-away certificates for tests: a CA, a hub certificate and agent certificates.

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose, SanType,
    };

    /// A CA that can issue hub and agent certificates.
    pub struct TestCa {
        pub issuer: CertifiedIssuer<'static, KeyPair>,
    }

    /// A certificate and its key, PEM.
    pub struct Issued {
        pub cert_pem: String,
        pub key_pem: String,
    }

    impl TestCa {
        pub fn new(name: &str) -> Self {
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let key = KeyPair::generate().expect("key");
            let issuer = CertifiedIssuer::self_signed(params, key).expect("CA");
            Self { issuer }
        }

        pub fn pem(&self) -> String {
            self.issuer.pem()
        }

        pub fn der(&self) -> Vec<u8> {
            self.issuer.der().to_vec()
        }

        pub fn fingerprint(&self) -> String {
            super::fingerprint(self.issuer.der())
        }

        /// A server certificate for `names`.
        pub fn server(&self, names: &[&str]) -> Issued {
            let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
            let mut params = CertificateParams::new(names).expect("params");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            params.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &self.issuer).expect("sign");
            Issued {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            }
        }

        /// The hub's certificate, naming [`banhub_proto::HUB_TLS_NAME`].
        pub fn hub(&self) -> Issued {
            self.server(&[banhub_proto::HUB_TLS_NAME])
        }

        /// What the hub puts in an agent's client certificate: the agent id as a URI SAN, for
        /// client authentication only.
        pub fn agent_params(agent_id: &str) -> CertificateParams {
            let mut params = CertificateParams::default();
            params.subject_alt_names = vec![SanType::URI(
                format!("urn:banhub:agent:{agent_id}")
                    .try_into()
                    .expect("uri"),
            )];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.use_authority_key_identifier_extension = true;
            params
        }

        /// A client certificate for `agent_id`, with the key it was issued for.
        pub fn agent(&self, agent_id: &str) -> Issued {
            let key = KeyPair::generate().expect("key");
            self.agent_for_key(agent_id, &key)
        }

        /// A client certificate for `agent_id` over an existing key.
        pub fn agent_for_key(&self, agent_id: &str, key: &KeyPair) -> Issued {
            let cert = Self::agent_params(agent_id)
                .signed_by(key, &self.issuer)
                .expect("sign");
            Issued {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_pki::TestCa;
    use super::*;

    fn der(pem: &str) -> CertificateDer<'static> {
        first_certificate(pem, "test certificate").expect("certificate")
    }

    fn verify(
        verifier: &PinnedCaVerifier,
        end_entity: &CertificateDer<'_>,
        chain: &[CertificateDer<'_>],
    ) -> Result<ServerCertVerified, rustls::Error> {
        let dialled = ServerName::try_from("192.0.2.10").expect("name");
        verifier.verify_server_cert(end_entity, chain, &dialled, &[], UnixTime::now())
    }

    #[test]
    fn pinned_ca_is_accepted_whatever_address_was_dialled() {
        let ca = TestCa::new("hub CA");
        let hub = der(&ca.hub().cert_pem);
        let verifier = PinnedCaVerifier::new(&ca.fingerprint());
        verify(&verifier, &hub, &[CertificateDer::from(ca.der())]).expect("accepted");
        assert_eq!(
            verifier.outcome(),
            PinOutcome::Pinned(CertificateDer::from(ca.der()))
        );
    }

    #[test]
    fn another_ca_is_refused_even_if_its_chain_is_valid() {
        let ca = TestCa::new("hub CA");
        let impostor = TestCa::new("impostor CA");
        let hub = der(&impostor.hub().cert_pem);
        let verifier = PinnedCaVerifier::new(&ca.fingerprint());
        let err =
            verify(&verifier, &hub, &[CertificateDer::from(impostor.der())]).expect_err("refused");
        assert!(
            err.to_string().contains("does not match the token"),
            "{err}"
        );
        assert!(matches!(
            verifier.outcome(),
            PinOutcome::Mismatch { seen } if seen.contains(&impostor.fingerprint())
        ));
    }

    #[test]
    fn pinned_ca_in_chain_does_not_vouch_for_a_foreign_leaf() {
        // The impostor appends the genuine CA to its own chain; the leaf still must chain to it.
        let ca = TestCa::new("hub CA");
        let impostor = TestCa::new("impostor CA");
        let hub = der(&impostor.hub().cert_pem);
        let verifier = PinnedCaVerifier::new(&ca.fingerprint());
        verify(&verifier, &hub, &[CertificateDer::from(ca.der())]).expect_err("refused");
        assert!(matches!(verifier.outcome(), PinOutcome::Invalid { .. }));
    }

    #[test]
    fn hub_certificate_must_name_the_fixed_hub_name() {
        let ca = TestCa::new("hub CA");
        let other = der(&ca.server(&["other.example"]).cert_pem);
        let verifier = PinnedCaVerifier::new(&ca.fingerprint());
        verify(&verifier, &other, &[CertificateDer::from(ca.der())]).expect_err("refused");
        assert!(matches!(verifier.outcome(), PinOutcome::Invalid { .. }));
    }

    #[test]
    fn classify_finds_alerts_inside_io_errors() {
        let alert = std::io::Error::other(rustls::Error::AlertReceived(
            AlertDescription::CertificateRevoked,
        ));
        assert!(matches!(
            classify(&alert),
            ConnectProblem::CertificateRevoked(_)
        ));
        let unknown_ca =
            std::io::Error::other(rustls::Error::AlertReceived(AlertDescription::UnknownCA));
        assert!(matches!(
            classify(&unknown_ca),
            ConnectProblem::CertificateRefused(_)
        ));
        let flattened = std::io::Error::other("received fatal alert: CertificateRevoked");
        assert!(matches!(
            classify(&flattened),
            ConnectProblem::CertificateRevoked(_)
        ));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(matches!(classify(&reset), ConnectProblem::Other(_)));
        let untrusted = std::io::Error::other(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        assert!(matches!(
            classify(&untrusted),
            ConnectProblem::HubUntrusted(_)
        ));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(matches!(classify(&refused), ConnectProblem::Other(_)));
    }

    #[test]
    fn pem_helpers_report_what_is_wrong() {
        let ca = TestCa::new("hub CA");
        assert_eq!(
            fingerprint(&der(&ca.pem())),
            ca.fingerprint(),
            "PEM and DER fingerprints agree"
        );
        assert!(matches!(
            first_certificate("nothing here", "ca.pem"),
            Err(PemError::NoCertificate { what: "ca.pem" })
        ));
    }
}
