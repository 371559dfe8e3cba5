//! Domain types and rules that know nothing of HTTP, gRPC or SQL: identifiers, validated names, and
//! the models the store keeps and returns (events, alert digests, sessions and tokens, settings),
//! and the pure rules of fleet defence (recidive rules, the storm breaker).

mod agent_cert;
pub mod alerts;
pub mod auth;
pub mod breaker;
pub mod config_changes;
pub mod events;
pub mod feeds;
mod guards;
mod jail_pattern;
mod names;
pub mod profiles;
pub mod protected;
pub mod recidive;
pub mod rollouts;
mod server;
mod settings;
pub mod sharing;

pub use agent_cert::{SignedAgentCert, sha256_hex};
pub use guards::{GuardViolation, Guards, PrefixLimits};
pub use jail_pattern::{JailPattern, PatternError};
pub use names::{NameError, ServerName};
pub use protected::{ProtectedEntry, ProtectedNetwork, ProtectionKind};
pub use server::{
    AgentFacts, AgentId, IdError, LabelError, Labels, NewServer, Server, ServerId, ServerStatus,
};
pub use settings::StoredSettings;
