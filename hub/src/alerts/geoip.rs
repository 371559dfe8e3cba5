//! Country of an address from a MaxMind-format database (GeoLite2/GeoIP2 Country or City), for
//! alert rules by country and the countries shown in insights, and the autonomous system of an
//! address from an ASN database (GeoLite2-ASN) for the address page. The file is read once into
//! memory; [`GeoIpCache`] reopens it when the configured path changes or the file at that path is
//! replaced (geoipupdate writes a new file and renames it over the old one).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use banhub_proto::rules::IpOrCidr;

pub use crate::settings::GeoipKind;

/// How often the cache looks whether the file changed under the same path.
const RECHECK: Duration = Duration::from_secs(2);

/// An open GeoIP database.
pub struct GeoIp {
    path: PathBuf,
    kind: GeoipKind,
    /// Modification time and length when it was read, to notice a replaced file.
    stamp: Option<(SystemTime, u64)>,
    reader: maxminddb::Reader<Vec<u8>>,
}

impl std::fmt::Debug for GeoIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoIp").field("path", &self.path).finish()
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The autonomous system an address belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asn {
    pub number: u32,
    pub organization: Option<String>,
}

impl GeoIp {
    /// Reads the database at `path`, and checks that it is one a country can be read from.
    pub fn open(path: &Path) -> Result<Self, String> {
        Self::open_kind(path, GeoipKind::Country)
    }

    /// Reads the database at `path`, and checks that it is of `kind`.
    pub fn open_kind(path: &Path, kind: GeoipKind) -> Result<Self, String> {
        let stamp = stamp(path);
        let reader = maxminddb::Reader::open_readfile(path)
            .map_err(|e| format!("{} is not a readable MaxMind DB file: {e}", path.display()))?;
        let found = &reader.metadata().database_type;
        let lower = found.to_ascii_lowercase();
        let (fits, needed) = match kind {
            GeoipKind::Country => (
                lower.contains("country") || lower.contains("city"),
                "a country or city database is needed (e.g. GeoLite2-Country.mmdb)",
            ),
            GeoipKind::Asn => (
                lower.contains("asn"),
                "an ASN database is needed (e.g. GeoLite2-ASN.mmdb)",
            ),
        };
        if !fits {
            return Err(format!(
                "{} is a {found:?} database; {needed}",
                path.display()
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            kind,
            stamp,
            reader,
        })
    }

    /// The autonomous system of `addr`, if the database (an ASN one) knows it.
    pub fn asn_of(&self, addr: IpAddr) -> Option<Asn> {
        let found = self.reader.lookup(addr).ok()?;
        let record: maxminddb::geoip2::Asn<'_> = found.decode().ok()??;
        Some(Asn {
            number: record.autonomous_system_number?,
            organization: record.autonomous_system_organization.map(str::to_owned),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ISO 3166 code of the country of `ip` (of a network's first address), if known.
    pub fn country(&self, ip: &IpOrCidr) -> Option<String> {
        let addr: IpAddr = match ip {
            IpOrCidr::Ip(addr) => *addr,
            IpOrCidr::Net(net) => net.network(),
        };
        self.country_of(addr)
    }

    /// The ISO 3166 code of the country of `addr`, if known.
    pub fn country_of(&self, addr: IpAddr) -> Option<String> {
        let found = self.reader.lookup(addr).ok()?;
        let country: maxminddb::geoip2::Country<'_> = found.decode().ok()??;
        country
            .country
            .iso_code
            .or(country.registered_country.iso_code)
            .map(str::to_ascii_uppercase)
    }
}

struct Slot {
    db: Option<Arc<GeoIp>>,
    /// The path that failed to open, and when: not retried (nor warned about) on every call.
    failed: Option<(PathBuf, Instant)>,
    checked: Instant,
}

/// The database of the configured path, opened once and reopened when the path changes or the
/// file is replaced. Cheap to call per batch or per request.
pub struct GeoIpCache {
    kind: GeoipKind,
    slot: Mutex<Slot>,
}

impl Default for GeoIpCache {
    fn default() -> Self {
        Self::new(GeoipKind::Country)
    }
}

impl GeoIpCache {
    /// A cache of databases of `kind`.
    pub fn new(kind: GeoipKind) -> Self {
        Self {
            kind,
            slot: Mutex::new(Slot {
                db: None,
                failed: None,
                checked: Instant::now(),
            }),
        }
    }
}

impl std::fmt::Debug for GeoIpCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoIpCache").finish_non_exhaustive()
    }
}

impl GeoIpCache {
    /// The database at `path`; `None` when no path is set or it cannot be read (logged once per
    /// path and retry interval).
    pub fn get(&self, path: Option<&Path>) -> Option<Arc<GeoIp>> {
        let path = path?;
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if let Some(open) = slot.db.clone()
            && open.path() == path
            && open.kind == self.kind
        {
            if now.duration_since(slot.checked) < RECHECK {
                return Some(open);
            }
            slot.checked = now;
            let current = stamp(path);
            if current.is_none() || current == open.stamp {
                // Unchanged, or gone for now (keep what was read rather than lose countries).
                return Some(open);
            }
            tracing::info!(path = %path.display(), "the GeoIP database file changed; reading it again");
        }
        if let Some((failed, at)) = &slot.failed
            && failed == path
            && now.duration_since(*at) < RECHECK * 15
        {
            return None;
        }
        match GeoIp::open_kind(path, self.kind) {
            Ok(db) => {
                tracing::info!(path = %path.display(), "GeoIP database opened");
                let db = Arc::new(db);
                slot.db = Some(db.clone());
                slot.failed = None;
                slot.checked = now;
                Some(db)
            }
            Err(e) => {
                tracing::warn!(error = %e, "GeoIP: countries are unknown until the database can be read");
                slot.failed = Some((path.to_owned(), now));
                // A replaced file that cannot be read: keep the old one if it is the same path.
                slot.db.clone().filter(|db| db.path() == path)
            }
        }
    }
}
