//! Harness for the end-to-end tests: real fail2ban servers, PostgreSQL, and the hub and agent binaries.
//!
//! Everything listens on 127.0.0.1 with ports chosen by the kernel, lives in a temporary directory and
//! is stopped when its handle is dropped. A missing component is an error naming `.ci/install-deps`;
//! nothing skips silently.

pub mod agent;
pub mod backends;
pub mod balancer;
pub mod client;
pub mod commands;
pub mod enrolled;
pub mod fail2ban;
pub mod fleet;
pub mod hub;
pub mod lookup_server;
pub mod mmdb;
pub mod netns;
pub mod oidc;
pub mod podman;
pub mod postgres;
pub mod process;
pub mod profiles;
pub mod smtp;
pub mod test_hub;
pub mod wait;
pub mod webhook;

pub use agent::AgentProcess;
pub use client::ApiClient;
pub use commands::CommandHost;
pub use enrolled::EnrolledAgent;
pub use fail2ban::Fail2banSandbox;
pub use fleet::{TestFleet, TestHost};
pub use hub::{BootstrapToken, HubBuilder, HubProcess, Listening, bearer_client};
pub use netns::NetNs;
pub use oidc::{Browser, OidcProvider};
pub use postgres::PostgresServer;
pub use test_hub::TestHub;
pub use wait::{wait_for, wait_for_async, wait_until, wait_until_async};
