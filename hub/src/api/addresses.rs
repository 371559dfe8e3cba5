//! `GET /api/addresses/{ip}`: one address across the fleet, and why it is banned where: per
//! server, its recent events and the shared bans it holds with their origin and policy; and the
//! shared bans the lockout guard skipped.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use banhub_proto::rules::IpOrCidr;
use chrono::Utc;
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

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(address))
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
    let ip = IpOrCidr::parse(&raw).map_err(|e| ApiError::invalid("ip", e))?;
    let view = state.sharing.address(ip).await?;
    let origins = state.sharing.origins(&view.events).await?;
    let names = server_names(&state).await?;
    let now = Utc::now();
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
        servers,
        skipped,
        ended,
    }))
}
