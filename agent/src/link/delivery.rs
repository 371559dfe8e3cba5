//! Delivery of the spool to the hub over the live session: batches in sequence order, a bounded
//! number in flight, acknowledged cumulatively by the hub once its transaction committed, and only
//! then acknowledged (and compacted) in the spool. A session that ends loses nothing: the next one
//! starts again from the spool's last acknowledged event, and the hub stores each
//! `(agent, epoch, seq)` once.

use std::collections::VecDeque;

use banhub_proto::pipeline;
use banhub_proto::v1::{
    self as pb, AgentFrame, EventBatch, EventKind, EventSource, SpoolHead, agent_frame,
};
use tokio::sync::watch;

use crate::spool::{BanEvent, Event, Record, Source, Spool, SpoolError};

/// Most events per batch (see [`pipeline::BATCH_EVENTS`]).
pub const BATCH_EVENTS: usize = pipeline::BATCH_EVENTS;
/// Most bytes of log lines (plus [`EVENT_OVERHEAD`] per event) per batch, to stay well under
/// gRPC's 4 MiB message limit whatever the events hold (an event's logs are capped at 16 KiB).
pub const BATCH_BYTES: usize = 2 << 20;
/// Bytes counted per event for its fields other than the log lines (a generous bound).
const EVENT_OVERHEAD: usize = 512;
/// Events sent but not yet acknowledged (`banhub_proto::pipeline`, which the hub reads ahead by).
pub const MAX_IN_FLIGHT_EVENTS: u64 = banhub_proto::pipeline::IN_FLIGHT_EVENTS as u64;
/// Batches sent but not yet acknowledged, at most (a bound on the bookkeeping of many tiny ones).
pub const MAX_IN_FLIGHT_BATCHES: usize = 256;

/// The spool as one session sees it.
#[derive(Debug)]
pub struct Delivery {
    spool: Spool,
    epoch: u64,
    /// The highest sequence number put into a batch in this session.
    sent: u64,
    /// The highest sequence number the hub acknowledged (or that was acknowledged at the start).
    acked: u64,
    /// The last sequence number of each batch awaiting its ack, oldest first.
    in_flight: VecDeque<u64>,
    durable: watch::Receiver<u64>,
}

/// The spool's head for the hello.
pub async fn head(spool: &Spool) -> Result<SpoolHead, SpoolError> {
    let head = spool.head().await?;
    Ok(SpoolHead {
        epoch: head.position.epoch,
        last_seq: head.position.seq,
        acked_seq: head.acked_seq,
        depth: head.depth,
        oldest_unacked_unix_ms: head.oldest_unacked_received_at_ms.unwrap_or(0),
    })
}

impl Delivery {
    /// Starts delivery after the welcome: what the hub says it already committed is acknowledged
    /// here first, so it is not sent again.
    pub async fn start(spool: Spool, committed_seq: u64) -> Result<Self, SpoolError> {
        let head = spool.head().await?;
        let epoch = head.position.epoch;
        let mut acked = head.acked_seq;
        // The hub cannot hold more than was written; a larger number means another spool, ignore it.
        if committed_seq > acked && committed_seq <= head.position.seq {
            spool.ack(epoch, committed_seq).await?;
            acked = committed_seq;
        }
        Ok(Self {
            durable: spool.watch(),
            spool,
            epoch,
            sent: acked,
            acked,
            in_flight: VecDeque::new(),
        })
    }

    /// A receiver that changes whenever an event becomes durable: the session waits on it.
    pub fn durable(&self) -> watch::Receiver<u64> {
        self.durable.clone()
    }

    /// The next batch to send, if there is room in flight and something new in the spool.
    pub async fn next_batch(&mut self) -> Result<Option<AgentFrame>, SpoolError> {
        // Sequence numbers rise by one, so the window holds `sent - acked` events.
        let room = MAX_IN_FLIGHT_EVENTS.saturating_sub(self.sent.saturating_sub(self.acked));
        if room == 0
            || self.in_flight.len() >= MAX_IN_FLIGHT_BATCHES
            || *self.durable.borrow() <= self.sent
        {
            return Ok(None);
        }
        let most = usize::try_from(room).map_or(BATCH_EVENTS, |room| room.min(BATCH_EVENTS));
        let mut records = self.spool.pending(self.sent, most).await?;
        let mut bytes = 0;
        let fits = records
            .iter()
            .take_while(|r| {
                bytes += approx_size(&r.event);
                bytes <= BATCH_BYTES
            })
            .count();
        // The rest is read again for the next batch; at least one event goes, so this ends.
        records.truncate(fits.max(1));
        let Some(last) = records.last().map(|r| r.seq) else {
            return Ok(None);
        };
        self.sent = last;
        self.in_flight.push_back(last);
        let events = records.into_iter().map(to_wire).collect();
        Ok(Some(AgentFrame {
            body: Some(agent_frame::Body::Events(EventBatch {
                epoch: self.epoch,
                events,
            })),
        }))
    }

    /// The hub committed every event up to `seq` of `epoch`.
    pub async fn on_ack(&mut self, epoch: u64, seq: u64) -> Result<(), SpoolError> {
        if epoch != self.epoch {
            tracing::warn!(
                epoch,
                ours = self.epoch,
                "an ack for another spool epoch; ignored"
            );
            return Ok(());
        }
        while self.in_flight.front().is_some_and(|&last| last <= seq) {
            self.in_flight.pop_front();
        }
        self.acked = self.acked.max(seq.min(self.sent));
        self.spool.ack(epoch, seq).await
    }
}

/// About what `event` adds to a batch on the wire, for [`BATCH_BYTES`].
fn approx_size(event: &Event) -> usize {
    let logs = match event {
        Event::Ban(ban) | Event::Unban(ban) => {
            ban.logs.lines().iter().map(|l| l.len() + 4).sum::<usize>() + ban.hostname.len()
        }
        Event::Gap(gap) => gap.ranges.len() * 24,
    };
    logs + EVENT_OVERHEAD
}

/// One spool record as the protocol carries it.
pub fn to_wire(record: Record) -> pb::Event {
    let seq = record.seq;
    let received_at_unix_ms = record.event.received_at_ms();
    match record.event {
        Event::Ban(ban) => ban_to_wire(seq, EventKind::Ban, ban),
        Event::Unban(ban) => ban_to_wire(seq, EventKind::Unban, ban),
        Event::Gap(gap) => pb::Event {
            seq,
            kind: EventKind::Gap.into(),
            received_at_unix_ms,
            gap_lost: gap.lost,
            gap_ranges: gap
                .ranges
                .iter()
                .map(|r| pb::SeqRange {
                    first: r.first,
                    last: r.last,
                })
                .collect(),
            gap_reason: gap.reason.as_str().to_owned(),
            ..pb::Event::default()
        },
    }
}

fn ban_to_wire(seq: u64, kind: EventKind, ban: BanEvent) -> pb::Event {
    pb::Event {
        seq,
        kind: kind.into(),
        ip: ban.ip.to_string(),
        jail: ban.jail.as_str().to_owned(),
        hostname: ban.hostname,
        failures: ban.failures,
        // Moved, not copied: the record is consumed here.
        logs: ban.logs.into_lines(),
        ban_time_unix: ban.ban_time,
        ban_duration_secs: ban.ban_duration.map(|d| d.as_seconds()),
        ban_count: ban.ban_count,
        received_at_unix_ms: ban.received_at_ms,
        source: match ban.source {
            Source::Action => EventSource::Action,
            Source::Observed => EventSource::Observed,
        }
        .into(),
        ..pb::Event::default()
    }
}

#[cfg(test)]
mod tests {
    use tempfile::TempDir;

    use super::*;
    use crate::spool::SpoolConfig;
    use crate::spool::testing::ban;

    /// An empty spool with the default configuration, in a directory that lives as long as the
    /// returned guard.
    async fn new_spool() -> (TempDir, Spool) {
        let dir = TempDir::new().expect("tempdir");
        let spool = Spool::open(dir.path(), SpoolConfig::default())
            .await
            .expect("open");
        (dir, spool)
    }

    fn batch_seqs(frame: &AgentFrame) -> Vec<u64> {
        match &frame.body {
            Some(agent_frame::Body::Events(batch)) => batch.events.iter().map(|e| e.seq).collect(),
            other => panic!("not an event batch: {other:?}"),
        }
    }

    #[tokio::test]
    async fn small_batches_go_out_beyond_sixteen_while_the_window_has_room() {
        let (_dir, spool) = new_spool().await;
        let mut delivery = Delivery::start(spool.clone(), 0).await.expect("start");
        for i in 0..40u32 {
            spool.append(ban(i)).await.expect("append");
            let frame = delivery
                .next_batch()
                .await
                .expect("read")
                .expect("a batch while the window has room");
            assert_eq!(batch_seqs(&frame), vec![u64::from(i) + 1]);
        }
        assert!(delivery.next_batch().await.expect("read").is_none());
    }

    #[tokio::test]
    async fn the_window_holds_a_bounded_number_of_events_and_an_ack_reopens_it() {
        let (_dir, spool) = new_spool().await;
        let total = u32::try_from(MAX_IN_FLIGHT_EVENTS).expect("fits") + 5;
        let appends: Vec<_> = (0..total)
            .map(|i| {
                let spool = spool.clone();
                tokio::spawn(async move { spool.append(ban(i)).await })
            })
            .collect();
        for append in appends {
            append.await.expect("task").expect("append");
        }
        let mut delivery = Delivery::start(spool.clone(), 0).await.expect("start");
        let mut sent = Vec::new();
        while let Some(frame) = delivery.next_batch().await.expect("read") {
            sent.extend(batch_seqs(&frame));
        }
        let window: Vec<u64> = (1..=MAX_IN_FLIGHT_EVENTS).collect();
        assert_eq!(sent, window, "the window is full, in order");

        delivery
            .on_ack(spool.epoch(), 1_000)
            .await
            .expect("ack the first batch");
        let rest = delivery
            .next_batch()
            .await
            .expect("read")
            .expect("the ack made room");
        let expected: Vec<u64> = (MAX_IN_FLIGHT_EVENTS + 1..=u64::from(total)).collect();
        assert_eq!(batch_seqs(&rest), expected);
        assert!(delivery.next_batch().await.expect("read").is_none());
    }
}
