//! `AppState`: the services every HTTP handler can reach. `app` builds it at start-up.

use std::sync::Arc;

use crate::alerts::Alerts;
use crate::auth::Auth;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::config_changes::ConfigChanges;
use crate::defence::Defence;
use crate::domain::Guards;
use crate::events::Events;
use crate::feeds::Feeds;
use crate::fleet::Fleet;
use crate::fleet_jails::FleetJails;
use crate::lookups::Lookups;
use crate::metrics::Metrics;
use crate::profiles::Profiles;
use crate::protected::Protection;
use crate::rollouts::Rollouts;
use crate::settings::SettingsService;
use crate::sharing::Sharing;
use crate::store::Store;
use crate::timed_bans::TimedBans;

/// What every HTTP handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub fleet: Fleet,
    pub events: Events,
    /// This hub replica among the others on the same database.
    pub cluster: Cluster,
    pub metrics: Metrics,
    /// The settings document (SMTP, alerts, retention, fail2ban defaults).
    pub settings: SettingsService,
    /// The alert worker's service: deliveries and digests.
    pub alerts: Alerts,
    /// Operator authentication (sessions, tokens, logins) and the audit log.
    pub auth: Auth,
    /// The guard rails of bans and allowlists.
    pub guards: Arc<Guards>,
    /// The lockout guard: the protected networks, kept current in `guards` and the hosts.
    pub protection: Protection,
    /// Blocklist feeds for edge firewalls and their tokens.
    pub feeds: Feeds,
    /// Sharing policies and the shared bans they make.
    pub sharing: Sharing,
    /// Fleet recidive rules and the storm breaker's pauses.
    pub defence: Defence,
    /// Profiles, their versions and assignment, and each server's drift from its profile.
    pub profiles: Profiles,
    /// Sets of fail2ban files applied to servers with commit-confirm.
    pub config_changes: ConfigChanges,
    /// What the hub can say about one address: ASN, RDAP, AbuseIPDB, where it is banned now.
    pub lookups: Lookups,
    /// Profile versions rolled out to many servers, canary first, with commit-confirm.
    pub rollouts: Rollouts,
    /// Bans with a duration and their lifts.
    pub timed_bans: TimedBans,
    /// The fleet's jails across servers.
    pub fleet_jails: FleetJails,
}
