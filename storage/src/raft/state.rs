//! The small, rarely written state of a partition's Raft log
//! (`raft/state`): the vote (opaque bytes the consensus library's adapter
//! encodes), the last committed entry and the last purged entry. Written
//! whole: to `state.tmp`, fsynced, renamed over `state`, the directory
//! fsynced, so a crash leaves the old state or the new one, never a mix. A
//! vote must be durable before the node acts on it; the committed entry is
//! a hint (a restarted node learns the commit again from its leader), saved
//! with the rest.
//!
//! # Layout (little-endian, 115 bytes)
//!
//! `["IRS1"][vote length u8][vote: 64 bytes, zero padded][committed: flag u8, index u64, term u64][purged: flag u8, index u64, term u64][purged next offset u64][XXH32 u32 of everything before it]`
//!
//! Must not: accept a vote over [`VOTE_BYTES_MAX`], or trust a file whose
//! checksum fails (open reports it: without its vote a node could vote twice
//! in a term).

use crate::StorageError;
use crate::io::{OpenMode, StorageIo};
use std::path::{Path, PathBuf};

/// Largest encoded vote (a term, a node id and a flag need far less).
pub const VOTE_BYTES_MAX: usize = 64;
const MAGIC: &[u8; 4] = b"IRS1";
const SIZE: usize = 4 + 1 + VOTE_BYTES_MAX + 17 + 17 + 8 + 4;
const FILE_NAME: &str = "state";
const TEMP_NAME: &str = "state.tmp";

/// A log position: `(index, term)`.
pub type LogPosition = (u64, u64);

/// What the state file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftState {
    pub vote: Option<Vec<u8>>,
    pub committed: Option<LogPosition>,
    pub purged: Option<LogPosition>,
    /// One past the last message of the data entries through the purge
    /// point (the messages stay; the entries naming them are gone).
    pub purged_next_offset: u64,
}

fn put_position(out: &mut Vec<u8>, position: Option<LogPosition>) {
    let (flag, (index, term)) = match position {
        Some(position) => (1u8, position),
        None => (0, (0, 0)),
    };
    out.push(flag);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
}

fn get_position(bytes: &[u8]) -> Option<Option<LogPosition>> {
    let index = u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?);
    let term = u64::from_le_bytes(bytes.get(9..17)?.try_into().ok()?);
    match bytes.first()? {
        0 => Some(None),
        1 => Some(Some((index, term))),
        _ => None,
    }
}

impl RaftState {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SIZE);
        out.extend_from_slice(MAGIC);
        let vote = self.vote.as_deref().unwrap_or_default();
        out.push(if self.vote.is_some() {
            vote.len() as u8
        } else {
            u8::MAX
        });
        // `save` refused a longer vote; the clamp only keeps this total.
        let kept = vote
            .get(..vote.len().min(VOTE_BYTES_MAX))
            .unwrap_or_default();
        out.extend_from_slice(kept);
        out.resize(out.len() + VOTE_BYTES_MAX - kept.len(), 0);
        put_position(&mut out, self.committed);
        put_position(&mut out, self.purged);
        out.extend_from_slice(&self.purged_next_offset.to_le_bytes());
        let checksum = xxhash_rust::xxh32::xxh32(&out, 0);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<RaftState> {
        if bytes.len() != SIZE || bytes.get(..4)? != MAGIC {
            return None;
        }
        let (body, checksum) = bytes.split_at(SIZE - 4);
        if xxhash_rust::xxh32::xxh32(body, 0) != u32::from_le_bytes(checksum.try_into().ok()?) {
            return None;
        }
        let vote_length = *body.get(4)?;
        let vote = match vote_length {
            u8::MAX => None,
            length if usize::from(length) <= VOTE_BYTES_MAX => {
                Some(body.get(5..5 + usize::from(length))?.to_vec())
            }
            _ => return None,
        };
        let positions = 5 + VOTE_BYTES_MAX;
        Some(RaftState {
            vote,
            committed: get_position(body.get(positions..positions + 17)?)?,
            purged: get_position(body.get(positions + 17..positions + 34)?)?,
            purged_next_offset: u64::from_le_bytes(
                body.get(positions + 34..positions + 42)?.try_into().ok()?,
            ),
        })
    }

    /// Reads `dir/state` (the default state when there is none; a damaged
    /// one is an error).
    pub async fn load<I: StorageIo>(io: &I, dir: &Path) -> Result<RaftState, StorageError> {
        let path = dir.join(FILE_NAME);
        let file = match io.open(&path, OpenMode::Existing).await {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(RaftState::default());
            }
            Err(source) => return Err(StorageError::io("open raft state", &path, source)),
        };
        let length = io
            .file_len(&file)
            .await
            .map_err(|source| StorageError::io("stat raft state", &path, source))?;
        let bytes = io
            .read_exact_at(&file, 0, length as usize)
            .await
            .map_err(|source| StorageError::io("read raft state", &path, source))?;
        RaftState::decode(&bytes).ok_or_else(|| StorageError::Layout {
            path,
            reason: "the Raft state (vote, committed, purged) is damaged; the node must not \
                     vote or serve until an operator restores or removes the replica"
                .to_string(),
        })
    }

    /// Writes the state durably (temp file, fsync, rename, directory fsync).
    pub async fn save<I: StorageIo>(&self, io: &I, dir: &Path) -> Result<(), StorageError> {
        if let Some(vote) = &self.vote
            && vote.len() > VOTE_BYTES_MAX
        {
            return Err(StorageError::Layout {
                path: dir.join(FILE_NAME),
                reason: format!("a vote of {} bytes (at most {VOTE_BYTES_MAX})", vote.len()),
            });
        }
        write_whole(io, dir, (TEMP_NAME, FILE_NAME), self.encode()).await
    }
}

/// Writes `bytes` as `dir/name` so that a crash leaves the old file or the
/// new one, never a mix: to `dir/temp`, fsynced, renamed over `name`, the
/// directory fsynced (the Raft state, a state-machine snapshot).
pub(super) async fn write_whole<I: StorageIo>(
    io: &I,
    dir: &Path,
    (temp, name): (&str, &str),
    bytes: Vec<u8>,
) -> Result<(), StorageError> {
    let temp: PathBuf = dir.join(temp);
    let path = dir.join(name);
    let file = io
        .open(&temp, OpenMode::CreateTruncate)
        .await
        .map_err(|source| StorageError::io("create a file written whole", &temp, source))?;
    let (result, _) = io.write_at(&file, bytes, 0).await;
    result.map_err(|source| StorageError::io("write a file written whole", &temp, source))?;
    io.sync(&file)
        .await
        .map_err(|source| StorageError::io("fsync a file written whole", &temp, source))?;
    io.rename(&temp, &path)
        .await
        .map_err(|source| StorageError::io("rename a file written whole", &path, source))?;
    io.sync_dir(dir)
        .await
        .map_err(|source| StorageError::io("fsync directory", dir, source))
}
