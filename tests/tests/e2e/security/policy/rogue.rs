//! The compromised hub: a rogue gateway holding the hub's CA takes the hub's place on its gRPC
//! address and sends configuration writes straight through the protocol to a real agent, past
//! every check of the hub's API. The agent refuses them by its own policy, the same way.

use std::pin::Pin;
use std::time::Duration;

use banhub::pki::Ca;
use banhub_proto::v1::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    AgentFrame, Command, CommandError, ErrorCode, FileEdit, Heartbeat, HubFrame, Welcome,
    WriteJailConfig, agent_frame, hub_frame,
};
use banhub_tests::TestFleet;
use banhub_tests::fleet::snapshot;
use futures::Stream;
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use super::{JAIL, ban_through_the_log, probes, root_installs_banhub_action};

/// Bound on the agent finding the rogue gateway and on each of its answers.
const DEADLINE: Duration = Duration::from_secs(60);

type Frames = Pin<Box<dyn Stream<Item = Result<HubFrame, Status>> + Send>>;

/// A session as the rogue gateway holds it.
struct Session {
    inbound: Streaming<AgentFrame>,
    out: mpsc::Sender<Result<HubFrame, Status>>,
}

struct RogueGateway {
    sessions: mpsc::UnboundedSender<Session>,
}

#[tonic::async_trait]
impl AgentGateway for RogueGateway {
    type SessionStream = Frames;

    async fn session(
        &self,
        request: Request<Streaming<AgentFrame>>,
    ) -> Result<Response<Frames>, Status> {
        let mut inbound = request.into_inner();
        match inbound.message().await? {
            Some(AgentFrame {
                body: Some(agent_frame::Body::Hello(_)),
            }) => {}
            other => return Err(Status::invalid_argument(format!("not a hello: {other:?}"))),
        }
        let (out, rx) = mpsc::channel(64);
        let _ = self.sessions.send(Session { inbound, out });
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|frame| (frame, rx))
        });
        Ok(Response::new(Box::pin(frames)))
    }
}

impl Session {
    async fn send(&self, body: hub_frame::Body) {
        self.out
            .send(Ok(HubFrame { body: Some(body) }))
            .await
            .expect("the agent's stream is open");
    }

    /// Sends a `WriteJailConfig` and returns the agent's answer to it.
    async fn write(&mut self, id: &str, edit: WriteJailConfig) -> Option<Outcome> {
        let deadline = chrono::Utc::now().timestamp_millis() + 60_000;
        self.send(hub_frame::Body::Command(Command {
            id: id.to_owned(),
            deadline_unix_ms: deadline,
            requested_by: "rogue@example.invalid".to_owned(),
            kind: Some(Kind::WriteJailConfig(edit)),
        }))
        .await;
        loop {
            let frame = tokio::time::timeout(DEADLINE, self.inbound.message())
                .await
                .expect("an answer in time")
                .expect("a healthy stream")
                .expect("an open stream");
            if let Some(agent_frame::Body::Result(result)) = frame.body
                && result.id == id
            {
                return result.outcome;
            }
        }
    }
}

/// Starts the rogue gateway on `address` with a hub certificate from `ca`.
async fn rogue_gateway(ca: &Ca, address: std::net::SocketAddr) -> mpsc::UnboundedReceiver<Session> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (cert, key) = ca.issue_hub_cert(&[]).expect("a hub certificate");
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(format!("{cert}{}", ca.cert_pem()), key))
        .client_ca_root(Certificate::from_pem(ca.cert_pem()));
    // The hub's port is free once it stopped; the kernel may take a moment to say so.
    let listener = banhub_tests::wait_for_async(DEADLINE, "the hub's gRPC port", || async {
        tokio::net::TcpListener::bind(address).await.ok()
    })
    .await
    .expect("bound");
    let incoming = futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    let (sessions, rx) = mpsc::unbounded_channel();
    let service = AgentGatewayServer::new(RogueGateway { sessions });
    tokio::spawn(async move {
        Server::builder()
            .tls_config(tls)
            .expect("tls")
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
            .expect("serve");
    });
    rx
}

#[tokio::test]
async fn a_rogue_gateway_with_the_hubs_ca_is_refused_the_same_way() {
    let mut fleet = TestFleet::start(&["rogue"]).await.expect("fleet");
    let address = fleet.hub.grpc_addr();
    let ca = Ca::load_or_create(&fleet.hub.data_dir().join("ca")).expect("the hub's CA");
    fleet.hub.stop().expect("the hub stops");
    let host = fleet.host(0);
    let identity: Value = serde_json::from_str(
        &std::fs::read_to_string(host.state_dir().join("identity.json")).expect("identity.json"),
    )
    .expect("identity JSON");

    let mut sessions = rogue_gateway(&ca, address).await;
    let mut session = tokio::time::timeout(DEADLINE, sessions.recv())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the agent never reached the rogue gateway\n{}",
                fleet.logs()
            )
        })
        .expect("a session");
    session
        .send(hub_frame::Body::Welcome(Welcome {
            protocol_version: banhub_proto::PROTOCOL_VERSION,
            hub_version: "rogue".to_owned(),
            server_id: identity["server_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            server_name: identity["server_name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            heartbeat_interval_ms: 1_000,
            committed_seq: 0,
        }))
        .await;
    let beats = session.out.clone();
    tokio::spawn(async move {
        for seq in 1.. {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let beat = hub_frame::Body::Heartbeat(Heartbeat {
                seq,
                sent_at_unix_ms: chrono::Utc::now().timestamp_millis(),
            });
            if beats.send(Ok(HubFrame { body: Some(beat) })).await.is_err() {
                return;
            }
        }
    });

    let conf = host.sandbox.conf_dir();
    root_installs_banhub_action(&conf);
    let markers = tempfile::tempdir().expect("marker dir");
    let marker = markers.path().join("ran");
    for (i, (part, content, key, setting)) in probes(&marker).into_iter().enumerate() {
        let file = Some(FileEdit {
            content: content.clone(),
            expected_version: String::new(),
        });
        let edit = match part {
            "filterLocal" => WriteJailConfig {
                jail: JAIL.to_owned(),
                jail_override: None,
                filter_local: file,
            },
            _ => WriteJailConfig {
                jail: JAIL.to_owned(),
                jail_override: file,
                filter_local: None,
            },
        };
        let before = snapshot(&conf);
        let outcome = session.write(&format!("rogue-{i}"), edit).await;
        let Some(Outcome::Error(CommandError { code, message, .. })) = outcome else {
            panic!("{content:?} was not refused: {outcome:?}");
        };
        assert_eq!(
            code,
            i32::from(ErrorCode::PolicyRefused),
            "{content:?}: {message}"
        );
        assert!(
            message.contains(&format!("refuses {key}:")) && message.contains(setting),
            "{key}: {message}"
        );
        assert_eq!(snapshot(&conf), before, "{content:?} changed files");
    }

    // The same channel carries an everyday edit, so the refusals above are the policy's.
    let allowed = session
        .write(
            "rogue-allowed",
            WriteJailConfig {
                jail: JAIL.to_owned(),
                jail_override: Some(FileEdit {
                    content: format!("[{JAIL}]\nmaxretry = 3\n"),
                    expected_version: String::new(),
                }),
                filter_local: None,
            },
        )
        .await;
    assert!(
        matches!(allowed, Some(Outcome::ConfigChange(_))),
        "{allowed:?}"
    );
    ban_through_the_log(&host.sandbox, "192.0.2.30");
    assert!(!marker.exists(), "a refused command ran");
}
