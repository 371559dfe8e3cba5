//! The commands the hub can send, one function per kind, each returning the result to send back.
//!
//! A new command kind is a new `Kind` arm in [`execute`], a function here, and a name in
//! [`CAPABILITIES`]. Everything a command receives is checked again here (names and addresses with
//! `banhub_proto::rules`) before it reaches fail2ban, whatever the hub already checked.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{Command, CommandError, CommandResult, ErrorCode, Pong};

use crate::fail2ban::{Fail2banError, Fail2banSocket};

/// Feature names announced in the hello, one per command kind this agent runs.
pub const CAPABILITIES: &[&str] = &["ping"];

/// What commands need from the agent's configuration.
#[derive(Debug, Clone)]
pub struct Context {
    pub fail2ban_socket: PathBuf,
    /// Bounds the connection to fail2ban and each call on it.
    pub fail2ban_timeout: Duration,
}

/// The name of a command kind, for logs.
pub fn kind_name(command: &Command) -> &'static str {
    match command.kind {
        Some(Kind::Ping(_)) => "ping",
        None => "unknown",
    }
}

/// Refuses a command whose deadline has passed: the hub has given up on it, and running it late could
/// surprise an operator who already saw it fail.
pub fn refuse_if_expired(command: &Command, now_unix_ms: i64) -> Option<CommandResult> {
    if now_unix_ms <= command.deadline_unix_ms {
        return None;
    }
    let message = if command.deadline_unix_ms == 0 {
        "the command carries no deadline; refusing to run it".to_owned()
    } else {
        format!(
            "the command's deadline passed {} ms before it arrived; not run",
            now_unix_ms.saturating_sub(command.deadline_unix_ms)
        )
    };
    Some(error_result(&command.id, ErrorCode::Expired, message))
}

/// Runs one command to completion.
pub async fn execute(context: &Context, command: Command) -> CommandResult {
    let outcome = match &command.kind {
        Some(Kind::Ping(_)) => ping(context).await,
        // prost leaves the oneof empty for a kind newer than this build.
        None => error(
            ErrorCode::Unsupported,
            format!(
                "this agent (version {}) does not know this command; upgrade the agent",
                crate::AGENT_VERSION
            ),
        ),
    };
    CommandResult {
        id: command.id,
        outcome: Some(outcome),
    }
}

/// `ping`: a round trip to fail2ban, with its version and the time it took.
pub async fn ping(context: &Context) -> Outcome {
    let mut socket =
        match Fail2banSocket::connect(&context.fail2ban_socket, context.fail2ban_timeout).await {
            Ok(socket) => socket,
            Err(e) => return fail2ban_error(&e),
        };
    let started = Instant::now();
    if let Err(e) = socket.ping().await {
        return fail2ban_error(&e);
    }
    let latency = started.elapsed();
    let version = match socket.version().await {
        Ok(version) => version,
        Err(e) => return fail2ban_error(&e),
    };
    close_quietly(socket).await;
    Outcome::Pong(Pong {
        fail2ban_version: version,
        fail2ban_latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
        agent_version: crate::AGENT_VERSION.to_owned(),
    })
}

/// fail2ban's version, or `None` when it cannot be asked (for the hello; never an error there).
pub async fn fail2ban_version(context: &Context) -> Option<String> {
    let result = async {
        let mut socket =
            Fail2banSocket::connect(&context.fail2ban_socket, context.fail2ban_timeout).await?;
        let version = socket.version().await?;
        close_quietly(socket).await;
        Ok::<_, Fail2banError>(version)
    }
    .await;
    match result {
        Ok(version) => Some(version),
        Err(e) => {
            tracing::warn!(error = %e, "fail2ban is not reachable; the hub will show no fail2ban version");
            None
        }
    }
}

async fn close_quietly(socket: Fail2banSocket) {
    // The answer is in hand; a failed goodbye changes nothing for the caller.
    if let Err(e) = socket.close().await {
        tracing::debug!(error = %e, "closing the fail2ban socket failed");
    }
}

/// Maps a fail2ban failure to the code the hub shows: not reachable, or reachable but unhappy.
pub fn fail2ban_error(e: &Fail2banError) -> Outcome {
    let code = match e {
        Fail2banError::Unavailable { .. }
        | Fail2banError::Timeout { .. }
        | Fail2banError::Io { .. }
        | Fail2banError::Broken { .. } => ErrorCode::Fail2banUnavailable,
        Fail2banError::InvalidArgument { .. } => ErrorCode::InvalidArgument,
        Fail2banError::Protocol(_)
        | Fail2banError::UnexpectedReply { .. }
        | Fail2banError::ReplyTooLarge { .. }
        | Fail2banError::Command { .. } => ErrorCode::Fail2banError,
    };
    error(code, e.to_string())
}

/// An error outcome.
pub fn error(code: ErrorCode, message: impl Into<String>) -> Outcome {
    Outcome::Error(CommandError {
        code: code.into(),
        message: message.into(),
    })
}

/// A result carrying an error.
pub fn error_result(id: &str, code: ErrorCode, message: impl Into<String>) -> CommandResult {
    CommandResult {
        id: id.to_owned(),
        outcome: Some(error(code, message)),
    }
}

#[cfg(test)]
pub(crate) mod fake_fail2ban {
    //! A stand-in fail2ban server on a Unix socket that answers `ping` and `version` with the
    //! recorded replies of fail2ban 1.0.2.

    use std::path::PathBuf;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    use crate::fail2ban::socket::{CLOSE_COMMAND, END_COMMAND};

    const PONG: &[u8] = include_bytes!("../fail2ban/fixtures/ping.pickle");
    const VERSION: &[u8] = include_bytes!("../fail2ban/fixtures/version.pickle");

    /// Serves until the returned directory is dropped and the runtime ends; `delay` holds every
    /// answer back, like a busy fail2ban.
    pub fn spawn(delay: Duration) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("fail2ban.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let n = match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = find(&buf, END_COMMAND) {
                            let request: Vec<u8> = buf.drain(..end + END_COMMAND.len()).collect();
                            if request.starts_with(CLOSE_COMMAND) {
                                return;
                            }
                            tokio::time::sleep(delay).await;
                            let body = if find(&request, b"version").is_some() {
                                VERSION
                            } else {
                                PONG
                            };
                            let reply = [body, END_COMMAND].concat();
                            if stream.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (dir, path)
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use banhub_proto::v1::Ping;

    fn command(deadline_unix_ms: i64) -> Command {
        Command {
            id: "c1".to_owned(),
            deadline_unix_ms,
            requested_by: "alice".to_owned(),
            kind: Some(Kind::Ping(Ping {})),
        }
    }

    fn code(result: &CommandResult) -> Option<ErrorCode> {
        match &result.outcome {
            Some(Outcome::Error(e)) => ErrorCode::try_from(e.code).ok(),
            _ => None,
        }
    }

    fn context(socket: PathBuf) -> Context {
        Context {
            fail2ban_socket: socket,
            fail2ban_timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn deadline_in_the_past_is_refused() {
        let check = |deadline: i64, now: i64, refused: bool| {
            let result = refuse_if_expired(&command(deadline), now);
            assert_eq!(result.is_some(), refused, "deadline {deadline}, now {now}");
            if let Some(result) = result {
                assert_eq!(result.id, "c1");
                assert_eq!(code(&result), Some(ErrorCode::Expired));
            }
        };
        check(1_000, 999, false);
        check(1_000, 1_000, false);
        check(1_000, 1_001, true);
        check(0, 1_700_000_000_000, true);
    }

    #[tokio::test]
    async fn ping_without_fail2ban_is_unavailable() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ctx = context(dir.path().join("missing.sock"));
        let result = execute(&ctx, command(i64::MAX)).await;
        assert_eq!(result.id, "c1");
        assert_eq!(code(&result), Some(ErrorCode::Fail2banUnavailable));
        assert_eq!(fail2ban_version(&ctx).await, None);
    }

    #[tokio::test]
    async fn ping_reports_version_and_latency() {
        let (_dir, socket) = fake_fail2ban::spawn(Duration::from_millis(5));
        let ctx = context(socket);
        let result = execute(&ctx, command(i64::MAX)).await;
        match result.outcome {
            Some(Outcome::Pong(pong)) => {
                assert!(pong.fail2ban_version.starts_with('1'), "{pong:?}");
                assert!(pong.fail2ban_latency_us >= 5_000, "{pong:?}");
                assert_eq!(pong.agent_version, crate::AGENT_VERSION);
            }
            other => panic!("expected a pong, got {other:?}"),
        }
        assert!(fail2ban_version(&ctx).await.is_some());
    }

    #[tokio::test]
    async fn unknown_kind_is_unsupported() {
        let mut unknown = command(i64::MAX);
        unknown.kind = None;
        let ctx = context(PathBuf::from("/nonexistent"));
        assert_eq!(kind_name(&unknown), "unknown");
        let result = execute(&ctx, unknown).await;
        assert_eq!(code(&result), Some(ErrorCode::Unsupported));
    }
}
