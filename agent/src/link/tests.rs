//! The link against an in-process `AgentGateway` over mutual TLS: hello, welcome, heartbeats,
//! commands, redelivery, drains, silence and refusals, with no real hub.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use banhub_proto::v1::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    AgentFrame, Command, CommandResult, Drain, ErrorCode, Heartbeat, Hello, HubFrame, Ping,
    Welcome, agent_frame, hub_frame,
};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity as TlsIdentity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use super::*;
use crate::config::{Fail2banSettings, LinkSettings};
use crate::enroll::Identity;
use crate::tls::test_pki::TestCa;

/// Generous bound on anything the tests wait for; they poll, never sleep.
const WAIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// One session as the fake hub sees it.
struct HubSide {
    hello: Hello,
    inbound: Streaming<AgentFrame>,
    out: mpsc::Sender<Result<HubFrame, Status>>,
    heartbeats_seen: Vec<u64>,
}

impl HubSide {
    async fn send(&self, body: hub_frame::Body) {
        self.out
            .send(Ok(HubFrame { body: Some(body) }))
            .await
            .expect("agent stream open");
    }

    async fn welcome(&self, heartbeat_interval_ms: u32) {
        self.send(hub_frame::Body::Welcome(Welcome {
            protocol_version: banhub_proto::PROTOCOL_VERSION,
            hub_version: "test".to_owned(),
            server_id: "srv-1".to_owned(),
            server_name: "web-1".to_owned(),
            heartbeat_interval_ms,
            committed_seq: 0,
        }))
        .await;
    }

    /// Sends hub heartbeats every `period` until the session closes.
    fn keep_alive(&self, period: Duration) {
        let out = self.out.clone();
        tokio::spawn(async move {
            let mut seq = 0;
            loop {
                tokio::time::sleep(period).await;
                seq += 1;
                let beat = hub_frame::Body::Heartbeat(Heartbeat {
                    seq,
                    sent_at_unix_ms: now_unix_ms(),
                });
                if out.send(Ok(HubFrame { body: Some(beat) })).await.is_err() {
                    return;
                }
            }
        });
    }

    async fn command(&self, id: &str, deadline_unix_ms: i64) {
        self.send(hub_frame::Body::Command(Command {
            id: id.to_owned(),
            deadline_unix_ms,
            requested_by: "alice@example.com".to_owned(),
            kind: Some(Kind::Ping(Ping {})),
        }))
        .await;
    }

    /// The next command result, noting the heartbeats that came before it.
    async fn result(&mut self) -> CommandResult {
        loop {
            let frame = within("a frame from the agent", self.inbound.message())
                .await
                .expect("stream healthy")
                .expect("stream open");
            match frame.body {
                Some(agent_frame::Body::Result(result)) => return result,
                Some(agent_frame::Body::Heartbeat(beat)) => self.heartbeats_seen.push(beat.seq),
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// Reads frames until `count` heartbeats were seen in this session.
    async fn heartbeats(&mut self, count: usize) {
        while self.heartbeats_seen.len() < count {
            let frame = within("a heartbeat", self.inbound.message())
                .await
                .expect("stream healthy")
                .expect("stream open");
            if let Some(agent_frame::Body::Heartbeat(beat)) = frame.body {
                self.heartbeats_seen.push(beat.seq);
            }
        }
    }
}

/// What the fake hub does with a new session.
#[derive(Clone)]
enum Behaviour {
    Accept,
    Refuse(Status),
}

struct FakeGateway {
    sessions: mpsc::UnboundedSender<HubSide>,
    behaviour: Arc<Mutex<Behaviour>>,
}

#[tonic::async_trait]
impl AgentGateway for FakeGateway {
    type SessionStream = ReceiverStream<Result<HubFrame, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<AgentFrame>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        if let Behaviour::Refuse(status) = self.behaviour.lock().await.clone() {
            return Err(status);
        }
        assert!(
            request.peer_certs().is_some_and(|certs| !certs.is_empty()),
            "the agent presents its client certificate"
        );
        let mut inbound = request.into_inner();
        // Like the hub: read the hello before answering the call.
        let hello = match inbound.message().await? {
            Some(AgentFrame {
                body: Some(agent_frame::Body::Hello(hello)),
            }) => hello,
            other => return Err(Status::invalid_argument(format!("not a hello: {other:?}"))),
        };
        let (out, rx) = mpsc::channel(64);
        let _ = self.sessions.send(HubSide {
            hello,
            inbound,
            out,
            heartbeats_seen: Vec::new(),
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

struct Harness {
    _state: tempfile::TempDir,
    settings: Settings,
    sessions: mpsc::UnboundedReceiver<HubSide>,
    behaviour: Arc<Mutex<Behaviour>>,
}

impl Harness {
    /// A fake hub whose certificate comes from `hub_ca`, trusting client certificates of
    /// `client_ca`, and an agent state directory enrolled with `hub_ca`.
    async fn start(fail2ban_socket: PathBuf, hub_ca: &TestCa, client_ca: &TestCa) -> Self {
        crate::tls::install_crypto_provider();
        let hub = hub_ca.hub();
        let tls = ServerTlsConfig::new()
            .identity(TlsIdentity::from_pem(
                format!("{}{}", hub.cert_pem, hub_ca.pem()),
                hub.key_pem,
            ))
            .client_ca_root(Certificate::from_pem(client_ca.pem()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (sessions_tx, sessions) = mpsc::unbounded_channel();
        let behaviour = Arc::new(Mutex::new(Behaviour::Accept));
        let service = AgentGatewayServer::new(FakeGateway {
            sessions: sessions_tx,
            behaviour: Arc::clone(&behaviour),
        });
        tokio::spawn(async move {
            Server::builder()
                .tls_config(tls)
                .expect("tls")
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .expect("serve");
        });
        let state = tempfile::tempdir().expect("temp dir");
        enroll_state(state.path(), hub_ca, address);
        let settings = Settings {
            state_dir: state.path().to_owned(),
            fail2ban: Fail2banSettings {
                socket: fail2ban_socket,
                timeout_ms: 5_000,
                ..Fail2banSettings::default()
            },
            link: LinkSettings {
                backoff_initial_ms: 10,
                backoff_max_ms: 50,
                connect_timeout_ms: 5_000,
                ..LinkSettings::default()
            },
            ..Settings::default()
        };
        Self {
            _state: state,
            settings,
            sessions,
            behaviour,
        }
    }

    fn run(&self) -> (CancellationToken, JoinHandle<Result<LinkExit, LinkError>>) {
        let shutdown = CancellationToken::new();
        let settings = self.settings.clone();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { run(&settings, None, token).await });
        (shutdown, task)
    }

    async fn session(&mut self) -> HubSide {
        within("a session from the agent", self.sessions.recv())
            .await
            .expect("gateway running")
    }
}

/// Writes the state `banhub-agent enroll` would have left, for a hub at `address`.
fn enroll_state(dir: &Path, ca: &TestCa, address: SocketAddr) {
    let agent_id = uuid::Uuid::new_v4().to_string();
    let issued = ca.agent(&agent_id);
    let identity = Identity {
        agent_id,
        server_id: "srv-1".to_owned(),
        server_name: "web-1".to_owned(),
        hub_address: address.to_string(),
        ca_fingerprint: ca.fingerprint(),
        enrolled_at: None,
    };
    Credentials::new(identity, issued.cert_pem, issued.key_pem, ca.pem())
        .store(dir)
        .expect("stored");
}

fn error_code(result: &CommandResult) -> Option<ErrorCode> {
    match &result.outcome {
        Some(Outcome::Error(e)) => ErrorCode::try_from(e.code).ok(),
        _ => None,
    }
}

fn missing_socket() -> PathBuf {
    PathBuf::from("/nonexistent/banhub-test/fail2ban.sock")
}

#[tokio::test]
async fn hello_commands_heartbeats_and_removal() {
    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(missing_socket(), &ca, &ca).await;
    let (_shutdown, task) = harness.run();

    let mut hub = harness.session().await;
    assert_eq!(hub.hello.protocol_version, banhub_proto::PROTOCOL_VERSION);
    assert_eq!(hub.hello.agent_version, crate::AGENT_VERSION);
    assert_eq!(hub.hello.capabilities, super::commands::CAPABILITIES);
    assert!(hub.hello.capabilities.iter().any(|c| c == "ping"));
    assert!(!hub.hello.hostname.is_empty());
    assert_eq!(hub.hello.fail2ban_version, "", "fail2ban is not running");
    hub.welcome(200).await;
    hub.keep_alive(Duration::from_millis(100));

    // fail2ban is down: the ping says so.
    hub.command("c1", now_unix_ms() + 10_000).await;
    let first = hub.result().await;
    assert_eq!(first.id, "c1");
    assert_eq!(error_code(&first), Some(ErrorCode::Fail2banUnavailable));

    // A redelivered command is answered from the cache.
    hub.command("c1", now_unix_ms() + 10_000).await;
    assert_eq!(hub.result().await, first);

    // An expired command is refused without running.
    hub.command("c2", now_unix_ms() - 1_000).await;
    let expired = hub.result().await;
    assert_eq!(expired.id, "c2");
    assert_eq!(error_code(&expired), Some(ErrorCode::Expired));

    // Heartbeats keep coming, numbered upwards.
    hub.heartbeats(3).await;
    assert!(hub.heartbeats_seen.windows(2).all(|w| w[0] < w[1]));

    hub.send(hub_frame::Body::Drain(Drain {
        reason: "the server was deleted".to_owned(),
        reconnect: false,
    }))
    .await;
    let exit = within("the link to stop", task)
        .await
        .expect("task")
        .expect("link");
    assert_eq!(
        exit,
        LinkExit::Removed {
            reason: "the server was deleted".to_owned()
        }
    );
}

#[tokio::test]
async fn ping_reaches_fail2ban_and_shutdown_is_clean() {
    let (_f2b, socket) = commands::fake_fail2ban::spawn(Duration::ZERO);
    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(socket, &ca, &ca).await;
    let (shutdown, task) = harness.run();

    let mut hub = harness.session().await;
    assert!(
        hub.hello.fail2ban_version.starts_with('1'),
        "{:?}",
        hub.hello
    );
    hub.welcome(500).await;
    hub.command("p1", now_unix_ms() + 10_000).await;
    let result = hub.result().await;
    match result.outcome {
        Some(Outcome::Pong(pong)) => {
            assert_eq!(pong.fail2ban_version, hub.hello.fail2ban_version);
            assert_eq!(pong.agent_version, crate::AGENT_VERSION);
        }
        other => panic!("expected a pong, got {other:?}"),
    }

    shutdown.cancel();
    let exit = within("the link to stop", task)
        .await
        .expect("task")
        .expect("link");
    assert_eq!(exit, LinkExit::Shutdown);
    // The agent closed its side of the stream.
    let end = within("the stream to end", hub.inbound.message()).await;
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
}

#[tokio::test]
async fn slow_fail2ban_does_not_delay_heartbeats() {
    // Each fail2ban answer takes longer than the hub's patience of three heartbeat intervals.
    let (_f2b, socket) = commands::fake_fail2ban::spawn(Duration::from_millis(800));
    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(socket, &ca, &ca).await;
    let (shutdown, task) = harness.run();

    let mut hub = harness.session().await;
    hub.welcome(150).await;
    hub.keep_alive(Duration::from_millis(50));
    hub.command("slow", now_unix_ms() + 30_000).await;
    let result = hub.result().await;
    assert!(
        matches!(result.outcome, Some(Outcome::Pong(_))),
        "{result:?}"
    );
    assert!(
        hub.heartbeats_seen.len() >= 4,
        "heartbeats kept flowing while fail2ban was slow: {:?}",
        hub.heartbeats_seen
    );
    shutdown.cancel();
    within("the link to stop", task)
        .await
        .expect("task")
        .expect("link");
}

#[tokio::test]
async fn reconnects_after_drain_and_silence_and_remembers_commands() {
    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(missing_socket(), &ca, &ca).await;
    let (shutdown, task) = harness.run();

    let mut first = harness.session().await;
    first.welcome(200).await;
    first.keep_alive(Duration::from_millis(100));
    first.command("once", now_unix_ms() + 10_000).await;
    let result = first.result().await;
    first
        .send(hub_frame::Body::Drain(Drain {
            reason: "hub shutting down".to_owned(),
            reconnect: true,
        }))
        .await;

    // The agent comes back and answers the redelivered command from its memory.
    let mut second = harness.session().await;
    second.welcome(100).await;
    second.command("once", now_unix_ms() + 10_000).await;
    assert_eq!(second.result().await, result);

    // This hub then falls silent (no heartbeats): after three intervals the agent reconnects.
    let third = harness.session().await;
    assert_eq!(third.hello.protocol_version, banhub_proto::PROTOCOL_VERSION);

    shutdown.cancel();
    let exit = within("the link to stop", task)
        .await
        .expect("task")
        .expect("link");
    assert_eq!(exit, LinkExit::Shutdown);
}

#[tokio::test]
async fn refusals_are_reported_and_retried() {
    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(missing_socket(), &ca, &ca).await;
    let credentials = Credentials::load(&harness.settings.state_dir).expect("state");
    let mut link = Link::new(&harness.settings, &credentials).expect("link");
    let shutdown = CancellationToken::new();

    *harness.behaviour.lock().await = Behaviour::Refuse(Status::permission_denied(
        "this agent's certificate was revoked or replaced; enroll the agent again",
    ));
    let report = within("a refused session", session::run(&mut link, &shutdown)).await;
    match report.end {
        SessionEnd::Refused(status) => assert_eq!(status.code(), tonic::Code::PermissionDenied),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(report.welcomed_at.is_none());

    // Retried: once the hub accepts again, the same link connects.
    *harness.behaviour.lock().await = Behaviour::Accept;
    let (_shutdown, task) = harness.run();
    let hub = harness.session().await;
    hub.welcome(1_000).await;
    task.abort();
}

#[tokio::test]
async fn a_certificate_the_hub_does_not_trust_is_reported_as_refused() {
    let hub_ca = TestCa::new("hub CA");
    let other = TestCa::new("CA the hub trusts for clients");
    let harness = Harness::start(missing_socket(), &hub_ca, &other).await;
    let credentials = Credentials::load(&harness.settings.state_dir).expect("state");
    let mut link = Link::new(&harness.settings, &credentials).expect("link");
    let report = within(
        "a failed session",
        session::run(&mut link, &CancellationToken::new()),
    )
    .await;
    assert!(
        matches!(
            report.end,
            SessionEnd::Unreachable(ConnectProblem::CertificateRefused(_))
        ),
        "{:?}",
        report.end
    );
}

#[tokio::test]
async fn a_hub_with_another_ca_is_not_trusted() {
    let hub_ca = TestCa::new("hub CA");
    let impostor = TestCa::new("impostor CA");
    let mut harness = Harness::start(missing_socket(), &impostor, &hub_ca).await;
    // The agent was enrolled with the genuine CA; the hub at this address shows another.
    let state = harness.settings.state_dir.clone();
    let address = Credentials::load(&state)
        .expect("state")
        .identity
        .hub_address
        .parse()
        .expect("address");
    enroll_state(&state, &hub_ca, address);
    let credentials = Credentials::load(&state).expect("state");
    let mut link = Link::new(&harness.settings, &credentials).expect("link");
    let report = within(
        "a failed session",
        session::run(&mut link, &CancellationToken::new()),
    )
    .await;
    assert!(
        matches!(
            report.end,
            SessionEnd::Unreachable(ConnectProblem::HubUntrusted(_))
        ),
        "{:?}",
        report.end
    );
    assert!(harness.sessions.try_recv().is_err());
}

/// Log lines written as JSON into memory, for the span fields a test expects.
#[derive(Clone, Default)]
struct CapturedLog(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().expect("log").clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON log line"))
            .collect()
    }
}

#[tokio::test]
async fn a_session_logs_in_its_span_with_the_hub_the_server_and_why_it_ended() {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime has one thread, so every task of the link logs here.
    let _default = tracing::subscriber::set_default(subscriber);

    let ca = TestCa::new("hub CA");
    let mut harness = Harness::start(missing_socket(), &ca, &ca).await;
    let (shutdown, task) = harness.run();
    let first = harness.session().await;
    first.welcome(10_000).await;
    first
        .send(hub_frame::Body::Drain(Drain {
            reason: "hub shutting down".to_owned(),
            reconnect: true,
        }))
        .await;
    let _second = harness.session().await;
    shutdown.cancel();
    within("the link to stop", task)
        .await
        .expect("task")
        .expect("link");

    let lines = log.lines();
    let ended = lines
        .iter()
        .find(|line| {
            line["fields"]["message"] == "the hub closed the session and asked to reconnect"
        })
        .unwrap_or_else(|| panic!("no drain line in {lines:#?}"));
    let span = &ended["span"];
    assert_eq!(span["name"], "session", "{ended}");
    assert_eq!(span["end"], "drained", "{ended}");
    assert_eq!(span["server"], "web-1", "{ended}");
    assert_eq!(span["server_id"], "srv-1", "{ended}");
    assert!(
        span["hub"]
            .as_str()
            .is_some_and(|hub| hub.starts_with("127.0.0.1:")),
        "{ended}"
    );
    let connected = lines
        .iter()
        .find(|line| line["fields"]["message"] == "connected to the hub")
        .unwrap_or_else(|| panic!("no connected line in {lines:#?}"));
    assert_eq!(connected["span"]["name"], "session", "{connected}");
    assert_eq!(connected["span"]["server"], "web-1", "{connected}");
}
