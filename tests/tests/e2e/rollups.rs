//! The per-address rollups (`ip_stats`, `ip_servers`, the distinct-address total) against what was
//! ingested, on SQLite and on PostgreSQL (`sqlite::<name>`, `postgres::<name>`). The store writes
//! them behind ingest, so these tests check that every read still sees each ingested ban exactly
//! once: right after ingest (the reads write what is pending first; the alert worker's counts add
//! it without writing), and after stops that lost whatever was pending in memory (the store dropped
//! without a flush, then opened again on the same database, as after a kill).

use banhub_tests::backends::{Backend, TestDatabase, create_server};
use banhub_tests::on_both_backends;
use std::collections::BTreeMap;

use banhub::domain::events::{
    BanDuration, BanFacts, EventBody, EventSource, IpOrCidr, JailName, Logs, NewEvent,
};
use banhub::domain::{AgentId, ServerId};
use banhub::store::Store;
use chrono::{DateTime, Utc};

on_both_backends!(
    address_rollups_are_exact_right_after_ingest,
    address_rollups_survive_stops_that_lost_the_pending_ones,
);

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("time")
}

fn event(ip: &str, ms: i64, ban: bool) -> NewEvent {
    let facts = BanFacts {
        ip: IpOrCidr::parse(ip).expect("ip"),
        jail: JailName::parse("sshd").expect("jail"),
        hostname: "web-1".to_owned(),
        failures: 5,
        logs: Logs::capped([format!("sshd: Failed password for root from {ip}")]),
        ban_time: Some(1_790_000_000),
        ban_duration: Some(BanDuration::Seconds(600)),
        ban_count: Some(1),
    };
    NewEvent {
        occurred_at: at(ms),
        source: EventSource::Action,
        body: if ban {
            EventBody::Ban(facts)
        } else {
            EventBody::Unban(facts)
        },
    }
}

/// Bans ingested per address and server: what the rollups must say.
type Expected = BTreeMap<String, BTreeMap<ServerId, u64>>;

/// What three servers (each with an agent) reported in the test, and the rollups it must make.
struct Traffic {
    servers: Vec<(ServerId, AgentId)>,
    /// The next sequence number per server.
    next_seq: Vec<u64>,
    expected: Expected,
    /// Deterministic spread of addresses and servers.
    step: u64,
}

impl Traffic {
    async fn create(store: &Store) -> Self {
        let mut servers = Vec::new();
        for i in 0..3 {
            let server = create_server(store, &format!("rollup-{i}")).await;
            servers.push((server, AgentId::new()));
        }
        Self {
            next_seq: vec![1; servers.len()],
            servers,
            expected: Expected::new(),
            step: 0,
        }
    }

    /// Ingests `batches` batches of 60 events (bans of 40 addresses, some on several servers, and
    /// unbans, which the rollups do not count), and re-sends the last batch, which must change
    /// nothing.
    async fn ingest(&mut self, store: &Store, batches: usize) {
        let now = Utc::now().timestamp_millis();
        for _ in 0..batches {
            let s = usize::try_from(self.step % 3).expect("index");
            let (server, agent) = self.servers[s];
            let mut events = Vec::new();
            for i in 0..60u64 {
                self.step += 1;
                let ip = format!("198.51.100.{}", (self.step * 7 + i) % 40);
                let ban = i % 5 != 4;
                events.push((
                    self.next_seq[s],
                    event(&ip, now - i64::try_from(i).expect("ms") * 1000, ban),
                ));
                self.next_seq[s] += 1;
                if ban {
                    *self
                        .expected
                        .entry(ip)
                        .or_default()
                        .entry(server)
                        .or_default() += 1;
                }
            }
            let again = events.clone();
            store
                .ingest_batch(server, agent, 1, events)
                .await
                .expect("ingest");
            let outcome = store
                .ingest_batch(server, agent, 1, again)
                .await
                .expect("ingest again");
            assert!(outcome.stored.is_empty(), "a re-sent batch stores nothing");
        }
    }

    fn bans(&self, ip: &str) -> u64 {
        self.expected.get(ip).map_or(0, |s| s.values().sum())
    }
}

/// Every read of the per-address rollups against `expected`.
async fn assert_rollups(store: &Store, traffic: &Traffic, context: &str) {
    let ips: Vec<String> = traffic.expected.keys().cloned().collect();
    // The alert worker's counts first: on SQLite they add what is pending without writing it.
    let counts = store.ip_ban_counts(&ips).await.expect("ban counts");
    for ip in &ips {
        assert_eq!(
            counts.get(ip).copied().unwrap_or(0),
            traffic.bans(ip),
            "{context}: ban count of {ip} for the alerts"
        );
    }
    assert_eq!(
        store.distinct_ips().await.expect("distinct"),
        u64::try_from(traffic.expected.len()).expect("count"),
        "{context}: distinct addresses"
    );
    for (ip, per_server) in &traffic.expected {
        let (summary, servers) = store
            .ip_details(&IpOrCidr::parse(ip).expect("ip"))
            .await
            .expect("details")
            .unwrap_or_else(|| panic!("{context}: {ip} is not in the rollups"));
        assert_eq!(summary.bans, traffic.bans(ip), "{context}: bans of {ip}");
        assert_eq!(
            summary.servers,
            u64::try_from(per_server.len()).expect("count"),
            "{context}: servers of {ip}"
        );
        let stored: BTreeMap<ServerId, u64> = servers.iter().map(|s| (s.server, s.bans)).collect();
        assert_eq!(&stored, per_server, "{context}: bans of {ip} per server");
    }
    // The ranking: most bans first, then the higher address.
    let mut ranked: Vec<(u64, String)> = ips
        .iter()
        .map(|ip| (traffic.bans(ip), ip.clone()))
        .collect();
    ranked.sort_by(|a, b| b.cmp(a));
    ranked.truncate(5);
    let top: Vec<(u64, String)> = store
        .top_ips(None, 5)
        .await
        .expect("top")
        .into_iter()
        .map(|s| (s.bans, s.ip))
        .collect();
    assert_eq!(top, ranked, "{context}: top addresses");
}

async fn address_rollups_are_exact_right_after_ingest(backend: Backend) {
    let db = TestDatabase::new(backend, "banhub_rollups");
    let store = Store::connect(&db.url, 4).await.expect("store");
    let mut traffic = Traffic::create(&store).await;
    for round in 0..3 {
        traffic.ingest(&store, 4).await;
        assert_rollups(
            &store,
            &traffic,
            &format!("right after ingest round {round}"),
        )
        .await;
    }
}

async fn address_rollups_survive_stops_that_lost_the_pending_ones(backend: Backend) {
    let db = TestDatabase::new(backend, "banhub_rollups");
    let store = Store::connect(&db.url, 4).await.expect("store");
    let mut traffic = Traffic::create(&store).await;
    let mut rederived = 0;
    let mut store = Some(store);
    for round in 0..4 {
        let open = store.take().expect("store");
        traffic.ingest(&open, 5).await;
        // A stop: the store goes without writing what is pending (a kill loses it the same way).
        drop(open);
        let reopened = Store::connect(&db.url, 4).await.expect("store again");
        rederived += reopened.rollups_rederived_at_start();
        assert_rollups(&reopened, &traffic, &format!("after stop {round}")).await;
        store = Some(reopened);
    }
    if backend == Backend::Sqlite {
        // The flush runs once a second and ingest takes milliseconds, so the stops lost pending
        // rollups, which the starts wrote again from the events.
        assert!(
            rederived > 0,
            "no start found events after the watermark: the stops lost nothing pending"
        );
    }
}
