//! Reads of a partition's written data: by offset, timestamp, first, last,
//! and the scrub that re-reads everything.
//!
//! This file owns the read half of [`PartitionLog`]: planning a read from
//! the index, the read window that polls are served from (one large read
//! of a segment, direct where the daemon writes direct, or the buffer a
//! write just put on the disk), checking each record read back from the
//! disk against its index entry (a mismatch quarantines the partition) and
//! slicing the first and last record to the range asked for. It never
//! writes a file and never sees batches that are not written yet.

use std::cell::{Cell, Ref, RefCell};
use std::rc::Rc;

use super::StorageError;
use super::buf::{AlignedBuf, BufferPool, SharedSlice, align_down, align_up};
use super::index::IndexEntry;
use super::io::{OpenMode, StorageIo};
use super::partition_log::PartitionLog;
use super::read_ahead::ReadSpan;
use super::segment::Segment;
use crate::limits::INDEX_READ_ENTRIES_MAX;
use iggyd_wire::batch::{self, BatchHeader};

use std::sync::Arc;

/// Index entries a read asks for first (a poll usually needs one or two
/// batches); each further read of the same poll asks for four times more.
const INDEX_READ_ENTRIES_FIRST: u64 = 16;

/// Stored batch records returned by a read, concatenated (ready to follow a
/// poll reply prefix): `bytes` starts with `headroom` bytes the caller
/// asked to keep free for its own header, then records copied there, then
/// the records of `shared`, lent from the read window without a copy (a
/// whole answer of whole records from one window, the common case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBatches {
    pub bytes: Vec<u8>,
    pub headroom: usize,
    pub shared: Option<SharedSlice>,
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

    /// The copied records after the headroom.
    #[expect(
        clippy::indexing_slicing,
        reason = "bytes starts with the headroom (with_headroom) and only grows"
    )]
    fn copied_records(&self) -> &[u8] {
        &self.bytes[self.headroom..]
    }

    /// The records, without the headroom (a copy when part is shared).
    pub fn records_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.shared {
            None => std::borrow::Cow::Borrowed(self.copied_records()),
            Some(shared) => {
                let mut records = self.copied_records().to_vec();
                records.extend_from_slice(shared.as_slice());
                std::borrow::Cow::Owned(records)
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Bytes of records, copied and shared.
    pub fn records_len(&self) -> usize {
        self.bytes.len() - self.headroom + self.shared.as_ref().map_or(0, SharedSlice::len)
    }

    /// Copies the shared part into `bytes` (before records are appended
    /// after it).
    fn unshare(&mut self) {
        if let Some(shared) = self.shared.take() {
            self.bytes.extend_from_slice(shared.as_slice());
        }
    }

    fn count(&mut self, first_offset: u64, message_count: u32) {
        self.records += 1;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }

    fn push(&mut self, record: &[u8], first_offset: u64, message_count: u32) {
        assert!(message_count >= 1);
        self.unshare();
        self.bytes.extend_from_slice(record);
        self.records += 1;
        self.message_count += message_count;
        self.first_offset.get_or_insert(first_offset);
        self.last_offset = Some(first_offset + u64::from(message_count) - 1);
    }
}

/// One span of one segment's `.log` held in memory, which polls are served
/// from: either read from the disk in one large read (direct where the
/// daemon writes direct, so the page cache is neither filled nor copied
/// from), or the buffer a write just put on the disk (a tailing consumer
/// then reads what was just produced without touching the disk).
#[derive(Debug)]
pub(crate) struct ReadWindow {
    /// Start offset of the segment the bytes belong to.
    pub(crate) segment_start: u64,
    /// File position of `buf[0]` (block aligned).
    pub(crate) file_start: u64,
    /// Bytes up to this file position are the segment's written batches;
    /// anything after it in `buf` is padding or a block rewritten since.
    pub(crate) valid_end: u64,
    /// Shared with poll replies that are still being sent.
    pub(crate) buf: Arc<AlignedBuf>,
    /// The bytes came from this process's own write path (validated where
    /// they were received, stamped here): served without re-checking.
    pub(crate) verified: bool,
}

/// Where the last read ended: the next offset and the index entry that
/// holds it, so a sequential reader skips the index search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadCursor {
    pub(crate) segment_start: u64,
    pub(crate) entry_number: u64,
    pub(crate) next_offset: u64,
}

/// The read path's own state: the window polls are served from, whether a
/// read used it since the last idle check, and where the last read ended.
/// Its fields are this file's alone; the write path hands it the buffer it
/// just wrote, deletions and truncations make it forget what they removed.
pub(super) struct ReadPath {
    /// At most one per partition, released when idle.
    window: RefCell<Option<ReadWindow>>,
    /// A read used the window since the last idle check.
    used: Cell<bool>,
    cursor: Cell<Option<ReadCursor>>,
}

impl ReadPath {
    pub(super) fn new() -> ReadPath {
        ReadPath {
            window: RefCell::new(None),
            used: Cell::new(false),
            cursor: Cell::new(None),
        }
    }

    /// The current window (for the read ahead, which copies its end).
    pub(super) fn window(&self) -> Ref<'_, Option<ReadWindow>> {
        self.window.borrow()
    }

    /// Installs `window` (or none), returning the old buffer to `pool`
    /// (at once, or once the replies still sending parts of it are done).
    fn replace(&self, window: Option<ReadWindow>, pool: &BufferPool) {
        if let Some(old) = self.window.replace(window) {
            pool.give_shared(old.buf);
        }
    }

    /// Forgets where the last read ended when that was in the segment
    /// starting at `segment_start` (or in any segment, with `None`).
    pub(super) fn forget_cursor(&self, segment_start: Option<u64>) {
        let stale = self
            .cursor
            .get()
            .is_some_and(|cursor| segment_start.is_none_or(|start| start == cursor.segment_start));
        if stale {
            self.cursor.set(None);
        }
    }
}

impl ReadWindow {
    /// Where `span` (file positions) lies in the buffer, if this window
    /// holds it.
    fn range(
        &self,
        segment_start: u64,
        span: std::ops::Range<u64>,
    ) -> Option<std::ops::Range<usize>> {
        if segment_start != self.segment_start
            || span.start < self.file_start
            || span.end > self.valid_end
        {
            return None;
        }
        let start = (span.start - self.file_start) as usize;
        let end = (span.end - self.file_start) as usize;
        (end <= self.buf.len()).then_some(start..end)
    }
}

impl<I: StorageIo> PartitionLog<I> {
    /// Segment `segment_number` (0 = oldest).
    pub(super) fn segment_at(&self, segment_number: usize) -> Result<&Segment, StorageError> {
        self.segments
            .get(segment_number)
            .ok_or_else(|| StorageError::Layout {
                path: self.dir.clone(),
                reason: format!(
                    "no segment number {segment_number} of {}",
                    self.segments.len()
                ),
            })
    }

    /// The `.index` of segment `segment_number` (the active one is open).
    async fn segment_index(&self, segment_number: usize) -> Result<Rc<I::File>, StorageError> {
        if segment_number + 1 == self.segments.len() {
            return Ok(self.active_index.clone());
        }
        let segment = self.segment_at(segment_number)?;
        let index_path = segment.index_path(&self.dir);
        let index = self
            .io
            .open(&index_path, OpenMode::Existing)
            .await
            .map_err(|source| StorageError::io("open index", &index_path, source))?;
        Ok(Rc::new(index))
    }

    /// Makes the read window hold `span` of segment `segment_number`,
    /// reading it (and what follows it, up to a window's worth of the
    /// written data) from the disk unless the current window has it.
    /// With `from_disk`, a window that holds the buffer of a write is not
    /// good enough: the scrub reads what is on the disk.
    async fn load_window(
        &self,
        segment_number: usize,
        span: std::ops::Range<u64>,
        from_disk: bool,
    ) -> Result<(), StorageError> {
        let segment = self.segment_at(segment_number)?;
        self.read_path.used.set(true);
        let held = self.read_path.window().as_ref().is_some_and(|window| {
            window.range(segment.start_offset, span.clone()).is_some()
                && !(from_disk && window.verified)
        });
        if held {
            self.prefetch_after(segment_number, span.end).await;
            return Ok(());
        }
        let written_end = segment.size_bytes;
        if span.end > written_end {
            return Err(StorageError::Layout {
                path: segment.log_path(&self.dir),
                reason: format!(
                    "a read of bytes {}..{} past the log's {written_end}",
                    span.start, span.end
                ),
            });
        }
        if self.read_ahead.parks() && self.read_ahead.pending_for(segment.start_offset, &span) {
            return Err(StorageError::ReadInFlight);
        }
        if self.take_prefetch(segment.start_offset, span.clone()).await {
            self.prefetch_after(segment_number, span.end).await;
            return Ok(());
        }
        let file_start = align_down(span.start);
        // A window reads ahead of the span, within the shard's budget.
        let window_bytes = self.config.read_window_bytes;
        let ahead = if self.pool.has_room(window_bytes) {
            window_bytes as u64
        } else {
            0
        };
        let want_end = (file_start + ahead).max(span.end);
        let file_end = align_up(want_end.min(written_end));
        let capacity = (file_end - file_start) as usize;
        let log_path = segment.log_path(&self.dir);
        let file = if segment_number + 1 == self.segments.len() {
            self.active_log.clone()
        } else {
            Rc::new(
                self.io
                    .open_with(&log_path, OpenMode::Existing, self.config.access)
                    .await
                    .map_err(|source| StorageError::io("open log", &log_path, source))?,
            )
        };
        if self.read_ahead.parks() {
            // The read goes on while the pump serves others; the poll comes
            // back when it is done. A read done at once is installed now.
            let buf = self.pool.take(capacity);
            let read = ReadSpan {
                segment_start: segment.start_offset,
                file: file.clone(),
                file_start,
                disk_start: file_start,
                file_end,
                written_end,
            };
            self.read_ahead.start(&self.io, read, buf, &self.pool);
            if self.read_ahead.pending_for(segment.start_offset, &span) {
                return Err(StorageError::ReadInFlight);
            }
            if self.take_prefetch(segment.start_offset, span.clone()).await {
                self.prefetch_after(segment_number, span.end).await;
                return Ok(());
            }
            // Short or failed: the read below says why.
        }
        // The old window's memory is free for this one.
        self.replace_window(None);
        let buf = self.pool.take(capacity);
        let (result, buf) = self.io.read_at_most(&file, buf, file_start, capacity).await;
        let read = match result {
            Ok(read) => read,
            Err(source) => {
                self.pool.give(buf);
                return Err(StorageError::io("read log", &log_path, source));
            }
        };
        if (read as u64) < span.end - file_start {
            self.pool.give(buf);
            let source = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the log ends at byte {} inside a batch the index lists",
                    file_start + read as u64
                ),
            );
            return Err(StorageError::io("read log", &log_path, source));
        }
        self.replace_window(Some(ReadWindow {
            segment_start: segment.start_offset,
            file_start,
            valid_end: (file_start + read as u64).min(written_end),
            buf: Arc::new(buf),
            verified: false,
        }));
        self.prefetch_after(segment_number, span.end).await;
        Ok(())
    }

    /// Installs `window` (or none), returning the old buffer to the pool
    /// (or, while replies still send parts of it, leaving it to them).
    pub(super) fn replace_window(&self, window: Option<ReadWindow>) {
        self.read_path.replace(window, &self.pool);
    }

    /// Drops the read window when no read used it since the last call (the
    /// pump calls this about once a second): an idle partition keeps no
    /// read buffer.
    pub fn release_idle_window(&self) {
        if !self.read_path.used.replace(false) {
            self.replace_window(None);
            self.drop_prefetch(None);
        }
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = self.poll_orphan_reads(&mut context);
    }

    /// Whether reads happened since the window was last released: a
    /// tailing consumer, for whom a write keeps what it wrote in memory.
    pub(super) fn has_reader(&self) -> bool {
        self.read_path.used.get()
    }

    /// Drops the read window, the read ahead and the cursor if they name
    /// data of the segment starting at `segment_start` (deleted by
    /// retention).
    pub(super) fn forget_window_of(&self, segment_start: u64) {
        let stale = self
            .read_path
            .window()
            .as_ref()
            .is_some_and(|window| window.segment_start == segment_start);
        if stale {
            self.replace_window(None);
        }
        self.drop_prefetch(Some(segment_start));
        self.read_path.forget_cursor(Some(segment_start));
    }

    /// Forgets every read's state (window, read ahead, cursor): the data
    /// they named is gone (a purge) or rewritten (a truncation).
    pub(super) fn forget_reads(&self) {
        self.replace_window(None);
        self.drop_prefetch(None);
        self.read_path.forget_cursor(None);
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

    /// [`Self::read_by_offset_checked`] with the hot-path check: records
    /// read from the disk are checked for layout and batch checksum.
    pub async fn read_by_offset_into(
        &self,
        offset: u64,
        count: u32,
        bytes_max: u64,
        headroom: usize,
    ) -> Result<ReadBatches, StorageError> {
        self.read_by_offset_checked(offset, count, bytes_max, headroom, false)
            .await
    }

    /// [`Self::read_by_offset`] into a buffer that starts with `headroom`
    /// zero bytes, for the caller's reply header: the records are copied
    /// once, from the read window into the reply. Records that come from
    /// the disk are checked against their index entry, for layout and batch
    /// checksum, and with `full` also every message checksum (the scrub).
    async fn read_by_offset_checked(
        &self,
        offset: u64,
        count: u32,
        bytes_max: u64,
        headroom: usize,
        full: bool,
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
        while remaining > 0
            && let Some(segment) = self.segments.get(segment_number)
        {
            if segment.is_empty() || wanted >= segment.next_offset {
                segment_number += 1;
                continue;
            }
            let index = self.segment_index(segment_number).await?;
            // A sequential consumer starts where the previous read ended:
            // the cursor names that entry, so no index window is searched.
            let cursor = self.read_path.cursor.take().filter(|cursor| {
                cursor.segment_start == segment.start_offset
                    && cursor.next_offset == wanted
                    && cursor.entry_number < segment.entry_count
            });
            let mut entry_number = match cursor {
                Some(cursor) => cursor.entry_number,
                None => {
                    segment
                        .locate_offset(&self.io, &index, &self.dir, wanted)
                        .await?
                        .0
                }
            };
            // Index entries are read a few at a time at first (a poll
            // usually needs one or two batches), more while they run out.
            let mut entries_wanted = INDEX_READ_ENTRIES_FIRST;
            while remaining > 0 && entry_number < segment.entry_count {
                let entries = segment
                    .read_entries(
                        &self.io,
                        &index,
                        &self.dir,
                        entry_number,
                        entry_number + entries_wanted,
                    )
                    .await?;
                entries_wanted = (entries_wanted * 4).min(INDEX_READ_ENTRIES_MAX);
                if entries
                    .first()
                    .is_none_or(|first| first.base_offset > wanted || first.next_offset() <= wanted)
                {
                    // Only a cursor could point elsewhere (the index search
                    // never does): search the index instead.
                    entry_number = segment
                        .locate_offset(&self.io, &index, &self.dir, wanted)
                        .await?
                        .0;
                    continue;
                }
                assert!(!entries.is_empty());
                // Plan the records to return from this index window: no more
                // than a read window's worth, so one disk read serves them.
                let mut planned = 0usize;
                let mut planned_messages = 0u64;
                let mut planned_bytes = 0u64;
                let mut capped = false;
                for entry in &entries {
                    if planned_messages >= u64::from(remaining) {
                        break;
                    }
                    let length = u64::from(entry.length);
                    if planned > 0 && planned_bytes + length > self.config.read_window_bytes as u64
                    {
                        break;
                    }
                    let first_record = out.is_empty() && planned == 0;
                    if !first_record
                        && out.records_len() as u64 + planned_bytes + length > bytes_max
                    {
                        capped = true;
                        break;
                    }
                    let skip = wanted.max(entry.base_offset) - entry.base_offset;
                    planned_messages += u64::from(entry.message_count) - skip;
                    planned_bytes += u64::from(entry.length);
                    planned += 1;
                }
                let plan = entries.get(..planned).unwrap_or_default();
                let (Some(&first), Some(&last)) = (plan.first(), plan.last()) else {
                    return Ok(out);
                };
                let span_start = first.position;
                let span_end = last.end_position();
                if span_end > segment.size_bytes || span_start > span_end {
                    // A sealed segment's index is trusted on open and
                    // checked as it is read: records past the log's end.
                    return Err(StorageError::CorruptIndex {
                        path: segment.index_path(&self.dir),
                        entry: entry_number + planned as u64 - 1,
                        reason: format!(
                            "records {span_start}..{span_end} end past the log's {} bytes",
                            segment.size_bytes
                        ),
                    });
                }
                self.load_window(segment_number, span_start..span_end, full)
                    .await?;
                let window = self.read_path.window();
                #[expect(
                    clippy::expect_used,
                    reason = "load_window has just installed a window holding this span"
                )]
                let (window, range, bytes) = window
                    .as_ref()
                    .and_then(|window| {
                        let range = window.range(segment.start_offset, span_start..span_end)?;
                        let bytes = window.buf.as_slice().get(range.clone())?;
                        Some((window, range, bytes))
                    })
                    .expect("load_window installs a window holding the span it was loaded for");
                // A record's bytes within the span, or a corrupt-index error
                // when the index placed it outside (entry numbers are this
                // window's).
                let record_of = |plan_number: usize, entry: &IndexEntry| {
                    entry
                        .position
                        .checked_sub(span_start)
                        .and_then(|at| usize::try_from(at).ok())
                        .and_then(|at| bytes.get(at..at.checked_add(entry.length as usize)?))
                        .ok_or_else(|| StorageError::CorruptIndex {
                            path: segment.index_path(&self.dir),
                            entry: entry_number + plan_number as u64,
                            reason: format!(
                                "record at byte {} ({} bytes) lies outside the span {span_start}..{span_end} read for it",
                                entry.position, entry.length
                            ),
                        })
                };
                let whole = out.is_empty()
                    && wanted == first.base_offset
                    && planned_messages <= u64::from(remaining);
                if whole && headroom > 0 {
                    // The whole answer so far is this span of whole records:
                    // lend it to the reply instead of copying it.
                    for (plan_number, entry) in plan.iter().enumerate() {
                        let record = record_of(plan_number, entry)?;
                        if !window.verified || full {
                            self.check_record(record, entry, segment, full)?;
                        }
                        out.count(entry.base_offset, entry.message_count);
                    }
                    out.shared = Some(SharedSlice::new(window.buf.clone(), range));
                    remaining -= planned_messages as u32;
                    wanted += planned_messages;
                } else {
                    out.bytes.reserve((span_end - span_start) as usize);
                    for (plan_number, entry) in plan.iter().enumerate() {
                        let record = record_of(plan_number, entry)?;
                        if !window.verified || full {
                            self.check_record(record, entry, segment, full)?;
                        }
                        let skip = (wanted - entry.base_offset) as u32;
                        let take = (entry.message_count - skip).min(remaining);
                        if skip == 0 && take == entry.message_count {
                            out.push(record, entry.base_offset, take);
                        } else {
                            let sliced =
                                batch::slice(record, skip, skip + take).map_err(|source| {
                                    StorageError::CorruptBatch {
                                        path: segment.log_path(&self.dir),
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
                }
                entry_number += planned as u64;
                // Where the next sequential read starts, if this one ended on
                // a batch boundary.
                self.read_path
                    .cursor
                    .set((wanted == last.next_offset()).then_some(ReadCursor {
                        segment_start: segment.start_offset,
                        entry_number,
                        next_offset: wanted,
                    }));
                if capped {
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
        segment: &Segment,
        full: bool,
    ) -> Result<(), StorageError> {
        // The hot path checks the batch header against the index (and that
        // the header says what the index says); the scrub hashes it all.
        let checked = if full {
            batch::validate(record).map(|summary| summary.header)
        } else {
            BatchHeader::decode(record).and_then(|header| {
                if header.batch_length == record.len() as u64 {
                    Ok(header)
                } else {
                    Err(batch::BatchError::LengthMismatch {
                        expected: header.batch_length,
                        found: record.len() as u64,
                    })
                }
            })
        };
        let header: BatchHeader = match checked {
            Ok(header) => header,
            Err(source) => {
                let error = StorageError::CorruptBatch {
                    path: segment.log_path(&self.dir),
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
                path: segment.log_path(&self.dir),
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
        let index = self.segment_index(segment_number).await?;
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
                .read_by_offset_checked(
                    offset,
                    u32::MAX,
                    crate::limits::READ_BYTES_MAX_DEFAULT,
                    0,
                    true,
                )
                .await?;
            let Some(last) = read.last_offset else { break };
            checked += u64::from(read.message_count);
            offset = last + 1;
        }
        Ok(checked)
    }
}
