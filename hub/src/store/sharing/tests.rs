//! The shared-ban tables against a real SQLite file: recording a batch with the cursor (origin
//! unbans' lifts included), the work of a target (what changed, or the whole set), settling,
//! lifting and the policy counters.

use chrono::Utc;

use super::super::{Cursor, Store};
use super::SharingBatch;
use crate::domain::events::{EventId, IpOrCidr, JailName};
use crate::domain::sharing::{
    NewSharedBan, OriginLift, PolicySpec, ServerSet, ShareDuration, ShareSource, SharedBanFilter,
    SharedBanStatus, SourceKind,
};
use crate::domain::{Labels, NewServer, ServerId, ServerName};

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
    let store = Store::connect(&url, 2).await.expect("connect");
    (dir, store)
}

async fn server(store: &Store, name: &str) -> ServerId {
    store
        .create_server(NewServer {
            name: ServerName::parse(name).expect("name"),
            description: String::new(),
            labels: Labels::default(),
        })
        .await
        .expect("server")
        .id
}

fn ban(
    ip: &str,
    target: ServerId,
    origin: ServerId,
    event: i64,
    expires_in: Option<i64>,
) -> NewSharedBan {
    NewSharedBan {
        ip: IpOrCidr::parse(ip).expect("ip"),
        target,
        origin_server: origin,
        origin_jail: JailName::parse("sshd").expect("jail"),
        origin_event: Some(EventId(event)),
        source: ShareSource {
            kind: SourceKind::Policy,
            id: "pol".to_owned(),
            name: "policy".to_owned(),
        },
        step: 1,
        expires_at: expires_in.map(|s| Utc::now() + chrono::Duration::seconds(s)),
        skipped: None,
    }
}

/// Records `bans` alone from `from` to `to`; whether the cursor was at `from`.
async fn record(store: &Store, from: i64, to: i64, bans: &[NewSharedBan], now: i64) -> bool {
    let batch = SharingBatch {
        bans: bans.to_vec(),
        ..SharingBatch::default()
    };
    store
        .record_sharing_batch(from, to, &batch, now)
        .await
        .expect("record")
        .is_some()
}

fn unban(ip: &str, origin: ServerId, event: i64) -> OriginLift {
    OriginLift {
        event: EventId(event),
        ip: ip.to_owned(),
        origin_server: origin,
        origin_jail: "sshd".to_owned(),
    }
}

#[tokio::test]
async fn recording_moves_the_cursor_once_and_never_doubles_a_ban() {
    let (_dir, store) = store().await;
    let (a, b) = (server(&store, "a").await, server(&store, "b").await);
    assert_eq!(
        store
            .init_cursor(Cursor::Sharing, 10)
            .await
            .expect("cursor"),
        10
    );
    assert_eq!(
        store
            .init_cursor(Cursor::Sharing, 99)
            .await
            .expect("cursor"),
        10,
        "a cursor is started once"
    );
    let now = Utc::now().timestamp_millis();
    let bans = vec![ban("203.0.113.7", b, a, 11, Some(600))];
    assert!(record(&store, 10, 11, &bans, now).await);
    // An engine that still thinks the cursor is at 10 records nothing.
    assert!(!record(&store, 10, 11, &bans, now).await);
    // The same origin event again (a retried batch) is left as it was.
    assert!(record(&store, 11, 12, &bans, now).await);
    assert_eq!(
        store.cursor(Cursor::Sharing).await.expect("cursor"),
        Some(12)
    );
    // The alert worker's cursor is another one.
    assert_eq!(store.cursor(Cursor::Alerts).await.expect("cursor"), None);
    let listed = store
        .list_shared_bans(&SharedBanFilter::default(), 10, now)
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, SharedBanStatus::Pending);
    assert_eq!(listed[0].origin_server, a);
}

#[tokio::test]
async fn a_target_is_told_what_changed_then_settled_and_lifts_keep_other_bans_of_an_address() {
    let (_dir, store) = store().await;
    let (a, b, c) = (
        server(&store, "a").await,
        server(&store, "b").await,
        server(&store, "c").await,
    );
    store.init_cursor(Cursor::Sharing, 0).await.expect("cursor");
    let now = Utc::now().timestamp_millis();
    let bans = vec![
        ban("203.0.113.7", b, a, 1, Some(600)),
        ban("203.0.113.7", b, c, 2, None),
        ban("203.0.113.8", b, a, 3, Some(-5)),
    ];
    assert!(record(&store, 0, 3, &bans, now).await);
    assert_eq!(
        store.targets_with_shared_work(now).await.expect("targets"),
        vec![b]
    );

    // The expired one is never sent; the address held twice is held until lifted.
    let work = store.shared_work(b, false, now).await.expect("work");
    let many = store.shared_work_many(&[b, c], now).await.expect("work");
    assert_eq!(many.len(), 1, "only B has work: {many:?}");
    assert_eq!(many[0].holds, work.holds);
    assert_eq!(many[0].lifts, work.lifts);
    assert_eq!(work.holds.len(), 1, "{work:?}");
    assert_eq!(work.holds["203.0.113.7"].0, None);
    assert!(work.lifts.contains(&"203.0.113.8".to_owned()), "{work:?}");
    store.settle_shared_work(&work, now).await.expect("settle");
    assert!(
        store
            .targets_with_shared_work(now)
            .await
            .expect("targets")
            .is_empty()
    );

    // A's unban lifts A's shared ban only: B keeps the address for C's.
    let batch = SharingBatch {
        lifts: vec![unban("203.0.113.7", a, 4)],
        follows: vec!["pol".to_owned()],
        ..SharingBatch::default()
    };
    let recorded = store
        .record_sharing_batch(3, 4, &batch, now)
        .await
        .expect("lift")
        .expect("the cursor was at 3");
    assert_eq!(recorded.lifted, vec![b]);
    let work = store.shared_work(b, false, now).await.expect("work");
    assert!(work.holds.contains_key("203.0.113.7"), "{work:?}");
    assert!(work.lifts.is_empty(), "{work:?}");
    store.settle_shared_work(&work, now).await.expect("settle");

    // Everywhere: nothing of the address is left, so it is lifted.
    store
        .lift_shared_bans("203.0.113.7", now)
        .await
        .expect("lift");
    let work = store.shared_work(b, false, now).await.expect("work");
    assert_eq!(work.lifts, vec!["203.0.113.7".to_owned()]);
    assert!(work.holds.is_empty());
    store.settle_shared_work(&work, now).await.expect("settle");
    let full = store.shared_work(b, true, now).await.expect("work");
    assert!(full.is_empty() && full.pending_ids.is_empty() && full.lift_ids.is_empty());
}

#[tokio::test]
async fn policies_round_trip_with_their_counters() {
    let (_dir, store) = store().await;
    let spec = PolicySpec {
        name: "p".to_owned(),
        enabled: true,
        sources: ServerSet::All,
        jails: Vec::new(),
        min_failures: Some(3),
        targets: ServerSet::All,
        duration: ShareDuration::Ladder {
            steps: vec![60, 600],
        },
        unban_follows_origin: false,
    };
    let policy = store.create_sharing_policy(&spec).await.expect("create");
    assert_eq!(policy.spec, spec);
    assert!(
        store
            .sharing_policy_name_taken("p", None)
            .await
            .expect("taken")
    );
    assert!(
        !store
            .sharing_policy_name_taken("p", Some(&policy.id))
            .await
            .expect("taken")
    );
    let (a, b) = (server(&store, "a").await, server(&store, "b").await);
    store.init_cursor(Cursor::Sharing, 0).await.expect("cursor");
    let mut shared = ban("203.0.113.7", b, a, 1, Some(600));
    shared.source.id = policy.id.clone();
    let now = Utc::now().timestamp_millis();
    assert!(record(&store, 0, 1, &[shared], now).await);
    let counters = store.sharing_policy_counters(now).await.expect("counters");
    assert_eq!(counters[&policy.id].total, 1);
    assert_eq!(counters[&policy.id].active, 1);
    let steps = store
        .shared_counts(SourceKind::Policy, &["203.0.113.7".to_owned()])
        .await
        .expect("counts");
    assert_eq!(steps[&(policy.id.clone(), "203.0.113.7".to_owned())], 1);
    assert!(
        store
            .delete_sharing_policy(&policy.id)
            .await
            .expect("delete")
    );
    assert!(
        store
            .sharing_policy(&policy.id)
            .await
            .expect("read")
            .is_none()
    );
}

#[tokio::test]
async fn an_origin_unban_is_lifted_with_the_cursor_and_spares_later_bans() {
    let (_dir, store) = store().await;
    let (a, b) = (server(&store, "a").await, server(&store, "b").await);
    store.init_cursor(Cursor::Sharing, 0).await.expect("cursor");
    let now = Utc::now().timestamp_millis();
    assert!(record(&store, 0, 1, &[ban("203.0.113.7", b, a, 1, Some(600))], now).await);
    let delivered = store.shared_work(b, false, now).await.expect("work");
    store
        .settle_shared_work(&delivered, now)
        .await
        .expect("settle");

    // A batch of an unban at A (event 2) and a new ban of the same address (event 3).
    let batch = SharingBatch {
        bans: vec![ban("203.0.113.7", b, a, 3, Some(600))],
        lifts: vec![unban("203.0.113.7", a, 2)],
        follows: vec!["pol".to_owned()],
        ..SharingBatch::default()
    };
    // An engine whose cursor is stale records no lift either.
    assert_eq!(
        store
            .record_sharing_batch(0, 3, &batch, now)
            .await
            .expect("record"),
        None
    );
    let status = |bans: &[crate::domain::sharing::SharedBan]| -> Vec<(i64, SharedBanStatus)> {
        let mut s: Vec<_> = bans
            .iter()
            .map(|b| (b.origin_event.map_or(0, |e| e.0), b.status))
            .collect();
        s.sort_by_key(|(e, _)| *e);
        s
    };
    let listed = store
        .list_shared_bans(&SharedBanFilter::default(), 10, now)
        .await
        .expect("list");
    assert_eq!(status(&listed), vec![(1, SharedBanStatus::Delivered)]);

    // Recorded with the cursor, the lift is durable before anything is sent: the ban before the
    // unban is lifted, the one after it stays, and B has a lift to be told.
    let recorded = store
        .record_sharing_batch(1, 3, &batch, now)
        .await
        .expect("record")
        .expect("the cursor was at 1");
    assert_eq!(recorded.lifted, vec![b]);
    let listed = store
        .list_shared_bans(&SharedBanFilter::default(), 10, now)
        .await
        .expect("list");
    assert_eq!(
        status(&listed),
        vec![(1, SharedBanStatus::Lifted), (3, SharedBanStatus::Pending)]
    );
    assert_eq!(
        store.targets_with_shared_work(now).await.expect("targets"),
        vec![b]
    );
    let work = store.shared_work(b, false, now).await.expect("work");
    assert_eq!(work.lift_ids.len(), 1, "{work:?}");
    assert!(work.holds.contains_key("203.0.113.7"), "{work:?}");

    // Not confirmed (the hub died, or the agent was offline): the next pass finds it again.
    assert_eq!(
        store.targets_with_shared_work(now).await.expect("targets"),
        vec![b]
    );
    store.settle_shared_work(&work, now).await.expect("settle");
    assert!(
        store
            .targets_with_shared_work(now)
            .await
            .expect("targets")
            .is_empty()
    );
}
