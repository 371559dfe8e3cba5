//! The event path end to end: fail2ban's action → the agent's relay → its durable spool → the session →
//! the hub's store → the events API and the live stream; and what survives a hub outage or a killed
//! agent in the middle of a burst.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use banhub_tests::TestFleet;
use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::enrolled::wait_server_online;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

const DEADLINE: Duration = Duration::from_secs(30);
const BURST: usize = 10_000;

async fn start(agent_env: &[(&str, &str)]) -> TestFleet {
    let hub = TestFleet::hub_builder().start().expect("hub starts");
    let sandbox = Fail2banSandbox::start("events").expect("fail2ban sandbox");
    let mut fleet = TestFleet::on(hub);
    fleet
        .add_host("web-1", sandbox, agent_env)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    fleet
}

async fn wait_online(fleet: &TestFleet) {
    wait_server_online(
        &fleet.hub.client(),
        &fleet.hub.url(""),
        &fleet.hosts[0].id,
        DEADLINE,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", fleet.hub.logs(), fleet.hosts[0].agent.logs()));
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned()
}

/// Installs the shipped action into the sandbox and attaches it to `testauth`, pointing at the agent.
fn attach_action(fleet: &TestFleet) {
    let conf = fleet.hosts[0].sandbox.conf_dir();
    std::fs::copy(
        workspace().join("deploy/fail2ban/action.d/banhub.conf"),
        conf.join("action.d/banhub.conf"),
    )
    .expect("action installed");
    let relay = relay_addr(&fleet.hosts[0].state_dir()).expect("relay address");
    std::fs::write(
        conf.join("jail.local"),
        format!(
            "[testauth]\naction = filelog\n         banhub[notify=\"{notify}\", relay_url=\"http://{relay}\", secret_file=\"{secret}\"]\n",
            notify = workspace().join("deploy/fail2ban/banhub-notify").display(),
            secret = fleet.hosts[0].state_dir().join("relay.secret").display(),
        ),
    )
    .expect("jail.local");
    fleet.hosts[0]
        .sandbox
        .client(&["reload", "--restart", "testauth"])
        .expect("reload");
}

async fn events(fleet: &TestFleet, query: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = fleet.hub.url(&format!(
            "/api/events/bans?serverId={}&limit=1000{query}",
            fleet.hosts[0].id
        ));
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page: Value = fleet
            .hub
            .client()
            .get(&url)
            .send()
            .await
            .expect("events")
            .json()
            .await
            .expect("json");
        all.extend(page["events"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
}

#[tokio::test]
async fn a_ban_from_log_lines_reaches_the_api_and_the_live_stream() {
    let fleet = start(&[]).await;
    attach_action(&fleet);

    // Listen to the live stream before anything happens.
    let stream = fleet
        .hub
        .client()
        .get(fleet.hub.url("/api/events/stream"))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), StatusCode::OK);
    let live = Arc::new(Mutex::new(String::new()));
    let reader = {
        let live = live.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            while let Ok(Some(chunk)) = stream.chunk().await {
                live.lock().await.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
    };

    let started = Instant::now();
    let log = fleet.hosts[0].sandbox.log_path("testauth");
    fleet.hosts[0]
        .sandbox
        .append_failures(&log, "203.0.113.50", 3)
        .expect("log lines");
    let ban = wait_for_async(DEADLINE, "the ban event in the API", || async {
        events(&fleet, "&ip=203.0.113.50&kind=ban")
            .await
            .into_iter()
            .next()
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}\n{}",
            fleet.hosts[0].agent.logs(),
            fleet.hosts[0].sandbox.logs()
        )
    });
    let latency = started.elapsed();
    eprintln!("log lines to stored ban event: {latency:?}");
    assert_eq!(ban["jail"], "testauth");
    assert_eq!(ban["source"], "action");
    assert_eq!(ban["failures"], 3, "{ban}");
    assert!(
        ban["logs"].as_array().is_some_and(|l| l
            .iter()
            .any(|line| line.as_str().is_some_and(|t| t.contains("Failed login")))),
        "{ban}"
    );
    wait_until_async(
        Duration::from_secs(5),
        "the ban on the live stream",
        || async { live.lock().await.contains("203.0.113.50") },
    )
    .await
    .expect("live");

    // Unbanning from the API: fail2ban's action reports the unban, and it arrives too.
    let response = fleet
        .hub
        .client()
        .post(fleet.hub.url("/api/jails/testauth/unban/203.0.113.50"))
        .send()
        .await
        .expect("unban");
    assert_eq!(response.status(), StatusCode::OK);
    wait_for_async(DEADLINE, "the unban event", || async {
        events(&fleet, "&ip=203.0.113.50&kind=unban")
            .await
            .into_iter()
            .next()
    })
    .await
    .expect("unban event");
    wait_until_async(
        Duration::from_secs(5),
        "the unban on the live stream",
        || async { streamed(&live.lock().await, "203.0.113.50", "unban") },
    )
    .await
    .expect("live unban");
    assert!(streamed(&live.lock().await, "203.0.113.50", "ban"));
    reader.abort();
}

/// Whether the SSE text holds an event for `ip` of `kind` (its `data:` lines are event JSON).
fn streamed(sse: &str, ip: &str, kind: &str) -> bool {
    sse.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .any(|event| event["ip"] == ip && event["kind"] == kind)
}

/// Posts `count` ban callbacks for distinct addresses to the relay, 32 at a time; returns the
/// addresses the relay acknowledged (200: durable in the spool).
async fn burst(
    relay: Arc<Mutex<SocketAddr>>,
    secret: String,
    count: usize,
    acked: Arc<AtomicUsize>,
) -> BTreeSet<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let addresses: Vec<String> = (0..count)
        .map(|i| format!("10.{}.{}.{}", i / 62_500, (i / 250) % 250, i % 250 + 1))
        .collect();
    let results = futures::stream::iter(addresses)
        .map(|ip| {
            let client = client.clone();
            let relay = relay.clone();
            let secret = secret.clone();
            let acked = acked.clone();
            async move {
                let addr = *relay.lock().await;
                let body = json!({
                    "serverId": "ignored", "ip": ip, "jail": "testauth", "hostname": "web-1",
                    "failures": 3, "logs": [format!("Failed login for root from {ip}")]
                });
                let ok = client
                    .post(format!("http://{addr}/api/ban"))
                    .header("X-Callback-Secret", &secret)
                    .json(&body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::OK);
                if ok {
                    acked.fetch_add(1, Ordering::SeqCst);
                }
                (ip, ok)
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    results
        .into_iter()
        .filter_map(|(ip, ok)| ok.then_some(ip))
        .collect()
}

fn assert_exactly_once(stored: &[Value], acked: &BTreeSet<String>) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for event in stored {
        *seen
            .entry(event["ip"].as_str().expect("ip").to_owned())
            .or_default() += 1;
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(duplicated.is_empty(), "events stored twice: {duplicated:?}");
    let missing: Vec<_> = acked
        .iter()
        .filter(|ip| !seen.contains_key(*ip))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged events lost ({} of {}): {missing:?}",
        acked.iter().filter(|ip| !seen.contains_key(*ip)).count(),
        acked.len()
    );
}

#[tokio::test]
async fn a_hub_outage_during_a_burst_loses_and_duplicates_nothing() {
    let mut fleet = start(&[]).await;
    let relay = Arc::new(Mutex::new(
        relay_addr(&fleet.hosts[0].state_dir()).expect("relay"),
    ));
    let secret = relay_secret(&fleet.hosts[0].state_dir()).expect("secret");
    let acked = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(burst(relay, secret, BURST, acked.clone()));

    // A crash of the hub a fifth of the way in, back after the burst.
    wait_until_async(DEADLINE, "a fifth of the burst", || {
        let acked = acked.clone();
        async move { acked.load(Ordering::SeqCst) >= BURST / 5 }
    })
    .await
    .expect("burst started");
    fleet.hub.kill().expect("hub killed");
    let acked_set = task.await.expect("burst");
    assert_eq!(
        acked_set.len(),
        BURST,
        "the relay must accept every callback while the hub is away"
    );
    fleet.hub.restart().expect("hub restarts");
    wait_online(&fleet).await;

    let url_query = "&kind=ban";
    let stored = wait_for_async(Duration::from_secs(120), "every event stored", || async {
        let stored = events(&fleet, url_query).await;
        (stored.len() >= BURST).then_some(stored)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));
    assert_eq!(stored.len(), BURST);
    assert_exactly_once(&stored, &acked_set);
}

#[tokio::test]
async fn an_agent_killed_mid_burst_loses_nothing_it_acknowledged() {
    // A fixed relay port, so the burst finds the agent again after its restart.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut fleet = start(&[("BANHUB_AGENT_RELAY__LISTEN", listen.as_str())]).await;
    let relay = Arc::new(Mutex::new(
        relay_addr(&fleet.hosts[0].state_dir()).expect("relay"),
    ));
    let secret = relay_secret(&fleet.hosts[0].state_dir()).expect("secret");
    let acked = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(burst(relay, secret, BURST, acked.clone()));

    wait_until_async(DEADLINE, "a third of the burst", || {
        let acked = acked.clone();
        async move { acked.load(Ordering::SeqCst) >= BURST / 3 }
    })
    .await
    .expect("burst started");
    fleet.hosts[0].agent.kill().expect("agent killed");
    // Back while the burst goes on; callbacks sent while it was down fail, as they would for fail2ban.
    fleet.hosts[0].agent.restart().expect("agent restarts");
    let acked_set = task.await.expect("burst");
    assert!(acked_set.len() >= BURST / 3, "{}", acked_set.len());

    let stored = wait_for_async(
        Duration::from_secs(120),
        "every acknowledged event stored",
        || async {
            let stored = events(&fleet, "&kind=ban").await;
            let ips: BTreeSet<&str> = stored.iter().filter_map(|e| e["ip"].as_str()).collect();
            acked_set
                .iter()
                .all(|ip| ips.contains(ip.as_str()))
                .then_some(stored)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.hosts[0].agent.logs()));
    assert_exactly_once(&stored, &acked_set);
    eprintln!(
        "acknowledged {} of {BURST}; stored {} (durable but unanswered ones may be stored too)",
        acked_set.len(),
        stored.len()
    );
}
