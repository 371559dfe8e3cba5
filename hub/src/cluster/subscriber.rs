//! [`Subscriber`]: what this replica hears from the others, handed to the services that act on it.
//! The cluster knows none of them; `app` implements the trait over the fleet, the events and the
//! settings.

use std::collections::HashMap;
use std::future::Future;

use super::Cluster;
use crate::domain::ServerId;

/// The services' side of the notifications this replica receives.
pub trait Subscriber: Send + Sync + 'static {
    /// Another replica forwarded a command for an agent held here; it waits in the store under `id`
    /// (claim it with [`Cluster::claim`], answer with [`Cluster::answer`]).
    fn command_forwarded(&self, cluster: &Cluster, id: String) -> impl Future<Output = ()> + Send;

    /// A newer session of `server` (lease `generation`) started on another replica, or, with
    /// `reconnect` false, the server was removed: a session of it here must end.
    fn session_replaced(&self, server: ServerId, generation: i64, reconnect: bool);

    /// Another replica revoked the certificate with this serial.
    fn certificate_revoked(&self, serial: &str);

    /// Another replica saved the settings (or notifications were lost): read them again.
    fn settings_saved(&self) -> impl Future<Output = ()> + Send;

    /// Another replica changed the protected networks (or notifications were lost): read them
    /// again.
    fn protected_changed(&self);

    /// Another replica committed the events with these inclusive id ranges.
    fn events_committed(&self, ranges: Vec<(i64, i64)>);

    /// This replica just renewed its leases (`held`: lease generation by server); the local
    /// sessions and the leases must agree.
    fn leases_renewed(
        &self,
        cluster: &Cluster,
        held: &HashMap<ServerId, i64>,
    ) -> impl Future<Output = ()> + Send;
}
