//! The OpenAPI document of the REST API: its header (title, tags), and the error answers every
//! operation can give.
//!
//! Each handler's `#[utoipa::path]` lists its success and its own refusals (a guard rail, a stale
//! version). The answers that come from the shared layers rather than from the handler, such as
//! authentication, body and query parsing, the server a request names, the agent that runs the
//! command and the database, are added here by [`finish`] from what the operation declares (its role,
//! body, parameters), so that no route can forget one. Every error answer is an
//! `application/problem+json` [`Problem`](super::Problem), and its description names the problem
//! codes it can carry.

use std::collections::BTreeSet;

use utoipa::OpenApi;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::{Content, Ref, RefOr, Required, Response};

use super::schemas;
use super::target::SERVER_HEADER;
use crate::auth::policy::{self, ROLE_EXTENSION};

/// The content type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "banhub",
        description = "Manage fail2ban on a fleet of hosts. Errors are RFC 9457 problem documents \
                       (`application/problem+json`) with a stable `code`; each answer's description \
                       lists the codes it can carry."
    ),
    components(schemas(
        schemas::Name,
        schemas::JailName,
        schemas::Address,
        schemas::ServerRef,
        schemas::Timestamp,
        schemas::EventKinds,
        schemas::EventSources,
        schemas::SearchText,
        schemas::EventsFormat,
        schemas::Labels
    )),
    tags((name = "servers", description = "Registered fail2ban hosts and their agents"),
         (name = "jails", description = "Jails of the server named by X-BanDaemon-Server (default: the oldest server)"),
         (name = "filters", description = "Filter debugging with fail2ban-regex on the host"),
         (name = "control", description = "Reload, restart, fleet-wide actions"),
         (name = "protected", description = "Protected networks: what nothing in banhub bans (the lockout guard)"),
         (name = "sharing", description = "Sharing policies, the shared bans they make, why an address is banned where, fleet recidive rules and the sources paused by the storm breaker"),
         (name = "profiles", description = "Profiles: versioned jail and filter files assigned to servers by label, and each server's drift from its profile"),
         (name = "events", description = "Ban events: history, stats, insights and the live stream"),
         (name = "callbacks", description = "fail2ban's action reporting to the hub directly (hosts without an agent)"),
         (name = "settings", description = "Settings (SMTP, alerts, webhooks, retention, GeoIP, fail2ban defaults), the test e-mail and the defaults push"),
         (name = "alerts", description = "Alert digests and the status of their e-mail and webhook deliveries"),
         (name = "auth", description = "Login (OpenID Connect or the local administrator), the session's user, API tokens and sessions"),
         (name = "audit", description = "The audit log of every state-changing request"),
         (name = "feeds", description = "Blocklist feeds for edge firewalls (pfSense, OPNsense, nftables, ipset, MikroTik) and their read-only tokens"),
         (name = "health", description = "Liveness, readiness and metrics"))
)]
pub(super) struct ApiDoc;

/// Routes that reach a server's agent although they name the server in their path rather than in
/// the `X-BanDaemon-Server` header.
const AGENT_PATHS: [&str; 3] = [
    "/api/servers/{id}/test",
    "/api/servers/{id}/probe",
    "/api/servers/{id}/delivery",
];

/// Operations that reach a server's agent although other methods of their path do not.
const AGENT_OPERATIONS: [(&str, &str); 2] = [
    ("post", "/api/servers/{id}/config-changes"),
    ("post", "/api/servers/{id}/config-changes/{change}/revert"),
];

/// Routes that name a server in their path (by id or name).
const SERVER_PATH_PREFIX: &str = "/api/servers/{id}";

/// Routes that answer without touching the database.
const STORELESS_PATHS: [&str; 1] = ["/healthz"];

/// What an operation declares, which decides the shared answers it can give.
#[derive(Debug, Clone, Copy, Default)]
struct Facts {
    /// Needs a session or token (not `public`).
    role: bool,
    /// Reads a request body.
    body: bool,
    /// Its body must be JSON with `Content-Type: application/json` (an optional body is read
    /// whatever its type).
    json_body: bool,
    /// Reads a query string.
    query: bool,
    /// Names a server (header, `serverId` or path), which may not exist.
    names_server: bool,
    /// Sends a command to that server's agent.
    agent: bool,
    /// Changes state on the host (a command that writes).
    writes: bool,
    /// Reads or writes the database.
    store: bool,
}

impl Facts {
    fn of(path: &str, method: &str, op: &Operation) -> Self {
        let params = op.parameters.iter().flatten().filter_map(|p| match p {
            RefOr::T(p) => Some(p),
            RefOr::Ref(_) => None,
        });
        let mut facts = Self {
            role: op
                .extensions
                .as_ref()
                .and_then(|e| e.get(ROLE_EXTENSION))
                .and_then(|v| v.as_str())
                .is_some_and(|role| role != "public"),
            store: !STORELESS_PATHS.contains(&path),
            writes: method != "get",
            ..Self::default()
        };
        if let Some(RefOr::T(body)) = &op.request_body {
            facts.body = true;
            facts.json_body = matches!(body.required, Some(Required::True));
        }
        let in_path = path.starts_with(SERVER_PATH_PREFIX);
        for param in params {
            match param.parameter_in {
                ParameterIn::Query => {
                    facts.query = true;
                    facts.names_server |= param.name == "serverId";
                }
                ParameterIn::Header if param.name.eq_ignore_ascii_case(SERVER_HEADER) => {
                    facts.names_server = true;
                    facts.agent = true;
                }
                _ => {}
            }
        }
        facts.names_server |= in_path;
        facts.agent |= AGENT_PATHS.contains(&path) || AGENT_OPERATIONS.contains(&(method, path));
        facts
    }
}

/// One problem an operation can answer with: its status, its code, and which operations can.
struct Answer {
    status: u16,
    code: &'static str,
    applies: fn(&Facts) -> bool,
}

/// Every problem that comes from the shared layers, in the order their codes are listed.
const SHARED: &[Answer] = &[
    Answer {
        status: 400,
        code: "bad_request",
        applies: |f| f.body || f.query,
    },
    Answer {
        status: 401,
        code: "unauthenticated",
        applies: |f| f.role,
    },
    Answer {
        status: 403,
        code: "forbidden",
        applies: |f| f.role,
    },
    Answer {
        status: 403,
        code: "no_role",
        applies: |f| f.role,
    },
    Answer {
        status: 403,
        code: "cross_origin",
        applies: |f| f.role && f.writes,
    },
    Answer {
        status: 404,
        code: "unknown_server",
        applies: |f| f.names_server,
    },
    Answer {
        status: 404,
        code: "not_found_on_host",
        applies: |f| f.agent,
    },
    Answer {
        status: 409,
        code: "config_conflict",
        applies: |f| f.agent && f.writes,
    },
    Answer {
        status: 413,
        code: "payload_too_large",
        applies: |f| f.body,
    },
    Answer {
        status: 415,
        code: "unsupported_media_type",
        applies: |f| f.json_body,
    },
    Answer {
        status: 422,
        code: "invalid_field",
        applies: |f| f.body || f.query,
    },
    Answer {
        status: 422,
        code: "agent_refused_argument",
        applies: |f| f.agent,
    },
    Answer {
        status: 422,
        code: "host_policy",
        applies: |f| f.agent && f.writes,
    },
    Answer {
        status: 422,
        code: "config_invalid",
        applies: |f| f.agent && f.writes,
    },
    Answer {
        status: 500,
        code: "internal",
        applies: |_| true,
    },
    Answer {
        status: 501,
        code: "agent_unsupported",
        applies: |f| f.agent,
    },
    Answer {
        status: 502,
        code: "fail2ban_unavailable",
        applies: |f| f.agent,
    },
    Answer {
        status: 502,
        code: "fail2ban_error",
        applies: |f| f.agent,
    },
    Answer {
        status: 502,
        code: "agent_error",
        applies: |f| f.agent,
    },
    Answer {
        status: 503,
        code: "agent_offline",
        applies: |f| f.agent,
    },
    Answer {
        status: 503,
        code: "agent_not_enrolled",
        applies: |f| f.agent,
    },
    Answer {
        status: 503,
        code: "store_unavailable",
        applies: |f| f.store,
    },
    Answer {
        status: 504,
        code: "agent_timeout",
        applies: |f| f.agent,
    },
];

/// A short title for a status the shared layers add, when the handler did not document it.
fn title(status: u16) -> &'static str {
    match status {
        400 => "Malformed: the body is not JSON, or the query string does not parse",
        401 => "No valid session or token",
        403 => {
            "The caller's role is too low, or a cookie-authenticated change came from another site"
        }
        404 => "Not found",
        409 => "Conflict",
        413 => "The request body is larger than this hub accepts",
        415 => "The body is not sent as `application/json`",
        422 => "A field breaks a rule",
        429 => "Too many requests; `Retry-After` says when to send again",
        500 => "The hub failed; the details are in its log",
        501 => "The agent is too old for this command",
        502 => "fail2ban or the agent failed",
        503 => "Unavailable just now: the agent, or the database (then with `Retry-After`)",
        504 => "The agent did not answer in time",
        _ => "Refused",
    }
}

/// The whole document: the routes' own declarations, their security requirements, and the error
/// answers of the shared layers.
pub fn finish(doc: &mut utoipa::openapi::OpenApi) {
    policy::document(doc);
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, op) in [
            ("get", item.get.as_mut()),
            ("post", item.post.as_mut()),
            ("put", item.put.as_mut()),
            ("delete", item.delete.as_mut()),
            ("patch", item.patch.as_mut()),
        ] {
            if let Some(op) = op {
                complete(path, method, op);
            }
        }
    }
}

/// Adds the shared error answers of one operation and makes every error answer a problem document
/// whose description lists its codes.
fn complete(path: &str, method: &str, op: &mut Operation) {
    let facts = Facts::of(path, method, op);
    if let Some(RefOr::T(body)) = &mut op.request_body
        && !matches!(body.required, Some(Required::True))
    {
        for content in body.content.values_mut() {
            if let RefOr::T(content) = content {
                content.schema = content.schema.take().map(not_null);
            }
        }
    }
    let mut statuses: BTreeSet<u16> = op
        .responses
        .responses
        .keys()
        .filter_map(|status| status.parse().ok())
        .collect();
    statuses.extend(
        SHARED
            .iter()
            .filter(|answer| (answer.applies)(&facts))
            .map(|answer| answer.status),
    );
    for status in statuses.into_iter().filter(|status| *status >= 400) {
        let codes: Vec<&str> = SHARED
            .iter()
            .filter(|answer| answer.status == status && (answer.applies)(&facts))
            .map(|answer| answer.code)
            .collect();
        let key = status.to_string();
        let own = match op.responses.responses.get(&key) {
            Some(RefOr::T(response)) if !response.description.is_empty() => {
                Some(response.description.clone())
            }
            _ => None,
        };
        let mut description = own.unwrap_or_else(|| title(status).to_owned());
        if !codes.is_empty() {
            let listed = codes
                .iter()
                .map(|code| format!("`{code}`"))
                .collect::<Vec<_>>()
                .join(", ");
            let sentence = description.trim_end_matches('.');
            description = format!("{sentence}. Codes from the shared layers: {listed}.");
        }
        let mut response = Response::new(description);
        response.content.insert(
            PROBLEM_JSON.to_owned(),
            RefOr::T(Content::new(Some(Ref::from_schema_name("Problem")))),
        );
        op.responses.responses.insert(key, RefOr::T(response));
    }
}

/// An optional body is absent or empty, never `null` (which does not fit its shape): its schema is
/// the body's own, without the `null` that `Option<Body>` adds.
fn not_null(schema: RefOr<Schema>) -> RefOr<Schema> {
    let RefOr::T(Schema::OneOf(one_of)) = &schema else {
        return schema;
    };
    let is_null = |item: &RefOr<Schema>| {
        matches!(item, RefOr::T(Schema::Object(object))
            if object.schema_type == SchemaType::Type(Type::Null))
    };
    let mut rest = one_of.items.iter().filter(|item| !is_null(item));
    match (rest.next(), rest.next()) {
        (Some(only), None) => only.clone(),
        _ => schema,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::*;

    /// Every operation of the served document, as JSON: (method path, operation).
    fn operations() -> BTreeMap<String, Value> {
        let doc = serde_json::to_value(super::super::openapi()).expect("the document is JSON");
        let mut found = BTreeMap::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    found.insert(format!("{} {path}", method.to_uppercase()), op.clone());
                }
            }
        }
        found
    }

    fn statuses(op: &Value) -> BTreeSet<String> {
        op["responses"]
            .as_object()
            .expect("responses")
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn every_error_answer_is_a_problem_document() {
        for (name, op) in operations() {
            let responses = op["responses"].as_object().expect("responses");
            assert!(
                responses
                    .keys()
                    .any(|status| status.starts_with('2') || status.starts_with('3')),
                "{name} documents no success"
            );
            assert!(
                responses.contains_key("500"),
                "{name} does not document 500"
            );
            for (status, response) in responses {
                if status.as_str() < "400" {
                    continue;
                }
                let content = response["content"].as_object().expect("content");
                assert_eq!(
                    content.keys().collect::<Vec<_>>(),
                    vec![PROBLEM_JSON],
                    "{name} {status}"
                );
                assert_eq!(
                    content[PROBLEM_JSON]["schema"]["$ref"], "#/components/schemas/Problem",
                    "{name} {status}"
                );
            }
        }
    }

    #[test]
    fn shared_answers_follow_what_an_operation_declares() {
        let ops = operations();
        let has = |name: &str, status: &str| {
            let op = ops.get(name).unwrap_or_else(|| panic!("{name} is missing"));
            statuses(op).contains(status)
        };
        for (name, op) in &ops {
            let role = op["x-required-role"].as_str().expect("x-required-role");
            if role != "public" {
                assert!(has(name, "401") && has(name, "403"), "{name}");
            }
            if op["requestBody"].is_object() {
                for status in ["400", "413", "422"] {
                    assert!(has(name, status), "{name} {status}");
                }
            }
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            if params.iter().any(|p| p["in"] == "query") {
                assert!(has(name, "400") && has(name, "422"), "{name}");
            }
            if params.iter().any(|p| p["name"] == SERVER_HEADER) {
                for status in ["404", "502", "503", "504"] {
                    assert!(has(name, status), "{name} {status}");
                }
            }
        }
        assert!(has("POST /api/servers", "415"));
        assert!(
            !has("POST /api/jails/{jail}/ban/{ip}", "415"),
            "optional body"
        );
        assert!(has("GET /api/summary", "503"));
        assert!(!has("GET /healthz", "503"));
        // An optional body is absent or a body, never `null`.
        let restart = &ops["POST /api/bandaemon/restart"]["requestBody"]["content"]["application/json"]
            ["schema"];
        assert!(restart["$ref"].is_string(), "{restart}");
    }

    #[test]
    fn the_listed_routes_exist() {
        let ops = operations();
        for path in AGENT_PATHS.iter().chain(&STORELESS_PATHS) {
            assert!(
                ops.keys().any(|name| name.ends_with(&format!(" {path}"))),
                "{path} is no route"
            );
        }
    }

    /// Every route goes through `OpenApiRouter::routes` (whose `routes!` needs a `#[utoipa::path]`
    /// on each handler), so a route cannot be served without being in the document.
    #[test]
    fn no_route_bypasses_the_document() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("src/api")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for name in [".route", ".nest", ".route_service", ".nest_service"] {
                    let bypass = format!("{name}(");
                    assert!(
                        !code.contains(&bypass),
                        "{}:{}: `{bypass}` serves a route outside the OpenAPI document; use \
                         `.routes(routes!(handler))` with a `#[utoipa::path]` on the handler",
                        file.display(),
                        n + 1
                    );
                }
            }
        }
    }
}
