//! A small writer of MaxMind DB files (format 2.0, <https://maxmind.github.io/MaxMind-DB/>), so the
//! GeoIP tests have a real country or ASN database without shipping one: a few networks, each with
//! an ISO country code in the shape of GeoLite2-Country records, or an autonomous system in the
//! shape of GeoLite2-ASN records.
//!
//! The file is what the spec describes: an IPv6 binary search tree of 32-bit records (IPv4 networks
//! live under `::/96`, where readers look for them), a 16-byte zero separator, the data section
//! (each distinct record written once), and the metadata map after the `\xAB\xCD\xEFMaxMind.com`
//! marker.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context as _, bail};

/// One network of the database and the country it is in.
#[derive(Debug, Clone)]
pub struct CountryNetwork {
    /// The network, e.g. `192.0.2.0/24` or `2001:db8::/32`.
    pub network: String,
    /// ISO 3166 alpha-2 code, e.g. `DE`.
    pub iso_code: String,
    /// The English name, e.g. `Germany`.
    pub name: String,
}

impl CountryNetwork {
    pub fn new(network: &str, iso_code: &str, name: &str) -> Self {
        Self {
            network: network.to_owned(),
            iso_code: iso_code.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// The documentation networks the tests ban addresses from: 192.0.2.0/24 in Germany,
/// 198.51.100.0/24 in the United States, 2001:db8::/32 in France (203.0.113.0/24 is in none).
pub fn documentation_countries() -> Vec<CountryNetwork> {
    vec![
        CountryNetwork::new("192.0.2.0/24", "DE", "Germany"),
        CountryNetwork::new("198.51.100.0/24", "US", "United States"),
        CountryNetwork::new("2001:db8::/32", "FR", "France"),
    ]
}

/// Writes a country database with `networks` to `path`.
pub fn write_country_db(path: &Path, networks: &[CountryNetwork]) -> anyhow::Result<()> {
    let bytes = country_db(networks)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A country database with `networks`, as bytes.
pub fn country_db(networks: &[CountryNetwork]) -> anyhow::Result<Vec<u8>> {
    let entries: Vec<(&str, String, Value)> = networks
        .iter()
        .map(|n| {
            (
                n.network.as_str(),
                n.iso_code.clone(),
                country_record(&n.iso_code, &n.name),
            )
        })
        .collect();
    database(&entries, "banhub-Test-Country")
}

/// One network of an ASN database and its autonomous system.
#[derive(Debug, Clone)]
pub struct AsnNetwork {
    pub network: String,
    pub number: u32,
    pub organization: String,
}

impl AsnNetwork {
    pub fn new(network: &str, number: u32, organization: &str) -> Self {
        Self {
            network: network.to_owned(),
            number,
            organization: organization.to_owned(),
        }
    }
}

/// Writes an ASN database (GeoLite2-ASN's records: `autonomous_system_number`,
/// `autonomous_system_organization`) with `networks` to `path`.
pub fn write_asn_db(path: &Path, networks: &[AsnNetwork]) -> anyhow::Result<()> {
    let entries: Vec<(&str, String, Value)> = networks
        .iter()
        .map(|n| {
            let record = Value::Map(vec![
                ("autonomous_system_number".into(), Value::U32(n.number)),
                (
                    "autonomous_system_organization".into(),
                    Value::Str(n.organization.clone()),
                ),
            ]);
            (n.network.as_str(), n.number.to_string(), record)
        })
        .collect();
    let bytes = database(&entries, "GeoLite2-ASN")?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A database of `(network, key, record)` (records with the same key written once) of
/// `database_type`, as bytes.
fn database(entries: &[(&str, String, Value)], database_type: &str) -> anyhow::Result<Vec<u8>> {
    let mut data = Vec::new();
    // One data record per key, shared by every network with it.
    let mut offsets: BTreeMap<String, u32> = BTreeMap::new();
    let mut tree = Tree::default();
    for (network, key, record) in entries {
        let (bits, len) = prefix_bits(network)?;
        let offset = match offsets.get(key) {
            Some(&offset) => offset,
            None => {
                let offset = u32::try_from(data.len()).context("data section too large")?;
                encode(record, &mut data);
                offsets.insert(key.clone(), offset);
                offset
            }
        };
        tree.insert(bits, len, offset)
            .with_context(|| format!("network {network}"))?;
    }
    let node_count = u32::try_from(tree.nodes.len()).context("too many nodes")?;
    let mut out = Vec::with_capacity(tree.nodes.len() * 8 + 16 + data.len() + 256);
    for node in &tree.nodes {
        for record in node {
            let value = match *record {
                Record::Empty => node_count,
                Record::Node(i) => i,
                // A data pointer is the offset in the data section plus the node count plus the
                // 16 bytes of the separator.
                Record::Data(offset) => node_count + 16 + offset,
            };
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
    out.extend_from_slice(&[0u8; 16]);
    out.extend_from_slice(&data);
    out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
    let build_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    encode(
        &Value::Map(vec![
            ("binary_format_major_version".into(), Value::U16(2)),
            ("binary_format_minor_version".into(), Value::U16(0)),
            ("build_epoch".into(), Value::U64(build_epoch)),
            ("database_type".into(), Value::Str(database_type.to_owned())),
            (
                "description".into(),
                Value::Map(vec![(
                    "en".into(),
                    Value::Str("banhub test data: documentation networks".into()),
                )]),
            ),
            ("ip_version".into(), Value::U16(6)),
            (
                "languages".into(),
                Value::Array(vec![Value::Str("en".into())]),
            ),
            ("node_count".into(), Value::U32(node_count)),
            ("record_size".into(), Value::U16(32)),
        ]),
        &mut out,
    );
    Ok(out)
}

/// A GeoLite2-Country-shaped record: `country` and `registered_country`, each with `iso_code` and
/// English `names`.
fn country_record(iso_code: &str, name: &str) -> Value {
    let country = Value::Map(vec![
        ("iso_code".into(), Value::Str(iso_code.to_owned())),
        (
            "names".into(),
            Value::Map(vec![("en".into(), Value::Str(name.to_owned()))]),
        ),
    ]);
    Value::Map(vec![
        ("country".into(), country.clone()),
        ("registered_country".into(), country),
    ])
}

/// A network as 128 bits (IPv4 mapped under `::/96`, as readers look it up) and its prefix length.
fn prefix_bits(network: &str) -> anyhow::Result<(u128, u32)> {
    let (addr, len) = network
        .split_once('/')
        .with_context(|| format!("{network:?} is not a network (address/length)"))?;
    let addr: IpAddr = addr
        .parse()
        .with_context(|| format!("{network:?}: bad address"))?;
    let len: u32 = len
        .parse()
        .with_context(|| format!("{network:?}: bad length"))?;
    let (bits, len) = match addr {
        IpAddr::V4(v4) => {
            if len > 32 {
                bail!("{network:?}: an IPv4 prefix is at most 32 bits");
            }
            (u128::from(u32::from(v4)), len + 96)
        }
        IpAddr::V6(v6) => {
            if len > 128 {
                bail!("{network:?}: an IPv6 prefix is at most 128 bits");
            }
            (u128::from(v6), len)
        }
    };
    Ok((bits, len))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    Empty,
    Node(u32),
    Data(u32),
}

/// The search tree: node 0 is the root; bit 0 of an address goes left, 1 right.
struct Tree {
    nodes: Vec<[Record; 2]>,
}

impl Default for Tree {
    fn default() -> Self {
        Self {
            nodes: vec![[Record::Empty; 2]],
        }
    }
}

impl Tree {
    fn insert(&mut self, bits: u128, len: u32, data: u32) -> anyhow::Result<()> {
        if len == 0 {
            bail!("a network of length 0 (everything) is not supported");
        }
        let mut node = 0usize;
        for depth in 0..len {
            let bit = usize::from((bits >> (127 - depth)) & 1 == 1);
            if depth == len - 1 {
                if self.nodes[node][bit] != Record::Empty {
                    bail!("overlaps a network already in the database");
                }
                self.nodes[node][bit] = Record::Data(data);
                return Ok(());
            }
            node = match self.nodes[node][bit] {
                Record::Node(next) => next as usize,
                Record::Empty => {
                    let next = self.nodes.len();
                    self.nodes.push([Record::Empty; 2]);
                    self.nodes[node][bit] = Record::Node(u32::try_from(next)?);
                    next
                }
                Record::Data(_) => bail!("lies inside a network already in the database"),
            };
        }
        Ok(())
    }
}

/// The values the data section needs.
#[derive(Debug, Clone)]
enum Value {
    Str(String),
    U16(u16),
    U32(u32),
    U64(u64),
    Map(Vec<(String, Value)>),
    Array(Vec<Value>),
}

/// Type numbers of the data section.
const TYPE_STRING: u8 = 2;
const TYPE_U16: u8 = 5;
const TYPE_U32: u8 = 6;
const TYPE_MAP: u8 = 7;
const TYPE_U64: u8 = 9;
const TYPE_ARRAY: u8 = 11;

fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Str(s) => {
            control(TYPE_STRING, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::U16(n) => unsigned(TYPE_U16, u64::from(*n), out),
        Value::U32(n) => unsigned(TYPE_U32, u64::from(*n), out),
        Value::U64(n) => unsigned(TYPE_U64, *n, out),
        Value::Map(entries) => {
            control(TYPE_MAP, entries.len(), out);
            for (key, value) in entries {
                encode(&Value::Str(key.clone()), out);
                encode(value, out);
            }
        }
        Value::Array(items) => {
            control(TYPE_ARRAY, items.len(), out);
            for item in items {
                encode(item, out);
            }
        }
    }
}

/// An unsigned integer: big-endian, without leading zero bytes (zero is no bytes at all).
fn unsigned(kind: u8, n: u64, out: &mut Vec<u8>) {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    control(kind, bytes.len() - skip, out);
    out.extend_from_slice(&bytes[skip..]);
}

/// The control byte (type in the top three bits, size in the low five) and what extends them:
/// types above 7 are "extended" (type bits 0, then a byte of type − 7), sizes from 29 up take one
/// to three more bytes.
fn control(kind: u8, size: usize, out: &mut Vec<u8>) {
    let (size_bits, extra): (u8, Vec<u8>) = match size {
        0..=28 => (size as u8, Vec::new()),
        29..=284 => (29, vec![(size - 29) as u8]),
        285..=65_820 => (30, ((size - 285) as u16).to_be_bytes().to_vec()),
        _ => (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec()),
    };
    if kind <= 7 {
        out.push((kind << 5) | size_bits);
    } else {
        out.push(size_bits);
        out.push(kind - 7);
    }
    out.extend_from_slice(&extra);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn country(reader: &maxminddb::Reader<Vec<u8>>, ip: &str) -> Option<String> {
        let found = reader.lookup(ip.parse().expect("ip")).expect("lookup");
        let record: Option<maxminddb::geoip2::Country<'_>> = found.decode().expect("decode");
        record.and_then(|c| c.country.iso_code.map(str::to_owned))
    }

    #[test]
    fn the_maxminddb_crate_reads_what_is_written() {
        let bytes = country_db(&documentation_countries()).expect("db");
        let reader = maxminddb::Reader::from_source(bytes).expect("a valid MaxMind DB");
        assert_eq!(reader.metadata().ip_version, 6);
        assert_eq!(reader.metadata().record_size, 32);
        assert_eq!(reader.metadata().database_type, "banhub-Test-Country");
        assert_eq!(reader.metadata().languages, ["en"]);
        assert_eq!(country(&reader, "192.0.2.1").as_deref(), Some("DE"));
        assert_eq!(country(&reader, "192.0.2.255").as_deref(), Some("DE"));
        assert_eq!(country(&reader, "198.51.100.7").as_deref(), Some("US"));
        assert_eq!(country(&reader, "2001:db8::1").as_deref(), Some("FR"));
        assert_eq!(
            country(&reader, "2001:db8:ffff:ffff::1").as_deref(),
            Some("FR")
        );
        // Outside every network: nothing.
        assert_eq!(country(&reader, "203.0.113.1"), None);
        assert_eq!(country(&reader, "192.0.3.1"), None);
        assert_eq!(country(&reader, "2001:db9::1"), None);
        // The English name is there too.
        let found = reader
            .lookup("198.51.100.7".parse().expect("ip"))
            .expect("lookup");
        let record: maxminddb::geoip2::Country<'_> =
            found.decode().expect("decode").expect("a record");
        assert_eq!(record.country.names.english, Some("United States"));
        assert_eq!(record.registered_country.iso_code, Some("US"));
    }

    #[test]
    fn long_strings_and_shared_records_encode() {
        let long = "x".repeat(300);
        let bytes = country_db(&[
            CountryNetwork::new("10.0.0.0/8", "DE", &long),
            CountryNetwork::new("172.16.0.0/12", "DE", &long),
        ])
        .expect("db");
        let reader = maxminddb::Reader::from_source(bytes).expect("valid");
        assert_eq!(country(&reader, "10.1.2.3").as_deref(), Some("DE"));
        assert_eq!(country(&reader, "172.20.0.1").as_deref(), Some("DE"));
    }

    #[test]
    fn an_asn_database_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("asn.mmdb");
        write_asn_db(
            &path,
            &[
                AsnNetwork::new("8.8.8.0/24", 15169, "GOOGLE"),
                AsnNetwork::new("2a00:1450::/29", 15169, "GOOGLE"),
            ],
        )
        .expect("written");
        let reader = maxminddb::Reader::open_readfile(&path).expect("valid");
        assert_eq!(reader.metadata().database_type, "GeoLite2-ASN");
        for ip in ["8.8.8.8", "2a00:1450:4001::1"] {
            let found = reader.lookup(ip.parse().expect("ip")).expect("lookup");
            let asn: maxminddb::geoip2::Asn<'_> =
                found.decode().expect("decode").expect("a record");
            assert_eq!(asn.autonomous_system_number, Some(15169), "{ip}");
            assert_eq!(asn.autonomous_system_organization, Some("GOOGLE"));
        }
    }

    #[test]
    fn overlapping_networks_are_refused() {
        let err = country_db(&[
            CountryNetwork::new("192.0.2.0/24", "DE", "Germany"),
            CountryNetwork::new("192.0.2.128/25", "US", "United States"),
        ])
        .expect_err("overlap");
        assert!(format!("{err:#}").contains("inside"), "{err:#}");
    }
}
