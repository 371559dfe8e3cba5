//! The guard rails at the API's edge: the `override` a ban or an allowlist may carry (an admin's
//! only, recorded in the request's audit entry) and the refusal of what a rail stops.

use banhub_proto::rules::IpOrCidr;
use ipnet::IpNet;

use super::AppState;
use super::error::ApiError;
use crate::auth::{AuthError, Caller, Role};
use crate::domain::GuardViolation;

/// Whether the request's `override` may lift guard rails: only an admin's may.
pub(super) fn admin_override(caller: &Caller, requested: bool) -> Result<bool, ApiError> {
    if requested && caller.principal().role < Role::Admin {
        return Err(AuthError::Forbidden(format!(
            "`override` lifts guard rails and needs the admin role; {} has the {} role",
            caller.principal().name,
            caller.principal().role
        ))
        .into());
    }
    Ok(requested)
}

/// Checks a ban against the guard rails; a lifted rail is noted in the audit entry.
pub(super) fn check_ban(
    state: &AppState,
    caller: &Caller,
    field: &str,
    ip: &IpOrCidr,
    overridden: bool,
) -> Result<(), ApiError> {
    answer(caller, field, state.guards.check_ban(ip, overridden))
}

/// Checks a network of an allowlist against the guard rails; a lifted rail is noted in the audit
/// entry.
pub(super) fn check_allow(
    state: &AppState,
    caller: &Caller,
    field: &str,
    net: IpNet,
    overridden: bool,
) -> Result<(), ApiError> {
    answer(caller, field, state.guards.check_allow(net, overridden))
}

/// Checks a network an admin protects against the guard rails (the override is an admin's anyway);
/// a lifted rail is noted in the audit entry.
pub(super) fn check_protect(
    state: &AppState,
    caller: &Caller,
    field: &str,
    net: IpNet,
    overridden: bool,
) -> Result<(), ApiError> {
    answer(caller, field, state.guards.check_protect(net, overridden))
}

/// A refused rail as the API's error; a lifted one noted in the audit entry.
fn answer(
    caller: &Caller,
    field: &str,
    checked: Result<Option<GuardViolation>, GuardViolation>,
) -> Result<(), ApiError> {
    let lifted = checked.map_err(|violation| refused(field, violation))?;
    note_lifted(caller, field, lifted);
    Ok(())
}

fn refused(field: &str, violation: GuardViolation) -> ApiError {
    ApiError::Guarded {
        field: field.to_owned(),
        violation,
    }
}

fn note_lifted(caller: &Caller, field: &str, lifted: Option<GuardViolation>) {
    if let Some(rail) = lifted {
        tracing::info!(%field, rule = rail.rule(), by = %caller.requested_by(), "guard rail overridden");
        // One note per field, so every lifted rail of a request shows in its audit entry.
        caller.note(
            &format!("guardOverride.{field}"),
            serde_json::json!({"rule": rail.rule(), "detail": rail.to_string()}),
        );
    }
}
