//! sea-orm entities. Times are Unix milliseconds (`i64`) and ids are text, so SQLite and PostgreSQL
//! store and compare them the same way.

pub mod agent_cert;
pub mod agent_cursor;
pub mod alert_delivery;
pub mod alert_digest;
pub mod api_token;
pub mod audit_entry;
pub mod config_change;
pub mod enrollment_token;
pub mod event;
pub mod feed;
pub mod feed_token;
pub mod local_user;
pub mod login_flow;
pub mod operator_address;
pub mod profile;
pub mod profile_version;
pub mod protected_network;
pub mod rollout;
pub mod rollout_host;
pub mod server;
pub mod server_drift;
pub mod session;
pub mod settings_row;
pub mod shared_ban;
pub mod sharing_policy;
pub mod test_alert_turn;
pub mod timed_ban;
