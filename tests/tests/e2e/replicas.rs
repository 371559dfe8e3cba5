//! Two hub replicas on one PostgreSQL, behind a TCP balancer, with real agents and fail2ban servers
//! spread over both: a ban asked of replica A for an agent that replica B holds reaches that agent's
//! fail2ban; the live stream on A shows every agent's events; the singleton jobs run on one replica
//! at a time (the alert worker too, so every event is alerted on once, with the rules saved on
//! either replica); and when B is killed its agents move to A with no event lost or stored twice.
//!
//! The replicas share the internal CA through one CA directory (`cluster.ca_dir`): the first replica
//! creates it, the second loads it, and the database records its fingerprint so a replica with
//! another CA refuses to join.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use banhub_tests::TestHost;
use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::balancer::Balancer;
use banhub_tests::enrolled::EnrolledAgent;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::postgres::PostgresServer;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use banhub_tests::webhook::WebhookReceiver;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

const DEADLINE: Duration = Duration::from_secs(60);
const HOSTS: usize = 4;
/// Events each host reports while replica B is killed.
const BURST: usize = 150;

struct Cluster {
    a: HubProcess,
    b: HubProcess,
    _balancer: Balancer,
    hosts: Vec<TestHost>,
    _ca: tempfile::TempDir,
    pg: PostgresServer,
}

impl Cluster {
    fn logs(&self) -> String {
        let mut out = format!(
            "--- replica a ---\n{}\n--- replica b ---\n{}\n{}",
            self.a.logs(),
            self.b.logs(),
            self.pg.logs()
        );
        for host in &self.hosts {
            out.push_str(&format!(
                "\n--- agent {} ---\n{}",
                host.name,
                host.agent.logs()
            ));
        }
        out
    }
}

fn replica(url: &str, ca: &std::path::Path, id: &str, balancer: &Balancer) -> HubProcess {
    HubProcess::builder()
        .database_url(url)
        .ca_dir(ca)
        .env("BANHUB_CLUSTER__REPLICA_ID", id)
        .env("BANHUB_CLUSTER__LEASE_TTL_SECS", "3")
        .env("BANHUB_CLUSTER__SWEEP_INTERVAL_MS", "200")
        .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
        .arg("--grpc-advertise")
        .arg(balancer.addr().to_string())
        .start()
        .unwrap_or_else(|e| panic!("replica {id} starts: {e:#}"))
}

async fn get(hub: &HubProcess, path: &str) -> Value {
    hub.client()
        .get(hub.url(path))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

async fn start() -> Cluster {
    let pg = PostgresServer::start().unwrap_or_else(|e| panic!("PostgreSQL: {e:#}"));
    let url = pg
        .create_database("banhub_replicas")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", pg.logs()));
    let ca = tempfile::tempdir().expect("CA directory");
    let balancer = Balancer::start().expect("balancer");
    let a = replica(&url, ca.path(), "a", &balancer);
    let b = replica(&url, ca.path(), "b", &balancer);
    balancer.set_backends(&[a.grpc_addr(), b.grpc_addr()]);

    let mut hosts = Vec::new();
    for i in 0..HOSTS {
        let name = format!("web-{i}");
        // Any replica answers any call: the servers are created on both.
        let hub = if i % 2 == 0 { &a } else { &b };
        let sandbox = Fail2banSandbox::start(&name).expect("fail2ban sandbox");
        let EnrolledAgent {
            server_id,
            agent,
            state,
        } = EnrolledAgent::register(
            &hub.client(),
            &hub.url(""),
            &name,
            &sandbox,
            &[("BANHUB_AGENT_LINK__BACKOFF_INITIAL_MS", "100")],
        )
        .await
        .expect("agent enrolled and started");
        hosts.push(TestHost {
            name,
            id: server_id,
            sandbox,
            agent,
            state,
        });
    }
    let cluster = Cluster {
        a,
        b,
        _balancer: balancer,
        hosts,
        _ca: ca,
        pg,
    };
    holders(&cluster, |h| h.len() == HOSTS).await;
    cluster
}

/// Server id → holding replica, as replica A sees it, once `ok` accepts it.
async fn holders(
    cluster: &Cluster,
    ok: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let result = wait_for_async(DEADLINE, "the agents' sessions as expected", || async {
        let servers = cluster
            .a
            .client()
            .get(cluster.a.url("/api/servers"))
            .send()
            .await
            .ok()?
            .json::<Value>()
            .await
            .ok()?;
        let held: BTreeMap<String, String> = servers
            .as_array()?
            .iter()
            .filter(|s| s["status"] == "online")
            .filter_map(|s| {
                Some((
                    s["id"].as_str()?.to_owned(),
                    s["replica"].as_str()?.to_owned(),
                ))
            })
            .collect();
        ok(&held).then_some(held)
    })
    .await;
    result.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()))
}

fn banned_in(sandbox: &Fail2banSandbox) -> String {
    sandbox
        .client(&["get", "testauth", "banned"])
        .expect("fail2ban answers")
}

/// Job name → replica → runs, from replica A.
async fn job_runs(hub: &HubProcess) -> HashMap<String, HashMap<String, u64>> {
    let view = get(hub, "/api/cluster").await;
    let mut runs: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for job in view["jobs"].as_array().cloned().unwrap_or_default() {
        runs.entry(job["job"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .insert(
                job["replica"].as_str().unwrap_or_default().to_owned(),
                job["runs"].as_u64().unwrap_or(0),
            );
    }
    runs
}

/// Job name → replica → terms as leader, from replica A.
async fn job_terms(hub: &HubProcess) -> HashMap<String, HashMap<String, u64>> {
    let view = get(hub, "/api/cluster").await;
    let mut terms: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for job in view["jobs"].as_array().cloned().unwrap_or_default() {
        terms
            .entry(job["job"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .insert(
                job["replica"].as_str().unwrap_or_default().to_owned(),
                job["terms"].as_u64().unwrap_or(0),
            );
    }
    terms
}

/// The alert digests, through `hub`'s API: (events, first event id, last event id) of each.
async fn digests(hub: &HubProcess) -> Vec<(u64, i64, i64)> {
    let page = get(hub, "/api/alerts/digests?limit=500").await;
    page["digests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d["events"].as_u64().expect("events"),
                d["firstEventId"].as_i64().expect("first"),
                d["lastEventId"].as_i64().expect("last"),
            )
        })
        .collect()
}

/// Waits until the digests hold `total` events and checks that no two digests share an event.
async fn alerted_once(cluster: &Cluster, total: u64) {
    let found = wait_for_async(DEADLINE, "every event in a digest", || async {
        let found = digests(&cluster.a).await;
        (found.iter().map(|d| d.0).sum::<u64>() >= total).then_some(found)
    })
    .await;
    let mut found = match found {
        Ok(found) => found,
        Err(e) => panic!("{e}\n{:?}\n{}", digests(&cluster.a).await, cluster.logs()),
    };
    assert_eq!(
        found.iter().map(|d| d.0).sum::<u64>(),
        total,
        "events alerted on: {found:?}"
    );
    found.sort_by_key(|d| d.1);
    for pair in found.windows(2) {
        assert!(pair[0].2 < pair[1].1, "two digests share events: {found:?}");
    }
}

/// Every event of `server` stored, through replica A's API.
async fn stored_events(hub: &HubProcess, server: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/events/bans?serverId={server}&limit=1000");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = get(hub, &path).await;
        all.extend(page["events"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
}

/// Reports `ips` as bans through the agent's relay; returns the ones the relay acknowledged (they
/// are durable in the agent's spool and must reach the hub).
async fn report(host: &TestHost, ips: Vec<String>) -> BTreeSet<String> {
    let relay = relay_addr(&host.state_dir()).expect("relay address");
    let secret = relay_secret(&host.state_dir()).expect("relay secret");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let results = futures::stream::iter(ips)
        .map(|ip| {
            let client = client.clone();
            let secret = secret.clone();
            let hostname = host.name.clone();
            async move {
                let body = json!({
                    "serverId": "ignored", "ip": ip, "jail": "testauth", "hostname": hostname,
                    "failures": 3, "logs": [format!("Failed login for root from {ip}")]
                });
                let ok = client
                    .post(format!("http://{relay}/api/ban"))
                    .header("X-Callback-Secret", &secret)
                    .json(&body)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == StatusCode::OK);
                (ip, ok)
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    results
        .into_iter()
        .filter_map(|(ip, ok)| ok.then_some(ip))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_agents_commands_events_and_jobs() {
    let mut cluster = start().await;
    let held = holders(&cluster, |h| h.len() == HOSTS).await;
    let on = |replica: &str| -> Vec<usize> {
        (0..HOSTS)
            .filter(|i| held.get(&cluster.hosts[*i].id).map(String::as_str) == Some(replica))
            .collect()
    };
    let (on_a, on_b) = (on("a"), on("b"));
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "the balancer spreads the agents over both replicas: {held:?}"
    );
    let cluster_view = get(&cluster.a, "/api/cluster").await;
    assert_eq!(cluster_view["database"], "postgres", "{cluster_view}");
    let replicas: BTreeSet<&str> = cluster_view["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(replicas, BTreeSet::from(["a", "b"]), "{cluster_view}");

    // Alert rules saved on B are the ones A uses, and the other way round.
    let receiver = WebhookReceiver::start().await.expect("webhook receiver");
    let current = get(&cluster.b, "/api/settings").await;
    let doc = json!({
        "version": current["version"],
        "alerts": {"digestWindowSecs": 1,
            "webhooks": [{"name": "hook", "format": "json", "url": receiver.url("/h")}],
            "rules": [{"name": "all", "email": false, "webhooks": ["hook"]}]}
    });
    let response = cluster
        .b
        .client()
        .post(cluster.b.url("/api/settings"))
        .json(&doc)
        .send()
        .await
        .expect("settings");
    assert_eq!(response.status(), StatusCode::OK);
    let saved: Value = response.json().await.expect("json");
    wait_until_async(DEADLINE, "the settings saved on B on A", || async {
        get(&cluster.a, "/api/settings").await["version"] == saved["version"]
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));

    // A ban asked of replica A for an agent held by B reaches that agent's fail2ban only.
    let target = &cluster.hosts[on_b[0]];
    let response = cluster
        .a
        .client()
        .post(cluster.a.url("/api/jails/testauth/ban/192.0.2.10"))
        .header("X-BanDaemon-Server", &target.id)
        .send()
        .await
        .expect("ban");
    let status = response.status();
    let body: Value = response.json().await.expect("json");
    assert_eq!(status, StatusCode::OK, "{body}\n{}", cluster.logs());
    assert_eq!(body["changed"], true, "{body}");
    assert!(banned_in(&target.sandbox).contains("192.0.2.10"));
    for (i, host) in cluster.hosts.iter().enumerate() {
        if i != on_b[0] {
            assert!(
                !banned_in(&host.sandbox).contains("192.0.2.10"),
                "{}",
                host.name
            );
        }
    }
    // And the other way round: B relays to A.
    let target_a = &cluster.hosts[on_a[0]];
    let response = cluster
        .b
        .client()
        .post(cluster.b.url("/api/jails/testauth/ban/192.0.2.11"))
        .header("X-BanDaemon-Server", &target_a.id)
        .send()
        .await
        .expect("ban");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(banned_in(&target_a.sandbox).contains("192.0.2.11"));

    // Replica A's live stream, opened before any event.
    let stream = cluster
        .a
        .client()
        .get(cluster.a.url("/api/events/stream"))
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
    let mut acked: Vec<BTreeSet<String>> = Vec::new();
    for (i, host) in cluster.hosts.iter().enumerate() {
        acked.push(report(host, vec![format!("198.51.100.{}", i + 1)]).await);
    }
    let seen_all = wait_until_async(
        DEADLINE,
        "every agent's event on A's live stream",
        || async {
            let text = live.lock().await;
            (0..HOSTS).all(|i| text.contains(&format!("198.51.100.{}", i + 1)))
        },
    )
    .await;
    if let Err(e) = seen_all {
        panic!("{e}\n{}\n{}", live.lock().await, cluster.logs());
    }
    // One replica matches alerts; every agent's event is in exactly one digest.
    alerted_once(&cluster, HOSTS as u64).await;
    let alert_leaders: Vec<String> = job_terms(&cluster.a)
        .await
        .remove("alerts")
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, terms)| *terms > 0)
        .map(|(replica, _)| replica)
        .collect();
    assert_eq!(
        alert_leaders.len(),
        1,
        "one alert worker: {alert_leaders:?}"
    );

    // The sweeper runs on one replica at a time: over a while, one count moves.
    let sweeper = |runs: &HashMap<String, HashMap<String, u64>>| {
        runs.get("sweeper").cloned().unwrap_or_default()
    };
    let before = wait_for_async(DEADLINE, "sweeper runs", || async {
        let runs = sweeper(&job_runs(&cluster.a).await);
        (runs.values().sum::<u64>() >= 3).then_some(runs)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let after = wait_for_async(DEADLINE, "more sweeper runs", || async {
        let runs = sweeper(&job_runs(&cluster.a).await);
        (runs.values().sum::<u64>() >= before.values().sum::<u64>() + 5).then_some(runs)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let moved: Vec<&String> = after
        .iter()
        .filter(|(replica, runs)| before.get(*replica).copied().unwrap_or(0) < **runs)
        .map(|(replica, _)| replica)
        .collect();
    assert_eq!(
        moved.len(),
        1,
        "one sweeper at a time: {before:?} → {after:?}"
    );
    let leader = moved[0].clone();

    // Kill B in the middle of a burst on every host.
    let burst: Vec<Vec<String>> = (0..HOSTS)
        .map(|h| {
            (0..BURST)
                .map(|n| format!("10.{h}.{}.{}", n / 250, n % 250 + 1))
                .collect()
        })
        .collect();
    let hosts = &cluster.hosts;
    let replica_b = &mut cluster.b;
    let reporting: Vec<_> = hosts
        .iter()
        .zip(burst)
        .map(|(host, ips)| report(host, ips))
        .collect();
    let reports = futures::future::join_all(reporting);
    let killer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        replica_b.kill().expect("kill replica b");
    };
    let (reports, ()) = tokio::join!(reports, killer);
    for (set, more) in acked.iter_mut().zip(reports) {
        set.extend(more);
    }

    // B's agents come back through the balancer to A, which holds everyone.
    let held = holders(&cluster, |h| {
        h.len() == HOSTS && h.values().all(|replica| replica == "a")
    })
    .await;
    assert_eq!(held.len(), HOSTS);

    // No acknowledged event lost, none stored twice, for every host.
    for (host, acked) in cluster.hosts.iter().zip(&acked) {
        let stored = wait_for_async(DEADLINE, "every acknowledged event stored", || async {
            let stored = stored_events(&cluster.a, &host.id).await;
            let ips: BTreeSet<String> = stored
                .iter()
                .filter_map(|e| e["ip"].as_str().map(str::to_owned))
                .collect();
            acked.is_subset(&ips).then_some(stored)
        })
        .await
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", host.name, cluster.logs()));
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for event in &stored {
            *seen.entry(event["ip"].as_str().expect("ip")).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "{}: stored twice: {twice:?}", host.name);
        assert_eq!(stored.len(), acked.len(), "{}", host.name);
    }
    // A's live stream showed the moved agents' burst too.
    let moved_host = &cluster.hosts[on_b[0]];
    let last_ip = format!("10.{}.0.{}", on_b[0], BURST.min(250));
    if acked[on_b[0]].contains(&last_ip) {
        wait_until_async(
            DEADLINE,
            "the moved agent's events on A's stream",
            || async { live.lock().await.contains(&last_ip) },
        )
        .await
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", moved_host.name, cluster.logs()));
    }

    // Commands reach the moved agents through A now.
    let response = cluster
        .a
        .client()
        .post(cluster.a.url("/api/jails/testauth/ban/192.0.2.12"))
        .header("X-BanDaemon-Server", &moved_host.id)
        .send()
        .await
        .expect("ban");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(banned_in(&moved_host.sandbox).contains("192.0.2.12"));

    // Alerts go on, on A (it took over if B led them): every stored event alerted on once.
    wait_until_async(DEADLINE, "A leads the alerts", || async {
        job_terms(&cluster.a)
            .await
            .get("alerts")
            .and_then(|terms| terms.get("a"))
            .is_some_and(|terms| *terms > 0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let stored: usize = acked.iter().map(BTreeSet::len).sum();
    alerted_once(&cluster, stored as u64).await;

    // The sweeper goes on, on A alone (it took over if B led it).
    let runs_then = sweeper(&job_runs(&cluster.a).await);
    wait_until_async(DEADLINE, "the sweeper on A after B died", || async {
        let now = sweeper(&job_runs(&cluster.a).await);
        now.get("a").copied().unwrap_or(0) > runs_then.get("a").copied().unwrap_or(0) + 3
    })
    .await
    .unwrap_or_else(|e| panic!("{e} (leader before: {leader})\n{}", cluster.logs()));
    reader.abort();
}

#[tokio::test]
async fn a_replica_with_another_ca_refuses_to_join() {
    let pg = PostgresServer::start().unwrap_or_else(|e| panic!("PostgreSQL: {e:#}"));
    let url = pg.create_database("banhub_other_ca").expect("database");
    let balancer = Balancer::start().expect("balancer");
    let shared = tempfile::tempdir().expect("CA");
    let _a = replica(&url, shared.path(), "a", &balancer);
    let other = tempfile::tempdir().expect("CA");
    let err = HubProcess::builder()
        .database_url(&url)
        .ca_dir(other.path())
        .env("BANHUB_CLUSTER__REPLICA_ID", "b")
        .start()
        .expect_err("refused");
    let message = format!("{err:#}");
    assert!(message.contains("same CA"), "{message}");
}
