//! AbuseIPDB's answer to `GET /api/v2/check` (their documented JSON: `{"data": {…}}`), read into
//! the report the address page shows. The parser is pure.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What AbuseIPDB knows of an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbuseReport {
    /// 0 to 100: how sure AbuseIPDB is that the address is abusive.
    pub abuse_confidence_score: u8,
    /// Reports in the last 90 days.
    pub total_reports: u64,
    #[serde(default)]
    pub num_distinct_users: Option<u64>,
    #[serde(default)]
    pub country_code: Option<String>,
    #[serde(default)]
    pub isp: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
    /// e.g. `Data Center/Web Hosting/Transit`.
    #[serde(default)]
    pub usage_type: Option<String>,
    /// When it was last reported (RFC 3339), if ever.
    #[serde(default)]
    pub last_reported_at: Option<String>,
    #[serde(default)]
    pub is_whitelisted: Option<bool>,
    #[serde(default)]
    pub is_tor: Option<bool>,
}

#[derive(Deserialize)]
struct Envelope {
    data: AbuseReport,
}

/// Reads a `check` answer.
pub fn parse_check(body: &[u8]) -> Result<AbuseReport, String> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let mut report = envelope.data;
    if report.abuse_confidence_score > 100 {
        return Err(format!(
            "abuseConfidenceScore {} is not between 0 and 100",
            report.abuse_confidence_score
        ));
    }
    for text in [
        &mut report.country_code,
        &mut report.isp,
        &mut report.domain,
        &mut report.usage_type,
        &mut report.last_reported_at,
    ]
    .into_iter()
    .flatten()
    {
        *text = text.chars().filter(|c| !c.is_control()).take(300).collect();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example answer of AbuseIPDB's API documentation (`check`, without `verbose`).
    const DOCUMENTED: &str = r#"{
      "data": {
        "ipAddress": "118.25.6.39", "isPublic": true, "ipVersion": 4, "isWhitelisted": false,
        "abuseConfidenceScore": 100, "countryCode": "CN", "usageType": "Data Center/Web Hosting/Transit",
        "isp": "Tencent Cloud Computing (Beijing) Co. Ltd", "domain": "tencent.com",
        "hostnames": [], "isTor": false, "totalReports": 1, "numDistinctUsers": 1,
        "lastReportedAt": "2018-12-20T20:55:14+00:00"
      }
    }"#;

    #[test]
    fn the_documented_answer_is_read() {
        let r = parse_check(DOCUMENTED.as_bytes()).expect("parses");
        assert_eq!(r.abuse_confidence_score, 100);
        assert_eq!(r.total_reports, 1);
        assert_eq!(r.country_code.as_deref(), Some("CN"));
        assert_eq!(r.domain.as_deref(), Some("tencent.com"));
        assert_eq!(
            r.usage_type.as_deref(),
            Some("Data Center/Web Hosting/Transit")
        );
        assert_eq!(
            r.last_reported_at.as_deref(),
            Some("2018-12-20T20:55:14+00:00")
        );
        assert_eq!(r.is_tor, Some(false));
    }

    #[test]
    fn errors_and_bad_scores_are_refused() {
        // AbuseIPDB's error shape.
        assert!(
            parse_check(br#"{"errors": [{"detail": "Authentication failed.", "status": 401}]}"#)
                .is_err()
        );
        assert!(
            parse_check(br#"{"data": {"abuseConfidenceScore": 101, "totalReports": 0}}"#).is_err()
        );
        let minimal = parse_check(
            br#"{"data": {"abuseConfidenceScore": 0, "totalReports": 0,
            "lastReportedAt": null}}"#,
        )
        .expect("parses");
        assert_eq!(minimal.last_reported_at, None);
    }
}
