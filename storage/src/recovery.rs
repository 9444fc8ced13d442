//! Recovery of a partition directory on open.
//!
//! This file owns the checks run before a partition accepts appends: segment
//! discovery and continuity, index verification and rebuild, the tail scan of
//! the last segment, torn-tail truncation and the decision to quarantine. It
//! reports what it did in a [`RecoveryReport`]. It must never panic on disk
//! content, never delete a segment, and never write past a corrupt batch
//! (a quarantined partition's files are left exactly as found).
//!
//! Policy, per segment in offset order:
//! * Sealed segments with a clean index (every entry checksums and follows
//!   its predecessor, the file is a whole number of entries) are trusted:
//!   only the last entry's batch is read and validated, and the `.log` length
//!   must equal that batch's end. Otherwise the `.log` is scanned in full and
//!   the `.index` rebuilt. Any defect found by a full scan of a sealed
//!   segment is corruption: rotation fsyncs a segment before sealing it, so a
//!   sealed segment never has a legitimately torn tail.
//! * The last segment trusts its clean index prefix (after validating the
//!   batch of its last entry), then scans the rest of the `.log` batch by
//!   batch with checksums. A bad batch with a valid batch after it (by its own
//!   length, or by a later index entry) is corruption; otherwise it starts a
//!   torn tail, which is truncated, and the report says from which offset and
//!   how many bytes were dropped.
//! * Corruption quarantines the partition: segments up to the damage stay
//!   readable, later ones are ignored (not deleted), nothing is written.
//! * Everything kept is fsynced before open returns, so it is durable.
//!
//! On a real disk unsynced pages can reach the platter out of order, so a
//! crash may leave a hole (zeros) followed by whole later batches. That
//! pattern is reported as corruption and quarantined rather than guessed
//! at: only an operator can tell whether those later batches were ever
//! acknowledged. The simulator's torn writes keep a prefix and so exercise
//! the truncation path.

use std::path::{Path, PathBuf};

use super::buf::IO_ALIGN;
use super::index::{IndexEntry, decode_entries};
use super::io::{OpenMode, StorageIo};
use super::segment::{Segment, SegmentFileKind, index_path, log_path, parse_segment_file_name};
use super::{INDEX_ENTRY_SIZE, SCAN_CHUNK_BYTES, StorageError};
use crate::limits::BATCH_BYTES_MAX;
use iggyd_wire::batch::{
    BATCH_HEADER_SIZE, BatchHeader, BatchSummary, FRAME_HEADER_SIZE, validate,
};

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub dir: PathBuf,
    /// Segments kept readable.
    pub segments: usize,
    /// Messages kept readable.
    pub messages: u64,
    /// Next offset after recovery.
    pub next_offset: u64,
    /// Indexes rewritten from their log, with the number of entries written.
    pub indexes_rebuilt: Vec<(PathBuf, u64)>,
    pub torn_tail: Option<TornTail>,
    pub corruption: Option<Corruption>,
    /// Files in the directory that are not segment files (left alone).
    pub ignored_files: Vec<String>,
    /// The directory held no segment and a first one was created.
    pub created_first_segment: bool,
    /// Zero bytes of direct-I/O padding cut after the last batch of a
    /// segment (a crash before the padding was cut; not a torn tail).
    pub padding_trimmed: u64,
}

/// A torn tail that recovery truncated away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub segment: PathBuf,
    /// Byte position the `.log` was truncated to.
    pub position: u64,
    /// Offset the first dropped batch would have had.
    pub first_dropped_offset: u64,
    pub bytes_dropped: u64,
    pub reason: String,
}

/// Corruption that quarantined the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    pub segment: PathBuf,
    pub position: u64,
    /// Offset expected at `position`.
    pub offset: u64,
    pub reason: String,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "corrupt data in {} at byte {} (offset {}): {}; data before it is readable, nothing after it was touched",
            self.segment.display(),
            self.position,
            self.offset,
            self.reason
        )
    }
}

/// The outcome of recovery: segments in offset order (the last one is the
/// active one) and the report.
#[derive(Debug)]
pub struct Recovered {
    pub segments: Vec<Segment>,
    pub report: RecoveryReport,
}

/// Why the bytes at a position are not a whole valid batch: the reason, and
/// the batch length the header claimed when it was plausible.
type BadBatch = (String, Option<u64>);

/// Reads one log file sequentially through a read-ahead window: the file,
/// its path (for errors) and its length travel together.
struct LogReader<'a, I: StorageIo> {
    io: &'a I,
    file: &'a I::File,
    path: &'a Path,
    file_len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'a, I: StorageIo> LogReader<'a, I> {
    fn new(io: &'a I, file: &'a I::File, path: &'a Path, file_len: u64) -> LogReader<'a, I> {
        LogReader {
            io,
            file,
            path,
            file_len,
            start: 0,
            buf: Vec::new(),
        }
    }

    async fn get(&mut self, position: u64, len: u64) -> Result<&[u8], StorageError> {
        assert!(position + len <= self.file_len);
        let cached_end = self.start + self.buf.len() as u64;
        if position < self.start || position + len > cached_end {
            let read_len = len.max(SCAN_CHUNK_BYTES).min(self.file_len - position);
            self.buf = self
                .io
                .read_exact_at(self.file, position, read_len as usize)
                .await
                .map_err(|source| StorageError::io("read log", self.path, source))?;
            assert!(self.buf.len() as u64 == read_len);
            self.start = position;
        }
        let at = (position - self.start) as usize;
        // Short only when the file ends before `position + len`.
        self.buf.get(at..at + len as usize).ok_or_else(|| {
            StorageError::io(
                "read log",
                self.path,
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )
        })
    }

    /// Reads the batch that starts at `position` and validates its layout
    /// and checksum; `length_min` is the smallest `batch_length` accepted.
    /// The one reader behind both the scan (which wants the reason) and the
    /// probes past damage (which only want yes or no).
    async fn read_batch_at(
        &mut self,
        position: u64,
        length_min: u64,
    ) -> Result<Result<BatchSummary, BadBatch>, StorageError> {
        // `position` may come from an index entry: only its end is known to fit.
        let remaining = self.file_len.saturating_sub(position);
        if remaining < BATCH_HEADER_SIZE as u64 {
            return Ok(Err((
                format!("incomplete batch header: {remaining} bytes left"),
                None,
            )));
        }
        let header_bytes = self.get(position, BATCH_HEADER_SIZE as u64).await?;
        let header = match BatchHeader::decode(header_bytes) {
            Ok(header) => header,
            Err(error) => return Ok(Err((error.to_string(), None))),
        };
        let length = header.batch_length;
        if !(length_min..=BATCH_BYTES_MAX).contains(&length) {
            return Ok(Err((format!("implausible batch_length {length}"), None)));
        }
        if length > remaining {
            return Ok(Err((
                format!("incomplete batch: batch_length {length}, {remaining} bytes left"),
                Some(length),
            )));
        }
        let bytes = self.get(position, length).await?;
        Ok(validate(bytes).map_err(|error| (error.to_string(), Some(length))))
    }

    /// Reads and validates the batch that starts at `position` and is
    /// expected to hold `offset` first. Returns the batch's index entry.
    async fn check_batch_at(
        &mut self,
        position: u64,
        offset: u64,
    ) -> Result<Result<IndexEntry, ScanStop>, StorageError> {
        let stop = |reason: String, claimed_length: Option<u64>| {
            Ok(Err(ScanStop {
                position,
                offset,
                reason,
                claimed_length,
            }))
        };
        let length_min = (BATCH_HEADER_SIZE + FRAME_HEADER_SIZE) as u64;
        let summary = match self.read_batch_at(position, length_min).await? {
            Ok(summary) => summary,
            Err((reason, claimed_length)) => return stop(reason, claimed_length),
        };
        let length = summary.header.batch_length;
        if summary.header.base_offset != offset {
            return stop(
                format!(
                    "batch base_offset {} where offset {offset} was expected",
                    summary.header.base_offset
                ),
                Some(length),
            );
        }
        let message_count = summary.header.message_count;
        if offset.checked_add(u64::from(message_count)).is_none() {
            return stop(
                format!(
                    "batch of {message_count} messages at offset {offset} runs past the largest offset"
                ),
                Some(length),
            );
        }
        Ok(Ok(IndexEntry {
            base_offset: offset,
            message_count: summary.header.message_count,
            position,
            length: length as u32,
            timestamp: summary.header.base_timestamp,
        }))
    }

    /// The header of the whole valid batch at `position`, or `None`.
    async fn valid_batch_at(&mut self, position: u64) -> Result<Option<BatchHeader>, StorageError> {
        let read = self
            .read_batch_at(position, BATCH_HEADER_SIZE as u64)
            .await?;
        Ok(read.ok().map(|summary| summary.header))
    }
}

/// Why a scan stopped before the end of the file.
#[derive(Debug)]
struct ScanStop {
    position: u64,
    offset: u64,
    reason: String,
    /// The batch length claimed by the header at `position`, if plausible.
    claimed_length: Option<u64>,
}

/// Scans batches from the segment's current end to `file_len`, pushing an
/// entry per valid batch into `segment` and `new_entries`.
async fn scan_log<I: StorageIo>(
    io: &I,
    file: &I::File,
    path: &Path,
    file_len: u64,
    segment: &mut Segment,
    new_entries: &mut Vec<IndexEntry>,
) -> Result<Option<ScanStop>, StorageError> {
    let mut reader = LogReader::new(io, file, path, file_len);
    while segment.size_bytes < file_len {
        let checked = reader
            .check_batch_at(segment.size_bytes, segment.next_offset)
            .await?;
        match checked {
            Ok(entry) if entry.timestamp >= segment.last_timestamp => {
                segment.push_entry(&entry);
                new_entries.push(entry);
            }
            Ok(entry) => {
                return Ok(Some(ScanStop {
                    position: entry.position,
                    offset: entry.base_offset,
                    reason: format!(
                        "base_timestamp {} is older than the previous batch's {}",
                        entry.timestamp, segment.last_timestamp
                    ),
                    claimed_length: Some(u64::from(entry.length)),
                }));
            }
            Err(stop) => return Ok(Some(stop)),
        }
    }
    Ok(None)
}

/// Is there a valid batch after the bad one at `stop`? Checks the batch right
/// after the claimed length, then any index entry pointing past the damage.
// Eight plain arguments read better here than a one-use struct.
#[allow(clippy::too_many_arguments)]
async fn valid_data_after<I: StorageIo>(
    io: &I,
    log: &I::File,
    log_path: &Path,
    index: &I::File,
    index_len: u64,
    segment_start: u64,
    stop: &ScanStop,
    log_len: u64,
) -> Result<bool, StorageError> {
    let mut reader = LogReader::new(io, log, log_path, log_len);
    if let Some(length) = stop.claimed_length {
        let next = stop.position + length;
        if next < log_len {
            // The offset is unknown for sure; accept any structurally valid
            // batch whose offset is beyond the damaged one.
            if let Some(header) = reader.valid_batch_at(next).await?
                && header.base_offset > stop.offset
            {
                return Ok(true);
            }
        }
    }
    // Any readable index entry that points past the damage at a valid batch.
    let mut position = 0u64;
    let mut checked = 0;
    while position + INDEX_ENTRY_SIZE as u64 <= index_len && checked < 8 {
        let len = (index_len - position).min(SCAN_CHUNK_BYTES) / INDEX_ENTRY_SIZE as u64
            * INDEX_ENTRY_SIZE as u64;
        let bytes = io
            .read_exact_at(index, position, len as usize)
            .await
            .map_err(|source| StorageError::io("read index", log_path, source))?;
        for chunk in bytes.chunks_exact(INDEX_ENTRY_SIZE) {
            let Some(entry) = IndexEntry::decode(chunk, segment_start) else {
                continue;
            };
            if entry.position <= stop.position || entry.base_offset <= stop.offset {
                continue;
            }
            checked += 1;
            if let Some(header) = reader.valid_batch_at(entry.position).await?
                && header.base_offset == entry.base_offset
            {
                return Ok(true);
            }
            if checked >= 8 {
                break;
            }
        }
        position += len;
    }
    Ok(false)
}

/// Loads the clean prefix of an index file into `segment`: entries that
/// checksum, follow each other, start at the segment start and stay inside
/// the log. Returns whether the whole file was clean, and the last entry
/// loaded.
async fn load_index<I: StorageIo>(
    io: &I,
    index: &I::File,
    index_path: &Path,
    index_len: u64,
    log_len: u64,
    segment: &mut Segment,
) -> Result<(bool, Option<IndexEntry>), StorageError> {
    let mut clean = index_len.is_multiple_of(INDEX_ENTRY_SIZE as u64);
    let whole_entries_len = index_len / INDEX_ENTRY_SIZE as u64 * INDEX_ENTRY_SIZE as u64;
    let chunk = SCAN_CHUNK_BYTES / INDEX_ENTRY_SIZE as u64 * INDEX_ENTRY_SIZE as u64;
    let mut position = 0u64;
    let mut previous: Option<IndexEntry> = None;
    while position < whole_entries_len {
        let len = (whole_entries_len - position).min(chunk);
        let bytes = io
            .read_exact_at(index, position, len as usize)
            .await
            .map_err(|source| StorageError::io("read index", index_path, source))?;
        assert!(bytes.len() as u64 == len);
        let first_entry = position / INDEX_ENTRY_SIZE as u64;
        let (entries, stop) = decode_entries(&bytes, segment.start_offset, first_entry, previous);
        for entry in entries {
            let fits = entry.base_offset == segment.next_offset
                && entry.position == segment.size_bytes
                && entry.end_position() <= log_len
                && u64::from(entry.length) >= (BATCH_HEADER_SIZE + FRAME_HEADER_SIZE) as u64;
            if !fits {
                return Ok((false, previous));
            }
            segment.push_entry(&entry);
            previous = Some(entry);
        }
        if stop.is_some() {
            clean = false;
            break;
        }
        position += len;
    }
    Ok((clean, previous))
}

/// True when the bytes from `position` to the end of the file are shorter
/// than one direct-I/O block and all zero: the padding of a direct write.
async fn is_zero_padding<I: StorageIo>(
    io: &I,
    file: &I::File,
    path: &Path,
    position: u64,
    file_len: u64,
) -> Result<bool, StorageError> {
    let rest = file_len.saturating_sub(position);
    if rest == 0 || rest >= IO_ALIGN as u64 || !file_len.is_multiple_of(IO_ALIGN as u64) {
        return Ok(false);
    }
    let bytes = io
        .read_exact_at(file, position, rest as usize)
        .await
        .map_err(|source| StorageError::io("read log", path, source))?;
    Ok(bytes.iter().all(|byte| *byte == 0))
}

/// Outcome of one segment's recovery.
struct SegmentOutcome {
    segment: Segment,
    corruption: Option<Corruption>,
}

async fn recover_segment<I: StorageIo>(
    io: &I,
    dir: &Path,
    start_offset: u64,
    is_last: bool,
    sample_every: u32,
    report: &mut RecoveryReport,
) -> Result<SegmentOutcome, StorageError> {
    let log_path = log_path(dir, start_offset);
    let index_path = index_path(dir, start_offset);
    let log = io
        .open(&log_path, OpenMode::Existing)
        .await
        .map_err(|source| StorageError::io("open log", &log_path, source))?;
    let index = io
        .open(&index_path, OpenMode::Create)
        .await
        .map_err(|source| StorageError::io("open index", &index_path, source))?;
    let log_len = io
        .file_len(&log)
        .await
        .map_err(|source| StorageError::io("stat log", &log_path, source))?;
    let index_len = io
        .file_len(&index)
        .await
        .map_err(|source| StorageError::io("stat index", &index_path, source))?;

    let mut segment = Segment::empty(start_offset, sample_every);
    let (clean, last_entry) =
        load_index(io, &index, &index_path, index_len, log_len, &mut segment).await?;

    // Validate the batch of the last trusted entry; on failure trust nothing.
    if let Some(last) = last_entry {
        let mut reader = LogReader::new(io, &log, &log_path, log_len);
        let checked = reader
            .check_batch_at(last.position, last.base_offset)
            .await?;
        if !matches!(checked, Ok(entry) if entry == last) {
            segment = Segment::empty(start_offset, sample_every);
        }
    }
    let mut log_len = log_len;
    if !is_last
        && clean
        && !segment.is_empty()
        && log_len > segment.size_bytes
        && is_zero_padding(io, &log, &log_path, segment.size_bytes, log_len).await?
    {
        // A crash while a seal cut the direct-I/O padding: finish the cut.
        io.truncate(&log, segment.size_bytes)
            .await
            .map_err(|source| StorageError::io("cut the padding of", &log_path, source))?;
        io.sync(&log)
            .await
            .map_err(|source| StorageError::io("fsync", &log_path, source))?;
        report.padding_trimmed += log_len - segment.size_bytes;
        log_len = segment.size_bytes;
    }
    let sealed_clean = clean && !segment.is_empty() && segment.size_bytes == log_len;
    if !is_last && (sealed_clean || log_len == 0 && index_len == 0) {
        return Ok(SegmentOutcome {
            segment,
            corruption: None,
        });
    }
    if !is_last {
        // A sealed segment that is not clean is rescanned from the start.
        segment = Segment::empty(start_offset, sample_every);
    }
    let trusted_entries = segment.entry_count;
    let mut new_entries = Vec::new();
    let stop = scan_log(io, &log, &log_path, log_len, &mut segment, &mut new_entries).await?;

    let stop = match stop {
        Some(stop) if is_zero_padding(io, &log, &log_path, stop.position, log_len).await? => {
            // Direct-I/O padding after the last batch (a write pads to the
            // next block; a clean close or a seal cuts it): not data, not a
            // torn tail. Cut it so the file is exact.
            io.truncate(&log, stop.position)
                .await
                .map_err(|source| StorageError::io("cut the padding of", &log_path, source))?;
            report.padding_trimmed += log_len - stop.position;
            None
        }
        stop => stop,
    };
    if let Some(stop) = stop {
        let corrupt = !is_last
            || valid_data_after(
                io,
                &log,
                &log_path,
                &index,
                index_len,
                start_offset,
                &stop,
                log_len,
            )
            .await?;
        if corrupt {
            let reason = if is_last {
                format!("{}; valid data follows it", stop.reason)
            } else {
                format!("{}; in a sealed segment", stop.reason)
            };
            return Ok(SegmentOutcome {
                segment,
                corruption: Some(Corruption {
                    segment: log_path,
                    position: stop.position,
                    offset: stop.offset,
                    reason,
                }),
            });
        }
        // Torn tail of the last segment: cut it off.
        assert!(stop.position == segment.size_bytes);
        assert!(stop.position < log_len);
        io.truncate(&log, stop.position)
            .await
            .map_err(|source| StorageError::io("truncate torn tail of", &log_path, source))?;
        let after = io
            .file_len(&log)
            .await
            .map_err(|source| StorageError::io("stat log", &log_path, source))?;
        assert!(after == stop.position);
        report.torn_tail = Some(TornTail {
            segment: log_path.clone(),
            position: stop.position,
            first_dropped_offset: stop.offset,
            bytes_dropped: log_len - stop.position,
            reason: stop.reason,
        });
    }

    // Make the index match the recovered log exactly.
    let index_len_wanted = segment.entry_count * INDEX_ENTRY_SIZE as u64;
    let index_exact = new_entries.is_empty() && index_len == index_len_wanted;
    if !index_exact {
        let keep = trusted_entries * INDEX_ENTRY_SIZE as u64;
        io.truncate(&index, keep)
            .await
            .map_err(|source| StorageError::io("truncate index", &index_path, source))?;
        if !new_entries.is_empty() {
            let mut bytes = Vec::with_capacity(new_entries.len() * INDEX_ENTRY_SIZE);
            for entry in &new_entries {
                bytes.extend_from_slice(&entry.encode(start_offset));
            }
            let (result, _) = io.write_at(&index, bytes, keep).await;
            result.map_err(|source| StorageError::io("rebuild index", &index_path, source))?;
        }
        let after = io
            .file_len(&index)
            .await
            .map_err(|source| StorageError::io("stat index", &index_path, source))?;
        assert!(after == index_len_wanted);
        report
            .indexes_rebuilt
            .push((index_path.clone(), new_entries.len() as u64));
    }
    // Recovered bytes may have lived only in the page cache of a process that
    // crashed: make them durable before anyone relies on them.
    io.sync(&log)
        .await
        .map_err(|source| StorageError::io("fsync log", &log_path, source))?;
    io.sync(&index)
        .await
        .map_err(|source| StorageError::io("fsync index", &index_path, source))?;
    Ok(SegmentOutcome {
        segment,
        corruption: None,
    })
}

/// Opens (creating if needed) the partition directory `dir` and recovers
/// its segments. See the module doc for the policy.
pub async fn recover<I: StorageIo>(
    io: &I,
    dir: &Path,
    sample_every: u32,
) -> Result<Recovered, StorageError> {
    assert!(sample_every >= 1);
    io.create_dir_all(dir)
        .await
        .map_err(|source| StorageError::io("create directory", dir, source))?;
    let names = io
        .list_dir(dir)
        .await
        .map_err(|source| StorageError::io("list directory", dir, source))?;
    let mut report = RecoveryReport {
        dir: dir.to_path_buf(),
        ..RecoveryReport::default()
    };
    let mut starts = Vec::new();
    for name in names {
        match parse_segment_file_name(&name) {
            Some((start, SegmentFileKind::Log)) => starts.push(start),
            Some((_, SegmentFileKind::Index)) => {}
            None => report.ignored_files.push(name),
        }
    }
    starts.sort_unstable();

    let mut segments: Vec<Segment> = Vec::new();
    if starts.is_empty() {
        create_segment_files(io, dir, 0).await?;
        io.sync_dir(dir)
            .await
            .map_err(|source| StorageError::io("fsync directory", dir, source))?;
        // The partition directory may be new too: make its entry durable.
        if let Some(parent) = dir.parent()
            && !parent.as_os_str().is_empty()
        {
            io.sync_dir(parent)
                .await
                .map_err(|source| StorageError::io("fsync directory", parent, source))?;
        }
        segments.push(Segment::empty(0, sample_every));
        report.created_first_segment = true;
    }
    for (number, start) in starts.iter().copied().enumerate() {
        if let Some(previous) = segments.last()
            && previous.next_offset != start
        {
            report.corruption = Some(Corruption {
                segment: log_path(dir, start),
                position: 0,
                offset: previous.next_offset,
                reason: format!(
                    "segment gap: previous segment ends before offset {}, this one starts at {start}",
                    previous.next_offset
                ),
            });
            break;
        }
        let is_last = number + 1 == starts.len();
        let outcome = recover_segment(io, dir, start, is_last, sample_every, &mut report).await?;
        segments.push(outcome.segment);
        if let Some(corruption) = outcome.corruption {
            report.corruption = Some(corruption);
            break;
        }
    }
    assert!(!segments.is_empty());
    report.segments = segments.len();
    report.next_offset = segments.last().map_or(0, |segment| segment.next_offset);
    report.messages =
        report.next_offset - segments.first().map_or(0, |segment| segment.start_offset);
    Ok(Recovered { segments, report })
}

/// Creates (or empties) the `.log` and `.index` of a new segment. The caller
/// fsyncs the directory.
pub async fn create_segment_files<I: StorageIo>(
    io: &I,
    dir: &Path,
    start_offset: u64,
) -> Result<(I::File, I::File), StorageError> {
    let log_path = log_path(dir, start_offset);
    let index_path = index_path(dir, start_offset);
    let log = io
        .open(&log_path, OpenMode::CreateTruncate)
        .await
        .map_err(|source| map_create_error(&log_path, source))?;
    let index = io
        .open(&index_path, OpenMode::CreateTruncate)
        .await
        .map_err(|source| map_create_error(&index_path, source))?;
    Ok((log, index))
}

fn map_create_error(path: &Path, source: std::io::Error) -> StorageError {
    if super::is_no_space(&source) {
        StorageError::NoSpace {
            path: path.to_path_buf(),
            source,
        }
    } else {
        StorageError::io("create", path, source)
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::partition_log::{PartitionConfig, PartitionLog, PartitionState};
    use crate::sim::{SimClock, SimIo, block_on};
    use iggyd_wire::batch::{MessageSpec, encode_producer_batch, stamp};

    fn stamped_batch(base_offset: u64, messages: u32) -> Vec<u8> {
        let specs: Vec<MessageSpec> = (0..messages)
            .map(|index| MessageSpec {
                id: u128::from(index) + 1,
                timestamp_delta: index,
                payload: vec![7; 10],
                user_headers: Vec::new(),
            })
            .collect();
        let mut batch = encode_producer_batch(1, &specs);
        stamp(&mut batch, 0, base_offset, 5).unwrap();
        batch
    }

    fn open(io: &SimIo, dir: &Path) -> Result<PartitionLog<SimIo>, StorageError> {
        block_on(PartitionLog::open(
            io.clone(),
            dir,
            PartitionConfig::new(0, 1 << 20),
            Rc::new(SimClock::new(10)),
            crate::BufferPool::new(1 << 20),
        ))
    }

    // Regression (fuzz target `segment_recovery`): a stamped batch with
    // valid checksums whose offsets run past u64::MAX, in a segment named
    // near u64::MAX, overflowed `next_offset` during the tail scan (a panic
    // in debug builds, a wrapped offset in release). With or without its
    // (checksummed) index entry it is now an untrusted torn tail: cut, and
    // the partition opens at the batch's base offset. An append that would
    // run past the largest offset is refused with a typed error.
    #[test]
    fn batch_running_past_the_largest_offset_is_cut() {
        let start = u64::MAX - 1;
        for with_index in [false, true] {
            let io = SimIo::new(1);
            let dir = PathBuf::from("/p");
            block_on(io.create_dir_all(&dir)).unwrap();
            let batch = stamped_batch(start, 4);
            let entry = IndexEntry {
                base_offset: start,
                message_count: 4,
                position: 0,
                length: batch.len() as u32,
                timestamp: 5,
            };
            io.set_contents(&log_path(&dir, start), batch);
            if with_index {
                io.set_contents(&index_path(&dir, start), entry.encode(start).to_vec());
            }
            let mut log = open(&io, &dir).unwrap();
            assert_eq!(log.next_offset(), start, "with index: {with_index}");
            assert_eq!(log.state(), PartitionState::Open);
            let torn = log.recovery_report().torn_tail.clone().expect("torn tail");
            assert_eq!(torn.first_dropped_offset, start);
            let batch = encode_producer_batch(
                1,
                &[
                    MessageSpec {
                        id: 1,
                        timestamp_delta: 0,
                        payload: vec![1],
                        user_headers: Vec::new(),
                    },
                    MessageSpec {
                        id: 2,
                        timestamp_delta: 0,
                        payload: vec![2],
                        user_headers: Vec::new(),
                    },
                ],
            );
            let len = batch.len();
            let batch = iggyd_wire::batch::ValidBatch::new(batch, 0..len).unwrap();
            let error = block_on(log.append(&batch)).unwrap_err();
            assert!(
                matches!(error, StorageError::OffsetsExhausted { .. }),
                "{error}"
            );
        }
    }

    // Regression: an index entry (valid XXH32) whose position points near
    // u64::MAX is rejected on decode instead of overflowing
    // `position + 256` while looking for valid data after damage.
    #[test]
    fn index_entry_with_overflowing_fields_does_not_decode() {
        let mut bytes = [0u8; INDEX_ENTRY_SIZE];
        bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        bytes[8..16].copy_from_slice(&(u64::MAX - 10).to_le_bytes());
        bytes[16..20].copy_from_slice(&300u32.to_le_bytes());
        let checksum = xxhash_rust::xxh32::xxh32(&bytes[0..28], 0);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        assert_eq!(IndexEntry::decode(&bytes, 0), None);
        bytes[8..16].copy_from_slice(&0u64.to_le_bytes());
        let checksum = xxhash_rust::xxh32::xxh32(&bytes[0..28], 0);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        assert!(IndexEntry::decode(&bytes, 0).is_some());
        assert_eq!(IndexEntry::decode(&bytes, u64::MAX), None);
    }
}
