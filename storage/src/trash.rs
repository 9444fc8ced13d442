//! The trash: how deleted data leaves the disk. Deleting a partition,
//! purging one or deleting segments first *discards* the data: one rename
//! into `data_dir/trash/` (the entry gets a fresh, never-reused name), made
//! durable by fsyncing both parent directories. From then on no live path
//! names the data, so the delete can be acknowledged. The files are then
//! removed in the background, a bounded number per [`Trash::collect`] call,
//! through [`StorageIo`]; a removal that fails is retried with backoff and
//! reported ([`TrashStats`], a warning in the log), never fatal.
//!
//! An entry's life: *live* (under `partitions/`) → *trash* (renamed here,
//! durable) → *gone* (every file and directory removed). A crash at any
//! point leaves the entry whole in one of those places; start-up
//! (`layout::reconcile`) hands every entry found in `trash/` back to a
//! `Trash`. When the rename itself fails (an undeletable directory, a failing
//! disk) a caller whose data is already unreachable by other means (a
//! deleted partition, whose storage id metadata no longer lists) may
//! schedule the removal in place instead ([`Trash::schedule`]).
//!
//! This file owns entry naming, the janitor and its numbers. It must not
//! decide what is garbage (callers do), must not remove anything outside
//! what it was handed, and never panics on what it finds on disk.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};

use super::io::{OpenMode, StorageIo};

/// Directory of the trash inside the data directory.
pub const TRASH_DIR: &str = "trash";
/// Width of the zero-padded sequence number that starts an entry's name.
const SEQ_DIGITS: usize = 20;
/// A failed entry is retried after 1 s, then 2 s, 4 s, … up to this.
const RETRY_BACKOFF_MAX_US: u64 = 60_000_000;
const RETRY_BACKOFF_FIRST_US: u64 = 1_000_000;
/// Name collisions (left by a caller that did not seed the sequence from
/// the directory) are stepped over this many times before giving up.
const NAME_ATTEMPTS: u32 = 8;

/// `data_dir/trash`.
pub fn trash_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(TRASH_DIR)
}

/// The sequence number an entry name starts with (`<seq>.<label>`), if it
/// has one.
pub fn entry_seq(name: &str) -> Option<u64> {
    let (seq, _) = name.split_once('.')?;
    if seq.len() != SEQ_DIGITS {
        return None;
    }
    seq.parse().ok()
}

/// Something waiting to be removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRemoval {
    /// A file or a directory (removed with everything under it); inside
    /// `trash/`, or in place when it could not be moved there.
    pub path: PathBuf,
    /// Bytes of the files it held when it was handed over.
    pub bytes: u64,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Clock time (µs) before which it is not retried.
    pub retry_at_us: u64,
    pub last_error: Option<String>,
}

impl PendingRemoval {
    pub fn new(path: PathBuf, bytes: u64) -> PendingRemoval {
        PendingRemoval {
            path,
            bytes,
            attempts: 0,
            retry_at_us: 0,
            last_error: None,
        }
    }
}

/// What a trash reports: what is pending, what keeps failing, what went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrashStats {
    pub entries: u64,
    pub bytes: u64,
    /// Pending entries whose last attempt failed.
    pub failing: u64,
    pub removed_entries: u64,
    pub removed_bytes: u64,
    /// The most recent failure, with its path.
    pub last_error: Option<String>,
}

impl TrashStats {
    /// Sums the numbers of several trashes (the shards').
    pub fn add(&mut self, other: &TrashStats) {
        self.entries += other.entries;
        self.bytes += other.bytes;
        self.failing += other.failing;
        self.removed_entries += other.removed_entries;
        self.removed_bytes += other.removed_bytes;
        if other.last_error.is_some() {
            self.last_error.clone_from(&other.last_error);
        }
    }
}

/// Where a trash starts: the first sequence number it may use (above every
/// name already in `trash/`) and the entries it inherits.
#[derive(Debug, Clone, Default)]
pub struct TrashStart {
    pub next_seq: u64,
    pub pending: Vec<PendingRemoval>,
}

/// Why a discard did not happen, or did not become durable.
#[derive(Debug, thiserror::Error)]
pub enum DiscardError {
    /// The rename failed: the data is where it was, nothing changed.
    #[error("moving {path} to the trash failed: {source}")]
    NotMoved { path: PathBuf, source: io::Error },
    /// The rename happened but an fsync of a parent directory failed: a
    /// crash may bring either name back. The removal is scheduled anyway.
    #[error("moving {path} to the trash is not durable: {source}")]
    NotDurable { path: PathBuf, source: io::Error },
}

/// One shard's trash: the entries it must remove, in the order they came.
pub struct Trash<I: StorageIo> {
    io: I,
    dir: PathBuf,
    next_seq: u64,
    pending: VecDeque<PendingRemoval>,
    removed_entries: u64,
    removed_bytes: u64,
    last_error: Option<String>,
}

impl<I: StorageIo> std::fmt::Debug for Trash<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trash")
            .field("dir", &self.dir)
            .field("next_seq", &self.next_seq)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl<I: StorageIo> Trash<I> {
    pub fn new(io: I, data_dir: &Path, start: TrashStart) -> Trash<I> {
        Trash {
            io,
            dir: trash_dir(data_dir),
            next_seq: start.next_seq,
            pending: start.pending.into(),
            removed_entries: 0,
            removed_bytes: 0,
            last_error: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sequence number the next entry name gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether anything waits to be removed.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn pending(&self) -> impl Iterator<Item = &PendingRemoval> {
        self.pending.iter()
    }

    pub fn stats(&self) -> TrashStats {
        TrashStats {
            entries: self.pending.len() as u64,
            bytes: self.pending.iter().map(|entry| entry.bytes).sum(),
            failing: self
                .pending
                .iter()
                .filter(|entry| entry.last_error.is_some())
                .count() as u64,
            removed_entries: self.removed_entries,
            removed_bytes: self.removed_bytes,
            last_error: self.last_error.clone(),
        }
    }

    /// Renames `source` (a file or a directory) into the trash under a new
    /// name ending in `label`, and schedules its removal. Not durable until
    /// [`Self::make_durable`] fsyncs `source`'s directory and the trash.
    /// `Ok(None)` when `source` does not exist.
    pub async fn discard(
        &mut self,
        source: &Path,
        label: &str,
        bytes: u64,
    ) -> Result<Option<PathBuf>, DiscardError> {
        let not_moved = |source_error: io::Error| DiscardError::NotMoved {
            path: source.to_path_buf(),
            source: source_error,
        };
        self.io.create_dir_all(&self.dir).await.map_err(not_moved)?;
        let mut attempts = 0;
        loop {
            let target = self.dir.join(format!(
                "{:0width$}.{label}",
                self.next_seq,
                width = SEQ_DIGITS
            ));
            self.next_seq += 1;
            attempts += 1;
            match self.io.rename(source, &target).await {
                Ok(()) => {
                    self.pending
                        .push_back(PendingRemoval::new(target.clone(), bytes));
                    return Ok(Some(target));
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    // The source is missing (or, impossibly, the trash
                    // directory vanished): nothing to discard.
                    return match self.io.list_dir(&self.dir).await {
                        Ok(_) => Ok(None),
                        Err(_) => Err(not_moved(error)),
                    };
                }
                // A leftover entry of that name (a directory that is not
                // empty): step over it.
                Err(error)
                    if matches!(
                        error.raw_os_error(),
                        Some(libc::ENOTEMPTY) | Some(libc::EEXIST)
                    ) && attempts < NAME_ATTEMPTS => {}
                Err(error) => return Err(not_moved(error)),
            }
        }
    }

    /// Makes the discards out of `source_dir` durable: fsyncs it, then the
    /// trash directory.
    pub async fn make_durable(&self, source_dir: &Path) -> Result<(), DiscardError> {
        for dir in [source_dir, self.dir.as_path()] {
            self.io
                .sync_dir(dir)
                .await
                .map_err(|source| DiscardError::NotDurable {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        Ok(())
    }

    /// [`Self::discard`] and [`Self::make_durable`] for one file or
    /// directory.
    pub async fn discard_durably(
        &mut self,
        source: &Path,
        label: &str,
        bytes: u64,
    ) -> Result<Option<PathBuf>, DiscardError> {
        let moved = self.discard(source, label, bytes).await?;
        if moved.is_some()
            && let Some(parent) = source.parent()
        {
            self.make_durable(parent).await?;
        }
        Ok(moved)
    }

    /// Schedules the removal of `path` where it is (it could not be moved
    /// here; the caller guarantees nothing live is, or will ever be, under
    /// that path).
    pub fn schedule(&mut self, path: PathBuf, bytes: u64) {
        self.pending.push_back(PendingRemoval::new(path, bytes));
    }

    /// The janitor: removes pending entries (oldest first, skipping those
    /// waiting to be retried), at most `budget` files and directories per
    /// call. Returns how many it removed. A failure marks the entry for a
    /// retry later and moves on to the next one.
    pub async fn collect(&mut self, now_us: u64, mut budget: u64) -> u64 {
        let mut removed = 0;
        let mut index = 0;
        while budget > 0
            && let Some(entry) = self.pending.get(index)
        {
            if entry.retry_at_us > now_us {
                index += 1;
                continue;
            }
            let path = entry.path.clone();
            let before = budget;
            let outcome = remove_tree(&self.io, &path, &mut budget).await;
            removed += before - budget;
            match outcome {
                Ok(true) => {
                    let Some(entry) = self.pending.remove(index) else {
                        break;
                    };
                    self.removed_entries += 1;
                    self.removed_bytes += entry.bytes;
                    if entry.attempts > 0 {
                        tracing::info!(
                            path = %entry.path.display(),
                            bytes = entry.bytes,
                            attempts = entry.attempts,
                            "removed from the trash after earlier failures"
                        );
                    } else {
                        tracing::debug!(
                            path = %entry.path.display(),
                            bytes = entry.bytes,
                            "removed from the trash"
                        );
                    }
                }
                // Out of budget midway: go on next time.
                Ok(false) => break,
                Err((failed, error)) => {
                    let Some(entry) = self.pending.get_mut(index) else {
                        break;
                    };
                    entry.attempts += 1;
                    let backoff = RETRY_BACKOFF_FIRST_US
                        .saturating_mul(1 << (entry.attempts - 1).min(16))
                        .min(RETRY_BACKOFF_MAX_US);
                    entry.retry_at_us = now_us.saturating_add(backoff);
                    let message = format!("{}: {error}", failed.display());
                    if entry.attempts == 1 || entry.attempts.is_multiple_of(10) {
                        tracing::warn!(
                            path = %entry.path.display(),
                            bytes = entry.bytes,
                            attempts = entry.attempts,
                            retry_in_ms = backoff / 1000,
                            error = %message,
                            "could not remove data that was deleted; it is not served and will be retried"
                        );
                    }
                    entry.last_error = Some(message.clone());
                    self.last_error = Some(message);
                    index += 1;
                }
            }
        }
        removed
    }
}

/// Removes `root` (a file, or a directory with everything under it),
/// spending one unit of `budget` per file or directory removed. `Ok(true)`
/// when nothing is left, `Ok(false)` when the budget ran out first, `Err`
/// with the path that could not be removed.
async fn remove_tree<I: StorageIo>(
    io: &I,
    root: &Path,
    budget: &mut u64,
) -> Result<bool, (PathBuf, io::Error)> {
    if *budget == 0 {
        return Ok(false);
    }
    match io.remove_file(root).await {
        Ok(()) => {
            *budget -= 1;
            return Ok(true);
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(error) if is_a_directory(&error) => {}
        Err(error) => return Err((root.to_path_buf(), error)),
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.last().cloned() {
        let children = match io.list_dir(&dir).await {
            Ok(children) => children,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                stack.pop();
                continue;
            }
            Err(error) => return Err((dir, error)),
        };
        let mut descend = None;
        for child in children {
            if *budget == 0 {
                return Ok(false);
            }
            let path = dir.join(child);
            match io.remove_file(&path).await {
                Ok(()) => *budget -= 1,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) if is_a_directory(&error) => {
                    descend = Some(path);
                    break;
                }
                Err(error) => return Err((path, error)),
            }
        }
        if let Some(child) = descend {
            stack.push(child);
            continue;
        }
        if *budget == 0 {
            return Ok(false);
        }
        match io.remove_dir(&dir).await {
            Ok(()) => *budget -= 1,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err((dir, error)),
        }
        stack.pop();
    }
    Ok(true)
}

/// `unlink` of a directory: EISDIR on Linux.
fn is_a_directory(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::EISDIR)
}

/// How many files and bytes are under `root` (a file or a directory), for
/// reporting what is pending removal. Unreadable parts count as empty.
pub async fn measure<I: StorageIo>(io: &I, root: &Path) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        match io.list_dir(&path).await {
            Ok(children) => stack.extend(children.into_iter().map(|child| path.join(child))),
            Err(_) => {
                if let Ok(file) = io.open(&path, OpenMode::Existing).await
                    && let Ok(len) = io.file_len(&file).await
                {
                    files += 1;
                    bytes += len;
                }
            }
        }
    }
    (files, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimIo, block_on};

    fn write(io: &SimIo, path: &Path, bytes: usize) {
        block_on(async {
            io.create_dir_all(path.parent().unwrap()).await.unwrap();
            let file = io.open(path, OpenMode::Create).await.unwrap();
            let (result, _) = io.write_at(&file, vec![7u8; bytes], 0).await;
            result.unwrap();
        });
    }

    // A discarded directory leaves its place at once (the same path can be
    // used again), is measured and reported, and the janitor removes it
    // within its budget, file by file.
    #[test]
    fn discard_then_collect_in_budgeted_steps() {
        let io = SimIo::new(1);
        let data = Path::new("/data");
        let partition = data.join("partitions/7");
        for name in ["a", "b", "c"] {
            write(&io, &partition.join(name), 100);
        }
        write(&io, &partition.join("sub/d"), 50);
        let mut trash = Trash::new(io.clone(), data, TrashStart::default());
        let moved = block_on(trash.discard_durably(&partition, "7", 350))
            .unwrap()
            .unwrap();
        assert!(moved.starts_with(trash_dir(data)));
        assert!(!io.dir_exists(&partition));
        assert_eq!(block_on(measure(&io, &moved)), (4, 350));
        assert_eq!(trash.stats().entries, 1);
        assert_eq!(trash.stats().bytes, 350);
        // Four files and two directories: three calls of two.
        assert_eq!(block_on(trash.collect(0, 2)), 2);
        assert_eq!(block_on(trash.collect(0, 2)), 2);
        assert!(!trash.is_empty());
        assert_eq!(block_on(trash.collect(0, 2)), 2);
        assert!(trash.is_empty());
        assert!(io.files_under(data).is_empty());
        assert!(!io.dir_exists(&moved));
        let stats = trash.stats();
        assert_eq!((stats.removed_entries, stats.removed_bytes), (1, 350));
        // A missing source is nothing to discard.
        assert_eq!(
            block_on(trash.discard_durably(&partition, "7", 0)).unwrap(),
            None
        );
    }

    // An undeletable file (chattr +i) fails the removal: the entry stays,
    // is reported as failing and retried with backoff; other entries go on;
    // once the file is deletable again the entry goes.
    #[test]
    fn failed_removals_are_retried_and_reported() {
        let io = SimIo::new(2);
        let data = Path::new("/data");
        write(&io, &data.join("partitions/1/x"), 10);
        write(&io, &data.join("partitions/2/y"), 20);
        let mut trash = Trash::new(io.clone(), data, TrashStart::default());
        let first = block_on(trash.discard_durably(&data.join("partitions/1"), "1", 10))
            .unwrap()
            .unwrap();
        block_on(trash.discard_durably(&data.join("partitions/2"), "2", 20)).unwrap();
        io.set_immutable(&first.join("x"), true);
        block_on(trash.collect(1_000, 100));
        let stats = trash.stats();
        assert_eq!((stats.entries, stats.failing, stats.bytes), (1, 1, 10));
        assert!(stats.last_error.unwrap().contains("/x"));
        // Not retried before its backoff.
        io.set_immutable(&first.join("x"), false);
        assert_eq!(block_on(trash.collect(1_000 + 500_000, 100)), 0);
        assert_eq!(
            block_on(trash.collect(1_000 + RETRY_BACKOFF_FIRST_US, 100)),
            2
        );
        assert!(trash.is_empty());
        assert!(io.files_under(data).is_empty());
    }

    // A directory that cannot be renamed (immutable) stays in place; a
    // caller may schedule its removal there.
    #[test]
    fn a_failed_rename_changes_nothing() {
        let io = SimIo::new(3);
        let data = Path::new("/data");
        let partition = data.join("partitions/5");
        write(&io, &partition.join("x"), 10);
        io.set_immutable(&partition, true);
        let mut trash = Trash::new(io.clone(), data, TrashStart::default());
        let error = block_on(trash.discard_durably(&partition, "5", 10)).unwrap_err();
        assert!(matches!(error, DiscardError::NotMoved { .. }), "{error}");
        assert!(trash.is_empty());
        assert_eq!(io.files_under(&partition).len(), 1);
        trash.schedule(partition.clone(), 10);
        block_on(trash.collect(0, 10));
        assert_eq!(trash.stats().failing, 1);
        io.set_immutable(&partition, false);
        block_on(trash.collect(u64::MAX / 2, 10));
        assert!(trash.is_empty());
        assert!(!io.dir_exists(&partition));
    }

    // Entry names start with a 20-digit sequence number.
    #[test]
    fn entry_names() {
        assert_eq!(entry_seq("00000000000000000042.7"), Some(42));
        assert_eq!(entry_seq("42.7"), None);
        assert_eq!(entry_seq("streams"), None);
    }
}
