//! The `.index` file format: one fixed-size entry per batch of the `.log`.
//!
//! This file owns the byte layout of an index entry and the in-memory sample
//! of a segment's index. It does no I/O of its own (callers read entry bytes
//! through `StorageIo`) and trusts nothing it decodes: every entry carries an
//! XXH32 checksum and decoding returns `None` on a mismatch.

use xxhash_rust::xxh32::xxh32;

use super::INDEX_ENTRY_SIZE;

/// One index entry, describing one batch record of the segment's `.log`.
///
/// On disk (32 bytes, little-endian):
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 4 | `relative_offset` (u32): `base_offset − segment start offset` |
/// | 4 | 4 | `message_count` (u32): messages in the batch, ≥ 1 |
/// | 8 | 8 | `position` (u64): byte position of the batch in the `.log` |
/// | 16 | 4 | `length` (u32): `batch_length` of the record (≤ 64 MiB) |
/// | 20 | 8 | `timestamp` (u64, µs): the batch's `base_timestamp` |
/// | 28 | 4 | `checksum` (u32): XXH32 (seed 0) of bytes 0..28 |
///
/// Entries are written in log order, one per appended batch; entry `i + 1`
/// starts where entry `i` ends (`position + length`) and continues its
/// offsets (`base_offset + message_count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Absolute offset of the first message of the batch.
    pub base_offset: u64,
    pub message_count: u32,
    pub position: u64,
    pub length: u32,
    pub timestamp: u64,
}

impl IndexEntry {
    /// Offset one past the last message of the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.message_count)
    }

    /// Byte position one past the end of the batch.
    pub fn end_position(&self) -> u64 {
        self.position + u64::from(self.length)
    }

    /// Encodes relative to `segment_start`.
    pub fn encode(&self, segment_start: u64) -> [u8; INDEX_ENTRY_SIZE] {
        assert!(self.base_offset >= segment_start);
        assert!(self.base_offset - segment_start <= u64::from(u32::MAX));
        assert!(self.message_count >= 1);
        let relative = (self.base_offset - segment_start) as u32;
        let mut bytes = [0u8; INDEX_ENTRY_SIZE];
        bytes[0..4].copy_from_slice(&relative.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.message_count.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.position.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.length.to_le_bytes());
        bytes[20..28].copy_from_slice(&self.timestamp.to_le_bytes());
        let checksum = xxh32(&bytes[0..28], 0);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// Decodes one entry; `None` when the slice is short, the checksum does
    /// not match, the message count is zero, or the entry's end offset or
    /// end position does not fit in a u64 (so [`Self::next_offset`] and
    /// [`Self::end_position`] never overflow on a decoded entry).
    pub fn decode(bytes: &[u8], segment_start: u64) -> Option<IndexEntry> {
        let bytes = bytes.first_chunk::<INDEX_ENTRY_SIZE>()?;
        let u32_at = |at: usize| {
            u32::from_le_bytes(
                bytes
                    .get(at..at + 4)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0; 4]),
            )
        };
        let u64_at = |at: usize| {
            u64::from_le_bytes(
                bytes
                    .get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0; 8]),
            )
        };
        if xxh32(&bytes[0..28], 0) != u32_at(28) {
            return None;
        }
        let message_count = u32_at(4);
        if message_count == 0 {
            return None;
        }
        let entry = IndexEntry {
            base_offset: segment_start.checked_add(u64::from(u32_at(0)))?,
            message_count,
            position: u64_at(8),
            length: u32_at(16),
            timestamp: u64_at(20),
        };
        entry
            .base_offset
            .checked_add(u64::from(entry.message_count))?;
        entry.position.checked_add(u64::from(entry.length))?;
        Some(entry)
    }

    /// True when `next` directly follows `self` in the same segment.
    pub fn is_followed_by(&self, next: &IndexEntry) -> bool {
        next.base_offset == self.next_offset()
            && next.position == self.end_position()
            && next.timestamp >= self.timestamp
    }
}

/// An in-memory sample of every n-th index entry of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSample {
    /// Entry number within the `.index` file.
    pub entry: u64,
    pub base_offset: u64,
    pub timestamp: u64,
}

/// The sampled in-memory index of one segment: entries `0, n, 2n, …`.
#[derive(Debug, Clone, Default)]
pub struct SampledIndex {
    samples: Vec<IndexSample>,
    sample_every: u64,
}

impl SampledIndex {
    pub fn new(sample_every: u32) -> SampledIndex {
        assert!(sample_every >= 1);
        SampledIndex {
            samples: Vec::new(),
            sample_every: u64::from(sample_every),
        }
    }

    /// Records entry number `entry` (entries must be pushed in order).
    pub fn observe(&mut self, entry: u64, index_entry: &IndexEntry) {
        if entry.is_multiple_of(self.sample_every) {
            assert!(self.samples.last().is_none_or(|last| last.entry < entry));
            self.samples.push(IndexSample {
                entry,
                base_offset: index_entry.base_offset,
                timestamp: index_entry.timestamp,
            });
        }
    }

    pub fn sample_every(&self) -> u64 {
        self.sample_every
    }

    /// Entry range (`first..last_exclusive`, clamped by the caller to the
    /// entry count) that contains the batch holding `offset`: from the last
    /// sample at or below `offset` to the next sample.
    pub fn window_for_offset(&self, offset: u64) -> (u64, u64) {
        let after = self
            .samples
            .partition_point(|sample| sample.base_offset <= offset);
        let start = after.saturating_sub(1);
        self.window(start)
    }

    /// Entry range that contains the first batch with `timestamp ≥ t`, if
    /// one exists in the segment: from the last sample below `t` to the first
    /// sample at or above it (inclusive).
    pub fn window_for_timestamp(&self, timestamp: u64) -> (u64, u64) {
        let first_at_or_above = self
            .samples
            .partition_point(|sample| sample.timestamp < timestamp);
        let start = first_at_or_above.saturating_sub(1);
        let (first, last) = self.window(start);
        // The sample at `first_at_or_above` itself may be the answer.
        (first, last.saturating_add(1))
    }

    fn window(&self, sample: usize) -> (u64, u64) {
        match self.samples.get(sample) {
            Some(found) => (found.entry, found.entry + self.sample_every),
            None => (0, self.sample_every),
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.samples.capacity() * size_of::<IndexSample>()
    }
}

/// Decodes a run of entries read from an `.index` file starting at entry
/// number `first_entry`. Stops at (and reports) the first entry that fails
/// its checksum or does not follow its predecessor.
pub fn decode_entries(
    bytes: &[u8],
    segment_start: u64,
    first_entry: u64,
    previous: Option<IndexEntry>,
) -> (Vec<IndexEntry>, Option<u64>) {
    let mut entries = Vec::with_capacity(bytes.len() / INDEX_ENTRY_SIZE);
    let mut previous = previous;
    for (number, chunk) in bytes.chunks_exact(INDEX_ENTRY_SIZE).enumerate() {
        let entry_number = first_entry + number as u64;
        let Some(entry) = IndexEntry::decode(chunk, segment_start) else {
            return (entries, Some(entry_number));
        };
        if let Some(previous) = previous
            && !previous.is_followed_by(&entry)
        {
            return (entries, Some(entry_number));
        }
        previous = Some(entry);
        entries.push(entry);
    }
    (entries, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(base_offset: u64, position: u64) -> IndexEntry {
        IndexEntry {
            base_offset,
            message_count: 3,
            position,
            length: 400,
            timestamp: 1_700_000_000_000_000 + base_offset,
        }
    }

    // Encode → decode is the identity; any flipped bit is detected.
    #[test]
    fn entry_round_trip_and_checksum() {
        let original = entry(1_005, 4_096);
        let bytes = original.encode(1_000);
        assert_eq!(bytes.len(), INDEX_ENTRY_SIZE);
        assert_eq!(&bytes[0..4], &5u32.to_le_bytes());
        assert_eq!(IndexEntry::decode(&bytes, 1_000), Some(original));
        for bit in 0..(INDEX_ENTRY_SIZE * 8) {
            let mut broken = bytes;
            broken[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(IndexEntry::decode(&broken, 1_000), None, "bit {bit}");
        }
        assert_eq!(IndexEntry::decode(&bytes[..31], 1_000), None);
        assert_eq!(IndexEntry::decode(&[0u8; 32], 0), None);
    }

    // A run of entries decodes until the first one that breaks continuity.
    #[test]
    fn decode_entries_stops_at_gap() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&entry(0, 0).encode(0));
        bytes.extend_from_slice(&entry(3, 400).encode(0));
        bytes.extend_from_slice(&entry(7, 800).encode(0));
        let (entries, stop) = decode_entries(&bytes, 0, 0, None);
        assert_eq!(entries.len(), 2);
        assert_eq!(stop, Some(2));
    }

    // Sample windows bracket the wanted entry.
    #[test]
    fn sample_windows() {
        let mut sampled = SampledIndex::new(4);
        for number in 0..10u64 {
            sampled.observe(number, &entry(number * 3, number * 400));
        }
        assert_eq!(sampled.window_for_offset(0), (0, 4));
        assert_eq!(sampled.window_for_offset(13), (4, 8));
        assert_eq!(sampled.window_for_offset(1_000), (8, 12));
        assert_eq!(sampled.window_for_timestamp(0), (0, 5));
        let t = 1_700_000_000_000_000 + 13;
        assert_eq!(sampled.window_for_timestamp(t), (4, 9));
    }
}
