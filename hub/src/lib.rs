//! banhub hub: the REST API and web UI, the agent gateway, the store, and the internal CA.

pub mod alerts;
pub mod api;
pub mod app;
pub mod auth;
pub mod backup;
pub mod cluster;
pub mod config;
pub mod config_changes;
pub mod defence;
pub mod domain;
pub mod events;
pub mod feeds;
pub mod fleet;
pub mod fleet_jails;
pub mod hub_addresses;
pub mod metrics;
pub mod pki;
pub mod previews;
pub mod profiles;
pub mod protected;
pub mod serve;
pub mod settings;
pub mod sharing;
pub mod store;
pub mod timed_bans;
pub mod ui;
