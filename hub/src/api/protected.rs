//! `/api/protected-networks`: the lockout guard's list of networks nothing in banhub bans (admins
//! list, add and delete them; every change is audited), with the automatic entries (the hub's own
//! addresses, the operators' addresses) beside it, and the check the ban forms ask before a ban.

use std::net::IpAddr;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use banhub_proto::rules::IpOrCidr;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::ClientAddr;
use super::error::{ApiError, ApiJson, Problem};
use super::guards;
use crate::auth::{Admin, Operator};
use crate::domain::protected::parse_network;
use crate::domain::{ProtectedEntry, ProtectedNetwork};

/// The longest note.
const MAX_NOTE: usize = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_protected, add_protected))
        .routes(routes!(delete_protected))
        .routes(routes!(check_protected))
}

/// A network an admin protected.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedNetworkDto {
    id: i64,
    /// CIDR form, normalized (`192.0.2.7/32`, `2001:db8::/48`).
    network: String,
    /// Why it is protected.
    note: String,
    created_by: String,
    created_at: DateTime<Utc>,
}

impl From<ProtectedNetwork> for ProtectedNetworkDto {
    fn from(n: ProtectedNetwork) -> Self {
        Self {
            id: n.id,
            network: n.network.to_string(),
            note: n.note,
            created_by: n.created_by,
            created_at: n.created_at,
        }
    }
}

/// A protected network and why it is protected.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedEntryDto {
    /// CIDR form.
    network: String,
    /// `configured`, `hub_address` or `operator_session`.
    kind: String,
    /// The admin's note, the operator's name, or what the hub address is.
    note: String,
}

impl From<ProtectedEntry> for ProtectedEntryDto {
    fn from(e: ProtectedEntry) -> Self {
        Self {
            network: e.network.to_string(),
            kind: e.kind.as_str().to_owned(),
            note: e.note,
        }
    }
}

/// The protected networks: those admins configured, and those protected automatically.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedListDto {
    configured: Vec<ProtectedNetworkDto>,
    /// The hub's own addresses and the addresses of live operator sessions and recently used API
    /// tokens, as this replica sees them now.
    automatic: Vec<ProtectedEntryDto>,
}

/// A network to protect.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddProtectedBody {
    /// An address or a CIDR network; host bits are cleared.
    #[schema(value_type = super::schemas::Address)]
    network: String,
    /// Why it is protected ("office VPN"), at most 200 characters.
    #[serde(default)]
    #[schema(max_length = 200)]
    note: String,
    /// An admin's explicit go-ahead for a network wider than `guards.ban_min_prefix_v4`/`_v6`
    /// or one covering the broadcast address; never for one covering every address.
    #[serde(default, rename = "override")]
    guard_override: bool,
}

/// The address a ban form is about to ban.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CheckQuery {
    /// An address or a CIDR network.
    #[param(value_type = super::schemas::Address)]
    ip: String,
}

/// Whether a ban of an address would be refused as protected, and whether it covers the caller.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedCheckDto {
    /// The address or network, normalized.
    ip: String,
    /// The entry that protects it (the ban would be refused), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    protected_by: Option<ProtectedEntryDto>,
    /// The caller's own address as the hub sees it.
    #[serde(skip_serializing_if = "Option::is_none")]
    your_address: Option<String>,
    /// Whether the ban covers the caller's own address.
    covers_you: bool,
}

/// The protected networks: the configured ones, oldest first, and the automatic ones.
#[utoipa::path(get, path = "/api/protected-networks", tag = "protected",
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 200, body = ProtectedListDto)))]
async fn list_protected(
    _caller: Admin,
    State(state): State<AppState>,
) -> Result<ApiJson<ProtectedListDto>, ApiError> {
    let configured = state.protection.list().await?;
    let automatic = state
        .guards
        .protected_entries()
        .into_iter()
        .filter(|e| e.kind != crate::domain::ProtectionKind::Configured)
        .map(Into::into)
        .collect();
    Ok(ApiJson(ProtectedListDto {
        configured: configured.into_iter().map(Into::into).collect(),
        automatic,
    }))
}

/// Protects a network: from now on no path of banhub bans an address in it, and every host's
/// `ignoreip` gets it shortly.
#[utoipa::path(post, path = "/api/protected-networks", tag = "protected",
    request_body = AddProtectedBody,
    extensions(("x-required-role" = json!("admin"))),
    responses((status = 201, body = ProtectedNetworkDto),
              (status = 409, description = "The network is protected already", body = Problem),
              (status = 422, description = "`network` or `note` breaks its rule, or a guard rail (`guard_*` codes) needs the override", body = Problem)))]
async fn add_protected(
    caller: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AddProtectedBody>,
) -> Result<(StatusCode, ApiJson<ProtectedNetworkDto>), ApiError> {
    let network = parse_network(&body.network).ok_or_else(|| {
        ApiError::invalid(
            "network",
            "must be an IPv4 or IPv6 address or a CIDR network (192.0.2.0/24, 2001:db8::/48)",
        )
    })?;
    let note = body.note.trim();
    if note.chars().count() > MAX_NOTE || note.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "note",
            format!("must be at most {MAX_NOTE} characters on one line"),
        ));
    }
    guards::check_protect(&state, &caller, "network", network, body.guard_override)?;
    let added = state
        .protection
        .add(network, note, &caller.requested_by())
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("{network} is protected already")))?;
    Ok((StatusCode::CREATED, ApiJson(added.into())))
}

/// Lifts the protection of a network an admin added.
#[utoipa::path(delete, path = "/api/protected-networks/{id}", tag = "protected",
    extensions(("x-required-role" = json!("admin"))),
    params(("id" = i64, Path, description = "The protected network's id")),
    responses((status = 204),
              (status = 400, description = "The id is not a whole number", body = Problem),
              (status = 404, body = Problem)))]
async fn delete_protected(
    _caller: Admin,
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(id) = id.map_err(|rejection| ApiError::Malformed {
        status: StatusCode::BAD_REQUEST,
        detail: rejection.body_text(),
    })?;
    state
        .protection
        .remove(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no protected network has the id {id}")))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Whether a ban of `ip` would be refused as protected, and whether it covers the caller's own
/// address: what the ban forms ask before they submit.
#[utoipa::path(get, path = "/api/protected-networks/check", tag = "protected",
    params(CheckQuery),
    extensions(("x-required-role" = json!("operator"))),
    responses((status = 200, body = ProtectedCheckDto),
              (status = 400, description = "The query string does not parse (`ip` missing)", body = Problem),
              (status = 422, description = "`ip` is not an address or a network", body = Problem)))]
async fn check_protected(
    _caller: Operator,
    State(state): State<AppState>,
    ClientAddr(client): ClientAddr,
    query: Result<Query<CheckQuery>, QueryRejection>,
) -> Result<ApiJson<ProtectedCheckDto>, ApiError> {
    let query = super::error::query(query)?;
    let ip = IpOrCidr::parse(&query.ip).map_err(|e| ApiError::invalid("ip", e))?;
    let client = client.map(banhub_proto::rules::unmapped_ip);
    Ok(ApiJson(ProtectedCheckDto {
        ip: ip.to_string(),
        protected_by: state.guards.protecting(&ip).map(Into::into),
        your_address: client.map(|c: IpAddr| c.to_string()),
        covers_you: client.is_some_and(|c| ip.contains(c)),
    }))
}
