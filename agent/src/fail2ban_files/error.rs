//! Errors reading fail2ban's configuration.

use std::path::PathBuf;

use super::ini::IniError;

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "fail2ban's configuration directory {} cannot be read: {source}; check \
         fail2ban.config_dir in the agent's configuration",
        path.display()
    )]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is larger than {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: IniError,
    },
    #[error("the [INCLUDES] of {} lead to more than {limit} files", path.display())]
    TooManyIncludes { path: PathBuf, limit: usize },
}
