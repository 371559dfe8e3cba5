//! Enrollment and the agent's identity on disk: redeems a one-time token (pinning the hub CA by the
//! token's fingerprint, sending a CSR) and keeps the key, certificate, CA and `identity.json` in the
//! state directory.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use banhub_proto::HUB_TLS_NAME;
use banhub_proto::token::{EnrollmentToken, TokenError};
use banhub_proto::v1::EnrollRequest;
use banhub_proto::v1::enrollment_client::EnrollmentClient;
use rcgen::{CertificateParams, DnType, KeyPair, PublicKeyData};
use rustls::pki_types::{CertificateDer, UnixTime};
use serde::{Deserialize, Serialize};
use tonic::transport::{ClientTlsConfig, Endpoint};

use crate::tls::{self, PinOutcome, PinnedCaVerifier};

/// The agent's private key (0600).
pub const KEY_FILE: &str = "agent.key";
/// The agent's client certificate (0600).
pub const CERT_FILE: &str = "agent.pem";
/// The hub's CA certificate.
pub const CA_FILE: &str = "ca.pem";
/// Who this agent is; written last, so its presence means the enrollment is complete.
pub const IDENTITY_FILE: &str = "identity.json";

/// How long the `Enroll` call itself may take once connected.
const ENROLL_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The agent's identity as the hub gave it at enrollment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub agent_id: String,
    pub server_id: String,
    pub server_name: String,
    /// `host:port` of the hub's gRPC listener, from the token.
    pub hub_address: String,
    /// Lower-case hex SHA-256 of the hub CA certificate (DER).
    pub ca_fingerprint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enrolled_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Everything the agent needs to open its session: identity, client certificate and key, hub CA.
#[derive(Clone)]
pub struct Credentials {
    pub identity: Identity,
    pub cert_pem: String,
    key_pem: String,
    pub ca_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("identity", &self.identity)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The state directory could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "this agent is not enrolled: {} has no {IDENTITY_FILE}; run `banhub-agent enroll <TOKEN>` \
         (with the same --state-dir) first",
        dir.display()
    )]
    NotEnrolled { dir: PathBuf },
    #[error("cannot use {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} is damaged ({reason}); enroll again with `banhub-agent enroll --force <TOKEN>`",
        path.display()
    )]
    Damaged { path: PathBuf, reason: String },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Credentials {
    pub fn new(identity: Identity, cert_pem: String, key_pem: String, ca_pem: String) -> Self {
        Self {
            identity,
            cert_pem,
            key_pem,
            ca_pem,
        }
    }

    /// The client key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Reads the credentials from `dir` and checks that they belong together.
    pub fn load(dir: &Path) -> Result<Self, StateError> {
        let identity_path = dir.join(IDENTITY_FILE);
        if !identity_path.exists() {
            return Err(StateError::NotEnrolled {
                dir: dir.to_owned(),
            });
        }
        let read = |name: &str| {
            let path = dir.join(name);
            fs::read_to_string(&path).map_err(io_error(&path))
        };
        let identity: Identity =
            serde_json::from_str(&read(IDENTITY_FILE)?).map_err(|e| StateError::Damaged {
                path: identity_path.clone(),
                reason: e.to_string(),
            })?;
        let credentials = Self {
            identity,
            cert_pem: read(CERT_FILE)?,
            key_pem: read(KEY_FILE)?,
            ca_pem: read(CA_FILE)?,
        };
        credentials.check(dir)?;
        let key_path = dir.join(KEY_FILE);
        if let Ok(meta) = fs::metadata(&key_path)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %key_path.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "the agent's private key is readable by other users; run chmod 600 on it"
            );
        }
        Ok(credentials)
    }

    fn check(&self, dir: &Path) -> Result<(), StateError> {
        let damaged = |name: &str, reason: String| StateError::Damaged {
            path: dir.join(name),
            reason,
        };
        let ca = tls::first_certificate(&self.ca_pem, CA_FILE)
            .map_err(|e| damaged(CA_FILE, e.to_string()))?;
        if tls::fingerprint(&ca) != self.identity.ca_fingerprint {
            return Err(damaged(
                CA_FILE,
                "its fingerprint differs from the one in identity.json".to_owned(),
            ));
        }
        tls::first_certificate(&self.cert_pem, CERT_FILE)
            .map_err(|e| damaged(CERT_FILE, e.to_string()))?;
        KeyPair::from_pem(&self.key_pem).map_err(|e| damaged(KEY_FILE, e.to_string()))?;
        Ok(())
    }

    /// Writes the credentials into `dir` (created 0700 if missing). Each file is replaced atomically;
    /// `identity.json` comes last so a crash never leaves an identity without its key.
    pub fn store(&self, dir: &Path) -> Result<(), StateError> {
        create_state_dir(dir)?;
        write_atomic(&dir.join(KEY_FILE), self.key_pem.as_bytes(), 0o600)?;
        write_atomic(&dir.join(CERT_FILE), self.cert_pem.as_bytes(), 0o600)?;
        write_atomic(&dir.join(CA_FILE), self.ca_pem.as_bytes(), 0o644)?;
        let mut json = serde_json::to_vec_pretty(&self.identity).map_err(|e| StateError::Io {
            path: dir.join(IDENTITY_FILE),
            source: std::io::Error::other(e),
        })?;
        json.push(b'\n');
        write_atomic(&dir.join(IDENTITY_FILE), &json, 0o644)?;
        Ok(())
    }
}

/// Creates the state directory, readable by its owner only.
fn create_state_dir(dir: &Path) -> Result<(), StateError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error(dir))
}

/// Writes `contents` to a temporary file beside `path`, syncs it, renames it over `path` and syncs the
/// directory, so a crash leaves either the old file or the new one, never a torn one.
fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), StateError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    // A leftover from an earlier crash may have other permissions; start afresh.
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_error(&tmp))?;
    file.write_all(contents).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io_error(path))?;
    if let Some(parent) = path.parent() {
        fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(io_error(parent))?;
    }
    Ok(())
}

/// How to enroll.
#[derive(Debug, Clone)]
pub struct EnrollOptions {
    pub state_dir: PathBuf,
    /// Replace an existing identity.
    pub force: bool,
    /// Time allowed for the TCP and TLS connection to the hub.
    pub connect_timeout: Duration,
    /// The host name reported to the hub; the machine's own when `None`.
    pub hostname: Option<String>,
}

/// Why enrollment failed. Every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(
        "this agent is already enrolled (agent {agent_id}, state in {}); pass --force to replace \
         its identity with a new one",
        dir.display()
    )]
    AlreadyEnrolled { dir: PathBuf, agent_id: String },
    #[error(
        "cannot reach the hub at {address}: {detail}; check the address and that the hub is running"
    )]
    Unreachable { address: String, detail: String },
    #[error(
        "this hub's CA does not match the token (expected fingerprint {expected}, the hub sent {}); \
         the address may lead to another hub or something in between; check the address or ask \
         the hub for a new token",
        if seen.is_empty() { "no certificates".to_owned() } else { seen.join(", ") }
    )]
    CaMismatch { expected: String, seen: Vec<String> },
    #[error(
        "the hub's certificate does not verify against the CA named by the token ({reason}); the \
         hub's certificate must be issued by its CA for {HUB_TLS_NAME}"
    )]
    HubCertificateInvalid { reason: String },
    /// The hub said no; its message goes to the operator word for word.
    #[error("the hub refused the enrollment: {message}")]
    Refused { code: tonic::Code, message: String },
    #[error("the hub's answer is not usable: {0}")]
    BadResponse(String),
    #[error("cannot create a key or certificate request: {0}")]
    Key(#[from] rcgen::Error),
    #[error(transparent)]
    State(#[from] StateError),
}

/// The result of a successful enrollment.
#[derive(Debug, Clone)]
pub struct Enrolled {
    pub identity: Identity,
    pub state_dir: PathBuf,
}

/// Redeems `token`: pins the hub CA, sends a fresh key's CSR, checks and stores the answer.
// No `err` here: the caller shows the error to the operator once, in full.
#[tracing::instrument(skip_all, fields(state_dir = %options.state_dir.display()))]
pub async fn enroll(token: &str, options: &EnrollOptions) -> Result<Enrolled, EnrollError> {
    let token = EnrollmentToken::decode(token)?;
    refuse_to_overwrite(options)?;
    // The token works once: make sure the result can be stored before spending it.
    create_state_dir(&options.state_dir)?;
    probe_writable(&options.state_dir)?;

    let key = KeyPair::generate()?;
    let hostname = options.hostname.clone().unwrap_or_else(local_hostname);
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    // The hub ignores names in the request; the host name only helps someone reading it.
    params
        .distinguished_name
        .push(DnType::CommonName, hostname.as_str());
    let csr_pem = params.serialize_request(&key)?.pem()?;

    tracing::info!(hub = %token.hub_address, token_id = %token.token_id, "enrolling with the hub");
    let verifier = PinnedCaVerifier::new(&token.ca_fingerprint);
    let mut client = connect_pinned(&token, &verifier, options.connect_timeout).await?;
    let request = EnrollRequest {
        token_id: token.token_id.clone(),
        secret: token.secret.clone(),
        csr_pem,
        hostname,
        agent_version: crate::AGENT_VERSION.to_owned(),
    };
    let response = match client.enroll(request).await {
        Ok(response) => response.into_inner(),
        // A status carrying a source error comes from the transport, not from the hub's logic.
        Err(status) if std::error::Error::source(&status).is_some() => {
            return Err(EnrollError::Unreachable {
                address: token.hub_address.clone(),
                detail: tls::describe(&status),
            });
        }
        Err(status) => {
            return Err(EnrollError::Refused {
                code: status.code(),
                message: status.message().to_owned(),
            });
        }
    };

    let ca = check_response_ca(&response.ca_pem, &token.ca_fingerprint)?;
    check_agent_certificate(&response.certificate_pem, &ca, &key, &response.agent_id)?;
    if response.server_id.is_empty() {
        return Err(EnrollError::BadResponse("no server id".to_owned()));
    }
    let credentials = Credentials {
        identity: Identity {
            agent_id: response.agent_id,
            server_id: response.server_id,
            server_name: response.server_name,
            hub_address: token.hub_address,
            ca_fingerprint: token.ca_fingerprint,
            enrolled_at: Some(chrono::Utc::now()),
        },
        cert_pem: response.certificate_pem,
        key_pem: key.serialize_pem(),
        ca_pem: response.ca_pem,
    };
    credentials.store(&options.state_dir)?;
    tracing::info!(
        agent_id = %credentials.identity.agent_id,
        server_id = %credentials.identity.server_id,
        server = %credentials.identity.server_name,
        "enrolled"
    );
    Ok(Enrolled {
        identity: credentials.identity,
        state_dir: options.state_dir.clone(),
    })
}

fn refuse_to_overwrite(options: &EnrollOptions) -> Result<(), EnrollError> {
    let path = options.state_dir.join(IDENTITY_FILE);
    if options.force || !path.exists() {
        return Ok(());
    }
    let agent_id = fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str::<Identity>(&text).ok())
        .map(|identity| identity.agent_id)
        .unwrap_or_else(|| "unknown".to_owned());
    Err(EnrollError::AlreadyEnrolled {
        dir: options.state_dir.clone(),
        agent_id,
    })
}

fn probe_writable(dir: &Path) -> Result<(), StateError> {
    let probe = dir.join(".write-probe");
    fs::write(&probe, b"").map_err(io_error(&probe))?;
    fs::remove_file(&probe).map_err(io_error(&probe))
}

/// The machine's host name, or `unknown`.
pub fn local_hostname() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

async fn connect_pinned(
    token: &EnrollmentToken,
    verifier: &Arc<PinnedCaVerifier>,
    connect_timeout: Duration,
) -> Result<EnrollmentClient<tonic::transport::Channel>, EnrollError> {
    let address = token.hub_address.clone();
    let unreachable = |detail: String| EnrollError::Unreachable {
        address: address.clone(),
        detail,
    };
    let endpoint = Endpoint::from_shared(format!("https://{address}"))
        .map_err(|e| unreachable(format!("not a usable address ({e})")))?
        .connect_timeout(connect_timeout)
        // A unary call: a bound is right here, unlike on the session stream.
        .timeout(ENROLL_REQUEST_TIMEOUT)
        .tls_config_with_verifier(
            ClientTlsConfig::new()
                .domain_name(HUB_TLS_NAME)
                .timeout(connect_timeout),
            verifier.clone(),
        )
        .map_err(|e| unreachable(tls::describe(&e)))?;
    match endpoint.connect().await {
        Ok(channel) => Ok(EnrollmentClient::new(channel)),
        Err(e) => Err(match verifier.outcome() {
            PinOutcome::Mismatch { seen } => EnrollError::CaMismatch {
                expected: token.ca_fingerprint.clone(),
                seen,
            },
            PinOutcome::Invalid { reason } => EnrollError::HubCertificateInvalid { reason },
            PinOutcome::NotYet | PinOutcome::Pinned(_) => unreachable(tls::describe(&e)),
        }),
    }
}

/// The CA the hub returned must be the one the token pinned.
fn check_response_ca(ca_pem: &str, expected: &str) -> Result<CertificateDer<'static>, EnrollError> {
    let ca = tls::first_certificate(ca_pem, "the returned CA")
        .map_err(|e| EnrollError::BadResponse(e.to_string()))?;
    let found = tls::fingerprint(&ca);
    if found != expected {
        return Err(EnrollError::BadResponse(format!(
            "the returned CA has fingerprint {found}, not {expected} from the token"
        )));
    }
    Ok(ca)
}

/// The returned certificate must be for our key, issued by the pinned CA for client authentication,
/// and name the agent id the hub reported.
fn check_agent_certificate(
    cert_pem: &str,
    ca: &CertificateDer<'static>,
    key: &KeyPair,
    agent_id: &str,
) -> Result<(), EnrollError> {
    let bad = |reason: String| EnrollError::BadResponse(reason);
    let cert = tls::first_certificate(cert_pem, "the returned certificate")
        .map_err(|e| bad(e.to_string()))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert)
        .map_err(|e| bad(format!("the returned certificate cannot be parsed: {e}")))?;
    if parsed.tbs_certificate.subject_pki.raw != key.subject_public_key_info().as_slice() {
        return Err(bad(
            "the returned certificate is not for the key this agent just made".to_owned(),
        ));
    }
    let expected_uri = format!("urn:banhub:agent:{agent_id}");
    let names_agent = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|san| {
            san.value.general_names.iter().any(|name| {
                matches!(name, x509_parser::extensions::GeneralName::URI(uri) if *uri == expected_uri)
            })
        });
    if agent_id.is_empty() || !names_agent {
        return Err(bad(format!(
            "the returned certificate does not name agent {agent_id:?} ({expected_uri})"
        )));
    }
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca.clone())
        .map_err(|e| bad(format!("the returned CA is unusable: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| bad(format!("the returned CA is unusable: {e}")))?;
    rustls::server::danger::ClientCertVerifier::verify_client_cert(
        verifier.as_ref(),
        &cert,
        &[],
        UnixTime::now(),
    )
    .map_err(|e| bad(format!("the returned certificate does not verify: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use banhub_proto::v1::EnrollResponse;
    use banhub_proto::v1::enrollment_server::{Enrollment, EnrollmentServer};
    use rcgen::CertificateSigningRequestParams;
    use tokio_stream::wrappers::TcpListenerStream;
    use tonic::transport::{Identity as TlsIdentity, Server, ServerTlsConfig};
    use tonic::{Request, Response, Status};

    use super::*;
    use crate::tls::test_pki::TestCa;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("metadata").permissions().mode() & 0o777
    }

    fn sample_credentials(ca: &TestCa) -> Credentials {
        let agent_id = uuid::Uuid::new_v4().to_string();
        let issued = ca.agent(&agent_id);
        Credentials {
            identity: Identity {
                agent_id,
                server_id: "srv-1".to_owned(),
                server_name: "web-1".to_owned(),
                hub_address: "127.0.0.1:50051".to_owned(),
                ca_fingerprint: ca.fingerprint(),
                enrolled_at: Some(chrono::Utc::now()),
            },
            cert_pem: issued.cert_pem,
            key_pem: issued.key_pem,
            ca_pem: ca.pem(),
        }
    }

    #[test]
    fn identity_round_trips_with_private_permissions() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("nested").join("state");
        let ca = TestCa::new("hub CA");
        let credentials = sample_credentials(&ca);
        credentials.store(&dir).expect("stored");

        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.join(CERT_FILE)), 0o600);
        let loaded = Credentials::load(&dir).expect("loaded");
        assert_eq!(loaded.identity, credentials.identity);
        assert_eq!(loaded.key_pem(), credentials.key_pem());
        assert_eq!(loaded.cert_pem, credentials.cert_pem);
        assert!(!format!("{loaded:?}").contains("PRIVATE KEY"));

        // identity.json is plain JSON with the documented field names.
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join(IDENTITY_FILE)).expect("read"))
                .expect("json");
        for field in [
            "agent_id",
            "server_id",
            "server_name",
            "hub_address",
            "ca_fingerprint",
        ] {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
        // No temporary files are left behind.
        let names: Vec<String> = fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn load_explains_missing_and_damaged_state() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = Credentials::load(dir.path()).expect_err("not enrolled");
        assert!(matches!(err, StateError::NotEnrolled { .. }), "{err}");
        assert!(err.to_string().contains("banhub-agent enroll"), "{err}");

        let ca = TestCa::new("hub CA");
        sample_credentials(&ca).store(dir.path()).expect("stored");
        fs::write(dir.path().join(CA_FILE), TestCa::new("other CA").pem()).expect("write");
        let err = Credentials::load(dir.path()).expect_err("damaged");
        assert!(matches!(err, StateError::Damaged { .. }), "{err}");
    }

    /// A stand-in for the hub's enrollment service: signs the CSR, or refuses with a message.
    struct FakeEnrollment {
        ca: Arc<TestCa>,
        refusal: Option<String>,
    }

    #[tonic::async_trait]
    impl Enrollment for FakeEnrollment {
        async fn enroll(
            &self,
            request: Request<EnrollRequest>,
        ) -> Result<Response<EnrollResponse>, Status> {
            if let Some(message) = &self.refusal {
                return Err(Status::permission_denied(message.clone()));
            }
            let request = request.into_inner();
            assert_eq!(request.secret, "s".repeat(43));
            assert_eq!(request.agent_version, crate::AGENT_VERSION);
            let agent_id = uuid::Uuid::new_v4().to_string();
            let mut csr = CertificateSigningRequestParams::from_pem(&request.csr_pem)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            csr.params = TestCa::agent_params(&agent_id);
            let cert = csr.signed_by(&self.ca.issuer).expect("signed");
            Ok(Response::new(EnrollResponse {
                agent_id,
                server_id: "srv-1".to_owned(),
                server_name: "web-1".to_owned(),
                certificate_pem: cert.pem(),
                ca_pem: self.ca.pem(),
            }))
        }
    }

    /// Serves `FakeEnrollment` over TLS with the chain [hub certificate, CA], as the hub does.
    async fn fake_hub(ca: Arc<TestCa>, refusal: Option<String>) -> SocketAddr {
        crate::tls::install_crypto_provider();
        let hub = ca.hub();
        let chain = format!("{}{}", hub.cert_pem, ca.pem());
        let tls = ServerTlsConfig::new().identity(TlsIdentity::from_pem(chain, hub.key_pem));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let service = EnrollmentServer::new(FakeEnrollment { ca, refusal });
        tokio::spawn(async move {
            Server::builder()
                .tls_config(tls)
                .expect("tls")
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .expect("serve");
        });
        address
    }

    fn token(address: SocketAddr, fingerprint: String) -> String {
        EnrollmentToken {
            hub_address: address.to_string(),
            ca_fingerprint: fingerprint,
            token_id: "tok-1".to_owned(),
            secret: "s".repeat(43),
        }
        .encode()
    }

    fn options(dir: &Path) -> EnrollOptions {
        EnrollOptions {
            state_dir: dir.to_owned(),
            force: false,
            connect_timeout: Duration::from_secs(5),
            hostname: Some("test-host".to_owned()),
        }
    }

    #[tokio::test]
    async fn enrolls_against_a_hub_with_the_pinned_ca() {
        let ca = Arc::new(TestCa::new("hub CA"));
        let address = fake_hub(Arc::clone(&ca), None).await;
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("state");
        let enrolled = enroll(&token(address, ca.fingerprint()), &options(&dir))
            .await
            .expect("enrolled");
        assert_eq!(enrolled.identity.server_name, "web-1");
        assert_eq!(enrolled.identity.hub_address, address.to_string());
        let loaded = Credentials::load(&dir).expect("stored");
        assert_eq!(loaded.identity, enrolled.identity);
        assert_eq!(mode(&dir), 0o700);

        // A second enrollment needs --force.
        let err = enroll(&token(address, ca.fingerprint()), &options(&dir))
            .await
            .expect_err("refused");
        assert!(matches!(err, EnrollError::AlreadyEnrolled { .. }), "{err}");
        assert!(err.to_string().contains("--force"), "{err}");
        let forced = EnrollOptions {
            force: true,
            ..options(&dir)
        };
        let again = enroll(&token(address, ca.fingerprint()), &forced)
            .await
            .expect("re-enrolled");
        assert_ne!(again.identity.agent_id, enrolled.identity.agent_id);
    }

    #[tokio::test]
    async fn a_hub_with_another_ca_is_refused_before_the_token_is_sent() {
        let ca = Arc::new(TestCa::new("hub CA"));
        let address = fake_hub(Arc::clone(&ca), None).await;
        let expected = TestCa::new("the CA the token names").fingerprint();
        let dir = tempfile::tempdir().expect("temp dir");
        let err = enroll(&token(address, expected.clone()), &options(dir.path()))
            .await
            .expect_err("refused");
        match &err {
            EnrollError::CaMismatch { expected: e, seen } => {
                assert_eq!(e, &expected);
                assert!(seen.contains(&ca.fingerprint()), "{seen:?}");
            }
            other => panic!("expected a CA mismatch, got {other}"),
        }
        assert!(
            err.to_string()
                .contains("this hub's CA does not match the token"),
            "{err}"
        );
        assert!(!dir.path().join(IDENTITY_FILE).exists());
    }

    #[tokio::test]
    async fn hub_refusals_reach_the_operator_verbatim() {
        let message = "the enrollment token has already been used; create a new one";
        let ca = Arc::new(TestCa::new("hub CA"));
        let address = fake_hub(Arc::clone(&ca), Some(message.to_owned())).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let err = enroll(&token(address, ca.fingerprint()), &options(dir.path()))
            .await
            .expect_err("refused");
        match &err {
            EnrollError::Refused { code, message: m } => {
                assert_eq!(*code, tonic::Code::PermissionDenied);
                assert_eq!(m, message);
            }
            other => panic!("expected a refusal, got {other}"),
        }
        assert!(err.to_string().contains(message), "{err}");
        assert!(!dir.path().join(IDENTITY_FILE).exists());
    }

    #[tokio::test]
    async fn unreachable_hub_and_bad_tokens_are_explained() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = enroll("not-a-token", &options(dir.path()))
            .await
            .expect_err("refused");
        assert!(
            matches!(err, EnrollError::Token(TokenError::Prefix)),
            "{err}"
        );

        // A port nobody listens on: bind one, then free it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        drop(listener);
        let err = enroll(&token(address, "ab".repeat(32)), &options(dir.path()))
            .await
            .expect_err("refused");
        assert!(matches!(err, EnrollError::Unreachable { .. }), "{err}");
    }
}
