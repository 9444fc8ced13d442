//! One segment: a `.log` of batch records and its `.index`, named by the
//! segment's first offset.
//!
//! This file owns segment naming, the small in-memory description of a
//! segment (offsets, sizes, timestamps, sampled index) and index lookups that
//! read one window of entries from disk. It must not decide about rotation,
//! retention or durability; `partition_log.rs` does.

use std::path::{Path, PathBuf};

use super::index::{IndexEntry, SampledIndex, decode_entries};
use super::io::StorageIo;
use super::{INDEX_ENTRY_SIZE, SEGMENT_NAME_DIGITS, StorageError};

/// Which file of a segment a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFileKind {
    Log,
    Index,
}

/// `00000000000000004711` for offset 4711.
pub fn segment_stem(start_offset: u64) -> String {
    format!("{start_offset:0width$}", width = SEGMENT_NAME_DIGITS)
}

pub fn log_path(dir: &Path, start_offset: u64) -> PathBuf {
    dir.join(format!("{}.log", segment_stem(start_offset)))
}

pub fn index_path(dir: &Path, start_offset: u64) -> PathBuf {
    dir.join(format!("{}.index", segment_stem(start_offset)))
}

/// Parses `NNNNNNNNNNNNNNNNNNNN.log` / `.index` (exactly 20 digits).
pub fn parse_segment_file_name(name: &str) -> Option<(u64, SegmentFileKind)> {
    let (stem, kind) = if let Some(stem) = name.strip_suffix(".log") {
        (stem, SegmentFileKind::Log)
    } else if let Some(stem) = name.strip_suffix(".index") {
        (stem, SegmentFileKind::Index)
    } else {
        return None;
    };
    if stem.len() != SEGMENT_NAME_DIGITS || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, kind))
}

/// The in-memory description of a segment. Small on purpose: a few words plus
/// every n-th index entry.
#[derive(Debug, Clone)]
pub struct Segment {
    pub start_offset: u64,
    /// One past the last offset stored (`start_offset` when empty).
    pub next_offset: u64,
    /// Bytes of valid batches in the `.log`.
    pub size_bytes: u64,
    /// Entries in the `.index` (= batches in the `.log`).
    pub entry_count: u64,
    /// `base_timestamp` of the last batch (0 when empty).
    pub last_timestamp: u64,
    pub sampled: SampledIndex,
}

impl Segment {
    pub fn empty(start_offset: u64, sample_every: u32) -> Segment {
        Segment {
            start_offset,
            next_offset: start_offset,
            size_bytes: 0,
            entry_count: 0,
            last_timestamp: 0,
            sampled: SampledIndex::new(sample_every),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entry_count == 0
    }

    pub fn message_count(&self) -> u64 {
        self.next_offset - self.start_offset
    }

    /// Accounts for a batch appended (or recovered) at the end.
    pub fn push_entry(&mut self, entry: &IndexEntry) {
        assert!(entry.base_offset == self.next_offset);
        assert!(entry.position == self.size_bytes);
        self.sampled.observe(self.entry_count, entry);
        self.entry_count += 1;
        self.next_offset = entry.next_offset();
        self.size_bytes = entry.end_position();
        self.last_timestamp = entry.timestamp;
    }

    pub fn log_path(&self, dir: &Path) -> PathBuf {
        log_path(dir, self.start_offset)
    }

    pub fn index_path(&self, dir: &Path) -> PathBuf {
        index_path(dir, self.start_offset)
    }

    /// Reads index entries `first..last` (clamped to the entry count).
    pub async fn read_entries<I: StorageIo>(
        &self,
        io: &I,
        index_file: &I::File,
        dir: &Path,
        first: u64,
        last: u64,
    ) -> Result<Vec<IndexEntry>, StorageError> {
        let last = last.min(self.entry_count);
        if first >= last {
            return Ok(Vec::new());
        }
        let len = ((last - first) as usize) * INDEX_ENTRY_SIZE;
        let position = first * INDEX_ENTRY_SIZE as u64;
        let path = self.index_path(dir);
        let bytes = io
            .read_exact_at(index_file, position, len)
            .await
            .map_err(|source| StorageError::io("read index", &path, source))?;
        assert!(bytes.len() == len);
        let (entries, stop) = decode_entries(&bytes, self.start_offset, first, None);
        if let Some(entry) = stop {
            return Err(StorageError::CorruptIndex {
                path,
                entry,
                reason: "entry checksum or continuity check failed on read".to_owned(),
            });
        }
        Ok(entries)
    }

    /// Finds the entry (number, entry) of the batch that holds `offset`.
    /// `offset` must lie in `start_offset..next_offset`.
    pub async fn locate_offset<I: StorageIo>(
        &self,
        io: &I,
        index_file: &I::File,
        dir: &Path,
        offset: u64,
    ) -> Result<(u64, IndexEntry), StorageError> {
        assert!(offset >= self.start_offset);
        assert!(offset < self.next_offset);
        let (first, last) = self.sampled.window_for_offset(offset);
        let entries = self.read_entries(io, index_file, dir, first, last).await?;
        let found = entries
            .iter()
            .enumerate()
            .rev()
            .find(|(_, entry)| entry.base_offset <= offset);
        match found {
            Some((number, entry)) if offset < entry.next_offset() => {
                Ok((first + number as u64, *entry))
            }
            _ => Err(StorageError::CorruptIndex {
                path: self.index_path(dir),
                entry: first,
                reason: format!("no entry in window {first}..{last} holds offset {offset}"),
            }),
        }
    }

    /// Finds the first entry whose timestamp is ≥ `timestamp`. Requires
    /// `last_timestamp ≥ timestamp`.
    pub async fn locate_timestamp<I: StorageIo>(
        &self,
        io: &I,
        index_file: &I::File,
        dir: &Path,
        timestamp: u64,
    ) -> Result<(u64, IndexEntry), StorageError> {
        assert!(!self.is_empty());
        assert!(self.last_timestamp >= timestamp);
        let (first, last) = self.sampled.window_for_timestamp(timestamp);
        let entries = self.read_entries(io, index_file, dir, first, last).await?;
        match entries
            .iter()
            .enumerate()
            .find(|(_, entry)| entry.timestamp >= timestamp)
        {
            Some((number, entry)) => Ok((first + number as u64, *entry)),
            None => Err(StorageError::CorruptIndex {
                path: self.index_path(dir),
                entry: first,
                reason: format!(
                    "no entry in window {first}..{last} at or after timestamp {timestamp}"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Names are 20 zero-padded digits; anything else is not a segment file.
    #[test]
    fn segment_naming() {
        assert_eq!(segment_stem(0), "00000000000000000000");
        assert_eq!(segment_stem(4711), "00000000000000004711");
        assert_eq!(segment_stem(u64::MAX), "18446744073709551615");
        let dir = Path::new("/d");
        assert_eq!(log_path(dir, 42), Path::new("/d/00000000000000000042.log"));
        assert_eq!(
            index_path(dir, 42),
            Path::new("/d/00000000000000000042.index")
        );
        assert_eq!(
            parse_segment_file_name("00000000000000000042.log"),
            Some((42, SegmentFileKind::Log))
        );
        assert_eq!(
            parse_segment_file_name("18446744073709551615.index"),
            Some((u64::MAX, SegmentFileKind::Index))
        );
        assert_eq!(parse_segment_file_name("99999999999999999999.log"), None);
        assert_eq!(parse_segment_file_name("0000000000000000042.log"), None);
        assert_eq!(parse_segment_file_name("0000000000000000004a.log"), None);
        assert_eq!(parse_segment_file_name("00000000000000000042.tmp"), None);
        assert_eq!(parse_segment_file_name("+0000000000000000042.log"), None);
    }

    // push_entry keeps offsets, sizes and samples in step.
    #[test]
    fn push_entry_accounts() {
        let mut segment = Segment::empty(10, 2);
        for number in 0..5u64 {
            segment.push_entry(&IndexEntry {
                base_offset: 10 + number * 2,
                message_count: 2,
                position: number * 500,
                length: 500,
                timestamp: number,
            });
        }
        assert_eq!(segment.next_offset, 20);
        assert_eq!(segment.size_bytes, 2_500);
        assert_eq!(segment.entry_count, 5);
        assert_eq!(segment.message_count(), 10);
        assert_eq!(segment.sampled.window_for_offset(15), (2, 4));
    }
}
