//! The enrollment token: what `POST /api/servers` hands the operator and `banhub-agent enroll` consumes.
//!
//! It is `bh1.` followed by base64url (no padding) of a small JSON object carrying the hub's gRPC address,
//! the SHA-256 fingerprint of the hub's CA certificate, the token id and its secret. The hub stores only a
//! hash of the secret. Changing any part of a token makes it useless: a different id or secret is refused
//! by the hub, a different fingerprint makes the agent refuse the hub, a different address reaches no hub.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

const PREFIX: &str = "bh1.";
/// Longest token accepted, so a pasted file or garbage is refused early.
const MAX_LEN: usize = 2048;

/// The decoded contents of an enrollment token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentToken {
    /// `host:port` of the hub's gRPC listener.
    #[serde(rename = "h")]
    pub hub_address: String,
    /// Lower-case hex SHA-256 of the hub CA certificate (DER).
    #[serde(rename = "f")]
    pub ca_fingerprint: String,
    #[serde(rename = "i")]
    pub token_id: String,
    #[serde(rename = "s")]
    pub secret: String,
}

impl std::fmt::Debug for EnrollmentToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrollmentToken")
            .field("hub_address", &self.hub_address)
            .field("ca_fingerprint", &self.ca_fingerprint)
            .field("token_id", &self.token_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a token string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("this is not a banhub enrollment token (it should start with \"bh1.\")")]
    Prefix,
    #[error("the enrollment token is too long; paste exactly the token the hub printed")]
    TooLong,
    #[error("the enrollment token is damaged (not valid base64url); copy it again from the hub")]
    Encoding,
    #[error("the enrollment token is damaged ({0}); copy it again from the hub")]
    Content(String),
}

impl EnrollmentToken {
    pub fn encode(&self) -> String {
        // Serializing a struct of strings cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
    }

    pub fn decode(raw: &str) -> Result<Self, TokenError> {
        let raw = raw.trim();
        if raw.len() > MAX_LEN {
            return Err(TokenError::TooLong);
        }
        let body = raw.strip_prefix(PREFIX).ok_or(TokenError::Prefix)?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError::Encoding)?;
        let token: Self =
            serde_json::from_slice(&json).map_err(|e| TokenError::Content(e.to_string()))?;
        token.check()?;
        Ok(token)
    }

    fn check(&self) -> Result<(), TokenError> {
        let bad = |what: &str| Err(TokenError::Content(what.to_owned()));
        if self.hub_address.is_empty()
            || self.hub_address.len() > 255
            || !self.hub_address.contains(':')
            || self
                .hub_address
                .chars()
                .any(|c| c.is_whitespace() || c == '/')
        {
            return bad("hub address must be host:port");
        }
        if self.ca_fingerprint.len() != 64
            || !self
                .ca_fingerprint
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        {
            return bad("CA fingerprint must be 64 lower-case hex digits");
        }
        if self.token_id.is_empty() || self.token_id.len() > 64 {
            return bad("token id missing");
        }
        if self.secret.len() < 16 || self.secret.len() > 128 {
            return bad("secret missing or of the wrong length");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EnrollmentToken {
        EnrollmentToken {
            hub_address: "hub.example.com:50051".to_owned(),
            ca_fingerprint: "ab".repeat(32),
            token_id: "0190c6e8-1b2f-7cc4-9a55-2d6f1a0b3c4d".to_owned(),
            secret: "s".repeat(43),
        }
    }

    #[test]
    fn round_trips() {
        let token = sample();
        assert_eq!(EnrollmentToken::decode(&token.encode()), Ok(token));
    }

    #[test]
    fn refuses_damaged_tokens() {
        let good = sample().encode();
        assert_eq!(
            EnrollmentToken::decode("xyz"),
            Err(TokenError::Prefix),
            "prefix"
        );
        assert_eq!(
            EnrollmentToken::decode(&format!("{good}!")),
            Err(TokenError::Encoding)
        );
        let mut truncated = good.clone();
        truncated.truncate(good.len() - 10);
        assert!(EnrollmentToken::decode(&truncated).is_err());
        let mut bad_fp = sample();
        bad_fp.ca_fingerprint = "zz".repeat(32);
        assert!(matches!(
            EnrollmentToken::decode(&bad_fp.encode()),
            Err(TokenError::Content(_))
        ));
    }

    #[test]
    fn debug_hides_the_secret() {
        assert!(!format!("{:?}", sample()).contains("sss"));
    }
}
