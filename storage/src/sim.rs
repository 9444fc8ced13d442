//! A simulated disk for deterministic tests of storage (and later the pump).
//!
//! This file owns [`SimIo`], an in-memory [`StorageIo`] with a seeded PRNG
//! that models what a real disk does to unsynced data on power loss, plus
//! [`SimClock`], [`SimRng`] and a trivial [`block_on`]. It must stay
//! deterministic: no wall clock, no OS randomness, no hash-order iteration.
//!
//! Model:
//! * Each file has *durable* contents (as of its last successful fsync) and
//!   *current* contents (what reads see). [`SimIo::crash`] replaces current
//!   by durable; with tearing enabled a file may instead keep a random
//!   prefix of its unsynced tail (a torn write).
//! * A file created since the last [`StorageIo::sync_dir`] of its directory
//!   disappears on crash. Removals and renames are durable at once (a
//!   simplification: a removed segment never comes back, and a renamed file
//!   keeps its new name, whatever its contents).
//! * Directories are a set of paths, created durably by
//!   [`StorageIo::create_dir_all`]; `list_dir` shows files and
//!   subdirectories; a directory renames with everything under it (durable
//!   at once, like a file rename); `remove_dir` needs it empty
//!   (`ENOTEMPTY`), and `remove_file` on one is `EISDIR`, as on Linux.
//! * [`SimIo::set_immutable`] models `chattr +i`: an immutable file cannot
//!   be removed, renamed or written (`EPERM`); an immutable directory
//!   cannot be removed or renamed, and no entry can be added to or removed
//!   from it. [`SimIo::set_unlink_failures`] makes removals (`remove_file`,
//!   `remove_dir`) fail with `EIO` at a seeded rate, like a failing disk.
//! * Faults: [`SimIo::flip_bit`] (both copies), [`SimIo::fail_next_fsync`]
//!   and [`SimIo::fail_fsync_after`] (EIO, on a file or a directory; with a
//!   crash after it this is a crash at that point of a write sequence),
//!   [`SimIo::set_capacity`] (writes past it store what fits and fail with
//!   ENOSPC).
//!
//! Storage (`StorageIo`) and the metadata store (`metadata::io::SimDirIo`,
//! which drives this disk through the same operations) share this model.
//! * Handles opened before a crash fail with EBADF afterwards, so a test
//!   cannot keep using a "dead process"'s files.
//! * Direct I/O: a file opened with [`Access::Direct`] accepts only writes
//!   and reads whose position, length and buffer address are multiples of
//!   [`IO_ALIGN`] (else `EINVAL`, as the kernel answers), and a torn write on
//!   such a file keeps whole 512-byte sectors only. [`SimIo::set_direct_supported`]
//!   makes direct opens fail like a file system without `O_DIRECT` (tmpfs).
//! * [`SimIo::hold_syncs`] keeps fsyncs pending (their futures return
//!   `Pending`) until released (which wakes their tasks), so a test can
//!   crash with a sync in flight: a held sync makes durable what the file
//!   held when it was first polled.
//! * [`SimIo::hold_reads`] keeps the reads of read windows
//!   (`read_at_most`) pending until released: a disk read in flight.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use monoio::buf::{IoBuf, IoBufMut};

use super::buf::{AlignedBuf, IO_ALIGN};
use super::io::{Access, OpenMode, StorageIo};
use super::partition_log::Clock;

/// xorshift64* seeded through splitmix64: small, fast, deterministic.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        SimRng { state: z | 1 }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0);
        self.next_u64() % bound
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high);
        low + self.below(high - low + 1)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for byte in bytes {
            *byte = self.next_u64() as u8;
        }
    }
}

/// A settable clock (µs) shared by clones.
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    now_micros: Rc<Cell<u64>>,
}

impl SimClock {
    pub fn new(start_micros: u64) -> SimClock {
        SimClock {
            now_micros: Rc::new(Cell::new(start_micros)),
        }
    }

    pub fn set(&self, micros: u64) {
        self.now_micros.set(micros);
    }

    pub fn advance(&self, micros: u64) {
        self.now_micros.set(self.now_micros.get() + micros);
    }
}

impl Clock for SimClock {
    fn now_micros(&self) -> u64 {
        self.now_micros.get()
    }
}

/// Runs a future that never waits on anything outside itself (all SimIo
/// futures complete on first poll) to completion.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
    panic!("block_on: future did not complete; SimIo futures must never pend");
}

#[derive(Debug, Default)]
struct SimFile {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// The directory entry survives a crash (dir synced since creation).
    linked_durable: bool,
    /// Written through a direct handle since the last sync: tears keep
    /// whole sectors only.
    written_direct: bool,
    /// Completed fsyncs of this file: a held sync whose snapshot is older
    /// than a sync that completed meanwhile makes nothing newer durable.
    syncs_completed: u64,
    /// Removed (or replaced by a rename) while handles may still be open:
    /// as on a real file system those handles keep working; the name is
    /// gone, the space counts as free, and a crash drops the inode.
    unlinked: bool,
}

/// Sector size a torn direct write keeps whole.
const SECTOR_SIZE: u64 = 512;

#[derive(Debug)]
struct SimDisk {
    rng: SimRng,
    /// inode → file.
    files: BTreeMap<u64, SimFile>,
    /// path → inode.
    names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    next_inode: u64,
    generation: u64,
    capacity_bytes: Option<u64>,
    /// Successful fsyncs left before one fails with EIO.
    fsyncs_until_failure: Option<u64>,
    torn_writes: bool,
    direct_supported: bool,
    syncs_held: bool,
    reads_held: bool,
    /// The tasks waiting on a held sync or read, woken when it is released
    /// (a real executor polls a pending future again only when woken).
    held_wakers: Vec<Waker>,
    /// Paths made immutable (`chattr +i`).
    immutable: BTreeSet<PathBuf>,
    /// Removals fail with EIO with probability `numerator / denominator`.
    unlink_failures: Option<(u64, u64)>,
    stats: SimStats,
}

/// Counters a test can assert on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SimStats {
    pub writes: u64,
    pub reads: u64,
    /// Bytes the reads returned.
    pub read_bytes: u64,
    pub fsyncs: u64,
    pub crashes: u64,
    pub torn_files: u64,
}

impl SimDisk {
    /// Remembers a task waiting on a held sync or read (once).
    fn wait_held(&mut self, waker: &Waker) {
        if !self.held_wakers.iter().any(|held| held.will_wake(waker)) {
            self.held_wakers.push(waker.clone());
        }
    }

    /// Counts an fsync down towards the armed failure.
    fn injected_fsync_failure(&mut self) -> io::Result<()> {
        match self.fsyncs_until_failure {
            Some(0) => {
                self.fsyncs_until_failure = None;
                Err(os_error(libc::EIO))
            }
            Some(left) => {
                self.fsyncs_until_failure = Some(left - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn used_bytes(&self) -> u64 {
        self.files
            .values()
            .filter(|file| !file.unlinked)
            .map(|file| file.current.len() as u64)
            .sum()
    }

    /// EPERM when `path` is immutable or sits in an immutable directory
    /// (its entry can then be neither removed nor renamed).
    fn check_entry_mutable(&self, path: &Path) -> io::Result<()> {
        let parent_immutable = path
            .parent()
            .is_some_and(|parent| self.immutable.contains(parent));
        if self.immutable.contains(path) || parent_immutable {
            return Err(os_error(libc::EPERM));
        }
        Ok(())
    }

    /// An injected removal failure (EIO), at the configured rate.
    fn injected_unlink_failure(&mut self) -> io::Result<()> {
        if let Some((numerator, denominator)) = self.unlink_failures
            && self.rng.chance(numerator, denominator)
        {
            return Err(os_error(libc::EIO));
        }
        Ok(())
    }

    /// Whether anything (file or directory) lives directly in `path`.
    fn has_children(&self, path: &Path) -> bool {
        self.names.keys().any(|name| name.parent() == Some(path))
            || self.dirs.iter().any(|dir| dir.parent() == Some(path))
    }
}

/// `path` with its prefix `from` replaced by `to` (`path` starts with
/// `from`).
fn moved(path: &Path, from: &Path, to: &Path) -> PathBuf {
    match path.strip_prefix(from) {
        Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
        Ok(rest) => to.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// Handle to a simulated open file.
#[derive(Debug)]
pub struct SimFileHandle {
    inode: u64,
    generation: u64,
    path: PathBuf,
    access: Access,
}

/// The simulated disk. Clones share the same disk.
#[derive(Debug, Clone)]
pub struct SimIo {
    disk: Rc<RefCell<SimDisk>>,
}

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl SimIo {
    pub fn new(seed: u64) -> SimIo {
        SimIo {
            disk: Rc::new(RefCell::new(SimDisk {
                rng: SimRng::new(seed),
                files: BTreeMap::new(),
                names: BTreeMap::new(),
                dirs: BTreeSet::new(),
                next_inode: 1,
                generation: 0,
                capacity_bytes: None,
                fsyncs_until_failure: None,
                torn_writes: false,
                direct_supported: true,
                syncs_held: false,
                reads_held: false,
                held_wakers: Vec::new(),
                immutable: BTreeSet::new(),
                unlink_failures: None,
                stats: SimStats::default(),
            })),
        }
    }

    /// Enables torn writes on [`SimIo::crash`].
    pub fn set_torn_writes(&self, enabled: bool) {
        self.disk.borrow_mut().torn_writes = enabled;
    }

    /// Whether direct opens succeed (false: `EINVAL`, like tmpfs).
    pub fn set_direct_supported(&self, supported: bool) {
        self.disk.borrow_mut().direct_supported = supported;
    }

    /// While held, file fsyncs stay pending (see the module doc).
    pub fn hold_syncs(&self, held: bool) {
        self.disk.borrow_mut().syncs_held = held;
        self.wake_held();
    }

    /// While held, window reads stay pending (see the module doc).
    pub fn hold_reads(&self, held: bool) {
        self.disk.borrow_mut().reads_held = held;
        self.wake_held();
    }

    /// Wakes every task that waited on a held sync or read (those still
    /// held wait again).
    fn wake_held(&self) {
        let wakers = std::mem::take(&mut self.disk.borrow_mut().held_wakers);
        for waker in wakers {
            waker.wake();
        }
    }

    /// `chattr +i` (`true`) or `chattr -i` (`false`) on a file or directory.
    pub fn set_immutable(&self, path: &Path, immutable: bool) {
        let mut disk = self.disk.borrow_mut();
        if immutable {
            disk.immutable.insert(path.to_path_buf());
        } else {
            disk.immutable.remove(path);
        }
    }

    /// Every path made immutable, for a test's teardown.
    pub fn immutable_paths(&self) -> Vec<PathBuf> {
        self.disk.borrow().immutable.iter().cloned().collect()
    }

    /// Removals (`remove_file`, `remove_dir`) fail with EIO with
    /// probability `numerator / denominator`; `None` stops it.
    pub fn set_unlink_failures(&self, rate: Option<(u64, u64)>) {
        self.disk.borrow_mut().unlink_failures = rate;
    }

    /// Whether a directory exists (test helper).
    pub fn dir_exists(&self, path: &Path) -> bool {
        self.disk.borrow().dirs.contains(path)
    }

    /// Every file path under `root`, sorted (test helper).
    pub fn files_under(&self, root: &Path) -> Vec<PathBuf> {
        let disk = self.disk.borrow();
        disk.names
            .keys()
            .filter(|name| name.starts_with(root))
            .cloned()
            .collect()
    }

    /// Limits the total bytes of all files; `None` removes the limit.
    pub fn set_capacity(&self, capacity_bytes: Option<u64>) {
        self.disk.borrow_mut().capacity_bytes = capacity_bytes;
    }

    pub fn used_bytes(&self) -> u64 {
        self.disk.borrow().used_bytes()
    }

    /// The next fsync (file or directory) fails with EIO.
    pub fn fail_next_fsync(&self) {
        self.fail_fsync_after(0);
    }

    /// After `successes` more successful fsyncs (file or directory), the
    /// next one fails with EIO. A crash disarms it.
    pub fn fail_fsync_after(&self, successes: u64) {
        self.disk.borrow_mut().fsyncs_until_failure = Some(successes);
    }

    /// Current contents of a file by path (test helper).
    pub fn contents_of(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.borrow();
        let inode = disk.names.get(path)?;
        Some(disk.files[inode].current.clone())
    }

    pub fn stats(&self) -> SimStats {
        self.disk.borrow().stats
    }

    /// Power loss: every file reverts to its durable contents (or, with torn
    /// writes, keeps a random prefix of its unsynced tail); files whose
    /// directory entry was never synced vanish; open handles die.
    pub fn crash(&self) {
        let mut disk = self.disk.borrow_mut();
        let disk = &mut *disk;
        disk.generation += 1;
        disk.stats.crashes += 1;
        let torn_writes = disk.torn_writes;
        let mut vanished = Vec::new();
        for (inode, file) in disk.files.iter_mut() {
            if !file.linked_durable || file.unlinked {
                vanished.push(*inode);
                continue;
            }
            let common = file
                .durable
                .iter()
                .zip(file.current.iter())
                .take_while(|(a, b)| a == b)
                .count();
            let mut keep = None;
            if torn_writes && file.current.len() > common && disk.rng.chance(1, 2) {
                let mut len = disk.rng.range(common as u64 + 1, file.current.len() as u64);
                if file.written_direct {
                    // A device writes whole sectors: a torn direct write
                    // keeps the sectors that made it, all or nothing each
                    // (and never loses the bytes before it, which both the
                    // durable and the new contents hold).
                    len = (len / SECTOR_SIZE * SECTOR_SIZE).max(common as u64);
                }
                keep = Some(len as usize);
            }
            match keep {
                Some(len) => {
                    file.current.truncate(len);
                    file.durable = file.current.clone();
                    disk.stats.torn_files += 1;
                }
                None => file.current = file.durable.clone(),
            }
            file.written_direct = false;
        }
        for inode in vanished {
            disk.files.remove(&inode);
            disk.names.retain(|_, value| *value != inode);
        }
        disk.fsyncs_until_failure = None;
    }

    /// Flips one bit of a file in both its durable and current contents
    /// (bit rot). Returns false if the file or byte does not exist.
    pub fn flip_bit(&self, path: &Path, position: u64, bit: u8) -> bool {
        let mut disk = self.disk.borrow_mut();
        let Some(inode) = disk.names.get(path).copied() else {
            return false;
        };
        let file = disk
            .files
            .get_mut(&inode)
            .expect("name points at a live inode");
        let position = position as usize;
        let mask = 1u8 << (bit % 8);
        let mut flipped = false;
        if let Some(byte) = file.current.get_mut(position) {
            *byte ^= mask;
            flipped = true;
        }
        if let Some(byte) = file.durable.get_mut(position) {
            *byte ^= mask;
        }
        flipped
    }

    /// Current length of a file by path (test helper).
    pub fn len_of(&self, path: &Path) -> Option<u64> {
        let disk = self.disk.borrow();
        let inode = disk.names.get(path)?;
        Some(disk.files[inode].current.len() as u64)
    }

    /// Replaces a file's contents, durable at once (test helper for
    /// corruption scenarios such as a deleted or short index).
    pub fn set_contents(&self, path: &Path, contents: Vec<u8>) {
        let mut disk = self.disk.borrow_mut();
        let disk = &mut *disk;
        let inode = match disk.names.get(path) {
            Some(inode) => *inode,
            None => {
                let inode = disk.next_inode;
                disk.next_inode += 1;
                disk.names.insert(path.to_path_buf(), inode);
                inode
            }
        };
        disk.files.insert(
            inode,
            SimFile {
                durable: contents.clone(),
                current: contents,
                linked_durable: true,
                written_direct: false,
                syncs_completed: 0,
                unlinked: false,
            },
        );
    }

    /// Removes a file at once, durably (test helper).
    pub fn remove_now(&self, path: &Path) -> bool {
        let mut disk = self.disk.borrow_mut();
        match disk.names.remove(path) {
            Some(inode) => {
                disk.files.remove(&inode);
                true
            }
            None => false,
        }
    }

    fn with_file<T>(
        &self,
        handle: &SimFileHandle,
        f: impl FnOnce(&mut SimDisk, u64) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut disk = self.disk.borrow_mut();
        if handle.generation != disk.generation || !disk.files.contains_key(&handle.inode) {
            return Err(os_error(libc::EBADF));
        }
        f(&mut disk, handle.inode)
    }
}

impl StorageIo for SimIo {
    type File = SimFileHandle;

    async fn open_with(
        &self,
        path: &Path,
        mode: OpenMode,
        access: Access,
    ) -> io::Result<SimFileHandle> {
        let mut disk = self.disk.borrow_mut();
        let disk = &mut *disk;
        if access == Access::Direct && !disk.direct_supported {
            return Err(os_error(libc::EINVAL));
        }
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
            && !disk.dirs.contains(parent)
        {
            return Err(os_error(libc::ENOENT));
        }
        let inode = match (disk.names.get(path).copied(), mode) {
            (Some(inode), OpenMode::CreateTruncate) => {
                let file = disk.files.get_mut(&inode).expect("live inode");
                file.current.clear();
                inode
            }
            (Some(inode), _) => inode,
            (None, OpenMode::Existing) => return Err(os_error(libc::ENOENT)),
            (None, _)
                if path
                    .parent()
                    .is_some_and(|parent| disk.immutable.contains(parent)) =>
            {
                return Err(os_error(libc::EPERM));
            }
            (None, _) if disk.dirs.contains(path) => return Err(os_error(libc::EISDIR)),
            (None, _) => {
                let inode = disk.next_inode;
                disk.next_inode += 1;
                disk.names.insert(path.to_path_buf(), inode);
                disk.files.insert(inode, SimFile::default());
                inode
            }
        };
        Ok(SimFileHandle {
            inode,
            generation: disk.generation,
            path: path.to_path_buf(),
            access,
        })
    }

    async fn write_at<B: IoBuf>(
        &self,
        file: &SimFileHandle,
        buf: B,
        position: u64,
    ) -> (io::Result<()>, B) {
        // SAFETY: an `IoBuf` promises `bytes_init` initialised bytes at
        // `read_ptr` while it is borrowed.
        let bytes = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
        if file.access == Access::Direct && !direct_aligned(position, bytes.len(), bytes.as_ptr()) {
            return (Err(os_error(libc::EINVAL)), buf);
        }
        let result = self.with_file(file, |disk, inode| {
            let buf = bytes;
            disk.stats.writes += 1;
            let used = disk.used_bytes();
            let content_len = disk.files[&inode].current.len() as u64;
            let end = position + buf.len() as u64;
            let growth = end.saturating_sub(content_len);
            let mut allowed = buf.len();
            let mut no_space = false;
            if let Some(capacity) = disk.capacity_bytes
                && used + growth > capacity
            {
                let room = capacity.saturating_sub(used);
                let fits_end = content_len + room;
                allowed = fits_end.saturating_sub(position).min(buf.len() as u64) as usize;
                no_space = true;
            }
            let sim_file = disk.files.get_mut(&inode).expect("live inode");
            if file.access == Access::Direct {
                sim_file.written_direct = true;
            }
            let current = &mut sim_file.current;
            let write_end = position as usize + allowed;
            if current.len() < write_end {
                current.resize(write_end, 0);
            }
            current[position as usize..write_end].copy_from_slice(&buf[..allowed]);
            if no_space {
                Err(os_error(libc::ENOSPC))
            } else {
                Ok(())
            }
        });
        (result, buf)
    }

    async fn read_exact_into<B: IoBufMut>(
        &self,
        file: &SimFileHandle,
        mut buf: B,
        position: u64,
    ) -> (io::Result<()>, B) {
        let len = buf.bytes_total();
        let target = buf.write_ptr();
        if file.access == Access::Direct && !direct_aligned(position, len, target) {
            return (Err(os_error(libc::EINVAL)), buf);
        }
        let read = self.read_exact_at(file, position, len).await;
        match read {
            Ok(bytes) => {
                // SAFETY: `write_ptr` has room for `bytes_total` bytes, and
                // `bytes` has exactly that many.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, len);
                    buf.set_init(len);
                }
                (Ok(()), buf)
            }
            Err(error) => (Err(error), buf),
        }
    }

    async fn read_at_most(
        &self,
        file: &SimFileHandle,
        mut buf: AlignedBuf,
        position: u64,
        len: usize,
    ) -> (io::Result<usize>, AlignedBuf) {
        std::future::poll_fn(|context| {
            let mut disk = self.disk.borrow_mut();
            if disk.reads_held {
                disk.wait_held(context.waker());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        let held = buf.len();
        let len = len.min(buf.remaining());
        // SAFETY: `held` ≤ capacity, so the pointer stays inside the buffer.
        let target = unsafe { buf.write_ptr().add(held) };
        if file.access == Access::Direct && !direct_aligned(position, len, target) {
            return (Err(os_error(libc::EINVAL)), buf);
        }
        let read = self.with_file(file, |disk, inode| {
            disk.stats.reads += 1;
            let current = &disk.files[&inode].current;
            let start = (position as usize).min(current.len());
            let end = (start + len).min(current.len());
            disk.stats.read_bytes += (end - start) as u64;
            Ok(current[start..end].to_vec())
        });
        match read {
            Ok(bytes) => {
                // SAFETY: `target` has room for `len` bytes after the held
                // ones, and `bytes` holds at most that many.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len());
                    buf.set_init(held + bytes.len());
                }
                (Ok(bytes.len()), buf)
            }
            Err(error) => (Err(error), buf),
        }
    }

    async fn read_exact_at(
        &self,
        file: &SimFileHandle,
        position: u64,
        len: usize,
    ) -> io::Result<Vec<u8>> {
        if file.access == Access::Direct && len > 0 {
            // A plain `Vec` is not aligned: the kernel would refuse.
            return Err(os_error(libc::EINVAL));
        }
        self.with_file(file, |disk, inode| {
            disk.stats.reads += 1;
            let current = &disk.files[&inode].current;
            let end = position.checked_add(len as u64);
            match end {
                Some(end) if end <= current.len() as u64 => {
                    disk.stats.read_bytes += len as u64;
                    Ok(current[position as usize..end as usize].to_vec())
                }
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                )),
            }
        })
    }

    async fn sync(&self, file: &SimFileHandle) -> io::Result<()> {
        // What the file held when the sync was first polled: a sync that
        // is held pending makes exactly that durable.
        let mut snapshot: Option<(Vec<u8>, u64)> = None;
        std::future::poll_fn(|context| {
            let held = self.disk.borrow().syncs_held;
            let result = self.with_file(file, |disk, inode| {
                if held {
                    if snapshot.is_none() {
                        let file = &disk.files[&inode];
                        snapshot = Some((file.current.clone(), file.syncs_completed));
                    }
                    disk.wait_held(context.waker());
                    return Ok(false);
                }
                disk.stats.fsyncs += 1;
                disk.injected_fsync_failure()?;
                let file = disk.files.get_mut(&inode).expect("live inode");
                match snapshot.take() {
                    // A sync that completed meanwhile made newer contents
                    // durable; this one adds nothing.
                    Some((_, completed)) if completed != file.syncs_completed => {}
                    Some((contents, _)) => file.durable = contents,
                    None => {
                        file.durable = file.current.clone();
                        file.written_direct = false;
                    }
                }
                file.syncs_completed += 1;
                Ok(true)
            });
            match result {
                Ok(false) => Poll::Pending,
                Ok(true) => Poll::Ready(Ok(())),
                Err(error) => Poll::Ready(Err(error)),
            }
        })
        .await
    }

    async fn truncate(&self, file: &SimFileHandle, len: u64) -> io::Result<()> {
        self.with_file(file, |disk, inode| {
            let current = &mut disk.files.get_mut(&inode).expect("live inode").current;
            current.resize(len as usize, 0);
            Ok(())
        })
    }

    async fn file_len(&self, file: &SimFileHandle) -> io::Result<u64> {
        self.with_file(file, |disk, inode| {
            Ok(disk.files[&inode].current.len() as u64)
        })
    }

    async fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        if disk.dirs.contains(path) {
            return Err(os_error(libc::EISDIR));
        }
        if !disk.names.contains_key(path) {
            return Err(os_error(libc::ENOENT));
        }
        disk.check_entry_mutable(path)?;
        disk.injected_unlink_failure()?;
        if let Some(inode) = disk.names.remove(path)
            && let Some(file) = disk.files.get_mut(&inode)
        {
            file.unlinked = true;
        }
        Ok(())
    }

    async fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        if !disk.dirs.contains(path) {
            return Err(os_error(if disk.names.contains_key(path) {
                libc::ENOTDIR
            } else {
                libc::ENOENT
            }));
        }
        if disk.has_children(path) {
            return Err(os_error(libc::ENOTEMPTY));
        }
        disk.check_entry_mutable(path)?;
        disk.injected_unlink_failure()?;
        disk.dirs.remove(path);
        Ok(())
    }

    async fn rename(&self, source: &Path, target: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        let disk = &mut *disk;
        if let Some(parent) = target.parent()
            && !parent.as_os_str().is_empty()
            && !disk.dirs.contains(parent)
        {
            return Err(os_error(libc::ENOENT));
        }
        if disk.dirs.contains(source) {
            if target.starts_with(source) {
                return Err(os_error(libc::EINVAL));
            }
            if disk.names.contains_key(target) {
                return Err(os_error(libc::ENOTDIR));
            }
            if disk.dirs.contains(target) && disk.has_children(target) {
                return Err(os_error(libc::ENOTEMPTY));
            }
            disk.check_entry_mutable(source)?;
            disk.check_entry_mutable(target)?;
            // The directory and everything under it move (durably, like a
            // file rename).
            let dirs: Vec<PathBuf> = disk
                .dirs
                .iter()
                .filter(|dir| dir.starts_with(source))
                .cloned()
                .collect();
            for dir in dirs {
                disk.dirs.remove(&dir);
                disk.dirs.insert(moved(&dir, source, target));
            }
            let names: Vec<(PathBuf, u64)> = disk
                .names
                .iter()
                .filter(|(name, _)| name.starts_with(source))
                .map(|(name, inode)| (name.clone(), *inode))
                .collect();
            for (name, inode) in names {
                disk.names.remove(&name);
                disk.names.insert(moved(&name, source, target), inode);
            }
            let immutable: Vec<PathBuf> = disk
                .immutable
                .iter()
                .filter(|path| path.starts_with(source))
                .cloned()
                .collect();
            for path in immutable {
                disk.immutable.remove(&path);
                disk.immutable.insert(moved(&path, source, target));
            }
            return Ok(());
        }
        if !disk.names.contains_key(source) {
            return Err(os_error(libc::ENOENT));
        }
        if disk.dirs.contains(target) {
            return Err(os_error(libc::EISDIR));
        }
        disk.check_entry_mutable(source)?;
        disk.check_entry_mutable(target)?;
        let inode = disk
            .names
            .remove(source)
            .ok_or_else(|| os_error(libc::ENOENT))?;
        if let Some(replaced) = disk.names.insert(target.to_path_buf(), inode)
            && let Some(file) = disk.files.get_mut(&replaced)
        {
            file.unlinked = true;
        }
        // The rename is durable at once, so the entry it made is too.
        if let Some(file) = disk.files.get_mut(&inode) {
            file.linked_durable = true;
        }
        Ok(())
    }

    async fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let disk = self.disk.borrow();
        if !disk.dirs.contains(path) {
            return Err(os_error(libc::ENOENT));
        }
        let files = disk.names.keys().filter(|name| name.parent() == Some(path));
        let dirs = disk.dirs.iter().filter(|dir| dir.parent() == Some(path));
        let mut names: Vec<String> = files
            .chain(dirs)
            .filter_map(|name| name.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    async fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        for ancestor in path.ancestors() {
            let new_in_immutable = !disk.dirs.contains(ancestor)
                && ancestor
                    .parent()
                    .is_some_and(|parent| disk.immutable.contains(parent));
            if new_in_immutable {
                return Err(os_error(libc::EPERM));
            }
        }
        for ancestor in path.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                disk.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    async fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.borrow_mut();
        let disk = &mut *disk;
        disk.stats.fsyncs += 1;
        disk.injected_fsync_failure()?;
        for (name, inode) in &disk.names {
            if name.parent() == Some(path)
                && let Some(file) = disk.files.get_mut(inode)
            {
                file.linked_durable = true;
            }
        }
        Ok(())
    }
}

impl SimFileHandle {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether a direct transfer at `position` of `len` bytes from or to
/// `address` satisfies `O_DIRECT`'s alignment.
fn direct_aligned(position: u64, len: usize, address: *const u8) -> bool {
    position.is_multiple_of(IO_ALIGN as u64)
        && len.is_multiple_of(IO_ALIGN)
        && (address as usize).is_multiple_of(IO_ALIGN)
}

#[cfg(test)]
mod tests;
