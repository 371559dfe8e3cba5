//! The callbacks of a fault test: direct ones to the hub's `POST /api/ban` with a server's callback
//! secret, and agent ones to an agent's loopback relay, each for an address of its own, sent at a
//! steady pace until told to stop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// How long a test waits for one callback's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the hub answered a direct callback: its status (none when the request failed) and, for
/// a 200, the stored event's id.
#[derive(Debug, Clone)]
pub struct DirectAnswer {
    pub status: Option<StatusCode>,
    pub id: Option<i64>,
    pub retry_after: Option<String>,
    pub content_type: Option<String>,
    pub body: Value,
}

impl DirectAnswer {
    pub fn accepted(&self) -> bool {
        self.status == Some(StatusCode::OK) && self.id.is_some()
    }
}

/// A client for callbacks, with no credentials of its own.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(ANSWER_TIMEOUT)
        .build()
        .expect("HTTP client")
}

/// fail2ban's action on a host without an agent reporting a ban of `ip` to the hub at `hub_url`.
pub async fn direct_ban(
    client: &reqwest::Client,
    hub_url: &str,
    secret: &str,
    ip: &str,
) -> DirectAnswer {
    let sent = client
        .post(format!("{hub_url}/api/ban"))
        .header("X-Callback-Secret", secret)
        .json(&json!({"ip": ip, "jail": "sshd", "hostname": "edge-1", "failures": 3}))
        .send()
        .await;
    let Ok(response) = sent else {
        return DirectAnswer {
            status: None,
            id: None,
            retry_after: None,
            content_type: None,
            body: Value::Null,
        };
    };
    let status = response.status();
    let header = |name: reqwest::header::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header(reqwest::header::RETRY_AFTER);
    let content_type = header(reqwest::header::CONTENT_TYPE);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    DirectAnswer {
        status: Some(status),
        id: (status == StatusCode::OK)
            .then(|| body["id"].as_i64())
            .flatten(),
        retry_after,
        content_type,
        body,
    }
}

/// fail2ban's action on an agent's host reporting a ban of `ip` in `testauth` to the agent's relay;
/// whether the relay accepted it (200: durable in the agent's spool).
pub async fn relay_ban(
    client: &reqwest::Client,
    relay: SocketAddr,
    secret: &str,
    ip: &str,
) -> bool {
    client
        .post(format!("http://{relay}/api/ban"))
        .header("X-Callback-Secret", secret)
        .json(&json!({
            "ip": ip, "jail": "testauth", "hostname": "web-1", "failures": 3,
            "logs": [format!("Failed login for root from {ip}")]
        }))
        .send()
        .await
        .is_ok_and(|r| r.status() == StatusCode::OK)
}

/// The `n`th address of a burst: `10.<prefix>.x.y`, never a network or broadcast address.
pub fn address(prefix: u8, n: usize) -> String {
    format!("10.{prefix}.{}.{}", (n / 250) % 250, n % 250 + 1)
}

/// Sends `per_tick` callbacks every `period` until `stop` is set, each in a task of its own (so a
/// slow answer does not hold the pace up); the handle yields every callback's result once all
/// answered.
pub fn steady<T, F, Fut>(
    period: Duration,
    per_tick: usize,
    stop: Arc<AtomicBool>,
    send: F,
) -> JoinHandle<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    tokio::spawn(async move {
        let mut sent = Vec::new();
        let mut n = 0;
        let mut ticks = tokio::time::interval(period);
        while !stop.load(Ordering::SeqCst) {
            ticks.tick().await;
            for _ in 0..per_tick {
                sent.push(tokio::spawn(send(n)));
                n += 1;
            }
        }
        let mut results = Vec::with_capacity(sent.len());
        for task in sent {
            results.push(task.await.expect("a callback task panicked"));
        }
        results
    })
}
