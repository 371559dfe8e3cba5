//! `GET /api/addresses/{ip}`: one address across the fleet, and why it is banned where: per
//! server, its recent events and the shared bans it holds with their origin and policy; the shared
//! bans the lockout guard skipped; where it is banned now; its range, country and autonomous
//! system. `GET /api/addresses/{ip}/rdap` and `…/abuseipdb`: what the outside services say of it,
//! asked by the hub on demand (never for an address outside the public internet).

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use banhub_proto::rules::{IpOrCidr, unmapped_ip};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, ApiJson, Problem};
use super::events::{EventDto, mark_shared};
use super::shared_origin::server_names;
use super::sharing::{SharedBanDto, shared_ban_dto};
use crate::auth::Viewer;
use crate::domain::ServerId;
use crate::domain::sharing::SharedBanStatus;
use crate::lookups::{AbuseReport, AddressScope, Lookup, RdapNetwork, banned_now, classify};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(address))
        .routes(routes!(rdap))
        .routes(routes!(abuseipdb))
}

/// A ban of the address in force now.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BannedNowDto {
    server_id: String,
    server_name: Option<String>,
    jail: String,
    /// The address (a network's page lists each of its addresses).
    ip: String,
    /// A shared ban (fleet defence) rather than the server's own.
    shared: bool,
    since: DateTime<Utc>,
    /// When it ends; `null` when permanent (`permanent`) or not reported.
    until: Option<DateTime<Utc>>,
    permanent: bool,
}

/// The autonomous system of the address, from the ASN database of the settings.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AsnDto {
    number: u32,
    organization: Option<String>,
}

/// Which outside services the hub would ask about the address.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LookupsAvailable {
    /// RDAP is on and the address is public.
    rdap: bool,
    /// An AbuseIPDB key is stored and the address is public.
    abuseipdb: bool,
}

/// One server's view of the address.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressServerDto {
    server_id: String,
    server_name: Option<String>,
    /// Its recent ban and unban events of the address, newest first (shared ones carry their
    /// origin).
    events: Vec<EventDto>,
    /// The shared bans of the address it holds now (pending or delivered).
    shared_bans: Vec<SharedBanDto>,
}

/// An address across the fleet.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddressDto {
    ip: String,
    /// The range the address (a network's first address) lives in; only `public` ones are looked
    /// up outside.
    scope: AddressScope,
    /// ISO 3166 code by the GeoIP country database, if set and known.
    country: Option<String>,
    asn: Option<AsnDto>,
    lookups: LookupsAvailable,
    /// Where the address is banned now, by the stored events and shared bans.
    banned_now: Vec<BannedNowDto>,
    servers: Vec<AddressServerDto>,
    /// Shared bans of the address that were never sent (the lockout guard refused it).
    skipped: Vec<SharedBanDto>,
    /// Every shared ban of the address that ended (lifted or expired), newest first.
    ended: Vec<SharedBanDto>,
}

/// An address across the fleet: per server, its recent events and the shared bans it holds with
/// their origin and policy, and the shared bans skipped or ended.
#[utoipa::path(get, path = "/api/addresses/{ip}", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    params(("ip" = super::schemas::Address, Path, description = "An address or CIDR network")),
    responses((status = 200, body = AddressDto),
              (status = 422, description = "Not an address", body = Problem)))]
async fn address(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<ApiJson<AddressDto>, ApiError> {
    let ip = match IpOrCidr::parse(&raw) {
        Ok(ip) => ip,
        // An address no client sends from (loopback, multicast, unspecified) has no bans to
        // show; its page still says what it is.
        Err(e) => match raw.parse::<IpAddr>() {
            Ok(addr) => return Ok(ApiJson(nothing_known(unmapped_ip(addr)))),
            Err(_) => return Err(ApiError::invalid("ip", e)),
        },
    };
    let view = state.sharing.address(ip).await?;
    let origins = state.sharing.origins(&view.events).await?;
    let names = server_names(&state).await?;
    let now = Utc::now();
    let first: IpAddr = match ip {
        IpOrCidr::Ip(addr) => addr,
        IpOrCidr::Net(net) => net.network(),
    };
    let scope = classify(first);
    let banned_now = banned_now(&view.events, &view.shared, now)
        .into_iter()
        .map(|ban| BannedNowDto {
            server_id: ban.server_id.to_string(),
            server_name: names.get(&ban.server_id).cloned(),
            jail: ban.jail,
            ip: ban.ip,
            shared: ban.shared,
            since: ban.since,
            until: ban.until,
            permanent: ban.permanent,
        })
        .collect();
    let mut servers: BTreeMap<ServerId, AddressServerDto> = BTreeMap::new();
    let slot = |servers: &mut BTreeMap<ServerId, AddressServerDto>, id: ServerId| {
        servers.entry(id).or_insert_with(|| AddressServerDto {
            server_id: id.to_string(),
            server_name: names.get(&id).cloned(),
            events: Vec::new(),
            shared_bans: Vec::new(),
        });
    };
    for event in &view.events {
        slot(&mut servers, event.server_id);
        if let Some(entry) = servers.get_mut(&event.server_id) {
            entry.events.push(EventDto::from(event));
        }
    }
    let (mut skipped, mut ended) = (Vec::new(), Vec::new());
    for ban in view.shared {
        match ban.status_at(now) {
            SharedBanStatus::Pending | SharedBanStatus::Delivered => {
                let target = ban.target;
                slot(&mut servers, target);
                if let Some(entry) = servers.get_mut(&target) {
                    entry.shared_bans.push(shared_ban_dto(ban, &names, now));
                }
            }
            SharedBanStatus::Skipped => skipped.push(shared_ban_dto(ban, &names, now)),
            SharedBanStatus::Lifted | SharedBanStatus::Expired => {
                ended.push(shared_ban_dto(ban, &names, now));
            }
        }
    }
    let mut servers: Vec<AddressServerDto> = servers.into_values().collect();
    for server in &mut servers {
        mark_shared(&names, &mut server.events, &origins);
    }
    servers.sort_by(|a, b| a.server_name.cmp(&b.server_name));
    Ok(ApiJson(AddressDto {
        ip: ip.to_string(),
        scope,
        country: state.alerts.country(first),
        asn: state.lookups.asn(first).map(|asn| AsnDto {
            number: asn.number,
            organization: asn.organization,
        }),
        lookups: LookupsAvailable {
            rdap: scope.is_public() && state.lookups.rdap_enabled(),
            abuseipdb: scope.is_public() && state.lookups.abuseipdb_configured(),
        },
        banned_now,
        servers,
        skipped,
        ended,
    }))
}

/// The view of an address the store can hold nothing of.
fn nothing_known(addr: IpAddr) -> AddressDto {
    AddressDto {
        ip: addr.to_string(),
        scope: classify(addr),
        country: None,
        asn: None,
        lookups: LookupsAvailable {
            rdap: false,
            abuseipdb: false,
        },
        banned_now: Vec::new(),
        servers: Vec::new(),
        skipped: Vec::new(),
        ended: Vec::new(),
    }
}

/// How a lookup ended.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum LookupStatus {
    /// The service answered about the address.
    Found,
    /// The service knows nothing of it.
    NotFound,
    /// The address is not on the public internet (`scope`): nothing was asked.
    NotPublic,
    /// The service is off in the settings (RDAP) or has no key (AbuseIPDB): nothing was asked.
    Disabled,
}

/// What RDAP says of the network holding an address.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdapLookupDto {
    ip: String,
    scope: AddressScope,
    status: LookupStatus,
    /// The answer was kept from an earlier lookup (no request left the hub).
    cached: bool,
    fetched_at: Option<DateTime<Utc>>,
    network: Option<RdapNetwork>,
}

/// What AbuseIPDB says of an address.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbuseLookupDto {
    ip: String,
    scope: AddressScope,
    status: LookupStatus,
    /// The answer was kept from an earlier lookup (no request left the hub).
    cached: bool,
    fetched_at: Option<DateTime<Utc>>,
    report: Option<AbuseReport>,
}

/// One address from the path; a network or anything else is a 400.
fn single_address(raw: &str) -> Result<IpAddr, ApiError> {
    match raw.parse::<IpAddr>() {
        Ok(addr) => Ok(unmapped_ip(addr)),
        Err(_) if raw.contains('/') => Err(ApiError::Malformed {
            status: StatusCode::BAD_REQUEST,
            detail: format!("{raw} is a network; look up one address of it"),
        }),
        Err(_) => Err(ApiError::Malformed {
            status: StatusCode::BAD_REQUEST,
            detail: format!("{raw:?} is not an IPv4 or IPv6 address"),
        }),
    }
}

/// A lookup's outcome as status, cache flag, time and value.
fn outcome<T: Clone>(lookup: Lookup<T>) -> (LookupStatus, bool, Option<DateTime<Utc>>, Option<T>) {
    match lookup {
        Lookup::NotPublic(_) => (LookupStatus::NotPublic, false, None, None),
        Lookup::Disabled => (LookupStatus::Disabled, false, None, None),
        Lookup::NotFound { fetched_at, cached } => {
            (LookupStatus::NotFound, cached, Some(fetched_at), None)
        }
        Lookup::Found {
            value,
            fetched_at,
            cached,
        } => (
            LookupStatus::Found,
            cached,
            Some(fetched_at),
            Some(T::clone(&value)),
        ),
    }
}

/// What the address's RDAP registry (found through IANA's bootstrap files) says of its network:
/// name, handle, CIDR blocks, country, entities with their abuse address, registration events.
/// Answers are kept for `lookups.cacheTtlSecs`; at most `lookups.perMinute` lookups a minute
/// leave the hub.
#[utoipa::path(get, path = "/api/addresses/{ip}/rdap", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    params(("ip" = String, Path, description = "One IPv4 or IPv6 address")),
    responses((status = 200, body = RdapLookupDto),
              (status = 400, description = "Not a single address (`bad_request`)", body = Problem),
              (status = 429, description = "Over the hub's lookups per minute (`lookup_rate_limited`, with `Retry-After`)", body = Problem),
              (status = 502, description = "The registry failed, answered with an error or too much (`lookup_failed`), or redirected where the hub sends nothing (`lookup_refused`)", body = Problem),
              (status = 504, description = "No answer within `lookups.timeoutSecs` (`lookup_timeout`)", body = Problem)))]
async fn rdap(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<ApiJson<RdapLookupDto>, ApiError> {
    let addr = single_address(&raw)?;
    let (status, cached, fetched_at, network) = outcome(state.lookups.rdap(addr).await?);
    Ok(ApiJson(RdapLookupDto {
        ip: addr.to_string(),
        scope: classify(addr),
        status,
        cached,
        fetched_at,
        network,
    }))
}

/// What AbuseIPDB's `check` says of the address (confidence score, reports, ISP, usage type),
/// when an API key is stored in `lookups.abuseipdbKey`. Kept and limited like RDAP.
#[utoipa::path(get, path = "/api/addresses/{ip}/abuseipdb", tag = "sharing",
    extensions(("x-required-role" = json!("viewer"))),
    params(("ip" = String, Path, description = "One IPv4 or IPv6 address")),
    responses((status = 200, body = AbuseLookupDto),
              (status = 400, description = "Not a single address (`bad_request`)", body = Problem),
              (status = 429, description = "Over the hub's lookups per minute (`lookup_rate_limited`, with `Retry-After`)", body = Problem),
              (status = 502, description = "AbuseIPDB failed, refused the key or answered too much (`lookup_failed`), or redirected where the hub sends nothing (`lookup_refused`)", body = Problem),
              (status = 504, description = "No answer within `lookups.timeoutSecs` (`lookup_timeout`)", body = Problem)))]
async fn abuseipdb(
    _caller: Viewer,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<ApiJson<AbuseLookupDto>, ApiError> {
    let addr = single_address(&raw)?;
    let (status, cached, fetched_at, report) = outcome(state.lookups.abuseipdb(addr).await?);
    Ok(ApiJson(AbuseLookupDto {
        ip: addr.to_string(),
        scope: classify(addr),
        status,
        cached,
        fetched_at,
        report,
    }))
}
