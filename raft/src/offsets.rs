//! Stored consumer offsets as a Raft entry: the payload of a
//! [`crate::Proposal::Offsets`], a list of writes (store an offset, or
//! delete one) that every replica applies in log order to its own offsets
//! store, so a new leader serves the offsets the old one acknowledged. A
//! leader coalesces the writes it receives in one pump round into one
//! entry (many auto-commits, one entry).
//!
//! # Payload layout (little-endian)
//!
//! `[version u8 = 1][count u32]` then `count` writes of 14 bytes:
//! `[kind u8: 1 consumer, 2 group][op u8: 1 store, 2 delete][id u32][offset u64]`.
//!
//! Must not: panic on a payload (it comes from the log or a peer).

use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};

const VERSION: u8 = 1;
const HEAD: usize = 5;
const WRITE: usize = 14;

/// Most writes one entry holds (its payload stays below the storage's
/// 64 KiB bound for offsets entries).
pub const WRITES_MAX: usize = 4096;

/// One write of a stored consumer offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetWrite {
    Store { consumer: ConsumerKey, offset: u64 },
    Delete { consumer: ConsumerKey },
}

impl OffsetWrite {
    pub fn consumer(&self) -> ConsumerKey {
        match self {
            OffsetWrite::Store { consumer, .. } | OffsetWrite::Delete { consumer } => *consumer,
        }
    }
}

/// The payload of an offsets entry holding `writes` (at most
/// [`WRITES_MAX`]: the caller splits).
pub fn encode(writes: &[OffsetWrite]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + writes.len() * WRITE);
    out.push(VERSION);
    out.extend_from_slice(&(writes.len() as u32).to_le_bytes());
    for write in writes {
        let (op, offset) = match write {
            OffsetWrite::Store { offset, .. } => (1u8, *offset),
            OffsetWrite::Delete { .. } => (2u8, 0),
        };
        let consumer = write.consumer();
        out.push(consumer.kind as u8);
        out.push(op);
        out.extend_from_slice(&consumer.id.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    out
}

/// The writes of an offsets entry's payload, or why it is not one.
pub fn decode(bytes: &[u8]) -> Result<Vec<OffsetWrite>, String> {
    decode_at_most(bytes, WRITES_MAX)
}

/// The writes of a payload of any count (a snapshot's whole store, which
/// [`encode`] writes too), bounded by the bytes given.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<OffsetWrite>, String> {
    decode_at_most(bytes, bytes.len() / WRITE)
}

fn decode_at_most(bytes: &[u8], writes_max: usize) -> Result<Vec<OffsetWrite>, String> {
    let (head, body) = bytes
        .split_at_checked(HEAD)
        .ok_or_else(|| "an offsets entry shorter than its head".to_string())?;
    let (version, count) = head
        .split_first()
        .ok_or_else(|| "an empty offsets entry".to_string())?;
    if *version != VERSION {
        return Err(format!("an offsets entry of version {version}"));
    }
    let count = u32::from_le_bytes(
        count
            .try_into()
            .map_err(|_| "an offsets entry's count".to_string())?,
    ) as usize;
    if count > writes_max || body.len() != count * WRITE {
        return Err(format!(
            "an offsets entry of {count} writes in {} bytes",
            body.len()
        ));
    }
    body.chunks_exact(WRITE)
        .map(|write| {
            let field = |at: usize, len: usize| {
                write
                    .get(at..at + len)
                    .ok_or_else(|| "a short offsets write".to_string())
            };
            let kind = match field(0, 1)? {
                [1] => ConsumerKind::Consumer,
                [2] => ConsumerKind::Group,
                other => return Err(format!("an offsets write of consumer kind {other:?}")),
            };
            let id = u32::from_le_bytes(field(2, 4)?.try_into().map_err(|_| "an id")?);
            let offset = u64::from_le_bytes(field(6, 8)?.try_into().map_err(|_| "an offset")?);
            let consumer = ConsumerKey { kind, id };
            match field(1, 1)? {
                [1] => Ok(OffsetWrite::Store { consumer, offset }),
                [2] => Ok(OffsetWrite::Delete { consumer }),
                other => Err(format!("an offsets write of op {other:?}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves writes of both kinds and ops read back as encoded, and that a
    // payload with a wrong version, count, length, kind or op is refused
    // without a panic.
    #[test]
    fn writes_round_trip_and_damage_is_refused() {
        let writes = vec![
            OffsetWrite::Store {
                consumer: ConsumerKey {
                    kind: ConsumerKind::Consumer,
                    id: 7,
                },
                offset: u64::MAX - 1,
            },
            OffsetWrite::Delete {
                consumer: ConsumerKey {
                    kind: ConsumerKind::Group,
                    id: 3,
                },
            },
        ];
        let bytes = encode(&writes);
        assert_eq!(bytes.len(), HEAD + 2 * WRITE);
        assert_eq!(decode(&bytes).unwrap(), writes);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        assert!(decode(&[]).is_err());
        let mut wrong = bytes.clone();
        wrong[0] = 2;
        assert!(decode(&wrong).is_err(), "version");
        assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "length");
        let mut wrong = bytes.clone();
        wrong[1] = 3;
        assert!(decode(&wrong).is_err(), "count");
        let mut wrong = bytes.clone();
        wrong[HEAD] = 9;
        assert!(decode(&wrong).is_err(), "kind");
        let mut wrong = bytes.clone();
        wrong[HEAD + 1] = 0;
        assert!(decode(&wrong).is_err(), "op");
        // Every prefix of a damaged payload is refused or decodes; none
        // panics.
        for cut in 0..bytes.len() {
            let _ = decode(&bytes[..cut]);
        }
    }
}
