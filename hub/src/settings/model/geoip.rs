//! The `geoip` section: the country database the alert rules and the insights look addresses up
//! in, and its check.

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
}

/// The database's path: absolute; with `check_files`, a file that `check_files` reads as a GeoIP
/// database now, so a wrong file is refused here rather than found out when a rule by country
/// never matches.
pub(super) fn validate_geoip(
    doc: &GeoipDocument,
    check_files: Option<GeoipCheck>,
) -> Result<Option<PathBuf>, FieldError> {
    let Some(raw) = &doc.database_path else {
        return Ok(None);
    };
    let path = PathBuf::from(raw);
    if !path.is_absolute() || raw.chars().any(char::is_control) {
        return refuse("geoip.databasePath", "must be an absolute path");
    }
    if let Some(read_geoip) = check_files {
        if !path.is_file() {
            return refuse(
                "geoip.databasePath",
                format!("{raw} is not a readable file on the hub"),
            );
        }
        read_geoip(&path).map_err(|reason| FieldError {
            field: "geoip.databasePath".to_owned(),
            reason,
        })?;
    }
    Ok(Some(path))
}
