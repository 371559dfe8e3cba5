//! The spool's files and the synchronous operations on them: opening with crash recovery,
//! group-committed appends, cumulative acks with compaction, and the size bound.
//!
//! Directory layout:
//! * `spool.json`: format version and the epoch, written once when the spool is created.
//! * `ack.json`: the highest sequence number the hub has acknowledged, replaced atomically.
//! * `<first seq, 20 digits>.seg`: segments (see [`super::frame`]); the newest one is appended to.
//! * `lock`: held with an exclusive file lock while a process has the spool open.
//! * `*.corrupt-<unix ms>`: damaged segments set aside by salvage, kept for inspection.
//!
//! Only [`super::Spool`]'s writer thread calls into this module, so nothing here locks.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::disk::{
    TMP_SUFFIX, append_name, create_dir, io_error, list_dir, load_or_create_meta, read_json,
    read_range, sync_dir, truncate, write_atomic,
};
use super::event::{Event, GapEvent, GapReason, SeqRange};
use super::frame::{self, HEADER_LEN, Header, MAX_PAYLOAD_LEN};
use super::record;
use super::tail::Tail;
use super::{Head, OnCorruption, Position, Record, SpoolConfig, SpoolError, now_ms};

const ACK_FILE: &str = "ack.json";
const LOCK_FILE: &str = "lock";
const SEGMENT_SUFFIX: &str = ".seg";
/// Room kept free for the gap record written when the bound forces events out.
const GAP_RESERVE: u64 = 1024;
/// How stale the persisted ack mark may get. Acks arrive once per delivered batch, and writing the
/// mark (a file write, two syncs and a rename) each time would load the writer thread that serves
/// the appends. The mark only has to be current before a segment is deleted (done then,
/// whatever the age): after a crash the events acked since the last mark are delivered again, and
/// the hub stores each `(agent, epoch, seq)` once, so a stale mark re-sends but never loses.
const ACK_PERSIST_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// What `ack.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct AckMark {
    epoch: u64,
    seq: u64,
}

/// One segment file.
#[derive(Debug)]
struct Segment {
    first_seq: u64,
    path: PathBuf,
    /// Bytes in the file, counting bytes of the current batch not yet written.
    size: u64,
    /// `(seq, offset)` of every record, in order.
    index: Vec<(u64, u64)>,
    /// Sequence numbers of the gap records in the segment, so that dropping the segment can carry
    /// the losses they report into the new gap instead of losing the report itself.
    gaps: Vec<u64>,
}

impl Segment {
    /// The highest sequence number in the segment, or the one just before it when empty.
    fn last_seq(&self) -> u64 {
        self.index
            .last()
            .map_or(self.first_seq.saturating_sub(1), |&(seq, _)| seq)
    }

    /// Records with a sequence number above `acked`.
    fn unacked(&self, acked: u64) -> &[(u64, u64)] {
        let start = self.index.partition_point(|&(seq, _)| seq <= acked);
        &self.index[start..]
    }
}

/// Events given up to the size bound, gathered into one gap record.
#[derive(Debug, Clone)]
struct Dropped {
    ranges: Vec<SeqRange>,
    count: u64,
    oldest: Option<i64>,
    newest: Option<i64>,
}

impl Dropped {
    fn merge(self, other: Self) -> Self {
        let pick = |a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64| match (a, b) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, b) => a.or(b),
        };
        Self {
            ranges: SeqRange::coalesce([self.ranges, other.ranges].concat()),
            count: self.count + other.count,
            oldest: pick(self.oldest, other.oldest, i64::min),
            newest: pick(self.newest, other.newest, i64::max),
        }
    }
}

/// Where a gap must be reported after salvage: lost numbers `first..=last`.
#[derive(Debug, Clone, Copy)]
struct Lost {
    first: u64,
    last: u64,
}

/// The open spool.
#[derive(Debug)]
pub(super) struct Store {
    dir: PathBuf,
    epoch: u64,
    config: SpoolConfig,
    /// Held for its exclusive lock, released when the store is dropped.
    _lock: File,
    /// Oldest first; the last one is the active segment.
    segments: VecDeque<Segment>,
    /// The active segment, opened for appending.
    active: Option<File>,
    /// Framed records of the current batch not yet written to `active`.
    buf: Vec<u8>,
    /// The payload being framed, kept to reuse its allocation from one record to the next.
    scratch: Vec<u8>,
    /// The directory gained or lost entries that must be durable before the batch is answered.
    dir_dirty: bool,
    next_seq: u64,
    /// The highest acknowledged sequence number, in memory.
    acked: u64,
    /// The acknowledgement in `ack.json`: at most `acked`, and never below the records of a
    /// deleted segment (see [`ACK_PERSIST_INTERVAL`]).
    acked_on_disk: u64,
    /// When `ack.json` was last written.
    ack_written_at: std::time::Instant,
    /// Bytes in all segments, counting `buf`.
    bytes: u64,
    /// Receive time of the oldest unacknowledged record, by sequence number, so `head` reads it
    /// from disk once rather than on every call.
    oldest_cache: Option<(u64, i64)>,
    /// The newest records in memory, for [`Store::pending`].
    tail: Tail,
}

impl Store {
    /// Opens the spool in `dir`, creating it if needed, and recovers from an earlier crash: a
    /// record cut short at the end of the newest segment is truncated (it was never
    /// acknowledged); damage anywhere else is refused or salvaged as `config` says.
    pub(super) fn open(dir: &Path, config: SpoolConfig) -> Result<Self, SpoolError> {
        config.check()?;
        create_dir(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| io_error(dir.join(LOCK_FILE), "opening", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(SpoolError::Locked {
                    dir: dir.to_owned(),
                });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(io_error(dir.join(LOCK_FILE), "locking", e));
            }
        }

        let names = list_dir(dir)?;
        for name in names.iter().filter(|n| n.ends_with(TMP_SUFFIX)) {
            // Leftovers of an atomic replace that never reached its rename.
            let path = dir.join(name);
            fs::remove_file(&path).map_err(|e| io_error(path, "removing", e))?;
        }
        let mut seg_names: Vec<(u64, String)> = names
            .iter()
            .filter_map(|name| {
                let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
                let first = digits.parse().ok().filter(|_| digits.len() == 20)?;
                Some((first, name.clone()))
            })
            .collect();
        seg_names.sort();

        let epoch = load_or_create_meta(dir, !seg_names.is_empty())?;
        let acked = match read_json::<AckMark>(&dir.join(ACK_FILE))? {
            None => 0,
            Some(mark) if mark.epoch == epoch => mark.seq,
            Some(mark) => {
                return Err(SpoolError::BadMeta {
                    path: dir.join(ACK_FILE),
                    reason: format!("acknowledges epoch {}, not {epoch}", mark.epoch),
                });
            }
        };

        let mut store = Self {
            dir: dir.to_owned(),
            epoch,
            config,
            _lock: lock,
            segments: VecDeque::new(),
            active: None,
            buf: Vec::new(),
            scratch: Vec::new(),
            dir_dirty: false,
            next_seq: 1,
            acked,
            acked_on_disk: acked,
            ack_written_at: std::time::Instant::now(),
            bytes: 0,
            oldest_cache: None,
            tail: Tail::default(),
        };
        let lost = store.load_segments(&seg_names)?;
        let last = store.segments.back().map_or(0, Segment::last_seq);
        store.next_seq = last.max(acked) + 1;
        if let Some(segment) = store.segments.back() {
            let file = OpenOptions::new()
                .append(true)
                .open(&segment.path)
                .map_err(|e| io_error(segment.path.clone(), "opening", e))?;
            store.active = Some(file);
        }
        store.compact()?;

        if !lost.is_empty() {
            let now = now_ms();
            let gaps: Vec<Event> = lost
                .iter()
                .map(|l| {
                    Event::Gap(GapEvent {
                        reason: GapReason::Corruption,
                        ranges: vec![SeqRange {
                            first: l.first,
                            last: l.last,
                        }],
                        lost: l.last - l.first + 1,
                        detected_at_ms: now,
                        oldest_received_at_ms: None,
                        newest_received_at_ms: None,
                    })
                })
                .collect();
            for result in store.append_batch(gaps) {
                let seq = result?;
                tracing::warn!(seq, "recorded a gap for spool records lost to damage");
            }
        }
        Ok(store)
    }

    /// Reads every segment, truncating a torn tail and collecting damage; returns the sequence
    /// numbers lost to salvaged damage.
    fn load_segments(&mut self, names: &[(u64, String)]) -> Result<Vec<Lost>, SpoolError> {
        let mut lost = Vec::new();
        let mut floor = 0;
        for (i, (first_seq, name)) in names.iter().enumerate() {
            let is_last = i + 1 == names.len();
            let path = self.dir.join(name);
            let bytes = fs::read(&path).map_err(|e| io_error(path.clone(), "reading", e))?;
            let header = Header::decode(&bytes);
            if let Some(header) = header
                && header.epoch != self.epoch
            {
                return Err(SpoolError::ForeignSegment {
                    path,
                    found: header.epoch,
                    expected: self.epoch,
                });
            }
            let header_ok = header.is_some_and(|h| h.first_seq == *first_seq);
            floor = floor.max(first_seq.saturating_sub(1));
            let scan = frame::scan(&bytes, floor);
            if !header_ok && is_last && scan.frames.is_empty() {
                // Created just before a crash, before its header was durable: nothing in it was
                // ever acknowledged.
                tracing::warn!(path = %path.display(), "removing a segment torn at creation");
                fs::remove_file(&path).map_err(|e| io_error(path.clone(), "removing", e))?;
                self.dir_dirty = true;
                continue;
            }
            let next_first = names.get(i + 1).map(|n| n.0);
            let mut bad = Vec::new();
            if !header_ok {
                bad.push((0u64, floor, scan.frames.first().map(|f| f.0).or(next_first)));
            }
            // Damage that runs to the end of the newest segment, with no good record after it, is
            // a write cut short by a crash: its records were never acknowledged.
            let mut torn = None;
            for (d, damage) in scan.damage.iter().enumerate() {
                let is_tail = d + 1 == scan.damage.len() && damage.seq_after.is_none();
                if is_tail && is_last {
                    torn = Some(damage.range.clone());
                } else {
                    bad.push((
                        damage.range.start,
                        damage.seq_before,
                        damage.seq_after.or(next_first),
                    ));
                }
            }
            if let Some(&(offset, after_seq, _)) = bad.first()
                && self.config.on_corruption == OnCorruption::Refuse
            {
                return Err(SpoolError::Corrupt {
                    path,
                    offset,
                    after_seq,
                });
            }
            let mut size = bytes.len() as u64;
            if let Some(range) = torn {
                tracing::warn!(
                    path = %path.display(),
                    offset = range.start,
                    bytes = range.end - range.start,
                    "truncating a torn write at the end of the spool"
                );
                truncate(&path, range.start)?;
                size = range.start;
            }
            for &(offset, before, after) in &bad {
                tracing::error!(
                    path = %path.display(), offset, after_seq = before,
                    "spool segment is damaged; salvaging the records that can be read"
                );
                // Numbers between the last good record before the damage and the first
                // good one after it; those the hub already acknowledged are not lost.
                let first = (before + 1).max(self.acked + 1);
                let last = after.map_or(before, |a| a.saturating_sub(1));
                if first <= last {
                    lost.push(Lost { first, last });
                }
            }
            let index = scan.frames;
            if let Some(&(seq, _)) = index.last() {
                floor = seq;
            }
            let gaps = index
                .iter()
                .filter(|&&(_, offset)| is_gap_frame(&bytes, offset))
                .map(|&(seq, _)| seq)
                .collect();
            let mut segment = Segment {
                first_seq: *first_seq,
                path,
                size,
                index,
                gaps,
            };
            if !bad.is_empty() {
                self.rewrite(&mut segment, &bytes)?;
            }
            self.bytes += segment.size;
            self.segments.push_back(segment);
        }
        if self.dir_dirty {
            sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        // A damaged header and damage right after it describe the same missing records.
        lost.sort_by_key(|l: &Lost| (l.first, l.last));
        lost.dedup_by_key(|l| (l.first, l.last));
        Ok(lost)
    }

    /// Replaces a damaged segment with one holding only its good records, keeping the damaged
    /// file beside it for inspection.
    fn rewrite(&mut self, segment: &mut Segment, bytes: &[u8]) -> Result<(), SpoolError> {
        let mut out = Header {
            epoch: self.epoch,
            first_seq: segment.first_seq,
        }
        .encode()
        .to_vec();
        let mut index = Vec::with_capacity(segment.index.len());
        for &(seq, offset) in &segment.index {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let Ok(frame) = frame::decode(bytes.get(start..).unwrap_or_default()) else {
                continue;
            };
            index.push((seq, out.len() as u64));
            out.extend_from_slice(&bytes[start..start + frame.len]);
        }
        let aside = append_name(&segment.path, &format!(".corrupt-{}", now_ms()));
        fs::hard_link(&segment.path, &aside)
            .map_err(|e| io_error(aside.clone(), "keeping a copy of the damaged segment", e))?;
        write_atomic(&segment.path, &out)?;
        segment.index = index;
        segment.size = out.len() as u64;
        tracing::warn!(
            kept = %aside.display(),
            records = segment.index.len(),
            "rewrote a damaged spool segment"
        );
        Ok(())
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(super) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Appends `events` and makes them durable with one `fdatasync` (more only when a segment is
    /// rotated). Each event gets its own result: one that cannot be encoded fails alone, while an
    /// I/O error fails the whole batch and leaves the store to be reopened.
    pub(super) fn append_batch(&mut self, events: Vec<Event>) -> Vec<Result<u64, SpoolError>> {
        let count = events.len();
        let mut results = Vec::with_capacity(count);
        let mut failure = None;
        let mut payload = std::mem::take(&mut self.scratch);
        for event in events {
            payload.clear();
            match record::encode(&event, &mut payload) {
                Err(e) => results.push(Err(SpoolError::Encode(Arc::new(e)))),
                Ok(()) if payload.len() > MAX_PAYLOAD_LEN => {
                    results.push(Err(SpoolError::EventTooLarge {
                        size: payload.len(),
                        max: MAX_PAYLOAD_LEN,
                    }));
                }
                Ok(()) => match self.push(&payload, matches!(event, Event::Gap(_))) {
                    Ok(seq) => {
                        self.tail.push(seq, event, payload.len());
                        results.push(Ok(seq));
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                },
            }
        }
        self.scratch = payload;
        if failure.is_none()
            && let Err(e) = self.flush()
        {
            failure = Some(e);
        }
        if let Some(error) = failure {
            // Nothing of this batch may be reported durable; the caller drops the store and
            // reopening recovers whatever made it to disk. Nor may delivery see it.
            self.tail = Tail::default();
            return vec![Err(error); count];
        }
        results
    }

    /// Frames one record into the batch buffer, making room and rotating first as needed.
    fn push(&mut self, payload: &[u8], is_gap: bool) -> Result<u64, SpoolError> {
        let need = frame::frame_len(payload.len()) as u64;
        self.make_room(need)?;
        self.frame_record(payload, need, is_gap)?;
        Ok(self.next_seq - 1)
    }

    fn frame_record(&mut self, payload: &[u8], need: u64, is_gap: bool) -> Result<(), SpoolError> {
        let full = self
            .segments
            .back()
            .is_none_or(|s| !s.index.is_empty() && s.size + need > self.config.segment_bytes);
        if full {
            self.rotate()?;
        }
        let seq = self.next_seq;
        let Some(segment) = self.segments.back_mut() else {
            return Err(SpoolError::Closed);
        };
        segment.index.push((seq, segment.size));
        if is_gap {
            segment.gaps.push(seq);
        }
        frame::encode(seq, payload, &mut self.buf);
        segment.size += need;
        self.bytes += need;
        self.next_seq += 1;
        Ok(())
    }

    /// Drops the oldest segments while the next record (and a gap record) would break the size
    /// bound, and records the unacknowledged events they held as one gap. Gap records among them
    /// are folded into the new one, so an earlier loss is not forgotten with its record.
    fn make_room(&mut self, need: u64) -> Result<(), SpoolError> {
        if self.bytes + need <= self.config.max_bytes {
            return Ok(());
        }
        let mut lost: Option<Dropped> = None;
        while self.bytes + need + GAP_RESERVE > self.config.max_bytes {
            if self.segments.len() <= 1 {
                if self.segments.back().is_none_or(|s| s.index.is_empty()) {
                    // Nothing left to drop; the configuration check makes this unreachable.
                    break;
                }
                self.rotate()?;
                continue;
            }
            // The records of the segment about to go must not look lost after a crash.
            self.write_ack()?;
            let Some(segment) = self.segments.pop_front() else {
                break;
            };
            if let Some(dropped) = self.dropped(&segment)? {
                lost = Some(match lost {
                    None => dropped,
                    Some(before) => before.merge(dropped),
                });
            }
            fs::remove_file(&segment.path)
                .map_err(|e| io_error(segment.path.clone(), "removing", e))?;
            self.bytes -= segment.size;
            self.dir_dirty = true;
        }
        self.oldest_cache = None;
        if let Some(dropped) = lost {
            tracing::error!(
                ranges = ?dropped.ranges,
                lost = dropped.count,
                max_bytes = self.config.max_bytes,
                "spool is full: dropped the oldest unacknowledged events"
            );
            let gap = Event::Gap(GapEvent {
                reason: GapReason::Overflow,
                ranges: dropped.ranges,
                lost: dropped.count,
                detected_at_ms: now_ms(),
                oldest_received_at_ms: dropped.oldest,
                newest_received_at_ms: dropped.newest,
            });
            let mut payload = Vec::new();
            record::encode(&gap, &mut payload).map_err(|e| SpoolError::Encode(Arc::new(e)))?;
            let need = frame::frame_len(payload.len()) as u64;
            self.frame_record(&payload, need, true)?;
            self.tail.push(self.next_seq - 1, gap, payload.len());
        }
        Ok(())
    }

    /// What dropping `segment` loses: its unacknowledged events, and the losses its
    /// unacknowledged gap records report.
    fn dropped(&self, segment: &Segment) -> Result<Option<Dropped>, SpoolError> {
        let unacked = segment.unacked(self.acked);
        let (Some(&(first, _)), Some(&(last, _))) = (unacked.first(), unacked.last()) else {
            return Ok(None);
        };
        let mut dropped = Dropped {
            ranges: vec![SeqRange { first, last }],
            count: 0,
            oldest: None,
            newest: None,
        };
        // Receive times of the first and last plain event; the records are read back only here.
        let plain = || {
            unacked
                .iter()
                .filter(|(seq, _)| !segment.gaps.contains(seq))
        };
        dropped.count = plain().count() as u64;
        if let Some(&(_, offset)) = plain().next() {
            dropped.oldest = Some(self.read_at(segment, offset)?.received_at_ms());
        }
        if let Some(&(_, offset)) = plain().next_back() {
            dropped.newest = Some(self.read_at(segment, offset)?.received_at_ms());
        }
        for &(seq, offset) in unacked.iter().filter(|(seq, _)| segment.gaps.contains(seq)) {
            if let Event::Gap(gap) = self.read_at(segment, offset)? {
                tracing::debug!(seq, "folding a dropped gap record into the new one");
                dropped = dropped.merge(Dropped {
                    ranges: gap.ranges,
                    count: gap.lost,
                    oldest: gap.oldest_received_at_ms,
                    newest: gap.newest_received_at_ms,
                });
            }
        }
        Ok(Some(dropped))
    }

    /// Makes the active segment durable and starts a new one.
    fn rotate(&mut self) -> Result<(), SpoolError> {
        self.flush_active()?;
        let path = self
            .dir
            .join(format!("{:020}{SEGMENT_SUFFIX}", self.next_seq));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io_error(path.clone(), "creating", e))?;
        self.buf.extend_from_slice(
            &Header {
                epoch: self.epoch,
                first_seq: self.next_seq,
            }
            .encode(),
        );
        self.active = Some(file);
        self.segments.push_back(Segment {
            first_seq: self.next_seq,
            path,
            size: HEADER_LEN as u64,
            index: Vec::new(),
            gaps: Vec::new(),
        });
        self.bytes += HEADER_LEN as u64;
        self.dir_dirty = true;
        Ok(())
    }

    /// Writes the batch buffer to the active segment and syncs it.
    fn flush_active(&mut self) -> Result<(), SpoolError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let (Some(file), Some(segment)) = (self.active.as_mut(), self.segments.back()) else {
            return Err(SpoolError::Closed);
        };
        file.write_all(&self.buf)
            .and_then(|()| file.sync_data())
            .map_err(|e| io_error(segment.path.clone(), "writing", e))?;
        self.buf.clear();
        Ok(())
    }

    /// Makes everything of the batch durable: records, new segments, removed segments.
    fn flush(&mut self) -> Result<(), SpoolError> {
        self.flush_active()?;
        if self.dir_dirty {
            sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        Ok(())
    }

    /// Records that the hub has stored everything up to `seq` and deletes segments it no longer
    /// needs. Acknowledging an older position again is harmless.
    pub(super) fn ack(&mut self, epoch: u64, seq: u64) -> Result<(), SpoolError> {
        if epoch != self.epoch {
            return Err(SpoolError::EpochMismatch {
                got: epoch,
                epoch: self.epoch,
            });
        }
        if seq > self.last_seq() {
            return Err(SpoolError::AckBeyondEnd {
                seq,
                last: self.last_seq(),
            });
        }
        if seq <= self.acked {
            return Ok(());
        }
        self.acked = seq;
        self.tail.forget_through(seq);
        if self.oldest_cache.is_some_and(|(s, _)| s <= seq) {
            self.oldest_cache = None;
        }
        let frees_segment =
            self.segments.len() > 1 && self.segments.front().is_some_and(|s| s.last_seq() <= seq);
        if frees_segment || self.ack_written_at.elapsed() >= ACK_PERSIST_INTERVAL {
            self.write_ack()?;
        }
        self.compact()
    }

    /// Makes the in-memory acknowledgement durable in `ack.json`, if it moved since the last write.
    pub(super) fn write_ack(&mut self) -> Result<(), SpoolError> {
        if self.acked_on_disk >= self.acked {
            return Ok(());
        }
        let mark = serde_json::to_vec(&AckMark {
            epoch: self.epoch,
            seq: self.acked,
        })
        .map_err(|e| SpoolError::Encode(Arc::new(e)))?;
        write_atomic(&self.dir.join(ACK_FILE), &mark)?;
        self.acked_on_disk = self.acked;
        self.ack_written_at = std::time::Instant::now();
        Ok(())
    }

    /// Deletes segments whose records are all acknowledged in `ack.json`, never the active one.
    /// The ack is durable before this runs, so a crash in between only leaves files to delete
    /// next time.
    fn compact(&mut self) -> Result<(), SpoolError> {
        while self.segments.len() > 1
            && self
                .segments
                .front()
                .is_some_and(|s| s.last_seq() <= self.acked_on_disk)
        {
            if let Some(segment) = self.segments.pop_front() {
                fs::remove_file(&segment.path)
                    .map_err(|e| io_error(segment.path.clone(), "removing", e))?;
                self.bytes -= segment.size;
            }
        }
        Ok(())
    }

    /// Up to `max` records with a sequence number above `after_seq`, oldest first. Records still
    /// in the [`Tail`] are taken from memory (a later call for the same numbers reads them from
    /// the segment); the others are read back from their segment in one read per segment.
    pub(super) fn pending(
        &mut self,
        after_seq: u64,
        max: usize,
    ) -> Result<Vec<Record>, SpoolError> {
        let mut out = Vec::new();
        for segment in &self.segments {
            if out.len() >= max {
                break;
            }
            if segment.last_seq() <= after_seq {
                continue;
            }
            let start = segment.index.partition_point(|&(seq, _)| seq <= after_seq);
            let stop = start
                .saturating_add(max - out.len())
                .min(segment.index.len());
            let take = &segment.index[start..stop];
            let mut from_memory: Vec<Option<Event>> =
                take.iter().map(|&(seq, _)| self.tail.take(seq)).collect();
            // The records memory no longer has, read back in one range.
            let missing = from_memory.iter().position(Option::is_none);
            let bytes = match missing {
                None => None,
                Some(first) => {
                    let last = from_memory
                        .iter()
                        .rposition(Option::is_none)
                        .unwrap_or(first);
                    let from = take[first].1;
                    let end = segment
                        .index
                        .get(start + last + 1)
                        .map_or(segment.size, |&(_, off)| off);
                    Some((from, read_range(&segment.path, from, end)?))
                }
            };
            for (&(seq, offset), cached) in take.iter().zip(from_memory.iter_mut()) {
                let event = match (cached.take(), &bytes) {
                    (Some(event), _) => event,
                    (None, Some((from, bytes))) => {
                        let at = usize::try_from(offset - from).unwrap_or(usize::MAX);
                        decode_event(&segment.path, offset, bytes.get(at..).unwrap_or_default())?
                    }
                    // Unreachable: a record missing from memory is in `bytes`.
                    (None, None) => {
                        return Err(SpoolError::Unreadable {
                            path: segment.path.clone(),
                            offset,
                        });
                    }
                };
                out.push(Record { seq, event });
            }
        }
        Ok(out)
    }

    fn read_at(&self, segment: &Segment, offset: u64) -> Result<Event, SpoolError> {
        let end = segment
            .index
            .iter()
            .find(|&&(_, off)| off > offset)
            .map_or(segment.size, |&(_, off)| off);
        let bytes = read_range(&segment.path, offset, end)?;
        decode_event(&segment.path, offset, &bytes)
    }

    /// The spool's position and backlog.
    pub(super) fn head(&mut self) -> Result<Head, SpoolError> {
        let depth = self
            .segments
            .iter()
            .map(|s| s.unacked(self.acked).len() as u64)
            .sum();
        if self.oldest_cache.is_none() {
            let first = self.segments.iter().find_map(|s| {
                s.unacked(self.acked)
                    .first()
                    .map(|&(seq, off)| (s, seq, off))
            });
            if let Some((segment, seq, offset)) = first {
                let at = self.read_at(segment, offset)?.received_at_ms();
                self.oldest_cache = Some((seq, at));
            }
        }
        Ok(Head {
            position: Position {
                epoch: self.epoch,
                seq: self.last_seq(),
            },
            acked_seq: self.acked,
            depth,
            oldest_unacked_received_at_ms: self.oldest_cache.map(|(_, at)| at),
            bytes: self.bytes,
            segments: self.segments.len(),
        })
    }
}

/// Whether the record at `offset` is a gap (see [`record::is_gap`]).
fn is_gap_frame(bytes: &[u8], offset: u64) -> bool {
    let body = usize::try_from(offset).unwrap_or(usize::MAX) + frame::FRAME_PREFIX_LEN + 8;
    bytes.get(body..).is_some_and(record::is_gap)
}

fn decode_event(path: &Path, offset: u64, bytes: &[u8]) -> Result<Event, SpoolError> {
    let corrupt = || SpoolError::Unreadable {
        path: path.to_owned(),
        offset,
    };
    let frame = frame::decode(bytes).map_err(|_| corrupt())?;
    record::decode(frame.payload).map_err(|e| {
        tracing::error!(path = %path.display(), offset, error = %e, "spool record does not parse");
        corrupt()
    })
}
