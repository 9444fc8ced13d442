//! The payloads of a partition's consumer-offset entries (`raft/offsets`):
//! each offsets entry of the Raft log (stored consumer offsets, replicated
//! so that a new leader serves what the old one acknowledged) keeps its
//! payload here, one append-only file; the entry table names each by its
//! position. Unlike membership configurations they are many, so they are
//! read back from the file, never kept in memory.
//!
//! # Record layout (little-endian)
//!
//! `[length u32][index u64][term u64][payload: length bytes][XXH32 u32 of everything before it]`
//!
//! Open scans the file and cuts it at the first short or damaged record. A
//! payload is durable before the entry record naming it is written (like a
//! configuration), so no record can name a payload a crash took.
//! Truncation cuts the file at the first dropped entry's payload. Must
//! not: know what a payload means (the consensus adapter encodes it), or
//! accept one over [`OFFSETS_BYTES_MAX`].

use crate::StorageError;
use crate::io::{OpenMode, StorageIo};
use std::path::{Path, PathBuf};

/// Largest payload: 64 KiB holds thousands of offset writes (the adapter
/// splits above it); a longer record on disk is damage.
pub const OFFSETS_BYTES_MAX: usize = 64 * 1024;
const FILE_NAME: &str = "offsets";
const HEAD: usize = 4 + 8 + 8;

/// The offsets payloads of one partition.
pub struct OffsetPayloads<I: StorageIo> {
    io: I,
    path: PathBuf,
    file: I::File,
    /// Bytes of valid records.
    length: u64,
}

impl<I: StorageIo> std::fmt::Debug for OffsetPayloads<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetPayloads")
            .field("path", &self.path)
            .field("length", &self.length)
            .finish()
    }
}

fn encode(index: u64, term: u64, payload: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEAD + payload.len() + 4);
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&index.to_le_bytes());
    record.extend_from_slice(&term.to_le_bytes());
    record.extend_from_slice(payload);
    let checksum = xxhash_rust::xxh32::xxh32(&record, 0);
    record.extend_from_slice(&checksum.to_le_bytes());
    record
}

/// The payload length a record's head announces, when within bounds.
fn announced(head: &[u8]) -> Option<usize> {
    let length = u32::from_le_bytes(head.get(0..4)?.try_into().ok()?) as usize;
    (length <= OFFSETS_BYTES_MAX).then_some(length)
}

/// The record at the start of `bytes`: `(index, payload, record length)`,
/// or `None` when it is short or damaged.
fn decode(bytes: &[u8]) -> Option<(u64, &[u8], usize)> {
    let length = announced(bytes)?;
    let end = HEAD.checked_add(length)?;
    let body = bytes.get(..end)?;
    let checksum = u32::from_le_bytes(bytes.get(end..end + 4)?.try_into().ok()?);
    if xxhash_rust::xxh32::xxh32(body, 0) != checksum {
        return None;
    }
    let index = u64::from_le_bytes(body.get(4..12)?.try_into().ok()?);
    Some((index, body.get(HEAD..)?, end + 4))
}

impl<I: StorageIo> OffsetPayloads<I> {
    /// Opens (creating when missing) and scans `dir/offsets`; a torn or
    /// damaged tail is cut.
    pub async fn open(io: I, dir: &Path) -> Result<OffsetPayloads<I>, StorageError> {
        let path = dir.join(FILE_NAME);
        let file = io
            .open(&path, OpenMode::Create)
            .await
            .map_err(|source| StorageError::io("open offsets", &path, source))?;
        let on_disk = io
            .file_len(&file)
            .await
            .map_err(|source| StorageError::io("stat offsets", &path, source))?;
        let bytes = io
            .read_exact_at(&file, 0, on_disk as usize)
            .await
            .map_err(|source| StorageError::io("read offsets", &path, source))?;
        let mut at = 0usize;
        while let Some((_, _, length)) = bytes.get(at..).and_then(decode) {
            at += length;
        }
        if at as u64 != on_disk {
            io.truncate(&file, at as u64)
                .await
                .map_err(|source| StorageError::io("truncate offsets", &path, source))?;
            io.sync(&file)
                .await
                .map_err(|source| StorageError::io("fsync offsets", &path, source))?;
        }
        Ok(OffsetPayloads {
            io,
            path,
            file,
            length: at as u64,
        })
    }

    /// Whether a record that starts at `position` is whole in the file.
    pub fn holds(&self, position: u64) -> bool {
        position < self.length
    }

    /// Appends the payload of entry `index`, durably before it returns
    /// (the record that names it is written after); returns its position.
    pub async fn append(
        &mut self,
        index: u64,
        term: u64,
        payload: &[u8],
    ) -> Result<u64, StorageError> {
        if payload.len() > OFFSETS_BYTES_MAX {
            return Err(StorageError::Layout {
                path: self.path.clone(),
                reason: format!(
                    "an offsets entry of {} bytes (at most {OFFSETS_BYTES_MAX})",
                    payload.len()
                ),
            });
        }
        let position = self.length;
        let record = encode(index, term, payload);
        let length = record.len() as u64;
        let (result, _) = self.io.write_at(&self.file, record, position).await;
        result.map_err(|source| StorageError::io("write offsets", &self.path, source))?;
        self.length += length;
        self.io
            .sync(&self.file)
            .await
            .map_err(|source| StorageError::io("fsync offsets", &self.path, source))?;
        Ok(position)
    }

    /// The payload of entry `index` stored at `position`.
    pub async fn read(&self, position: u64, index: u64) -> Result<Vec<u8>, StorageError> {
        let damaged = |reason: &str| StorageError::Layout {
            path: self.path.clone(),
            reason: format!("the offsets of entry {index} at {position}: {reason}"),
        };
        if position.saturating_add(HEAD as u64 + 4) > self.length {
            return Err(damaged("past the end"));
        }
        let head = self
            .io
            .read_exact_at(&self.file, position, HEAD)
            .await
            .map_err(|source| StorageError::io("read offsets", &self.path, source))?;
        let length = announced(&head).ok_or_else(|| damaged("too long"))?;
        let total = HEAD + length + 4;
        if position.saturating_add(total as u64) > self.length {
            return Err(damaged("past the end"));
        }
        let bytes = self
            .io
            .read_exact_at(&self.file, position, total)
            .await
            .map_err(|source| StorageError::io("read offsets", &self.path, source))?;
        match decode(&bytes) {
            Some((found, payload, _)) if found == index => Ok(payload.to_vec()),
            Some(_) => Err(damaged("another entry's")),
            None => Err(damaged("damaged")),
        }
    }

    /// Cuts the file at `position` (the first dropped entry's payload);
    /// durable when it returns.
    pub async fn truncate_at(&mut self, position: u64) -> Result<(), StorageError> {
        if position >= self.length {
            return Ok(());
        }
        self.io
            .truncate(&self.file, position)
            .await
            .map_err(|source| StorageError::io("truncate offsets", &self.path, source))?;
        self.io
            .sync(&self.file)
            .await
            .map_err(|source| StorageError::io("fsync offsets", &self.path, source))?;
        self.length = position;
        Ok(())
    }
}
