//! The relay over real TCP on 127.0.0.1, storing into a real spool.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::task::JoinHandle;

use super::*;
use crate::spool::{BanDuration, Record, SpoolConfig};

struct Running {
    base: String,
    secret: String,
    spool: Spool,
    stats: Arc<RelayStats>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RelayError>>,
    client: reqwest::Client,
    _dir: TempDir,
}

async fn start() -> Running {
    start_with(None).await
}

/// A relay that records into `belief` too, as while reconciliation runs.
async fn start_with(belief: Option<crate::reconcile::Belief>) -> Running {
    let dir = TempDir::new().expect("tempdir");
    let spool = Spool::open(dir.path().join("spool"), SpoolConfig::default())
        .await
        .expect("spool");
    let secret = RelaySecret::load_or_create(&dir.path().join(SECRET_FILE)).expect("secret");
    let listener = LoopbackAddr::new("127.0.0.1:0".parse().expect("addr"))
        .expect("loopback")
        .bind()
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let mut relay = Relay::new(spool.clone(), secret.clone());
    if let Some(belief) = belief {
        relay = relay.with_belief(belief);
    }
    let stats = relay.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.serve(listener, shutdown.clone()));
    Running {
        base,
        secret: secret.expose().to_owned(),
        spool,
        stats,
        shutdown,
        task,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client"),
        _dir: dir,
    }
}

impl Running {
    async fn post(
        &self,
        path: &str,
        secret: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(secret) = secret {
            request = request.header("X-Callback-Secret", secret);
        }
        let response = request.send().await.expect("send");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = response.json().await.expect("json body");
        if !status.is_success() {
            assert_eq!(content_type, "application/problem+json", "{body}");
            assert_eq!(body["status"], status.as_u16(), "{body}");
            let problem: banhub_proto::problem::Problem =
                serde_json::from_value(body.clone()).expect("the shared problem shape");
            assert!(banhub_proto::problem::is_code(&problem.code), "{body}");
            assert_eq!(problem.kind, format!("urn:banhub:problem:{}", problem.code));
        }
        (status, body)
    }

    async fn stored(&self) -> Vec<Record> {
        self.spool.pending(0, 1000).await.expect("pending")
    }
}

fn callback() -> Value {
    json!({
        "serverId": "whatever-the-body-claims",
        "ip": "203.0.113.7",
        "jail": "sshd",
        "hostname": "web-1",
        "failures": 3,
        "logs": ["2026-11-22 23:42:38 Failed login for root from 203.0.113.7"],
        "banTime": 1_790_000_000,
        "banDuration": 600,
        "banCount": 1
    })
}

/// The agent putting a shared ban back (fail2ban restarted) calls the action again; the hub was
/// told already, so only the first ban and the first unban of each address are stored. Other
/// jails store every callback.
#[tokio::test]
async fn a_shared_ban_is_one_ban_and_one_unban_event() {
    let state = TempDir::new().expect("state");
    let belief = crate::reconcile::Belief::load(state.path()).expect("belief");
    let relay = start_with(Some(belief.clone())).await;
    let shared = |ip: &str| {
        let mut body = callback();
        body["jail"] = json!(banhub_proto::rules::SHARED_JAIL);
        body["ip"] = json!(ip);
        body.to_string()
    };
    let post = |path: &'static str, body: String| {
        let relay = &relay;
        async move {
            let (status, body) = relay.post(path, Some(&relay.secret), body).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    assert!(post("/api/ban", shared("198.51.100.1")).await["seq"].is_u64());
    assert_eq!(
        post("/api/ban", shared("198.51.100.1")).await,
        json!({"duplicate": true})
    );
    assert!(post("/api/ban", shared("198.51.100.2")).await["seq"].is_u64());
    assert!(post("/api/unban", shared("198.51.100.1")).await["seq"].is_u64());
    assert_eq!(
        post("/api/unban", shared("198.51.100.1")).await,
        json!({"duplicate": true})
    );
    assert!(post("/api/ban", callback().to_string()).await["seq"].is_u64());
    assert!(post("/api/ban", callback().to_string()).await["seq"].is_u64());
    let stored: Vec<(String, String, &str)> = relay
        .stored()
        .await
        .into_iter()
        .map(|r| match r.event {
            Event::Ban(b) => (b.jail.to_string(), b.ip.to_string(), "ban"),
            Event::Unban(b) => (b.jail.to_string(), b.ip.to_string(), "unban"),
            Event::Gap(_) => panic!("no gap expected"),
        })
        .collect();
    let shared_jail = banhub_proto::rules::SHARED_JAIL.to_owned();
    assert_eq!(
        stored,
        [
            (shared_jail.clone(), "198.51.100.1".to_owned(), "ban"),
            (shared_jail.clone(), "198.51.100.2".to_owned(), "ban"),
            (shared_jail, "198.51.100.1".to_owned(), "unban"),
            ("sshd".to_owned(), "203.0.113.7".to_owned(), "ban"),
            ("sshd".to_owned(), "203.0.113.7".to_owned(), "ban"),
        ]
    );
    assert_eq!(relay.stats.accepted(), 7);
}

#[tokio::test]
async fn good_ban_is_stored_before_the_answer() {
    let relay = start().await;
    let (status, body) = relay
        .post("/api/ban", Some(&relay.secret), callback().to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"epoch": relay.spool.epoch(), "seq": 1}));

    let stored = relay.stored().await;
    let [record] = &stored[..] else {
        panic!("one record: {stored:?}");
    };
    assert_eq!(record.seq, 1);
    let Event::Ban(ban) = &record.event else {
        panic!("not a ban: {record:?}");
    };
    assert_eq!(ban.ip.to_string(), "203.0.113.7");
    assert_eq!(ban.jail.as_str(), "sshd");
    assert_eq!(ban.hostname, "web-1");
    assert_eq!(ban.failures, 3);
    assert_eq!(ban.logs.lines().len(), 1);
    assert_eq!(ban.ban_time, Some(1_790_000_000));
    assert_eq!(ban.ban_duration, Some(BanDuration::Seconds(600)));
    assert_eq!(ban.ban_count, Some(1));
    assert_eq!(ban.source, Source::Action);
    let now = crate::spool::now_ms();
    assert!(
        now - ban.received_at_ms < 10_000,
        "received {}",
        ban.received_at_ms
    );
    assert_eq!(relay.stats.accepted(), 1);
    assert!(relay.stats.last_accepted_at_ms().is_some());
}

#[tokio::test]
async fn unban_is_stored_as_an_unban() {
    let relay = start().await;
    let body = json!({"ip": "2001:db8::7", "jail": "sshd", "failures": "0", "logs": ""});
    let (status, answer) = relay
        .post("/api/unban", Some(&relay.secret), body.to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let stored = relay.stored().await;
    let Event::Unban(unban) = &stored[0].event else {
        panic!("not an unban: {stored:?}");
    };
    assert_eq!(unban.ip.to_string(), "2001:db8::7");
    assert!(
        !unban.hostname.is_empty(),
        "the agent's own host name fills in"
    );
}

#[tokio::test]
async fn a_refusal_is_a_problem_in_the_hubs_vocabulary() {
    let relay = start().await;
    let response = relay
        .client
        .post(format!("{}/api/ban", relay.base))
        .body(callback().to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = response.json().await.expect("json body");
    assert_eq!(
        body,
        json!({
            "type": "urn:banhub:problem:unauthorized",
            "title": "Unauthorized",
            "status": 401,
            "detail": "the X-Callback-Secret header is missing",
            "code": "unauthorized",
        })
    );
}

#[tokio::test]
async fn wrong_or_missing_secret_is_401_and_stores_nothing() {
    let relay = start().await;
    let wrong = format!("{}x", &relay.secret[..relay.secret.len() - 1]);
    for secret in [Some(wrong.as_str()), Some(""), None] {
        let (status, body) = relay.post("/api/ban", secret, callback().to_string()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["code"], "unauthorized");
    }
    // The secret is checked before the body is even read.
    let (status, _) = relay.post("/api/ban", None, vec![b'x'; 1 << 20]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(relay.stored().await, []);
    assert_eq!(relay.stats.rejected(), 4);
}

#[tokio::test]
async fn invalid_fields_are_422_and_named() {
    let relay = start().await;
    let cases = [
        ("ip", json!("not-an-ip")),
        ("ip", json!("203.0.113.7 && reboot")),
        ("jail", json!("../../etc/passwd")),
        ("failures", json!("many")),
    ];
    for (field, value) in cases {
        let mut body = callback();
        body[field] = value;
        let (status, answer) = relay
            .post("/api/ban", Some(&relay.secret), body.to_string())
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert_eq!(answer["code"], "invalid_field");
        assert_eq!(answer["field"], field);
        assert_eq!(answer["type"], "urn:banhub:problem:invalid_field");
        assert_eq!(answer["title"], "Unprocessable Entity");
    }
    for junk in ["{", "[]", ""] {
        let (status, answer) = relay.post("/api/ban", Some(&relay.secret), junk).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["code"], "bad_request");
    }
    assert_eq!(relay.stored().await, []);
}

#[tokio::test]
async fn huge_body_is_413_and_stores_nothing() {
    let relay = start().await;
    let mut body = callback();
    body["logs"] = json!(vec!["x".repeat(1000); 100]);
    let (status, answer) = relay
        .post("/api/ban", Some(&relay.secret), body.to_string())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(answer["code"], "payload_too_large");
    assert_eq!(relay.stored().await, []);

    // Just under the limit is fine; the log lines are capped when stored.
    body["logs"] = json!(vec!["x".repeat(1000); 60]);
    let (status, answer) = relay
        .post("/api/ban", Some(&relay.secret), body.to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn other_paths_and_methods_are_problems() {
    let relay = start().await;
    let (status, body) = relay.post("/api/other", Some(&relay.secret), "{}").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let response = relay
        .client
        .get(format!("{}/api/ban", relay.base))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        response.headers().get("allow").map(|v| v.as_bytes()),
        Some(&b"POST"[..])
    );
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["code"], "method_not_allowed");
}

/// Sends raw HTTP/1.1 `requests` on one connection and reads `answers` answers back.
async fn raw_exchange(base: &str, requests: &[u8], answers: usize) -> Vec<(u16, Value)> {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    let addr = base.trim_start_matches("http://");
    let mut stream =
        tokio::io::BufReader::new(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    stream.get_mut().write_all(requests).await.expect("write");
    let mut out = Vec::new();
    for _ in 0..answers {
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("status line");
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {line:?}"));
        let mut length = 0;
        loop {
            line.clear();
            stream.read_line(&mut line).await.expect("header");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().expect("length");
            }
        }
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.expect("body");
        out.push((status, serde_json::from_slice(&body).expect("json body")));
    }
    out
}

#[tokio::test]
async fn a_chunked_body_over_the_cap_is_413_and_keep_alive_serves_the_next() {
    let relay = start().await;
    let chunk = "x".repeat(8192);
    let mut request = format!(
        "POST /api/ban HTTP/1.1\r\nHost: relay\r\nX-Callback-Secret: {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n",
        relay.secret
    );
    for _ in 0..10 {
        request.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    request.push_str("0\r\n\r\n");
    let answers = raw_exchange(&relay.base, request.as_bytes(), 1).await;
    assert_eq!(answers[0].0, 413, "{}", answers[0].1);
    assert_eq!(answers[0].1["code"], "payload_too_large");
    assert_eq!(relay.stored().await, []);

    // Two callbacks on one kept-alive connection, sent back to back: each answered in order.
    let body = callback().to_string();
    let one = format!(
        "POST /api/ban HTTP/1.1\r\nHost: relay\r\nX-Callback-Secret: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        relay.secret,
        body.len()
    );
    let answers = raw_exchange(&relay.base, format!("{one}{one}").as_bytes(), 2).await;
    assert_eq!(
        answers
            .iter()
            .map(|a| (a.0, a.1["seq"].clone()))
            .collect::<Vec<_>>(),
        [(200, json!(1)), (200, json!(2))]
    );
    assert_eq!(relay.stored().await.len(), 2);
}

#[tokio::test]
async fn concurrent_callbacks_all_get_distinct_numbers() {
    let relay = start().await;
    let started = std::time::Instant::now();
    let n = 400;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = relay.client.clone();
            let url = format!("{}/api/ban", relay.base);
            let secret = relay.secret.clone();
            tokio::spawn(async move {
                let mut body = callback();
                body["ip"] = json!(format!("198.51.100.{}", i % 250 + 1));
                let response = client
                    .post(url)
                    .header("X-Callback-Secret", secret)
                    .body(body.to_string())
                    .send()
                    .await
                    .expect("send");
                assert_eq!(response.status(), StatusCode::OK);
                let answer: Value = response.json().await.expect("json");
                answer["seq"].as_u64().expect("seq")
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.push(task.await.expect("task"));
    }
    let elapsed = started.elapsed();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=n).collect::<Vec<u64>>());
    assert_eq!(relay.stored().await.len(), n as usize);
    eprintln!("{n} concurrent callbacks in {elapsed:?}");
}

#[tokio::test]
async fn a_spool_that_cannot_store_makes_503() {
    let relay = start().await;
    relay.spool.clone().close().await;
    let (status, body) = relay
        .post("/api/ban", Some(&relay.secret), callback().to_string())
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "spool_unavailable");
    assert_eq!(relay.stats.accepted(), 0);
}

#[tokio::test]
async fn shutdown_stops_the_server_and_non_loopback_is_refused() {
    let relay = start().await;
    relay.shutdown.cancel();
    relay.task.await.expect("join").expect("clean stop");

    let listener = TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let err = Relay::new(relay.spool.clone(), RelaySecret::generate())
        .serve(listener, CancellationToken::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, RelayError::NotLoopback(_)), "{err}");
}

#[test]
fn only_loopback_addresses_are_accepted() {
    for ok in ["127.0.0.1:8721", "127.1.2.3:1", "[::1]:8721"] {
        let addr: LoopbackAddr = ok.parse().expect(ok);
        assert_eq!(addr.get().to_string(), ok);
    }
    for bad in [
        "0.0.0.0:8721",
        "192.0.2.1:8721",
        "[::]:8721",
        "[2001:db8::1]:1",
    ] {
        let err = bad.parse::<LoopbackAddr>().expect_err(bad);
        assert!(matches!(err, RelayError::NotLoopback(_)), "{bad}: {err}");
    }
    assert!(matches!(
        "localhost:8721".parse::<LoopbackAddr>(),
        Err(RelayError::BadAddress(_))
    ));
    assert_eq!(LoopbackAddr::default().get().to_string(), DEFAULT_LISTEN);
}
