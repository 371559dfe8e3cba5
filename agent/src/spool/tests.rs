//! Tests of the spool against real files in a temporary directory.

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write;

use tempfile::TempDir;

use super::testing::ban;
use super::*;

fn failures(event: &Event) -> u32 {
    match event {
        Event::Ban(b) | Event::Unban(b) => b.failures,
        Event::Gap(_) => u32::MAX,
    }
}

/// The smallest legal configuration, so a few hundred events span several segments.
fn small() -> SpoolConfig {
    SpoolConfig {
        max_bytes: 4 * SpoolConfig::MIN_SEGMENT_BYTES,
        segment_bytes: SpoolConfig::MIN_SEGMENT_BYTES,
        on_corruption: OnCorruption::Refuse,
    }
}

async fn open(dir: &TempDir, config: SpoolConfig) -> Spool {
    Spool::open(dir.path(), config).await.expect("open spool")
}

/// Appends `events` concurrently (so they share syncs) and returns their positions.
async fn append_all(spool: &Spool, events: impl IntoIterator<Item = Event>) -> Vec<Position> {
    let tasks: Vec<_> = events
        .into_iter()
        .map(|event| {
            let spool = spool.clone();
            tokio::spawn(async move { spool.append(event).await })
        })
        .collect();
    let mut positions = Vec::new();
    for task in tasks {
        positions.push(task.await.expect("task").expect("append"));
    }
    positions
}

fn segments(dir: &TempDir) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    paths.sort();
    paths
}

#[tokio::test]
async fn numbering_resumes_after_reopen() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    let epoch = spool.epoch();
    assert!(epoch > 0 && epoch < 1 << 53);
    for i in 1..=3 {
        let position = spool.append(ban(i)).await.expect("append");
        assert_eq!(
            position,
            Position {
                epoch,
                seq: u64::from(i)
            }
        );
    }
    assert_eq!(*spool.watch().borrow(), 3);
    spool.close().await;

    let spool = open(&dir, SpoolConfig::default()).await;
    assert_eq!(spool.epoch(), epoch, "the epoch is kept in spool.json");
    let head = spool.head().await.expect("head");
    assert_eq!((head.position.seq, head.depth, head.acked_seq), (3, 3, 0));
    assert_eq!(head.oldest_unacked_received_at_ms, Some(1_790_000_000_001));
    assert_eq!(spool.append(ban(4)).await.expect("append").seq, 4);
    let records = spool.pending(0, 100).await.expect("pending");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(records[2].event, ban(3));
}

#[tokio::test]
async fn a_second_process_cannot_open_the_same_spool() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    let err = Spool::open(dir.path(), SpoolConfig::default())
        .await
        .expect_err("locked");
    assert!(matches!(err, SpoolError::Locked { .. }), "{err}");
    spool.close().await;
    open(&dir, SpoolConfig::default()).await;
}

/// A closed spool in `dir` holding bans 1–3 in its one segment: the segment and its length.
async fn three_bans_in_one_segment(dir: &TempDir) -> (PathBuf, u64) {
    let spool = open(dir, SpoolConfig::default()).await;
    append_all(&spool, (1..=3).map(ban)).await;
    spool.close().await;
    let [segment] = &segments(dir)[..] else {
        panic!("one segment");
    };
    let clean_len = fs::metadata(segment).expect("stat").len();
    (segment.clone(), clean_len)
}

#[tokio::test]
async fn torn_tail_is_truncated_and_its_number_reused() {
    let dir = TempDir::new().expect("tempdir");
    let (segment, clean_len) = three_bans_in_one_segment(&dir).await;
    let segment = &segment;

    // A fourth record cut off halfway, as a crash during its write leaves it.
    let mut frame = Vec::new();
    frame::encode(4, &serde_json::to_vec(&ban(4)).expect("json"), &mut frame);
    let mut file = OpenOptions::new().append(true).open(segment).expect("open");
    file.write_all(&frame[..frame.len() / 2]).expect("write");
    drop(file);

    let spool = open(&dir, small()).await;
    assert_eq!(fs::metadata(segment).expect("stat").len(), clean_len);
    assert_eq!(spool.head().await.expect("head").position.seq, 3);
    assert_eq!(spool.append(ban(5)).await.expect("append").seq, 4);
    spool.close().await;

    // Zeros past the end (the size grew, the data never landed) are a torn tail too.
    let mut file = OpenOptions::new().append(true).open(segment).expect("open");
    file.write_all(&[0u8; 4096]).expect("write");
    drop(file);
    let spool = open(&dir, small()).await;
    let records = spool.pending(0, 10).await.expect("pending");
    assert_eq!(records.len(), 4);
    assert_eq!(failures(&records[3].event), 5);
}

#[tokio::test]
async fn segment_torn_at_creation_is_removed() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    append_all(&spool, (1..=2).map(ban)).await;
    spool.close().await;
    let torn = dir.path().join(format!("{:020}.seg", 3));
    fs::write(&torn, b"BHSPOOL").expect("write");
    let spool = open(&dir, small()).await;
    assert!(!torn.exists());
    assert_eq!(spool.append(ban(3)).await.expect("append").seq, 3);
}

#[tokio::test]
async fn damage_in_the_middle_is_refused_or_salvaged_with_a_gap() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    append_all(&spool, (1..=5).map(ban)).await;
    spool.close().await;
    let [segment] = &segments(&dir)[..] else {
        panic!("one segment");
    };
    let mut bytes = fs::read(segment).expect("read");
    let second = frame::scan(&bytes, 0).frames[1].1 as usize;
    bytes[second + 20] ^= 0x55;
    fs::write(segment, &bytes).expect("write");

    let err = Spool::open(dir.path(), small()).await.expect_err("refused");
    let SpoolError::Corrupt {
        offset, after_seq, ..
    } = err
    else {
        panic!("not Corrupt: {err}");
    };
    assert_eq!((offset, after_seq), (second as u64, 1));
    assert_eq!(
        fs::read(segment).expect("read"),
        bytes,
        "refusing touches nothing"
    );

    let config = SpoolConfig {
        on_corruption: OnCorruption::Salvage,
        ..small()
    };
    let spool = open(&dir, config.clone()).await;
    let records = spool.pending(0, 100).await.expect("pending");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 3, 4, 5, 6]);
    let Event::Gap(gap) = &records[4].event else {
        panic!("not a gap: {:?}", records[4]);
    };
    assert_eq!(
        (gap.reason, &gap.ranges[..], gap.lost),
        (
            GapReason::Corruption,
            &[SeqRange { first: 2, last: 2 }][..],
            1
        )
    );
    let kept: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "the damaged file is kept for inspection");
    spool.close().await;

    // Salvage happened once: reopening finds a clean spool and adds no second gap.
    let spool = open(&dir, small()).await;
    assert_eq!(spool.head().await.expect("head").position.seq, 6);
}

#[tokio::test]
async fn damage_in_an_older_segment_is_salvaged_too() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    // Enough for three segments of the smallest size (binary records are about 140 bytes).
    append_all(&spool, (1..=3000).map(ban)).await;
    spool.close().await;
    let files = segments(&dir);
    assert!(files.len() >= 3, "{files:?}");
    let next_first = before_first(&files[1..]);

    // Cut the first segment's last record short: in an older segment that is damage, not a torn
    // write, because later segments were written after it.
    let bytes = fs::read(&files[0]).expect("read");
    let frames = frame::scan(&bytes, 0).frames;
    let (last_seq, last_offset) = *frames.last().expect("frames");
    assert_eq!(last_seq, next_first - 1);
    fs::write(&files[0], &bytes[..last_offset as usize + 10]).expect("write");

    let err = Spool::open(dir.path(), small()).await.expect_err("refused");
    assert!(
        matches!(err, SpoolError::Corrupt { after_seq, .. } if after_seq == last_seq - 1),
        "{err}"
    );

    let config = SpoolConfig {
        on_corruption: OnCorruption::Salvage,
        ..small()
    };
    let spool = open(&dir, config).await;
    let records = spool.pending(0, usize::MAX).await.expect("pending");
    assert_eq!(records.len(), 3000, "2999 events and one gap");
    assert!(records.iter().all(|r| r.seq != last_seq));
    // The gap goes after the last record, which was number 3000.
    let Event::Gap(gap) = &records[2999].event else {
        panic!("not a gap: {:?}", records[2999]);
    };
    assert_eq!(records[2999].seq, 3001);
    assert_eq!(
        gap.ranges,
        [SeqRange {
            first: last_seq,
            last: last_seq
        }]
    );
    assert_eq!(gap.reason, GapReason::Corruption);
}

#[tokio::test]
async fn acks_persist_and_compaction_deletes_acknowledged_segments() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    let epoch = spool.epoch();
    // Enough for three segments of the smallest size (binary records are about 140 bytes).
    let n = 3000;
    append_all(&spool, (1..=n).map(ban)).await;
    let before = segments(&dir);
    assert!(before.len() >= 3, "{} segments", before.len());

    let err = spool.ack(epoch + 1, 10).await.expect_err("wrong epoch");
    assert!(matches!(err, SpoolError::EpochMismatch { .. }), "{err}");
    let err = spool
        .ack(epoch, u64::from(n) + 1)
        .await
        .expect_err("beyond");
    assert!(matches!(err, SpoolError::AckBeyondEnd { .. }), "{err}");

    // Acking inside the second segment deletes only the first.
    let second_first: u64 = before[1]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("segment name");
    spool.ack(epoch, second_first).await.expect("ack");
    let after = segments(&dir);
    assert_eq!(after, before[1..]);
    let head = spool.head().await.expect("head");
    assert_eq!(head.acked_seq, second_first);
    assert_eq!(head.depth, u64::from(n) - second_first);
    assert_eq!(
        head.oldest_unacked_received_at_ms,
        Some(1_790_000_000_000 + i64::try_from(second_first).expect("small") + 1)
    );
    spool.ack(epoch, 5).await.expect("an older ack is harmless");
    let records = spool.pending(0, 3).await.expect("pending");
    assert_eq!(records[0].seq, before_first(&after));

    spool.ack(epoch, u64::from(n)).await.expect("ack all");
    assert_eq!(segments(&dir).len(), 1, "the active segment stays");
    let head = spool.head().await.expect("head");
    assert_eq!((head.depth, head.oldest_unacked_received_at_ms), (0, None));
    spool.close().await;

    let spool = open(&dir, small()).await;
    let head = spool.head().await.expect("head");
    assert_eq!((head.acked_seq, head.depth), (u64::from(n), 0));
    assert_eq!(spool.pending(u64::from(n), 10).await.expect("pending"), []);
    assert_eq!(
        spool.append(ban(0)).await.expect("append").seq,
        u64::from(n) + 1
    );
}

fn before_first(segments: &[PathBuf]) -> u64 {
    segments[0]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("segment name")
}

#[tokio::test]
async fn pending_pages_across_segments() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    append_all(&spool, (1..=1000).map(ban)).await;
    let mut after = 0;
    let mut seen = Vec::new();
    loop {
        let batch = spool.pending(after, 128).await.expect("pending");
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 128);
        after = batch.last().expect("non-empty").seq;
        seen.extend(batch.into_iter().map(|r| (r.seq, failures(&r.event))));
    }
    assert_eq!(seen.len(), 1000);
    let rest = spool.pending(500, usize::MAX).await.expect("pending");
    assert_eq!(rest.len(), 500);
    assert_eq!(rest[0].seq, 501);
    assert!(seen.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    let failures: BTreeSet<u32> = seen.iter().map(|s| s.1).collect();
    assert_eq!(failures, (1..=1000).collect());
}

#[tokio::test]
async fn full_spool_drops_the_oldest_and_records_each_drop_as_a_gap() {
    let dir = TempDir::new().expect("tempdir");
    let config = small();
    let spool = open(&dir, config.clone()).await;
    let epoch = spool.epoch();
    spool.ack(epoch, 0).await.expect("ack nothing");
    append_all(&spool, (1..=100).map(ban)).await;
    spool.ack(epoch, 100).await.expect("ack the first hundred");
    // About 130 bytes a record (binary), so 12000 records are three times the bound.
    append_all(&spool, (101..=12000).map(ban)).await;

    let head = spool.head().await.expect("head");
    assert!(head.bytes <= config.max_bytes, "{head:?}");
    let records = spool.pending(0, usize::MAX).await.expect("pending");
    let gaps: Vec<&GapEvent> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Gap(gap) => Some(gap),
            _ => None,
        })
        .collect();
    assert!(!gaps.is_empty());
    // Every number is either stored or inside a gap, and no acknowledged event is called lost.
    let records: Vec<&Record> = records.iter().filter(|r| r.seq > 100).collect();
    let mut accounted: BTreeSet<u64> = records.iter().map(|r| r.seq).collect();
    let mut lost = 0;
    for gap in &gaps {
        assert_eq!(gap.reason, GapReason::Overflow);
        assert!(gap.ranges[0].first > 100, "{gap:?}");
        assert_eq!(SeqRange::coalesce(gap.ranges.clone()), gap.ranges);
        assert!(gap.oldest_received_at_ms <= gap.newest_received_at_ms);
        assert!(gap.oldest_received_at_ms.is_some());
        lost += gap.lost;
        for range in &gap.ranges {
            accounted.extend(range.first..=range.last);
        }
    }
    let last = head.position.seq;
    assert_eq!(accounted, (101..=last).collect::<BTreeSet<u64>>());
    let bans = records
        .iter()
        .filter(|r| !matches!(r.event, Event::Gap(_)))
        .count() as u64;
    assert_eq!(
        bans + lost,
        11900,
        "every appended event is stored or counted lost"
    );
    // Each gap record takes a number; a dropped one is folded into a later gap.
    assert!(last >= 12000 + gaps.len() as u64);
    // A gap comes with the first event after the drop, so one gap covers a whole segment.
    assert!(gaps.len() < 20, "{} gaps", gaps.len());
}

#[tokio::test]
async fn concurrent_appends_get_unique_consecutive_numbers() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    let tasks: Vec<_> = (0..20u32)
        .map(|t| {
            let spool = spool.clone();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..50 {
                    seqs.push(spool.append(ban(t * 100 + i)).await.expect("append").seq);
                }
                seqs
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        let seqs = task.await.expect("task");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "one task's appends keep their order"
        );
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=1000).collect::<Vec<u64>>());
    let records = spool.pending(0, 2000).await.expect("pending");
    assert_eq!(records.len(), 1000);
}

#[tokio::test]
async fn configuration_is_checked() {
    let dir = TempDir::new().expect("tempdir");
    for config in [
        SpoolConfig {
            segment_bytes: 1000,
            ..SpoolConfig::default()
        },
        SpoolConfig {
            max_bytes: SpoolConfig::default().segment_bytes,
            ..SpoolConfig::default()
        },
    ] {
        let err = Spool::open(dir.path(), config)
            .await
            .expect_err("bad config");
        assert!(matches!(err, SpoolError::Config(_)), "{err}");
    }
}

#[tokio::test]
async fn closed_spool_answers_closed() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, SpoolConfig::default()).await;
    let other = spool.clone();
    spool.close().await;
    let err = other.append(ban(1)).await.expect_err("closed");
    assert!(matches!(err, SpoolError::Closed), "{err}");
}

#[tokio::test]
async fn records_delivered_from_memory_equal_what_the_segments_hold() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    let mut events: Vec<Event> = (1..=300).map(ban).collect();
    // An unban with every optional field empty and one with long, capped log lines.
    if let Event::Ban(mut sparse) = ban(301) {
        sparse.ban_time = None;
        sparse.ban_duration = None;
        sparse.ban_count = None;
        sparse.logs = Logs::default();
        events.push(Event::Unban(sparse));
    }
    if let Event::Ban(mut long) = ban(302) {
        long.logs = Logs::capped((0..80).map(|n| format!("line {n} {}", "x".repeat(400))));
        long.ban_duration = Some(BanDuration::Permanent);
        events.push(Event::Ban(long));
    }
    for event in &events {
        spool.append(event.clone()).await.expect("append");
    }
    // Take a few from memory first, so the next read mixes memory and disk.
    let early = spool.pending(100, 20).await.expect("pending");
    assert_eq!(early.len(), 20);
    let mixed = spool.pending(0, usize::MAX).await.expect("pending");
    let from_disk = spool.pending(0, usize::MAX).await.expect("pending");
    let expected: Vec<Record> = events
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, event)| Record {
            seq: i as u64 + 1,
            event,
        })
        .collect();
    assert_eq!(&early[..], &expected[100..120]);
    assert_eq!(mixed, expected);
    assert_eq!(from_disk, expected);
    // What a restart reads back is the same again.
    spool.close().await;
    let spool = open(&dir, small()).await;
    assert_eq!(
        spool.pending(0, usize::MAX).await.expect("pending"),
        expected
    );
}

#[tokio::test]
async fn acknowledged_records_leave_memory_and_still_read_back() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    let positions = append_all(&spool, (1..=50).map(ban)).await;
    let epoch = positions[0].epoch;
    spool.ack(epoch, 30).await.expect("ack");
    // 1..=30 left memory with the ack and come from the segment, 31..=50 from memory.
    let all = spool.pending(0, usize::MAX).await.expect("pending");
    assert_eq!(
        all.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (1..=50).collect::<Vec<_>>()
    );
    let mut failures: Vec<u32> = all.iter().map(|r| failures(&r.event)).collect();
    failures.sort_unstable();
    assert_eq!(failures, (1..=50).collect::<Vec<_>>());
    // Appends after the ack continue the numbers in memory and on disk alike.
    let more = append_all(&spool, (51..=60).map(ban)).await;
    assert_eq!(more.iter().map(|p| p.seq).max(), Some(60));
    let next = spool.pending(50, usize::MAX).await.expect("pending");
    let again = spool.pending(50, usize::MAX).await.expect("pending");
    assert_eq!(
        next.iter().map(|r| r.seq).collect::<Vec<_>>(),
        (51..=60).collect::<Vec<_>>()
    );
    assert_eq!(next, again, "memory and disk agree");
}

/// A spool as an agent before binary records left it: every frame's payload is JSON (a gap
/// among them). After the upgrade the same spool opens, delivers those records, takes new (binary)
/// ones in the same segment, and after a restart reads both kinds back from disk.
#[tokio::test]
async fn json_records_written_before_the_upgrade_still_read() {
    let dir = TempDir::new().expect("tempdir");
    let spool = open(&dir, small()).await;
    let epoch = spool.epoch();
    spool.close().await;

    let gap = Event::Gap(GapEvent {
        reason: GapReason::Overflow,
        ranges: vec![SeqRange { first: 1, last: 2 }],
        lost: 2,
        detected_at_ms: 1_790_000_000_000,
        oldest_received_at_ms: None,
        newest_received_at_ms: None,
    });
    let old: Vec<Event> = [gap].into_iter().chain((4..=6).map(ban)).collect();
    let mut segment = frame::Header {
        epoch,
        first_seq: 3,
    }
    .encode()
    .to_vec();
    for (seq, event) in (3..).zip(&old) {
        let json = serde_json::to_vec(event).expect("json");
        assert_eq!(json[0], b'{');
        frame::encode(seq, &json, &mut segment);
    }
    fs::write(dir.path().join(format!("{:020}.seg", 3)), &segment).expect("write segment");

    let spool = open(&dir, small()).await;
    assert_eq!(spool.head().await.expect("head").position.seq, 6);
    let records = spool.pending(0, 10).await.expect("pending");
    let events: Vec<Event> = records.iter().map(|r| r.event.clone()).collect();
    assert_eq!(events, old);
    assert_eq!(records[0].seq, 3);

    // New records follow in the same segment, binary.
    let positions = append_all(&spool, (7..=9).map(ban)).await;
    assert_eq!(
        positions.iter().map(|p| p.seq).collect::<Vec<_>>(),
        [7, 8, 9]
    );
    spool.close().await;
    let [file] = &segments(&dir)[..] else {
        panic!("one segment");
    };
    let bytes = fs::read(file).expect("read");
    let payloads: Vec<u8> = frame::scan(&bytes, 0)
        .frames
        .iter()
        .map(|&(_, offset)| {
            let at = usize::try_from(offset).expect("offset");
            frame::decode(&bytes[at..]).expect("frame").payload[0]
        })
        .collect();
    assert_eq!(
        payloads,
        [
            b'{',
            b'{',
            b'{',
            b'{',
            record::BINARY_V1,
            record::BINARY_V1,
            record::BINARY_V1
        ]
    );

    // After a restart nothing is in memory: both kinds come back from the file.
    let spool = open(&dir, small()).await;
    let records = spool.pending(0, 10).await.expect("pending");
    let expected: Vec<Event> = old.into_iter().chain((7..=9).map(ban)).collect();
    assert_eq!(
        records.into_iter().map(|r| r.event).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(records_seqs(&spool).await, (3..=9).collect::<Vec<u64>>());
    spool.ack(epoch, 9).await.expect("ack");
    assert_eq!(spool.head().await.expect("head").depth, 0);
}

async fn records_seqs(spool: &Spool) -> Vec<u64> {
    spool
        .pending(0, 100)
        .await
        .expect("pending")
        .iter()
        .map(|r| r.seq)
        .collect()
}

/// A binary record cut short by a crash is a torn tail like a JSON one: truncated, its number
/// reused, the records before it kept.
#[tokio::test]
async fn torn_binary_record_is_truncated() {
    let dir = TempDir::new().expect("tempdir");
    let (segment, clean_len) = three_bans_in_one_segment(&dir).await;
    let segment = &segment;
    let mut payload = Vec::new();
    record::encode(&ban(4), &mut payload).expect("encode");
    assert_eq!(payload[0], record::BINARY_V1);
    let mut frame = Vec::new();
    frame::encode(4, &payload, &mut frame);
    for cut in [9, 17, frame.len() / 2, frame.len() - 1] {
        let mut file = OpenOptions::new().append(true).open(segment).expect("open");
        file.write_all(&frame[..cut]).expect("write");
        drop(file);
        let spool = open(&dir, SpoolConfig::default()).await;
        assert_eq!(
            fs::metadata(segment).expect("stat").len(),
            clean_len,
            "cut {cut}"
        );
        let records = spool.pending(0, 10).await.expect("pending");
        assert_eq!(records.len(), 3);
        assert_eq!(records[2].event, ban(3));
        spool.close().await;
    }
}

/// Runs the writer on this thread over the requests already queued, as it would find them after
/// a sync, and returns once it has served them all.
fn serve_queued(dir: &TempDir, requests: Vec<Request>) {
    let store = store::Store::open(dir.path(), SpoolConfig::default()).expect("open store");
    let (durable, _) = watch::channel(store.last_seq());
    let (tx, rx) = mpsc::channel(QUEUE);
    for request in requests {
        assert!(tx.try_send(request).is_ok(), "queue has room");
    }
    drop(tx);
    Writer {
        store: Some(store),
        dir: dir.path().to_owned(),
        config: SpoolConfig::default(),
        durable,
    }
    .run(rx);
}

#[test]
fn a_read_queued_between_appends_does_not_split_their_group_commit() {
    let dir = TempDir::new().expect("tempdir");
    let (first, mut first_rx) = oneshot::channel();
    let (read, mut read_rx) = oneshot::channel();
    let (second, mut second_rx) = oneshot::channel();
    let (head, mut head_rx) = oneshot::channel();
    serve_queued(
        &dir,
        vec![
            Request::Append(ban(1), first),
            Request::Pending(0, 10, read),
            Request::Head(head),
            Request::Append(ban(2), second),
        ],
    );
    assert_eq!(
        first_rx.try_recv().expect("answered").expect("stored").seq,
        1
    );
    assert_eq!(
        second_rx.try_recv().expect("answered").expect("stored").seq,
        2
    );
    // Both appends were committed together before the read was served, so it sees both.
    let records = read_rx.try_recv().expect("answered").expect("read");
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(
        head_rx
            .try_recv()
            .expect("answered")
            .expect("head")
            .position
            .seq,
        2
    );
}
