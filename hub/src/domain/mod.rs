//! Domain types and rules that know nothing of HTTP, gRPC or SQL: identifiers and validated names.

pub mod events;
mod guards;
mod names;
mod server;

pub use guards::{GuardViolation, Guards, PrefixLimits};
pub use names::{NameError, ServerName};
pub use server::{
    AgentFacts, AgentId, IdError, LabelError, Labels, NewServer, Server, ServerId, ServerStatus,
};
