//! File versions for optimistic concurrency: the SHA-256 of a file's bytes, or "absent". A
//! writer names the version it last read; a different current version is a conflict, so a
//! concurrent edit is refused instead of lost.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// What a config file held when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The file does not exist.
    Absent,
    /// The SHA-256 of the file's bytes.
    Sha256([u8; 32]),
}

/// The text form of [`Version::Absent`].
pub const ABSENT: &str = "absent";

/// A version string that is neither `absent` nor 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a version is \"absent\" or the 64 hex digits of a SHA-256")]
pub struct VersionParseError;

impl Version {
    /// The version of a file's bytes (`None`: the file does not exist).
    pub fn of(bytes: Option<&[u8]>) -> Self {
        match bytes {
            None => Self::Absent,
            Some(bytes) => Self::Sha256(Sha256::digest(bytes).into()),
        }
    }

    /// Parses the text form: `absent` or lower- or upper-case hex.
    pub fn parse(raw: &str) -> Result<Self, VersionParseError> {
        if raw == ABSENT {
            return Ok(Self::Absent);
        }
        let mut digest = [0u8; 32];
        hex::decode_to_slice(raw, &mut digest).map_err(|_| VersionParseError)?;
        Ok(Self::Sha256(digest))
    }

    /// The first 12 hex digits, for file names and logs.
    pub fn short(&self) -> String {
        let mut text = self.to_string();
        text.truncate(12);
        text
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent => f.write_str(ABSENT),
            Self::Sha256(digest) => f.write_str(&hex::encode(digest)),
        }
    }
}

impl FromStr for Version {
    type Err = VersionParseError;
    fn from_str(s: &str) -> Result<Self, VersionParseError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip() {
        let empty = Version::of(Some(b""));
        assert_eq!(
            empty.to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Version::parse(&empty.to_string()), Ok(empty));
        assert_eq!(Version::parse(&empty.to_string().to_uppercase()), Ok(empty));
        assert_eq!(Version::of(None).to_string(), "absent");
        assert_eq!(Version::parse("absent"), Ok(Version::Absent));
        assert_ne!(Version::of(Some(b"")), Version::Absent);
        assert_eq!(empty.short(), "e3b0c44298fc");
        for bad in ["", "Absent", "e3b0", "zz", &"0".repeat(63), &"0".repeat(65)] {
            assert_eq!(Version::parse(bad), Err(VersionParseError), "{bad:?}");
        }
    }
}
