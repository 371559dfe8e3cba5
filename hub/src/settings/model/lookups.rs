//! The `lookups` section: where the hub looks an address up on an operator's demand (RDAP through
//! IANA's bootstrap files, AbuseIPDB with an API key), how long answers are kept, how many lookups
//! a minute leave the hub and how long one may take; and its checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, MAX_SECRET_BYTES, Patch, refuse};

/// IANA's RDAP bootstrap directory (`ipv4.json`, `ipv6.json`, RFC 9224).
pub const DEFAULT_RDAP_BOOTSTRAP: &str = "https://data.iana.org/rdap/";
/// AbuseIPDB's API v2.
pub const DEFAULT_ABUSEIPDB: &str = "https://api.abuseipdb.com/api/v2/";

fn default_rdap_bootstrap() -> String {
    DEFAULT_RDAP_BOOTSTRAP.to_owned()
}

fn default_abuseipdb() -> String {
    DEFAULT_ABUSEIPDB.to_owned()
}

fn default_cache_ttl() -> u32 {
    86_400
}

fn default_per_minute() -> u32 {
    30
}

fn default_timeout() -> u32 {
    5
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LookupsDocument {
    /// Whether the hub looks public addresses up in RDAP (whois) when asked.
    #[serde(default = "super::yes")]
    pub rdap_enabled: bool,
    /// The directory holding the RDAP bootstrap files `ipv4.json` and `ipv6.json`.
    #[serde(default = "default_rdap_bootstrap")]
    pub rdap_bootstrap_url: String,
    /// The base of AbuseIPDB's API; `check` is asked below it.
    #[serde(default = "default_abuseipdb")]
    pub abuseipdb_url: String,
    /// AbuseIPDB's API key (write-only); without one, AbuseIPDB is never asked.
    #[serde(default, deserialize_with = "super::patch", skip_serializing)]
    #[schema(value_type = Option<String>, write_only)]
    pub abuseipdb_key: Patch,
    /// Whether an AbuseIPDB key is stored (read-only).
    #[serde(default)]
    #[schema(read_only)]
    pub abuseipdb_key_set: bool,
    /// How long an answer is kept and shown again without asking, 60 to 604800 seconds.
    #[serde(default = "default_cache_ttl")]
    pub cache_ttl_secs: u32,
    /// Lookups that may leave the hub per minute and service, 1 to 600; beyond, 429.
    #[serde(default = "default_per_minute")]
    pub per_minute: u32,
    /// Bound on one lookup (connecting, answering, reading), 1 to 60 seconds.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u32,
}

impl Default for LookupsDocument {
    fn default() -> Self {
        Self {
            rdap_enabled: true,
            rdap_bootstrap_url: default_rdap_bootstrap(),
            abuseipdb_url: default_abuseipdb(),
            abuseipdb_key: None,
            abuseipdb_key_set: false,
            cache_ttl_secs: default_cache_ttl(),
            per_minute: default_per_minute(),
            timeout_secs: default_timeout(),
        }
    }
}

/// The checked `lookups` section (the key aside: it is opened when needed).
#[derive(Debug, Clone, PartialEq)]
pub struct Lookups {
    pub rdap_enabled: bool,
    /// An http(s) URL ending with `/`.
    pub rdap_bootstrap_url: String,
    /// An http(s) URL ending with `/`.
    pub abuseipdb_url: String,
    pub cache_ttl: Duration,
    pub per_minute: u32,
    pub timeout: Duration,
}

impl Default for Lookups {
    fn default() -> Self {
        Self {
            rdap_enabled: true,
            rdap_bootstrap_url: default_rdap_bootstrap(),
            abuseipdb_url: default_abuseipdb(),
            cache_ttl: Duration::from_secs(u64::from(default_cache_ttl())),
            per_minute: default_per_minute(),
            timeout: Duration::from_secs(u64::from(default_timeout())),
        }
    }
}

/// A base URL: http or https, a host, no credentials, no query; a `/` is added at its end.
fn base_url(raw: &str, field: &str) -> Result<String, FieldError> {
    let mut url = super::check_webhook_url(raw).map_err(|reason| FieldError {
        field: field.to_owned(),
        reason,
    })?;
    if url.query().is_some() || url.fragment().is_some() {
        return refuse(field, "must not carry a query or a fragment");
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url.to_string())
}

pub(super) fn validate_lookups(doc: &LookupsDocument) -> Result<Lookups, FieldError> {
    let rdap_bootstrap_url = base_url(&doc.rdap_bootstrap_url, "lookups.rdapBootstrapUrl")?;
    let abuseipdb_url = base_url(&doc.abuseipdb_url, "lookups.abuseipdbUrl")?;
    if let Some(Some(key)) = &doc.abuseipdb_key
        && (key.is_empty()
            || key.len() > MAX_SECRET_BYTES
            || !key.chars().all(|c| c.is_ascii_graphic()))
    {
        return refuse(
            "lookups.abuseipdbKey",
            format!(
                "must be 1 to {MAX_SECRET_BYTES} printable ASCII characters, or null to remove it"
            ),
        );
    }
    if !(60..=604_800).contains(&doc.cache_ttl_secs) {
        return refuse(
            "lookups.cacheTtlSecs",
            "must be between 60 and 604800 seconds",
        );
    }
    if !(1..=600).contains(&doc.per_minute) {
        return refuse("lookups.perMinute", "must be between 1 and 600");
    }
    if !(1..=60).contains(&doc.timeout_secs) {
        return refuse("lookups.timeoutSecs", "must be between 1 and 60 seconds");
    }
    Ok(Lookups {
        rdap_enabled: doc.rdap_enabled,
        rdap_bootstrap_url,
        abuseipdb_url,
        cache_ttl: Duration::from_secs(u64::from(doc.cache_ttl_secs)),
        per_minute: doc.per_minute,
        timeout: Duration::from_secs(u64::from(doc.timeout_secs)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_what_an_empty_section_checks_to() {
        let checked = validate_lookups(&LookupsDocument::default()).expect("valid");
        assert_eq!(checked, Lookups::default());
    }

    #[test]
    fn base_urls_get_their_slash_and_refuse_what_is_not_one() {
        let doc = LookupsDocument {
            rdap_bootstrap_url: "http://127.0.0.1:9/bootstrap".to_owned(),
            ..LookupsDocument::default()
        };
        let checked = validate_lookups(&doc).expect("valid");
        assert_eq!(checked.rdap_bootstrap_url, "http://127.0.0.1:9/bootstrap/");
        for (url, field) in [
            ("ftp://x/", "lookups.rdapBootstrapUrl"),
            ("http://u:p@x/", "lookups.rdapBootstrapUrl"),
            ("http://x/?a=b", "lookups.rdapBootstrapUrl"),
        ] {
            let doc = LookupsDocument {
                rdap_bootstrap_url: url.to_owned(),
                ..LookupsDocument::default()
            };
            let err = validate_lookups(&doc).expect_err(url);
            assert_eq!(err.field, field, "{url}");
        }
    }

    type Edit = fn(&mut LookupsDocument);

    #[test]
    fn bounds_and_the_key_name_their_field() {
        let cases: [(Edit, &str); 4] = [
            (|d| d.cache_ttl_secs = 59, "lookups.cacheTtlSecs"),
            (|d| d.per_minute = 0, "lookups.perMinute"),
            (|d| d.timeout_secs = 61, "lookups.timeoutSecs"),
            (
                |d| d.abuseipdb_key = Some(Some("has space".to_owned())),
                "lookups.abuseipdbKey",
            ),
        ];
        for (edit, field) in cases {
            let mut doc = LookupsDocument::default();
            edit(&mut doc);
            assert_eq!(validate_lookups(&doc).expect_err(field).field, field);
        }
    }
}
