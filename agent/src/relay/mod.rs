//! The loopback callback relay: fail2ban's action POSTs `/api/ban` and `/api/unban` here, with the
//! same paths and body as the hub's own callbacks, and the relay answers `200` only once the event is
//! durable in the [`Spool`].
//!
//! It listens on a loopback address only: the callback secret is the one thing between any local
//! process and a forged ban event, and there is no reason to offer even that to the network.
//! Errors are RFC 9457 `application/problem+json` bodies in the hub's vocabulary
//! ([`banhub_proto::problem`]): `type` `urn:banhub:problem:<code>` and a stable snake_case `code`:
//!
//! | status | code                 | when                                                            |
//! |--------|----------------------|-----------------------------------------------------------------|
//! | 401    | `unauthorized`       | `X-Callback-Secret` missing or wrong (checked before the body is read) |
//! | 413    | `payload_too_large`  | body over [`MAX_BODY_BYTES`]                                    |
//! | 400    | `bad_request`        | body is not a JSON object                                       |
//! | 422    | `invalid_field`      | a field fails its rule; the member `field` names it             |
//! | 422    | `unknown_jail`       | fail2ban runs no jail of that name (see [`jails`]); `field` is `jail` |
//! | 503    | `spool_unavailable`  | the event could not be made durable; nothing was stored         |
//! | 404/405| `not_found`/`method_not_allowed` | any other path or method                            |
//!
//! A callback of the shared-ban jail (`banhub-shared`) that repeats what the hub was already told
//! (a ban of an address believed banned, or an unban of one believed not banned) is answered
//! `200 {"duplicate":true}` and not stored: the agent puts its shared bans back after fail2ban
//! restarted, and each shared ban is one ban and one unban event. Other jails' callbacks are
//! always stored (their restored bans do not call the action: `norestored`).

pub mod jails;
pub mod payload;
mod problem;
pub mod secret;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use banhub_proto::problem::code;
use banhub_proto::rules::SHARED_JAIL;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::spool::{BanEvent, Event, Position, Source, Spool, SpoolError};
pub use jails::{JailCatalog, Verdict};
pub use payload::{Callback, PayloadError};
use problem::Problem;
pub use secret::{RelaySecret, SECRET_FILE, SecretError};

/// The body of every answer: one buffer, written with the head.
type Body = Full<Bytes>;

/// Where the relay listens unless configured otherwise; the action file's `relay_url` default
/// (`deploy/fail2ban/action.d/banhub.conf`) names the same port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8721";
/// The largest callback body accepted. fail2ban's matches are capped well below this.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The header carrying the shared secret (the spec's `X-Callback-Secret`).
pub const SECRET_HEADER: &str = "x-callback-secret";

/// Errors starting or running the relay.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(
        "the relay must listen on a loopback address (127.0.0.0/8 or ::1), not {0}; fail2ban \
         calls it from the same host"
    )]
    NotLoopback(SocketAddr),
    #[error("{0:?} is not an address with a port, e.g. 127.0.0.1:8721")]
    BadAddress(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the relay stopped: {0}")]
    Serve(#[source] std::io::Error),
}

/// A socket address that is on the loopback interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopbackAddr(SocketAddr);

impl LoopbackAddr {
    pub fn new(addr: SocketAddr) -> Result<Self, RelayError> {
        if addr.ip().is_loopback() {
            Ok(Self(addr))
        } else {
            Err(RelayError::NotLoopback(addr))
        }
    }

    pub fn get(self) -> SocketAddr {
        self.0
    }

    /// Binds a listener on this address.
    pub async fn bind(self) -> Result<TcpListener, RelayError> {
        TcpListener::bind(self.0)
            .await
            .map_err(|source| RelayError::Bind {
                addr: self.0,
                source,
            })
    }
}

impl Default for LoopbackAddr {
    fn default() -> Self {
        Self(SocketAddr::from(([127, 0, 0, 1], 8721)))
    }
}

impl FromStr for LoopbackAddr {
    type Err = RelayError;
    fn from_str(s: &str) -> Result<Self, RelayError> {
        let addr = s
            .parse::<SocketAddr>()
            .map_err(|_| RelayError::BadAddress(s.to_owned()))?;
        Self::new(addr)
    }
}

/// Counters for delivery diagnostics ("when did the last callback arrive?").
#[derive(Debug, Default)]
pub struct RelayStats {
    accepted: AtomicU64,
    rejected: AtomicU64,
    last_accepted_at_ms: AtomicI64,
}

impl RelayStats {
    /// Callbacks stored in the spool.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Callbacks refused (any 4xx or 5xx).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// When the last callback was stored, Unix milliseconds.
    pub fn last_accepted_at_ms(&self) -> Option<i64> {
        Some(self.last_accepted_at_ms.load(Ordering::Relaxed)).filter(|&ms| ms > 0)
    }
}

/// The relay: what its handlers share.
#[derive(Debug, Clone)]
pub struct Relay {
    spool: Spool,
    secret: Arc<RelaySecret>,
    /// Used when a callback does not name its host.
    hostname: Arc<str>,
    stats: Arc<RelayStats>,
    /// Told about every stored event, for reconciliation.
    belief: Option<crate::reconcile::Belief>,
    /// fail2ban's jails; without it any well-formed jail name is accepted.
    jails: Option<JailCatalog>,
}

impl Relay {
    /// A relay that stores into `spool` and accepts `secret`. Callbacks without a `hostname` get
    /// this machine's name.
    pub fn new(spool: Spool, secret: RelaySecret) -> Self {
        let hostname = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        Self {
            spool,
            secret: Arc::new(secret),
            hostname: crate::spool::clean_hostname(&hostname).into(),
            stats: Arc::default(),
            belief: None,
            jails: None,
        }
    }

    /// Refuses callbacks naming a jail that `jails` says fail2ban does not run.
    pub fn with_jails(mut self, jails: JailCatalog) -> Self {
        self.jails = Some(jails);
        self
    }

    /// Records every stored event in `belief` too, so that reconciliation knows what the action
    /// reported.
    pub fn with_belief(mut self, belief: crate::reconcile::Belief) -> Self {
        self.belief = Some(belief);
        self
    }

    /// The counters, shared with the running relay.
    pub fn stats(&self) -> Arc<RelayStats> {
        Arc::clone(&self.stats)
    }

    /// Serves on `listener` until `shutdown` is cancelled, then finishes the requests in flight.
    /// A listener that is not on a loopback address is refused.
    ///
    /// HTTP/1.1 only, served by hyper directly: fail2ban's action is a one-shot `curl`, so
    /// HTTP/2 detection, upgrades and a router (what `axum::serve` adds per connection and per
    /// request) bought nothing here but CPU on the path of every ban.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), RelayError> {
        let addr = listener.local_addr().map_err(RelayError::Serve)?;
        LoopbackAddr::new(addr)?;
        tracing::info!(%addr, "callback relay listening");
        let relay = Arc::new(self);
        let connections = TaskTracker::new();
        loop {
            let stream = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait rather than spin.
                        tracing::warn!(error = %e, "the relay could not accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            // Each answer is written whole at once; there is nothing to gain from Nagle's delay.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY on a relay connection");
            }
            let relay = Arc::clone(&relay);
            let shutdown = shutdown.clone();
            connections.spawn(
                async move {
                    let service = hyper::service::service_fn(move |request| {
                        let relay = Arc::clone(&relay);
                        async move { Ok::<_, Infallible>(relay.handle(request).await) }
                    });
                    let connection = http1::Builder::new()
                        .max_buf_size(MAX_BODY_BYTES + 16 * 1024)
                        .serve_connection(TokioIo::new(stream), service);
                    let mut connection = std::pin::pin!(connection);
                    let result = tokio::select! {
                        result = connection.as_mut() => result,
                        () = shutdown.cancelled() => {
                            connection.as_mut().graceful_shutdown();
                            connection.await
                        }
                    };
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "a relay connection ended with an error");
                    }
                }
                .in_current_span(),
            );
        }
        connections.close();
        connections.wait().await;
        Ok(())
    }

    /// Answers one request: the two callback routes, and problems for anything else.
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let kind = match (request.uri().path(), request.method()) {
            ("/api/ban", &Method::POST) => Kind::Ban,
            ("/api/unban", &Method::POST) => Kind::Unban,
            ("/api/ban" | "/api/unban", _) => {
                let mut response = Problem::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    code::METHOD_NOT_ALLOWED,
                    "use POST",
                )
                .into_response();
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                return response;
            }
            _ => {
                return Problem::new(
                    StatusCode::NOT_FOUND,
                    code::NOT_FOUND,
                    "the relay serves only POST /api/ban and POST /api/unban",
                )
                .into_response();
            }
        };
        let result = self.receive(kind, request).await;
        self.respond(kind, result)
    }

    /// Checks, parses and stores one callback.
    async fn receive(
        &self,
        kind: Kind,
        request: Request<Incoming>,
    ) -> Result<Option<Position>, Problem> {
        self.check_secret(request.headers())?;
        // A declared length over the cap is refused before anything is read.
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
            return Err(Problem::too_large(MAX_BODY_BYTES));
        }
        let body = Limited::new(request.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    Problem::too_large(MAX_BODY_BYTES)
                } else {
                    Problem::bad_body(format!("the body could not be read: {e}"))
                }
            })?
            .to_bytes();
        let callback = payload::parse(&body).map_err(Problem::from)?;
        if let Some(jails) = &self.jails
            && jails.check(callback.jail.as_str()).await == Verdict::Unknown
        {
            return Err(Problem::unknown_jail(callback.jail.as_str()));
        }
        if callback.jail.as_str() == SHARED_JAIL
            && let Some(belief) = &self.belief
            && belief.holds(&callback.jail, &callback.ip) == matches!(kind, Kind::Ban)
        {
            return Ok(None);
        }
        // What the belief needs, taken before the event moves into the spool (cloning the whole
        // event, log lines and all, cost more than recording it).
        let recorded = self
            .belief
            .as_ref()
            .map(|belief| (belief, callback.jail.clone(), callback.ip));
        let event = self.event(kind, callback);
        let position = self.spool.append(event).await.map_err(|e| {
            tracing::error!(error = %e, "could not store a callback in the spool");
            match e {
                SpoolError::EventTooLarge { max, .. } => Problem::too_large(max),
                _ => Problem::spool_unavailable(),
            }
        })?;
        if let Some((belief, jail, ip)) = recorded {
            belief.record_ban(matches!(kind, Kind::Ban), &jail, &ip);
        }
        Ok(Some(position))
    }

    fn check_secret(&self, headers: &HeaderMap) -> Result<(), Problem> {
        match headers.get(SECRET_HEADER) {
            None => Err(Problem::unauthorized(
                "the X-Callback-Secret header is missing",
            )),
            Some(value) if self.secret.matches(value.as_bytes()) => Ok(()),
            Some(_) => Err(Problem::unauthorized(
                "the X-Callback-Secret header is wrong",
            )),
        }
    }

    fn event(&self, kind: Kind, callback: Callback) -> Event {
        let ban = BanEvent {
            ip: callback.ip,
            jail: callback.jail,
            hostname: callback
                .hostname
                .unwrap_or_else(|| self.hostname.to_string()),
            failures: callback.failures,
            logs: callback.logs,
            ban_time: callback.ban_time,
            ban_duration: callback.ban_duration,
            ban_count: callback.ban_count,
            received_at_ms: crate::spool::now_ms(),
            source: Source::Action,
        };
        match kind {
            Kind::Ban => Event::Ban(ban),
            Kind::Unban => Event::Unban(ban),
        }
    }

    fn respond(&self, kind: Kind, result: Result<Option<Position>, Problem>) -> Response<Body> {
        if result.is_ok() {
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            self.stats
                .last_accepted_at_ms
                .store(crate::spool::now_ms(), Ordering::Relaxed);
        }
        match result {
            Ok(None) => {
                tracing::debug!(
                    kind = kind.as_str(),
                    "a shared-ban callback repeats what was reported; not stored again"
                );
                let mut response =
                    Response::new(Full::new(Bytes::from_static(br#"{"duplicate":true}"#)));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Ok(Some(position)) => {
                tracing::debug!(
                    kind = kind.as_str(),
                    seq = position.seq,
                    "stored a callback"
                );
                // `{"epoch":…,"seq":…}`: two integers, which serialize infallibly.
                let json = serde_json::to_vec(&position).unwrap_or_default();
                let mut response = Response::new(Full::new(Bytes::from(json)));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(problem) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    kind = kind.as_str(),
                    status = problem.status.as_u16(),
                    code = problem.code,
                    detail = %problem.detail,
                    "refused a callback"
                );
                problem.into_response()
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Ban,
    Unban,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ban => "ban",
            Self::Unban => "unban",
        }
    }
}

#[cfg(test)]
mod tests;
