//! sea-orm entities. Times are Unix milliseconds (`i64`) and ids are text, so SQLite and PostgreSQL
//! store and compare them the same way.

pub mod agent_cert;
pub mod agent_cursor;
pub mod alert_delivery;
pub mod alert_digest;
pub mod alert_state;
pub mod enrollment_token;
pub mod event;
pub mod server;
pub mod settings_row;
