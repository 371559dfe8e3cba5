//! Lookups: what the hub can say about one address beyond its own events. Where it is banned now
//! (`banned_now`, from the stored events and shared bans), which range it lives in (`scope`), its
//! autonomous system (the GeoLite2-ASN database of the settings), and, on an operator's demand,
//! what RDAP (`rdap`) and AbuseIPDB (`abuseipdb`) know of it.
//!
//! Only a public address ever leaves the hub. Answers are kept in memory for the settings'
//! `lookups.cacheTtlSecs` (`memo`); at most `lookups.perMinute` lookups per service leave the hub
//! in any minute (beyond, [`LookupError::RateLimited`]); one lookup takes at most
//! `lookups.timeoutSecs` and reads at most a bounded body. Every request, the first and each
//! redirect, passes the rule of `hops` before it is sent.

pub mod abuseipdb;
pub mod banned_now;
pub mod hops;
pub mod memo;
pub mod rdap;
pub mod scope;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::Url;
use secrecy::ExposeSecret;

pub use abuseipdb::AbuseReport;
pub use banned_now::{BanInForce, banned_now};
pub use rdap::RdapNetwork;
pub use scope::{AddressScope, classify};

use crate::alerts::geoip::{Asn, GeoIpCache, GeoipKind};
use crate::settings::{CryptoError, Lookups as LookupSettings, SettingsService};
use hops::{HopError, PublicOnly, Target, Trusted};
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
    #[error("{service}: nothing was sent to {url}: {hop}")]
    Refused {
        service: Service,
        url: String,
        hop: HopError,
    },
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
        // Redirects are followed by `read`, one checked hop at a time.
        let resolver = {
            let settings = settings.clone();
            PublicOnly(move || trusted(&settings.current().settings.lookups))
        };
        let client = reqwest::Client::builder()
            .user_agent(concat!("banhub/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(resolver))
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
        let mut url = parse_url(
            Service::AbuseIpDb,
            &format!("{}check", config.abuseipdb_url),
        )?;
        url.query_pairs_mut()
            .append_pair("ipAddress", &addr.to_string())
            .append_pair("maxAgeInDays", "90");
        let ask = Ask {
            service: Service::AbuseIpDb,
            accept: "application/json",
            key: Some(key.expose_secret()),
            max: MAX_ABUSEIPDB_BODY,
        };
        let body = bounded(Service::AbuseIpDb, &config, self.read(&ask, url, &config)).await?;
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
            .bootstrap(&format!("{}{file}", config.rdap_bootstrap_url), config)
            .await?;
        let Some(registry) = bootstrap.registry_for(addr) else {
            return Ok((Utc::now(), None));
        };
        let ask = Ask {
            service: Service::Rdap,
            accept: "application/rdap+json, application/json",
            key: None,
            max: MAX_RDAP_BODY,
        };
        let url = parse_url(Service::Rdap, &format!("{registry}ip/{addr}"))?;
        let Some(body) = self.read(&ask, url, config).await? else {
            return Ok((Utc::now(), None));
        };
        let network =
            rdap::parse_network(&body, &registry).map_err(|reason| LookupError::Unreadable {
                service: Service::Rdap,
                reason,
            })?;
        Ok((Utc::now(), Some(Arc::new(network))))
    }

    async fn bootstrap(
        &self,
        url: &str,
        config: &LookupSettings,
    ) -> Result<Arc<Bootstrap>, LookupError> {
        if let Some((at, file)) = lock(&self.0.bootstrap).get(url)
            && at.elapsed() < BOOTSTRAP_TTL
        {
            return Ok(file.clone());
        }
        let ask = Ask {
            service: Service::Rdap,
            accept: "application/json",
            key: None,
            max: MAX_BOOTSTRAP_BODY,
        };
        let body = self
            .read(&ask, parse_url(Service::Rdap, url)?, config)
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

impl Lookups {
    /// Sends a GET to `url`, following redirects one checked hop at a time, and reads the final
    /// answer's body up to `ask.max` bytes; `None` for a 404. The key goes to the first URL's
    /// origin only.
    async fn read(
        &self,
        ask: &Ask<'_>,
        mut url: Url,
        config: &LookupSettings,
    ) -> Result<Option<Vec<u8>>, LookupError> {
        let service = ask.service;
        let trusted = trusted(config);
        let first = url.origin();
        let mut hop = 0;
        loop {
            if let Target::Name(host) =
                hops::check_url(&url, &trusted).map_err(|e| refused(service, url.as_str(), e))?
            {
                hops::resolve_checked(&host)
                    .await
                    .map_err(|e| refused(service, url.as_str(), e))?;
            }
            let mut request = self
                .0
                .client
                .get(url.clone())
                .header(reqwest::header::ACCEPT, ask.accept);
            if let Some(key) = ask.key
                && url.origin() == first
            {
                request = request.header("Key", key);
            }
            let response = request
                .send()
                .await
                .map_err(|e| send_error(service, url.as_str(), e))?;
            if response.status().is_redirection() {
                hop += 1;
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok());
                url = hops::next_hop(&url, location, hop)
                    .map_err(|e| refused(service, url.as_str(), e))?;
                continue;
            }
            return body(service, response, ask.max).await;
        }
    }
}

/// What one lookup asks: of which service, what it accepts, its key, how much it reads.
struct Ask<'a> {
    service: Service,
    accept: &'static str,
    key: Option<&'a str>,
    max: usize,
}

/// The operator's configured base URLs of the lookups, trusted as they are.
fn trusted(config: &LookupSettings) -> Trusted {
    Trusted::of([
        config.rdap_bootstrap_url.as_str(),
        config.abuseipdb_url.as_str(),
    ])
}

fn refused(service: Service, url: &str, hop: HopError) -> LookupError {
    LookupError::Refused {
        service,
        url: url.to_owned(),
        hop,
    }
}

fn parse_url(service: Service, raw: &str) -> Result<Url, LookupError> {
    Url::parse(raw).map_err(|_| {
        refused(
            service,
            raw,
            HopError::NoHost {
                url: raw.to_owned(),
            },
        )
    })
}

/// A failed send: refused by the resolver's check (the name's addresses changed since the hop
/// was checked), or unreachable.
fn send_error(service: Service, url: &str, e: reqwest::Error) -> LookupError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(cause) = source {
        if let Some(hop) = cause.downcast_ref::<HopError>() {
            return refused(service, url, hop.clone());
        }
        source = cause.source();
    }
    LookupError::Unreachable {
        service,
        reason: e.without_url().to_string(),
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

/// Reads an answer's body up to `max` bytes; `None` for a 404.
async fn body(
    service: Service,
    mut response: reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, LookupError> {
    let unreachable = |e: reqwest::Error| LookupError::Unreachable {
        service,
        reason: e.without_url().to_string(),
    };
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
