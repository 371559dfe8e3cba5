//! The security and fault suite: each probe of the hardening review run against a real hub, real
//! agents and real fail2ban servers, and the database made unwritable under a burst of callbacks.
//! Each module is one concern.

mod edges;
mod guards;
mod policy;
mod running;
mod store_faults;
