//! The Raft entry table of a partition: one fixed 32-byte record per Raft
//! entry, in index order, in files of at most [`RECORDS_PER_FILE`] records
//! named by the index of their first record (`raft/<first_index>.entries`,
//! 20 digits). A data entry's record names the offset of its batch in the
//! partition's segment log, a membership entry's the position of its
//! configuration in `raft/configs`, an offsets entry's the position of its
//! payload in `raft/offsets`, a purge entry's the offset below which every
//! message is deleted; a blank entry names nothing. So the
//! message log stays the messages alone (consumers see dense offsets, no
//! blank, membership or offsets entries), and index ↔ offset translation is a read
//! of one record at a computed position.
//!
//! # Record layout (little-endian)
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | Raft index |
//! | 8..16 | term |
//! | 16..24 | value: the batch's base offset (data), the configuration's position (membership), the payload's position (offsets), 0 (blank) |
//! | 24 | kind: 1 data, 2 blank, 3 membership, 4 offsets (stored consumer offsets) |
//! | 25..28 | the batch's message count (u24; data), zero otherwise |
//! | 28..32 | XXH32 (seed 0) of bytes 0..28 |
//!
//! Open replays every file and stops at the first record that is short,
//! fails its checksum or breaks the index sequence: the files are cut there
//! (a torn tail). Appends are buffered until [`EntryTable::write_pending`];
//! [`EntryTable::sync`] makes them durable. Must not: know what a batch or a
//! configuration holds, or panic on file content.

use crate::StorageError;
use crate::io::{OpenMode, StorageIo};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Size of one record.
pub const RECORD_SIZE: usize = 32;
/// Records per entry file (2 MiB of records): files are removed whole once
/// every record in them is purged.
pub const RECORDS_PER_FILE: u64 = 65_536;
const SUFFIX: &str = ".entries";

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Data,
    Blank,
    Membership,
    /// Stored consumer offsets (a cluster's; no messages).
    Offsets,
    /// The messages below an offset are deleted on every replica (a
    /// purge or delete-segments of a replicated partition; no messages).
    Purge,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            EntryKind::Data => 1,
            EntryKind::Blank => 2,
            EntryKind::Membership => 3,
            EntryKind::Offsets => 4,
            EntryKind::Purge => 5,
        }
    }

    fn from_code(code: u8) -> Option<EntryKind> {
        match code {
            1 => Some(EntryKind::Data),
            2 => Some(EntryKind::Blank),
            3 => Some(EntryKind::Membership),
            4 => Some(EntryKind::Offsets),
            5 => Some(EntryKind::Purge),
            _ => None,
        }
    }
}

/// One entry's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRecord {
    pub index: u64,
    pub term: u64,
    pub kind: EntryKind,
    /// The batch's base offset (data), the configuration's position
    /// (membership), the payload's position (offsets), the offset the
    /// purged messages end at (purge), 0 (blank).
    pub value: u64,
    /// Messages in the batch (data; at most [`MESSAGES_MAX`]), else 0.
    pub count: u32,
}

/// Most messages one data entry's batch may hold (the record keeps the
/// count in 24 bits; a 64 MiB frame of 48-byte frames holds fewer).
pub const MESSAGES_MAX: u32 = (1 << 24) - 1;

impl EntryRecord {
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut bytes = [0u8; RECORD_SIZE];
        bytes[0..8].copy_from_slice(&self.index.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.term.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.value.to_le_bytes());
        bytes[24] = self.kind.code();
        bytes[25..28].copy_from_slice(&self.count.min(MESSAGES_MAX).to_le_bytes()[..3]);
        let checksum = xxhash_rust::xxh32::xxh32(&bytes[0..28], 0);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The record in `bytes`, or `None` when it is not a valid record.
    pub fn decode(bytes: &[u8]) -> Option<EntryRecord> {
        let bytes: &[u8; RECORD_SIZE] = bytes.get(..RECORD_SIZE)?.try_into().ok()?;
        let (body, checksum) = bytes.split_at(28);
        if xxhash_rust::xxh32::xxh32(body, 0) != u32::from_le_bytes(checksum.try_into().ok()?) {
            return None;
        }
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
        };
        let count = body.get(25..28)?;
        let count = u32::from_le_bytes([*count.first()?, *count.get(1)?, *count.get(2)?, 0]);
        let kind = EntryKind::from_code(*body.get(24)?)?;
        if kind != EntryKind::Data && count != 0 {
            return None;
        }
        Some(EntryRecord {
            index: word(0)?,
            term: word(8)?,
            value: word(16)?,
            kind,
            count,
        })
    }
}

/// One entry file: its first index and how many records it holds (written
/// or pending).
struct EntryFile<F> {
    first_index: u64,
    records: u64,
    file: Rc<F>,
}

/// The entry table of one partition.
pub struct EntryTable<I: StorageIo> {
    io: I,
    dir: PathBuf,
    /// Oldest first; every file but the last holds `RECORDS_PER_FILE`
    /// records (a file starts where the previous ended).
    files: Vec<EntryFile<I::File>>,
    /// The last record (written or pending), for the index sequence.
    last: Option<EntryRecord>,
    /// Records appended and not yet written, and the file position the
    /// first of them goes to (in the last file).
    pending: Vec<EntryRecord>,
    /// Files written since the last sync.
    unsynced: Vec<Rc<I::File>>,
}

impl<I: StorageIo> std::fmt::Debug for EntryTable<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryTable")
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("last", &self.last)
            .field("pending", &self.pending.len())
            .finish()
    }
}

fn file_name(first_index: u64) -> String {
    format!("{first_index:020}{SUFFIX}")
}

fn io_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| StorageError::io(op, path, source)
}

impl<I: StorageIo> EntryTable<I> {
    /// Opens (creating `dir` when missing) and replays the entry files. The
    /// records kept are a contiguous index sequence; a torn or damaged tail
    /// is cut (files after it removed). Returns the table and how many
    /// records were dropped.
    pub async fn open(io: I, dir: &Path) -> Result<(EntryTable<I>, u64), StorageError> {
        io.create_dir_all(dir)
            .await
            .map_err(io_error("create directory", dir))?;
        let mut firsts: Vec<u64> = io
            .list_dir(dir)
            .await
            .map_err(io_error("list directory", dir))?
            .iter()
            .filter_map(|name| name.strip_suffix(SUFFIX)?.parse::<u64>().ok())
            .collect();
        firsts.sort_unstable();
        let mut table = EntryTable {
            io,
            dir: dir.to_path_buf(),
            files: Vec::new(),
            last: None,
            pending: Vec::new(),
            unsynced: Vec::new(),
        };
        let mut dropped = 0u64;
        let mut broken = false;
        for first_index in firsts {
            let path = dir.join(file_name(first_index));
            if broken {
                // After a cut nothing later can continue the sequence.
                let file = table.io.open(&path, OpenMode::Existing).await;
                if let Ok(file) = file {
                    dropped += table.io.file_len(&file).await.unwrap_or(0) / RECORD_SIZE as u64;
                }
                table
                    .io
                    .remove_file(&path)
                    .await
                    .map_err(io_error("remove", &path))?;
                continue;
            }
            let file = table
                .io
                .open(&path, OpenMode::Existing)
                .await
                .map_err(io_error("open entries", &path))?;
            let length = table
                .io
                .file_len(&file)
                .await
                .map_err(io_error("stat entries", &path))?;
            let bytes = table
                .io
                .read_exact_at(&file, 0, length as usize)
                .await
                .map_err(io_error("read entries", &path))?;
            let mut kept = 0u64;
            for chunk in bytes.chunks(RECORD_SIZE) {
                let Some(record) = EntryRecord::decode(chunk) else {
                    break;
                };
                let continues = match table.last {
                    None => record.index == first_index,
                    Some(last) => record.index == last.index + 1 && record.term >= last.term,
                };
                if !continues || kept >= RECORDS_PER_FILE {
                    break;
                }
                table.last = Some(record);
                kept += 1;
            }
            let total = length / RECORD_SIZE as u64 + u64::from(length % RECORD_SIZE as u64 != 0);
            if kept < total || length % RECORD_SIZE as u64 != 0 {
                dropped += total - kept;
                broken = true;
                table
                    .io
                    .truncate(&file, kept * RECORD_SIZE as u64)
                    .await
                    .map_err(io_error("truncate entries", &path))?;
                table
                    .io
                    .sync(&file)
                    .await
                    .map_err(io_error("fsync entries", &path))?;
            }
            if kept == 0 {
                table
                    .io
                    .remove_file(&path)
                    .await
                    .map_err(io_error("remove", &path))?;
                continue;
            }
            table.files.push(EntryFile {
                first_index,
                records: kept,
                file: Rc::new(file),
            });
        }
        if dropped > 0 {
            table
                .io
                .sync_dir(dir)
                .await
                .map_err(io_error("fsync directory", dir))?;
        }
        Ok((table, dropped))
    }

    /// The first index held (not purged), if any.
    pub fn first_index(&self) -> Option<u64> {
        self.files.first().map(|file| file.first_index)
    }

    /// The last record (written or pending).
    pub fn last(&self) -> Option<EntryRecord> {
        self.last
    }

    /// Appends `record` (index one past the last, or any index when the
    /// table is empty). Nothing is written until [`Self::write_pending`].
    pub async fn append(&mut self, record: EntryRecord) -> Result<(), StorageError> {
        if let Some(last) = self.last {
            assert!(
                record.index == last.index + 1,
                "entry {} after {}",
                record.index,
                last.index
            );
            assert!(
                record.term >= last.term,
                "term {} after {}",
                record.term,
                last.term
            );
        }
        let needs_file = self
            .files
            .last()
            .is_none_or(|file| file.records >= RECORDS_PER_FILE);
        if needs_file {
            self.write_pending().await?;
            let path = self.dir.join(file_name(record.index));
            let file = self
                .io
                .open(&path, OpenMode::CreateTruncate)
                .await
                .map_err(io_error("create entries", &path))?;
            self.io
                .sync_dir(&self.dir)
                .await
                .map_err(io_error("fsync directory", &self.dir))?;
            self.files.push(EntryFile {
                first_index: record.index,
                records: 0,
                file: Rc::new(file),
            });
        }
        if let Some(file) = self.files.last_mut() {
            file.records += 1;
        }
        self.pending.push(record);
        self.last = Some(record);
        Ok(())
    }

    /// Writes the pending records (one write; they all belong to the last
    /// file, since [`Self::append`] writes before it opens a new one).
    pub async fn write_pending(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let Some(file) = self.files.last() else {
            return Ok(());
        };
        let count = self.pending.len() as u64;
        assert!(file.records >= count);
        let position = (file.records - count) * RECORD_SIZE as u64;
        let mut bytes = Vec::with_capacity(self.pending.len() * RECORD_SIZE);
        for record in &self.pending {
            bytes.extend_from_slice(&record.encode());
        }
        let path = self.dir.join(file_name(file.first_index));
        let (result, _) = self.io.write_at(&file.file, bytes, position).await;
        result.map_err(io_error("write entries", &path))?;
        if !self
            .unsynced
            .iter()
            .any(|unsynced| Rc::ptr_eq(unsynced, &file.file))
        {
            self.unsynced.push(file.file.clone());
        }
        self.pending.clear();
        Ok(())
    }

    /// Whether records wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether written records wait for an fsync.
    pub fn has_unsynced(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Makes every written record durable.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        self.write_pending().await?;
        for file in std::mem::take(&mut self.unsynced) {
            self.io
                .sync(&file)
                .await
                .map_err(io_error("fsync entries", &self.dir))?;
        }
        Ok(())
    }

    /// The record of entry `index`, if the table holds it.
    pub async fn get(&self, index: u64) -> Result<Option<EntryRecord>, StorageError> {
        let Some(last) = self.last else {
            return Ok(None);
        };
        if index > last.index {
            return Ok(None);
        }
        if let Some(pending) = self.pending.iter().find(|record| record.index == index) {
            return Ok(Some(*pending));
        }
        let Some(file) = self
            .files
            .iter()
            .rev()
            .find(|file| file.first_index <= index)
        else {
            return Ok(None);
        };
        let position = (index - file.first_index) * RECORD_SIZE as u64;
        let path = self.dir.join(file_name(file.first_index));
        let bytes = self
            .io
            .read_exact_at(&file.file, position, RECORD_SIZE)
            .await
            .map_err(io_error("read entries", &path))?;
        match EntryRecord::decode(&bytes) {
            Some(record) if record.index == index => Ok(Some(record)),
            _ => Err(StorageError::Layout {
                path,
                reason: format!("the record of entry {index} is damaged"),
            }),
        }
    }

    /// Drops every record after `index` (all of them for `None`): pending
    /// ones, the tail of the file holding `index + 1`, and later files.
    /// Durable when it returns.
    pub async fn truncate_after(&mut self, index: Option<u64>) -> Result<(), StorageError> {
        self.write_pending().await?;
        let keep_through = index;
        while let Some(file) = self.files.last() {
            let path = self.dir.join(file_name(file.first_index));
            let last_in_file = file.first_index + file.records - 1;
            match keep_through {
                Some(keep) if keep >= last_in_file => break,
                Some(keep) if keep >= file.first_index => {
                    let kept = keep - file.first_index + 1;
                    self.io
                        .truncate(&file.file, kept * RECORD_SIZE as u64)
                        .await
                        .map_err(io_error("truncate entries", &path))?;
                    self.io
                        .sync(&file.file)
                        .await
                        .map_err(io_error("fsync entries", &path))?;
                    if let Some(file) = self.files.last_mut() {
                        file.records = kept;
                    }
                    break;
                }
                _ => {
                    self.io
                        .remove_file(&path)
                        .await
                        .map_err(io_error("remove", &path))?;
                    self.io
                        .sync_dir(&self.dir)
                        .await
                        .map_err(io_error("fsync directory", &self.dir))?;
                    self.files.pop();
                }
            }
        }
        // Files removed need no sync; the others keep what they owe.
        let files = &self.files;
        self.unsynced
            .retain(|unsynced| files.iter().any(|file| Rc::ptr_eq(&file.file, unsynced)));
        self.last = match self.files.last() {
            None => None,
            Some(file) => self.get(file.first_index + file.records - 1).await?,
        };
        Ok(())
    }

    /// Removes the files whose every record is at or below `index` (the
    /// log is purged through it; the partially purged file stays; purged
    /// past its end, the table is empty and takes any index next).
    pub async fn purge_through(&mut self, index: u64) -> Result<(), StorageError> {
        self.write_pending().await?;
        let mut removed = false;
        while let Some(file) = self.files.first() {
            if file.first_index + file.records - 1 > index {
                break;
            }
            let path = self.dir.join(file_name(file.first_index));
            self.io
                .remove_file(&path)
                .await
                .map_err(io_error("remove", &path))?;
            self.files.remove(0);
            removed = true;
        }
        if removed {
            self.io
                .sync_dir(&self.dir)
                .await
                .map_err(io_error("fsync directory", &self.dir))?;
        }
        if self.files.is_empty() {
            self.last = None;
        }
        Ok(())
    }
}
