//! The `geoip` section: the country database the alert rules and the insights look addresses up
//! in, the ASN database the address page shows networks' owners from, and their checks.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, GeoipCheck, refuse};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeoipDocument {
    /// Absolute path of a MaxMind-format country (or city) database, e.g.
    /// `/var/lib/GeoIP/GeoLite2-Country.mmdb`; `null` for none.
    #[serde(default)]
    pub database_path: Option<String>,
    /// Absolute path of a MaxMind-format ASN database, e.g.
    /// `/var/lib/GeoIP/GeoLite2-ASN.mmdb`; `null` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn_database_path: Option<String>,
}

/// Which kind of MaxMind database a path must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoipKind {
    /// Country or city (GeoLite2-Country, GeoLite2-City).
    Country,
    /// Autonomous systems (GeoLite2-ASN).
    Asn,
}

/// The checked paths: the country database and the ASN database.
pub(super) fn validate_geoip(
    doc: &GeoipDocument,
    check_files: Option<GeoipCheck>,
) -> Result<(Option<PathBuf>, Option<PathBuf>), FieldError> {
    let country = validate_path(
        doc.database_path.as_deref(),
        "geoip.databasePath",
        GeoipKind::Country,
        check_files,
    )?;
    let asn = validate_path(
        doc.asn_database_path.as_deref(),
        "geoip.asnDatabasePath",
        GeoipKind::Asn,
        check_files,
    )?;
    Ok((country, asn))
}

/// The database's path: absolute; with `check_files`, a file that `check_files` reads as a GeoIP
/// database now, so a wrong file is refused here rather than found out when a rule by country
/// never matches.
fn validate_path(
    raw: Option<&str>,
    field: &str,
    kind: GeoipKind,
    check_files: Option<GeoipCheck>,
) -> Result<Option<PathBuf>, FieldError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let path = PathBuf::from(raw);
    if !path.is_absolute() || raw.chars().any(char::is_control) {
        return refuse(field, "must be an absolute path");
    }
    if let Some(read_geoip) = check_files {
        if !path.is_file() {
            return refuse(field, format!("{raw} is not a readable file on the hub"));
        }
        read_geoip(&path, kind).map_err(|reason| FieldError {
            field: field.to_owned(),
            reason,
        })?;
    }
    Ok(Some(path))
}
