//! CA creation, loading and signing.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use rand::RngCore;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

use crate::domain::{AgentId, SignedAgentCert, sha256_hex};

/// Why a CA operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificate error: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("the certificate signing request is not valid: {0}")]
    BadCsr(String),
    #[error("the CA files in {dir} are damaged ({reason}); restore them from a backup")]
    Damaged { dir: PathBuf, reason: String },
}

/// The loaded CA: its certificate and the key that signs with it.
pub struct Ca {
    cert_pem: String,
    cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
    fingerprint: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// The fingerprint of a DER certificate, as written into enrollment tokens.
pub fn fingerprint_hex(der: &[u8]) -> String {
    sha256_hex(der)
}

/// A fresh 256-bit secret, base64url without padding.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    // A positive integer: clear the top bit.
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io {
        path: path.to_owned(),
        source,
    }
}

fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    file.write_all(contents.as_bytes()).map_err(io_err(&tmp))?;
    file.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

fn now_offset() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

impl Ca {
    /// Loads the CA from `dir`, creating it there on first start.
    pub fn load_or_create(dir: &Path) -> Result<Self, PkiError> {
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca.key");
        if cert_path.exists() || key_path.exists() {
            let cert_pem = fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
            let key_pem = fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
            return Self::from_pem(&cert_pem, &key_pem).map_err(|e| PkiError::Damaged {
                dir: dir.to_owned(),
                reason: e.to_string(),
            });
        }
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let (cert_pem, key_pem) = Self::generate()?;
        // The key first: a crash between the two writes leaves a state that load reports as damaged
        // rather than a certificate without its key silently regenerated.
        write_private(&key_path, &key_pem)?;
        write_private(&cert_path, &cert_pem)?;
        tracing::info!(dir = %dir.display(), "created the internal certificate authority");
        Self::from_pem(&cert_pem, &key_pem)
    }

    fn generate() -> Result<(String, String), PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "banhub internal CA");
        dn.push(DnType::OrganizationName, "banhub");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = now_offset() - time::Duration::hours(1);
        params.not_after = now_offset() + time::Duration::days(20 * 365);
        params.serial_number = Some(random_serial());
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Builds a CA from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        let cert_der = pem_to_der(cert_pem)?;
        Ok(Self {
            fingerprint: fingerprint_hex(&cert_der),
            cert_pem: cert_pem.to_owned(),
            cert_der,
            issuer,
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// SHA-256 of the CA certificate, lower-case hex: what enrollment tokens pin.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Issues the hub's gRPC server certificate: `(cert_pem, key_pem)`. It always names
    /// [`banhub_proto::HUB_TLS_NAME`], which is what agents verify.
    pub fn issue_hub_cert(&self, extra_names: &[String]) -> Result<(String, String), PkiError> {
        let mut names = vec![banhub_proto::HUB_TLS_NAME.to_owned()];
        names.extend(extra_names.iter().cloned());
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "banhub hub");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = now_offset() - time::Duration::hours(1);
        params.not_after = now_offset() + time::Duration::days(365);
        params.serial_number = Some(random_serial());
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Signs an agent's CSR. Every name in the CSR is ignored: the certificate names the agent by its id
    /// (URI SAN) and is good for client authentication only.
    pub fn sign_agent_csr(
        &self,
        csr_pem: &str,
        agent: AgentId,
        common_name: &str,
        days: u32,
    ) -> Result<SignedAgentCert, PkiError> {
        if csr_pem.len() > 16 * 1024 {
            return Err(PkiError::BadCsr("larger than 16 KiB".to_owned()));
        }
        let mut csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::BadCsr(e.to_string()))?;
        let uri = agent
            .to_uri()
            .try_into()
            .map_err(|e: rcgen::Error| PkiError::BadCsr(e.to_string()))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.subject_alt_names = vec![SanType::URI(uri)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let not_after = now_offset() + time::Duration::days(i64::from(days));
        params.not_before = now_offset() - time::Duration::minutes(10);
        params.not_after = not_after;
        let serial = random_serial();
        params.serial_number = Some(serial.clone());
        params.use_authority_key_identifier_extension = true;
        csr.params = params;
        let cert = csr.signed_by(&self.issuer)?;
        let not_after = chrono::DateTime::from_timestamp(not_after.unix_timestamp(), 0)
            .unwrap_or_else(chrono::Utc::now);
        Ok(SignedAgentCert {
            pem: cert.pem(),
            serial: hex::encode(serial.to_bytes()),
            fingerprint: fingerprint_hex(cert.der()),
            not_after,
        })
    }
}

fn pem_to_der(pem: &str) -> Result<Vec<u8>, PkiError> {
    let mut reader = pem.as_bytes();
    match rustls_pemfile::certs(&mut reader).next() {
        Some(Ok(der)) => Ok(der.to_vec()),
        _ => Err(PkiError::BadCsr("no certificate in PEM input".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::agent_from_cert;

    #[test]
    fn ca_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Ca::load_or_create(dir.path()).expect("create");
        let second = Ca::load_or_create(dir.path()).expect("load");
        assert_eq!(first.fingerprint(), second.fingerprint());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.path().join("ca.key"))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn damaged_ca_is_reported_not_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        Ca::load_or_create(dir.path()).expect("create");
        fs::write(dir.path().join("ca.key"), "garbage").expect("write");
        assert!(matches!(
            Ca::load_or_create(dir.path()),
            Err(PkiError::Damaged { .. })
        ));
    }

    #[test]
    fn agent_certificate_names_the_agent_and_ignores_csr_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path()).expect("create");
        let key = KeyPair::generate().expect("key");
        let csr = CertificateParams::new(vec!["evil.example".to_owned()])
            .expect("params")
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        let agent = AgentId::new();
        let signed = ca.sign_agent_csr(&csr, agent, "web-1", 30).expect("signed");
        let der = pem_to_der(&signed.pem).expect("der");
        let peer = agent_from_cert(&der).expect("parsed");
        assert_eq!(peer.0, agent);
        assert_eq!(peer.1, signed.serial);
        assert!(!signed.pem.is_empty());
        let text = String::from_utf8_lossy(&der);
        assert!(!text.contains("evil.example"));
    }

    #[test]
    fn garbage_csr_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::load_or_create(dir.path()).expect("create");
        assert!(matches!(
            ca.sign_agent_csr("not a csr", AgentId::new(), "x", 1),
            Err(PkiError::BadCsr(_))
        ));
    }
}
