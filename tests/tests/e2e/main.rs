//! The end-to-end suite in one binary: real hub and agent processes (or an in-process hub) against
//! real fail2ban, PostgreSQL, SMTP and OpenID servers, all started through the harness in `tests/src`.
//! Each module is one former test file; run one with `-E 'test(/^<module>::/)'`. nextest runs every
//! test in its own process, so statics and environment variables stay per test.

mod address_lookup;
mod agent_commands;
mod agent_config;
mod alert_forms;
mod alerts;
mod api;
mod audit;
mod auth;
mod backup;
mod callback_secrets;
mod cluster_store;
mod config_confirm;
mod config_create;
mod config_preview;
mod config_profiles;
mod containers;
mod control;
mod defence;
mod delivery;
mod deploy_files;
mod event_path;
mod event_text_pg;
mod events;
mod fail2ban_socket;
mod feeds;
mod fleet_actions;
mod fleet_jails;
mod foundation;
mod hub_tls;
mod ingest_batches;
mod install_action;
mod install_agent;
mod oidc;
mod protected;
mod quickstart;
mod reconcile;
mod relay_action;
mod replicas;
mod rollout;
mod rollups;
mod security;
mod settings;
mod shared_jail;
mod sharing;
mod store;
mod timed_bans;
mod ui;
mod ui_browser;
mod upgrade;
