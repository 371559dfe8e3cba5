//! The banhub agent protocol, `banhub.agent.v1`, as generated tonic/prost code.
//!
//! The `.proto` source lives in `proto/banhub/agent/v1/agent.proto`; `build.rs` compiles it with protox.

/// `banhub.agent.v1`: enrollment and the agent session.
#[allow(clippy::all)]
pub mod v1 {
    tonic::include_proto!("banhub.agent.v1");
}

pub mod config_path;
pub mod event;
pub mod jails;
pub mod new_config;
pub mod pipeline;
pub mod problem;
pub mod rules;
pub mod token;

/// Version of the wire protocol spoken by this build. Bumped on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// The DNS name the hub's gRPC certificate always carries and agents verify, whatever address they dial.
/// The CA is private and pinned, so a fixed name is safe and survives load balancers and address changes.
pub const HUB_TLS_NAME: &str = "hub.banhub.internal";
