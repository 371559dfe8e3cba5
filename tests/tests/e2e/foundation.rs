//! End to end with the real `banhub` and `banhub-agent` binaries and a real `fail2ban-server`: create a
//! server, enroll its agent, see it online, test it, delete it; refused certificates; hub restarts;
//! enrollment token misuse.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use banhub_proto::v1::agent_gateway_client::AgentGatewayClient;
use banhub_proto::v1::{AgentFrame, Hello, agent_frame, hub_frame};
use banhub_tests::agent::AgentProcess;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::wait::wait_for_async;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

const ONLINE_DEADLINE: Duration = Duration::from_secs(20);

/// Fast heartbeats and reconnects, so that losing and regaining a session takes seconds.
const AGENT_ENV: &[(&str, &str)] = &[
    ("BANHUB_AGENT_LINK__BACKOFF_INITIAL_MS", "100"),
    ("BANHUB_AGENT_LINK__BACKOFF_MAX_MS", "1000"),
];

fn start_hub() -> HubProcess {
    HubProcess::builder()
        .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
        .start()
        .expect("hub starts")
}

async fn create_server(hub: &HubProcess, name: &str) -> (String, String) {
    let response = hub
        .client()
        .post(hub.url("/api/servers"))
        .json(&json!({ "name": name }))
        .send()
        .await
        .expect("POST /api/servers");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("json");
    (
        body["server"]["id"].as_str().expect("id").to_owned(),
        body["enrollment"]["token"]
            .as_str()
            .expect("token")
            .to_owned(),
    )
}

async fn server(hub: &HubProcess, id: &str) -> Option<Value> {
    let list: Value = hub
        .client()
        .get(hub.url("/api/servers"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    list.as_array()?.iter().find(|s| s["id"] == id).cloned()
}

async fn wait_status(hub: &HubProcess, id: &str, status: &str) -> Value {
    let what = format!("server {id} to be {status}");
    wait_for_async(ONLINE_DEADLINE, &what, || async {
        server(hub, id).await.filter(|s| s["status"] == status)
    })
    .await
    .unwrap_or_else(|e| {
        hub.print_logs();
        panic!("{e}")
    })
}

fn enroll(token: &str, state_dir: &Path) -> std::process::Output {
    AgentProcess::enroll_with_env(token, state_dir, AGENT_ENV).expect("enroll runs")
}

fn enroll_ok(token: &str, state_dir: &Path) {
    let out = enroll(token, state_dir);
    assert!(
        out.status.success(),
        "enroll failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_agent(state_dir: &Path, sandbox: &Fail2banSandbox) -> AgentProcess {
    AgentProcess::start(
        state_dir,
        &sandbox.socket_path(),
        &sandbox.conf_dir(),
        AGENT_ENV,
    )
    .expect("agent starts")
}

/// Opens a session the way an agent does and returns the hub's first frame kind, or the error.
async fn open_session(
    grpc: SocketAddr,
    ca_pem: &str,
    identity: Option<(String, String)>,
) -> Result<&'static str, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name(banhub_proto::HUB_TLS_NAME);
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(format!("https://{grpc}"))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?;
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    let hello = AgentFrame {
        body: Some(agent_frame::Body::Hello(Hello {
            protocol_version: banhub_proto::PROTOCOL_VERSION,
            agent_version: "test".to_owned(),
            hostname: "test".to_owned(),
            fail2ban_version: String::new(),
            capabilities: vec![],
            spool: None,
        })),
    };
    // Keep the request stream open after the hello, as a real agent does.
    let outbound = futures::stream::iter(vec![hello]).chain(futures::stream::pending());
    let response = AgentGatewayClient::new(channel)
        .session(outbound)
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    let mut inbound = response.into_inner();
    match inbound.message().await {
        Ok(Some(frame)) => match frame.body {
            Some(hub_frame::Body::Welcome(_)) => Ok("welcome"),
            other => Err(format!("unexpected first frame {other:?}")),
        },
        Ok(None) => Err("stream ended".to_owned()),
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn identity(state_dir: &Path) -> (String, String) {
    (
        read(&state_dir.join("agent.pem")),
        read(&state_dir.join("agent.key")),
    )
}

#[tokio::test]
async fn enroll_online_test_delete_and_revoke() {
    let sandbox = Fail2banSandbox::start("lifecycle").expect("fail2ban sandbox");
    let hub = start_hub();
    let (id, token) = create_server(&hub, "web-1").await;
    assert_eq!(
        server(&hub, &id).await.expect("listed")["status"],
        "pending"
    );

    let state = tempfile::tempdir().expect("tempdir");
    let state_dir = state.path().join("agent");
    enroll_ok(&token, &state_dir);
    for secret in ["agent.key", "agent.pem"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state_dir.join(secret))
            .expect("state file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{secret} must be private");
    }
    let identity_json: Value =
        serde_json::from_str(&read(&state_dir.join("identity.json"))).expect("identity.json");
    assert_eq!(identity_json["server_id"], id.as_str());

    let mut agent = start_agent(&state_dir, &sandbox);
    let online = wait_status(&hub, &id, "online").await;
    let fail2ban_version = sandbox.client(&["version"]).expect("version");
    assert_eq!(online["fail2banVersion"], fail2ban_version.as_str());
    assert_eq!(online["agentVersion"], env!("CARGO_PKG_VERSION"));
    assert!(online["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(
        online["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );

    // The connection test goes through the agent to fail2ban and back.
    let response = hub
        .client()
        .post(hub.url(&format!("/api/servers/{id}/test")))
        .send()
        .await
        .expect("test");
    assert_eq!(response.status(), StatusCode::OK);
    let report: Value = response.json().await.expect("json");
    assert_eq!(report["reply"], "pong");
    assert_eq!(report["fail2banVersion"], fail2ban_version.as_str());
    assert!(report["roundTripMs"].as_f64().is_some_and(|ms| ms > 0.0));

    // With fail2ban down the test says so, and the agent stays online.
    let mut sandbox = sandbox;
    sandbox.stop().expect("fail2ban stops");
    let response = hub
        .client()
        .post(hub.url(&format!("/api/servers/{id}/test")))
        .send()
        .await
        .expect("test");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let problem: Value = response.json().await.expect("json");
    assert_eq!(problem["code"], "fail2ban_unavailable", "{problem}");
    assert_eq!(server(&hub, &id).await.expect("listed")["status"], "online");

    // Delete: the session is cut within seconds and the agent is told it was removed.
    let response = hub
        .client()
        .delete(hub.url(&format!("/api/servers/{id}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("agent did not stop: {e}\n{}", agent.logs()));
    assert_eq!(status.code(), Some(3), "{}", agent.logs());
    assert!(server(&hub, &id).await.is_none());

    // Its certificate is refused from now on, while a fresh agent of another server is welcome.
    let ca = read(&state_dir.join("ca.pem"));
    let refused = open_session(hub.grpc_addr(), &ca, Some(identity(&state_dir))).await;
    assert!(refused.is_err(), "a revoked certificate opened a session");
    let (_, other_token) = create_server(&hub, "web-2").await;
    let other_dir = state.path().join("other");
    enroll_ok(&other_token, &other_dir);
    assert_eq!(
        open_session(hub.grpc_addr(), &ca, Some(identity(&other_dir))).await,
        Ok("welcome")
    );

    // Started again, the removed agent does not come back: it exits with code 3 again, which it
    // does only once the hub has refused it, and no session was opened meanwhile.
    let metrics_before = metric(&hub, "banhub_agent_sessions_total").await;
    agent.restart().expect("restart");
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the removed agent kept running: {e}\n{}", agent.logs()));
    assert_eq!(status.code(), Some(3), "{}", agent.logs());
    assert_eq!(
        metric(&hub, "banhub_agent_sessions_total").await,
        metrics_before,
        "the revoked agent got a session"
    );
}

async fn metric(hub: &HubProcess, name: &str) -> f64 {
    let text = hub
        .client()
        .get(hub.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test]
async fn certificates_not_issued_or_revoked_are_refused() {
    let hub = start_hub();
    let (id, token) = create_server(&hub, "web-1").await;
    let state = tempfile::tempdir().expect("tempdir");
    let first = state.path().join("first");
    enroll_ok(&token, &first);
    let ca = read(&first.join("ca.pem"));

    // The control: the issued certificate is welcome.
    assert_eq!(
        open_session(hub.grpc_addr(), &ca, Some(identity(&first))).await,
        Ok("welcome")
    );

    // No certificate at all.
    let none = open_session(hub.grpc_addr(), &ca, None).await;
    assert!(
        none.as_ref().is_err_and(|e| e.contains("Unauthenticated")),
        "{none:?}"
    );

    // A certificate from another CA naming the same agent.
    let agent_id = serde_json::from_str::<Value>(&read(&first.join("identity.json")))
        .expect("identity")["agent_id"]
        .as_str()
        .expect("agent id")
        .to_owned();
    let forged = forge_identity(&agent_id);
    let refused = open_session(hub.grpc_addr(), &ca, Some(forged)).await;
    assert!(
        refused.is_err(),
        "a certificate from another CA was accepted"
    );

    // Re-enrolling the server revokes the first agent's certificate.
    let response = hub
        .client()
        .post(hub.url(&format!("/api/servers/{id}/enrollment-token")))
        .send()
        .await
        .expect("new token");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("json");
    let second = state.path().join("second");
    enroll_ok(body["token"].as_str().expect("token"), &second);
    let revoked = open_session(hub.grpc_addr(), &ca, Some(identity(&first))).await;
    assert!(revoked.is_err(), "a replaced certificate was accepted");
    assert_eq!(
        open_session(hub.grpc_addr(), &ca, Some(identity(&second))).await,
        Ok("welcome")
    );
}

/// A key and a certificate with the agent URI SAN, signed by a CA the hub never saw.
fn forge_identity(agent_id: &str) -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = vec![SanType::URI(
        format!("urn:banhub:agent:{agent_id}")
            .try_into()
            .expect("uri"),
    )];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn agents_come_back_after_the_hub_restarts() {
    let sandbox = Fail2banSandbox::start("restart").expect("fail2ban sandbox");
    let mut hub = start_hub();
    let state = tempfile::tempdir().expect("tempdir");
    let mut servers = Vec::new();
    let mut agents = Vec::new();
    for name in ["web-1", "web-2"] {
        let (id, token) = create_server(&hub, name).await;
        let dir = state.path().join(name);
        enroll_ok(&token, &dir);
        agents.push(start_agent(&dir, &sandbox));
        servers.push(id);
    }
    for id in &servers {
        wait_status(&hub, id, "online").await;
    }

    // A crash: no goodbye to the agents.
    hub.kill().expect("kill");
    hub.restart().expect("hub restarts");
    for id in &servers {
        let back = wait_status(&hub, id, "online").await;
        assert_eq!(
            back["fail2banVersion"],
            sandbox.client(&["version"]).expect("v").as_str()
        );
    }
    // And a clean stop and start.
    hub.restart().expect("hub restarts");
    for id in &servers {
        wait_status(&hub, id, "online").await;
    }
    for agent in &mut agents {
        assert!(agent.is_running(), "{}", agent.logs());
    }
}

#[tokio::test]
async fn enrollment_tokens_are_single_use_and_resist_tampering() {
    let hub = start_hub();
    let state = tempfile::tempdir().expect("tempdir");

    // Used once, refused the second time.
    let (_, token) = create_server(&hub, "once").await;
    enroll_ok(&token, &state.path().join("a"));
    let again = enroll(&token, &state.path().join("b"));
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already been used"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // Tampered: another secret, another CA fingerprint, garbage.
    let (_, token) = create_server(&hub, "tamper").await;
    let good = banhub_proto::token::EnrollmentToken::decode(&token).expect("token");
    let mut wrong_secret = good.clone();
    wrong_secret.secret = "x".repeat(43);
    let out = enroll(&wrong_secret.encode(), &state.path().join("c"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not match"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut other_ca = good.clone();
    other_ca.ca_fingerprint = "ab".repeat(32);
    let out = enroll(&other_ca.encode(), &state.path().join("d"));
    assert!(!out.status.success());
    let out = enroll("bh1.not-a-token", &state.path().join("e"));
    assert!(!out.status.success());
    for dir in ["b", "c", "d", "e"] {
        assert!(
            !state.path().join(dir).join("agent.pem").exists(),
            "a refused enrollment left a certificate in {dir}"
        );
    }
    // The untampered token still works after all that.
    enroll_ok(&good.encode(), &state.path().join("f"));
}

#[tokio::test]
async fn expired_enrollment_tokens_are_refused() {
    let hub = HubProcess::builder()
        .env("BANHUB_ENROLLMENT__TOKEN_TTL_SECS", "1")
        .start()
        .expect("hub starts");
    let (id, token) = create_server(&hub, "late").await;
    let expires_at = {
        let response = hub
            .client()
            .post(hub.url(&format!("/api/servers/{id}/enrollment-token")))
            .send()
            .await
            .expect("token");
        let body: Value = response.json().await.expect("json");
        chrono::DateTime::parse_from_rfc3339(body["expiresAt"].as_str().expect("expiresAt"))
            .expect("a time")
    };
    // Expiry is a matter of the clock: wait until the hub's stated expiry has passed.
    while chrono::Utc::now() <= expires_at + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let state = tempfile::tempdir().expect("tempdir");
    let late = enroll(&token, state.path());
    assert!(!late.status.success());
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("expired"),
        "{}",
        String::from_utf8_lossy(&late.stderr)
    );
    assert_eq!(
        server(&hub, &id).await.expect("listed")["status"],
        "pending"
    );
}

#[test]
fn help_explains_the_options() {
    let hub = banhub_tests::process::binary("banhub").expect("banhub built");
    let out = std::process::Command::new(hub)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for option in [
        "--config",
        "--data-dir",
        "--http-listen",
        "--grpc-listen",
        "--grpc-advertise",
        "--database-url",
    ] {
        assert!(
            text.contains(option),
            "banhub --help lacks {option}:\n{text}"
        );
    }
    let agent = banhub_tests::process::binary("banhub-agent").expect("agent built");
    for sub in [&["enroll", "--help"][..], &["run", "--help"][..]] {
        let out = std::process::Command::new(&agent)
            .args(sub)
            .output()
            .expect("runs");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--state-dir"), "{text}");
    }
}
