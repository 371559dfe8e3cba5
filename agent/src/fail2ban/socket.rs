//! An async client for fail2ban's control socket: one Unix-stream connection, many commands.
//!
//! Protocol (fail2ban 1.0.x, `fail2ban/client/csocket.py` and `server/asyncserver.py`): the client
//! sends `pickle([cmd, arg, ...])` followed by `<F2B_END_COMMAND>`; the server answers
//! `pickle((code, value))` followed by the same terminator, where code 0 means success and
//! otherwise `value` is the exception raised. The client says goodbye with
//! `<F2B_CLOSE_COMMAND><F2B_END_COMMAND>`. If the server cannot unpickle a request it answers a
//! bare string `"ERROR: ..."` instead of a tuple.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::pickle::{self, PickleError, Value};

/// Terminates every request and reply.
pub const END_COMMAND: &[u8] = b"<F2B_END_COMMAND>";
/// Sent (followed by [`END_COMMAND`]) to end a session.
pub const CLOSE_COMMAND: &[u8] = b"<F2B_CLOSE_COMMAND>";
/// Default cap on one reply; `get <jail> banned` for 10,000 addresses is about 240 KB.
pub const MAX_REPLY_BYTES: usize = 128 << 20;

/// Errors talking to fail2ban.
#[derive(Debug, thiserror::Error)]
pub enum Fail2banError {
    #[error(
        "cannot connect to the fail2ban socket {}: {source}; fail2ban-server may not be \
         running, or this user may not open its socket",
        path.display()
    )]
    Unavailable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fail2ban did not finish `{operation}` within {after:?}")]
    Timeout { operation: String, after: Duration },
    #[error("I/O error on the fail2ban socket {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fail2ban sent a reply that cannot be decoded: {0}")]
    Protocol(#[from] PickleError),
    #[error("fail2ban's reply to `{command}` has an unexpected shape: {detail}")]
    UnexpectedReply { command: String, detail: String },
    #[error("fail2ban's reply exceeds the {limit}-byte limit")]
    ReplyTooLarge { limit: usize },
    #[error("invalid command argument: {reason}")]
    InvalidArgument { reason: String },
    #[error(
        "the connection to the fail2ban socket {} failed earlier and cannot be reused; reconnect",
        path.display()
    )]
    Broken { path: PathBuf },
    #[error("fail2ban rejected the command: {message}")]
    Command { message: String },
}

/// One connection to fail2ban's control socket.
///
/// Calls are sequential (`&mut self`). After a timeout, I/O or protocol error the connection's
/// position in the byte stream is unknown, so it refuses further calls with
/// [`Fail2banError::Broken`]; a [`Fail2banError::Command`] error leaves it usable.
#[derive(Debug)]
pub struct Fail2banSocket {
    stream: UnixStream,
    path: PathBuf,
    timeout: Duration,
    max_reply_bytes: usize,
    broken: bool,
}

impl Fail2banSocket {
    /// Connects to the socket at `path`; `timeout` bounds the connect and, afterwards, each call.
    pub async fn connect(path: &Path, timeout: Duration) -> Result<Self, Fail2banError> {
        let stream = tokio::time::timeout(timeout, UnixStream::connect(path))
            .await
            .map_err(|_| Fail2banError::Timeout {
                operation: format!("connect to {}", path.display()),
                after: timeout,
            })?
            .map_err(|source| Fail2banError::Unavailable {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            stream,
            path: path.to_owned(),
            timeout,
            max_reply_bytes: MAX_REPLY_BYTES,
            broken: false,
        })
    }

    /// The socket path this connection was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Changes the time allowed for each following call.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Changes the largest accepted reply (default [`MAX_REPLY_BYTES`]).
    pub fn set_max_reply_bytes(&mut self, limit: usize) {
        self.max_reply_bytes = limit;
    }

    /// Sends one command and returns its value, or the server's exception as
    /// [`Fail2banError::Command`].
    pub async fn call(&mut self, args: &[&str]) -> Result<Value, Fail2banError> {
        if self.broken {
            return Err(Fail2banError::Broken {
                path: self.path.clone(),
            });
        }
        check_arguments(args)?;
        let started = Instant::now();
        let mut request = pickle::encode_command(args);
        request.extend_from_slice(END_COMMAND);

        // Any failure below leaves an unknown amount of the exchange on the wire.
        self.broken = true;
        let reply = match tokio::time::timeout(self.timeout, self.exchange(&request)).await {
            Ok(reply) => reply?,
            Err(_) => {
                return Err(Fail2banError::Timeout {
                    operation: describe_command(args),
                    after: self.timeout,
                });
            }
        };
        self.broken = false;

        tracing::debug!(
            command = args.first().copied().unwrap_or_default(),
            args = args.len(),
            elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "fail2ban call"
        );
        interpret(args, reply)
    }

    /// Ends the session politely, as `fail2ban-client` does.
    pub async fn close(mut self) -> Result<(), Fail2banError> {
        let mut request = CLOSE_COMMAND.to_vec();
        request.extend_from_slice(END_COMMAND);
        let timeout = self.timeout;
        let path = self.path.clone();
        let io = |source| Fail2banError::Io {
            path: path.clone(),
            source,
        };
        let goodbye = async {
            self.stream.write_all(&request).await.map_err(io)?;
            self.stream.shutdown().await.map_err(io)
        };
        tokio::time::timeout(timeout, goodbye)
            .await
            .map_err(|_| Fail2banError::Timeout {
                operation: "close".to_owned(),
                after: timeout,
            })?
    }

    /// Writes one request and reads one reply up to its terminator.
    async fn exchange(&mut self, request: &[u8]) -> Result<Value, Fail2banError> {
        self.stream
            .write_all(request)
            .await
            .map_err(|source| self.io_error(source))?;
        let mut reply = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|source| self.io_error(source))?;
            if n == 0 {
                return Err(self.io_error(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "fail2ban closed the connection before replying",
                )));
            }
            reply.extend_from_slice(&chunk[..n]);
            if reply.len() > self.max_reply_bytes.saturating_add(END_COMMAND.len()) {
                return Err(Fail2banError::ReplyTooLarge {
                    limit: self.max_reply_bytes,
                });
            }
            if let Some(decoded) = complete_reply(&reply) {
                return decoded.map_err(Fail2banError::Protocol);
            }
        }
    }

    fn io_error(&self, source: std::io::Error) -> Fail2banError {
        Fail2banError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// Refuses what the wire format cannot carry: a marker inside an argument would split the
/// request on the server side, and protocol 2 lengths are 32-bit.
fn check_arguments(args: &[&str]) -> Result<(), Fail2banError> {
    for arg in args {
        if u32::try_from(arg.len()).is_err() {
            return Err(Fail2banError::InvalidArgument {
                reason: format!("an argument of {} bytes is too long", arg.len()),
            });
        }
        let bytes = arg.as_bytes();
        if contains(bytes, END_COMMAND) || contains(bytes, CLOSE_COMMAND) {
            return Err(Fail2banError::InvalidArgument {
                reason: format!("{arg:?} contains a fail2ban protocol marker"),
            });
        }
    }
    Ok(())
}

/// Decodes a reply once it is complete; `None` while more bytes are needed. The terminator's
/// bytes can also occur inside a string of a longer reply: then the pickle before it is
/// truncated and reading goes on.
fn complete_reply(buf: &[u8]) -> Option<Result<Value, PickleError>> {
    let body = buf.strip_suffix(END_COMMAND)?;
    match pickle::decode(body) {
        Err(PickleError::Truncated { .. }) => None,
        decoded => Some(decoded),
    }
}

/// Splits `(code, value)`: code 0 is success, anything else carries the server's exception.
fn interpret(args: &[&str], reply: Value) -> Result<Value, Fail2banError> {
    match reply {
        Value::Tuple(items) => match <[Value; 2]>::try_from(items) {
            Ok([Value::Int(0), value]) => Ok(value),
            Ok([Value::Int(_), error]) => Err(Fail2banError::Command {
                message: describe_error(&error),
            }),
            Ok([code, _]) => Err(Fail2banError::UnexpectedReply {
                command: describe_command(args),
                detail: format!("status code is a {}, not an int", code.type_name()),
            }),
            Err(items) => Err(Fail2banError::UnexpectedReply {
                command: describe_command(args),
                detail: format!("a tuple of {} items instead of (code, value)", items.len()),
            }),
        },
        Value::Str(message) if message.starts_with("ERROR") => {
            Err(Fail2banError::Command { message })
        }
        other => Err(Fail2banError::UnexpectedReply {
            command: describe_command(args),
            detail: format!("a {} instead of (code, value)", other.type_name()),
        }),
    }
}

/// `UnknownJailException: nosuch`, `NameError: name 'abc' is not defined`, ...
pub(crate) fn describe_error(error: &Value) -> String {
    match error {
        Value::Exception { class, args } => match args.as_slice() {
            [] => class.clone(),
            [Value::Str(s)] => format!("{class}: {s}"),
            args => {
                let args: Vec<String> = args.iter().map(ToString::to_string).collect();
                format!("{class}: {}", args.join(", "))
            }
        },
        Value::Str(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The command for messages, shortened: `set testauth banip 192.0.2.1 ... (10003 arguments)`.
fn describe_command(args: &[&str]) -> String {
    const SHOWN: usize = 4;
    let mut out = args
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    if args.len() > SHOWN {
        let _ = write!(out, " ... ({} arguments)", args.len());
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;
    use tokio::task::JoinHandle;

    const PONG: &[u8] = include_bytes!("fixtures/ping.pickle");

    /// A stand-in server on a socket in a temporary directory, running `serve` on the first
    /// connection.
    fn fake_server<F, Fut, T>(serve: F) -> (tempfile::TempDir, PathBuf, JoinHandle<T>)
    where
        F: FnOnce(UnixStream) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send,
        T: Send + 'static,
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f2b.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            serve(stream).await
        });
        (dir, path, task)
    }

    /// Reads one request (up to and including the terminator), or everything until EOF.
    async fn read_request(stream: &mut UnixStream) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.ends_with(END_COMMAND) {
            let n = stream.read(&mut chunk).await.expect("read");
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf
    }

    fn with_end(body: &[u8]) -> Vec<u8> {
        [body, END_COMMAND].concat()
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn sends_pickled_command_and_decodes_reply() {
        let (_dir, path, server) = fake_server(|mut stream| async move {
            let request = read_request(&mut stream).await;
            stream.write_all(&with_end(PONG)).await.expect("write");
            let goodbye = read_request(&mut stream).await;
            (request, goodbye)
        });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        assert_eq!(
            socket.call(&["ping"]).await.expect("call"),
            Value::Str("pong".to_owned())
        );
        socket.close().await.expect("close");
        let (request, goodbye) = server.await.expect("server");
        assert_eq!(request, with_end(&pickle::encode_command(&["ping"])));
        assert_eq!(goodbye, [CLOSE_COMMAND, END_COMMAND].concat());
    }

    #[test]
    fn terminator_inside_a_string_is_not_the_end() {
        // (0, 'a<F2B_END_COMMAND>b') pickled by hand: PROTO 4, BININT1 0, SHORT_BINUNICODE, TUPLE2.
        let text = b"a<F2B_END_COMMAND>b";
        let mut body = vec![
            0x80,
            4,
            b'K',
            0,
            0x8c,
            u8::try_from(text.len()).expect("short"),
        ];
        body.extend_from_slice(text);
        body.extend_from_slice(&[0x86, b'.']);
        let reply = with_end(&body);
        let inner_end = 6 + 1 + END_COMMAND.len();
        assert!(
            complete_reply(&reply[..inner_end]).is_none(),
            "stopped at the inner terminator"
        );
        assert!(complete_reply(&reply[..reply.len() - 1]).is_none());
        let value = complete_reply(&reply).expect("complete").expect("decodes");
        let expected = Value::Tuple(vec![
            Value::Int(0),
            Value::Str("a<F2B_END_COMMAND>b".to_owned()),
        ]);
        assert_eq!(value, expected);
        assert!(matches!(
            complete_reply(&with_end(b"\x80\x05b.")),
            Some(Err(PickleError::ForbiddenOpcode { .. }))
        ));
    }

    #[tokio::test]
    async fn missing_socket_is_unavailable() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nothing.sock");
        let err = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect_err("no server");
        assert!(matches!(&err, Fail2banError::Unavailable { path: p, .. } if *p == path));
        let message = err.to_string();
        assert!(
            message.contains("nothing.sock") && message.contains("may not be running"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn timeout_breaks_the_connection() {
        let (_dir, path, server) = fake_server(|mut stream| async move {
            // Read the request and never answer; keep the stream open until the client is done.
            let _ = read_request(&mut stream).await;
            let _ = read_request(&mut stream).await;
        });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        socket.set_timeout(Duration::from_millis(100));
        let err = socket.call(&["ping"]).await.expect_err("no reply");
        assert!(
            matches!(&err, Fail2banError::Timeout { operation, .. } if operation == "ping"),
            "{err}"
        );
        let err = socket.call(&["ping"]).await.expect_err("broken");
        assert!(matches!(err, Fail2banError::Broken { .. }), "{err}");
        drop(socket);
        server.await.expect("server");
    }

    #[tokio::test]
    async fn oversized_reply_is_refused() {
        let (_dir, path, server) = fake_server(|mut stream| async move {
            let _ = read_request(&mut stream).await;
            // The client may hang up while this is still being written.
            let _ = stream.write_all(&vec![b'N'; 1 << 20]).await;
        });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        socket.set_max_reply_bytes(64 * 1024);
        let err = socket.call(&["ping"]).await.expect_err("too large");
        assert!(
            matches!(err, Fail2banError::ReplyTooLarge { limit: 65536 }),
            "{err}"
        );
        drop(socket);
        server.await.expect("server");
    }

    #[tokio::test]
    async fn hangup_and_garbage_are_errors() {
        let (_dir, path, server) = fake_server(|mut stream| async move {
            let _ = read_request(&mut stream).await;
        });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        let err = socket.call(&["ping"]).await.expect_err("hung up");
        assert!(
            matches!(&err, Fail2banError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof),
            "{err}"
        );
        server.await.expect("server");

        let (_dir, path, server) = fake_server(|mut stream| async move {
            let _ = read_request(&mut stream).await;
            stream
                .write_all(&with_end(b"\x80\x05cposix\nsystem\n."))
                .await
                .expect("write");
        });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        let err = socket.call(&["ping"]).await.expect_err("hostile");
        assert!(
            matches!(
                err,
                Fail2banError::Protocol(PickleError::ForbiddenGlobal { .. })
            ),
            "{err}"
        );
        server.await.expect("server");
    }

    #[tokio::test]
    async fn protocol_markers_in_arguments_are_refused() {
        let (_dir, path, server) =
            fake_server(|mut stream| async move { read_request(&mut stream).await });
        let mut socket = Fail2banSocket::connect(&path, TIMEOUT)
            .await
            .expect("connect");
        for arg in ["x<F2B_END_COMMAND>", "<F2B_CLOSE_COMMAND>"] {
            let err = socket
                .call(&["set", "j", "banip", arg])
                .await
                .expect_err("marker");
            assert!(
                matches!(err, Fail2banError::InvalidArgument { .. }),
                "{err}"
            );
        }
        drop(socket);
        // Nothing reached the server.
        assert_eq!(server.await.expect("server"), Vec::<u8>::new());
    }

    fn exception(class: &str, args: &[&str]) -> Value {
        Value::Exception {
            class: class.to_owned(),
            args: args.iter().map(|a| Value::Str((*a).to_owned())).collect(),
        }
    }

    #[test]
    fn describe_error_reads_like_python() {
        let cases = [
            (
                exception("UnknownJailException", &["nosuch"]),
                "UnknownJailException: nosuch",
            ),
            (exception("Exception", &[]), "Exception"),
            (exception("KeyError", &["a", "b"]), "KeyError: 'a', 'b'"),
            (Value::Str("ERROR: boom".to_owned()), "ERROR: boom"),
            (Value::None, "None"),
        ];
        for (error, expected) in cases {
            assert_eq!(describe_error(&error), expected);
        }
    }

    #[test]
    fn interpret_splits_code_and_value() {
        let ok = Value::Tuple(vec![Value::Int(0), Value::Str("pong".to_owned())]);
        assert_eq!(
            interpret(&["ping"], ok).expect("ok"),
            Value::Str("pong".to_owned())
        );

        let failed = Value::Tuple(vec![
            Value::Int(1),
            exception("UnknownJailException", &["x"]),
        ]);
        match interpret(&["status", "x"], failed) {
            Err(Fail2banError::Command { message }) => {
                assert_eq!(message, "UnknownJailException: x");
            }
            other => panic!("unexpected {other:?}"),
        }

        let load_error = Value::Str("ERROR: pickle data was truncated".to_owned());
        assert!(matches!(
            interpret(&["ping"], load_error),
            Err(Fail2banError::Command { message }) if message.contains("truncated")
        ));

        for bad in [
            Value::Tuple(vec![Value::Int(0)]),
            Value::Tuple(vec![Value::Str("0".to_owned()), Value::None]),
            Value::List(vec![Value::Int(0), Value::None]),
            Value::Str("pong".to_owned()),
        ] {
            assert!(
                matches!(
                    interpret(&["ping"], bad.clone()),
                    Err(Fail2banError::UnexpectedReply { .. })
                ),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn long_commands_are_shortened_in_messages() {
        let ips: Vec<String> = (0..100).map(|i| format!("192.0.2.{i}")).collect();
        let mut args = vec!["set", "testauth", "banip"];
        args.extend(ips.iter().map(String::as_str));
        assert_eq!(
            describe_command(&args),
            "set testauth banip 192.0.2.0 ... (103 arguments)"
        );
        assert_eq!(describe_command(&["ping"]), "ping");
    }
}
