//! Schemas of the values the API's rules check (names, addresses, times, lists of kinds), for the
//! OpenAPI document only: a parameter or field declares `value_type = schemas::JailName` and the
//! document then says what `banhub_proto::rules` and the handlers enforce.

use std::borrow::Cow;

use banhub_proto::rules::MAX_NAME_LEN;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{KnownFormat, RefOr, SchemaFormat};
use utoipa::{PartialSchema, ToSchema};

/// The name rule of servers, jails, filters and actions (`banhub_proto::rules::check_name`).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$";

fn text(pattern: &str, max_length: usize, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .min_length(Some(1))
        .max_length(Some(max_length))
        .description(Some(description))
}

/// Declares a schema type: its name in the document is the type's own.
macro_rules! schema {
    ($(#[$doc:meta])* $name:ident, $schema:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                $schema.into()
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

schema!(
    /// A server, filter or action name.
    Name,
    text(
        NAME_PATTERN,
        MAX_NAME_LEN,
        "A letter or digit, then letters, digits, `.`, `_`, `@` or `-`; at most 64 characters.",
    )
);

schema!(
    /// A jail name.
    JailName,
    text(
        NAME_PATTERN,
        MAX_NAME_LEN,
        "The name rule (a letter or digit, then letters, digits, `.`, `_`, `@` or `-`; at most 64 \
         characters), and none of fail2ban's section names `DEFAULT`, `INCLUDES`, `KNOWN` nor \
         `banhub-defaults`, in any case.",
    )
);

schema!(
    /// An address or a network (`banhub_proto::rules::IpOrCidr`).
    Address,
    text(
        "^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$",
        64,
        "An IPv4 or IPv6 address or a CIDR network (`192.0.2.7`, `2001:db8::1`, \
         `198.51.100.0/24`): no host bits below the prefix, not every address (`/0`), and not an \
         unspecified, loopback or multicast address.",
    )
);

schema!(
    /// A server by its id or its name.
    ServerRef,
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "A server's id (a UUID) or its name; one that names no server is a 404 \
             `unknown_server`.",
        ))
);

schema!(
    /// A time as the events' filters read it.
    Timestamp,
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^-?[0-9]{1,15}$")),
        )
        .description(Some(
            "An RFC 3339 time (`2026-01-31T12:00:00Z`) or Unix milliseconds.",
        ))
);

schema!(
    /// Event kinds, comma-separated.
    EventKinds,
    text(
        "^ *(ban|unban|gap) *(, *(ban|unban|gap) *)*$",
        256,
        "Kinds, comma-separated: `ban`, `unban`, `gap`.",
    )
);

schema!(
    /// Event sources, comma-separated.
    EventSources,
    text(
        "^ *(action|observed|direct) *(, *(action|observed|direct) *)*$",
        256,
        "Sources, comma-separated: `action` (the fail2ban action through the agent), `observed` \
         (the agent's reconciliation), `direct` (a callback straight to the hub).",
    )
);

schema!(
    /// Text to find in the events' log lines (`SearchText`).
    SearchText,
    text(
        "^[^\\x00-\\x1f\\x7f-\\x9f]+$",
        crate::domain::events::MAX_SEARCH_CHARS,
        "Text to find, without control characters.",
    )
);

schema!(
    /// How a list of events is answered.
    EventsFormat,
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["json", "csv"]))
        .description(Some("`json` (the default) or `csv`."))
);

schema!(
    /// A server's labels (`crate::domain::Labels`).
    Labels,
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(text(NAME_PATTERN, MAX_NAME_LEN, "A label key: the name rule.")))
        .additional_properties(Some(text(
            "^[^\\x00-\\x1f\\x7f-\\x9f]*$",
            128,
            "A label value: at most 128 characters, no control characters.",
        ).min_length(None)))
        .max_properties(Some(32))
        .description(Some(
            "`key=value` labels: at most 32, each key by the name rule, each value at most 128 \
             characters without control characters.",
        ))
);
