//! The logical path of a file in a config set (a profile's files, a rollout's, a host's drift):
//! `jail.d/<jail>.local`, `filter.d/<filter>.local` or `jail.d/banhub-defaults.local`, never an
//! absolute path. Shared so the hub (at its HTTP edge) and the agent (before a file is touched)
//! refuse exactly the same paths.

use std::fmt;

use crate::rules::{FilterName, JailName, NameError, is_banhub_jail};

/// The stem of the defaults file banhub manages (`jail.d/banhub-defaults.local`).
pub const DEFAULTS_STEM: &str = "banhub-defaults";

/// The stem of the agent's own `jail.d` file (`jail.d/zz-banhub.local`), never in a config set.
pub const AGENT_ATTACH_STEM: &str = "zz-banhub";

/// A file a config set may hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConfigPath {
    /// `jail.d/<jail>.local`: a jail's override, or a jail of its own.
    Jail(JailName),
    /// `filter.d/<filter>.local`: a filter's override, or a filter of its own.
    Filter(FilterName),
    /// `jail.d/banhub-defaults.local`: the `[DEFAULT]` keys banhub manages.
    Defaults,
}

/// Why a path is not a [`ConfigPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigPathError {
    #[error(
        "must be `jail.d/<jail>.local`, `filter.d/<filter>.local` or \
         `jail.d/banhub-defaults.local` (a logical path inside fail2ban's configuration)"
    )]
    Shape,
    #[error("names a file banhub's agent alone writes (`banhub-agent install-action`)")]
    AgentFile,
    #[error("has a name that {0}")]
    Name(#[from] NameError),
}

impl ConfigPath {
    pub fn parse(raw: &str) -> Result<Self, ConfigPathError> {
        let (dir, file) = raw.split_once('/').ok_or(ConfigPathError::Shape)?;
        let stem = file
            .strip_suffix(".local")
            .filter(|s| !s.contains('/'))
            .ok_or(ConfigPathError::Shape)?;
        if is_banhub_jail(stem) || stem.eq_ignore_ascii_case(AGENT_ATTACH_STEM) {
            return Err(ConfigPathError::AgentFile);
        }
        match dir {
            "jail.d" if stem == DEFAULTS_STEM => Ok(Self::Defaults),
            "jail.d" => Ok(Self::Jail(JailName::parse(stem)?)),
            "filter.d" => Ok(Self::Filter(FilterName::parse(stem)?)),
            _ => Err(ConfigPathError::Shape),
        }
    }
}

impl fmt::Display for ConfigPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Jail(jail) => write!(f, "jail.d/{jail}.local"),
            Self::Filter(filter) => write!(f, "filter.d/{filter}.local"),
            Self::Defaults => write!(f, "jail.d/{DEFAULTS_STEM}.local"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_paths_parse_and_print_back() {
        for good in [
            "jail.d/sshd.local",
            "filter.d/nginx-http-auth.local",
            "jail.d/banhub-defaults.local",
        ] {
            let path = ConfigPath::parse(good).expect(good);
            assert_eq!(path.to_string(), good);
        }
        assert_eq!(
            ConfigPath::parse("jail.d/banhub-defaults.local"),
            Ok(ConfigPath::Defaults)
        );
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            "",
            "jail.local",
            "/etc/fail2ban/jail.d/sshd.local",
            "jail.d/../jail.local",
            "jail.d/..local",
            "jail.d/x/y.local",
            "jail.d/sshd.conf",
            "action.d/sshd.local",
            "filter.d/.hidden.local",
            "jail.d/DEFAULT.local",
            "jail.d/sshd .local",
        ] {
            assert!(ConfigPath::parse(bad).is_err(), "{bad:?} accepted");
        }
        for own in [
            "jail.d/zz-banhub.local",
            "jail.d/banhub-probe.local",
            "filter.d/banhub-shared.local",
        ] {
            assert_eq!(ConfigPath::parse(own), Err(ConfigPathError::AgentFile));
        }
    }
}
