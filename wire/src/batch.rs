//! The message batch record shared by the wire and the disk (protocol §5.1).
//!
//! This module owns the byte layout of a batch record, its validation, the
//! server-side stamping of offsets and timestamps, frame iteration and the
//! slicing of a stored record into a smaller one for a poll reply. It is pure:
//! it does no I/O, allocates only when slicing, and never panics on any input
//! bytes (every decode returns a typed [`BatchError`]). It must not know about
//! files, partitions or connections.
//!
//! A record is `[256-byte batch header][frame]*`, and a frame is
//! `[48-byte frame header][payload][user headers]` (payload before headers).
//! All integers are little-endian. The same bytes are received from a
//! producer, stamped, written to a segment file and copied into poll replies.

// Bytes from the network and the disk are never a programmer error: no
// unwrap, expect or unchecked indexing here (tests may allow them).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::ops::Range;

use xxhash_rust::xxh3::{Xxh3Default, xxh3_64};

use crate::protocol::codes::Status;

/// Size of the batch header that starts every record.
pub const BATCH_HEADER_SIZE: usize = 256;
/// Size of the header that starts every frame (message).
pub const FRAME_HEADER_SIZE: usize = 48;

/// Batch header field offsets (see [`BatchHeader`]).
const PARTITION_ID_AT: usize = 0;
const BASE_OFFSET_AT: usize = 8;
const BASE_TIMESTAMP_AT: usize = 16;
const ORIGIN_TIMESTAMP_AT: usize = 24;
/// Offset of `batch_length` (u64), which the request decoder checks too.
pub const BATCH_LENGTH_AT: usize = 32;
const BATCH_CHECKSUM_AT: usize = 40;
const MESSAGE_COUNT_AT: usize = 48;
const BATCH_RESERVED: Range<usize> = 52..256;

/// Frame header field offsets (see [`FrameHeader`]).
const FRAME_CHECKSUM_AT: usize = 0;
const FRAME_ID_AT: usize = 8;
const FRAME_OFFSET_DELTA_AT: usize = 24;
const FRAME_TIMESTAMP_DELTA_AT: usize = 28;
const FRAME_USER_HEADERS_LENGTH_AT: usize = 32;
const FRAME_PAYLOAD_LENGTH_AT: usize = 36;
const FRAME_RESERVED: Range<usize> = 40..48;

/// Why a byte string is not a valid batch record. Each variant names the
/// check that failed and carries expected versus found values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch is {found} bytes, shorter than the {BATCH_HEADER_SIZE}-byte batch header")]
    HeaderTruncated { found: usize },
    #[error("batch_length says {expected} bytes but {found} bytes were given")]
    LengthMismatch { expected: u64, found: u64 },
    #[error("batch header reserved byte {at} is {value:#04x}, must be zero")]
    ReservedNotZero { at: usize, value: u8 },
    #[error("message_count is zero; a batch carries at least one message")]
    EmptyBatch,
    #[error(
        "frame {index} at byte {position} needs {needed} bytes but only {available} remain in the batch"
    )]
    FrameTruncated {
        index: u32,
        position: usize,
        needed: u64,
        available: usize,
    },
    #[error("frame {index} at byte {position}: reserved byte {at} is {value:#04x}, must be zero")]
    FrameReservedNotZero {
        index: u32,
        position: usize,
        at: usize,
        value: u8,
    },
    #[error("frame {index} at byte {position}: offset_delta is {found}, expected {expected}")]
    OffsetDeltaMismatch {
        index: u32,
        position: usize,
        expected: u32,
        found: u32,
    },
    #[error("message_count says {expected} frames but the frames end after {found}")]
    FrameCountMismatch { expected: u32, found: u32 },
    #[error("{trailing} bytes after the last of {message_count} frames")]
    TrailingBytes { message_count: u32, trailing: usize },
    #[error("frame {index} at byte {position}: checksum {found:#018x}, computed {expected:#018x}")]
    FrameChecksum {
        index: u32,
        position: usize,
        expected: u64,
        found: u64,
    },
    #[error("batch checksum {found:#018x}, computed {expected:#018x}")]
    BatchChecksum { expected: u64, found: u64 },
    #[error("frame {index}: user headers of {bytes} bytes exceed the limit")]
    UserHeadersTooLarge { index: u32, bytes: usize },
    #[error("frame {index} at byte {position}: user headers are not a key/value TLV sequence")]
    UserHeadersMalformed { index: u32, position: usize },
    #[error("slice of messages {start}..{end} is outside a batch of {message_count}")]
    SliceOutOfRange {
        start: u32,
        end: u32,
        message_count: u32,
    },
}

impl BatchError {
    /// The wire status a producer sees for this rejection.
    pub fn status(&self) -> Status {
        match self {
            BatchError::FrameChecksum { .. } => Status::InvalidMessageChecksum,
            BatchError::BatchChecksum { .. } => Status::InvalidBatchChecksum,
            BatchError::EmptyBatch => Status::InvalidMessagesCount,
            BatchError::UserHeadersTooLarge { .. } => Status::TooBigUserHeaders,
            BatchError::UserHeadersMalformed { .. } => Status::InvalidFormat,
            BatchError::HeaderTruncated { .. }
            | BatchError::LengthMismatch { .. }
            | BatchError::ReservedNotZero { .. }
            | BatchError::FrameTruncated { .. }
            | BatchError::FrameReservedNotZero { .. }
            | BatchError::OffsetDeltaMismatch { .. }
            | BatchError::FrameCountMismatch { .. }
            | BatchError::TrailingBytes { .. }
            | BatchError::SliceOutOfRange { .. } => Status::InvalidCommand,
        }
    }
}

// Both reserved areas run to the end of their header, so "the first
// non-zero byte at or after the start of the reserved area" is the check.
const _: () = assert!(BATCH_RESERVED.end == BATCH_HEADER_SIZE);
const _: () = assert!(FRAME_RESERVED.end == FRAME_HEADER_SIZE);

/// The `W` bytes at the constant offset `AT` of an `N`-byte header. Every
/// field read and write goes through here or [`put_field`]; the inline
/// `const` assertion proves at compile time that the field lies inside the
/// header, so the slice cannot fail (and clippy, seeing constant bounds on
/// an array, does not flag it).
fn field<const AT: usize, const W: usize, const N: usize>(header: &[u8; N]) -> [u8; W] {
    const { assert!(AT + W <= N) };
    let mut value = [0u8; W];
    value.copy_from_slice(&header[AT..AT + W]);
    value
}

/// Writes `value` at the constant offset `AT` of an `N`-byte header (see
/// [`field`]).
fn put_field<const AT: usize, const W: usize, const N: usize>(
    header: &mut [u8; N],
    value: [u8; W],
) {
    const { assert!(AT + W <= N) };
    header[AT..AT + W].copy_from_slice(&value);
}

/// The first byte at or after `start` that is not zero, with its position.
fn first_nonzero(bytes: &[u8], start: usize) -> Option<(usize, u8)> {
    bytes
        .iter()
        .enumerate()
        .skip(start)
        .find(|(_, byte)| **byte != 0)
        .map(|(at, byte)| (at, *byte))
}

/// The decoded 256-byte batch header.
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 8 | `partition_id` (u64): 0 from producers, the partition when stored |
/// | 8 | 8 | `base_offset` (u64): offset of the frame with `offset_delta` 0 |
/// | 16 | 8 | `base_timestamp` (u64, µs): server append time, same for all frames |
/// | 24 | 8 | `origin_timestamp` (u64, µs): min producer timestamp, never rewritten |
/// | 32 | 8 | `batch_length` (u64): 256 + sum of frame sizes |
/// | 40 | 8 | `batch_checksum` (u64): see [`batch_checksum`] |
/// | 48 | 4 | `message_count` (u32): number of frames, ≥ 1 |
/// | 52 | 204 | reserved, zero |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub partition_id: u64,
    pub base_offset: u64,
    pub base_timestamp: u64,
    pub origin_timestamp: u64,
    pub batch_length: u64,
    pub batch_checksum: u64,
    pub message_count: u32,
}

impl BatchHeader {
    /// Decodes the header fields and checks the reserved bytes. It does not
    /// look at the frames; see [`validate`] for the full check.
    pub fn decode(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        let Some(header) = bytes.first_chunk::<BATCH_HEADER_SIZE>() else {
            return Err(BatchError::HeaderTruncated { found: bytes.len() });
        };
        if let Some((at, value)) = first_nonzero(header, BATCH_RESERVED.start) {
            return Err(BatchError::ReservedNotZero { at, value });
        }
        Ok(BatchHeader {
            partition_id: u64::from_le_bytes(field::<PARTITION_ID_AT, 8, _>(header)),
            base_offset: u64::from_le_bytes(field::<BASE_OFFSET_AT, 8, _>(header)),
            base_timestamp: u64::from_le_bytes(field::<BASE_TIMESTAMP_AT, 8, _>(header)),
            origin_timestamp: u64::from_le_bytes(field::<ORIGIN_TIMESTAMP_AT, 8, _>(header)),
            batch_length: u64::from_le_bytes(field::<BATCH_LENGTH_AT, 8, _>(header)),
            batch_checksum: u64::from_le_bytes(field::<BATCH_CHECKSUM_AT, 8, _>(header)),
            message_count: u32::from_le_bytes(field::<MESSAGE_COUNT_AT, 4, _>(header)),
        })
    }

    /// Writes the fields into the first 256 bytes of `bytes`, zeroing the
    /// reserved area.
    pub fn encode_into(&self, bytes: &mut [u8]) {
        let length = bytes.len();
        let Some(header) = bytes.first_chunk_mut::<BATCH_HEADER_SIZE>() else {
            panic!("a batch header needs {BATCH_HEADER_SIZE} bytes, the buffer has {length}");
        };
        put_field::<PARTITION_ID_AT, 8, _>(header, self.partition_id.to_le_bytes());
        put_field::<BASE_OFFSET_AT, 8, _>(header, self.base_offset.to_le_bytes());
        put_field::<BASE_TIMESTAMP_AT, 8, _>(header, self.base_timestamp.to_le_bytes());
        put_field::<ORIGIN_TIMESTAMP_AT, 8, _>(header, self.origin_timestamp.to_le_bytes());
        put_field::<BATCH_LENGTH_AT, 8, _>(header, self.batch_length.to_le_bytes());
        put_field::<BATCH_CHECKSUM_AT, 8, _>(header, self.batch_checksum.to_le_bytes());
        put_field::<MESSAGE_COUNT_AT, 4, _>(header, self.message_count.to_le_bytes());
        header
            .iter_mut()
            .skip(BATCH_RESERVED.start)
            .for_each(|byte| *byte = 0);
    }

    /// Offset of the last message, assuming dense `offset_delta`s (true for
    /// stored batches, which are validated with dense deltas).
    pub fn last_offset(&self) -> u64 {
        self.base_offset + u64::from(self.message_count.saturating_sub(1))
    }
}

/// The decoded 48-byte frame header.
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 8 | `checksum` (u64): XXH3-64 seed 0 over frame bytes 8..end |
/// | 8 | 16 | `id` (u128): producer-chosen, never rewritten |
/// | 24 | 4 | `offset_delta` (u32): index within the producer batch |
/// | 28 | 4 | `timestamp_delta` (u32, µs): origin time − batch `origin_timestamp` |
/// | 32 | 4 | `user_headers_length` (u32) |
/// | 36 | 4 | `payload_length` (u32) |
/// | 40 | 8 | reserved, zero |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub checksum: u64,
    pub id: u128,
    pub offset_delta: u32,
    pub timestamp_delta: u32,
    pub user_headers_length: u32,
    pub payload_length: u32,
}

impl FrameHeader {
    /// Decodes the fields of a 48-byte frame header (reserved bytes are
    /// checked by the caller, which knows the frame's position).
    fn decode(header: &[u8; FRAME_HEADER_SIZE]) -> FrameHeader {
        FrameHeader {
            checksum: u64::from_le_bytes(field::<FRAME_CHECKSUM_AT, 8, _>(header)),
            id: u128::from_le_bytes(field::<FRAME_ID_AT, 16, _>(header)),
            offset_delta: u32::from_le_bytes(field::<FRAME_OFFSET_DELTA_AT, 4, _>(header)),
            timestamp_delta: u32::from_le_bytes(field::<FRAME_TIMESTAMP_DELTA_AT, 4, _>(header)),
            user_headers_length: u32::from_le_bytes(field::<FRAME_USER_HEADERS_LENGTH_AT, 4, _>(
                header,
            )),
            payload_length: u32::from_le_bytes(field::<FRAME_PAYLOAD_LENGTH_AT, 4, _>(header)),
        }
    }

    /// Total frame size: header, payload and user headers.
    pub fn frame_size(&self) -> u64 {
        FRAME_HEADER_SIZE as u64
            + u64::from(self.payload_length)
            + u64::from(self.user_headers_length)
    }
}

/// One message inside a record, as byte ranges into the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Position of the frame within the record (0-based).
    pub index: u32,
    /// `base_offset + offset_delta`.
    pub offset: u64,
    /// The record's `base_timestamp` (server append time, µs).
    pub timestamp: u64,
    /// `origin_timestamp + timestamp_delta` (producer time, µs).
    pub origin_timestamp: u64,
    pub header: FrameHeader,
    /// The whole frame (header, payload, user headers).
    pub frame: Range<usize>,
    pub payload: Range<usize>,
    pub user_headers: Range<usize>,
}

/// Iterates the frames of a record whose header decoded. Yields an error
/// (and then stops) at the first frame that does not fit.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    bytes: &'a [u8],
    header: BatchHeader,
    index: u32,
    position: usize,
    failed: bool,
}

impl<'a> Frames<'a> {
    /// Position just after the last frame yielded so far.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl Iterator for Frames<'_> {
    type Item = Result<Frame, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.index >= self.header.message_count {
            return None;
        }
        let position = self.position;
        let rest = self.bytes.get(position..).unwrap_or_default();
        let available = rest.len();
        let Some(header_bytes) = rest.first_chunk::<FRAME_HEADER_SIZE>() else {
            self.failed = true;
            return Some(Err(BatchError::FrameTruncated {
                index: self.index,
                position,
                needed: FRAME_HEADER_SIZE as u64,
                available,
            }));
        };
        let header = FrameHeader::decode(header_bytes);
        if let Some((at, value)) = first_nonzero(header_bytes, FRAME_RESERVED.start) {
            self.failed = true;
            return Some(Err(BatchError::FrameReservedNotZero {
                index: self.index,
                position,
                at,
                value,
            }));
        }
        let frame_size = header.frame_size();
        if frame_size > available as u64 {
            self.failed = true;
            return Some(Err(BatchError::FrameTruncated {
                index: self.index,
                position,
                needed: frame_size,
                available,
            }));
        }
        // frame_size ≤ available ≤ usize::MAX, so the casts below are exact.
        let frame_end = position + frame_size as usize;
        let payload_start = position + FRAME_HEADER_SIZE;
        let payload_end = payload_start + header.payload_length as usize;
        let frame = Frame {
            index: self.index,
            offset: self
                .header
                .base_offset
                .wrapping_add(u64::from(header.offset_delta)),
            timestamp: self.header.base_timestamp,
            origin_timestamp: self
                .header
                .origin_timestamp
                .wrapping_add(u64::from(header.timestamp_delta)),
            header,
            frame: position..frame_end,
            payload: payload_start..payload_end,
            user_headers: payload_end..frame_end,
        };
        self.index += 1;
        self.position = frame_end;
        Some(Ok(frame))
    }
}

/// Iterates the frames of `bytes` (a whole record). Fails only if the batch
/// header does not decode; frame errors come out of the iterator.
pub fn frames(bytes: &[u8]) -> Result<Frames<'_>, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    Ok(Frames {
        bytes,
        header,
        index: 0,
        position: BATCH_HEADER_SIZE,
        failed: false,
    })
}

/// XXH3-64 (seed 0) over bytes 8..end of a frame.
pub fn frame_checksum(frame_bytes: &[u8]) -> u64 {
    assert!(frame_bytes.len() >= FRAME_HEADER_SIZE);
    // The assertion above makes `get` the whole tail after the checksum.
    xxh3_64(frame_bytes.get(FRAME_CHECKSUM_AT + 8..).unwrap_or_default())
}

/// The batch checksum: XXH3-64 (seed 0) over `partition_id ‖ base_offset ‖
/// base_timestamp ‖ origin_timestamp ‖ batch_length ‖ message_count (u32)`
/// followed by every frame's 8-byte checksum field, in order. Frame bodies
/// are covered by their own checksums.
pub fn batch_checksum(header: &BatchHeader, frame_checksums: impl Iterator<Item = u64>) -> u64 {
    let mut hasher = batch_hasher(header);
    for checksum in frame_checksums {
        hasher.update(&checksum.to_le_bytes());
    }
    hasher.digest()
}

/// What a successful [`validate`] learned about a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    pub header: BatchHeader,
    /// Sum of payload bytes over all frames.
    pub payload_bytes: u64,
}

/// Checks a complete record: `batch_length` equals `bytes.len()`, reserved
/// bytes are zero, `message_count ≥ 1`, frames tile the rest exactly with
/// dense `offset_delta`s (0, 1, 2, …), every frame checksum and the batch
/// checksum verify. Used for producer batches and for records read back from
/// disk alike.
pub fn validate(bytes: &[u8]) -> Result<BatchSummary, BatchError> {
    validate_inner(bytes, Some(0), None)
}

/// Like [`validate`], but for a record that may be a slice (§5.3): the
/// `offset_delta`s must be consecutive from whatever the first frame says.
pub fn validate_record(bytes: &[u8]) -> Result<BatchSummary, BatchError> {
    validate_inner(bytes, None, None)
}

/// The hasher of [`batch_checksum`] after the header fields.
fn batch_hasher(header: &BatchHeader) -> Xxh3Default {
    let mut hasher = Xxh3Default::new();
    hasher.update(&header.partition_id.to_le_bytes());
    hasher.update(&header.base_offset.to_le_bytes());
    hasher.update(&header.base_timestamp.to_le_bytes());
    hasher.update(&header.origin_timestamp.to_le_bytes());
    hasher.update(&header.batch_length.to_le_bytes());
    hasher.update(&header.message_count.to_le_bytes());
    hasher
}

/// One pass over the record: structure, dense deltas, every frame checksum
/// and the batch checksum (fed frame by frame). With `checksums` (a
/// producer's batch), the frame checksums are kept there too (for stamping
/// without a second pass) and each frame's user headers are checked in the
/// same pass (§4.8: a TLV sequence of at most 100,000 bytes), so a stored
/// batch never carries a header block a consumer cannot decode.
fn validate_inner(
    bytes: &[u8],
    first_delta: Option<u32>,
    mut checksums: Option<&mut Vec<u64>>,
) -> Result<BatchSummary, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    if header.batch_length != bytes.len() as u64 {
        return Err(BatchError::LengthMismatch {
            expected: header.batch_length,
            found: bytes.len() as u64,
        });
    }
    if header.message_count == 0 {
        return Err(BatchError::EmptyBatch);
    }
    let mut iter = frames(bytes)?;
    let mut payload_bytes = 0u64;
    let mut frames_seen = 0u32;
    let mut expected_delta = first_delta;
    let mut hasher = batch_hasher(&header);
    // Structure, dense deltas and frame checksums.
    for frame in iter.by_ref() {
        let frame = frame?;
        let expected = *expected_delta.get_or_insert(frame.header.offset_delta);
        if frame.header.offset_delta != expected {
            return Err(BatchError::OffsetDeltaMismatch {
                index: frame.index,
                position: frame.frame.start,
                expected,
                found: frame.header.offset_delta,
            });
        }
        expected_delta = Some(expected.wrapping_add(1));
        let frame_bytes = frame_slice(bytes, &frame, frame.frame.clone())?;
        let computed = frame_checksum(frame_bytes);
        if computed != frame.header.checksum {
            return Err(BatchError::FrameChecksum {
                index: frame.index,
                position: frame.frame.start,
                expected: computed,
                found: frame.header.checksum,
            });
        }
        hasher.update(&computed.to_le_bytes());
        if let Some(checksums) = checksums.as_deref_mut() {
            checksums.push(computed);
            check_user_headers(
                frame_slice(bytes, &frame, frame.user_headers.clone())?,
                &frame,
            )?;
        }
        payload_bytes += u64::from(frame.header.payload_length);
        frames_seen += 1;
    }
    if frames_seen != header.message_count {
        return Err(BatchError::FrameCountMismatch {
            expected: header.message_count,
            found: frames_seen,
        });
    }
    if iter.position() != bytes.len() {
        return Err(BatchError::TrailingBytes {
            message_count: header.message_count,
            trailing: bytes.len() - iter.position(),
        });
    }
    let computed = hasher.digest();
    if computed != header.batch_checksum {
        return Err(BatchError::BatchChecksum {
            expected: computed,
            found: header.batch_checksum,
        });
    }
    Ok(BatchSummary {
        header,
        payload_bytes,
    })
}

/// `range` (one of `frame`'s ranges) of the record `bytes`. The iterator
/// only yields ranges inside the record; a range that is not is reported as
/// a truncated frame rather than trusted.
fn frame_slice<'a>(
    bytes: &'a [u8],
    frame: &Frame,
    range: Range<usize>,
) -> Result<&'a [u8], BatchError> {
    bytes.get(range.clone()).ok_or(BatchError::FrameTruncated {
        index: frame.index,
        position: frame.frame.start,
        needed: range.end as u64,
        available: bytes.len(),
    })
}

/// A producer frame's user headers: empty, or whole key/value TLVs.
fn check_user_headers(headers: &[u8], frame: &Frame) -> Result<(), BatchError> {
    use crate::protocol::error::WireError;
    match crate::protocol::options::validate_user_headers(headers) {
        Ok(_) => Ok(()),
        Err(WireError::UserHeadersTooLarge { bytes }) => Err(BatchError::UserHeadersTooLarge {
            index: frame.index,
            bytes,
        }),
        Err(_) => Err(BatchError::UserHeadersMalformed {
            index: frame.index,
            position: frame.user_headers.start,
        }),
    }
}

/// Recomputes the batch checksum of `bytes` under `header` (which may differ
/// from the bytes' own header, e.g. while stamping). Reads only the frame
/// headers and allocates nothing.
fn computed_batch_checksum(bytes: &[u8], header: &BatchHeader) -> Result<u64, BatchError> {
    let mut failed = None;
    let checksums = frames(bytes)?.map_while(|frame| match frame {
        Ok(frame) => Some(frame.header.checksum),
        Err(error) => {
            failed = Some(error);
            None
        }
    });
    let checksum = batch_checksum(header, checksums);
    match failed {
        Some(error) => Err(error),
        None => Ok(checksum),
    }
}

/// A producer batch that passed [`validate`], owned. Its bytes are `range`
/// of `buffer` — usually the request frame it arrived in, so handing the
/// batch to another shard moves the buffer instead of copying it. Only
/// [`ValidBatch::new`] builds one, so whoever holds one knows that every
/// frame and batch checksum was verified, once, where it was received.
#[derive(Debug)]
pub struct ValidBatch {
    buffer: Vec<u8>,
    range: Range<usize>,
    header: BatchHeader,
    /// Every frame's checksum, in order: stamping recomputes the batch
    /// checksum from these instead of walking the frames again.
    frame_checksums: Vec<u64>,
}

impl ValidBatch {
    /// Validates `buffer[range]` as a producer batch, in one pass.
    pub fn new(buffer: Vec<u8>, range: Range<usize>) -> Result<ValidBatch, BatchError> {
        let Some(bytes) = buffer.get(range.clone()) else {
            return Err(BatchError::HeaderTruncated { found: 0 });
        };
        // The header's count is the sender's word: capacity from the bytes.
        let frames_max = bytes.len() / FRAME_HEADER_SIZE;
        let claimed = BatchHeader::decode(bytes)?.message_count as usize;
        let mut frame_checksums = Vec::with_capacity(claimed.min(frames_max));
        let header = validate_inner(bytes, Some(0), Some(&mut frame_checksums))?.header;
        Ok(ValidBatch {
            buffer,
            range,
            header,
            frame_checksums,
        })
    }

    /// Stamps a copy of this batch (`stored`, the same bytes) for storage:
    /// `partition_id`, `base_offset`, `base_timestamp` and the batch
    /// checksum, from the frame checksums kept at validation.
    pub fn stamp_copy(
        &self,
        stored: &mut [u8],
        partition_id: u64,
        base_offset: u64,
        base_timestamp: u64,
    ) -> BatchHeader {
        assert!(stored.len() == self.range.len());
        let mut header = self.header;
        header.partition_id = partition_id;
        header.base_offset = base_offset;
        header.base_timestamp = base_timestamp;
        header.batch_checksum = batch_checksum(&header, self.frame_checksums.iter().copied());
        header.encode_into(stored);
        header
    }

    /// The batch's own buffer, stamped as [`Self::stamp_copy`] stamps a
    /// copy, and cut to the batch: the bytes a log stores for it, without
    /// copying them again.
    pub fn into_stored(
        mut self,
        partition_id: u64,
        base_offset: u64,
        base_timestamp: u64,
    ) -> Vec<u8> {
        let mut buffer = std::mem::take(&mut self.buffer);
        let range = self.range.clone();
        if let Some(stored) = buffer.get_mut(range.clone()) {
            self.stamp_copy(stored, partition_id, base_offset, base_timestamp);
        }
        buffer.truncate(range.end);
        buffer.drain(..range.start);
        buffer
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "new() checked buffer.get(range); both fields are private and never change"
    )]
    pub fn bytes(&self) -> &[u8] {
        &self.buffer[self.range.clone()]
    }

    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    pub fn message_count(&self) -> u32 {
        self.header.message_count
    }
}

/// Stamps a validated record for storage in place: sets `partition_id`,
/// `base_offset` and `base_timestamp` (µs) and recomputes `batch_checksum`.
/// Frame bytes are untouched, so frame checksums stay valid.
pub fn stamp(
    bytes: &mut [u8],
    partition_id: u64,
    base_offset: u64,
    base_timestamp: u64,
) -> Result<BatchHeader, BatchError> {
    let mut header = BatchHeader::decode(bytes)?;
    header.partition_id = partition_id;
    header.base_offset = base_offset;
    header.base_timestamp = base_timestamp;
    header.batch_checksum = computed_batch_checksum(bytes, &header)?;
    header.encode_into(bytes);
    Ok(header)
}

/// Builds a new record holding messages `start..end` (frame indices) of the
/// record `bytes`. The header keeps `base_offset`, `base_timestamp` and
/// `origin_timestamp`; `message_count` and `batch_length` describe the slice
/// and `batch_checksum` is recomputed. Frames keep their `offset_delta`, so
/// `base_offset + offset_delta` still gives each message's offset (§5.3).
pub fn slice(bytes: &[u8], start: u32, end: u32) -> Result<Vec<u8>, BatchError> {
    let mut header = BatchHeader::decode(bytes)?;
    if start >= end || end > header.message_count {
        return Err(BatchError::SliceOutOfRange {
            start,
            end,
            message_count: header.message_count,
        });
    }
    let mut byte_start = None;
    let mut byte_end = 0;
    let mut checksums = Vec::with_capacity((end - start).min(1024) as usize);
    for frame in frames(bytes)? {
        let frame = frame?;
        if frame.index < start {
            continue;
        }
        if frame.index >= end {
            break;
        }
        byte_start.get_or_insert(frame.frame.start);
        byte_end = frame.frame.end;
        checksums.push(frame.header.checksum);
    }
    let Some(byte_start) = byte_start else {
        return Err(BatchError::SliceOutOfRange {
            start,
            end,
            message_count: header.message_count,
        });
    };
    let Some(frames_bytes) = bytes.get(byte_start..byte_end) else {
        return Err(BatchError::SliceOutOfRange {
            start,
            end,
            message_count: header.message_count,
        });
    };
    let mut record = Vec::with_capacity(BATCH_HEADER_SIZE + frames_bytes.len());
    record.resize(BATCH_HEADER_SIZE, 0);
    record.extend_from_slice(frames_bytes);
    header.message_count = end - start;
    header.batch_length = record.len() as u64;
    header.batch_checksum = batch_checksum(&header, checksums.into_iter());
    header.encode_into(&mut record);
    assert!(record.len() as u64 == header.batch_length);
    Ok(record)
}

/// One message to put in a record (tests, the simulator, benchmarks, and a
/// cluster node's metadata log, whose entries are records of one message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpec {
    pub id: u128,
    pub timestamp_delta: u32,
    pub payload: Vec<u8>,
    pub user_headers: Vec<u8>,
}

/// Encodes a producer batch (partition 0, offsets and server timestamp 0)
/// with valid frame and batch checksums. Used by tests, the simulator,
/// benchmarks, and a cluster node's metadata log.
pub fn encode_producer_batch(origin_timestamp: u64, messages: &[MessageSpec]) -> Vec<u8> {
    assert!(!messages.is_empty());
    let frames_len: usize = messages
        .iter()
        .map(|m| FRAME_HEADER_SIZE + m.payload.len() + m.user_headers.len())
        .sum();
    let mut bytes = vec![0u8; BATCH_HEADER_SIZE];
    bytes.reserve(frames_len);
    let mut checksums = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let mut header = [0u8; FRAME_HEADER_SIZE];
        put_field::<FRAME_ID_AT, 16, _>(&mut header, message.id.to_le_bytes());
        put_field::<FRAME_OFFSET_DELTA_AT, 4, _>(&mut header, (index as u32).to_le_bytes());
        put_field::<FRAME_TIMESTAMP_DELTA_AT, 4, _>(
            &mut header,
            message.timestamp_delta.to_le_bytes(),
        );
        put_field::<FRAME_USER_HEADERS_LENGTH_AT, 4, _>(
            &mut header,
            (message.user_headers.len() as u32).to_le_bytes(),
        );
        put_field::<FRAME_PAYLOAD_LENGTH_AT, 4, _>(
            &mut header,
            (message.payload.len() as u32).to_le_bytes(),
        );
        // The checksum field is not covered by the checksum: hash the frame
        // with it zero, then write it into the header before appending.
        let mut frame = Vec::with_capacity(FRAME_HEADER_SIZE + message.payload.len());
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&message.payload);
        frame.extend_from_slice(&message.user_headers);
        let checksum = frame_checksum(&frame);
        put_field::<FRAME_CHECKSUM_AT, 8, _>(&mut header, checksum.to_le_bytes());
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&message.payload);
        bytes.extend_from_slice(&message.user_headers);
        checksums.push(checksum);
    }
    let mut header = BatchHeader {
        partition_id: 0,
        base_offset: 0,
        base_timestamp: 0,
        origin_timestamp,
        batch_length: bytes.len() as u64,
        batch_checksum: 0,
        message_count: messages.len() as u32,
    };
    header.batch_checksum = batch_checksum(&header, checksums.into_iter());
    header.encode_into(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests;
