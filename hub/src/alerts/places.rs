//! Where the banned addresses are: bans and distinct addresses per country (by the settings' GeoIP
//! database) and per network (IPv4 /24, IPv6 /48, or the banned network itself when it is wider),
//! for the whole fleet and per server, as the insights show them.
//!
//! Counting needs every address of the history once, so it is a scan of the per-address rollup,
//! not a query per request: the tally is kept in memory and redone in the background when a
//! request finds it older than [`MAX_AGE`] (the request gets the previous tally meanwhile). Without
//! a usable tally (the first request, or a changed GeoIP path) a request waits for the count only
//! when the history is small ([`WAIT_MAX_IPS`] addresses); on a large one it is answered at once
//! without places (`countedAt` absent) and the count runs behind it: over millions of addresses
//! it takes seconds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;

use super::geoip::GeoIp;
use crate::domain::ServerId;
use crate::store::{IpBans, Store, StoreError};

/// How old a tally may be before a request starts a new one.
pub const MAX_AGE: Duration = Duration::from_secs(30);
/// Rows read per page of the scan.
const PAGE: u64 = 20_000;
/// Distinct banned addresses up to which a request without a tally waits for the count (tens of
/// milliseconds); above, it never waits.
pub const WAIT_MAX_IPS: u64 = 50_000;

/// Bans and distinct addresses of one place (a country code or a network).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlaceCount {
    pub bans: u64,
    pub ips: u64,
}

/// Per-place counts of one scope (the fleet or one server), largest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Places {
    /// Empty without a GeoIP database.
    pub countries: Vec<(String, PlaceCount)>,
    pub networks: Vec<(String, PlaceCount)>,
}

/// One complete tally.
#[derive(Debug, Default)]
pub struct Tally {
    pub fleet: Places,
    pub servers: HashMap<ServerId, Places>,
    /// The GeoIP database it was counted with.
    pub geoip_path: Option<PathBuf>,
    pub counted_at: Option<chrono::DateTime<chrono::Utc>>,
    taken: Option<Instant>,
}

impl Tally {
    /// The places of `server`, or of the fleet.
    pub fn scope(&self, server: Option<ServerId>) -> Places {
        match server {
            None => self.fleet.clone(),
            Some(id) => self.servers.get(&id).cloned().unwrap_or_default(),
        }
    }
}

/// The network an address is counted in.
pub fn network_of(ip: &str) -> Option<String> {
    let net = match ip.parse::<IpAddr>() {
        Ok(addr) => IpNet::from(addr),
        Err(_) => ip.parse::<IpNet>().ok()?,
    };
    let prefix = match net {
        IpNet::V4(_) => 24,
        IpNet::V6(_) => 48,
    };
    let wider = if net.prefix_len() < prefix {
        net
    } else {
        IpNet::new(net.network(), prefix).ok()?.trunc()
    };
    Some(wider.to_string())
}

fn first_address(ip: &str) -> Option<IpAddr> {
    ip.parse::<IpAddr>()
        .ok()
        .or_else(|| ip.parse::<IpNet>().ok().map(|net| net.network()))
}

#[derive(Default)]
struct Counter {
    countries: HashMap<String, PlaceCount>,
    networks: HashMap<String, PlaceCount>,
}

impl Counter {
    fn add(&mut self, country: Option<&str>, network: Option<&str>, bans: u64, new_ip: bool) {
        let ips = u64::from(new_ip);
        if let Some(country) = country {
            let c = self.countries.entry(country.to_owned()).or_default();
            c.bans += bans;
            c.ips += ips;
        }
        if let Some(network) = network {
            let n = self.networks.entry(network.to_owned()).or_default();
            n.bans += bans;
            n.ips += ips;
        }
    }

    fn finish(self, keep: usize) -> Places {
        fn ranked(map: HashMap<String, PlaceCount>, keep: usize) -> Vec<(String, PlaceCount)> {
            let mut all: Vec<_> = map.into_iter().collect();
            all.sort_by(|a, b| b.1.bans.cmp(&a.1.bans).then_with(|| a.0.cmp(&b.0)));
            all.truncate(keep);
            all
        }
        Places {
            countries: ranked(self.countries, keep),
            networks: ranked(self.networks, keep),
        }
    }
}

/// Counts every address of the rollup; keeps the `keep` largest places of each scope.
pub async fn count(
    store: &Store,
    geoip: Option<Arc<GeoIp>>,
    keep: usize,
) -> Result<Tally, StoreError> {
    count_in_pages(store, geoip, keep, PAGE).await
}

/// [`count`], reading `page` rows at a time.
pub async fn count_in_pages(
    store: &Store,
    geoip: Option<Arc<GeoIp>>,
    keep: usize,
    page_rows: u64,
) -> Result<Tally, StoreError> {
    let started = Instant::now();
    let mut fleet = Counter::default();
    let mut servers: HashMap<ServerId, Counter> = HashMap::new();
    let mut last: Option<IpBans> = None;
    let mut rows = 0u64;
    loop {
        let page = store.ip_bans_page(last.as_ref(), page_rows).await?;
        if page.is_empty() {
            break;
        }
        rows += page.len() as u64;
        for row in &page {
            let new_ip = last.as_ref().is_none_or(|l| l.ip != row.ip);
            let country = geoip
                .as_ref()
                .and_then(|db| first_address(&row.ip).and_then(|a| db.country_of(a)));
            let network = network_of(&row.ip);
            fleet.add(country.as_deref(), network.as_deref(), row.bans, new_ip);
            servers.entry(row.server).or_default().add(
                country.as_deref(),
                network.as_deref(),
                row.bans,
                true,
            );
            last = Some(row.clone());
        }
        // The scan shares the runtime with requests; let them in between pages.
        tokio::task::yield_now().await;
    }
    tracing::debug!(
        rows,
        took_ms = started.elapsed().as_millis() as u64,
        "counted bans per country and network"
    );
    Ok(Tally {
        fleet: fleet.finish(keep),
        servers: servers
            .into_iter()
            .map(|(id, c)| (id, c.finish(keep)))
            .collect(),
        geoip_path: geoip.map(|db| db.path().to_owned()),
        counted_at: Some(chrono::Utc::now()),
        taken: Some(started),
    })
}

/// The last tally and whether one is being counted.
#[derive(Debug, Default)]
pub(super) struct PlacesCache {
    tally: tokio::sync::RwLock<Option<Arc<Tally>>>,
    counting: tokio::sync::Mutex<()>,
}

impl PlacesCache {
    /// The current tally when it is fresh and counted with `geoip`'s database; otherwise `None`
    /// with the stale one (if any) to use meanwhile.
    pub(super) async fn fresh(
        &self,
        geoip: Option<&PathBuf>,
    ) -> Result<Arc<Tally>, Option<Arc<Tally>>> {
        let current = self.tally.read().await.clone();
        match current {
            Some(t)
                if t.geoip_path.as_ref() == geoip
                    && t.taken.is_some_and(|at| at.elapsed() < MAX_AGE) =>
            {
                Ok(t)
            }
            other => Err(other),
        }
    }

    /// Counts again unless another count is running (then waits for it when `wait`).
    pub(super) async fn recount(
        &self,
        store: &Store,
        geoip: Option<Arc<GeoIp>>,
        wait: bool,
    ) -> Result<Option<Arc<Tally>>, StoreError> {
        let _guard = if wait {
            self.counting.lock().await
        } else {
            match self.counting.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(None),
            }
        };
        let path = geoip.as_ref().map(|db| db.path().to_owned());
        // Someone else may have counted while this waited.
        if let Ok(t) = self.fresh(path.as_ref()).await {
            return Ok(Some(t));
        }
        let tally = Arc::new(count(store, geoip, KEEP).await?);
        *self.tally.write().await = Some(Arc::clone(&tally));
        Ok(Some(tally))
    }
}

impl PlacesCache {
    /// The tally to answer with: the fresh one; a stale one while a recount runs behind; without
    /// either, a count now on a small history, or `None` while it runs behind on a large one.
    pub(super) async fn get(
        self: &Arc<Self>,
        store: &Store,
        geoip: Option<Arc<GeoIp>>,
    ) -> Result<Option<Arc<Tally>>, StoreError> {
        let path = geoip.as_ref().map(|db| db.path().to_owned());
        let behind = |cache: Arc<Self>, store: Store, geoip: Option<Arc<GeoIp>>| {
            let recount = async move {
                if let Err(e) = cache.recount(&store, geoip, false).await {
                    tracing::warn!(error = %e, "cannot count bans per country and network");
                }
            };
            tokio::spawn(tracing::Instrument::in_current_span(recount));
        };
        match self.fresh(path.as_ref()).await {
            Ok(tally) => Ok(Some(tally)),
            // Stale but counted with the same database: answer with it, count again behind.
            Err(Some(stale)) if stale.geoip_path == path => {
                behind(Arc::clone(self), store.clone(), geoip);
                Ok(Some(stale))
            }
            // None yet, or another database.
            Err(_) => {
                if store.distinct_ips().await? <= WAIT_MAX_IPS {
                    self.recount(store, geoip, true).await
                } else {
                    behind(Arc::clone(self), store.clone(), geoip);
                    Ok(None)
                }
            }
        }
    }
}

/// Places kept per scope (the insights show at most `MAX_TOP` of each).
const KEEP: usize = crate::events::MAX_TOP;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_fall_into_their_slash_24_or_slash_48_and_wide_networks_stay_whole() {
        assert_eq!(
            network_of("198.51.100.77").as_deref(),
            Some("198.51.100.0/24")
        );
        assert_eq!(
            network_of("2001:db8:1:2::9").as_deref(),
            Some("2001:db8:1::/48")
        );
        assert_eq!(
            network_of("198.51.100.128/25").as_deref(),
            Some("198.51.100.0/24")
        );
        assert_eq!(network_of("10.0.0.0/8").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(network_of("not an address"), None);
    }

    #[test]
    fn a_counter_ranks_places_by_bans_and_counts_each_address_once() {
        let mut c = Counter::default();
        c.add(Some("DE"), Some("192.0.2.0/24"), 3, true);
        c.add(Some("DE"), Some("192.0.2.0/24"), 2, false);
        c.add(Some("US"), Some("198.51.100.0/24"), 4, true);
        let places = c.finish(10);
        assert_eq!(
            places.countries[0],
            ("DE".to_owned(), PlaceCount { bans: 5, ips: 1 })
        );
        assert_eq!(
            places.countries[1],
            ("US".to_owned(), PlaceCount { bans: 4, ips: 1 })
        );
        assert_eq!(places.networks.len(), 2);
    }
}
