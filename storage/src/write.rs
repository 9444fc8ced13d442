//! The write half of [`PartitionLog`]: the write-behind tail of the active
//! segment, appends into it, the coalesced write of pending batches (one
//! aligned direct-I/O write, or one buffered write), rollback of a write
//! that hit a full disk, rotation and the seal of a segment.
//!
//! This file owns how appended bytes reach the `.log` and `.index` of the
//! active segment. It never fsyncs on its own except to seal a segment
//! (syncs are `partition_log.rs`'s, driven by the pump), never reads, and
//! never panics on an I/O error: a failed write rolls back (ENOSPC) or
//! poisons the partition.

use std::path::PathBuf;

use super::INDEX_ENTRY_SIZE;
use super::StorageError;
use super::buf::{AlignedBuf, IO_ALIGN, align_down, align_up};
use super::index::IndexEntry;
use super::io::{Access, OpenMode, StorageIo};
use super::is_no_space;
use super::partition_log::{AppendResult, PartitionLog, PartitionState, open_active};
use super::read::ReadWindow;
use super::recovery::create_segment_files;
use super::segment::Segment;
use crate::limits::{BATCH_BYTES_MAX, TAIL_CHUNK_BYTES};
use iggyd_wire::batch::ValidBatch;

/// The write-behind tail of the active segment: an aligned buffer holding
/// the file's bytes from `start` to the logical end. Bytes before the
/// segment's written size are already on disk (in direct mode the partial
/// last block is kept so the next write can rewrite it whole); batches
/// after it are `pending`, appended but not yet written. Its fields are
/// this file's alone: the rest of the log asks it what is pending.
pub(super) struct WriteTail {
    /// `None` only while a write owns the buffer.
    buf: Option<AlignedBuf>,
    /// File position of `buf[0]` (block aligned in direct mode).
    start: u64,
    /// Index entries of the pending batches, in order.
    pending: Vec<IndexEntry>,
    pending_bytes: u64,
}

impl WriteTail {
    /// A tail without a buffer yet ([`PartitionLog::load_tail`] gives it one).
    pub(super) fn new() -> WriteTail {
        WriteTail {
            buf: None,
            start: 0,
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Batches are appended but not yet written.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Heap bytes the tail holds (its buffer and pending entries).
    pub(super) fn memory_bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, AlignedBuf::capacity)
            + self.pending.capacity() * size_of::<IndexEntry>()
    }

    /// Forgets every pending batch (their bytes stay in the buffer until
    /// the caller cuts it or the log is reloaded); how many there were.
    pub(super) fn drop_pending(&mut self) -> usize {
        let dropped = self.pending.len();
        self.pending.clear();
        self.pending_bytes = 0;
        dropped
    }

    /// Records a batch just copied into the buffer as pending.
    fn push_pending(&mut self, entry: IndexEntry) {
        self.pending_bytes += u64::from(entry.length);
        self.pending.push(entry);
    }

    /// The pending batches were written: they stop being pending. Returns
    /// their bytes and messages.
    fn pending_written(&mut self) -> (u64, u64) {
        let messages = self
            .pending
            .iter()
            .map(|entry| u64::from(entry.message_count))
            .sum::<u64>();
        let bytes = self.pending_bytes;
        self.drop_pending();
        (bytes, messages)
    }

    /// Replaces the buffer, now starting at file position `start`; the old
    /// one, if any, is returned for the pool.
    fn replace_buf(&mut self, buf: AlignedBuf, start: u64) -> Option<AlignedBuf> {
        self.start = start;
        self.buf.replace(buf)
    }

    /// Capacity of the buffer (the tests check it shrinks after a write).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.buf().capacity()
    }

    #[expect(
        clippy::expect_used,
        reason = "only write_pending takes the buffer, and it puts it back before it returns"
    )]
    fn buf(&self) -> &AlignedBuf {
        self.buf
            .as_ref()
            .expect("the tail buffer is home between writes")
    }

    #[expect(
        clippy::expect_used,
        reason = "only write_pending takes the buffer, and it puts it back before it returns"
    )]
    fn buf_mut(&mut self) -> &mut AlignedBuf {
        self.buf
            .as_mut()
            .expect("the tail buffer is home between writes")
    }

    fn end(&self) -> u64 {
        self.start + self.buf().len() as u64
    }
}

/// Capacity of a partition's tail buffer between writes: the partial last
/// block plus room for small batches.
const TAIL_IDLE_BYTES: usize = 2 * IO_ALIGN;

impl<I: StorageIo> PartitionLog<I> {
    /// Points the tail at the end of the active segment (`size_bytes`), and
    /// in direct mode loads its partial last block, which the next write
    /// rewrites whole.
    pub(super) async fn load_tail(&mut self, size_bytes: u64) -> Result<(), StorageError> {
        let start = match self.config.access {
            Access::Direct => align_down(size_bytes),
            Access::Buffered => size_bytes,
        };
        let partial = (size_bytes - start) as usize;
        let mut buf = self.pool.take(TAIL_IDLE_BYTES);
        if partial > 0 {
            let path = self.active().log_path(&self.dir);
            let bytes = self
                .io
                .read_exact_at(&self.active_read, start, partial)
                .await
                .map_err(|source| StorageError::io("read log tail", &path, source))?;
            buf.extend_from_slice(&bytes);
        }
        if let Some(old) = self.tail.replace_buf(buf, start) {
            self.pool.give(old);
        }
        assert!(self.tail.end() == size_bytes);
        Ok(())
    }

    /// Stamps one validated producer batch with its offsets and server time
    /// and appends it to the tail. Nothing is written yet: the batch becomes
    /// readable and survives a process crash once [`Self::write_pending`]
    /// returns, and survives power loss after a sync. An append that does
    /// not fit the tail buffer writes the pending batches first (flush by
    /// size); one that would pass the segment size seals the segment first.
    /// A write failure there fails this append and drops every pending
    /// batch (the epoch's `rollbacks` changes).
    pub async fn append(&mut self, batch: &ValidBatch) -> Result<AppendResult, StorageError> {
        self.append_at(batch, None).await
    }

    /// [`Self::append`], stamped with `timestamp` when given (a replica
    /// keeps its leader's) instead of this log's clock.
    pub(super) async fn append_at(
        &mut self,
        batch: &ValidBatch,
        timestamp: Option<u64>,
    ) -> Result<AppendResult, StorageError> {
        self.check_writable()?;
        let batch_len = batch.len() as u64;
        if batch_len > BATCH_BYTES_MAX {
            return Err(StorageError::BatchTooLarge {
                found: batch_len,
                max: BATCH_BYTES_MAX,
            });
        }
        let message_count = batch.message_count();
        // Only reachable from a partition recovered near u64::MAX (a hostile
        // or damaged segment name), but offsets must never wrap.
        if self
            .next_offset
            .checked_add(u64::from(message_count))
            .is_none()
        {
            return Err(StorageError::OffsetsExhausted {
                next_offset: self.next_offset,
                message_count,
            });
        }
        if self.needs_rotation(batch_len, message_count) {
            self.write_pending().await?;
            self.rotate().await?;
        }
        if (self.tail.buf().remaining() as u64) < batch_len {
            // Flush by size: pending batches go out in one write once the
            // tail would pass a chunk; below that the buffer just grows.
            if self.tail.buf().len() as u64 + batch_len > TAIL_CHUNK_BYTES as u64 {
                self.write_pending().await?;
            }
            self.grow_tail(batch_len as usize);
        }
        let timestamp =
            timestamp.unwrap_or_else(|| self.clock.now_micros().max(self.last_timestamp));
        let base_offset = self.next_offset;
        let position = self.tail.end();
        let at = self.tail.buf().len();
        let tail = self.tail.buf_mut();
        tail.extend_from_slice(batch.bytes());
        // The bytes just appended; stamp_copy asserts they are the batch's length.
        let stored = tail.as_mut_slice().get_mut(at..).unwrap_or_default();
        let header = batch.stamp_copy(stored, self.config.partition_id, base_offset, timestamp);
        assert!(header.base_offset == base_offset);
        assert!(header.batch_length == batch_len);
        self.tail.push_pending(IndexEntry {
            base_offset,
            message_count,
            position,
            length: batch_len as u32,
            timestamp,
        });
        self.next_offset = base_offset + u64::from(message_count);
        self.last_timestamp = timestamp;
        Ok(AppendResult {
            base_offset,
            last_offset: header.last_offset(),
            timestamp,
        })
    }

    /// Makes room in the tail for a batch of `batch_len` bytes: a buffer
    /// from the pool big enough for what the tail holds and the batch (at
    /// least a chunk, so a round of small batches grows it once).
    fn grow_tail(&mut self, batch_len: usize) {
        let kept = self.tail.buf().len();
        if self.tail.buf().remaining() >= batch_len {
            return;
        }
        // Room for what is needed and as much again (up to a chunk), so a
        // round of several batches grows the buffer once or twice; within
        // the shard's budget only, else exactly what is needed.
        let needed = kept + batch_len;
        let ahead = needed.max((2 * needed).min(TAIL_CHUNK_BYTES));
        let size = if self.pool.has_room(ahead) {
            ahead
        } else {
            needed
        };
        let mut bigger = self.pool.take(size);
        bigger.extend_from_slice(self.tail.buf().as_slice());
        let start = self.tail.start;
        if let Some(old) = self.tail.replace_buf(bigger, start) {
            self.pool.give(old);
        }
    }

    /// Writes every pending batch with one write of the tail (in direct
    /// mode: from the partial block before them to the next block boundary,
    /// zero padded) and their index entries with one write. On success they
    /// are readable and count as written. On ENOSPC the write is rolled back
    /// and every pending batch dropped (`NoSpace`); other failures poison.
    pub async fn write_pending(&mut self) -> Result<(), StorageError> {
        if !self.tail.has_pending() {
            return Ok(());
        }
        self.check_writable()?;
        let written_end = self.active().size_bytes;
        let entry_count = self.active().entry_count;
        #[expect(clippy::expect_used, reason = "the tail buffer is home between writes")]
        let mut buf = self.tail.buf.take().expect("the tail buffer is home");
        let logical_len = buf.len();
        let from = (written_end - self.tail.start) as usize;
        let (write_from, write_to) = match self.config.access {
            Access::Direct => (
                align_down(from as u64) as usize,
                align_up(logical_len as u64) as usize,
            ),
            Access::Buffered => (from, logical_len),
        };
        buf.zero_extend_to(write_to);
        let position = self.tail.start + write_from as u64;
        let (result, slice) = self
            .io
            .write_at(
                &self.active_log,
                monoio::buf::IoBuf::slice(buf, write_from..write_to),
                position,
            )
            .await;
        let mut buf = slice.into_inner();
        buf.truncate(logical_len);
        self.tail.buf = Some(buf);
        let log_path = self.active().log_path(&self.dir);
        if let Err(source) = result {
            return Err(self
                .fail_write(source, log_path, written_end, entry_count)
                .await);
        }
        let mut index_bytes = Vec::with_capacity(self.tail.pending.len() * INDEX_ENTRY_SIZE);
        let segment_start = self.active().start_offset;
        for entry in &self.tail.pending {
            index_bytes.extend_from_slice(&entry.encode(segment_start));
        }
        let index_position = entry_count * INDEX_ENTRY_SIZE as u64;
        let (result, _) = self
            .io
            .write_at(&self.active_index, index_bytes, index_position)
            .await;
        if let Err(source) = result {
            let index_path = self.active().index_path(&self.dir);
            return Err(self
                .fail_write(source, index_path, written_end, entry_count)
                .await);
        }
        #[expect(
            clippy::expect_used,
            reason = "a partition always has an active segment"
        )]
        let active = self.segments.last_mut().expect("active segment");
        for entry in &self.tail.pending {
            active.push_entry(entry);
        }
        assert!(active.size_bytes == self.tail.start + logical_len as u64);
        assert!(active.next_offset == self.next_offset);
        let (bytes, messages) = self.tail.pending_written();
        self.written_bytes += bytes;
        self.written_messages += messages;
        self.recycle_tail();
        Ok(())
    }

    /// After a write: keep only what the next write needs (the partial last
    /// block in direct mode, nothing in buffered mode), in a small buffer,
    /// and return a big one to the pool.
    fn recycle_tail(&mut self) {
        let len = self.tail.buf().len() as u64;
        let keep_from = match self.config.access {
            Access::Direct => align_down(len),
            Access::Buffered => len,
        };
        if self.tail.buf().capacity() > TAIL_IDLE_BYTES {
            let mut small = self.pool.take(TAIL_IDLE_BYTES);
            // keep_from ≤ len: aligning down never passes the end.
            let kept = self.tail.buf().as_slice().get(keep_from as usize..);
            small.extend_from_slice(kept.unwrap_or_default());
            let start = self.tail.start;
            if let Some(big) = self.tail.replace_buf(small, start) {
                if self.has_reader() {
                    // A consumer is tailing this partition: what was just
                    // written becomes its read window, so it reads the new
                    // batches from memory instead of from the disk.
                    let file_start = self.tail.start;
                    let valid_end = file_start + big.len() as u64;
                    self.replace_window(Some(ReadWindow {
                        segment_start: self.active().start_offset,
                        file_start,
                        valid_end,
                        buf: std::sync::Arc::new(big),
                        verified: true,
                    }));
                } else {
                    self.pool.give(big);
                }
            }
        } else {
            self.tail.buf_mut().keep_from(keep_from as usize);
        }
        self.tail.start += keep_from;
    }

    /// A failed write of pending batches: on ENOSPC cut the partial bytes
    /// (the log stays a sequence of whole batches) and drop every pending
    /// batch; anything else poisons.
    async fn fail_write(
        &mut self,
        source: std::io::Error,
        path: PathBuf,
        log_len: u64,
        entry_count: u64,
    ) -> StorageError {
        if !is_no_space(&source) {
            return self.poison(format!("write to {} failed: {source}", path.display()));
        }
        if let Err(truncate_error) = self.io.truncate(&self.active_log, log_len).await {
            return self.poison(format!(
                "rolling back a failed write (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        let index_len = entry_count * INDEX_ENTRY_SIZE as u64;
        if let Err(truncate_error) = self.io.truncate(&self.active_index, index_len).await {
            return self.poison(format!(
                "rolling back a failed write (ENOSPC on {}) failed: {truncate_error}",
                path.display()
            ));
        }
        let dropped = self.tail.drop_pending();
        let keep = (log_len - self.tail.start) as usize;
        self.tail.buf_mut().truncate(keep);
        self.next_offset = self.active().next_offset;
        self.last_timestamp = self
            .segments
            .iter()
            .map(|segment| segment.last_timestamp)
            .max()
            .unwrap_or(0);
        self.epoch.rollbacks += 1;
        tracing::warn!(path = %path.display(), batches = dropped, "write failed: no space left on device; the appended batches were dropped");
        StorageError::NoSpace { path, source }
    }

    fn needs_rotation(&self, batch_len: u64, message_count: u32) -> bool {
        let active = self.active();
        if active.is_empty() && !self.tail.has_pending() {
            return false;
        }
        let size = active.size_bytes + self.tail.pending_bytes;
        let too_big = size + batch_len > self.config.segment_size_bytes;
        let relative_last = self.next_offset + u64::from(message_count) - active.start_offset;
        too_big || relative_last > u64::from(u32::MAX)
    }

    /// Seals the active segment when it holds messages (written or
    /// pending: they are written first) and starts a new one at the next
    /// offset, so every message so far is in a sealed segment (a
    /// replicated partition's purge entry, whose messages before it are
    /// deleted whole segments at a time). Nothing happens to an empty
    /// active segment.
    pub async fn start_segment(&mut self) -> Result<(), StorageError> {
        self.check_writable()?;
        if self.active().is_empty() && !self.tail.has_pending() {
            return Ok(());
        }
        self.write_pending().await?;
        self.rotate().await
    }

    /// Seals the active segment (cut to its exact size, fsync) and starts a
    /// new one at `next_offset`. Called with nothing pending.
    async fn rotate(&mut self) -> Result<(), StorageError> {
        assert!(!self.tail.has_pending());
        self.seal_active().await?;
        assert!(self.unsynced_bytes() == 0);
        let start_offset = self.next_offset;
        let (log, index) = create_segment_files(&self.io, &self.dir, start_offset).await?;
        drop((log, index));
        if let Err(source) = self.io.sync_dir(&self.dir).await {
            return Err(self.poison(format!(
                "fsync of directory {} failed: {source}",
                self.dir.display()
            )));
        }
        let segment = Segment::empty(start_offset, self.config.index_sample_every);
        let (active_log, active_read, active_index) = open_active(
            &self.io,
            &self.dir,
            &segment,
            self.config.access,
            OpenMode::Existing,
        )
        .await?;
        self.segments.push(segment);
        self.active_log = active_log;
        self.active_read = active_read;
        self.active_index = active_index;
        self.load_tail(0).await?;
        Ok(())
    }

    /// Makes the active segment's files exact and durable: in direct mode
    /// the `.log` ends in zero padding up to the next block, which is cut to
    /// the size of its batches (so a sealed segment's length is exact), then
    /// everything is fsynced (the cut too, a size change). Called with
    /// nothing pending.
    async fn seal_active(&mut self) -> Result<(), StorageError> {
        assert!(!self.tail.has_pending());
        self.sync().await?;
        if self.config.access == Access::Buffered {
            return Ok(());
        }
        let size = self.active().size_bytes;
        let path = self.active().log_path(&self.dir);
        let file_len = self
            .io
            .file_len(&self.active_log)
            .await
            .map_err(|source| StorageError::io("stat log", &path, source))?;
        if file_len == size {
            return Ok(());
        }
        if let Err(source) = self.io.truncate(&self.active_log, size).await {
            return Err(self.poison(format!(
                "cutting the padding of {} failed: {source}",
                path.display()
            )));
        }
        if let Err(source) = self.io.sync(&self.active_log).await {
            return Err(self.poison(format!("fsync of {} failed: {source}", path.display())));
        }
        Ok(())
    }

    /// Shutdown: write what is pending, cut the padding and fsync, so the
    /// next start finds exact files. A quarantined log is left as found.
    pub async fn close(&mut self) -> Result<(), StorageError> {
        // A read still in flight owns memory the kernel writes into: it
        // must complete while the runtime that submitted it still runs (a
        // runtime dropped with reads in flight frees their buffers under
        // the kernel's writes).
        std::future::poll_fn(|cx| {
            let current = self.poll_read(cx);
            let orphans = self.poll_orphan_reads(cx);
            if current.is_ready() && orphans.is_ready() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        match self.state() {
            PartitionState::Open => {
                self.write_pending().await?;
                self.seal_active().await
            }
            PartitionState::Quarantined { .. } => Ok(()),
            PartitionState::Poisoned { reason } => Err(StorageError::Poisoned { reason }),
        }
    }

    /// [`Self::append`], then [`Self::write_pending`]: the batch is written
    /// (readable, survives a process crash) when this returns.
    pub async fn append_and_write(
        &mut self,
        batch: &ValidBatch,
    ) -> Result<AppendResult, StorageError> {
        let appended = self.append(batch).await?;
        self.write_pending().await?;
        Ok(appended)
    }
}
