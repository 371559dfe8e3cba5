//! An agent certificate as the CA issues it and the store records it, and the SHA-256 hex by which
//! certificates are fingerprinted and secrets (enrollment, callback, API tokens) are stored.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// An agent certificate the CA just issued.
#[derive(Debug, Clone)]
pub struct SignedAgentCert {
    pub pem: String,
    /// Lower-case hex of the serial number.
    pub serial: String,
    /// SHA-256 of the certificate DER, lower-case hex.
    pub fingerprint: String,
    pub not_after: DateTime<Utc>,
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
