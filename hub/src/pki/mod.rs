//! The hub's internal certificate authority: created on first start in the data directory, it signs the
//! hub's gRPC server certificate and every agent's client certificate. Also the TLS verifier that admits
//! agents by certificate and refuses revoked ones during the handshake.

mod ca;
mod verifier;

pub use crate::domain::{SignedAgentCert, sha256_hex};
pub use ca::{Ca, PkiError, fingerprint_hex, random_secret};
pub use verifier::{AgentPeer, RevocationList, agent_from_cert, server_tls_config};
