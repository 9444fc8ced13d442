//! Metadata snapshots: the whole [`Metadata`] at a journal sequence
//! number, written atomically (temporary file, fsync, rename, directory
//! fsync) so that the file on disk is always either the old or the new
//! snapshot, never a mix.
//!
//! Must not: accept a snapshot it cannot fully verify (magic, length,
//! checksum, decode, model invariants): there is no older copy to fall back
//! to once the journal has been cut, so a bad snapshot is a typed error
//! that stops start-up, never a guess.

use xxhash_rust::xxh3::xxh3_64;

use super::model::Metadata;
use crate::limits::SNAPSHOT_MAX_BYTES;

/// File name of the snapshot inside the metadata directory.
pub const SNAPSHOT_FILE: &str = "metadata.snapshot";

/// First 8 bytes of every snapshot written today: "IGDMETA" + format
/// version 2 (partitions carry storage ids, users their incarnation,
/// consumer groups their pending hand-offs).
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"IGDMETA\x02";

/// Format version 1 (before those), still read: see `snapshot_v1`.
pub const SNAPSHOT_MAGIC_V1: [u8; 8] = *b"IGDMETA\x01";

/// Bytes before the body.
pub const SNAPSHOT_HEADER_BYTES: usize = 32;

/// A snapshot file.
///
/// Layout (little-endian):
/// ```text
/// [magic 8 B = "IGDMETA\x02" (version 1: "IGDMETA\x01", body without storage ids)]
/// [seq u64]        last journal sequence number included
/// [len u64]        body length
/// [checksum u64]   XXH3-64 of (seq ‖ len ‖ body)
/// [body]           postcard(Metadata)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub seq: u64,
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("metadata snapshot is corrupt: {reason}")]
    Corrupt { reason: String },
    #[error("metadata snapshot could not be encoded: {reason}")]
    Encode { reason: String },
}

fn checksum(seq: u64, body: &[u8]) -> u64 {
    let mut bytes = Vec::with_capacity(16 + body.len());
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(body);
    xxh3_64(&bytes)
}

impl Snapshot {
    pub fn encode(&self) -> Result<Vec<u8>, SnapshotError> {
        let body = postcard::to_stdvec(&self.metadata).map_err(|error| SnapshotError::Encode {
            reason: error.to_string(),
        })?;
        let mut out = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + body.len());
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&checksum(self.seq, &body).to_le_bytes());
        out.extend_from_slice(&body);
        assert_eq!(out.len(), SNAPSHOT_HEADER_BYTES + body.len());
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let corrupt = |reason: &str| SnapshotError::Corrupt {
            reason: reason.to_owned(),
        };
        if bytes.len() > SNAPSHOT_MAX_BYTES {
            return Err(corrupt("larger than the snapshot limit"));
        }
        let header = bytes
            .get(..SNAPSHOT_HEADER_BYTES)
            .ok_or_else(|| corrupt("shorter than its header"))?;
        let version_1 = match header.get(..8) {
            Some(magic) if magic == SNAPSHOT_MAGIC => false,
            Some(magic) if magic == SNAPSHOT_MAGIC_V1 => true,
            _ => return Err(corrupt("bad magic or unknown format version")),
        };
        let field = |range: std::ops::Range<usize>| {
            let mut value = [0u8; 8];
            if let Some(slice) = header.get(range) {
                value.copy_from_slice(slice);
            }
            u64::from_le_bytes(value)
        };
        let seq = field(8..16);
        let len = field(16..24);
        let expected = field(24..32);
        let body = bytes.get(SNAPSHOT_HEADER_BYTES..).unwrap_or_default();
        if body.len() as u64 != len {
            return Err(SnapshotError::Corrupt {
                reason: format!("body is {} bytes, header says {len}", body.len()),
            });
        }
        if checksum(seq, body) != expected {
            return Err(corrupt("checksum mismatch"));
        }
        let does_not_decode = |error: postcard::Error| SnapshotError::Corrupt {
            reason: format!("body does not decode: {error}"),
        };
        let metadata: Metadata = if version_1 {
            postcard::from_bytes::<super::snapshot_v1::MetadataV1>(body)
                .map_err(does_not_decode)?
                .upgrade()
        } else {
            postcard::from_bytes(body).map_err(does_not_decode)?
        };
        metadata
            .check_invariants()
            .map_err(|reason| SnapshotError::Corrupt { reason })?;
        Ok(Self { seq, metadata })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MetadataCommand;

    fn sample() -> Snapshot {
        let mut metadata = Metadata::new();
        metadata
            .apply(MetadataCommand::CreateStream {
                name: "s".into(),
                created_at_us: 5,
            })
            .unwrap();
        Snapshot { seq: 7, metadata }
    }

    // Proves a version-1 snapshot (written before storage ids) still loads:
    // every partition gets a storage id in stream, topic and partition
    // order, the counter continues after them, and the model checks out.
    #[test]
    fn version_1_snapshots_get_storage_ids() {
        use crate::options::{Durability, TopicOptions};
        use crate::snapshot_v1::{MetadataV1, PartitionV1, StreamV1, TopicV1};
        let partition = |id| PartitionV1 {
            id,
            created_at_us: 9,
            owner_shard: id as usize,
        };
        let topic = |id, partitions: u32| TopicV1 {
            id,
            name: format!("t{id}"),
            created_at_us: 8,
            options: TopicOptions::defaults(Durability::Persisted),
            partitions: (0..partitions).map(partition).collect(),
            groups: std::collections::BTreeMap::new(),
            next_group_id: 0,
        };
        let mut old = MetadataV1 {
            applied_commands: 5,
            ..MetadataV1::default()
        };
        for (stream_id, partitions) in [(0u32, [2u32, 1]), (3, [0, 3])] {
            old.stream_names.insert(format!("s{stream_id}"), stream_id);
            old.streams.insert(
                stream_id,
                StreamV1 {
                    id: stream_id,
                    name: format!("s{stream_id}"),
                    created_at_us: 7,
                    topics: (0u32..)
                        .zip(partitions)
                        .map(|(id, count)| (id, topic(id, count)))
                        .collect(),
                },
            );
        }
        let body = postcard::to_stdvec(&old).unwrap();
        let mut bytes = SNAPSHOT_MAGIC_V1.to_vec();
        bytes.extend_from_slice(&11u64.to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&checksum(11, &body).to_le_bytes());
        bytes.extend_from_slice(&body);
        let snapshot = Snapshot::decode(&bytes).unwrap();
        assert_eq!(snapshot.seq, 11);
        let ids = snapshot.metadata.storage_ids();
        let expected = [
            (0, (0, 0, 0)),
            (1, (0, 0, 1)),
            (2, (0, 1, 0)),
            (3, (3, 1, 0)),
            (4, (3, 1, 1)),
            (5, (3, 1, 2)),
        ];
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), expected);
        assert_eq!(snapshot.metadata.next_storage_id(), 6);
        assert_eq!(snapshot.metadata.applied_commands(), 5);
        // Written again, it is version 2 and round-trips.
        let again = Snapshot::decode(&snapshot.encode().unwrap()).unwrap();
        assert_eq!(again, snapshot);
    }

    // Proves snapshots round-trip and any flipped bit or cut is rejected.
    #[test]
    fn round_trip_and_damage() {
        let snapshot = sample();
        let bytes = snapshot.encode().unwrap();
        assert_eq!(Snapshot::decode(&bytes).unwrap(), snapshot);
        for offset in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[offset] ^= 0x04;
            assert!(Snapshot::decode(&damaged).is_err(), "flip at {offset}");
        }
        for cut in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
