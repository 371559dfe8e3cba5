//! The capabilities handlers take as arguments: [`Viewer`], [`Operator`], [`Admin`]. Each is
//! extracted only from a request whose principal has at least that role, so a handler that mutates
//! cannot be written without asking for the right one; it also gives the `requested_by` that
//! commands carry to agents and the request's [`AuditHandle`].
//!
//! The route's documented role ([`RouteRole`], from `x-required-role`) is enforced before the
//! handler runs; a capability that disagrees with it is a bug and refused, so the OpenAPI document
//! cannot drift from what handlers require without a test noticing.

use std::ops::Deref;

use axum::http::request::Parts;

use super::policy::{AuditHandle, RouteRole};
use super::{AuthError, Principal, Role};

/// An authenticated caller with at least the role of the capability it came from.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Principal,
    audit: AuditHandle,
}

impl Caller {
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Who commands sent to agents say asked.
    pub fn requested_by(&self) -> String {
        self.principal.requested_by()
    }

    /// Adds a detail to this request's audit entry (a no-op for requests that are not recorded).
    pub fn note(&self, key: &str, value: impl Into<serde_json::Value>) {
        self.audit.note(key, value);
    }

    /// Names the server this request is about in its audit entry.
    pub fn audit_server(&self, id: impl std::fmt::Display) {
        self.audit.server(id);
    }
}

fn extract(parts: &Parts, role: Role) -> Result<Caller, AuthError> {
    let Some(principal) = parts.extensions.get::<Principal>() else {
        return Err(AuthError::Unauthenticated(
            "log in (GET /auth/login) or send `Authorization: Bearer <token>`".to_owned(),
        ));
    };
    if principal.role < role {
        return Err(AuthError::Forbidden(format!(
            "this needs the {role} role; {} has the {} role",
            principal.name, principal.role
        )));
    }
    if let Some(RouteRole(documented)) = parts.extensions.get::<RouteRole>()
        && *documented != role
    {
        return Err(AuthError::PolicyMismatch(format!(
            "{} {}: the handler takes the {role} capability but the route documents \
             x-required-role = {documented}",
            parts.method,
            parts.uri.path()
        )));
    }
    Ok(Caller {
        principal: principal.clone(),
        audit: parts
            .extensions
            .get::<AuditHandle>()
            .cloned()
            .unwrap_or_default(),
    })
}

macro_rules! capability {
    ($(#[$doc:meta])* $name:ident, $role:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(Caller);

        impl Deref for $name {
            type Target = Caller;

            fn deref(&self) -> &Caller {
                &self.0
            }
        }

        impl $name {
            /// The capability of the request whose `parts` these are, or why it has none.
            /// `api::access` makes this the extractor handlers take.
            pub fn from_parts(parts: &Parts) -> Result<Self, AuthError> {
                extract(parts, $role).map(Self)
            }
        }
    };
}

capability!(
    /// May read everything (`x-required-role = "viewer"`).
    Viewer,
    Role::Viewer
);
capability!(
    /// May also ban and unban (`x-required-role = "operator"`).
    Operator,
    Role::Operator
);
capability!(
    /// May change everything (`x-required-role = "admin"`).
    Admin,
    Role::Admin
);
