//! The membership configurations of a partition's Raft log
//! (`raft/configs`): the payloads of its membership entries, which are few
//! (a change of the replica set) and so kept whole in memory and in one
//! append-only file. The entry table names each by its position here.
//!
//! # Record layout (little-endian)
//!
//! `[length u32][index u64][term u64][payload: length bytes][XXH32 u32 of everything before it]`
//!
//! Open replays the file and cuts it at the first short or damaged record.
//! A configuration is durable before the entry record naming it is
//! written.
//! Truncation cuts it after the last configuration kept. Must not: know
//! what a configuration means (the consensus library's adapter encodes it),
//! or accept one over [`CONFIG_BYTES_MAX`].

use crate::StorageError;
use crate::io::{OpenMode, StorageIo};
use std::path::{Path, PathBuf};

/// Largest configuration payload: far above a replica set of hundreds of
/// nodes; a longer record on disk is damage.
pub const CONFIG_BYTES_MAX: usize = 64 * 1024;
const FILE_NAME: &str = "configs";
const HEAD: usize = 4 + 8 + 8;

/// One stored configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredConfig {
    pub index: u64,
    pub term: u64,
    /// Where its record starts in the file (what the entry table names).
    pub position: u64,
    pub payload: Vec<u8>,
}

/// The configurations of one partition.
pub struct Configs<I: StorageIo> {
    io: I,
    path: PathBuf,
    file: I::File,
    configs: Vec<StoredConfig>,
    /// Bytes of valid records.
    length: u64,
}

impl<I: StorageIo> std::fmt::Debug for Configs<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Configs")
            .field("path", &self.path)
            .field("configs", &self.configs.len())
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

/// The record at the start of `bytes`: `(index, term, payload, record
/// length)`, or `None` when it is short or damaged.
fn decode(bytes: &[u8]) -> Option<(u64, u64, &[u8], usize)> {
    let length = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    if length > CONFIG_BYTES_MAX {
        return None;
    }
    let end = HEAD.checked_add(length)?;
    let body = bytes.get(..end)?;
    let checksum = u32::from_le_bytes(bytes.get(end..end + 4)?.try_into().ok()?);
    if xxhash_rust::xxh32::xxh32(body, 0) != checksum {
        return None;
    }
    let index = u64::from_le_bytes(body.get(4..12)?.try_into().ok()?);
    let term = u64::from_le_bytes(body.get(12..20)?.try_into().ok()?);
    Some((index, term, body.get(HEAD..)?, end + 4))
}

impl<I: StorageIo> Configs<I> {
    /// Opens (creating when missing) and replays `dir/configs`; a torn or
    /// damaged tail is cut.
    pub async fn open(io: I, dir: &Path) -> Result<Configs<I>, StorageError> {
        let path = dir.join(FILE_NAME);
        let file = io
            .open(&path, OpenMode::Create)
            .await
            .map_err(|source| StorageError::io("open configs", &path, source))?;
        let on_disk = io
            .file_len(&file)
            .await
            .map_err(|source| StorageError::io("stat configs", &path, source))?;
        let bytes = io
            .read_exact_at(&file, 0, on_disk as usize)
            .await
            .map_err(|source| StorageError::io("read configs", &path, source))?;
        let mut configs = Vec::new();
        let mut at = 0usize;
        while let Some((index, term, payload, length)) = bytes.get(at..).and_then(decode) {
            configs.push(StoredConfig {
                index,
                term,
                position: at as u64,
                payload: payload.to_vec(),
            });
            at += length;
        }
        if at as u64 != on_disk {
            io.truncate(&file, at as u64)
                .await
                .map_err(|source| StorageError::io("truncate configs", &path, source))?;
            io.sync(&file)
                .await
                .map_err(|source| StorageError::io("fsync configs", &path, source))?;
        }
        Ok(Configs {
            io,
            path,
            file,
            configs,
            length: at as u64,
        })
    }

    /// Appends the configuration of entry `index`, durably before it
    /// returns (membership changes are rare; the record that names it is
    /// written after, so no record on the disk can name a configuration
    /// that a power loss took); returns its position.
    pub async fn append(
        &mut self,
        index: u64,
        term: u64,
        payload: &[u8],
    ) -> Result<u64, StorageError> {
        if payload.len() > CONFIG_BYTES_MAX {
            return Err(StorageError::Layout {
                path: self.path.clone(),
                reason: format!(
                    "a membership configuration of {} bytes (at most {CONFIG_BYTES_MAX})",
                    payload.len()
                ),
            });
        }
        let position = self.length;
        let record = encode(index, term, payload);
        let length = record.len() as u64;
        let (result, _) = self.io.write_at(&self.file, record, position).await;
        result.map_err(|source| StorageError::io("write configs", &self.path, source))?;
        self.length += length;
        self.io
            .sync(&self.file)
            .await
            .map_err(|source| StorageError::io("fsync configs", &self.path, source))?;
        self.configs.push(StoredConfig {
            index,
            term,
            position,
            payload: payload.to_vec(),
        });
        Ok(position)
    }

    /// The configuration stored at `position`.
    pub fn at(&self, position: u64) -> Option<&StoredConfig> {
        self.configs
            .iter()
            .find(|config| config.position == position)
    }

    /// Every configuration, oldest first.
    pub fn all(&self) -> &[StoredConfig] {
        &self.configs
    }

    /// Drops the configurations of entries after `index` (all for `None`);
    /// durable when it returns.
    pub async fn truncate_after(&mut self, index: Option<u64>) -> Result<(), StorageError> {
        let keep = self
            .configs
            .iter()
            .take_while(|config| index.is_some_and(|index| config.index <= index))
            .count();
        let Some(first_dropped) = self.configs.get(keep) else {
            return Ok(());
        };
        let cut = first_dropped.position;
        self.io
            .truncate(&self.file, cut)
            .await
            .map_err(|source| StorageError::io("truncate configs", &self.path, source))?;
        self.io
            .sync(&self.file)
            .await
            .map_err(|source| StorageError::io("fsync configs", &self.path, source))?;
        self.configs.truncate(keep);
        self.length = cut;
        Ok(())
    }
}
