//! The read ahead of a partition's read window: a sequential reader's next
//! window is read from the disk while it takes the current one, its overlap
//! with the current window copied rather than read again; a read that must
//! wait can park its poll instead (the pump answers it when the read
//! completes); and a read dropped while the disk still works on it is kept
//! until done, so its buffer never outlives the kernel's writes into it.
//! `read.rs` owns the window itself and the reads served from it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::buf::{AlignedBuf, BufferPool, IO_ALIGN, align_down, align_up};
use super::io::{OpenMode, StorageIo};
use super::partition_log::PartitionLog;
use super::read::ReadWindow;
use std::sync::Arc;

/// How far before the end of the current window the read-ahead of the next
/// one starts, as a share of the window: a poll that straddles the end of a
/// window (one up to a quarter window long) is served whole from the next.
const PREFETCH_LEAD_DIVISOR: u64 = 4;

/// A read of the span after the read window, started when a sequential
/// reader nears the window's end, so its next poll finds it done (or in
/// flight) instead of waiting for a whole read: the disk reads ahead while
/// the shard sends the current window.
struct Prefetch {
    segment_start: u64,
    file_start: u64,
    file_end: u64,
    /// The segment's written size when the read started: bytes after it
    /// are not the segment's.
    written_end: u64,
    capacity: usize,
    state: PrefetchState,
}

type PendingRead = std::pin::Pin<Box<dyn Future<Output = (std::io::Result<usize>, AlignedBuf)>>>;

/// A partition's read ahead: the prefetch of its next window, whether
/// reads park their poll instead of waiting, and the reads dropped while
/// in flight. Its fields are this file's alone; `read.rs` asks it for a
/// window it holds.
pub(super) struct ReadAhead {
    /// At most one per partition.
    prefetch: RefCell<Option<Prefetch>>,
    /// While set, a read that would wait for the disk starts the read and
    /// fails with [`StorageError::ReadInFlight`](super::StorageError::ReadInFlight)
    /// instead (the pump parks the poll; see [`PartitionLog::set_park_reads`]).
    park: Cell<bool>,
    /// Read aheads dropped while in flight: kept until they complete, so
    /// their buffers outlive the kernel's writes into them (see `close`).
    orphans: RefCell<Vec<PendingRead>>,
}

enum PrefetchState {
    /// Submitted (polled once), not seen complete.
    Reading(PendingRead),
    Done(std::io::Result<usize>, AlignedBuf),
}

/// Where a read ahead goes: `file_start..file_end` of a segment's log, of
/// which the disk reads from `disk_start` on (the bytes before it are
/// copied from the current window).
pub(super) struct ReadSpan<I: StorageIo> {
    pub(super) segment_start: u64,
    pub(super) file: Rc<I::File>,
    pub(super) file_start: u64,
    pub(super) disk_start: u64,
    pub(super) file_end: u64,
    pub(super) written_end: u64,
}

impl Prefetch {
    /// Whether this read holds `span` of the segment starting at
    /// `segment_start`: only bytes the segment held when the read started
    /// are its own.
    fn covers(&self, segment_start: u64, span: &std::ops::Range<u64>) -> bool {
        self.segment_start == segment_start
            && self.file_start <= span.start
            && span.end <= self.file_end.min(self.written_end)
    }
    /// Polls the read if it is in flight, keeping its result when done.
    fn poll_state(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if let PrefetchState::Reading(read) = &mut self.state {
            match read.as_mut().poll(cx) {
                std::task::Poll::Ready((result, buf)) => {
                    self.state = PrefetchState::Done(result, buf);
                }
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
        std::task::Poll::Ready(())
    }
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetch")
            .field("segment_start", &self.segment_start)
            .field("file_start", &self.file_start)
            .field("file_end", &self.file_end)
            .finish_non_exhaustive()
    }
}

impl ReadAhead {
    pub(super) fn new() -> ReadAhead {
        ReadAhead {
            prefetch: RefCell::new(None),
            park: Cell::new(false),
            orphans: RefCell::new(Vec::new()),
        }
    }

    /// The prefetched window if it holds `span` of the segment starting at
    /// `segment_start` (awaiting its read if still in flight); any other
    /// prefetch is dropped. `None` when the caller must read.
    async fn take(
        &self,
        segment_start: u64,
        span: std::ops::Range<u64>,
        pool: &BufferPool,
    ) -> Option<ReadWindow> {
        let prefetch = self.prefetch.take()?;
        if !prefetch.covers(segment_start, &span) {
            self.forget(prefetch, pool);
            return None;
        }
        let (result, buf) = match prefetch.state {
            PrefetchState::Reading(read) => read.await,
            PrefetchState::Done(result, buf) => (result, buf),
        };
        // The buffer holds the bytes copied from the previous window and
        // those the disk read after them.
        let filled = prefetch.file_start + buf.len() as u64;
        match result {
            Ok(_) if filled >= span.end => Some(ReadWindow {
                segment_start,
                file_start: prefetch.file_start,
                valid_end: filled.min(prefetch.written_end),
                buf: Arc::new(buf),
                verified: false,
            }),
            // A short or failed read ahead: the caller's own read says why.
            _ => {
                pool.give(buf);
                None
            }
        }
    }

    /// Whether the prefetch, if any, already reads the segment starting at
    /// `segment_start` from `file_start` on.
    fn reads_from(&self, segment_start: u64, file_start: u64) -> bool {
        self.prefetch.borrow().as_ref().is_some_and(|prefetch| {
            prefetch.segment_start == segment_start
                && prefetch.file_start <= file_start
                && file_start < prefetch.file_end
        })
    }

    /// Starts `read` into `buf` (which holds the window's bytes before
    /// `disk_start` already) as the partition's read ahead, replacing any
    /// other. One poll submits it; completion is collected when a read
    /// needs the window, when the pump polls it for a parked poll
    /// ([`PartitionLog::poll_read`]), or the read ahead is dropped.
    pub(super) fn start<I: StorageIo>(
        &self,
        io: &I,
        read: ReadSpan<I>,
        buf: AlignedBuf,
        pool: &BufferPool,
    ) {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = self.poll_orphans(&mut context);
        let io = io.clone();
        let capacity = buf.capacity();
        let disk_len = (read.file_end - read.disk_start) as usize;
        let (file, disk_start) = (read.file, read.disk_start);
        let mut pending: PendingRead =
            Box::pin(async move { io.read_at_most(&file, buf, disk_start, disk_len).await });
        let state = match pending.as_mut().poll(&mut context) {
            std::task::Poll::Ready((result, buf)) => PrefetchState::Done(result, buf),
            std::task::Poll::Pending => PrefetchState::Reading(pending),
        };
        if let Some(old) = self.prefetch.replace(Some(Prefetch {
            segment_start: read.segment_start,
            file_start: read.file_start,
            file_end: read.file_end,
            written_end: read.written_end,
            capacity,
            state,
        })) {
            self.forget(old, pool);
        }
    }

    /// Whether the read ahead holds `span` of the segment starting at
    /// `segment_start` and is still in flight (checked without waiting).
    pub(super) fn pending_for(&self, segment_start: u64, span: &std::ops::Range<u64>) -> bool {
        let mut slot = self.prefetch.borrow_mut();
        let Some(prefetch) = slot.as_mut() else {
            return false;
        };
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        prefetch.covers(segment_start, span) && prefetch.poll_state(&mut context).is_pending()
    }

    /// Reads park their poll (see [`PartitionLog::set_park_reads`]).
    pub(super) fn parks(&self) -> bool {
        self.park.get()
    }

    /// Ready when the read ahead is done (or there is none).
    fn poll(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self.prefetch.borrow_mut().as_mut() {
            Some(prefetch) => prefetch.poll_state(cx),
            None => std::task::Poll::Ready(()),
        }
    }

    /// Drops a prefetch: its buffer goes back to the pool, or, while the
    /// read is in flight, stays with the read until it completes.
    fn forget(&self, prefetch: Prefetch, pool: &BufferPool) {
        match prefetch.state {
            PrefetchState::Done(_, buf) => pool.give(buf),
            PrefetchState::Reading(read) => {
                // The kernel may still write into its buffer: the read is
                // kept until it completes (reaped by later reads, awaited
                // by `close`), never freed while in flight.
                self.orphans.borrow_mut().push(read);
                pool.forget(prefetch.capacity);
            }
        }
    }

    /// Polls the read aheads dropped while in flight, freeing those done.
    /// Ready when none is left.
    pub(super) fn poll_orphans(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let mut orphans = self.orphans.borrow_mut();
        orphans.retain_mut(|read| read.as_mut().poll(cx).is_pending());
        if orphans.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// Drops the prefetch, if any (or only one of the segment starting at
    /// `segment_start`).
    pub(super) fn drop_prefetch(&self, segment_start: Option<u64>, pool: &BufferPool) {
        let matches = self.prefetch.borrow().as_ref().is_some_and(|prefetch| {
            segment_start.is_none_or(|start| start == prefetch.segment_start)
        });
        if matches && let Some(prefetch) = self.prefetch.take() {
            self.forget(prefetch, pool);
        }
    }

    /// A read ahead is held (done or in flight).
    #[cfg(test)]
    pub(super) fn has_prefetch(&self) -> bool {
        self.prefetch.borrow().is_some()
    }

    /// Reads dropped in flight and not yet complete.
    #[cfg(test)]
    pub(super) fn orphan_count(&self) -> usize {
        self.orphans.borrow().len()
    }
}

impl<I: StorageIo> PartitionLog<I> {
    /// Installs the prefetched window if it holds `span` of the segment
    /// starting at `segment_start` (awaiting its read if still in flight);
    /// any other prefetch is dropped. False when the caller must read.
    pub(super) async fn take_prefetch(
        &self,
        segment_start: u64,
        span: std::ops::Range<u64>,
    ) -> bool {
        match self.read_ahead.take(segment_start, span, &self.pool).await {
            Some(window) => {
                self.replace_window(None);
                self.replace_window(Some(window));
                true
            }
            None => false,
        }
    }

    /// After a read served from a disk window, starts reading the next
    /// window (when the shard's budget has room for a second one), so a
    /// sequential consumer's poll past this window finds the read done or
    /// in flight. It starts at the first read from the window, so the disk
    /// works while the consumer takes the rest of this one (starting only
    /// near the window's end left the next poll waiting for most of a
    /// read, the consumers' p99). The next window begins a quarter window
    /// before this one's end (or where this read ended, if later), so a
    /// poll straddling the boundary is served from it whole. Those bytes
    /// are copied from this window; the disk reads only what follows it
    /// (reading them again cost a third more disk reads than the consumer
    /// takes, on a path the disk bounds).
    pub(super) async fn prefetch_after(&self, segment_number: usize, read_end: u64) {
        let Some(segment) = self.segments.get(segment_number) else {
            return;
        };
        let written_end = segment.size_bytes;
        let (next_start, held_end) = match self.read_path.window().as_ref() {
            Some(window) if !window.verified && window.segment_start == segment.start_offset => {
                // The window's bytes are the segment's up to `valid_end`;
                // the disk read continues from the block boundary below it.
                let held_end = align_down(window.valid_end).max(window.file_start);
                let lead = self.config.read_window_bytes as u64 / PREFETCH_LEAD_DIVISOR;
                let lead_start = held_end.saturating_sub(lead);
                let next_start = align_down(read_end.max(lead_start)).min(held_end);
                (next_start.max(window.file_start), held_end)
            }
            _ => return,
        };
        let already = self.read_ahead.reads_from(segment.start_offset, next_start);
        let window_bytes = self.config.read_window_bytes;
        if already || held_end >= written_end || !self.pool.has_room(window_bytes) {
            return;
        }
        let file_end = align_up((next_start + window_bytes as u64).min(written_end))
            .max(held_end + IO_ALIGN as u64);
        let capacity = (file_end - next_start) as usize;
        let file = if segment_number + 1 == self.segments.len() {
            self.active_log.clone()
        } else {
            let log_path = segment.log_path(&self.dir);
            match self
                .io
                .open_with(&log_path, OpenMode::Existing, self.config.access)
                .await
            {
                Ok(file) => Rc::new(file),
                // The read itself will meet (and report) the same error.
                Err(_) => return,
            }
        };
        let mut buf = self.pool.take(capacity);
        let copied = self.read_path.window().as_ref().is_some_and(|window| {
            let held = window.segment_start == segment.start_offset
                && !window.verified
                && held_end <= window.valid_end;
            let from = next_start.checked_sub(window.file_start);
            let to = held_end.checked_sub(window.file_start);
            let head = match (from, to) {
                (Some(from), Some(to)) if held => {
                    window.buf.as_slice().get(from as usize..to as usize)
                }
                _ => None,
            };
            head.inspect(|head| buf.extend_from_slice(head)).is_some()
        });
        if !copied {
            // The window changed while the log was opened: no read ahead.
            self.pool.give(buf);
            return;
        }
        let read = ReadSpan {
            segment_start: segment.start_offset,
            file,
            file_start: next_start,
            disk_start: held_end,
            file_end,
            written_end,
        };
        self.read_ahead.start(&self.io, read, buf, &self.pool);
    }

    /// While `park` is set, a read that would wait for the disk starts the
    /// read (as the partition's read ahead) and fails with
    /// [`StorageError::ReadInFlight`](super::StorageError::ReadInFlight); [`Self::poll_read`] says when to
    /// try again. The pump sets it around polls, so a poll waiting for the
    /// disk does not hold up the other partitions of its shard.
    pub fn set_park_reads(&self, park: bool) {
        self.read_ahead.park.set(park);
    }

    /// Ready when the read ahead is done (or there is none): a parked poll
    /// can try again. Pending registers `cx` to be woken on completion.
    pub fn poll_read(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.read_ahead.poll(cx)
    }

    /// Polls the read aheads dropped while in flight, freeing those done.
    /// Ready when none is left.
    pub(super) fn poll_orphan_reads(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.read_ahead.poll_orphans(cx)
    }

    /// Drops the prefetch, if any (or only one of the segment starting at
    /// `segment_start`).
    pub(super) fn drop_prefetch(&self, segment_start: Option<u64>) {
        self.read_ahead.drop_prefetch(segment_start, &self.pool);
    }
}
