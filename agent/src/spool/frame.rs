//! The on-disk format of spool segments: a checksummed header, then length- and CRC32-framed records.
//!
//! ```text
//! segment  = header frame*
//! header   = "BHSPOOL\x01" epoch:u64 first_seq:u64 reserved:u32 crc:u32      (32 bytes, little endian)
//! frame    = len:u32 crc:u32 body                                            (crc over len ‖ body)
//! body     = seq:u64 payload                                                 (len = 8 + payload length)
//! ```
//!
//! The payload is one event in one of the versioned encodings of [`super::record`] (JSON in
//! segments written by older agents, binary for bans and unbans since), told apart by its first
//! byte; framing, checksums and recovery do not look inside it.
//!
//! The length is inside the checksum so that a torn or flipped length is caught, not followed.

use std::ops::Range;

/// Bytes of a segment header.
pub const HEADER_LEN: usize = 32;
/// Bytes before a frame's body.
pub const FRAME_PREFIX_LEN: usize = 8;
/// The largest payload (encoded event) one record may hold.
pub const MAX_PAYLOAD_LEN: usize = 64 * 1024;
/// The smallest body: a sequence number and two bytes (`{}`; a binary record is longer).
const MIN_BODY_LEN: usize = 8 + 2;
const MAX_BODY_LEN: usize = 8 + MAX_PAYLOAD_LEN;
const MAGIC: &[u8; 8] = b"BHSPOOL\x01";

/// A segment header's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub epoch: u64,
    /// The sequence number the segment's first record has (or will have).
    pub first_seq: u64,
}

impl Header {
    pub fn encode(self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        out[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        let crc = crc32fast::hash(&out[..28]);
        out[28..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a header; `None` when it is short, not ours, or fails its checksum.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes = bytes.get(..HEADER_LEN)?;
        if &bytes[..8] != MAGIC || crc32fast::hash(&bytes[..28]) != le_u32(&bytes[28..32]) {
            return None;
        }
        Some(Self {
            epoch: le_u64(&bytes[8..16]),
            first_seq: le_u64(&bytes[16..24]),
        })
    }
}

/// Frames one record.
pub fn encode(seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    let body_len = 8 + payload.len();
    // Callers check MAX_PAYLOAD_LEN first, so the length always fits.
    let len = u32::try_from(body_len).unwrap_or(u32::MAX).to_le_bytes();
    let seq = seq.to_le_bytes();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len);
    hasher.update(&seq);
    hasher.update(payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(&seq);
    out.extend_from_slice(payload);
}

/// The encoded size of a record holding `payload_len` bytes of payload.
pub fn frame_len(payload_len: usize) -> usize {
    FRAME_PREFIX_LEN + 8 + payload_len
}

/// A frame that checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    pub seq: u64,
    pub payload: &'a [u8],
    /// Total bytes of the frame, prefix included.
    pub len: usize,
}

/// Why the bytes at an offset are not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// The frame runs past the end of the data: the signature of a write cut short.
    Truncated,
    /// The frame is complete but wrong (length out of range, checksum mismatch).
    Invalid,
}

/// Reads the frame at the start of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Frame<'_>, Bad> {
    let Some(prefix) = bytes.get(..FRAME_PREFIX_LEN) else {
        return Err(Bad::Truncated);
    };
    let body_len = le_u32(&prefix[..4]) as usize;
    if !(MIN_BODY_LEN..=MAX_BODY_LEN).contains(&body_len) {
        return Err(Bad::Invalid);
    }
    let Some(body) = bytes.get(FRAME_PREFIX_LEN..FRAME_PREFIX_LEN + body_len) else {
        return Err(Bad::Truncated);
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&prefix[..4]);
    hasher.update(body);
    if hasher.finalize() != le_u32(&prefix[4..8]) {
        return Err(Bad::Invalid);
    }
    Ok(Frame {
        seq: le_u64(&body[..8]),
        payload: &body[8..],
        len: FRAME_PREFIX_LEN + body_len,
    })
}

/// The outcome of reading a whole segment body (everything after its header).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    /// `(seq, offset from the start of the segment file)` of every good frame, in order.
    pub frames: Vec<(u64, u64)>,
    /// The damaged regions, in file order.
    pub damage: Vec<Damage>,
}

/// Bytes between good frames that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub range: Range<u64>,
    /// The highest sequence number read before the damage (or the caller's floor).
    pub seq_before: u64,
    /// The sequence number of the good frame right after the damage, if one follows in this
    /// segment. When none does, the damage may be the tail of a write that never completed.
    pub seq_after: Option<u64>,
}

/// Reads the frames of a segment whose bytes are `file` (header included), accepting only
/// sequence numbers above `floor` that strictly increase. At a bad frame it searches byte by byte
/// for the next good one, so that the damage is measured and good records after it are not given
/// up.
pub fn scan(file: &[u8], floor: u64) -> Scan {
    let mut scan = Scan::default();
    let mut last = floor;
    let mut pos = HEADER_LEN.min(file.len());
    while pos < file.len() {
        match decode(&file[pos..]) {
            Ok(frame) if frame.seq > last => {
                scan.frames.push((frame.seq, pos as u64));
                last = frame.seq;
                pos += frame.len;
            }
            _ => {
                let next = resync(file, pos + 1, last);
                let end = next.map_or(file.len(), |(at, _)| at);
                scan.damage.push(Damage {
                    range: pos as u64..end as u64,
                    seq_before: last,
                    seq_after: next.map(|(_, seq)| seq),
                });
                pos = end;
            }
        }
    }
    scan
}

/// The offset and sequence number of the next good frame at or after `from` with a sequence
/// number above `last`.
fn resync(file: &[u8], from: usize, last: u64) -> Option<(usize, u64)> {
    (from..file.len()).find_map(|at| match decode(&file[at..]) {
        Ok(frame) if frame.seq > last => Some((at, frame.seq)),
        _ => None,
    })
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut buf = [0u8; 4];
    buf.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(buf)
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    buf.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(seqs: &[u64]) -> Vec<u8> {
        let mut out = Header {
            epoch: 7,
            first_seq: seqs.first().copied().unwrap_or(1),
        }
        .encode()
        .to_vec();
        for &seq in seqs {
            encode(seq, format!(r#"{{"n":{seq}}}"#).as_bytes(), &mut out);
        }
        out
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let header = Header {
            epoch: u64::MAX - 3,
            first_seq: 42,
        };
        let mut bytes = header.encode();
        assert_eq!(Header::decode(&bytes), Some(header));
        assert_eq!(Header::decode(&bytes[..31]), None);
        bytes[17] ^= 1;
        assert_eq!(Header::decode(&bytes), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        encode(9, br#"{"a":1}"#, &mut out);
        assert_eq!(out.len(), frame_len(7));
        let frame = decode(&out).expect("good frame");
        assert_eq!(
            (frame.seq, frame.payload, frame.len),
            (9, &br#"{"a":1}"#[..], out.len())
        );
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]), Err(Bad::Truncated), "cut at {cut}");
        }
        for byte in 0..out.len() {
            let mut flipped = out.clone();
            flipped[byte] ^= 0x10;
            assert!(decode(&flipped).is_err(), "flip at {byte}");
        }
        assert_eq!(decode(&[0u8; 64]), Err(Bad::Invalid));
    }

    #[test]
    fn clean_segment_scans_fully() {
        let file = segment(&[1, 2, 3]);
        let scan = scan(&file, 0);
        assert_eq!(scan.frames.len(), 3);
        assert_eq!(scan.frames[0], (1, HEADER_LEN as u64));
        assert_eq!(scan.damage, []);
        // Numbers must rise above the floor: a stale copy of old records is damage, not data.
        assert_eq!(super::scan(&file, 3).frames, []);
    }

    #[test]
    fn torn_tail_is_damage_without_frames_after() {
        let mut file = segment(&[1, 2, 3]);
        let full = file.len();
        file.truncate(full - 5);
        let scan = scan(&file, 0);
        assert_eq!(scan.frames.len(), 2);
        let [damage] = &scan.damage[..] else {
            panic!("one damaged region: {:?}", scan.damage);
        };
        assert_eq!(damage.seq_after, None);
        assert_eq!(damage.range.end, file.len() as u64);
        assert_eq!(damage.seq_before, 2);

        // A zero-filled tail (size extended, data never written) reads the same way.
        let mut file = segment(&[1, 2]);
        file.extend_from_slice(&[0u8; 300]);
        let scan = super::scan(&file, 0);
        assert_eq!(scan.frames.len(), 2);
        assert_eq!(scan.damage.len(), 1);
        assert_eq!(scan.damage[0].seq_after, None);
    }

    #[test]
    fn damage_in_the_middle_is_measured_and_skipped() {
        let mut file = segment(&[1, 2, 3, 4]);
        let second = super::scan(&file, 0).frames[1].1 as usize;
        file[second + 12] ^= 0xff;
        let scan = scan(&file, 0);
        assert_eq!(
            scan.frames.iter().map(|f| f.0).collect::<Vec<_>>(),
            [1, 3, 4]
        );
        let [damage] = &scan.damage[..] else {
            panic!("one damaged region: {:?}", scan.damage);
        };
        assert_eq!((damage.seq_before, damage.seq_after), (1, Some(3)));
        assert_eq!(damage.range.start, second as u64);

        // Separate regions are reported separately.
        let mut file = segment(&[1, 2, 3, 4, 5]);
        let offsets: Vec<usize> = super::scan(&file, 0)
            .frames
            .iter()
            .map(|f| f.1 as usize)
            .collect();
        file[offsets[1] + 12] ^= 0xff;
        file[offsets[3] + 12] ^= 0xff;
        let scan = super::scan(&file, 0);
        assert_eq!(
            scan.frames.iter().map(|f| f.0).collect::<Vec<_>>(),
            [1, 3, 5]
        );
        let seqs: Vec<_> = scan
            .damage
            .iter()
            .map(|d| (d.seq_before, d.seq_after))
            .collect();
        assert_eq!(seqs, [(1, Some(3)), (3, Some(5))]);
    }
}
