//! PostgreSQL's text index of log lines (M0013, `hub/src/store/event_text_pg.rs`), on a real
//! PostgreSQL with two stores sharing the database as two hub replicas: a text search returns
//! exactly what a plain scan would (computed here from the lines ingested) while events are
//! pending, part-indexed and indexed; an event that commits after a later id was indexed is still
//! found and indexed; the indexers of both replicas never copy an event twice.

use std::process::Stdio;
use std::time::Duration;

use banhub::domain::events::{
    BanFacts, EventBody, EventFilter, EventSource, IpOrCidr, JailName, Logs, NewEvent, SearchText,
};
use banhub::domain::{AgentId, ServerId};
use banhub::store::Store;
use banhub_tests::backends::{Backend, TestDatabase, create_server, store_pages};
use banhub_tests::wait::wait_until_async;
use chrono::{DateTime, Utc};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

const MINUTE: i64 = 60_000;
const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("time")
}

fn event(ip: &str, jail: &str, ms: i64, line: &str) -> NewEvent {
    NewEvent {
        occurred_at: at(ms),
        source: EventSource::Action,
        body: EventBody::Ban(BanFacts {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse(jail).expect("jail"),
            hostname: "web-1".to_owned(),
            failures: 5,
            logs: Logs::capped([line]),
            ban_time: None,
            ban_duration: None,
            ban_count: Some(1),
        }),
    }
}

/// What was stored, to compute a plain scan's answer without the database.
#[derive(Default)]
struct Stored {
    /// `(occurred_at ms, id, server, log line)`.
    events: Vec<(i64, i64, ServerId, String)>,
}

impl Stored {
    fn add(&mut self, outcome: &[banhub::domain::events::StoredEvent], lines: &[String]) {
        assert_eq!(outcome.len(), lines.len(), "every event stored");
        for (e, line) in outcome.iter().zip(lines) {
            self.events.push((
                e.occurred_at.timestamp_millis(),
                e.id.0,
                e.server_id,
                line.clone(),
            ));
        }
    }

    /// Newest first, as the API pages: the events whose line holds `text`, ASCII case ignored.
    fn scan(&self, text: &str, server: Option<ServerId>) -> Vec<(i64, i64)> {
        let needle = text.to_ascii_lowercase();
        let mut found: Vec<(i64, i64)> = self
            .events
            .iter()
            .filter(|(_, _, s, line)| {
                server.is_none_or(|want| want == *s) && line.to_ascii_lowercase().contains(&needle)
            })
            .map(|(ms, id, _, _)| (*ms, *id))
            .collect();
        found.sort_by_key(|k| std::cmp::Reverse(*k));
        found
    }
}

fn by_text(text: &str, server: Option<ServerId>) -> EventFilter {
    EventFilter {
        text: Some(SearchText::parse(text).expect("text")),
        server,
        ..EventFilter::default()
    }
}

/// Every search of the test, on both replicas, page sizes 50 and 7, against the scan.
async fn searches_equal_the_scan(
    stores: [&Store; 2],
    stored: &Stored,
    quiet: ServerId,
    when: &str,
) {
    let searches: [(&str, Option<ServerId>); 8] = [
        ("xz-backdoor-probe", None),
        ("XZ-Backdoor", None),
        ("oracle", Some(quiet)),
        ("Invalid user ORACLE", None),
        ("no such line anywhere", None),
        ("direct-callback-marker", None),
        ("late-commit-marker", None),
        ("port 12", None),
    ];
    for (text, server) in searches {
        let want = stored.scan(text, server);
        for (store, page) in [(stores[0], 50), (stores[1], 7)] {
            assert_eq!(
                store_pages(store, &by_text(text, server), page).await,
                want,
                "{text:?} (server {server:?}), pages of {page}, {when}"
            );
        }
    }
    // A common text fills its pages from the newest rows: the same answer.
    let common = stored.scan("Failed password", None);
    assert!(common.len() > 1_000);
    assert_eq!(
        store_pages(stores[0], &by_text("failed PASSWORD", None), 400).await,
        common,
        "common text, {when}"
    );
}

fn line(i: u64, ip: &str) -> String {
    if [5, 1_234, 2_999, 3_333].contains(&i) {
        format!("kernel: XZ-backdoor-probe banner from {ip}")
    } else if i.is_multiple_of(7) {
        format!("sshd: Invalid user oracle from {ip} port {i}")
    } else {
        format!("sshd: Failed password for root from {ip} port {i}")
    }
}

/// Ingests events `range` in batches of `batch`, alternating between the two replicas and two
/// servers (each with its own agent).
async fn ingest(
    stores: [&Store; 2],
    servers: [(ServerId, AgentId); 2],
    range: std::ops::Range<u64>,
    batch: u64,
    base: i64,
    stored: &mut Stored,
) {
    let mut start = range.start;
    while start < range.end {
        let end = (start + batch).min(range.end);
        let k = usize::from((start / batch) % 2 == 1);
        let (server, agent) = servers[k];
        let mut lines = Vec::new();
        let mut events = Vec::new();
        for i in start..end {
            let ip = format!("203.0.113.{}", i % 250);
            let text = line(i, &ip);
            let ms = base + ((i * 7_919) % 5_000) as i64 * MINUTE;
            events.push((i + 1, event(&ip, "sshd", ms, &text)));
            lines.push(text);
        }
        let outcome = stores[k]
            .ingest_batch(server, agent, 1, events)
            .await
            .expect("ingest");
        stored.add(&outcome.stored, &lines);
        start = end;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_equals_the_scan_while_pending_and_indexed_on_two_replicas() {
    let db = TestDatabase::new(Backend::Postgres, "banhub_text_pg");
    let a = Store::connect(&db.url, 4).await.expect("store a");
    let b = Store::connect(&db.url, 4).await.expect("store b");
    let index = a.text_index().await.expect("text index");
    assert!(
        index.is_some_and(|i| i.contains("event_text_pg")),
        "pg_trgm is available here, so M0013 made the index: {index:?}"
    );
    let busy = (create_server(&a, "busy-1").await, AgentId::new());
    let quiet = (create_server(&a, "quiet-1").await, AgentId::new());
    let base = Utc::now().timestamp_millis() - 5_000 * MINUTE;
    let mut stored = Stored::default();
    ingest([&a, &b], [busy, quiet], 0..3_000, 100, base, &mut stored).await;
    // A hub-side direct callback is noted pending too.
    let ip = "198.51.100.9";
    let text = format!("nginx: direct-callback-marker from {ip}");
    let direct = a
        .insert_direct_event(busy.0, event(ip, "nginx", base + 7 * MINUTE, &text))
        .await
        .expect("direct");
    stored.add(std::slice::from_ref(&direct), &[text]);
    let total = stored.events.len() as u64;

    // Nothing indexed yet: one pending range per ingest transaction, found by the scan of them.
    assert_eq!(a.event_text_pending().await.expect("pending"), 31);
    assert_eq!(a.event_text_indexed_pg().await.expect("indexed"), 0);
    searches_equal_the_scan([&a, &b], &stored, quiet.0, "all pending").await;

    // Part indexed, by both replicas in turn.
    let mut copied = 0;
    for store in [&a, &b, &a] {
        let (n, more) = store
            .index_event_text_pg(250)
            .await
            .expect("index")
            .expect("nobody else holds the lock");
        assert!(more);
        copied += n;
    }
    // Whole ranges of 100 within each pass's 250 ids.
    assert_eq!(copied, 600);
    assert_eq!(a.event_text_indexed_pg().await.expect("indexed"), 600);
    assert!(b.event_text_pending().await.expect("pending") > 0);
    searches_equal_the_scan([&a, &b], &stored, quiet.0, "part indexed").await;

    // Both replicas' indexers at once until done: each event copied once.
    let run = |store: Store| async move {
        let mut copied = 0;
        let mut skipped = 0;
        loop {
            match store.index_event_text_pg(300).await.expect("index") {
                Some((n, true)) => copied += n,
                Some((n, false)) => return (copied + n, skipped),
                None => {
                    skipped += 1;
                    tokio::task::yield_now().await;
                }
            }
        }
    };
    let (ca, cb) = tokio::join!(tokio::spawn(run(a.clone())), tokio::spawn(run(b.clone())));
    let ((ca, _), (cb, _)) = (ca.expect("a"), cb.expect("b"));
    assert_eq!(copied + ca + cb, total, "every event copied exactly once");
    assert_eq!(a.event_text_pending().await.expect("pending"), 0);
    assert_eq!(a.event_text_indexed_pg().await.expect("indexed"), total);
    searches_equal_the_scan([&a, &b], &stored, quiet.0, "all indexed").await;

    // The hubs' background indexers, on both replicas, keep up with more ingest.
    let shutdown = CancellationToken::new();
    for store in [&a, &b] {
        let store = store.clone();
        let token = shutdown.clone();
        tokio::spawn(async move { store.run_text_indexer_pg(token).await });
    }
    ingest([&a, &b], [busy, quiet], 3_000..3_500, 50, base, &mut stored).await;
    let total = stored.events.len() as u64;
    wait_until_async(
        Duration::from_secs(30),
        "the indexers to catch up",
        || async {
            a.event_text_pending().await.expect("pending") == 0
                && a.event_text_indexed_pg().await.expect("indexed") == total
        },
    )
    .await
    .expect("caught up");
    shutdown.cancel();
    searches_equal_the_scan([&a, &b], &stored, quiet.0, "indexed in the background").await;
}

/// A psql session on the test's database, to hold a row lock across the test's steps.
struct Psql {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Psql {
    fn start(url: &str) -> Self {
        let mut child = tokio::process::Command::new(PSQL)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {PSQL}: {e}; install it with .ci/install-deps (postgresql)")
            });
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Runs `sql`, a statement that prints nothing in quiet mode (`BEGIN`, `ROLLBACK`), and waits
    /// until psql has run it.
    async fn exec(&mut self, sql: &str) {
        assert_eq!(
            self.one(&format!("{sql}; SELECT 'done'")).await,
            "done",
            "{sql}"
        );
    }

    /// Runs `sql` (one statement returning one row of one column) and returns that value.
    async fn one(&mut self, sql: &str) -> String {
        self.stdin
            .write_all(format!("{sql};\n").as_bytes())
            .await
            .expect("write to psql");
        self.stdin.flush().await.expect("flush");
        tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line())
            .await
            .expect("psql answers")
            .expect("read psql")
            .expect("a line from psql")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_a_later_one_was_indexed_is_still_found() {
    let db = TestDatabase::new(Backend::Postgres, "banhub_text_late");
    let a = Store::connect(&db.url, 4).await.expect("store a");
    let b = Store::connect(&db.url, 4).await.expect("store b");
    let s1 = (create_server(&a, "late-1").await, AgentId::new());
    let s2 = (create_server(&a, "early-2").await, AgentId::new());
    let ms = Utc::now().timestamp_millis() - 30 * MINUTE;
    let mut stored = Stored::default();
    // A first event of s1 makes its rows of the hourly counts, which the test then locks.
    let first = "sshd: Failed password for root from 203.0.113.1".to_owned();
    let out = a
        .ingest_batch(
            s1.0,
            s1.1,
            1,
            vec![(1, event("203.0.113.1", "sshd", ms, &first))],
        )
        .await
        .expect("ingest");
    stored.add(&out.stored, &[first]);
    while a
        .index_event_text_pg(1_000)
        .await
        .expect("index")
        .is_some_and(|(_, more)| more)
    {}

    let mut psql = Psql::start(&db.url);
    psql.exec("BEGIN").await;
    let locked = psql
        .one(&format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM event_counts_hourly WHERE server_id = '{}' \
             FOR UPDATE) l",
            s1.0
        ))
        .await;
    assert_ne!(locked, "0", "s1's hourly rows are locked");

    // Replica a's transaction takes its id, notes its pending range, then waits on the lock.
    let late = "kernel: late-commit-marker from 203.0.113.2".to_owned();
    let held = {
        let a = a.clone();
        let late = late.clone();
        tokio::spawn(async move {
            a.ingest_batch(
                s1.0,
                s1.1,
                1,
                vec![(2, event("203.0.113.2", "sshd", ms + 1, &late))],
            )
            .await
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if psql
            .one("SELECT COUNT(*) FROM pg_locks WHERE NOT granted")
            .await
            != "0"
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ingest never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Replica b stores a later id and commits; b's indexer copies it.
    let early = "kernel: late-commit-marker from 203.0.113.3".to_owned();
    let out = b
        .ingest_batch(
            s2.0,
            s2.1,
            1,
            vec![(1, event("203.0.113.3", "sshd", ms + 2, &early))],
        )
        .await
        .expect("ingest");
    stored.add(&out.stored, &[early]);
    let (copied, more) = b
        .index_event_text_pg(1_000)
        .await
        .expect("index")
        .expect("lock");
    assert_eq!(
        (copied, more),
        (1, false),
        "only the committed event is copied"
    );
    assert_eq!(b.event_text_indexed_pg().await.expect("indexed"), 2);

    // The lock goes: a's transaction commits, with a lower id than the one indexed.
    psql.exec("ROLLBACK").await;
    let out = held.await.expect("task").expect("ingest");
    stored.add(&out.stored, &[late]);
    let late_id = stored.events[2].1;
    let early_id = stored.events[1].1;
    assert!(
        late_id < early_id,
        "ids {late_id} and {early_id} committed out of order"
    );
    assert_eq!(a.event_text_pending().await.expect("pending"), 1);
    let want = stored.scan("late-commit-marker", None);
    assert_eq!(want.len(), 2);
    for store in [&a, &b] {
        assert_eq!(
            store_pages(store, &by_text("late-commit-marker", None), 50).await,
            want
        );
        assert_eq!(
            store_pages(store, &by_text("LATE-commit", None), 1).await,
            want
        );
    }
    // Indexed now, once.
    let (copied, more) = a
        .index_event_text_pg(1_000)
        .await
        .expect("index")
        .expect("lock");
    assert_eq!((copied, more), (1, false));
    assert_eq!(a.event_text_pending().await.expect("pending"), 0);
    assert_eq!(a.event_text_indexed_pg().await.expect("indexed"), 3);
    for store in [&a, &b] {
        assert_eq!(
            store_pages(store, &by_text("late-commit-marker", None), 50).await,
            want
        );
    }
    drop(psql.stdin);
    let _ = psql.child.wait().await;
}
