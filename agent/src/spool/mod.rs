//! The durable spool: ban and unban events on disk, numbered `(epoch, seq)`, kept until the hub has
//! acknowledged them.
//!
//! An append returns only once its record is written and `fdatasync`'d (and the directory synced when
//! a segment was created or removed), so a `200` from the relay means the event survives a crash or a
//! power cut. The epoch is chosen when the spool is created; sequence numbers rise by one from 1 and
//! resume after a restart. Acknowledgements are cumulative. The spool holds at most
//! [`SpoolConfig::max_bytes`]; past that the oldest unacknowledged events give way to one
//! [`GapEvent`] that says what was lost, so a loss is never silent.
//!
//! All file work happens on one dedicated thread that owns the [`store`]. Appends queued while it
//! syncs are written together and share the next sync (group commit), which is what makes many
//! concurrent callbacks cheap. [`Spool`] is the cloneable async handle to that thread.

mod disk;
pub mod event;
mod frame;
mod record;
mod store;
mod tail;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

pub use event::{
    BanDuration, BanEvent, Event, GapEvent, GapReason, JailName, Logs, SeqRange, Source,
    clean_hostname,
};
pub use frame::MAX_PAYLOAD_LEN;
use store::Store;

/// Requests waiting for the writer thread; callers wait beyond this.
const QUEUE: usize = 4096;
/// Most appends written with one sync.
const MAX_GROUP: usize = 1024;

/// How the spool is sized and how it treats damage found when it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Upper bound on the bytes of all segments.
    pub max_bytes: u64,
    /// A segment is closed and a new one started past this size. Compaction deletes whole
    /// segments, so smaller segments free acknowledged space sooner.
    pub segment_bytes: u64,
    pub on_corruption: OnCorruption,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
            segment_bytes: 8 << 20,
            on_corruption: OnCorruption::Salvage,
        }
    }
}

impl SpoolConfig {
    /// The smallest segment that holds the largest record with room to spare.
    pub const MIN_SEGMENT_BYTES: u64 = 2 * MAX_PAYLOAD_LEN as u64;

    fn check(&self) -> Result<(), SpoolError> {
        if self.segment_bytes < Self::MIN_SEGMENT_BYTES {
            return Err(SpoolError::Config(format!(
                "segment_bytes is {}; it must be at least {} (twice the largest record)",
                self.segment_bytes,
                Self::MIN_SEGMENT_BYTES
            )));
        }
        if self.max_bytes < 2 * self.segment_bytes {
            return Err(SpoolError::Config(format!(
                "max_bytes is {}; it must be at least twice segment_bytes ({})",
                self.max_bytes, self.segment_bytes
            )));
        }
        Ok(())
    }
}

/// What to do when a segment is damaged somewhere other than a torn final write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCorruption {
    /// Refuse to open ([`SpoolError::Corrupt`]) and leave the files alone for an operator.
    Refuse,
    /// Keep every record that still reads, set the damaged file aside as `*.corrupt-<ms>`, and
    /// append a [`GapReason::Corruption`] gap for each run of unreadable, unacknowledged numbers.
    /// The agent keeps relaying and the loss reaches the hub as an event.
    Salvage,
}

/// Where an event sits in the spool; the hub stores each `(agent, epoch, seq)` once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Position {
    pub epoch: u64,
    pub seq: u64,
}

/// One stored event and its number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub event: Event,
}

/// The spool's position and backlog, for diagnostics and the session hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The epoch and the last sequence number handed out (0 before the first append).
    pub position: Position,
    /// The highest sequence number the hub has acknowledged.
    pub acked_seq: u64,
    /// Unacknowledged events on disk.
    pub depth: u64,
    /// When the oldest unacknowledged event was received, Unix milliseconds.
    pub oldest_unacked_received_at_ms: Option<i64>,
    /// Bytes in all segments.
    pub bytes: u64,
    pub segments: usize,
}

/// Errors of the spool. Clone, because one failed sync fails every append that shared it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {action} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "spool directory {} is in use by another process (its `lock` file is locked)",
        dir.display()
    )]
    Locked { dir: PathBuf },
    #[error("spool file {} is invalid: {reason}", path.display())]
    BadMeta { path: PathBuf, reason: String },
    #[error(
        "spool segment {} is damaged at byte {offset} (after seq {after_seq}); open it with \
         `OnCorruption::Salvage` to keep what can be read and record the loss",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        after_seq: u64,
    },
    #[error("spool record at byte {offset} of {} no longer reads back", path.display())]
    Unreadable { path: PathBuf, offset: u64 },
    #[error("spool segment {} belongs to epoch {found}, not this spool's {expected}", path.display())]
    ForeignSegment {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("event encodes to {size} bytes; a spool record holds at most {max}")]
    EventTooLarge { size: usize, max: usize },
    #[error("encoding an event: {0}")]
    Encode(Arc<serde_json::Error>),
    #[error("acknowledgement for epoch {got}, but this spool's epoch is {epoch}")]
    EpochMismatch { got: u64, epoch: u64 },
    #[error("acknowledgement of seq {seq}, beyond the last appended seq {last}")]
    AckBeyondEnd { seq: u64, last: u64 },
    #[error("invalid spool configuration: {0}")]
    Config(String),
    #[error("the spool has been closed")]
    Closed,
}

enum Request {
    Append(Event, oneshot::Sender<Result<Position, SpoolError>>),
    Ack(Position, oneshot::Sender<Result<(), SpoolError>>),
    Pending(u64, usize, oneshot::Sender<Result<Vec<Record>, SpoolError>>),
    Head(oneshot::Sender<Result<Head, SpoolError>>),
    Close(oneshot::Sender<()>),
}

/// Handle to an open spool. Clones share the same writer thread; it stops when the last handle is
/// dropped or [`Spool::close`] is called.
#[derive(Debug, Clone)]
pub struct Spool {
    requests: mpsc::Sender<Request>,
    epoch: u64,
    durable: watch::Receiver<u64>,
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, recovering from a crash, and starts its writer thread.
    pub async fn open(dir: impl Into<PathBuf>, config: SpoolConfig) -> Result<Self, SpoolError> {
        let dir = dir.into();
        let opened = {
            let dir = dir.clone();
            let config = config.clone();
            tokio::task::spawn_blocking(move || Store::open(&dir, config))
                .await
                .map_err(|_| SpoolError::Closed)?
        }?;
        let epoch = opened.epoch();
        let (durable_tx, durable) = watch::channel(opened.last_seq());
        let (requests, rx) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("banhub-spool".to_owned())
            .spawn(move || {
                Writer {
                    store: Some(opened),
                    dir,
                    config,
                    durable: durable_tx,
                }
                .run(rx);
            })
            .map_err(|e| SpoolError::Io {
                path: PathBuf::new(),
                action: "starting the writer thread for",
                source: Arc::new(e),
            })?;
        Ok(Self {
            requests,
            epoch,
            durable,
        })
    }

    /// The epoch chosen when this spool was created.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Appends an event; returns its position once it is durable.
    pub async fn append(&self, event: Event) -> Result<Position, SpoolError> {
        self.call(|reply| Request::Append(event, reply)).await?
    }

    /// Acknowledges every event up to and including `seq`; fully acknowledged segments are deleted.
    pub async fn ack(&self, epoch: u64, seq: u64) -> Result<(), SpoolError> {
        self.call(|reply| Request::Ack(Position { epoch, seq }, reply))
            .await?
    }

    /// Up to `max` stored events numbered above `after_seq`, oldest first: the next batch to deliver.
    /// Numbers given up to the size bound are skipped (a gap event reports them).
    pub async fn pending(&self, after_seq: u64, max: usize) -> Result<Vec<Record>, SpoolError> {
        self.call(|reply| Request::Pending(after_seq, max, reply))
            .await?
    }

    /// The spool's position and backlog.
    pub async fn head(&self) -> Result<Head, SpoolError> {
        self.call(Request::Head).await?
    }

    /// The last durable sequence number, updated after every append: a delivery task waits on
    /// `changed()` instead of polling.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.durable.clone()
    }

    /// Stops the writer thread and waits until it has released the directory. Other handles get
    /// [`SpoolError::Closed`] from then on.
    pub async fn close(self) {
        let (reply, done) = oneshot::channel();
        if self.requests.send(Request::Close(reply)).await.is_ok() {
            let _ = done.await;
        }
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, SpoolError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(make(reply))
            .await
            .map_err(|_| SpoolError::Closed)?;
        answer.await.map_err(|_| SpoolError::Closed)
    }
}

/// The writer thread's state.
struct Writer {
    /// `None` after an I/O error during an append: the files are in an unknown state, so the next
    /// request reopens them, which runs the same recovery as after a crash.
    store: Option<Store>,
    dir: PathBuf,
    config: SpoolConfig,
    durable: watch::Sender<u64>,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        let mut queue = Vec::new();
        let mut group = Vec::new();
        let mut others = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            queue.push(first);
            while queue.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(request) => queue.push(request),
                    Err(_) => break,
                }
            }
            // Every append taken in this round forms one group commit, and the other requests are
            // served after it, in order. Under load delivery's reads and acks arrive between
            // appends; serving them in arrival order cut the group in two (two syncs where one
            // does). Serving them after the commit only lets them see more, all of it durable.
            for request in queue.drain(..) {
                match request {
                    Request::Append(event, reply) => group.push((event, reply)),
                    other => others.push(other),
                }
            }
            self.append_group(&mut group);
            for other in others.drain(..) {
                if let Request::Close(done) = other {
                    self.close_store();
                    let _ = done.send(());
                    return;
                }
                self.serve(other);
            }
        }
        // Every handle is gone.
        self.close_store();
    }

    /// Writes the latest acknowledgement (kept in memory between writes, see `store::ack`) and
    /// releases the directory.
    fn close_store(&mut self) {
        if let Some(mut store) = self.store.take()
            && let Err(e) = store.write_ack()
        {
            tracing::warn!(error = %e, "could not record the latest ack; those events will be sent again");
        }
    }

    fn store(&mut self) -> Result<&mut Store, SpoolError> {
        if self.store.is_none() {
            tracing::warn!(dir = %self.dir.display(), "reopening the spool after a write error");
            self.store = Some(Store::open(&self.dir, self.config.clone())?);
        }
        self.store.as_mut().ok_or(SpoolError::Closed)
    }

    fn append_group(
        &mut self,
        group: &mut Vec<(Event, oneshot::Sender<Result<Position, SpoolError>>)>,
    ) {
        if group.is_empty() {
            return;
        }
        let (events, replies): (Vec<Event>, Vec<_>) = group.drain(..).unzip();
        let (epoch, results) = match self.store() {
            Err(e) => (0, vec![Err(e); events.len()]),
            Ok(store) => (store.epoch(), store.append_batch(events)),
        };
        if results
            .iter()
            .any(|r| matches!(r, Err(SpoolError::Io { .. } | SpoolError::Closed)))
        {
            tracing::error!(dir = %self.dir.display(), "spool write failed; will reopen");
            self.store = None;
        } else if let Some(store) = &self.store {
            self.durable.send_replace(store.last_seq());
        }
        for (result, reply) in results.into_iter().zip(replies) {
            let _ = reply.send(result.map(|seq| Position { epoch, seq }));
        }
    }

    fn serve(&mut self, request: Request) {
        match request {
            Request::Ack(position, reply) => {
                let result = self
                    .store()
                    .and_then(|s| s.ack(position.epoch, position.seq));
                let _ = reply.send(result);
            }
            Request::Pending(after, max, reply) => {
                let _ = reply.send(self.store().and_then(|s| s.pending(after, max)));
            }
            Request::Head(reply) => {
                let _ = reply.send(self.store().and_then(Store::head));
            }
            Request::Append(..) | Request::Close(_) => {}
        }
    }
}

/// The current time in Unix milliseconds, as events record it.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The default spool directory inside the agent's state directory.
pub fn default_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("spool")
}

#[cfg(test)]
pub(crate) mod testing {
    //! Events for tests of the spool and of what reads it.

    use banhub_proto::rules::IpOrCidr;

    use super::{BanDuration, BanEvent, Event, JailName, Logs, Source};

    /// A ban numbered `i` (in its failure count, log line and time).
    pub(crate) fn ban(i: u32) -> Event {
        Event::Ban(BanEvent {
            ip: IpOrCidr::parse(&format!("192.0.2.{}", i % 250 + 1)).expect("ip"),
            jail: JailName::parse("sshd").expect("jail"),
            hostname: "web-1".to_owned(),
            failures: i,
            logs: Logs::capped([format!(
                "2026-11-22 23:42:38 Failed login for root (event {i})"
            )]),
            ban_time: Some(1_790_000_000),
            ban_duration: Some(BanDuration::Seconds(600)),
            ban_count: Some(1),
            received_at_ms: 1_790_000_000_000 + i64::from(i),
            source: Source::Action,
        })
    }
}

#[cfg(test)]
mod tests;
