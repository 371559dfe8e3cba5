//! Driver for fail2ban: its control-socket protocol (a strict pickle subset) and typed commands.

pub mod client;
pub mod jail_state;
pub mod pickle;
pub mod socket;

pub use client::JailStatus;
pub use jail_state::RunningJail;
pub use pickle::{PickleError, Value};
pub use socket::{Fail2banError, Fail2banSocket};
