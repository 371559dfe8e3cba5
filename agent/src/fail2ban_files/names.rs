//! Validated jail and filter names: the only way a name from the hub reaches a file path or a
//! fail2ban command line.

pub use banhub_proto::rules::{FilterName, JailName};

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
