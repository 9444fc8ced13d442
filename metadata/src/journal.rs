//! The metadata journal: an append-only file of [`MetadataCommand`]s, one
//! checksummed record per command, written and fdatasync'ed before the
//! change is acknowledged.
//!
//! Must not: hold anything but successfully applied commands (a rejected
//! command is never logged), panic on any byte sequence, or drop a record
//! that checksums correctly. Recovery truncates a damaged TAIL only: the
//! bytes from the first bad record to the end of the file, provided no
//! valid record follows them (a crash can tear only the last append).
//! A bad record followed by a valid one is mid-journal corruption: a typed
//! error, and the operator decides.

use xxhash_rust::xxh3::xxh3_64;

use super::command::MetadataCommand;
use crate::limits::RECORD_PAYLOAD_MAX_BYTES;

/// File name of the journal inside the metadata directory.
pub const JOURNAL_FILE: &str = "metadata.journal";

/// Format version byte at the start of every payload.
pub const RECORD_FORMAT_VERSION: u8 = 1;

/// Bytes before the payload: `len u32` + `checksum u64`.
pub const RECORD_HEADER_BYTES: usize = 12;

/// Smallest valid payload: version byte + sequence number.
const PAYLOAD_MIN_BYTES: usize = 9;

/// One journal record.
///
/// Layout (little-endian):
/// ```text
/// [len u32]        payload length in bytes, 9..=16 MiB
/// [checksum u64]   XXH3-64 of (len as 4 LE bytes ‖ payload)
/// [payload]        [format u8 = 1][seq u64][postcard(MetadataCommand)]
/// ```
/// `seq` numbers every applied command from 1; records follow each other
/// with no padding. The checksum covers the length so that a flipped
/// length bit cannot pass as a shorter valid record. Commands are encoded
/// with `postcard` (serde): compact, deterministic, and variant indexes are
/// stable as long as `MetadataCommand` only grows at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    pub seq: u64,
    pub command: MetadataCommand,
}

impl JournalRecord {
    /// The record's bytes. `postcard` cannot fail on these types except by
    /// a bug (no maps with non-string keys, no unsized data), so a failure
    /// is reported, never panicked on.
    pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        let mut payload = Vec::with_capacity(64);
        payload.push(RECORD_FORMAT_VERSION);
        payload.extend_from_slice(&self.seq.to_le_bytes());
        let payload = postcard::to_extend(&self.command, payload)?;
        assert!(payload.len() >= PAYLOAD_MIN_BYTES);
        // The store refuses larger commands (`Admission::check`) before
        // they get here; a record the loader would refuse is never written.
        if payload.len() > RECORD_PAYLOAD_MAX_BYTES {
            return Err(postcard::Error::SerializeBufferFull);
        }
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + payload.len());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&checksum(len, &payload).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }
}

fn checksum(len: u32, payload: &[u8]) -> u64 {
    let mut bytes = Vec::with_capacity(4 + payload.len());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(payload);
    xxh3_64(&bytes)
}

/// A damaged tail that recovery cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Where the first bad record started (the new file length).
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes: u64,
}

/// The journal as read from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalScan {
    pub records: Vec<JournalRecord>,
    /// Length of the valid prefix.
    pub valid_len: u64,
    pub torn_tail: Option<TornTail>,
}

/// Journal content that recovery must not silently repair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error(
        "metadata journal is corrupt at byte {offset} ({reason}) and a valid record follows at byte {next_valid}; refusing to drop acknowledged commands"
    )]
    CorruptRecord {
        offset: u64,
        reason: &'static str,
        next_valid: u64,
    },
    #[error("metadata journal record at byte {offset} checksums but does not decode: {reason}")]
    Undecodable { offset: u64, reason: String },
}

/// Why a record at some offset is not valid.
enum Bad {
    Short,
    Length,
    Checksum,
}

impl Bad {
    fn reason(&self) -> &'static str {
        match self {
            Self::Short => "record runs past the end of the file",
            Self::Length => "record length out of range",
            Self::Checksum => "checksum mismatch",
        }
    }
}

/// Checks the record framing at `offset`; returns the payload range end.
fn frame_at(bytes: &[u8], offset: usize) -> Result<(usize, &[u8]), Bad> {
    let header = bytes
        .get(offset..offset.saturating_add(RECORD_HEADER_BYTES))
        .ok_or(Bad::Short)?;
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(header.get(..4).ok_or(Bad::Short)?);
    let mut sum_bytes = [0u8; 8];
    sum_bytes.copy_from_slice(header.get(4..12).ok_or(Bad::Short)?);
    let len = u32::from_le_bytes(len_bytes);
    let len_usize = usize::try_from(len).map_err(|_| Bad::Length)?;
    if !(PAYLOAD_MIN_BYTES..=RECORD_PAYLOAD_MAX_BYTES).contains(&len_usize) {
        return Err(Bad::Length);
    }
    let start = offset + RECORD_HEADER_BYTES;
    let end = start.checked_add(len_usize).ok_or(Bad::Length)?;
    let payload = bytes.get(start..end).ok_or(Bad::Short)?;
    if checksum(len, payload) != u64::from_le_bytes(sum_bytes) {
        return Err(Bad::Checksum);
    }
    Ok((end, payload))
}

fn decode_payload(payload: &[u8], offset: usize) -> Result<JournalRecord, JournalError> {
    let undecodable = |reason: String| JournalError::Undecodable {
        offset: offset as u64,
        reason,
    };
    let (version, rest) = payload
        .split_first()
        .ok_or_else(|| undecodable("empty payload".into()))?;
    if *version != RECORD_FORMAT_VERSION {
        return Err(undecodable(format!("unknown record format {version}")));
    }
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(
        rest.get(..8)
            .ok_or_else(|| undecodable("no sequence".into()))?,
    );
    let command_bytes = rest.get(8..).unwrap_or_default();
    let (command, trailing) = postcard::take_from_bytes::<MetadataCommand>(command_bytes)
        .map_err(|error| undecodable(error.to_string()))?;
    if !trailing.is_empty() {
        return Err(undecodable(format!("{} trailing bytes", trailing.len())));
    }
    Ok(JournalRecord {
        seq: u64::from_le_bytes(seq_bytes),
        command,
    })
}

/// Whether a record starting at `offset` could be a later record of this
/// journal: its length fits the file, its payload opens with the format
/// byte and a sequence number after `after_seq` that the bytes left could
/// reach. Cheap (no checksum), so the search for a valid record after a
/// bad one checksums only candidates that pass it: linear in the file for
/// any torn tail, instead of hashing up to a record's length at every byte.
fn could_follow(bytes: &[u8], offset: usize, after_seq: Option<u64>) -> bool {
    let Some(rest) = bytes.get(offset..) else {
        return false;
    };
    // `len u32 | checksum u64 | version u8 | seq u64`: fixed offsets into a
    // fixed-size array, so every index below is checked when compiling.
    let Some(header) = rest.first_chunk::<{ RECORD_HEADER_BYTES + PAYLOAD_MIN_BYTES }>() else {
        return false;
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if !(PAYLOAD_MIN_BYTES..=RECORD_PAYLOAD_MAX_BYTES).contains(&len)
        || RECORD_HEADER_BYTES + len > rest.len()
        || header[RECORD_HEADER_BYTES] != RECORD_FORMAT_VERSION
    {
        return false;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&header[RECORD_HEADER_BYTES + 1..RECORD_HEADER_BYTES + 9]);
    let seq = u64::from_le_bytes(seq);
    match after_seq {
        // Records are numbered consecutively: a later one is at most one
        // number per smallest record that fits in between.
        Some(after) => {
            let reachable = (rest.len() / (RECORD_HEADER_BYTES + PAYLOAD_MIN_BYTES)) as u64;
            seq > after && seq - after <= reachable.saturating_add(1)
        }
        None => seq > 0,
    }
}

/// Reads every record. A bad record with nothing valid after it is a torn
/// tail (reported in the scan, to be truncated by the caller); a bad record
/// with a valid record after it is [`JournalError::CorruptRecord`].
pub fn scan(bytes: &[u8]) -> Result<JournalScan, JournalError> {
    let mut records = Vec::new();
    let mut offset = 0usize;
    while offset < bytes.len() {
        match frame_at(bytes, offset) {
            Ok((end, payload)) => {
                records.push(decode_payload(payload, offset)?);
                offset = end;
            }
            Err(bad) => {
                // A crash tears only the last append, so anything valid
                // after this point means the damage is not a torn tail.
                let after_seq = records.last().map(|record: &JournalRecord| record.seq);
                if let Some(next_valid) = (offset + 1..bytes.len()).find(|candidate| {
                    could_follow(bytes, *candidate, after_seq)
                        && frame_at(bytes, *candidate).is_ok()
                }) {
                    return Err(JournalError::CorruptRecord {
                        offset: offset as u64,
                        reason: bad.reason(),
                        next_valid: next_valid as u64,
                    });
                }
                return Ok(JournalScan {
                    records,
                    valid_len: offset as u64,
                    torn_tail: Some(TornTail {
                        offset: offset as u64,
                        bytes: (bytes.len() - offset) as u64,
                    }),
                });
            }
        }
    }
    Ok(JournalScan {
        records,
        valid_len: offset as u64,
        torn_tail: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the torn-tail scan is linear: 1 MiB of torn garbage whose
    // every fourth byte announces a 16 KiB record (the old scan hashed 16
    // KiB at each of those 256 Ki offsets: about 4 GiB) is found to be a
    // torn tail within a fraction of a second.
    #[test]
    fn a_large_torn_tail_is_scanned_in_linear_time() {
        let mut bytes = Vec::new();
        for seq in 1..=3 {
            bytes.extend(record(seq).encode().unwrap());
        }
        let valid = bytes.len();
        for _ in 0..(256 * 1024) {
            bytes.extend_from_slice(&(16 * 1024u32).to_le_bytes());
        }
        let started = std::time::Instant::now();
        let scan = super::scan(&bytes).unwrap();
        let took = started.elapsed();
        assert_eq!(scan.records.len(), 3);
        assert_eq!(scan.valid_len, valid as u64);
        assert!(scan.torn_tail.is_some());
        assert!(
            took < std::time::Duration::from_secs(2),
            "torn-tail scan took {took:?}"
        );
    }

    fn record(seq: u64) -> JournalRecord {
        JournalRecord {
            seq,
            command: MetadataCommand::CreateStream {
                name: format!("stream-{seq}"),
                created_at_us: seq * 1000,
            },
        }
    }

    fn journal(count: u64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for seq in 1..=count {
            starts.push(bytes.len());
            bytes.extend(record(seq).encode().unwrap());
        }
        (bytes, starts)
    }

    // Proves records round-trip and the layout is [len][checksum][payload].
    #[test]
    fn round_trip_and_layout() {
        let (bytes, _) = journal(3);
        let scan = scan(&bytes).unwrap();
        assert_eq!(scan.records, vec![record(1), record(2), record(3)]);
        assert_eq!(scan.valid_len, bytes.len() as u64);
        assert_eq!(scan.torn_tail, None);
        let one = record(1).encode().unwrap();
        let len = u32::from_le_bytes(one[..4].try_into().unwrap()) as usize;
        assert_eq!(one.len(), RECORD_HEADER_BYTES + len);
        assert_eq!(one[12], RECORD_FORMAT_VERSION);
        assert_eq!(&one[13..21], &1u64.to_le_bytes());
        assert_eq!(super::scan(&[]).unwrap().records, vec![]);
    }

    // Proves every cut of the last record is a torn tail that keeps all
    // earlier records, and that zero-filled tails are torn tails too.
    #[test]
    fn torn_tail_at_every_length() {
        let (bytes, starts) = journal(3);
        let last = starts[2];
        for cut in last + 1..bytes.len() {
            let scan = scan(&bytes[..cut]).unwrap();
            assert_eq!(scan.records.len(), 2, "cut at {cut}");
            assert_eq!(
                scan.torn_tail,
                Some(TornTail {
                    offset: last as u64,
                    bytes: (cut - last) as u64
                })
            );
        }
        let mut zeroed = bytes.clone();
        zeroed.extend([0u8; 4096]);
        let scan = scan(&zeroed).unwrap();
        assert_eq!(scan.records.len(), 3);
        assert_eq!(scan.valid_len, bytes.len() as u64);
    }

    // Proves a flipped bit anywhere in a middle record is a typed error,
    // and in the last record a torn tail.
    #[test]
    fn bit_flips() {
        let (bytes, starts) = journal(3);
        for offset in starts[1]..starts[2] {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x10;
            assert!(
                matches!(scan(&damaged), Err(JournalError::CorruptRecord { offset: o, .. }) if o == starts[1] as u64),
                "flip at {offset}"
            );
        }
        for offset in starts[2]..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x01;
            let scan = scan(&damaged).unwrap();
            assert_eq!(scan.records.len(), 2, "flip at {offset}");
            assert!(scan.torn_tail.is_some());
        }
    }

    // Proves a record that checksums but holds garbage is Undecodable, not
    // a panic and not a torn tail.
    #[test]
    fn checksummed_garbage_is_undecodable() {
        let payload = [RECORD_FORMAT_VERSION, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        let len = payload.len() as u32;
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend(checksum(len, &payload).to_le_bytes());
        bytes.extend(payload);
        assert!(matches!(
            scan(&bytes),
            Err(JournalError::Undecodable { offset: 0, .. })
        ));
    }
}
