//! Consumer offsets of one partition: which offset each consumer (or consumer
//! group) has stored, kept in `consumer_offsets.log` in the partition
//! directory. The owner shard's pump is the only caller; like the partition
//! log, this module never decides when to fsync (the pump does, following the
//! topic's `consumer_offset_durability`) and never panics on disk content.
//!
//! # Layout
//!
//! An append-only file of fixed 32-byte records, replayed in order on open:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind: 1 consumer, 2 consumer group |
//! | 1 | op: 1 store, 2 delete |
//! | 2..4 | zero |
//! | 4..8 | consumer id (u32 LE): the numeric id, XXH32 of a name, or the group id |
//! | 8..16 | offset (u64 LE; zero for delete) |
//! | 16..24 | a cluster's Raft index of the offsets entry that wrote it (zero on a single node) |
//! | 24..32 | XXH3-64 of bytes 0..24 |
//!
//! Replay stops at the first record that is short or fails its checksum: the
//! file is truncated there (a torn tail from a crash loses at most the stores
//! that were not yet acknowledged as durable). Whatever replay keeps is
//! fsynced before `open` returns, so after `open` every offset it serves is
//! durable (as for the partition log). When the file holds many more
//! records than live offsets it is compacted: the live set is written to a
//! temporary file, fsynced, renamed over the log, and the directory fsynced.
//!
//! In a cluster the writes come from the partition's Raft log, applied in
//! log order on every replica; each record carries the index of the entry
//! that wrote it, and the highest one read back ([`ConsumerOffsets::raft_index`])
//! lets a restarted replica skip the entries it applied before (so a
//! replay never takes a stored offset back). Compaction writes every live
//! record with that highest index.

use super::io::{OpenMode, StorageIo};
use super::{StorageError, is_no_space};
use crate::limits::CONSUMER_OFFSETS_FILE_BYTES_MAX;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "consumer_offsets.log";
const TEMP_NAME: &str = "consumer_offsets.log.tmp";
pub const RECORD_SIZE: usize = 32;
/// Compact when dead records outnumber live ones by this many.
const COMPACT_SLACK_RECORDS: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConsumerKind {
    Consumer = 1,
    Group = 2,
}

/// Whose offset: a single consumer or a consumer group, by numeric key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerKey {
    pub kind: ConsumerKind,
    pub id: u32,
}

const OP_STORE: u8 = 1;
const OP_DELETE: u8 = 2;

fn encode(key: ConsumerKey, op: u8, offset: u64, raft_index: u64) -> [u8; RECORD_SIZE] {
    let mut record = [0u8; RECORD_SIZE];
    record[0] = key.kind as u8;
    record[1] = op;
    record[4..8].copy_from_slice(&key.id.to_le_bytes());
    record[8..16].copy_from_slice(&offset.to_le_bytes());
    record[16..24].copy_from_slice(&raft_index.to_le_bytes());
    let checksum = xxhash_rust::xxh3::xxh3_64(&record[..24]);
    record[24..32].copy_from_slice(&checksum.to_le_bytes());
    record
}

/// One decoded record, or `None` when it is not a valid record.
fn decode(record: &[u8]) -> Option<(ConsumerKey, u8, u64, u64)> {
    let record: &[u8; RECORD_SIZE] = record.try_into().ok()?;
    let checksum = u64::from_le_bytes(record[24..32].try_into().ok()?);
    if xxhash_rust::xxh3::xxh3_64(&record[..24]) != checksum {
        return None;
    }
    let kind = match record[0] {
        1 => ConsumerKind::Consumer,
        2 => ConsumerKind::Group,
        _ => return None,
    };
    let op = record[1];
    if op != OP_STORE && op != OP_DELETE {
        return None;
    }
    let id = u32::from_le_bytes(record[4..8].try_into().ok()?);
    let offset = u64::from_le_bytes(record[8..16].try_into().ok()?);
    let raft_index = u64::from_le_bytes(record[16..24].try_into().ok()?);
    Some((ConsumerKey { kind, id }, op, offset, raft_index))
}

pub struct ConsumerOffsets<I: StorageIo + Clone> {
    io: I,
    dir: PathBuf,
    file: I::File,
    offsets: BTreeMap<ConsumerKey, u64>,
    /// Valid records in the file (live and superseded).
    records: u64,
    unsynced: bool,
    /// Set by a failed write or fsync: nothing more is written.
    poisoned: Option<String>,
    /// The highest Raft index of a write (a cluster's; zero on one node).
    raft_index: u64,
}

impl<I: StorageIo + Clone> std::fmt::Debug for ConsumerOffsets<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerOffsets")
            .field("dir", &self.dir)
            .field("offsets", &self.offsets.len())
            .field("records", &self.records)
            .finish()
    }
}

impl<I: StorageIo + Clone> ConsumerOffsets<I> {
    /// Open (creating it when missing) and replay the offsets file in `dir`.
    /// Returns the store and the number of bytes dropped from a torn tail.
    pub async fn open(io: I, dir: &Path) -> Result<(ConsumerOffsets<I>, u64), StorageError> {
        let path = dir.join(FILE_NAME);
        // A leftover temp file is an interrupted compaction: the log is
        // still authoritative.
        match io.remove_file(&dir.join(TEMP_NAME)).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(StorageError::io("remove", dir.join(TEMP_NAME), error)),
        }
        let file = io
            .open(&path, OpenMode::Create)
            .await
            .map_err(|source| StorageError::io("open consumer offsets", &path, source))?;
        let length = io
            .file_len(&file)
            .await
            .map_err(|source| StorageError::io("stat consumer offsets", &path, source))?;
        if length == 0 {
            // Possibly just created: make its directory entry durable, or a
            // crash could lose the file with stores already acknowledged.
            io.sync_dir(dir)
                .await
                .map_err(|source| StorageError::io("sync dir", dir, source))?;
        }
        if length > CONSUMER_OFFSETS_FILE_BYTES_MAX {
            return Err(StorageError::Layout {
                path,
                reason: format!(
                    "consumer offsets file is {length} bytes, over the {CONSUMER_OFFSETS_FILE_BYTES_MAX}-byte limit"
                ),
            });
        }
        let bytes = io
            .read_exact_at(&file, 0, length as usize)
            .await
            .map_err(|source| StorageError::io("read consumer offsets", &path, source))?;
        let mut offsets = BTreeMap::new();
        let mut records = 0u64;
        let mut valid_bytes = 0u64;
        let mut raft_index = 0u64;
        for record in bytes.chunks(RECORD_SIZE) {
            let Some((key, op, offset, index)) = decode(record) else {
                break;
            };
            raft_index = raft_index.max(index);
            match op {
                OP_STORE => {
                    offsets.insert(key, offset);
                }
                _ => {
                    offsets.remove(&key);
                }
            }
            records += 1;
            valid_bytes += RECORD_SIZE as u64;
        }
        let dropped = length - valid_bytes;
        if dropped > 0 {
            tracing::warn!(
                path = %path.display(),
                position = valid_bytes,
                bytes_dropped = dropped,
                "consumer offsets: truncated an invalid tail"
            );
            io.truncate(&file, valid_bytes)
                .await
                .map_err(|source| StorageError::io("truncate consumer offsets", &path, source))?;
        }
        if length > 0 {
            // The replayed records may have lived only in the page cache of
            // a process that exited before its fsync: make them durable
            // before anyone relies on them (and before the flush policy,
            // which starts clean, would forget they are not).
            io.sync(&file)
                .await
                .map_err(|source| StorageError::io("sync consumer offsets", &path, source))?;
        }
        let store = ConsumerOffsets {
            io,
            dir: dir.to_path_buf(),
            file,
            offsets,
            records,
            unsynced: false,
            poisoned: None,
            raft_index,
        };
        Ok((store, dropped))
    }

    pub fn get(&self, key: ConsumerKey) -> Option<u64> {
        self.offsets.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// All stored offsets (for lag reporting).
    pub fn iter(&self) -> impl Iterator<Item = (ConsumerKey, u64)> + '_ {
        self.offsets.iter().map(|(key, offset)| (*key, *offset))
    }

    /// True when a store or delete has been written but not fsynced.
    pub fn is_unsynced(&self) -> bool {
        self.unsynced
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    fn check_writable(&self) -> Result<(), StorageError> {
        match &self.poisoned {
            Some(reason) => Err(StorageError::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&mut self, reason: String) -> StorageError {
        tracing::error!(dir = %self.dir.display(), "consumer offsets poisoned: {reason}");
        self.poisoned = Some(reason.clone());
        StorageError::Poisoned { reason }
    }

    async fn append_record(&mut self, record: [u8; RECORD_SIZE]) -> Result<(), StorageError> {
        self.check_writable()?;
        let position = self.records * RECORD_SIZE as u64;
        let (result, _) = self
            .io
            .write_at(&self.file, record.to_vec(), position)
            .await;
        if let Err(source) = result {
            let path = self.path();
            if is_no_space(&source) {
                // Roll back a partial record so replay stays aligned.
                if let Err(error) = self.io.truncate(&self.file, position).await {
                    self.poisoned = Some(format!("rollback after ENOSPC failed: {error}"));
                }
                return Err(StorageError::NoSpace { path, source });
            }
            self.poisoned = Some(format!("write to {} failed: {source}", path.display()));
            return Err(StorageError::io("write consumer offset", path, source));
        }
        self.records += 1;
        self.unsynced = true;
        Ok(())
    }

    /// Store `offset` for `key` (written, not yet durable).
    pub async fn store(&mut self, key: ConsumerKey, offset: u64) -> Result<(), StorageError> {
        self.store_at(key, offset, 0).await
    }

    /// Delete the offset of `key`; `Ok(false)` when none was stored.
    pub async fn delete(&mut self, key: ConsumerKey) -> Result<bool, StorageError> {
        self.delete_at(key, 0).await
    }

    /// The highest Raft index a write carried (zero on a single node): a
    /// cluster's replica skips entries at or below it.
    pub fn raft_index(&self) -> u64 {
        self.raft_index
    }

    /// [`Self::store`] by the offsets entry at `raft_index` (a cluster's).
    pub async fn store_at(
        &mut self,
        key: ConsumerKey,
        offset: u64,
        raft_index: u64,
    ) -> Result<(), StorageError> {
        self.append_record(encode(key, OP_STORE, offset, raft_index))
            .await?;
        self.offsets.insert(key, offset);
        self.raft_index = self.raft_index.max(raft_index);
        self.maybe_compact().await
    }

    /// [`Self::delete`] by the offsets entry at `raft_index` (a cluster's).
    pub async fn delete_at(
        &mut self,
        key: ConsumerKey,
        raft_index: u64,
    ) -> Result<bool, StorageError> {
        if !self.offsets.contains_key(&key) {
            return Ok(false);
        }
        self.append_record(encode(key, OP_DELETE, 0, raft_index))
            .await?;
        self.offsets.remove(&key);
        self.raft_index = self.raft_index.max(raft_index);
        self.maybe_compact().await?;
        Ok(true)
    }

    /// Make every written store and delete durable.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        self.check_writable()?;
        if !self.unsynced {
            return Ok(());
        }
        if let Err(source) = self.io.sync(&self.file).await {
            let reason = format!("fsync of {} failed: {source}", self.path().display());
            self.poisoned = Some(reason.clone());
            return Err(StorageError::Poisoned { reason });
        }
        self.unsynced = false;
        Ok(())
    }

    /// Forget every offset (purge) and make that durable.
    pub async fn clear(&mut self) -> Result<(), StorageError> {
        self.check_writable()?;
        let path = self.path();
        self.io
            .truncate(&self.file, 0)
            .await
            .map_err(|source| StorageError::io("truncate consumer offsets", &path, source))?;
        self.offsets.clear();
        self.records = 0;
        self.unsynced = true;
        self.sync().await
    }

    async fn maybe_compact(&mut self) -> Result<(), StorageError> {
        let live = self.offsets.len() as u64;
        if self.records < live + COMPACT_SLACK_RECORDS {
            return Ok(());
        }
        let temp = self.dir.join(TEMP_NAME);
        let path = self.path();
        let mut bytes = Vec::with_capacity(self.offsets.len() * RECORD_SIZE);
        for (key, offset) in &self.offsets {
            bytes.extend_from_slice(&encode(*key, OP_STORE, *offset, self.raft_index));
        }
        let file = self
            .io
            .open(&temp, OpenMode::CreateTruncate)
            .await
            .map_err(|source| StorageError::io("create", &temp, source))?;
        let (result, _) = self.io.write_at(&file, bytes, 0).await;
        result.map_err(|source| StorageError::io("write", &temp, source))?;
        self.io
            .sync(&file)
            .await
            .map_err(|source| StorageError::io("sync", &temp, source))?;
        self.io
            .rename(&temp, &path)
            .await
            .map_err(|source| StorageError::io("rename", &temp, source))?;
        // Past the rename, `self.file` is an unlinked inode: a later store
        // written there would be acknowledged and then lost on restart. A
        // failure from here on poisons the store instead.
        if let Err(source) = self.io.sync_dir(&self.dir).await {
            return Err(self.poison(format!(
                "compaction: fsync of directory {} failed: {source}",
                self.dir.display()
            )));
        }
        self.file = match self.io.open(&path, OpenMode::Existing).await {
            Ok(file) => file,
            Err(source) => {
                return Err(self.poison(format!(
                    "compaction: reopening {} failed: {source}",
                    path.display()
                )));
            }
        };
        self.records = live;
        self.unsynced = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimIo, block_on};

    fn key(kind: ConsumerKind, id: u32) -> ConsumerKey {
        ConsumerKey { kind, id }
    }

    // Stores and deletes survive a reopen once synced; unsynced ones vanish
    // with a crash, never half-applied.
    #[test]
    fn synced_offsets_survive_a_crash_and_unsynced_ones_vanish_whole() {
        let io = SimIo::new(7);
        let dir = PathBuf::from("/p");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let (mut offsets, dropped) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(dropped, 0);
            offsets
                .store(key(ConsumerKind::Consumer, 1), 10)
                .await
                .unwrap();
            offsets
                .store(key(ConsumerKind::Group, 1), 20)
                .await
                .unwrap();
            assert!(offsets.delete(key(ConsumerKind::Group, 1)).await.unwrap());
            assert!(!offsets.delete(key(ConsumerKind::Group, 9)).await.unwrap());
            offsets.sync().await.unwrap();
            offsets
                .store(key(ConsumerKind::Consumer, 1), 11)
                .await
                .unwrap();
        });
        io.crash();
        block_on(async {
            let (offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(offsets.get(key(ConsumerKind::Consumer, 1)), Some(10));
            assert_eq!(offsets.get(key(ConsumerKind::Group, 1)), None);
        });
    }

    // Regression (pump simulation, seed 17): stores written but not synced
    // by a process that then exited are still in the page cache when the
    // next process opens the file. Open serves them, so it must make them
    // durable: a power loss after the re-open must not take them back.
    #[test]
    fn offsets_replayed_after_a_process_restart_survive_a_later_power_loss() {
        let io = SimIo::new(5);
        let dir = PathBuf::from("/p");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let (mut offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            offsets
                .store(key(ConsumerKind::Consumer, 1), 10)
                .await
                .unwrap();
            offsets.sync().await.unwrap();
            offsets
                .store(key(ConsumerKind::Consumer, 1), 4)
                .await
                .unwrap();
            drop(offsets);
            // A process restart: the page cache keeps the unsynced store.
            let (reopened, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(reopened.get(key(ConsumerKind::Consumer, 1)), Some(4));
            assert!(!reopened.is_unsynced());
        });
        io.crash();
        block_on(async {
            let (offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(offsets.get(key(ConsumerKind::Consumer, 1)), Some(4));
        });
    }

    // A garbage tail is truncated at the last valid record, and appends
    // continue aligned after it.
    #[test]
    fn a_garbage_tail_is_truncated_and_appends_stay_aligned() {
        let io = SimIo::new(3);
        let dir = PathBuf::from("/p");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let (mut offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            offsets
                .store(key(ConsumerKind::Consumer, 5), 50)
                .await
                .unwrap();
            offsets.sync().await.unwrap();
            let file = io
                .open(&dir.join(FILE_NAME), OpenMode::Existing)
                .await
                .unwrap();
            let (result, _) = io.write_at(&file, vec![0xAB; 13], 32).await;
            result.unwrap();
            io.sync(&file).await.unwrap();
            let (mut offsets, dropped) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(dropped, 13);
            assert_eq!(offsets.get(key(ConsumerKind::Consumer, 5)), Some(50));
            offsets
                .store(key(ConsumerKind::Consumer, 6), 60)
                .await
                .unwrap();
            offsets.sync().await.unwrap();
            let (offsets, dropped) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(dropped, 0);
            assert_eq!(offsets.get(key(ConsumerKind::Consumer, 6)), Some(60));
        });
    }

    // Proves a compaction whose directory fsync fails after the rename
    // poisons the store: no later store is acknowledged into the unlinked
    // old file (before the fix, it was, and vanished on reopen).
    #[test]
    fn a_failed_compaction_poisons_instead_of_losing_stores() {
        let io = SimIo::new(12);
        let dir = PathBuf::from("/p");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let (mut offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            // Three live keys: the store that makes the records reach
            // 3 + slack compacts.
            for round in 0..(COMPACT_SLACK_RECORDS + 2) {
                offsets
                    .store(key(ConsumerKind::Consumer, (round % 3) as u32), round)
                    .await
                    .unwrap();
            }
            // The temporary file's fsync passes, the directory's fails.
            io.fail_fsync_after(1);
            assert!(
                offsets
                    .store(key(ConsumerKind::Consumer, 0), 1_000)
                    .await
                    .is_err()
            );
            let later = key(ConsumerKind::Group, 7);
            let acknowledged = match offsets.store(later, 77).await {
                Ok(()) => offsets.sync().await.is_ok(),
                Err(_) => false,
            };
            assert!(!acknowledged, "a store was acknowledged after the failure");
            assert!(matches!(
                offsets.store(later, 78).await,
                Err(StorageError::Poisoned { .. })
            ));
            let (reopened, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(reopened.get(key(ConsumerKind::Consumer, 0)), Some(1_000));
        });
    }

    // Many overwrites compact the file to the live set without losing any.
    #[test]
    fn compaction_keeps_exactly_the_live_offsets() {
        let io = SimIo::new(11);
        let dir = PathBuf::from("/p");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let (mut offsets, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            for round in 0..(COMPACT_SLACK_RECORDS + 10) {
                offsets
                    .store(key(ConsumerKind::Consumer, (round % 3) as u32), round)
                    .await
                    .unwrap();
            }
            offsets.sync().await.unwrap();
            assert!(offsets.records < COMPACT_SLACK_RECORDS);
            let (reopened, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert_eq!(reopened.len(), 3);
            let last = COMPACT_SLACK_RECORDS + 9;
            assert_eq!(
                reopened.get(key(ConsumerKind::Consumer, (last % 3) as u32)),
                Some(last)
            );
            let mut cleared = reopened;
            cleared.clear().await.unwrap();
            let (empty, _) = ConsumerOffsets::open(io.clone(), &dir).await.unwrap();
            assert!(empty.is_empty());
        });
    }
}
