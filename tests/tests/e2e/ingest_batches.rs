//! Event batches an agent keeps in flight, against the real hub: a raw session (the agent's
//! certificate, the agent's protocol) sends many batches at once, with a heartbeat and a re-sent
//! batch among them. The hub may store batches that queued up behind a commit in one transaction;
//! what must hold is that every ack is cumulative and comes only once everything it acknowledges is
//! in the database, and that every event is stored exactly once.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use banhub::domain::events::EventId;
use banhub::store::Store;
use banhub_proto::v1::agent_gateway_client::AgentGatewayClient;
use banhub_proto::v1::{
    self as pb, AgentFrame, EventBatch, EventKind, EventSource, Heartbeat, Hello, SpoolHead,
    agent_frame, hub_frame,
};
use banhub_tests::agent::AgentProcess;
use banhub_tests::hub::HubProcess;
use serde_json::{Value, json};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

const EPOCH: u64 = 7;
const BATCHES: u64 = 12;
const PER_BATCH: u64 = 250;
const ACK_DEADLINE: Duration = Duration::from_secs(60);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn event(seq: u64, now_ms: i64) -> pb::Event {
    pb::Event {
        seq,
        kind: EventKind::Ban.into(),
        ip: format!("198.51.100.{}", seq % 200),
        jail: "sshd".to_owned(),
        hostname: "web-1".to_owned(),
        failures: 3,
        logs: vec![format!(
            "Failed password for root from 198.51.100.{}",
            seq % 200
        )],
        received_at_unix_ms: now_ms,
        source: EventSource::Action.into(),
        ..pb::Event::default()
    }
}

fn batch(number: u64, now_ms: i64) -> AgentFrame {
    let first = (number - 1) * PER_BATCH + 1;
    AgentFrame {
        body: Some(agent_frame::Body::Events(EventBatch {
            epoch: EPOCH,
            events: (first..first + PER_BATCH)
                .map(|s| event(s, now_ms))
                .collect(),
        })),
    }
}

/// The sequence numbers of this agent's epoch that are in the hub's database.
async fn stored_seqs(store: &Store) -> Vec<u64> {
    let events = store
        .events_after(EventId(0), 100_000)
        .await
        .expect("events read");
    events
        .iter()
        .filter_map(|e| e.position)
        .filter(|p| p.epoch == EPOCH)
        .map(|p| p.seq)
        .collect()
}

#[tokio::test]
async fn queued_batches_are_acknowledged_only_once_committed_and_stored_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let hub = HubProcess::start().expect("hub starts");
    let created: Value = hub
        .client()
        .post(hub.url("/api/servers"))
        .json(&json!({"name": "batches-1"}))
        .send()
        .await
        .expect("POST /api/servers")
        .json()
        .await
        .expect("JSON");
    let token = created["enrollment"]["token"].as_str().expect("token");
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("agent");
    let out = AgentProcess::enroll(token, &dir).expect("enroll runs");
    assert!(
        out.status.success(),
        "enroll failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&dir.join("ca.pem"))))
        .domain_name(banhub_proto::HUB_TLS_NAME)
        .identity(Identity::from_pem(
            read(&dir.join("agent.pem")),
            read(&dir.join("agent.key")),
        ));
    let channel = Endpoint::from_shared(format!("https://{}", hub.grpc_addr()))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect()
        .await
        .expect("connects");
    let (outbound, mut rx) = tokio::sync::mpsc::channel::<AgentFrame>(64);
    let total = BATCHES * PER_BATCH;
    outbound
        .send(AgentFrame {
            body: Some(agent_frame::Body::Hello(Hello {
                protocol_version: banhub_proto::PROTOCOL_VERSION,
                agent_version: "test".to_owned(),
                hostname: "web-1".to_owned(),
                fail2ban_version: String::new(),
                capabilities: vec![],
                spool: Some(SpoolHead {
                    epoch: EPOCH,
                    last_seq: total,
                    acked_seq: 0,
                    depth: total,
                    oldest_unacked_unix_ms: 0,
                }),
            })),
        })
        .await
        .expect("hello queued");
    let mut inbound = AgentGatewayClient::new(channel)
        .session(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
        .await
        .expect("session opens")
        .into_inner();
    match inbound
        .message()
        .await
        .expect("welcome")
        .and_then(|f| f.body)
    {
        Some(hub_frame::Body::Welcome(welcome)) => assert_eq!(welcome.committed_seq, 0),
        other => panic!("expected the welcome, got {other:?}"),
    }

    // Everything at once, as an agent with batches in flight behind a slow commit would: the
    // hub finds several batches queued. A heartbeat and a re-sent batch are among them.
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut sent_frames = 0;
    for number in 1..=BATCHES {
        outbound
            .send(batch(number, now_ms))
            .await
            .expect("batch queued");
        sent_frames += 1;
        if number == 3 {
            let beat = Heartbeat {
                seq: 1,
                sent_at_unix_ms: now_ms,
            };
            outbound
                .send(AgentFrame {
                    body: Some(agent_frame::Body::Heartbeat(beat)),
                })
                .await
                .expect("heartbeat queued");
        }
        if number == 6 {
            outbound.send(batch(2, now_ms)).await.expect("re-send");
            sent_frames += 1;
        }
    }

    let url = format!(
        "sqlite://{}?mode=rw",
        hub.data_dir().join("banhub.db").display()
    );
    let store = Store::connect(&url, 1).await.expect("hub database opens");
    let mut acks = Vec::new();
    while acks.last() != Some(&total) {
        let frame = tokio::time::timeout(ACK_DEADLINE, inbound.message())
            .await
            .unwrap_or_else(|_| panic!("no ack within {ACK_DEADLINE:?}; acks so far {acks:?}"))
            .expect("stream")
            .expect("the hub ended the session");
        let Some(hub_frame::Body::Ack(ack)) = frame.body else {
            continue;
        };
        assert_eq!(ack.epoch, EPOCH);
        assert!(
            acks.last().is_none_or(|last| *last <= ack.seq),
            "acks go backwards: {acks:?} then {}",
            ack.seq
        );
        // Read after the ack arrived: everything it acknowledges must be committed already.
        let stored: HashSet<u64> = stored_seqs(&store).await.into_iter().collect();
        let missing: Vec<u64> = (1..=ack.seq).filter(|s| !stored.contains(s)).collect();
        assert!(
            missing.is_empty(),
            "ack {} came before {} of its events were committed (first {:?})",
            ack.seq,
            missing.len(),
            missing.first()
        );
        acks.push(ack.seq);
    }
    eprintln!("acks for {sent_frames} batches: {acks:?}");
    assert!(
        acks.len() <= sent_frames,
        "{} acks for {sent_frames} batches: {acks:?}",
        acks.len()
    );

    let seqs = stored_seqs(&store).await;
    let unique: HashSet<u64> = seqs.iter().copied().collect();
    assert_eq!(seqs.len(), unique.len(), "an event was stored twice");
    assert_eq!(unique, (1..=total).collect::<HashSet<u64>>());
    // The rollups count each event once too (the re-sent batch added nothing).
    let (status, stats) = banhub_tests::hub::api_get(&hub, "/api/events/bans/stats").await;
    assert!(status.is_success(), "stats: {status} {stats}");
    assert_eq!(stats["totals"]["bans"], json!(total), "stats: {stats}");
    let (status, insights) = banhub_tests::hub::api_get(&hub, "/api/events/bans/insights").await;
    assert!(status.is_success(), "insights: {status} {insights}");
    assert_eq!(insights["distinctIps"], 200, "insights: {insights}");
    drop(outbound);
}
