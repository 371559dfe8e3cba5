//! Nothing acknowledged is lost and the hub heals: the database is made unwritable (SQLite's files
//! immutable, PostgreSQL stopped) during a burst of agent and direct callbacks, then given back.
//! Every direct callback the hub answered 200 and every event an agent's relay accepted is stored
//! exactly once; a refused direct callback was a 503 with `Retry-After` and is stored once sent
//! again (as a sender retries); `/readyz` says not ready during the fault and ready after; settings
//! can be saved again and the agent is online, all without restarting the hub.

mod faults;
mod senders;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::enrolled::wait_server_online;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use banhub_tests::{Fail2banSandbox, HubProcess, PostgresServer, TestFleet};
use reqwest::StatusCode;
use serde_json::{Value, json};

use faults::{ImmutableFiles, StoppedPostgres, StoreFault};
use senders::{DirectAnswer, address, direct_ban, relay_ban, steady};

/// How long the database stays unwritable.
const FAULT_HELD: Duration = Duration::from_secs(15);
/// How long the hub may take to notice the fault, and to heal after it.
const NOTICE: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_secs(60);
/// Second octets of the burst's addresses: `10.200.x.y` direct, `10.100.x.y` through the agent.
const DIRECT_PREFIX: u8 = 200;
const AGENT_PREFIX: u8 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_sqlite_database_loses_nothing_acknowledged_and_heals_without_a_restart() {
    let mut fleet = TestFleet::start(&["faults-sqlite"])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut fault = ImmutableFiles::new(&fleet.hub.data_dir().join("banhub.db"));
    scenario(&mut fleet, &mut fault).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_restart_loses_nothing_acknowledged_and_the_hub_reconnects() {
    let mut postgres =
        PostgresServer::start().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_store_faults")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let hub = HubProcess::builder()
        .database_url(url)
        .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
        .start()
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut fleet = TestFleet {
        hub,
        hosts: Vec::new(),
    };
    let sandbox = Fail2banSandbox::start("faults-pg").unwrap_or_else(|e| panic!("{e:#}"));
    fleet
        .add_host("faults-pg", sandbox, &[])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    scenario(&mut fleet, &mut StoppedPostgres(&mut postgres)).await;
}

async fn scenario(fleet: &mut TestFleet, fault: &mut dyn StoreFault) {
    let pid = fleet.hub.pid().expect("the hub runs");
    let hub_url = fleet.hub.http_url();
    let (direct_server, secret) = direct_server(fleet).await;
    let agent_server = fleet.host(0).id.as_str().to_owned();
    let state_dir = fleet.host(0).state_dir();
    let relay = relay_addr(&state_dir).expect("relay address");
    let relay_key = relay_secret(&state_dir).expect("relay secret");
    assert_eq!(readyz(fleet).await, StatusCode::OK, "{}", fleet.logs());

    // Both kinds of callback arrive at a steady pace before, during and after the fault, until the
    // hub is ready again.
    let stop = Arc::new(AtomicBool::new(false));
    let client = senders::client();
    let direct = {
        let (client, hub_url, secret) = (client.clone(), hub_url.clone(), secret.clone());
        steady(Duration::from_millis(200), 1, stop.clone(), move |n| {
            let (client, hub_url, secret) = (client.clone(), hub_url.clone(), secret.clone());
            async move {
                let ip = address(DIRECT_PREFIX, n);
                let answer = direct_ban(&client, &hub_url, &secret, &ip).await;
                (ip, answer)
            }
        })
    };
    let agent = {
        let (client, relay_key) = (client.clone(), relay_key.clone());
        steady(Duration::from_millis(100), 5, stop.clone(), move |n| {
            let (client, relay_key) = (client.clone(), relay_key.clone());
            async move {
                let ip = address(AGENT_PREFIX, n);
                let accepted = relay_ban(&client, relay, &relay_key, &ip).await;
                (ip, accepted)
            }
        })
    };
    wait_until_async(DEADLINE, "the first callbacks to be stored", || async {
        stored(fleet, &direct_server).await.len() >= 3
            && !stored(fleet, &agent_server).await.is_empty()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    fault.engage().unwrap_or_else(|e| panic!("{e:#}"));
    let engaged = Instant::now();
    let noticed = wait_until_async(NOTICE, "/readyz to say not ready", || async {
        readyz(fleet).await == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    tokio::time::sleep(FAULT_HELD.saturating_sub(engaged.elapsed())).await;
    fault.release().unwrap_or_else(|e| panic!("{e:#}"));
    noticed.unwrap_or_else(|e| {
        panic!(
            "{e}: it said ready while the database could not be written\n{}",
            fleet.logs()
        )
    });

    // The hub heals by itself: ready again, settings can be saved, the agent is online.
    wait_until_async(DEADLINE, "/readyz to say ready again", || async {
        readyz(fleet).await == StatusCode::OK
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    stop.store(true, Ordering::SeqCst);
    let direct = direct.await.expect("direct callbacks");
    let agent = agent.await.expect("agent callbacks");
    let (status, saved) = save_settings(fleet).await;
    assert_eq!(status, StatusCode::OK, "{saved}\n{}", fleet.logs());
    wait_server_online(&fleet.hub.client(), &hub_url, &agent_server, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    // A direct callback the hub could not store was refused so that its sender retries.
    let refused: Vec<&(String, DirectAnswer)> = direct
        .iter()
        .filter(|(_, answer)| !answer.accepted())
        .collect();
    assert!(
        !refused.is_empty(),
        "every direct callback was accepted while the database could not be written\n{}",
        fleet.logs()
    );
    for (ip, answer) in &refused {
        assert_eq!(
            answer.status,
            Some(StatusCode::SERVICE_UNAVAILABLE),
            "{ip}: {answer:?}\n{}",
            fleet.logs()
        );
        assert_eq!(answer.body["code"], "store_unavailable", "{ip}: {answer:?}");
        assert!(answer.retry_after.is_some(), "{ip}: {answer:?}");
        assert!(
            answer
                .content_type
                .as_deref()
                .is_some_and(|t| t.starts_with("application/problem+json")),
            "{ip}: {answer:?}"
        );
    }

    // Sent again, as a sender would, each refused callback is accepted.
    let mut acknowledged: BTreeMap<String, i64> = direct
        .iter()
        .filter_map(|(ip, answer)| Some((ip.clone(), answer.id?)))
        .collect();
    for (ip, _) in refused {
        let id = wait_for_async(
            DEADLINE,
            "a retried direct callback to be accepted",
            || async { direct_ban(&client, &hub_url, &secret, ip).await.id },
        )
        .await
        .unwrap_or_else(|e| panic!("{ip}: {e}\n{}", fleet.logs()));
        acknowledged.insert(ip.clone(), id);
    }

    // Every acknowledged direct callback is stored once, under the id it was answered with.
    let stored_direct = stored(fleet, &direct_server).await;
    assert_once(&stored_direct, acknowledged.keys(), "direct");
    for (ip, id) in &acknowledged {
        assert_eq!(stored_direct[ip], vec![*id], "{ip}");
    }

    // Every event the relay accepted reaches the hub from the agent's spool, once.
    let relayed: Vec<&String> = agent
        .iter()
        .filter(|(_, ok)| *ok)
        .map(|(ip, _)| ip)
        .collect();
    assert!(
        !relayed.is_empty(),
        "the relay accepted nothing\n{}",
        fleet.logs()
    );
    wait_until_async(DEADLINE, "every relayed event to be stored", || async {
        let stored = stored(fleet, &agent_server).await;
        relayed.iter().all(|ip| stored.contains_key(*ip))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let stored_agent = stored(fleet, &agent_server).await;
    assert_once(&stored_agent, relayed.into_iter(), "agent");

    // The counts stored with the events agree with the events.
    assert_counted(fleet, &direct_server, stored_direct.len()).await;
    assert_counted(fleet, &agent_server, stored_agent.len()).await;

    eprintln!(
        "direct callbacks: {} sent, {} refused during the fault and accepted when sent again; \
         agent callbacks: {} relayed",
        direct.len(),
        direct.len() - direct.iter().filter(|(_, a)| a.accepted()).count(),
        agent.iter().filter(|(_, ok)| *ok).count()
    );
    assert_eq!(fleet.hub.pid(), Some(pid), "the hub was restarted");
    assert!(fleet.hub.is_running(), "the hub exited\n{}", fleet.logs());
}

/// A server without an agent and its callback secret.
async fn direct_server(fleet: &TestFleet) -> (String, String) {
    let (status, created) = fleet
        .post("/api/servers", None, &json!({"name": "direct-faults"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["server"]["id"].as_str().expect("id").to_owned();
    let (status, issued) = fleet
        .post(
            &format!("/api/servers/{id}/callback-secret"),
            None,
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    (id, issued["secret"].as_str().expect("secret").to_owned())
}

async fn readyz(fleet: &TestFleet) -> StatusCode {
    fleet
        .hub
        .client()
        .get(fleet.hub.url("/readyz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_or(StatusCode::REQUEST_TIMEOUT, |r| r.status())
}

/// Saves the settings as they are (a write of the settings document).
async fn save_settings(fleet: &TestFleet) -> (StatusCode, Value) {
    let (status, doc) = fleet.get("/api/settings", None).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    fleet.post("/api/settings", None, &doc).await
}

/// The ids of `server`'s stored ban events by address (empty while the hub cannot read them).
async fn stored(fleet: &TestFleet, server: &str) -> BTreeMap<String, Vec<i64>> {
    let mut by_ip: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/events/bans?serverId={server}&kind=ban&limit=1000");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = fleet.get(&path, None).await;
        if status != StatusCode::OK {
            return BTreeMap::new();
        }
        for event in page["events"].as_array().into_iter().flatten() {
            if let (Some(ip), Some(id)) = (event["ip"].as_str(), event["id"].as_i64()) {
                by_ip.entry(ip.to_owned()).or_default().push(id);
            }
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return by_ip,
        }
    }
}

/// `server`'s ban count of the last day is `bans`.
async fn assert_counted(fleet: &TestFleet, server: &str, bans: usize) {
    let (status, stats) = fleet
        .get(&format!("/api/events/bans/stats?serverId={server}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(
        stats["totals"]["bans"].as_u64(),
        u64::try_from(bans).ok(),
        "{stats}"
    );
}

/// Every address of `acknowledged` is stored exactly once, and no address twice.
fn assert_once<'a>(
    stored: &BTreeMap<String, Vec<i64>>,
    acknowledged: impl Iterator<Item = &'a String>,
    what: &str,
) {
    let doubled: Vec<_> = stored
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .take(5)
        .collect();
    assert!(
        doubled.is_empty(),
        "{what} events stored twice: {doubled:?}"
    );
    let acknowledged: Vec<&String> = acknowledged.collect();
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|ip| !stored.contains_key(**ip))
        .collect();
    assert!(
        lost.is_empty(),
        "{what}: {} of {} acknowledged events lost, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
}
