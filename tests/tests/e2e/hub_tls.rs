//! The HTTP listener's own TLS (`http.tls.cert_path` / `key_path`) and the hub under a sub-path
//! (`http.base_path`) as a reverse proxy forwards it: the real `banhub` binary, a self-signed
//! certificate made by the test, and for the live stream a real agent on a fail2ban sandbox.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_tests::agent::AgentProcess;
use banhub_tests::enrolled::EnrolledAgent;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::wait::wait_until;
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
/// The name in the test certificate; the client resolves it to the hub's loopback address.
const HOST: &str = "banhub.test";

struct TestCert {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    pem: String,
}

fn self_signed() -> TestCert {
    let generated =
        rcgen::generate_simple_self_signed(vec![HOST.to_owned()]).expect("self-signed cert");
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("hub.pem");
    let key = dir.path().join("hub.key");
    let pem = generated.cert.pem();
    std::fs::write(&cert, &pem).expect("write cert");
    std::fs::write(&key, generated.signing_key.serialize_pem()).expect("write key");
    TestCert {
        _dir: dir,
        cert,
        key,
        pem,
    }
}

/// A client that trusts only `pem`, reaches [`HOST`] at `addr`, and authenticates as the harness's
/// admin.
fn https_client(hub: &HubProcess, addr: SocketAddr, pem: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", hub.admin_token())
            .parse()
            .expect("header value"),
    );
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem"))
        .resolve(HOST, addr)
        .default_headers(headers)
        .timeout(DEADLINE)
        .build()
        .expect("client")
}

fn start_tls_hub(cert: &TestCert) -> HubProcess {
    HubProcess::builder()
        .env("BANHUB_HTTP__TLS__CERT_PATH", &cert.cert)
        .env("BANHUB_HTTP__TLS__KEY_PATH", &cert.key)
        .start()
        .expect("hub starts with TLS")
}

#[tokio::test]
async fn https_listener_serves_the_api_and_the_stream_with_the_given_certificate() {
    let cert = self_signed();
    let hub = start_tls_hub(&cert);
    let addr = hub.listening().http;
    let base = format!("https://{HOST}:{}", addr.port());
    let client = https_client(&hub, addr, &cert.pem);

    let health = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("HTTPS request: {e:#}\n{}", hub.logs()));
    assert_eq!(health.status(), StatusCode::OK);

    // A write over HTTPS reaches the store: the server is listed afterwards.
    let created = client
        .post(format!("{base}/api/servers"))
        .json(&json!({"name": "tls-web-1"}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), StatusCode::CREATED, "{}", hub.logs());
    let servers: Value = client
        .get(format!("{base}/api/servers"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert!(
        servers.to_string().contains("tls-web-1"),
        "the created server is listed: {servers}"
    );

    let stream = client
        .get(format!("{base}/api/events/stream"))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(
        stream.headers()[reqwest::header::CONTENT_TYPE],
        "text/event-stream"
    );
    drop(stream);

    // Not plain HTTP on that port, and not a certificate the client does not trust.
    let plain = reqwest::Client::new()
        .get(format!("http://{addr}/healthz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(
        plain.is_err(),
        "plain HTTP was answered on the HTTPS port: {plain:?}"
    );
    let other = self_signed();
    let untrusting = https_client(&hub, addr, &other.pem);
    let refused = untrusting.get(format!("{base}/healthz")).send().await;
    assert!(
        refused.is_err(),
        "a client that does not trust the certificate got through: {refused:?}"
    );
}

#[test]
fn an_unreadable_certificate_stops_the_start_and_names_the_file() {
    let missing = Path::new("/nonexistent/banhub-test/hub.pem");
    let err = HubProcess::builder()
        .env("BANHUB_HTTP__TLS__CERT_PATH", missing)
        .env(
            "BANHUB_HTTP__TLS__KEY_PATH",
            "/nonexistent/banhub-test/hub.key",
        )
        .start()
        .expect_err("the hub refuses to start without its certificate");
    let message = format!("{err:#}");
    assert!(message.contains("exited during start-up"), "{message}");
    assert!(message.contains("http.tls"), "{message}");
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );
}

/// A hub under `/banhub`, one enrolled agent on a fail2ban sandbox reconciling every second (so a ban
/// made through the API comes back as an event), and an admin client.
struct SubPathHub {
    hub: HubProcess,
    _sandbox: Fail2banSandbox,
    _agent: AgentProcess,
    _state: tempfile::TempDir,
    client: reqwest::Client,
}

impl SubPathHub {
    fn url(&self, path: &str) -> String {
        self.hub.url(path)
    }
}

async fn start_under_sub_path() -> SubPathHub {
    let hub = HubProcess::builder()
        .env("BANHUB_HTTP__BASE_PATH", "/banhub")
        .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
        .start()
        .expect("hub starts under /banhub");
    let client = hub.client();
    let sandbox = Fail2banSandbox::start("subpath").expect("fail2ban sandbox");
    let api = hub.url("/banhub");
    let enrolled = EnrolledAgent::register(
        &client,
        &api,
        "sub-path-web",
        &sandbox,
        &[("BANHUB_AGENT_RECONCILE__INTERVAL_SECS", "1")],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", hub.logs()));
    enrolled
        .wait_online(&client, &api, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", hub.logs()));
    let EnrolledAgent { agent, state, .. } = enrolled;
    let dir = state.path().join("agent");
    // The first reconciliation only records fail2ban's bans as the baseline; a ban made after it is
    // reported.
    wait_until(DEADLINE, "the agent's reconciliation baseline", || {
        dir.join("reconcile.json").exists()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));
    SubPathHub {
        hub,
        _sandbox: sandbox,
        _agent: agent,
        _state: state,
        client,
    }
}

#[tokio::test]
async fn under_a_base_path_everything_is_served_below_it_and_nothing_at_the_root() {
    let h = start_under_sub_path().await;
    // The admin's token (the API docs are under /api, so they need a login too), without following
    // redirects.
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", h.hub.admin_token())
            .parse()
            .expect("header"),
    );
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(auth)
        .timeout(DEADLINE)
        .build()
        .expect("client");

    // The live stream under the prefix, opened before the ban so it carries it live.
    let mut stream = h
        .client
        .get(h.url("/banhub/api/events/stream"))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), StatusCode::OK);
    let banned = h
        .client
        .post(h.url("/banhub/api/jails/testauth/ban/192.0.2.44"))
        .send()
        .await
        .expect("ban");
    assert!(
        banned.status().is_success(),
        "ban under the prefix: {} {}",
        banned.status(),
        banned.text().await.unwrap_or_default()
    );
    let mut seen = String::new();
    let found = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("192.0.2.44") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "the ban came through the stream under /banhub; got {seen:?}\n{}",
        h.hub.logs()
    );
    // ... and is stored: the history under the prefix has it.
    let history: Value = h
        .client
        .get(h.url("/banhub/api/events/bans?ip=192.0.2.44"))
        .send()
        .await
        .expect("history")
        .json()
        .await
        .expect("json");
    assert!(history.to_string().contains("192.0.2.44"), "{history}");

    // The API, health and auth answer under the prefix ...
    for path in ["/banhub/healthz", "/banhub/api/servers"] {
        let status = h.client.get(h.url(path)).send().await.expect(path).status();
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    // Every route of the OpenAPI document (the /auth routes among them once they are served)
    // answers under the prefix with something other than "no such route".
    let doc: Value = h
        .client
        .get(h.url("/banhub/api/openapi.json"))
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    for path in ["/auth/status", "/api/summary"] {
        if doc["paths"].get(path).is_none() {
            continue;
        }
        let response = no_redirects
            .get(h.url(&format!("/banhub{path}")))
            .send()
            .await
            .expect(path);
        assert_ne!(
            response.status(),
            StatusCode::NOT_FOUND,
            "{path} is served under the prefix too"
        );
    }
    // ... and nothing at the root: not the API, not the UI, not the stream.
    for path in [
        "/api/servers",
        "/healthz",
        "/api/events/stream",
        "/",
        "/auth/status",
    ] {
        let response = h.client.get(h.url(path)).send().await.expect(path);
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body = response.text().await.unwrap_or_default();
        assert!(
            body.contains("/banhub/"),
            "the 404 names the prefix: {body}"
        );
    }

    // The prefix itself leads to the UI's home; absolute redirects from inside keep the prefix.
    let home = no_redirects
        .get(h.url("/banhub"))
        .send()
        .await
        .expect("home");
    assert!(home.status().is_redirection(), "{}", home.status());
    assert_eq!(home.headers()[reqwest::header::LOCATION], "/banhub/");
    let docs = no_redirects
        .get(h.url("/banhub/api/docs"))
        .send()
        .await
        .expect("docs");
    assert!(docs.status().is_redirection(), "{}", docs.status());
    assert_eq!(
        docs.headers()[reqwest::header::LOCATION],
        "/banhub/api/docs/"
    );
    let ui = h.client.get(h.url("/banhub/")).send().await.expect("ui");
    assert_eq!(ui.status(), StatusCode::OK);
    let page = ui.text().await.expect("page");
    assert!(
        page.contains("<base href=\"/banhub/\""),
        "the UI's page names its base: {page}"
    );

    // The OpenAPI document tells clients where the API is.
    let doc: Value = h
        .client
        .get(h.url("/banhub/api/openapi.json"))
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    assert_eq!(doc["servers"][0]["url"], "/banhub", "{}", doc["servers"]);
}
