//! The newest records of the spool, kept in memory as appended so that delivery does not read back
//! what was just written.

use std::collections::VecDeque;

use super::event::Event;

/// Bytes of encoded records kept in memory for delivery (see [`Tail`]); a backlog beyond this is
/// read back from the segments.
const TAIL_BYTES: usize = 16 << 20;

/// The newest records, kept in memory as they were appended so that delivery does not read back
/// and parse what was written a moment ago.
/// The entries cover the consecutive numbers `first..first + entries.len()`, up to the last
/// appended record; an entry is `None` once delivery took it, and the oldest go when they are
/// acknowledged or past [`TAIL_BYTES`]. The segments stay the truth: whatever is not here is read
/// from them, and the tail is lost with the store after a write error or a restart.
#[derive(Debug, Default)]
pub(super) struct Tail {
    first: u64,
    entries: VecDeque<Option<(Event, usize)>>,
    bytes: usize,
}

impl Tail {
    /// Adds the record numbered `seq`, which must follow the last one (a tail that does not end
    /// just before it starts afresh).
    pub(super) fn push(&mut self, seq: u64, event: Event, encoded: usize) {
        if self.first + self.entries.len() as u64 != seq {
            self.entries.clear();
            self.bytes = 0;
            self.first = seq;
        }
        self.entries.push_back(Some((event, encoded)));
        self.bytes += encoded;
        while self.bytes > TAIL_BYTES {
            self.pop_front();
        }
    }

    /// Forgets every record numbered `seq` or below.
    pub(super) fn forget_through(&mut self, seq: u64) {
        while self.first <= seq && !self.entries.is_empty() {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(entry) = self.entries.pop_front() {
            if let Some((_, encoded)) = entry {
                self.bytes -= encoded;
            }
            self.first += 1;
        }
    }

    /// Takes the record numbered `seq` out, if it is still here.
    pub(super) fn take(&mut self, seq: u64) -> Option<Event> {
        let at = usize::try_from(seq.checked_sub(self.first)?).ok()?;
        let (event, encoded) = self.entries.get_mut(at)?.take()?;
        self.bytes -= encoded;
        Some(event)
    }
}
