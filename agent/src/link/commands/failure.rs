//! Why a command failed, as the hub sees it: an [`ErrorCode`], a message for operators, and for
//! some codes fail2ban's own messages or a file's current version. Every error of the layers
//! below maps here once.

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{CommandError, ErrorCode};

use crate::fail2ban::Fail2banError;
use crate::fail2ban::client::is_unknown_jail;
use crate::fail2ban_files::{ConfigError, EditError, FilterTestError, Version};

/// What a command returns: its outcome, or why it failed.
pub type Reply = Result<Outcome, Failure>;

/// A failed command.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure(pub CommandError);

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(CommandError {
            code: code.into(),
            message: message.into(),
            ..CommandError::default()
        })
    }

    /// The command's arguments failed the agent's own checks.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// fail2ban's own messages, line by line.
    pub fn with_details(mut self, details: Vec<String>) -> Self {
        self.0.details = details;
        self
    }

    /// Puts `context` in front of the message (e.g. what an earlier step already did).
    pub fn prefixed(mut self, context: &str) -> Self {
        self.0.message = format!("{context}{}", self.0.message);
        self
    }

    pub fn code(&self) -> ErrorCode {
        ErrorCode::try_from(self.0.code).unwrap_or(ErrorCode::Unspecified)
    }

    pub fn into_outcome(self) -> Outcome {
        Outcome::Error(self.0)
    }

    /// Not reachable (or the connection broke), reachable but unhappy, or no such jail.
    pub fn from_fail2ban(e: &Fail2banError) -> Self {
        let code = match e {
            Fail2banError::Unavailable { .. }
            | Fail2banError::Timeout { .. }
            | Fail2banError::Io { .. }
            | Fail2banError::Broken { .. } => ErrorCode::Fail2banUnavailable,
            Fail2banError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            e if is_unknown_jail(e) => ErrorCode::NotFound,
            Fail2banError::Protocol(_)
            | Fail2banError::UnexpectedReply { .. }
            | Fail2banError::ReplyTooLarge { .. }
            | Fail2banError::Command { .. } => ErrorCode::Fail2banError,
        };
        let message = if code == ErrorCode::NotFound {
            format!("fail2ban runs no such jail ({e})")
        } else {
            e.to_string()
        };
        Self::new(code, message)
    }
}

impl From<Fail2banError> for Failure {
    fn from(e: Fail2banError) -> Self {
        Self::from_fail2ban(&e)
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Self::internal(format!("cannot read fail2ban's configuration: {e}"))
    }
}

impl From<EditError> for Failure {
    fn from(e: EditError) -> Self {
        match e {
            EditError::Conflict { file, current } => {
                let mut failure = Self::new(
                    ErrorCode::Conflict,
                    EditError::Conflict { file, current }.to_string(),
                );
                failure.0.current_version = version_text(current);
                failure
            }
            EditError::BadContent { .. }
            | EditError::BadName { .. }
            | EditError::ContradictoryJail(_)
            | EditError::NothingToDo => Self::invalid(e.to_string()),
            EditError::UnknownJail(_) => Self::not_found(e.to_string()),
            EditError::Policy { .. } => Self::new(ErrorCode::PolicyRefused, e.to_string()),
            EditError::Unavailable(_) => Self::new(ErrorCode::Fail2banUnavailable, e.to_string()),
            EditError::Invalid { messages } => Self::new(
                ErrorCode::ValidationFailed,
                "fail2ban refused the new configuration, so nothing was changed",
            )
            .with_details(messages),
            EditError::RolledBack {
                stage,
                messages,
                rollback,
            } => {
                let mut message = format!(
                    "fail2ban could not {stage} with the new configuration, so the previous files \
                     were restored and fail2ban reloaded with them; nothing was changed"
                );
                if !rollback.missing_jails.is_empty() {
                    message.push_str(&format!(
                        " (but jails {} no longer run after the restore)",
                        rollback.missing_jails.join(", ")
                    ));
                }
                Self::new(ErrorCode::ValidationFailed, message).with_details(messages)
            }
            EditError::RollbackFailed {
                stage,
                messages,
                rollback_messages,
            } => Self::internal(format!(
                "fail2ban could not {stage} with the new configuration, and restoring the \
                 previous configuration failed too; fail2ban may be running without some jails \
                 and needs attention on the host"
            ))
            .with_details(messages.into_iter().chain(rollback_messages).collect()),
            EditError::NotARegularFile { .. }
            | EditError::Busy(_)
            | EditError::Io { .. }
            | EditError::Tool(_) => Self::internal(e.to_string()),
            EditError::Config(e) => e.into(),
        }
    }
}

impl From<FilterTestError> for Failure {
    fn from(e: FilterTestError) -> Self {
        match e {
            FilterTestError::TooManyLines { .. }
            | FilterTestError::TooLarge { .. }
            | FilterTestError::BadLine { .. }
            | FilterTestError::BadFilter(_)
            | FilterTestError::TimedOut { .. } => Self::invalid(e.to_string()),
            FilterTestError::UnknownFilter(_) => Self::not_found(e.to_string()),
            FilterTestError::Rejected { messages } => Self::new(
                ErrorCode::ValidationFailed,
                "fail2ban-regex refused the filter (nothing was changed)",
            )
            .with_details(messages),
            FilterTestError::UnexpectedOutput(_)
            | FilterTestError::Io { .. }
            | FilterTestError::Tool(_) => Self::internal(e.to_string()),
            FilterTestError::Config(e) => e.into(),
        }
    }
}

/// A version as the protocol writes it: "" for a file that does not exist, else the SHA-256.
pub fn version_text(version: Version) -> String {
    match version {
        Version::Absent => String::new(),
        version => version.to_string(),
    }
}

/// The version an edit started from: "" (or `absent`) for a file that did not exist.
pub fn parse_version(raw: &str, what: &str) -> Result<Version, Failure> {
    if raw.is_empty() {
        return Ok(Version::Absent);
    }
    Version::parse(raw).map_err(|e| {
        Failure::invalid(format!(
            "the expected version of {what} is refused: {e} (send \"\" for a new file)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fail2ban_files::{EditableFile, JailName};

    #[test]
    fn edit_errors_map_to_codes() {
        let file = EditableFile::JailOverride(JailName::parse("sshd").expect("name"));
        let current = Version::of(Some(b"x"));
        let conflict = Failure::from(EditError::Conflict {
            file: file.clone(),
            current,
        });
        assert_eq!(conflict.code(), ErrorCode::Conflict);
        assert_eq!(conflict.0.current_version, current.to_string());
        let gone = Failure::from(EditError::Conflict {
            file,
            current: Version::Absent,
        });
        assert_eq!(gone.0.current_version, "");

        let invalid = Failure::from(EditError::Invalid {
            messages: vec!["ERROR a".to_owned(), "ERROR b".to_owned()],
        });
        assert_eq!(invalid.code(), ErrorCode::ValidationFailed);
        assert!(invalid.0.message.contains("nothing was changed"));
        assert_eq!(invalid.0.details, ["ERROR a", "ERROR b"]);

        assert_eq!(
            Failure::from(EditError::UnknownJail(JailName::parse("x").expect("name"))).code(),
            ErrorCode::NotFound
        );
        assert_eq!(
            Failure::from(EditError::NothingToDo).code(),
            ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn fail2ban_errors_map_to_codes() {
        let unknown = Fail2banError::Command {
            message: "UnknownJailException: nosuch".to_owned(),
        };
        assert_eq!(Failure::from(unknown).code(), ErrorCode::NotFound);
        let other = Fail2banError::Command {
            message: "ValueError: x".to_owned(),
        };
        assert_eq!(Failure::from(other).code(), ErrorCode::Fail2banError);
        let down = Fail2banError::Unavailable {
            path: "/x".into(),
            source: std::io::Error::other("no"),
        };
        assert_eq!(Failure::from(down).code(), ErrorCode::Fail2banUnavailable);
    }

    #[test]
    fn versions_travel_as_text() {
        assert_eq!(version_text(Version::Absent), "");
        assert_eq!(parse_version("", "f"), Ok(Version::Absent));
        assert_eq!(parse_version("absent", "f"), Ok(Version::Absent));
        let v = Version::of(Some(b"abc"));
        assert_eq!(parse_version(&version_text(v), "f"), Ok(v));
        let bad = parse_version("zz", "jail.d/x.local").expect_err("bad");
        assert_eq!(bad.code(), ErrorCode::InvalidArgument);
    }
}
