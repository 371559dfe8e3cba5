//! The store side of hub replicas and fleet actions (`banhub::store::cluster`), on real databases:
//! leases, relayed commands, `LISTEN/NOTIFY` and advisory locks on PostgreSQL (two stores with their
//! own pools stand for two replicas); fleet actions and labels on both SQLite and PostgreSQL.

use std::time::Duration;

use banhub::domain::{AgentId, Labels, NewServer, ServerId, ServerName};
use banhub::store::Store;
use banhub::store::cluster::{ForwardedOutcome, Notice};
use banhub::store::fleet_actions::{NewFleetAction, TargetOutcome, TargetState};
use banhub_tests::PostgresServer;
use chrono::Utc;
use tempfile::TempDir;

struct Pg {
    server: PostgresServer,
    url: String,
}

fn postgres(name: &str) -> Pg {
    let server =
        PostgresServer::start().unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = server
        .create_database(name)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
    Pg { server, url }
}

async fn connect(url: &str) -> Store {
    Store::connect(url, 4)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

async fn server(store: &Store, name: &str, labels: &[(&str, &str)]) -> ServerId {
    store
        .create_server(NewServer {
            name: ServerName::parse(name).expect("name"),
            description: String::new(),
            labels: Labels::parse(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
            .expect("labels"),
        })
        .await
        .expect("server created")
        .id
}

#[tokio::test]
async fn leases_follow_the_newest_session_and_expire() {
    let pg = postgres("banhub_leases");
    let a = connect(&pg.url).await;
    let b = connect(&pg.url).await;
    assert!(a.is_shared());
    let s1 = server(&a, "web-1", &[]).await;
    let agent = AgentId::new();

    let first = a
        .acquire_lease(s1, agent, "a", 60_000)
        .await
        .expect("lease");
    assert_eq!(first.generation, 1);
    assert_eq!(first.previous, None);
    // The same agent reconnects to replica b: b takes over and learns that a held it.
    let second = b
        .acquire_lease(s1, agent, "b", 60_000)
        .await
        .expect("lease");
    assert_eq!(second.generation, 2);
    assert_eq!(second.previous.as_deref(), Some("a"));
    let lease = a.lease(s1).await.expect("read").expect("valid");
    assert_eq!((lease.replica.as_str(), lease.generation), ("b", 2));
    assert_eq!(lease.agent, Some(agent));
    assert!(a.leases_of("a").await.expect("read").is_empty());
    assert_eq!(b.leases_of("b").await.expect("read").get(&s1), Some(&2));

    // a's late release of its old generation changes nothing; b's own release removes it.
    assert!(!a.release_lease(s1, "a", 1).await.expect("release"));
    assert!(a.lease(s1).await.expect("read").is_some());
    assert!(b.release_lease(s1, "b", 2).await.expect("release"));
    assert!(a.lease(s1).await.expect("read").is_none());

    // A lease that is not renewed is void; renewing extends every lease of the replica.
    let s2 = server(&a, "web-2", &[]).await;
    let short = a.acquire_lease(s2, agent, "a", 300).await.expect("lease");
    assert_eq!(short.previous, None);
    assert_eq!(a.renew_leases("a", 60_000).await.expect("renew"), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(a.lease(s2).await.expect("read").is_some(), "renewed");
    let s3 = server(&a, "web-3", &[]).await;
    a.acquire_lease(s3, agent, "c", 200).await.expect("lease");
    let mut expired = false;
    for _ in 0..50 {
        if a.lease(s3).await.expect("read").is_none() {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(expired, "an unrenewed lease expires");
    // An expired holder is not reported as one to drop.
    let taken = b
        .acquire_lease(s3, agent, "b", 60_000)
        .await
        .expect("lease");
    assert_eq!(taken.previous, None);
    assert_eq!(a.leases().await.expect("read").len(), 2);
    assert_eq!(a.clear_leases_of("b").await.expect("clear"), 1);

    a.replica_heartbeat("a", Utc::now())
        .await
        .expect("heartbeat");
    let replicas = a.replicas(60_000).await.expect("replicas");
    assert_eq!(replicas.len(), 1);
    assert_eq!((replicas[0].id.as_str(), replicas[0].agents), ("a", 1));
    drop(pg.server);
}

#[tokio::test]
async fn a_forwarded_command_is_claimed_once_and_answered_back() {
    let pg = postgres("banhub_relay");
    let a = connect(&pg.url).await;
    let b = connect(&pg.url).await;
    let s1 = server(&a, "web-1", &[]).await;
    let deadline = Utc::now().timestamp_millis() + 10_000;
    a.insert_forwarded_command("r1", s1, "a", "b", vec![1, 2, 3], deadline)
        .await
        .expect("insert");
    assert_eq!(
        b.pending_forwarded_commands("b").await.expect("pending"),
        vec!["r1".to_owned()]
    );
    // Only the addressed replica can claim it, and only once.
    assert!(
        a.claim_forwarded_command("r1", "a")
            .await
            .expect("claim")
            .is_none()
    );
    let (claimed, origin) = b
        .claim_forwarded_command("r1", "b")
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(origin, "a");
    assert_eq!(claimed.server, s1);
    assert_eq!(claimed.command, vec![1, 2, 3]);
    assert_eq!(claimed.deadline_ms, deadline);
    assert!(
        b.claim_forwarded_command("r1", "b")
            .await
            .expect("claim")
            .is_none()
    );
    assert!(
        a.take_forwarded_outcome("r1")
            .await
            .expect("take")
            .is_none(),
        "not answered yet"
    );
    assert!(
        b.finish_forwarded_command("r1", ForwardedOutcome::Answered(vec![9]))
            .await
            .expect("finish")
    );
    assert_eq!(
        a.take_forwarded_outcome("r1").await.expect("take"),
        Some(ForwardedOutcome::Answered(vec![9]))
    );
    assert!(
        a.take_forwarded_outcome("r1")
            .await
            .expect("take")
            .is_none(),
        "taken once"
    );
    // An answer to a command the asker gave up on goes nowhere.
    assert!(
        !b.finish_forwarded_command("r1", ForwardedOutcome::Failed("offline".into()))
            .await
            .expect("finish")
    );

    a.insert_forwarded_command("r2", s1, "a", "b", vec![], deadline)
        .await
        .expect("insert");
    b.finish_forwarded_command("r2", ForwardedOutcome::Failed("offline".into()))
        .await
        .expect("finish");
    assert_eq!(
        a.take_forwarded_outcome("r2").await.expect("take"),
        Some(ForwardedOutcome::Failed("offline".into()))
    );
    a.insert_forwarded_command("r3", s1, "a", "b", vec![], deadline)
        .await
        .expect("insert");
    assert_eq!(
        a.purge_forwarded_commands(Utc::now().timestamp_millis() + 1)
            .await
            .expect("purge"),
        1
    );
    drop(pg.server);
}

#[tokio::test]
async fn notifications_reach_listeners_and_advisory_locks_are_exclusive() {
    let pg = postgres("banhub_notify");
    let a = connect(&pg.url).await;
    let b = connect(&pg.url).await;
    let mut listener = b
        .listen(&["banhub_test".to_owned(), "other".to_owned()])
        .await
        .expect("listen")
        .expect("postgres listens");
    a.notify("banhub_test", "run:42").await.expect("notify");
    a.notify("unheard", "x").await.expect("notify");
    a.notify("other", "y").await.expect("notify");
    let first = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("in time")
        .expect("received");
    assert_eq!(
        first,
        Notice::Message {
            channel: "banhub_test".into(),
            payload: "run:42".into()
        }
    );
    let second = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("in time")
        .expect("received");
    assert_eq!(
        second,
        Notice::Message {
            channel: "other".into(),
            payload: "y".into()
        }
    );

    let mut one = a.lock_connection().await.expect("conn").expect("postgres");
    let mut two = b.lock_connection().await.expect("conn").expect("postgres");
    assert!(one.try_lock(77).await.expect("try"));
    assert!(
        !two.try_lock(77).await.expect("try"),
        "held by the other replica"
    );
    assert!(two.try_lock(78).await.expect("try"), "another job is free");
    assert!(one.alive().await);
    // The lock goes with its connection, as when a replica dies.
    drop(one);
    let mut taken = false;
    for _ in 0..100 {
        if two.try_lock(77).await.expect("try") {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        taken,
        "the lock is free once its holder's connection is gone"
    );

    assert_eq!(
        a.init_cluster_setting("ca_fingerprint", "aa")
            .await
            .expect("init"),
        "aa"
    );
    assert_eq!(
        b.init_cluster_setting("ca_fingerprint", "bb")
            .await
            .expect("init"),
        "aa",
        "the first replica's value stays"
    );
    drop(pg.server);
}

async fn fleet_actions_on(store: Store) {
    let web = server(&store, "web-1", &[("env", "prod")]).await;
    let db = server(&store, "db-1", &[("env", "prod")]).await;
    let updated = store
        .set_server_labels(
            db,
            &Labels::parse([("env".into(), "staging".into())].into()).expect("labels"),
        )
        .await
        .expect("labels")
        .expect("server");
    assert_eq!(
        updated.labels.as_map().get("env").map(String::as_str),
        Some("staging")
    );
    assert!(
        store
            .set_server_labels(ServerId::new(), &Labels::default())
            .await
            .expect("labels")
            .is_none()
    );

    let action = NewFleetAction {
        id: "0190a3c0-0000-7000-8000-000000000001".into(),
        ban: true,
        ip: "203.0.113.7".into(),
        jail: Some("sshd".into()),
        selector: "\"all\"".into(),
        requested_by: "tester".into(),
        deadline: Utc::now() + chrono::Duration::seconds(60),
        targets: vec![
            (web, "web-1".into(), "c-web".into()),
            (db, "db-1".into(), "c-db".into()),
        ],
    };
    store.create_fleet_action(&action).await.expect("created");
    assert_eq!(store.due_targets(None).await.expect("due").len(), 2);
    let due = store.due_targets(Some(web)).await.expect("due");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].command_id, "c-web");
    assert!(due[0].ban);
    assert_eq!(due[0].jail.as_deref(), Some("sshd"));

    // Delivered once only; back to the queue when the agent went away; done at last.
    assert!(store.claim_target(&action.id, web).await.expect("claim"));
    assert!(!store.claim_target(&action.id, web).await.expect("claim"));
    store
        .requeue_target(&action.id, web)
        .await
        .expect("requeue");
    assert!(store.claim_target(&action.id, web).await.expect("claim"));
    store
        .finish_target(
            &action.id,
            web,
            &TargetOutcome::Done {
                changed: true,
                jails: vec!["sshd".into()],
            },
        )
        .await
        .expect("finish");

    let record = store
        .fleet_action(&action.id)
        .await
        .expect("read")
        .expect("exists");
    let web_target = record
        .targets
        .iter()
        .find(|t| t.server_id == web)
        .expect("web");
    assert_eq!(web_target.state, TargetState::Done);
    assert_eq!(web_target.changed, Some(true));
    assert_eq!(web_target.jails, vec!["sshd".to_owned()]);
    assert_eq!(web_target.attempts, 2);
    assert!(web_target.finished_at.is_some());
    assert_eq!(record.counts.get("done"), Some(&1));
    assert_eq!(record.counts.get("queued"), Some(&1));

    // A second action whose deadline has passed: its queued target expires, the first one's not.
    let late = NewFleetAction {
        id: "0190a3c0-0000-7000-8000-000000000002".into(),
        deadline: Utc::now() - chrono::Duration::seconds(1),
        targets: vec![(db, "db-1".into(), "c-late".into())],
        ..action.clone()
    };
    store.create_fleet_action(&late).await.expect("created");
    assert!(
        !store.claim_target(&late.id, db).await.expect("claim"),
        "past its deadline"
    );
    assert_eq!(store.expire_targets().await.expect("expire"), 1);
    let late_record = store
        .fleet_action(&late.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(late_record.targets[0].state, TargetState::Expired);
    // A finished or expired target never changes again.
    store
        .finish_target(&late.id, db, &TargetOutcome::Failed("late".into()))
        .await
        .expect("finish");
    let late_record = store
        .fleet_action(&late.id)
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(late_record.targets[0].state, TargetState::Expired);

    let listed = store.list_fleet_actions(10, None).await.expect("list");
    assert_eq!(
        listed.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec![late.id.as_str(), action.id.as_str()]
    );
    assert_eq!(listed[0].counts.get("expired"), Some(&1));
    assert!(listed[0].targets.is_empty());
    let older = store
        .list_fleet_actions(10, Some(&late.id))
        .await
        .expect("list");
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, action.id);
}

#[tokio::test]
async fn fleet_actions_on_sqlite() {
    let dir = TempDir::new().expect("tempdir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("banhub.db").display()
    );
    let store = connect(&url).await;
    assert!(!store.is_shared());
    fleet_actions_on(store).await;
}

#[tokio::test]
async fn fleet_actions_on_postgres() {
    let pg = postgres("banhub_actions");
    fleet_actions_on(connect(&pg.url).await).await;
    drop(pg.server);
}
