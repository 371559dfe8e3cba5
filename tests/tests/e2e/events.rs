//! The hub's event path against an in-process hub on port 0, once on SQLite and once on PostgreSQL
//! (`sqlite::<name>`, `postgres::<name>`): idempotent batch ingest and the agent cursor, the events
//! API (filters, cursor paging deep into history, CSV), stats and insights from the rollups, the
//! live stream, direct callbacks with their secrets, and retention.

use banhub_tests::backends::{Backend, TestDatabase, create_server, store_pages};
use banhub_tests::on_both_backends;
use std::collections::BTreeSet;
use std::time::Duration;

use banhub::config::Config;
use banhub::domain::events::{
    BanDuration, BanFacts, EventBody, EventFilter, EventKind, EventSource, GapFacts, GapReason,
    IpOrCidr, JailName, Logs, NewEvent, SearchText, SeqRange,
};
use banhub::domain::{AgentId, ServerId};
use banhub::store::Store;
use banhub_tests::TestHub;
use banhub_tests::client::read_checked as read;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// A hub on `backend`; the pool is kept small so that tests see the backends under contention.
async fn start(backend: Backend) -> TestHub {
    start_with(backend, |_| {}).await
}

/// Like [`start`], with `adjust` applied to the configuration.
async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Config) + 'static) -> TestHub {
    TestHub::builder()
        .backend(backend)
        .configure(|config| config.database.max_connections = 4)
        .configure(adjust)
        .start()
        .await
}

/// What these tests do to a hub beside its API.
trait EventHub {
    /// A registered server.
    async fn server(&self, name: &str) -> ServerId;
    /// Ingests `batch` as `agent` of `server` would send it.
    async fn ingest(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        batch: Vec<(u64, NewEvent)>,
    ) -> u64;
    /// Every event matching `query`, walking the pages `page` at a time.
    async fn all(&self, query: &str, page: usize) -> Vec<Value>;
}

impl EventHub for TestHub {
    async fn server(&self, name: &str) -> ServerId {
        let created = self.api.create_server(name).await.expect("a server");
        ServerId::parse(&created.server.id).expect("server id")
    }

    async fn ingest(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        batch: Vec<(u64, NewEvent)>,
    ) -> u64 {
        self.state
            .events
            .ingest_batch(server, agent, epoch, batch)
            .await
            .expect("ingest")
    }

    async fn all(&self, query: &str, page: usize) -> Vec<Value> {
        self.api
            .all_events_json(query, page)
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("in range")
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn facts(ip: &str, jail: &str) -> BanFacts {
    BanFacts {
        ip: IpOrCidr::parse(ip).expect("ip"),
        jail: JailName::parse(jail).expect("jail"),
        hostname: "web-1".to_owned(),
        failures: 5,
        logs: Logs::capped([format!("sshd: Failed password for root from {ip}")]),
        ban_time: Some(1_790_000_000),
        ban_duration: Some(BanDuration::Seconds(600)),
        ban_count: Some(1),
    }
}

fn ban(ip: &str, jail: &str, ms: i64) -> NewEvent {
    NewEvent {
        occurred_at: at(ms),
        source: EventSource::Action,
        body: EventBody::Ban(facts(ip, jail)),
    }
}

fn unban(ip: &str, jail: &str, ms: i64) -> NewEvent {
    NewEvent {
        occurred_at: at(ms),
        source: EventSource::Action,
        body: EventBody::Unban(facts(ip, jail)),
    }
}

fn numbered(first: u64, events: Vec<NewEvent>) -> Vec<(u64, NewEvent)> {
    (first..).zip(events).collect()
}

async fn bans_are_tallied_per_network_over_every_address(backend: Backend) {
    let hub = start(backend).await;
    let (a, b) = (hub.server("net-a").await, hub.server("net-b").await);
    let t = 1_790_000_000_000;
    let (agent_a, agent_b) = (AgentId::new(), AgentId::new());
    hub.ingest(
        a,
        agent_a,
        1,
        numbered(
            1,
            vec![
                ban("192.0.2.1", "sshd", t),
                ban("192.0.2.1", "sshd", t + 1),
                ban("192.0.2.200", "nginx", t + 2),
                ban("2001:db8:5:1::9", "sshd", t + 3),
                unban("192.0.2.1", "sshd", t + 4),
            ],
        ),
    )
    .await;
    hub.ingest(
        b,
        agent_b,
        1,
        numbered(
            1,
            vec![
                ban("192.0.2.1", "sshd", t + 5),
                ban("198.51.100.7", "sshd", t + 6),
            ],
        ),
    )
    .await;
    let store = &hub.state.store;
    // A page of one row walks the same rows as one big page.
    let whole = banhub::alerts::places::count_in_pages(store, None, 100, 10_000)
        .await
        .expect("count");
    let paged = banhub::alerts::places::count_in_pages(store, None, 100, 1)
        .await
        .expect("count");
    assert_eq!(whole.fleet, paged.fleet);
    let counts =
        |places: &[(String, banhub::alerts::places::PlaceCount)]| -> Vec<(String, u64, u64)> {
            places
                .iter()
                .map(|(name, c)| (name.clone(), c.bans, c.ips))
                .collect()
        };
    let owned = |rows: &[(&str, u64, u64)]| -> Vec<(String, u64, u64)> {
        rows.iter()
            .map(|(n, bans, ips)| ((*n).to_owned(), *bans, *ips))
            .collect()
    };
    // 192.0.2.1 twice on A and once on B (one address), 192.0.2.200 once: unbans do not count.
    assert_eq!(
        counts(&paged.fleet.networks),
        owned(&[
            ("192.0.2.0/24", 4, 2),
            ("198.51.100.0/24", 1, 1),
            ("2001:db8:5::/48", 1, 1)
        ])
    );
    assert!(paged.fleet.countries.is_empty(), "no GeoIP database");
    assert_eq!(
        counts(&paged.scope(Some(b)).networks),
        owned(&[("192.0.2.0/24", 1, 1), ("198.51.100.0/24", 1, 1)])
    );

    // Through the API, for the fleet and for one server.
    let (status, insights) = hub.get("/api/events/bans/insights").await;
    assert_eq!(status, StatusCode::OK, "{insights}");
    assert_eq!(
        insights["networks"][0],
        json!({"network": "192.0.2.0/24", "bans": 4, "ips": 2})
    );
    assert_eq!(insights["countries"], json!([]));
    let (_, insights) = hub
        .get(&format!("/api/events/bans/insights?serverId={a}"))
        .await;
    assert_eq!(
        insights["networks"][0],
        json!({"network": "192.0.2.0/24", "bans": 3, "ips": 2})
    );
    assert_eq!(insights["networks"].as_array().map(Vec::len), Some(2));
}

on_both_backends!(
    bans_are_tallied_per_network_over_every_address,
    ingest_is_idempotent_and_moves_the_cursor,
    filters_and_paging,
    stats_and_insights_match_what_was_stored,
    live_stream_sends_committed_events,
    direct_callbacks_need_the_servers_secret,
    retention_prunes_old_events,
    often_banned_addresses_rank_first,
    text_search_finds_rare_lines_in_the_index_and_the_unindexed_tail,
    network_pages_are_those_of_the_plain_filter,
    stats_of_past_days_follow_late_events,
    stored_events_carry_the_times_a_read_returns,
);

async fn ingest_is_idempotent_and_moves_the_cursor(backend: Backend) {
    let hub = start(backend).await;
    let server = hub.server("web-1").await;
    let agent = AgentId::new();
    let events = &hub.state.events;
    let t = now_ms() - HOUR;
    assert_eq!(events.committed_seq(agent, 7).await.expect("cursor"), 0);

    let batch = |from: u64, to: u64| {
        numbered(
            from,
            (from..=to)
                .map(|i| ban(&format!("192.0.2.{i}"), "sshd", t + i as i64 * 1000))
                .collect(),
        )
    };
    assert_eq!(hub.ingest(server, agent, 7, batch(1, 5)).await, 5);
    assert_eq!(hub.all("", 100).await.len(), 5);
    // The same batch again: acknowledged, not stored twice.
    assert_eq!(hub.ingest(server, agent, 7, batch(1, 5)).await, 5);
    assert_eq!(hub.all("", 100).await.len(), 5);
    // Overlapping: only the new ones are stored, and the rollups count them once.
    assert_eq!(hub.ingest(server, agent, 7, batch(4, 8)).await, 8);
    let stored = hub.all("", 100).await;
    assert_eq!(stored.len(), 8);
    let seqs: BTreeSet<String> = stored
        .iter()
        .map(|e| e["ip"].as_str().expect("ip").to_owned())
        .collect();
    assert_eq!(seqs.len(), 8, "every address once: {seqs:?}");
    assert_eq!(events.committed_seq(agent, 7).await.expect("cursor"), 8);
    // An older batch after a newer one does not move the cursor back.
    assert_eq!(hub.ingest(server, agent, 7, batch(2, 3)).await, 8);
    let (_, stats) = hub.get("/api/events/bans/stats").await;
    assert_eq!(stats["totals"]["bans"], 8, "{stats}");
    let (_, insights) = hub.get("/api/events/bans/insights").await;
    assert_eq!(insights["distinctIps"], 8, "{insights}");

    // A new spool epoch starts from nothing; another agent's numbers are its own.
    assert_eq!(events.committed_seq(agent, 9).await.expect("cursor"), 0);
    assert_eq!(
        hub.ingest(
            server,
            agent,
            9,
            vec![(1, unban("192.0.2.1", "sshd", t + 60_000))]
        )
        .await,
        1
    );
    let other = AgentId::new();
    assert_eq!(hub.ingest(server, other, 7, batch(1, 2)).await, 2);
    assert_eq!(hub.all("", 100).await.len(), 11);

    // A gap says what was lost, and is stored once too.
    let gap = NewEvent {
        occurred_at: at(t + 120_000),
        source: EventSource::Action,
        body: EventBody::Gap(GapFacts {
            reason: GapReason::Overflow,
            lost: 3,
            ranges: vec![SeqRange {
                first: 10,
                last: 12,
            }],
        }),
    };
    for _ in 0..2 {
        assert_eq!(
            hub.ingest(server, agent, 7, vec![(13, gap.clone())]).await,
            13
        );
    }
    let gaps = hub.all("kind=gap", 10).await;
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0]["lost"], 3);
    assert_eq!(gaps[0]["gapReason"], "overflow");
    assert_eq!(gaps[0]["gapRanges"], json!([{"first": 10, "last": 12}]));
    assert_eq!(gaps[0]["ip"], Value::Null);

    // Empty batches answer with the cursor.
    assert_eq!(hub.ingest(server, agent, 7, Vec::new()).await, 13);
    let one = &hub.all("ip=192.0.2.8", 10).await[0];
    assert_eq!(one["serverId"], server.to_string());
    assert_eq!(one["agentId"], agent.to_string());
    assert_eq!(one["source"], "action");
    assert_eq!(one["kind"], "ban");
    assert_eq!(one["failures"], 5);
    assert_eq!(one["banDuration"], 600);
    assert_eq!(one["banCount"], 1);
    assert_eq!(one["hostname"], "web-1");
    assert_eq!(
        one["logs"],
        json!(["sshd: Failed password for root from 192.0.2.8"])
    );
    hub.shutdown().await;
}

async fn filters_and_paging(backend: Backend) {
    let hub = start(backend).await;
    let servers = [hub.server("web-1").await, hub.server("web-2").await];
    let agents = [AgentId::new(), AgentId::new()];
    let jails = ["sshd", "nginx-http-auth", "postfix"];
    let base = now_ms() - 10 * DAY;
    let mut batches: [Vec<(u64, NewEvent)>; 2] = [Vec::new(), Vec::new()];
    for i in 0..300u64 {
        let s = (i % 2) as usize;
        let ip = match i % 5 {
            0 => format!("198.51.100.{}", i % 50),
            1 => format!("203.0.113.{}", i % 40),
            2 => format!("2001:db8::{:x}", i % 30 + 1),
            3 => "192.0.2.77".to_owned(),
            _ => format!("198.51.101.{}", i % 20),
        };
        // Several events share a millisecond, so paging must break ties by id.
        let ms = base + (i as i64 / 3) * 7 * 60_000;
        let mut event = if i % 4 == 3 {
            unban(&ip, jails[(i % 3) as usize], ms)
        } else {
            ban(&ip, jails[(i % 3) as usize], ms)
        };
        if i % 10 == 0 {
            event.source = EventSource::Observed;
        }
        if let EventBody::Ban(f) | EventBody::Unban(f) = &mut event.body
            && i % 7 == 0
        {
            f.logs = Logs::capped([format!("Invalid user \"Admin{i}\" from {ip}")]);
        }
        let seq = batches[s].len() as u64 + 1;
        batches[s].push((seq, event));
    }
    for (s, batch) in batches.into_iter().enumerate() {
        // In two halves, the second re-sending part of the first.
        let second: Vec<_> = batch[100..].to_vec();
        let first: Vec<_> = batch[..120].to_vec();
        hub.ingest(servers[s], agents[s], 1, first).await;
        hub.ingest(servers[s], agents[s], 1, second).await;
    }

    // Everything, newest first, through 43 pages of 7, equals one big page.
    let all = hub.all("", 1000).await;
    assert_eq!(all.len(), 300);
    let paged = hub.all("", 7).await;
    let ids = |events: &[Value]| -> Vec<i64> {
        events
            .iter()
            .map(|e| e["id"].as_i64().expect("id"))
            .collect()
    };
    assert_eq!(ids(&paged), ids(&all));
    let keys: Vec<(String, i64)> = all
        .iter()
        .map(|e| {
            (
                e["occurredAt"].as_str().expect("time").to_owned(),
                e["id"].as_i64().expect("id"),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted, "newest first, ties by id");

    // Each filter against the same filter applied to the full list.
    let time = |e: &Value| {
        DateTime::parse_from_rfc3339(e["occurredAt"].as_str().expect("time"))
            .expect("rfc3339")
            .timestamp_millis()
    };
    let in_net =
        |e: &Value, prefix: &str| e["ip"].as_str().is_some_and(|ip| ip.starts_with(prefix));
    // The 300 events span about 12 hours.
    let from = base + 3 * HOUR;
    let to = base + 8 * HOUR;
    let from_text = at(from).to_rfc3339();
    type Keep<'a> = Box<dyn Fn(&Value) -> bool + 'a>;
    let cases: Vec<(String, Keep)> = vec![
        (
            format!("serverId={}", servers[1]),
            Box::new(|e: &Value| e["serverId"] == servers[1].to_string()),
        ),
        (
            "jail=postfix".to_owned(),
            Box::new(|e: &Value| e["jail"] == "postfix"),
        ),
        (
            "ip=192.0.2.77".to_owned(),
            Box::new(|e: &Value| e["ip"] == "192.0.2.77"),
        ),
        (
            "ip=198.51.100.0/24".to_owned(),
            Box::new(move |e: &Value| in_net(e, "198.51.100.")),
        ),
        (
            "ip=198.51.100.0/23".to_owned(),
            Box::new(move |e: &Value| in_net(e, "198.51.10")),
        ),
        (
            "ip=2001:db8::/32".to_owned(),
            Box::new(move |e: &Value| in_net(e, "2001:db8:")),
        ),
        (
            "kind=unban".to_owned(),
            Box::new(|e: &Value| e["kind"] == "unban"),
        ),
        ("kind=ban,unban".to_owned(), Box::new(|_: &Value| true)),
        (
            "source=observed".to_owned(),
            Box::new(|e: &Value| e["source"] == "observed"),
        ),
        (
            format!("from={}&to={to}", urlencode(&from_text)),
            Box::new(move |e: &Value| (from..to).contains(&time(e))),
        ),
        (
            "q=admin".to_owned(),
            Box::new(|e: &Value| e["logs"].to_string().contains("Admin")),
        ),
        (
            "q=%22Admin7%22".to_owned(),
            Box::new(|e: &Value| e["logs"].to_string().contains("\\\"Admin7\\\"")),
        ),
        (
            format!(
                "serverId={}&jail=sshd&kind=ban&ip=198.51.100.0/22",
                servers[0]
            ),
            Box::new(move |e: &Value| {
                e["serverId"] == servers[0].to_string()
                    && e["jail"] == "sshd"
                    && e["kind"] == "ban"
                    && in_net(e, "198.51.10")
            }),
        ),
    ];
    for (query, keep) in cases {
        let expected: Vec<i64> = ids(&all.iter().filter(|e| keep(e)).cloned().collect::<Vec<_>>());
        assert!(!expected.is_empty(), "{query} selects something");
        let got = ids(&hub.all(&query, 9).await);
        assert_eq!(got, expected, "{query}");
    }

    // Bad parameters name themselves; unknown ones are a 400; nothing is half-read.
    for (query, field) in [
        ("jail=../etc", "jail"),
        ("ip=not-an-ip", "ip"),
        ("ip=0.0.0.0/0", "ip"),
        ("kind=observed", "kind"),
        ("source=agent", "source"),
        ("from=yesterday", "from"),
        ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("limit=0", "limit"),
        ("limit=5000", "limit"),
        ("limit=ten", "limit"),
        ("cursor=garbage", "cursor"),
        ("format=xml", "format"),
    ] {
        let (status, problem) = hub.get(&format!("/api/events/bans?{query}")).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {problem}"
        );
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }
    let (status, problem) = hub.get("/api/events/bans?servr=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    // `serverId` takes a server's name as well as its id; a name no server has is a 404 that
    // names it.
    assert_eq!(
        ids(&hub.all("serverId=web-1", 9).await),
        ids(&hub.all(&format!("serverId={}", servers[0]), 9).await)
    );
    let (status, problem) = hub.get("/api/events/bans?serverId=web-9").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["code"], "unknown_server", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("web-9")),
        "{problem}"
    );

    // CSV: a header and a row per event, the same filters.
    let sshd = hub.all("jail=sshd", 1000).await.len();
    for path in [
        "/api/events/bans.csv?jail=sshd",
        "/api/events/bans?format=csv&jail=sshd&limit=100000",
    ] {
        let response = hub.client().get(hub.url(path)).send().await.expect("GET");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .is_ok_and(|t| t.starts_with("text/csv")),
            "{path}"
        );
        let text = response.text().await.expect("csv");
        let rows: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert!(rows[0].starts_with("id,occurredAt,kind"), "{}", rows[0]);
        assert_eq!(rows.len(), sshd + 1, "{path}");
        assert!(rows[1..].iter().all(|r| r.contains(",sshd,")));
    }
    let text = hub
        .client()
        .get(hub.url("/api/events/bans.csv?limit=10"))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("csv");
    assert_eq!(text.split("\r\n").filter(|l| !l.is_empty()).count(), 11);
    hub.shutdown().await;
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

async fn stats_and_insights_match_what_was_stored(backend: Backend) {
    let hub = start(backend).await;
    let (a, b) = (hub.server("web-a").await, hub.server("web-b").await);
    let (agent_a, agent_b) = (AgentId::new(), AgentId::new());
    // Three days back from the start of this hour, so day buckets and edge hours both count.
    let hour = now_ms().div_euclid(HOUR) * HOUR;
    let t = |hours_ago: i64| hour - hours_ago * HOUR + 60_000;
    let repeat = "203.0.113.9";
    hub.ingest(
        a,
        agent_a,
        1,
        numbered(
            1,
            vec![
                ban(repeat, "sshd", t(70)),
                ban(repeat, "sshd", t(50)),
                ban(repeat, "nginx", t(30)),
                ban("198.51.100.1", "sshd", t(2)),
                ban("198.51.100.1", "sshd", t(1)),
                unban("198.51.100.1", "sshd", t(1)),
                ban("198.51.100.2", "postfix", t(0)),
            ],
        ),
    )
    .await;
    hub.ingest(
        b,
        agent_b,
        1,
        numbered(
            1,
            vec![
                ban(repeat, "sshd", t(20)),
                ban(repeat, "sshd", t(3)),
                unban(repeat, "sshd", t(2)),
                ban("2001:db8::5", "sshd", t(0)),
            ],
        ),
    )
    .await;

    // Last 24 hours, hourly.
    let (status, stats) = hub.get("/api/events/bans/stats").await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["bucketSeconds"], 3600);
    assert_eq!(
        stats["totals"],
        json!({"bans": 6, "unbans": 2, "gaps": 0}),
        "{stats}"
    );
    let series = stats["series"].as_array().expect("series");
    assert!((24..=26).contains(&series.len()), "{}", series.len());
    let sum: u64 = series
        .iter()
        .map(|p| p["bans"].as_u64().expect("bans"))
        .sum();
    assert_eq!(sum, 6);
    let last = series.last().expect("a bucket");
    assert_eq!(
        (last["bans"].as_u64(), last["unbans"].as_u64()),
        (Some(2), Some(0)),
        "{stats}"
    );

    // Four days: whole days from the daily table and the edge hours from the hourly one.
    let from = at(hour - 4 * DAY + 5 * HOUR).to_rfc3339();
    let (_, stats) = hub
        .get(&format!("/api/events/bans/stats?from={}", urlencode(&from)))
        .await;
    assert_eq!(
        stats["totals"],
        json!({"bans": 9, "unbans": 2, "gaps": 0}),
        "{stats}"
    );
    let servers = stats["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 2);
    assert_eq!(servers[0]["serverId"], a.to_string(), "most bans first");
    assert_eq!(servers[0]["serverName"], "web-a");
    assert_eq!(
        (servers[0]["bans"].as_u64(), servers[0]["unbans"].as_u64()),
        (Some(6), Some(1))
    );
    assert_eq!(
        (servers[1]["bans"].as_u64(), servers[1]["unbans"].as_u64()),
        (Some(3), Some(1))
    );
    let jails: Vec<(String, u64)> = stats["jails"]
        .as_array()
        .expect("jails")
        .iter()
        .map(|j| {
            (
                j["jail"].as_str().expect("jail").to_owned(),
                j["bans"].as_u64().expect("bans"),
            )
        })
        .collect();
    assert_eq!(
        jails,
        [
            ("sshd".to_owned(), 7),
            ("nginx".to_owned(), 1),
            ("postfix".to_owned(), 1)
        ]
    );
    let sum: u64 = stats["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|p| p["bans"].as_u64().expect("bans"))
        .sum();
    assert_eq!(sum, 9);

    // Filtered by server and jail.
    let (_, stats) = hub
        .get(&format!(
            "/api/events/bans/stats?serverId={b}&jail=sshd&from={}",
            urlencode(&from)
        ))
        .await;
    assert_eq!(
        stats["totals"],
        json!({"bans": 3, "unbans": 1, "gaps": 0}),
        "{stats}"
    );
    assert_eq!(stats["servers"].as_array().map(Vec::len), Some(1));
    assert_eq!(stats["jails"][0]["jail"], "sshd");

    // Insights: the repeat offender leads, on both servers.
    let (status, insights) = hub.get("/api/events/bans/insights").await;
    assert_eq!(status, StatusCode::OK, "{insights}");
    assert_eq!(insights["distinctIps"], 4);
    let top = &insights["topIps"][0];
    assert_eq!(top["ip"], repeat);
    assert_eq!(top["bans"], 5);
    assert_eq!(top["servers"], 2);
    assert_eq!(top["lastServerId"], b.to_string());
    assert_eq!(top["lastJail"], "sshd");
    let seen = |v: &Value| {
        DateTime::parse_from_rfc3339(v.as_str().expect("time"))
            .expect("time")
            .timestamp_millis()
    };
    assert_eq!(seen(&top["firstSeen"]), t(70));
    assert_eq!(seen(&top["lastSeen"]), t(3));
    assert_eq!(insights["topIps"][1]["ip"], "198.51.100.1");
    assert_eq!(insights["topIps"][1]["bans"], 2);
    let repeaters = insights["repeatOffenders"]
        .as_array()
        .expect("repeat offenders");
    assert_eq!(repeaters.len(), 1, "{insights}");
    assert_eq!(repeaters[0]["ip"], repeat);
    assert_eq!(insights["topJails"][0]["jail"], "sshd");
    assert_eq!(insights["topJails"][0]["bans"], 7);
    assert_eq!(insights["topServers"][0]["serverId"], a.to_string());

    // One server's view, and one address in detail.
    let (_, insights) = hub
        .get(&format!(
            "/api/events/bans/insights?serverId={b}&limit=1&ip={repeat}"
        ))
        .await;
    assert_eq!(insights["topIps"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        insights["topIps"][0]["bans"], 2,
        "bans on server b: {insights}"
    );
    let detail = &insights["ip"];
    assert_eq!(detail["bans"], 5);
    let per_server: Vec<(String, u64)> = detail["perServer"]
        .as_array()
        .expect("per server")
        .iter()
        .map(|s| {
            (
                s["serverName"].as_str().expect("name").to_owned(),
                s["bans"].as_u64().expect("bans"),
            )
        })
        .collect();
    assert_eq!(
        per_server,
        [("web-a".to_owned(), 3), ("web-b".to_owned(), 2)]
    );
    let (_, insights) = hub.get("/api/events/bans/insights?ip=192.0.2.200").await;
    assert_eq!(insights["ip"], Value::Null);

    for (path, field) in [
        ("/api/events/bans/stats?from=soon", "from"),
        ("/api/events/bans/stats?from=1000&to=1000", "from"),
        ("/api/events/bans/insights?limit=1000", "limit"),
        ("/api/events/bans/insights?ip=localhost", "ip"),
    ] {
        let (status, problem) = hub.get(path).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path}: {problem}"
        );
        assert_eq!(problem["field"], field, "{path}");
    }
    let (status, problem) = hub.get("/api/events/bans/stats?serverId=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["code"], "unknown_server", "{problem}");
    hub.shutdown().await;
}

/// Reads server-sent events until one with data arrives; returns its id and data.
async fn next_sse(response: &mut reqwest::Response, buffer: &mut String) -> (i64, Value) {
    let read = async {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse::<i64>().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data = serde_json::from_str::<Value>(v.trim()).ok();
                    }
                }
                if let (Some(id), Some(data)) = (id, data) {
                    return (id, data);
                }
                continue;
            }
            let chunk = response
                .chunk()
                .await
                .expect("stream")
                .expect("stream open");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an event within 10 s")
}

async fn live_stream_sends_committed_events(backend: Backend) {
    let hub = start(backend).await;
    let server = hub.server("web-1").await;
    let agent = AgentId::new();
    let t = now_ms();

    let mut all = hub
        .client()
        .get(hub.url("/api/events/stream"))
        .send()
        .await
        .expect("connect");
    assert_eq!(all.status(), StatusCode::OK);
    assert!(
        all.headers()["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/event-stream"))
    );
    let mut nginx_only = hub
        .client()
        .get(hub.url("/api/events/stream?jail=nginx"))
        .send()
        .await
        .expect("connect");

    hub.ingest(
        server,
        agent,
        1,
        numbered(
            1,
            vec![
                ban("192.0.2.1", "sshd", t),
                ban("192.0.2.2", "nginx", t + 1),
            ],
        ),
    )
    .await;
    let mut buffer = String::new();
    let (first_id, first) = next_sse(&mut all, &mut buffer).await;
    assert_eq!(first["ip"], "192.0.2.1");
    assert_eq!(first["serverId"], server.to_string());
    assert_eq!(first["id"], first_id);
    let (_, second) = next_sse(&mut all, &mut buffer).await;
    assert_eq!(second["ip"], "192.0.2.2");
    let mut nginx_buffer = String::new();
    let (_, filtered) = next_sse(&mut nginx_only, &mut nginx_buffer).await;
    assert_eq!(filtered["jail"], "nginx");

    // A client that reconnects with Last-Event-ID first gets what it missed, then new events.
    hub.ingest(server, agent, 1, vec![(3, ban("192.0.2.3", "sshd", t + 2))])
        .await;
    let mut resumed = hub
        .client()
        .get(hub.url("/api/events/stream"))
        .header("Last-Event-ID", first_id.to_string())
        .send()
        .await
        .expect("connect");
    let mut resumed_buffer = String::new();
    let mut ips = Vec::new();
    for _ in 0..2 {
        let (_, event) = next_sse(&mut resumed, &mut resumed_buffer).await;
        ips.push(event["ip"].as_str().expect("ip").to_owned());
    }
    assert_eq!(ips, ["192.0.2.2", "192.0.2.3"]);
    hub.ingest(server, agent, 1, vec![(4, ban("192.0.2.4", "sshd", t + 3))])
        .await;
    let (_, event) = next_sse(&mut resumed, &mut resumed_buffer).await;
    assert_eq!(
        event["ip"], "192.0.2.4",
        "no duplicate of the replayed ones"
    );

    let (status, problem) = hub.get("/api/events/stream?lastEventId=abc").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    // Shutting down ends open streams, so the hub stops cleanly.
    drop((all, nginx_only));
    hub.shutdown().await;
}

async fn direct_callbacks_need_the_servers_secret(backend: Backend) {
    let hub = start(backend).await;
    let (a, b) = (hub.server("direct-a").await, hub.server("direct-b").await);
    let events = &hub.state.events;
    let secret_a = events
        .rotate_callback_secret(a)
        .await
        .expect("rotate")
        .expect("server");
    let secret_b = events
        .rotate_callback_secret(b)
        .await
        .expect("rotate")
        .expect("server");
    assert_ne!(secret_a, secret_b);
    assert_eq!(
        events
            .rotate_callback_secret(ServerId::new())
            .await
            .expect("rotate"),
        None
    );

    let post = |path: &'static str, secret: Option<String>, body: String| {
        let mut request = hub
            .client()
            .post(hub.url(path))
            .header("content-type", "application/json")
            .body(body);
        if let Some(secret) = secret {
            request = request.header("X-Callback-Secret", secret);
        }
        async move { read(request.send().await.expect("POST")).await }
    };
    let good = |ip: &str| {
        json!({
            "serverId": b.to_string(), "ip": ip, "jail": "sshd", "hostname": "mail-1",
            "failures": "3", "logs": "line 1\nline 2", "time": "1790000000.5", "bantime": "-1",
        })
        .to_string()
    };

    // The secret decides the server, whatever the body's serverId says.
    let (status, body) = post("/api/ban", Some(secret_a.clone()), good("192.0.2.10")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["serverId"], a.to_string());
    let id = body["id"].as_i64().expect("id");
    let stored = hub.all("", 100).await;
    assert_eq!(stored.len(), 1);
    let e = &stored[0];
    assert_eq!(e["id"], id);
    assert_eq!(e["serverId"], a.to_string());
    assert_eq!(e["source"], "direct");
    assert_eq!(e["agentId"], Value::Null);
    assert_eq!(e["kind"], "ban");
    assert_eq!(e["failures"], 3);
    assert_eq!(e["logs"], json!(["line 1", "line 2"]));
    assert_eq!(e["banDuration"], -1);
    assert_eq!(e["banTime"], "2026-09-21T14:13:20Z");
    let (status, body) = post("/api/unban", Some(secret_b.clone()), good("192.0.2.10")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stored = hub.all("", 100).await;
    assert_eq!(stored[0]["kind"], "unban");
    assert_eq!(stored[0]["serverId"], b.to_string());

    // Refusals store nothing.
    let huge = json!({"ip": "192.0.2.11", "jail": "sshd", "logs": "x".repeat(100_000)}).to_string();
    let cases = [
        (
            "/api/ban",
            None,
            good("192.0.2.11"),
            StatusCode::UNAUTHORIZED,
            None,
        ),
        (
            "/api/ban",
            Some("wrong".to_owned()),
            good("192.0.2.11"),
            StatusCode::UNAUTHORIZED,
            None,
        ),
        (
            "/api/unban",
            Some(String::new()),
            good("192.0.2.11"),
            StatusCode::UNAUTHORIZED,
            None,
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            good("not-an-ip"),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("ip"),
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            good("127.0.0.1"),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("ip"),
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            json!({"ip": "192.0.2.11", "jail": "a b"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("jail"),
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            json!({"ip": "192.0.2.11", "jail": "sshd", "failures": -2}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("failures"),
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            "{\"ip\": ".to_owned(),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            "/api/ban",
            Some(secret_a.clone()),
            huge.clone(),
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
        ),
        (
            "/api/ban",
            Some("wrong".to_owned()),
            huge,
            StatusCode::UNAUTHORIZED,
            None,
        ),
    ];
    for (path, secret, body, want, field) in cases {
        let (status, problem) = post(path, secret.clone(), body).await;
        assert_eq!(status, want, "{path} {secret:?}: {problem}");
        if let Some(field) = field {
            assert_eq!(problem["field"], field, "{problem}");
        }
    }
    assert_eq!(
        hub.all("", 100).await.len(),
        2,
        "refused callbacks stored nothing"
    );

    // A rotated secret replaces the old one.
    let new_a = events
        .rotate_callback_secret(a)
        .await
        .expect("rotate")
        .expect("server");
    let (status, _) = post("/api/ban", Some(secret_a), good("192.0.2.12")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = post("/api/ban", Some(new_a), good("192.0.2.12")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["serverId"], a.to_string());
    // Any content type: fail2ban's curl may not say JSON.
    let response = hub
        .client()
        .post(hub.url("/api/ban"))
        .header("X-Callback-Secret", secret_b)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(good("192.0.2.13"))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::OK);
    let (_, insights) = hub.get("/api/events/bans/insights").await;
    assert_eq!(insights["distinctIps"], 3, "{insights}");
    hub.shutdown().await;
}

async fn retention_prunes_old_events(backend: Backend) {
    let hub = start_with(backend, |c| c.events.retention_days = 30).await;
    let server = hub.server("web-1").await;
    let agent = AgentId::new();
    let now = now_ms();
    hub.ingest(
        server,
        agent,
        1,
        numbered(
            1,
            vec![
                ban("192.0.2.1", "sshd", now - 40 * DAY),
                ban("192.0.2.2", "sshd", now - 40 * DAY),
                unban("192.0.2.2", "sshd", now - 39 * DAY),
                ban("192.0.2.2", "sshd", now - 10 * DAY),
                ban("192.0.2.3", "nginx", now - HOUR),
            ],
        ),
    )
    .await;
    let range = format!("from={}", now - 60 * DAY);
    let (_, before) = hub.get(&format!("/api/events/bans/stats?{range}")).await;
    assert_eq!(before["totals"]["bans"], 4, "{before}");

    let report = hub.state.events.prune(Utc::now()).await.expect("prune");
    assert_eq!(report.events, 3, "{report:?}");
    assert_eq!(report.addresses, 1, "{report:?}");
    let left = hub.all("", 100).await;
    let ips: Vec<&str> = left.iter().map(|e| e["ip"].as_str().expect("ip")).collect();
    assert_eq!(ips, ["192.0.2.3", "192.0.2.2"]);
    let (_, after) = hub.get(&format!("/api/events/bans/stats?{range}")).await;
    assert_eq!(
        after["totals"],
        json!({"bans": 2, "unbans": 0, "gaps": 0}),
        "{after}"
    );
    let (_, insights) = hub.get("/api/events/bans/insights").await;
    assert_eq!(insights["distinctIps"], 2, "{insights}");
    let top: Vec<(&str, u64)> = insights["topIps"]
        .as_array()
        .expect("top")
        .iter()
        .map(|i| {
            (
                i["ip"].as_str().expect("ip"),
                i["bans"].as_u64().expect("bans"),
            )
        })
        .collect();
    // An address banned within the retention keeps its whole history.
    assert_eq!(top, [("192.0.2.2", 2), ("192.0.2.3", 1)]);
    // A second pass finds nothing more.
    let again = hub.state.events.prune(Utc::now()).await.expect("prune");
    assert_eq!((again.events, again.addresses), (0, 0));

    // With retention off nothing is pruned.
    let keep = start_with(backend, |c| c.events.retention_days = 0).await;
    let server = keep.server("web-1").await;
    keep.ingest(
        server,
        agent,
        1,
        vec![(1, ban("192.0.2.1", "sshd", now - 4000 * DAY))],
    )
    .await;
    let report = keep.state.events.prune(Utc::now()).await.expect("prune");
    assert_eq!(report.cutoff_ms, None);
    assert_eq!(keep.all("", 10).await.len(), 1);
    keep.shutdown().await;
    hub.shutdown().await;
}

async fn often_banned_addresses_rank_first(backend: Backend) {
    let hub = start(backend).await;
    let server = hub.server("web-1").await;
    let t = now_ms() - HOUR;
    let mut events = Vec::new();
    for (ip, bans) in [("192.0.2.1", 12), ("192.0.2.2", 9), ("192.0.2.3", 3)] {
        for i in 0..bans {
            events.push(ban(ip, "sshd", t + i * 1000));
        }
    }
    hub.ingest(server, AgentId::new(), 1, numbered(1, events))
        .await;
    let ranking = |insights: &Value| -> Vec<(String, u64)> {
        insights["topIps"]
            .as_array()
            .expect("top")
            .iter()
            .map(|i| {
                (
                    i["ip"].as_str().expect("ip").to_owned(),
                    i["bans"].as_u64().expect("bans"),
                )
            })
            .collect()
    };
    // Two addresses banned often enough for the ranking index; asking for three ranks them all.
    let (_, two) = hub.get("/api/events/bans/insights?limit=2").await;
    assert_eq!(
        ranking(&two),
        [("192.0.2.1".to_owned(), 12), ("192.0.2.2".to_owned(), 9)]
    );
    let (_, three) = hub.get("/api/events/bans/insights?limit=3").await;
    assert_eq!(ranking(&three).len(), 3);
    assert_eq!(ranking(&three)[2], ("192.0.2.3".to_owned(), 3));
    let (_, one) = hub
        .get(&format!(
            "/api/events/bans/insights?limit=1&serverId={server}"
        ))
        .await;
    assert_eq!(ranking(&one), [("192.0.2.1".to_owned(), 12)]);
    hub.shutdown().await;
}

/// A store on its own (no hub, so no background indexer): the test decides what is indexed.
async fn bare_store(backend: Backend) -> (Store, TestDatabase) {
    let db = TestDatabase::new(backend, "banhub_text");
    let store = Store::connect(&db.url, 4).await.expect("store");
    (store, db)
}

async fn text_search_finds_rare_lines_in_the_index_and_the_unindexed_tail(backend: Backend) {
    let (store, _db) = bare_store(backend).await;
    let server = create_server(&store, "text-1").await;
    let agent = AgentId::new();
    let base = now_ms() - 5 * DAY;
    // Events out of time order across batches (a late spool), the rare line in a few of them,
    // in lines of other case, with quotes.
    let rare = [3u64, 1_700, 2_950, 3_990];
    let make = |i: u64| {
        let ip = format!("198.51.100.{}", i % 200);
        let ms = base + ((i * 7_919) % 4_000) as i64 * 60_000;
        let mut event = ban(&ip, if i.is_multiple_of(3) { "nginx" } else { "sshd" }, ms);
        if let EventBody::Ban(f) = &mut event.body {
            let line = if rare.contains(&i) {
                format!("kernel: Oops \"XZ-Backdoor-Probe\" {i} from {ip}")
            } else {
                format!("sshd: Failed password for root from {ip} port {i}")
            };
            f.logs = Logs::capped([line]);
        }
        event
    };
    // The first 3,000 are indexed, the last 1,000 are not.
    let first: Vec<NewEvent> = (0..3_000).map(make).collect();
    for (n, chunk) in first.chunks(500).enumerate() {
        store
            .ingest_batch(
                server,
                agent,
                1,
                numbered(n as u64 * 500 + 1, chunk.to_vec()),
            )
            .await
            .expect("ingest");
    }
    let mut indexed = 0;
    loop {
        let n = store.index_event_text(700).await.expect("index");
        indexed += n;
        if n < 700 {
            break;
        }
    }
    let covered = store.event_text_indexed_to().await.expect("mark");
    match backend {
        Backend::Sqlite => {
            assert_eq!(indexed, 3_000);
            let last = store.last_event_id().await.expect("last").expect("some");
            assert_eq!(covered, Some(last.0), "everything so far is indexed");
        }
        Backend::Postgres => {
            assert_eq!(
                (indexed, covered),
                (0, None),
                "no index filled in the background"
            );
            // M0012 dropped M0010's pg_trgm index (it tripled PostgreSQL's CPU per ingested
            // event); M0013's index is filled by a background indexer this bare store does not
            // run: every event is pending, and the search reads the pending ranges.
            assert!(
                store
                    .text_index()
                    .await
                    .expect("index")
                    .is_some_and(|i| i.contains("event_text_pg"))
            );
            assert!(store.event_text_pending().await.expect("pending") > 0);
        }
    }
    let rest: Vec<NewEvent> = (3_000..4_000).map(make).collect();
    store
        .ingest_batch(server, agent, 1, numbered(3_001, rest))
        .await
        .expect("ingest");
    assert_eq!(store.event_text_indexed_to().await.expect("mark"), covered);

    let all = store_pages(&store, &EventFilter::default(), 1000).await;
    assert_eq!(all.len(), 4_000);
    let by_text = |text: &str| EventFilter {
        text: Some(SearchText::parse(text).expect("text")),
        ..EventFilter::default()
    };
    // The rare line: two matches in the indexed part and two in the tail, newest first, found in
    // one page and page by page; the case of the text does not matter (ASCII).
    let rare_ids: BTreeSet<i64> = all
        .iter()
        .map(|(_, id)| *id)
        .filter(|id| {
            rare.contains(&((*id - all.iter().map(|(_, i)| *i).min().unwrap_or(1)) as u64))
        })
        .collect();
    assert_eq!(rare_ids.len(), 4, "ids are consecutive from the first");
    let expected: Vec<(i64, i64)> = all
        .iter()
        .filter(|(_, id)| rare_ids.contains(id))
        .copied()
        .collect();
    for text in [
        "xz-backdoor-probe",
        "XZ-BACKDOOR-PROBE",
        "Oops \"xz-",
        "oPROBE\" 29",
    ] {
        let want: Vec<(i64, i64)> = if text == "oPROBE\" 29" {
            Vec::new()
        } else {
            expected.clone()
        };
        assert_eq!(
            store_pages(&store, &by_text(text), 50).await,
            want,
            "{text}"
        );
        assert_eq!(store_pages(&store, &by_text(text), 1).await, want, "{text}");
    }
    assert_eq!(
        store_pages(&store, &by_text("Probe\" 2950 from"), 10).await,
        expected
            .iter()
            .filter(|(_, id)| *id == *rare_ids.iter().nth(2).expect("third"))
            .copied()
            .collect::<Vec<_>>()
    );
    // Nothing matches: an empty page, not an error, whatever the text.
    assert!(
        store_pages(&store, &by_text("no such line anywhere"), 50)
            .await
            .is_empty()
    );
    assert!(store_pages(&store, &by_text("%_\\"), 50).await.is_empty());
    // Combined with other filters: the index only narrows, the filters still apply.
    let nginx = EventFilter {
        jail: Some(JailName::parse("nginx").expect("jail")),
        ..by_text("XZ-backdoor")
    };
    let nginx_rare: Vec<(i64, i64)> = expected
        .iter()
        .filter(|(_, id)| {
            let i = (*id - all.iter().map(|(_, i)| *i).min().unwrap_or(1)) as u64;
            i.is_multiple_of(3)
        })
        .copied()
        .collect();
    assert_eq!(nginx_rare.len(), 2);
    assert_eq!(store_pages(&store, &nginx, 1).await, nginx_rare);
    // A common text fills pages from the newest rows: the same as the scan would give.
    let common = store_pages(&store, &by_text("FAILED password"), 333).await;
    assert_eq!(common.len(), 4_000 - 4);
    let walk_all: Vec<(i64, i64)> = all
        .iter()
        .filter(|(_, id)| !rare_ids.contains(id))
        .copied()
        .collect();
    assert_eq!(common, walk_all);
    // Two characters cannot use the index: a scan, same answer.
    assert_eq!(store_pages(&store, &by_text("XZ"), 2).await, expected);
}

/// A network filter reads a network of few addresses as the newest page of each address, merged,
/// and a network of many through a window of the newest events: both must give, page by page,
/// exactly the events the filter's own rule (`EventFilter::matches`) picks out of everything
/// stored, in the same order, with every other filter and across late (out of order) batches.
async fn network_pages_are_those_of_the_plain_filter(backend: Backend) {
    let (store, _db) = bare_store(backend).await;
    let mut servers = Vec::new();
    for name in ["net-1", "net-2"] {
        let server = create_server(&store, name).await;
        servers.push(server);
    }
    let base = now_ms() - 3 * DAY;
    // A busy address and a few quiet ones in 192.0.2.0/24, 300 addresses in 198.51.0.0/16 (more
    // than the merge takes), IPv6 in 2001:db8::/32, probe events of the busy address, unbans;
    // times scattered so that ids and times are in different orders.
    let address = |i: u64| match i % 10 {
        0..=3 => "192.0.2.7".to_owned(),
        4 => format!("192.0.2.{}", 100 + i % 9),
        5..=7 => format!("198.51.{}.{}", (i / 10) % 3, (i / 30) % 100 + 1),
        8 => format!("2001:db8:{:x}::{:x}", i % 5, i % 37 + 1),
        _ => format!("203.0.113.{}", i % 50 + 1),
    };
    let make = |i: u64| {
        let ip = address(i);
        let ms = base + ((i * 7_919) % 3_000) as i64 * 60_000;
        let jail = match i % 7 {
            0 => banhub_proto::rules::PROBE_JAIL,
            1 | 2 => "nginx",
            _ => "sshd",
        };
        if i % 3 == 2 {
            unban(&ip, jail, ms)
        } else {
            ban(&ip, jail, ms)
        }
    };
    let agents = [AgentId::new(), AgentId::new()];
    for (n, first) in (0..3_000u64).step_by(250).enumerate() {
        let s = n % 2;
        store
            .ingest_batch(
                servers[s],
                agents[s],
                1,
                numbered(
                    (n / 2) as u64 * 250 + 1,
                    (first..first + 250).map(make).collect::<Vec<_>>(),
                ),
            )
            .await
            .expect("ingest");
    }
    // Everything stored, probe events included, newest first.
    let mut stored = Vec::new();
    for jail in [None, Some(banhub_proto::rules::PROBE_JAIL)] {
        let filter = EventFilter {
            jail: jail.map(|j| JailName::parse(j).expect("jail")),
            ..EventFilter::default()
        };
        let mut after = None;
        loop {
            let page = store
                .list_events(&filter, after, 1_000)
                .await
                .expect("page");
            stored.extend(page.events);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    assert_eq!(stored.len(), 3_000);
    stored.sort_by_key(|e| std::cmp::Reverse((e.occurred_at, e.id.0)));
    let net = |text: &str| Some(IpOrCidr::parse(text).expect("network"));
    let range_from = at(base + DAY);
    let filters = [
        EventFilter {
            ip: net("192.0.2.0/24"),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("192.0.0.0/16"),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("198.51.0.0/16"),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("2001:db8::/32"),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("192.0.2.0/24"),
            jail: Some(JailName::parse("nginx").expect("jail")),
            server: Some(servers[1]),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("192.0.2.0/24"),
            jail: Some(JailName::parse(banhub_proto::rules::PROBE_JAIL).expect("jail")),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("192.0.2.96/28"),
            kinds: vec![EventKind::Unban],
            from: Some(range_from),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("198.51.0.0/16"),
            kinds: vec![EventKind::Ban],
            from: Some(range_from),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("192.0.2.0/24"),
            from: Some(range_from),
            to: Some(at(base + 2 * DAY)),
            ..EventFilter::default()
        },
        EventFilter {
            ip: net("10.0.0.0/8"),
            ..EventFilter::default()
        },
    ];
    for filter in &filters {
        let want: Vec<(i64, i64)> = stored
            .iter()
            .filter(|e| filter.matches(e))
            .map(|e| (e.occurred_at.timestamp_millis(), e.id.0))
            .collect();
        if filter.ip != net("10.0.0.0/8") {
            assert!(!want.is_empty(), "{filter:?} selects something");
        }
        for page in [1, 7, 50, 1_000] {
            assert_eq!(
                store_pages(&store, filter, page).await,
                want,
                "{filter:?}, pages of {page}"
            );
        }
    }
}

/// Stats and insights over past days are kept between requests (SQLite); an event of a past day
/// that arrives late (a replayed spool) must show in the next answer, like a fresh read.
async fn stats_of_past_days_follow_late_events(backend: Backend) {
    let hub = start(backend).await;
    let (a, b) = (hub.server("late-a").await, hub.server("late-b").await);
    let (agent_a, agent_b) = (AgentId::new(), AgentId::new());
    let day0 = now_ms().div_euclid(DAY) * DAY;
    let t = |days_ago: i64, hour: i64| day0 - days_ago * DAY + hour * HOUR + 60_000;
    hub.ingest(
        a,
        agent_a,
        1,
        numbered(
            1,
            vec![
                ban("198.51.100.1", "sshd", t(5, 3)),
                ban("198.51.100.2", "sshd", t(3, 10)),
                ban("198.51.100.3", "nginx", t(2, 23)),
            ],
        ),
    )
    .await;
    let from = at(day0 - 7 * DAY).to_rfc3339();
    let stats_path = format!("/api/events/bans/stats?from={}", urlencode(&from));
    let insights_path = format!("/api/events/bans/insights?from={}", urlencode(&from));
    let bans_of = |v: &Value, list: &str, key: &str, name: &str| -> u64 {
        v[list]
            .as_array()
            .expect("list")
            .iter()
            .find(|e| e[key] == name)
            .map_or(0, |e| e["bans"].as_u64().expect("bans"))
    };
    let read = || async {
        let (status, stats) = hub.get(&stats_path).await;
        assert_eq!(status, StatusCode::OK, "{stats}");
        let (status, insights) = hub.get(&insights_path).await;
        assert_eq!(status, StatusCode::OK, "{insights}");
        (stats, insights)
    };
    // Twice: the second answer may come from what the first read.
    for _ in 0..2 {
        let (stats, insights) = read().await;
        assert_eq!(stats["totals"]["bans"], 3, "{stats}");
        assert_eq!(bans_of(&stats, "jails", "jail", "nginx"), 1, "{stats}");
        assert_eq!(
            bans_of(&insights, "topJails", "jail", "sshd"),
            2,
            "{insights}"
        );
    }
    // Late events of past days, on another server and on the first, and one of today.
    hub.ingest(
        b,
        agent_b,
        1,
        numbered(1, vec![ban("203.0.113.7", "nginx", t(4, 1))]),
    )
    .await;
    let (stats, insights) = read().await;
    assert_eq!(stats["totals"]["bans"], 4, "{stats}");
    assert_eq!(bans_of(&stats, "jails", "jail", "nginx"), 2, "{stats}");
    assert_eq!(
        bans_of(&insights, "topJails", "jail", "nginx"),
        2,
        "{insights}"
    );
    assert_eq!(
        bans_of(&insights, "topServers", "serverId", &b.to_string()),
        1,
        "{insights}"
    );
    hub.ingest(
        a,
        agent_a,
        1,
        numbered(
            4,
            vec![
                ban("198.51.100.4", "sshd", t(6, 0)),
                ban("198.51.100.5", "sshd", t(0, 0)),
            ],
        ),
    )
    .await;
    let (stats, insights) = read().await;
    assert_eq!(stats["totals"]["bans"], 6, "{stats}");
    assert_eq!(bans_of(&stats, "jails", "jail", "sshd"), 4, "{stats}");
    assert_eq!(
        bans_of(&insights, "topJails", "jail", "sshd"),
        4,
        "{insights}"
    );
    let points: u64 = stats["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|p| p["bans"].as_u64().expect("bans"))
        .sum();
    assert_eq!(points, 6, "{stats}");
    hub.shutdown().await;
}

/// What ingest and a direct callback hand on (to the live stream and the alert worker) carries the
/// times the store keeps (milliseconds), not the finer ones it was given: a spike window's edge
/// must fall the same way for an event taken from the broadcast and for the same event read back.
async fn stored_events_carry_the_times_a_read_returns(backend: Backend) {
    let (store, _db) = bare_store(backend).await;
    let server = create_server(&store, "times-1").await;
    // 0.999 999 ms past a whole millisecond: any rounding other than the store's shows.
    let fine = |ms: i64| at(ms) + chrono::Duration::nanoseconds(999_999);
    let base = now_ms() - HOUR;
    let mut relayed = ban("198.51.100.7", "sshd", 0);
    relayed.occurred_at = fine(base);
    let outcome = store
        .ingest_batch(server, AgentId::new(), 1, numbered(1, vec![relayed]))
        .await
        .expect("ingest");
    let mut direct = ban("198.51.100.8", "sshd", 0);
    direct.occurred_at = fine(base + 1);
    let direct = store
        .insert_direct_event(server, direct)
        .await
        .expect("direct");
    let handed_on: Vec<_> = outcome.stored.iter().chain([&direct]).collect();
    assert_eq!(handed_on.len(), 2);
    let read = store
        .list_events(&EventFilter::default(), None, 10)
        .await
        .expect("read")
        .events;
    for event in handed_on {
        let back = read
            .iter()
            .find(|r| r.id == event.id)
            .expect("the event reads back");
        assert_eq!(event.occurred_at, back.occurred_at, "{event:?}");
        assert_eq!(event.occurred_at.timestamp_subsec_nanos() % 1_000_000, 0);
    }
}
