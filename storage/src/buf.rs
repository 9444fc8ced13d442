//! Aligned I/O buffers and the per-shard pool that recycles them.
//!
//! This file owns [`AlignedBuf`], a heap buffer whose address and capacity
//! are multiples of [`IO_ALIGN`] (what `O_DIRECT` needs), and [`BufferPool`],
//! which hands such buffers out, takes them back, keeps a bounded number of
//! idle ones for reuse (a reused buffer costs no allocation and no page
//! faults) and accounts every byte it manages, so a shard's write buffers and
//! caches can be held to its share of `memory.budget`. It must not know about
//! files, segments or batches.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::rc::Rc;

/// Alignment of direct-I/O buffers, file positions and lengths. 4 KiB covers
/// devices with 512-byte and 4 KiB logical blocks.
pub const IO_ALIGN: usize = 4096;

/// Size and alignment of a transparent huge page on x86-64 and most
/// aarch64 kernels; buffers this large are placed to be backable by one.
pub const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// What a debug or test build writes over every aligned buffer it frees or
/// recycles, so that bytes read after their buffer was given back (a reply
/// still sending from a window that was replaced, say) show as a run of
/// this byte instead of passing for data.
pub const POISON_BYTE: u8 = 0xDB;

/// Rounds `value` down to a multiple of [`IO_ALIGN`].
pub fn align_down(value: u64) -> u64 {
    value & !(IO_ALIGN as u64 - 1)
}

/// Rounds `value` up to a multiple of [`IO_ALIGN`].
pub fn align_up(value: u64) -> u64 {
    align_down(value + IO_ALIGN as u64 - 1)
}

/// A byte buffer aligned to [`IO_ALIGN`] in address and capacity. `len`
/// bytes are initialised; the capacity is fixed at allocation.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: the buffer is uniquely owned heap memory (like a `Vec<u8>`); moving
// it to another thread moves that ownership.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read the bytes (no interior mutability).
unsafe impl Sync for AlignedBuf {}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl AlignedBuf {
    /// A zero-length buffer of at least `capacity` bytes (rounded up to
    /// [`IO_ALIGN`]; at least one block).
    pub fn with_capacity(capacity: usize) -> AlignedBuf {
        let capacity = (align_up(capacity.max(1) as u64)) as usize;
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        if layout.align() == HUGE_PAGE_BYTES {
            // Large buffers on transparent huge pages where the kernel
            // offers them: fewer TLB misses for the copies, and direct I/O
            // pins a few huge pages instead of hundreds of small ones.
            // Advice only: failure changes nothing.
            // SAFETY: the range is this allocation, page aligned.
            unsafe {
                libc::madvise(raw.cast(), capacity, libc::MADV_HUGEPAGE);
            }
        }
        AlignedBuf {
            ptr,
            len: 0,
            capacity,
        }
    }

    /// The allocation layout of a buffer of `capacity` (a multiple of
    /// [`IO_ALIGN`]): huge-page aligned from [`HUGE_PAGE_BYTES`] up.
    #[expect(
        clippy::expect_used,
        reason = "callers pass a capacity rounded up to IO_ALIGN; a failure is a bug"
    )]
    fn layout(capacity: usize) -> Layout {
        let align = if capacity >= HUGE_PAGE_BYTES {
            HUGE_PAGE_BYTES
        } else {
            IO_ALIGN
        };
        Layout::from_size_align(capacity, align)
            .expect("an aligned capacity below isize::MAX is a valid layout")
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes that can still be appended.
    pub fn remaining(&self) -> usize {
        self.capacity - self.len
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are initialised and owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Appends `bytes`; they must fit in [`Self::remaining`].
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        assert!(bytes.len() <= self.remaining());
        // SAFETY: the destination lies inside the allocation (checked
        // above) and cannot overlap `bytes`, which the caller borrows.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len += bytes.len();
    }

    /// Grows the initialised length to `len` with zeros (`len` ≤ capacity).
    pub fn zero_extend_to(&mut self, len: usize) {
        assert!(len <= self.capacity);
        if len > self.len {
            // SAFETY: the range is inside the allocation.
            unsafe {
                std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, len - self.len);
            }
            self.len = len;
        }
    }

    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
        }
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Overwrites the whole capacity with [`POISON_BYTE`] and empties the
    /// buffer (debug and test builds; a release build only empties it).
    pub fn poison(&mut self) {
        if cfg!(debug_assertions) {
            // SAFETY: the range is the allocation.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), POISON_BYTE, self.capacity) };
        }
        self.len = 0;
    }

    /// Moves bytes `from..len` to the start of the buffer and makes them the
    /// whole content (keeping a partial block for the next write).
    pub fn keep_from(&mut self, from: usize) {
        assert!(from <= self.len);
        let kept = self.len - from;
        if from > 0 && kept > 0 {
            // SAFETY: both ranges lie inside the initialised part; `copy`
            // handles overlap.
            unsafe {
                std::ptr::copy(self.ptr.as_ptr().add(from), self.ptr.as_ptr(), kept);
            }
        }
        self.len = kept;
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        self.poison();
        let layout = Self::layout(self.capacity);
        // SAFETY: allocated in `with_capacity` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

// SAFETY: `read_ptr` points at `bytes_init` initialised bytes that stay put
// while the buffer is owned by an I/O operation (the allocation never moves).
unsafe impl monoio::buf::IoBuf for AlignedBuf {
    fn read_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn bytes_init(&self) -> usize {
        self.len
    }
}

// SAFETY: `write_ptr` points at `bytes_total` bytes of owned memory; the
// kernel reports how many it initialised through `set_init`.
unsafe impl monoio::buf::IoBufMut for AlignedBuf {
    fn write_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn bytes_total(&mut self) -> usize {
        self.capacity
    }

    unsafe fn set_init(&mut self, pos: usize) {
        assert!(pos <= self.capacity);
        self.len = pos;
    }
}

/// A range of an aligned buffer shared between a partition's read window
/// and the poll replies lent parts of it: a reply goes from the buffer the
/// disk read filled to the socket without a copy in between. The buffer is
/// freed when the window and every reply are done with it.
#[derive(Debug, Clone)]
pub struct SharedSlice {
    buf: std::sync::Arc<AlignedBuf>,
    range: std::ops::Range<usize>,
}

impl SharedSlice {
    /// `range` of `buf`; it must lie inside the initialised bytes.
    pub fn new(buf: std::sync::Arc<AlignedBuf>, range: std::ops::Range<usize>) -> SharedSlice {
        assert!(range.start <= range.end);
        assert!(range.end <= buf.len());
        SharedSlice { buf, range }
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "new() asserts the range lies in the buffer; neither changes after"
    )]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf.as_slice()[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

impl PartialEq for SharedSlice {
    fn eq(&self, other: &SharedSlice) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SharedSlice {}

/// What a pool holds, for the console and the budget check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of every buffer handed out and not yet returned or dropped.
    pub outstanding_bytes: u64,
    /// Bytes of idle buffers kept for reuse.
    pub idle_bytes: u64,
    /// Buffers allocated because no idle one fitted.
    pub allocations: u64,
    /// Buffers served from the idle list.
    pub reuses: u64,
    /// Bytes of buffers given back while poll replies still send from them
    /// (part of `outstanding_bytes`): reclaimed once the last reply is done.
    pub lent_bytes: u64,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Idle buffers, each with its capacity; small lists, scanned linearly.
    idle: Vec<AlignedBuf>,
    /// Buffers given back while replies still hold them: the pool keeps a
    /// reference, so the last one dropped (on whichever shard sent the
    /// reply) leaves the buffer to this pool, reused instead of freed and
    /// faulted in afresh for the next read.
    lent: Vec<std::sync::Arc<AlignedBuf>>,
    stats: PoolStats,
    idle_bytes_max: u64,
    /// Outstanding bytes past which users take only what they must.
    budget_bytes: u64,
}

/// A per-shard pool of aligned buffers. Cloning shares the pool (one shard,
/// one thread: `Rc`, never sent).
#[derive(Debug, Clone)]
pub struct BufferPool {
    state: Rc<RefCell<PoolState>>,
}

impl BufferPool {
    /// A pool that keeps at most `idle_bytes_max` bytes of idle buffers,
    /// with no budget.
    pub fn new(idle_bytes_max: u64) -> BufferPool {
        BufferPool::with_budget(idle_bytes_max, u64::MAX)
    }

    /// A pool whose users stop taking more than they must (larger write
    /// buffers ahead of need, read windows beyond the span a poll wants)
    /// once `budget_bytes` are handed out: a shard's share of
    /// `memory.budget`.
    pub fn with_budget(idle_bytes_max: u64, budget_bytes: u64) -> BufferPool {
        BufferPool {
            state: Rc::new(RefCell::new(PoolState {
                idle_bytes_max,
                budget_bytes,
                ..PoolState::default()
            })),
        }
    }

    /// Whether `bytes` more can be handed out within the budget.
    pub fn has_room(&self, bytes: usize) -> bool {
        let state = self.state.borrow();
        state.stats.outstanding_bytes.saturating_add(bytes as u64) <= state.budget_bytes
    }

    /// An empty buffer of at least `capacity` bytes: the smallest idle one
    /// that fits and is not more than twice as large, else a new one.
    pub fn take(&self, capacity: usize) -> AlignedBuf {
        let mut state = self.state.borrow_mut();
        state.reclaim_lent();
        let wanted = align_up(capacity.max(1) as u64) as usize;
        let best = state
            .idle
            .iter()
            .enumerate()
            .filter(|(_, buf)| buf.capacity() >= wanted && buf.capacity() <= wanted * 2)
            .min_by_key(|(_, buf)| buf.capacity())
            .map(|(at, _)| at);
        let buf = match best {
            Some(at) => {
                let buf = state.idle.swap_remove(at);
                state.stats.idle_bytes -= buf.capacity() as u64;
                state.stats.reuses += 1;
                buf
            }
            None => {
                state.stats.allocations += 1;
                AlignedBuf::with_capacity(wanted)
            }
        };
        state.stats.outstanding_bytes += buf.capacity() as u64;
        buf
    }

    /// Returns a buffer taken from this pool. It is kept for reuse while the
    /// idle bytes stay under the pool's cap, else freed.
    pub fn give(&self, buf: AlignedBuf) {
        self.state.borrow_mut().give(buf);
    }

    /// Gives back a buffer taken from this pool that poll replies may still
    /// be sending from: returned to the idle list once they are all done
    /// (checked whenever a buffer is taken or the pool trimmed), counted
    /// as outstanding until then.
    pub fn give_shared(&self, buf: std::sync::Arc<AlignedBuf>) {
        let mut state = self.state.borrow_mut();
        match std::sync::Arc::try_unwrap(buf) {
            Ok(buf) => state.give(buf),
            Err(shared) => {
                state.stats.lent_bytes += shared.capacity() as u64;
                state.lent.push(shared);
            }
        }
    }

    /// Stops accounting for a buffer taken from this pool that will not come
    /// back (shared with replies that free it wherever they finish).
    pub fn forget(&self, capacity: usize) {
        let mut state = self.state.borrow_mut();
        state.stats.outstanding_bytes = state
            .stats
            .outstanding_bytes
            .saturating_sub(capacity as u64);
    }

    /// Frees every idle buffer (after a burst, so memory returns to the
    /// system). Returns the bytes freed.
    pub fn trim(&self) -> u64 {
        let mut state = self.state.borrow_mut();
        state.reclaim_lent();
        let freed = state.stats.idle_bytes;
        state.idle.clear();
        state.stats.idle_bytes = 0;
        freed
    }

    pub fn stats(&self) -> PoolStats {
        self.state.borrow().stats
    }
}

impl PoolState {
    fn give(&mut self, mut buf: AlignedBuf) {
        buf.poison();
        let bytes = buf.capacity() as u64;
        self.stats.outstanding_bytes = self.stats.outstanding_bytes.saturating_sub(bytes);
        if self.stats.idle_bytes + bytes <= self.idle_bytes_max {
            self.stats.idle_bytes += bytes;
            self.idle.push(buf);
        }
    }

    /// Takes back the lent buffers no reply holds any more.
    fn reclaim_lent(&mut self) {
        if self.lent.is_empty() {
            return;
        }
        for shared in std::mem::take(&mut self.lent) {
            let capacity = shared.capacity() as u64;
            match std::sync::Arc::try_unwrap(shared) {
                Ok(buf) => {
                    self.stats.lent_bytes = self.stats.lent_bytes.saturating_sub(capacity);
                    self.give(buf);
                }
                Err(shared) => self.lent.push(shared),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Buffers are aligned in address and capacity, keep their bytes, and a
    // partial block moves to the front with `keep_from`.
    #[test]
    fn aligned_buffers_hold_bytes() {
        let mut buf = AlignedBuf::with_capacity(5000);
        assert_eq!(buf.capacity(), 8192);
        assert_eq!(buf.as_slice().as_ptr() as usize % IO_ALIGN, 0);
        buf.extend_from_slice(&[7u8; 4100]);
        buf.zero_extend_to(8192);
        assert_eq!(buf.len(), 8192);
        assert_eq!(buf.as_slice()[4099], 7);
        assert_eq!(buf.as_slice()[4100], 0);
        buf.truncate(4100);
        buf.keep_from(4096);
        assert_eq!(buf.as_slice(), &[7, 7, 7, 7]);
        assert_eq!(align_down(4097), 4096);
        assert_eq!(align_up(4097), 8192);
        assert_eq!(align_up(4096), 4096);
        assert_eq!(align_up(0), 0);
    }

    // A recycled buffer comes back poisoned (debug and test builds), so a
    // stale read of its old bytes shows as the poison byte, not as data.
    #[test]
    fn recycled_buffers_are_poisoned() {
        let pool = BufferPool::new(1 << 20);
        let mut buf = pool.take(8192);
        buf.extend_from_slice(&[7u8; 8192]);
        let address = buf.as_slice().as_ptr();
        pool.give(buf);
        let mut again = pool.take(8192);
        assert_eq!(
            again.as_slice().as_ptr(),
            address,
            "the idle buffer is reused"
        );
        assert!(again.is_empty());
        let capacity = again.capacity();
        // SAFETY: the whole capacity is allocated, and `poison` wrote it.
        let raw = unsafe {
            std::slice::from_raw_parts(monoio::buf::IoBufMut::write_ptr(&mut again), capacity)
        };
        assert!(raw.iter().all(|&byte| byte == POISON_BYTE));
    }

    // The pool reuses a fitting idle buffer, accounts outstanding and idle
    // bytes, respects its idle cap, and trims.
    #[test]
    fn pool_reuses_accounts_and_trims() {
        let pool = BufferPool::new(64 * 1024);
        let first = pool.take(10_000);
        assert_eq!(first.capacity(), 12_288);
        assert_eq!(pool.stats().outstanding_bytes, 12_288);
        pool.give(first);
        assert_eq!(pool.stats().idle_bytes, 12_288);
        let again = pool.take(9_000);
        assert_eq!(again.capacity(), 12_288);
        assert_eq!(pool.stats().reuses, 1);
        let big = pool.take(1 << 20);
        pool.give(big);
        assert_eq!(pool.stats().idle_bytes, 0, "over the idle cap: freed");
        pool.give(again);
        assert_eq!(pool.trim(), 12_288);
        assert_eq!(pool.stats().outstanding_bytes, 0);
    }

    // A buffer given back while a reply still sends from it stays counted
    // until the reply is done (dropped on another thread, as a reply sent
    // by another shard is), then is reused instead of allocated again.
    #[test]
    fn shared_buffers_come_back_when_their_last_reply_is_done() {
        let pool = BufferPool::new(1 << 20);
        let mut buf = pool.take(8192);
        buf.extend_from_slice(&[1u8; 8192]);
        let address = buf.as_slice().as_ptr();
        let shared = std::sync::Arc::new(buf);
        let reply = SharedSlice::new(shared.clone(), 100..200);
        pool.give_shared(shared);
        let stats = pool.stats();
        assert_eq!((stats.lent_bytes, stats.outstanding_bytes), (8192, 8192));
        assert_eq!(stats.idle_bytes, 0);
        assert_eq!(pool.trim(), 0, "a lent buffer is not idle");
        assert_eq!(reply.as_slice(), &[1u8; 100], "the reply's bytes stay");
        std::thread::spawn(move || drop(reply)).join().unwrap();
        let again = pool.take(8000);
        assert_eq!(again.as_slice().as_ptr(), address, "reused, not allocated");
        let stats = pool.stats();
        assert_eq!((stats.allocations, stats.reuses), (1, 1));
        assert_eq!((stats.lent_bytes, stats.outstanding_bytes), (0, 8192));
        // Unshared, it goes straight to the idle list.
        pool.give_shared(std::sync::Arc::new(again));
        let stats = pool.stats();
        assert_eq!((stats.idle_bytes, stats.outstanding_bytes), (8192, 0));
        // Lent and done by the time the pool trims: freed with the idle.
        let shared = std::sync::Arc::new(pool.take(8192));
        let reply = SharedSlice::new(shared.clone(), 0..0);
        pool.give_shared(shared);
        drop(reply);
        assert_eq!(pool.trim(), 8192);
        assert_eq!(pool.stats().outstanding_bytes, 0);
    }
}
