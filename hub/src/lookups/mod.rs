//! Lookups: what the hub can say about one address beyond its own events. Where it is banned now
//! (`banned_now`, from the stored events and shared bans), which range it lives in (`scope`), its
//! autonomous system (the GeoLite2-ASN database of the settings), and, on an operator's demand,
//! what RDAP (`rdap`) and AbuseIPDB (`abuseipdb`) know of it.
//!
//! Only a public address ever leaves the hub. Answers are kept in memory for the settings'
//! `lookups.cacheTtlSecs` (`memo`); at most `lookups.perMinute` lookups per service leave the hub
//! in any minute (beyond, [`LookupError::RateLimited`]); one lookup takes at most
//! `lookups.timeoutSecs` and reads at most a bounded body.

pub mod abuseipdb;
pub mod banned_now;
pub mod memo;
pub mod rdap;
pub mod scope;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;

pub use abuseipdb::AbuseReport;
pub use banned_now::{BanInForce, banned_now};
pub use rdap::RdapNetwork;
pub use scope::{AddressScope, classify};

use crate::alerts::geoip::{Asn, GeoIpCache, GeoipKind};
use crate::settings::{CryptoError, Lookups as LookupSettings, SettingsService};
use memo::{Memo, Minute};
use rdap::Bootstrap;

/// Largest registry answer read.
const MAX_RDAP_BODY: usize = 256 * 1024;
/// Largest bootstrap file read (IANA's are tens of kilobytes).
const MAX_BOOTSTRAP_BODY: usize = 1024 * 1024;
/// Largest AbuseIPDB answer read.
const MAX_ABUSEIPDB_BODY: usize = 64 * 1024;
/// How long a bootstrap file is used before it is fetched again.
const BOOTSTRAP_TTL: Duration = Duration::from_secs(86_400);

/// An outside service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Rdap,
    AbuseIpDb,
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rdap => "RDAP",
            Self::AbuseIpDb => "AbuseIPDB",
        })
    }
}

/// Why a lookup gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(
        "at most {per_minute} {service} lookups a minute leave this hub (settings: \
         lookups.perMinute); try again in {retry_after_secs} s"
    )]
    RateLimited {
        service: Service,
        per_minute: u32,
        retry_after_secs: u64,
    },
    #[error("{service} did not answer within {secs} s (settings: lookups.timeoutSecs)")]
    Timeout { service: Service, secs: u64 },
    #[error("{service} cannot be reached: {reason}")]
    Unreachable { service: Service, reason: String },
    #[error("{service} answered HTTP {status}{hint}")]
    Status {
        service: Service,
        status: u16,
        hint: &'static str,
    },
    #[error("{service} sent more than {max} bytes; the answer was not read")]
    TooLarge { service: Service, max: usize },
    #[error("{service}'s answer cannot be read: {reason}")]
    Unreadable { service: Service, reason: String },
    #[error("the AbuseIPDB key cannot be opened: {0}")]
    Secret(#[from] CryptoError),
}

/// The outcome of a lookup that did not fail.
#[derive(Debug, Clone)]
pub enum Lookup<T> {
    /// The address is not on the public internet: nothing was asked.
    NotPublic(AddressScope),
    /// The service is turned off in the settings (or has no key): nothing was asked.
    Disabled,
    /// The service knows nothing of the address.
    NotFound {
        fetched_at: DateTime<Utc>,
        cached: bool,
    },
    Found {
        value: Arc<T>,
        fetched_at: DateTime<Utc>,
        cached: bool,
    },
}

/// An answer as kept: found or not, and when it was fetched.
type Kept<T> = (DateTime<Utc>, Option<Arc<T>>);

fn from_kept<T>((fetched_at, value): Kept<T>, cached: bool) -> Lookup<T> {
    match value {
        Some(value) => Lookup::Found {
            value,
            fetched_at,
            cached,
        },
        None => Lookup::NotFound { fetched_at, cached },
    }
}

struct Inner {
    settings: SettingsService,
    client: reqwest::Client,
    asn: GeoIpCache,
    rdap: Mutex<Memo<IpAddr, Kept<RdapNetwork>>>,
    abuse: Mutex<Memo<IpAddr, Kept<AbuseReport>>>,
    /// Bootstrap files by URL.
    bootstrap: Mutex<HashMap<String, (Instant, Arc<Bootstrap>)>>,
    rdap_minute: Mutex<Minute>,
    abuse_minute: Mutex<Minute>,
}

/// The lookups service; cheap to clone.
#[derive(Clone)]
pub struct Lookups(Arc<Inner>);

impl fmt::Debug for Lookups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lookups").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Lookups {
    pub fn new(settings: SettingsService) -> Self {
        let client = reqwest::Client::builder()
            .user_agent(concat!("banhub/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default();
        Self(Arc::new(Inner {
            settings,
            client,
            asn: GeoIpCache::new(GeoipKind::Asn),
            rdap: Mutex::default(),
            abuse: Mutex::default(),
            bootstrap: Mutex::default(),
            rdap_minute: Mutex::default(),
            abuse_minute: Mutex::default(),
        }))
    }

    /// The autonomous system of `addr` by the ASN database of the settings; `None` when none is
    /// set or it does not know the address.
    pub fn asn(&self, addr: IpAddr) -> Option<Asn> {
        let snapshot = self.0.settings.current();
        self.0
            .asn
            .get(snapshot.settings.asn_path.as_deref())?
            .asn_of(addr)
    }

    /// Whether AbuseIPDB would be asked: a key is stored.
    pub fn abuseipdb_configured(&self) -> bool {
        self.0.settings.current().document.lookups.abuseipdb_key_set
    }

    /// Whether RDAP would be asked.
    pub fn rdap_enabled(&self) -> bool {
        self.0.settings.current().settings.lookups.rdap_enabled
    }

    /// What the registry of `addr` says of its network.
    #[tracing::instrument(skip_all, fields(%addr), err(Display))]
    pub async fn rdap(&self, addr: IpAddr) -> Result<Lookup<RdapNetwork>, LookupError> {
        let scope = classify(addr);
        if !scope.is_public() {
            return Ok(Lookup::NotPublic(scope));
        }
        let config = self.0.settings.current().settings.lookups.clone();
        if !config.rdap_enabled {
            return Ok(Lookup::Disabled);
        }
        if let Some((_, kept)) = lock(&self.0.rdap).get(&addr, config.cache_ttl, Instant::now()) {
            return Ok(from_kept(kept, true));
        }
        self.turn(Service::Rdap, &config)?;
        let kept = bounded(Service::Rdap, &config, self.fetch_rdap(addr, &config)).await?;
        lock(&self.0.rdap).put(addr, kept.clone(), config.cache_ttl, Instant::now());
        Ok(from_kept(kept, false))
    }

    /// What AbuseIPDB says of `addr`.
    #[tracing::instrument(skip_all, fields(%addr), err(Display))]
    pub async fn abuseipdb(&self, addr: IpAddr) -> Result<Lookup<AbuseReport>, LookupError> {
        let scope = classify(addr);
        if !scope.is_public() {
            return Ok(Lookup::NotPublic(scope));
        }
        let snapshot = self.0.settings.current();
        let Some(key) = self.0.settings.abuseipdb_key(&snapshot)? else {
            return Ok(Lookup::Disabled);
        };
        let config = snapshot.settings.lookups.clone();
        if let Some((_, kept)) = lock(&self.0.abuse).get(&addr, config.cache_ttl, Instant::now()) {
            return Ok(from_kept(kept, true));
        }
        self.turn(Service::AbuseIpDb, &config)?;
        let url = format!("{}check", config.abuseipdb_url);
        let request = self
            .0
            .client
            .get(url)
            .query(&[
                ("ipAddress", addr.to_string()),
                ("maxAgeInDays", "90".to_owned()),
            ])
            .header("Key", key.expose_secret())
            .header(reqwest::header::ACCEPT, "application/json");
        let body = bounded(
            Service::AbuseIpDb,
            &config,
            read(Service::AbuseIpDb, request, MAX_ABUSEIPDB_BODY),
        )
        .await?;
        let kept = match body {
            Some(body) => {
                let report =
                    abuseipdb::parse_check(&body).map_err(|reason| LookupError::Unreadable {
                        service: Service::AbuseIpDb,
                        reason,
                    })?;
                (Utc::now(), Some(Arc::new(report)))
            }
            None => (Utc::now(), None),
        };
        lock(&self.0.abuse).put(addr, kept.clone(), config.cache_ttl, Instant::now());
        Ok(from_kept(kept, false))
    }

    /// Takes one of the minute's turns of `service`.
    fn turn(&self, service: Service, config: &LookupSettings) -> Result<(), LookupError> {
        let minute = match service {
            Service::Rdap => &self.0.rdap_minute,
            Service::AbuseIpDb => &self.0.abuse_minute,
        };
        lock(minute)
            .take(config.per_minute, Instant::now())
            .map_err(|wait| LookupError::RateLimited {
                service,
                per_minute: config.per_minute,
                retry_after_secs: wait.as_secs().max(1),
            })
    }

    /// The bootstrap file then the registry's answer.
    async fn fetch_rdap(
        &self,
        addr: IpAddr,
        config: &LookupSettings,
    ) -> Result<Kept<RdapNetwork>, LookupError> {
        let file = match addr {
            IpAddr::V4(_) => "ipv4.json",
            IpAddr::V6(_) => "ipv6.json",
        };
        let bootstrap = self
            .bootstrap(&format!("{}{file}", config.rdap_bootstrap_url))
            .await?;
        let Some(registry) = bootstrap.registry_for(addr) else {
            return Ok((Utc::now(), None));
        };
        let request = self.0.client.get(format!("{registry}ip/{addr}")).header(
            reqwest::header::ACCEPT,
            "application/rdap+json, application/json",
        );
        let Some(body) = read(Service::Rdap, request, MAX_RDAP_BODY).await? else {
            return Ok((Utc::now(), None));
        };
        let network =
            rdap::parse_network(&body, &registry).map_err(|reason| LookupError::Unreadable {
                service: Service::Rdap,
                reason,
            })?;
        Ok((Utc::now(), Some(Arc::new(network))))
    }

    async fn bootstrap(&self, url: &str) -> Result<Arc<Bootstrap>, LookupError> {
        if let Some((at, file)) = lock(&self.0.bootstrap).get(url)
            && at.elapsed() < BOOTSTRAP_TTL
        {
            return Ok(file.clone());
        }
        let request = self.0.client.get(url);
        let body = read(Service::Rdap, request, MAX_BOOTSTRAP_BODY)
            .await?
            .ok_or(LookupError::Status {
                service: Service::Rdap,
                status: 404,
                hint: " for the bootstrap file (settings: lookups.rdapBootstrapUrl)",
            })?;
        let file = Arc::new(
            Bootstrap::parse(&body).map_err(|reason| LookupError::Unreadable {
                service: Service::Rdap,
                reason: format!("the bootstrap file: {reason}"),
            })?,
        );
        lock(&self.0.bootstrap).insert(url.to_owned(), (Instant::now(), file.clone()));
        Ok(file)
    }
}

/// `work` within the settings' time bound.
async fn bounded<T>(
    service: Service,
    config: &LookupSettings,
    work: impl Future<Output = Result<T, LookupError>>,
) -> Result<T, LookupError> {
    tokio::time::timeout(config.timeout, work)
        .await
        .map_err(|_| LookupError::Timeout {
            service,
            secs: config.timeout.as_secs(),
        })?
}

/// Sends `request` and reads its body up to `max` bytes; `None` for a 404.
async fn read(
    service: Service,
    request: reqwest::RequestBuilder,
    max: usize,
) -> Result<Option<Vec<u8>>, LookupError> {
    let unreachable = |e: reqwest::Error| LookupError::Unreachable {
        service,
        reason: e.without_url().to_string(),
    };
    let mut response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        let hint = match status.as_u16() {
            401 | 403 => " (the API key was refused; settings: lookups.abuseipdbKey)",
            429 => " (its own rate limit)",
            _ => "",
        };
        return Err(LookupError::Status {
            service,
            status: status.as_u16(),
            hint,
        });
    }
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Err(LookupError::TooLarge { service, max });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > max {
            return Err(LookupError::TooLarge { service, max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}
