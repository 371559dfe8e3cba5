//! Jail patterns: a jail name, or a glob over jail names, as sharing policies, recidive rules and
//! feeds select jails. banhub's own jails (the shared-ban and probe jails) are never selected.

use serde::{Deserialize, Serialize};

use banhub_proto::rules::JailName;

/// A jail name, or a glob over jail names (`*` any run of characters, `?` one character).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JailPattern(String);

/// Why a jail pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error(
        "must be a jail name or a glob of one (letters, digits, `._@-`, `*` and `?`; at most 64 characters)"
    )]
    Invalid,
    #[error("names a jail of banhub itself ({0}), whose bans are never shared")]
    Reserved(&'static str),
}

impl JailPattern {
    pub fn parse(raw: &str) -> Result<Self, PatternError> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "._@-*?".contains(c);
        if raw.is_empty()
            || raw.len() > banhub_proto::rules::MAX_NAME_LEN
            || !raw.chars().all(ok_char)
            || raw.starts_with(['.', '-', '@'])
        {
            return Err(PatternError::Invalid);
        }
        if !raw.contains(['*', '?']) {
            JailName::parse(raw).map_err(|_| PatternError::Invalid)?;
        }
        for reserved in [
            banhub_proto::rules::SHARED_JAIL,
            banhub_proto::rules::PROBE_JAIL,
        ] {
            if raw == reserved {
                return Err(PatternError::Reserved(reserved));
            }
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `jail` matches this pattern.
    pub fn matches(&self, jail: &str) -> bool {
        glob(self.0.as_bytes(), jail.as_bytes())
    }
}

impl TryFrom<String> for JailPattern {
    type Error = PatternError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(&raw)
    }
}

impl From<JailPattern> for String {
    fn from(p: JailPattern) -> Self {
        p.0
    }
}

/// Glob matching with `*` and `?`, iterative with one backtrack point (linear in practice).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_jail_names() {
        let check = |p: &str, t: &str, expected: bool| {
            assert_eq!(
                JailPattern::parse(p).expect(p).matches(t),
                expected,
                "{p} {t}"
            );
        };
        check("sshd", "sshd", true);
        check("sshd", "sshd-ddos", false);
        check("ssh*", "sshd-ddos", true);
        check("ssh*", "ssh", true);
        check("*-ddos", "sshd-ddos", true);
        check("*-ddos", "sshd", false);
        check("*", "nginx", true);
        check("ng?nx", "nginx", true);
        check("ng?nx", "ngnx", false);
        check("a*b*c", "axxbyyc", true);
        check("a*b*c", "axxbyy", false);
    }

    #[test]
    fn patterns_follow_the_name_rule_and_refuse_banhubs_own_jails() {
        assert!(JailPattern::parse("DEFAULT").is_err());
        assert!(JailPattern::parse("ng/x*").is_err());
        assert!(JailPattern::parse("").is_err());
        assert!(JailPattern::parse("*").is_ok());
        assert!(matches!(
            JailPattern::parse("banhub-shared"),
            Err(PatternError::Reserved(_))
        ));
        assert!(matches!(
            JailPattern::parse("banhub-probe"),
            Err(PatternError::Reserved(_))
        ));
    }
}
