//! A group's state-machine snapshot, kept beside its log (`raft/machine`):
//! opaque bytes the consensus adapter encodes (the metadata group's store
//! at an entry, with that entry and its membership), so that the entries
//! it covers can be purged and a restart begins from it instead of the
//! whole log. Partition groups keep none: their messages are the segment
//! log's, and their snapshot is a position (`state.rs`'s purge point).
//!
//! Written whole, as the state file is (`state::write_whole`): a crash
//! leaves the old snapshot or the new one, never a mix.
//!
//! # Layout (little-endian)
//!
//! `["IRM1"][length u64][XXH3-64 u64 of the bytes][bytes]`
//!
//! Must not: return bytes whose checksum fails, or read a length past
//! [`MACHINE_SNAPSHOT_BYTES_MAX`] (a damaged length must not allocate).

use crate::StorageError;
use crate::io::{OpenMode, StorageIo};
use std::path::Path;

/// The largest snapshot kept (the metadata store's own limit is lower).
pub const MACHINE_SNAPSHOT_BYTES_MAX: u64 = 1 << 30;
const MAGIC: &[u8; 4] = b"IRM1";
const HEADER_BYTES: usize = 4 + 8 + 8;
const FILE_NAME: &str = "machine";
const TEMP_NAME: &str = "machine.tmp";

fn encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + bytes.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The bytes of a whole file, or why they are not a snapshot.
fn decode(file: &[u8]) -> Result<&[u8], String> {
    let header = file.get(..HEADER_BYTES).ok_or("shorter than its header")?;
    if header.get(..4) != Some(MAGIC.as_slice()) {
        return Err("not a state-machine snapshot (bad magic)".to_string());
    }
    let field = |at: usize| {
        header
            .get(at..at + 8)
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let (length, checksum) = (field(4), field(12));
    let body = file.get(HEADER_BYTES..).unwrap_or_default();
    if body.len() as u64 != length {
        return Err(format!(
            "{} bytes where its header says {length}",
            body.len()
        ));
    }
    if xxhash_rust::xxh3::xxh3_64(body) != checksum {
        return Err("checksum mismatch".to_string());
    }
    Ok(body)
}

/// Reads `dir/machine`: `None` when there is none; a damaged one is an
/// error (the entries it covers may be purged, so nothing replaces it).
pub async fn load<I: StorageIo>(io: &I, dir: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    let path = dir.join(FILE_NAME);
    let file = match io.open(&path, OpenMode::Existing).await {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StorageError::io(
                "open state-machine snapshot",
                &path,
                source,
            ));
        }
    };
    let length = io
        .file_len(&file)
        .await
        .map_err(|source| StorageError::io("stat state-machine snapshot", &path, source))?;
    let damaged = |reason: String| StorageError::Layout {
        path: path.clone(),
        reason: format!(
            "the group's state-machine snapshot is damaged ({reason}); the entries it covers \
             are purged, so the replica must be restored or removed by an operator"
        ),
    };
    if length > MACHINE_SNAPSHOT_BYTES_MAX + HEADER_BYTES as u64 {
        return Err(damaged(format!("{length} bytes")));
    }
    let bytes = io
        .read_exact_at(&file, 0, length as usize)
        .await
        .map_err(|source| StorageError::io("read state-machine snapshot", &path, source))?;
    decode(&bytes)
        .map(|body| Some(body.to_vec()))
        .map_err(damaged)
}

/// Writes `bytes` as `dir/machine` durably (temp file, fsync, rename,
/// directory fsync) before returning.
pub async fn save<I: StorageIo>(io: &I, dir: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let path = dir.join(FILE_NAME);
    if bytes.len() as u64 > MACHINE_SNAPSHOT_BYTES_MAX {
        return Err(StorageError::Layout {
            path,
            reason: format!(
                "a state-machine snapshot of {} bytes (at most {MACHINE_SNAPSHOT_BYTES_MAX})",
                bytes.len()
            ),
        });
    }
    super::state::write_whole(io, dir, (TEMP_NAME, FILE_NAME), encode(bytes)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the file's checks: what was encoded decodes back, and a
    // flipped byte, a cut tail or a wrong length is refused, never
    // returned as a snapshot.
    #[test]
    fn a_damaged_snapshot_is_refused() {
        let file = encode(b"the store at entry 7");
        assert_eq!(decode(&file), Ok(b"the store at entry 7".as_slice()));
        for at in 0..file.len() {
            let mut flipped = file.clone();
            flipped[at] ^= 0x20;
            assert!(decode(&flipped).is_err(), "byte {at} flipped");
        }
        assert!(decode(&file[..file.len() - 1]).is_err());
        assert!(decode(&file[..3]).is_err());
        assert_eq!(decode(&encode(b"")), Ok(b"".as_slice()));
    }
}
