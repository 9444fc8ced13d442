//! Reads of a partition's written data: by offset, timestamp, first, last,
//! and the scrub that re-reads everything.
//!
//! This file owns the read half of [`PartitionLog`]: planning a read from
//! the index, reading spans of stored records, checking each record read
//! back against its index entry (a mismatch quarantines the partition) and
//! slicing the first and last record to the range asked for. It never
//! writes and never sees batches that are not written yet.

use std::path::Path;
use std::rc::Rc;

use monoio::buf::IoBufMut;

use super::StorageError;
use super::index::IndexEntry;
use super::io::{OpenMode, StorageIo};
use super::partition_log::PartitionLog;
use crate::batch::{self, BatchHeader};
use crate::limits::INDEX_READ_ENTRIES_MAX;

/// Stored batch records returned by a read, concatenated (ready to follow a
/// poll reply prefix). `bytes` starts with `headroom` bytes the caller asked
/// to keep free for its own header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBatches {
    pub bytes: Vec<u8>,
    pub headroom: usize,
    pub records: u32,
    pub message_count: u32,
    pub first_offset: Option<u64>,
    pub last_offset: Option<u64>,
}

impl ReadBatches {
    fn with_headroom(headroom: usize) -> ReadBatches {
        ReadBatches {
            bytes: vec![0; headroom],
            headroom,
            ..ReadBatches::default()
        }
    }

    /// The records, without the headroom.
    pub fn records_bytes(&self) -> &[u8] {
        &self.bytes[self.headroom..]
    }

    fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Takes `bytes` (headroom, then whole stored records checked by the
    /// caller) as the first part of the answer, without copying.
    fn adopt(&mut self, bytes: Vec<u8>, records: u32, first_offset: u64, message_count: u32) {
        assert!(self.is_empty());
        assert!(records >= 1);
        assert!(message_count >= 1);
        assert!(bytes.len() > self.headroom);
        self.bytes = bytes;
        self.records += records;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }

    fn push(&mut self, record: &[u8], first_offset: u64, message_count: u32) {
        assert!(message_count >= 1);
        self.bytes.extend_from_slice(record);
        self.records += 1;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }
}

impl<I: StorageIo> PartitionLog<I> {
    async fn segment_files(
        &self,
        segment_number: usize,
    ) -> Result<(Rc<I::File>, Rc<I::File>), StorageError> {
        if segment_number + 1 == self.segments.len() {
            return Ok((self.active_read.clone(), self.active_index.clone()));
        }
        let segment = &self.segments[segment_number];
        let log_path = segment.log_path(&self.dir);
        let index_path = segment.index_path(&self.dir);
        let log = self
            .io
            .open(&log_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open log", &log_path, source))?;
        let index = self
            .io
            .open(&index_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open index", &index_path, source))?;
        Ok((Rc::new(log), Rc::new(index)))
    }

    /// Reads up to `count` messages starting at `offset` (or the first stored
    /// offset if `offset` is older), returning stored records; the first and
    /// last record are sliced to the range. `bytes_max` caps the bytes
    /// returned, except that the first record is always returned. Only
    /// written data is read (pending batches are not visible).
    pub async fn read_by_offset(
        &self,
        offset: u64,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        self.read_by_offset_into(offset, count, bytes_max, 0).await
    }

    /// [`Self::read_by_offset`] into a buffer that starts with `headroom`
    /// zero bytes, for the caller's reply header: a poll reply is then built
    /// without copying the records again.
    pub async fn read_by_offset_into(
        &self,
        offset: u64,
        count: u32,
        bytes_max: u64,
        headroom: usize,
    ) -> Result<ReadBatches, StorageError> {
        let mut out = ReadBatches::with_headroom(headroom);
        if count == 0 || offset >= self.written_next_offset() {
            return Ok(out);
        }
        let mut wanted = offset.max(self.first_offset());
        let mut remaining = count;
        let mut segment_number = self
            .segments
            .partition_point(|segment| segment.next_offset <= wanted);
        while segment_number < self.segments.len() && remaining > 0 {
            let segment = &self.segments[segment_number];
            if segment.is_empty() || wanted >= segment.next_offset {
                segment_number += 1;
                continue;
            }
            let (log, index) = self.segment_files(segment_number).await?;
            let (mut entry_number, _) = segment
                .locate_offset(&self.io, &index, &self.dir, wanted)
                .await?;
            while remaining > 0 && entry_number < segment.entry_count {
                let entries = segment
                    .read_entries(
                        &self.io,
                        &index,
                        &self.dir,
                        entry_number,
                        entry_number + INDEX_READ_ENTRIES_MAX,
                    )
                    .await?;
                assert!(!entries.is_empty());
                // Plan the records to return from this window.
                let mut planned = 0usize;
                let mut planned_messages = 0u64;
                let mut planned_bytes = 0u64;
                for entry in &entries {
                    if planned_messages >= u64::from(remaining) {
                        break;
                    }
                    let first_record = out.bytes.is_empty() && planned == 0;
                    let fits = out.bytes.len() as u64 + planned_bytes + u64::from(entry.length)
                        <= bytes_max;
                    if !first_record && !fits {
                        break;
                    }
                    let skip = wanted.max(entry.base_offset) - entry.base_offset;
                    planned_messages += u64::from(entry.message_count) - skip;
                    planned_bytes += u64::from(entry.length);
                    planned += 1;
                }
                if planned == 0 {
                    return Ok(out);
                }
                let plan = &entries[..planned];
                let span_start = plan[0].position;
                let span_end = plan[planned - 1].end_position();
                let log_path = segment.log_path(&self.dir);
                let span_len = (span_end - span_start) as usize;
                // The first read carries the caller's headroom, so that the
                // fast path below can hand it over as the whole answer.
                let lead = if out.is_empty() { headroom } else { 0 };
                let mut buffer = Vec::with_capacity(lead + span_len);
                buffer.resize(lead, 0);
                let (result, buffer) = self
                    .io
                    .read_exact_into(&log, buffer.slice_mut(lead..lead + span_len), span_start)
                    .await;
                result.map_err(|source| StorageError::io("read log", &log_path, source))?;
                let buffer = buffer.into_inner();
                assert!(buffer.len() == lead + span_len);
                let bytes = &buffer[lead..];
                // Fast path: nothing returned yet and every planned record is
                // taken whole, so the span read from disk *is* the answer.
                // Handing the buffer over instead of copying it saves a copy
                // and, more expensively, the page faults of a second
                // poll-sized buffer on every poll.
                let plan_messages: u64 = plan
                    .iter()
                    .map(|entry| u64::from(entry.message_count))
                    .sum();
                if out.is_empty()
                    && wanted == plan[0].base_offset
                    && plan_messages <= u64::from(remaining)
                {
                    for entry in plan {
                        let at = (entry.position - span_start) as usize;
                        let record = &bytes[at..at + entry.length as usize];
                        self.check_record(record, entry, &log_path)?;
                    }
                    out.adopt(buffer, plan.len() as u32, wanted, plan_messages as u32);
                    remaining -= plan_messages as u32;
                    wanted += plan_messages;
                    entry_number += planned as u64;
                    if planned < entries.len() && remaining > 0 {
                        return Ok(out);
                    }
                    continue;
                }
                out.bytes.reserve(span_len);
                for entry in plan {
                    let at = (entry.position - span_start) as usize;
                    let record = &bytes[at..at + entry.length as usize];
                    self.check_record(record, entry, &log_path)?;
                    let skip = (wanted - entry.base_offset) as u32;
                    let take = (entry.message_count - skip).min(remaining);
                    if skip == 0 && take == entry.message_count {
                        out.push(record, entry.base_offset, take);
                    } else {
                        let sliced = batch::slice(record, skip, skip + take).map_err(|source| {
                            StorageError::CorruptBatch {
                                path: log_path.clone(),
                                position: entry.position,
                                offset: entry.base_offset,
                                source,
                            }
                        })?;
                        out.push(&sliced, wanted, take);
                    }
                    remaining -= take;
                    wanted += u64::from(take);
                }
                entry_number += planned as u64;
                if planned < entries.len() && remaining > 0 {
                    // Stopped by the byte cap.
                    return Ok(out);
                }
            }
            segment_number += 1;
        }
        Ok(out)
    }

    /// Validates one record read back against its index entry. A mismatch
    /// quarantines the partition.
    fn check_record(
        &self,
        record: &[u8],
        entry: &IndexEntry,
        log_path: &Path,
    ) -> Result<(), StorageError> {
        let header: BatchHeader = match batch::validate(record) {
            Ok(summary) => summary.header,
            Err(source) => {
                let error = StorageError::CorruptBatch {
                    path: log_path.to_path_buf(),
                    position: entry.position,
                    offset: entry.base_offset,
                    source,
                };
                self.quarantine(error.to_string());
                return Err(error);
            }
        };
        if header.base_offset != entry.base_offset || header.message_count != entry.message_count {
            let error = StorageError::BatchMismatch {
                path: log_path.to_path_buf(),
                position: entry.position,
                expected: format!(
                    "offset {} with {} messages (index)",
                    entry.base_offset, entry.message_count
                ),
                found: format!(
                    "offset {} with {} messages",
                    header.base_offset, header.message_count
                ),
            };
            self.quarantine(error.to_string());
            return Err(error);
        }
        Ok(())
    }

    /// Reads from the first batch whose server timestamp is ≥ `timestamp`.
    pub async fn read_by_timestamp(
        &self,
        timestamp: u64,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        let found = self
            .segments
            .iter()
            .enumerate()
            .find(|(_, segment)| !segment.is_empty() && segment.last_timestamp >= timestamp);
        let Some((segment_number, segment)) = found else {
            return Ok(ReadBatches::default());
        };
        let (_, index) = self.segment_files(segment_number).await?;
        let (_, entry) = segment
            .locate_timestamp(&self.io, &index, &self.dir, timestamp)
            .await?;
        self.read_by_offset(entry.base_offset, count, bytes_max)
            .await
    }

    /// The first `count` stored messages.
    pub async fn read_first(
        &self,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, StorageError> {
        self.read_by_offset(self.first_offset(), count, bytes_max)
            .await
    }

    /// The last `count` stored messages.
    pub async fn read_last(&self, count: u32, bytes_max: u64) -> Result<ReadBatches, StorageError> {
        let start = self
            .written_next_offset()
            .saturating_sub(u64::from(count))
            .max(self.first_offset());
        self.read_by_offset(start, count, bytes_max).await
    }

    /// Re-reads and validates every stored batch (a scrub). Corruption
    /// quarantines the partition and is returned as an error.
    pub async fn verify(&self) -> Result<u64, StorageError> {
        let mut checked = 0u64;
        let mut offset = self.first_offset();
        while offset < self.written_next_offset() {
            let read = self
                .read_by_offset(offset, u32::MAX, crate::limits::READ_BYTES_MAX_DEFAULT)
                .await?;
            let Some(last) = read.last_offset else { break };
            checked += u64::from(read.message_count);
            offset = last + 1;
        }
        Ok(checked)
    }
}
