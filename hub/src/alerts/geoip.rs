//! Country of an address from a MaxMind-format database (GeoLite2/GeoIP2 Country or City), for
//! alert rules by country. The file is read once into memory and reopened when the configured path
//! changes.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use banhub_proto::rules::IpOrCidr;

/// An open GeoIP database.
pub struct GeoIp {
    path: PathBuf,
    reader: maxminddb::Reader<Vec<u8>>,
}

impl std::fmt::Debug for GeoIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoIp").field("path", &self.path).finish()
    }
}

impl GeoIp {
    /// Reads the database at `path`.
    pub fn open(path: &Path) -> Result<Self, String> {
        let reader = maxminddb::Reader::open_readfile(path)
            .map_err(|e| format!("cannot read the GeoIP database {}: {e}", path.display()))?;
        Ok(Self {
            path: path.to_owned(),
            reader,
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
        let found = self.reader.lookup(addr).ok()?;
        let country: maxminddb::geoip2::Country<'_> = found.decode().ok()??;
        country
            .country
            .iso_code
            .or(country.registered_country.iso_code)
            .map(str::to_ascii_uppercase)
    }
}
