//! Validated jail and filter names: the only way a name from the hub reaches a file path or a
//! fail2ban command line.

use std::fmt;
use std::str::FromStr;

use banhub_proto::rules::{NameError, check_name};

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Checks `raw` against the shared name rule (`banhub_proto::rules::check_name`).
            pub fn parse(raw: &str) -> Result<Self, NameError> {
                check_name(raw)?;
                Ok(Self(raw.to_owned()))
            }

            /// The name as text; safe as one file name component and as one fail2ban argument.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = NameError;
            fn from_str(s: &str) -> Result<Self, NameError> {
                Self::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(raw: String) -> Result<Self, NameError> {
                check_name(&raw)?;
                Ok(Self(raw))
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

    };
}

name_type!(
    /// A jail name: a section of `jail.conf`, and the stem of its override file
    /// `jail.d/<name>.local`.
    JailName
);

name_type!(
    /// A filter name: the stem of `filter.d/<name>.conf` and `filter.d/<name>.local`.
    FilterName
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_use_the_shared_rule() {
        for good in ["sshd", "nginx-http-auth", "3proxy", "a.b_c@d"] {
            assert_eq!(
                JailName::parse(good).map(|n| n.to_string()),
                Ok(good.to_owned())
            );
            assert_eq!(
                FilterName::parse(good).map(|n| n.to_string()),
                Ok(good.to_owned())
            );
        }
        for bad in [
            "",
            ".",
            "..",
            "../etc/passwd",
            "/etc/passwd",
            "a/b",
            "sshd\n[x]",
            "-x",
            ".hidden",
        ] {
            assert!(JailName::parse(bad).is_err(), "{bad:?} accepted");
            assert!(FilterName::parse(bad).is_err(), "{bad:?} accepted");
            assert!(
                JailName::try_from(bad.to_owned()).is_err(),
                "{bad:?} accepted"
            );
        }
    }
}
