//! banhub agent: runs beside fail2ban, keeps one outbound mutual-TLS session to the hub and drives
//! fail2ban for it.

pub mod action;
pub mod config;
pub mod enroll;
pub mod fail2ban;
pub mod fail2ban_files;
pub mod link;
pub mod reconcile;
pub mod relay;
pub mod shared_bans;
pub mod spool;
pub mod tls;

/// This agent's version, reported to the hub at enrollment, in every hello and in every pong.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
