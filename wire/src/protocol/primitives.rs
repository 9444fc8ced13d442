//! Small wire values shared by many requests: Identifier (§4.2), Consumer
//! (§4.3), optional partition id (§4.4), Partitioning (§4.5), polling
//! strategy (§4.6), ack level (§4.7) and the login version prefix (§4.11).
//!
//! Each type decodes from a [`Reader`], and its doc comment is the byte
//! layout. Decoding validates kinds and lengths but nothing that needs
//! server state (an id may still name nothing). The encoders are the
//! client's side, compiled for this crate's unit tests only: clients (and
//! the e2e tests) encode with the workspace's test kit.

use xxhash_rust::xxh32::xxh32;

use super::error::WireError;
use super::limits::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};
use super::reader::Reader;
#[cfg(test)]
use super::reader::WireWrite;

/// A stream, topic, group or user reference.
///
/// Layout: `[kind u8][len u8][value]`
/// * kind 1 numeric: len must be 4, value u32 LE (6 bytes total);
/// * kind 2 string: len 1..=255, UTF-8 name, matched case-sensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identifier<'a> {
    Numeric(u32),
    Name(&'a str),
}

impl<'a> Identifier<'a> {
    const KIND_NUMERIC: u8 = 1;
    const KIND_STRING: u8 = 2;

    pub fn decode(reader: &mut Reader<'a>, what: &'static str) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8(what)?;
        match kind {
            Self::KIND_NUMERIC => {
                let length = reader.u8(what)?;
                if length != 4 {
                    return Err(WireError::Malformed {
                        what,
                        offset,
                        reason: "numeric identifier length must be 4",
                    });
                }
                Ok(Self::Numeric(reader.u32(what)?))
            }
            Self::KIND_STRING => Ok(Self::Name(reader.name(what)?)),
            _ => Err(WireError::Malformed {
                what,
                offset,
                reason: "identifier kind must be 1 (numeric) or 2 (string)",
            }),
        }
    }

    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Numeric(id) => {
                out.put_u8(Self::KIND_NUMERIC);
                out.put_u8(4);
                out.put_u32(*id);
            }
            Self::Name(name) => {
                out.put_u8(Self::KIND_STRING);
                out.put_name(name);
            }
        }
    }

    /// Encoded size in bytes.
    #[cfg(test)]
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Numeric(_) => 6,
            Self::Name(name) => 2 + name.len().min(255),
        }
    }
}

/// Whether a consumer is a single consumer or a consumer group (§4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ConsumerKind {
    Consumer = 1,
    ConsumerGroup = 2,
}

/// Who is polling or owns an offset.
///
/// Layout: `[kind u8][Identifier]`; kind 1 single consumer, 2 consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Consumer<'a> {
    pub kind: ConsumerKind,
    pub id: Identifier<'a>,
}

impl<'a> Consumer<'a> {
    pub fn decode(reader: &mut Reader<'a>) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = match reader.u8("consumer kind")? {
            1 => ConsumerKind::Consumer,
            2 => ConsumerKind::ConsumerGroup,
            _ => {
                return Err(WireError::Malformed {
                    what: "consumer kind",
                    offset,
                    reason: "must be 1 (consumer) or 2 (consumer group)",
                });
            }
        };
        let id = Identifier::decode(reader, "consumer id")?;
        Ok(Self { kind, id })
    }

    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.kind as u8);
        self.id.encode(out);
    }

    /// The key under which a single consumer's offsets are stored: the
    /// numeric id, or XXH32 (seed 0) of the name bytes so that the same name
    /// always maps to the same stored offset (Apache behaviour, §4.3).
    /// `None` for consumer groups, whose offsets are keyed by the group's
    /// numeric id after the server resolves the identifier.
    pub fn single_consumer_key(&self) -> Option<u32> {
        match (self.kind, self.id) {
            (ConsumerKind::Consumer, Identifier::Numeric(id)) => Some(id),
            (ConsumerKind::Consumer, Identifier::Name(name)) => Some(xxh32(name.as_bytes(), 0)),
            (ConsumerKind::ConsumerGroup, _) => None,
        }
    }
}

/// Optional partition id used by poll and the offset commands.
///
/// Layout (always 5 bytes): `[flag u8][partition_id u32]`; flag 1 = some,
/// 0 = none (the value is then ignored; encoders write 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptionalPartition;

impl OptionalPartition {
    pub fn decode(reader: &mut Reader<'_>) -> Result<Option<u32>, WireError> {
        let present = reader.bool("partition flag")?;
        let partition_id = reader.u32("partition id")?;
        Ok(present.then_some(partition_id))
    }

    #[cfg(test)]
    pub fn encode(partition_id: Option<u32>, out: &mut Vec<u8>) {
        out.put_bool(partition_id.is_some());
        out.put_u32(partition_id.unwrap_or(0));
    }
}

/// How a send picks its partition (§4.5).
///
/// Layout: `[kind u8][len u8][value]`: 1 Balanced (len 0), 2 PartitionId
/// (len 4, u32), 3 MessagesKey (len 1..=255, raw bytes). The 0.11.0 SDK
/// always sends kind 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partitioning<'a> {
    Balanced,
    PartitionId(u32),
    MessagesKey(&'a [u8]),
}

impl<'a> Partitioning<'a> {
    pub fn decode(reader: &mut Reader<'a>) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8("partitioning kind")?;
        let length = reader.u8("partitioning length")?;
        let malformed = |reason| WireError::Malformed {
            what: "partitioning",
            offset,
            reason,
        };
        match (kind, length) {
            (1, 0) => Ok(Self::Balanced),
            (1, _) => Err(malformed("balanced partitioning must have length 0")),
            (2, 4) => Ok(Self::PartitionId(reader.u32("partition id")?)),
            (2, _) => Err(malformed("partition id partitioning must have length 4")),
            (3, 0) => Err(malformed("messages key must be 1..=255 bytes")),
            (3, _) => Ok(Self::MessagesKey(
                reader.bytes(usize::from(length), "messages key")?,
            )),
            _ => Err(malformed("kind must be 1, 2 or 3")),
        }
    }

    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Balanced => {
                out.put_u8(1);
                out.put_u8(0);
            }
            Self::PartitionId(partition_id) => {
                out.put_u8(2);
                out.put_u8(4);
                out.put_u32(*partition_id);
            }
            Self::MessagesKey(key) => {
                let key = key.get(..255).unwrap_or(key);
                out.put_u8(3);
                out.put_u8(u8::try_from(key.len()).unwrap_or(u8::MAX));
                out.put_bytes(key);
            }
        }
    }

    /// Encoded size in bytes.
    #[cfg(test)]
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Balanced => 2,
            Self::PartitionId(_) => 6,
            Self::MessagesKey(key) => 2 + key.len().min(255),
        }
    }
}

/// The partition a messages key maps to, exactly as the SDK computes it:
/// `XXH32(key, seed 0) % partitions_count`. `None` when there are no
/// partitions.
pub fn partition_for_key(key: &[u8], partitions_count: u32) -> Option<u32> {
    xxh32(key, 0).checked_rem(partitions_count)
}

/// Where a poll starts (§4.6).
///
/// Layout (9 bytes): `[kind u8][value u64]`: 1 Offset, 2 Timestamp (µs),
/// 3 First, 4 Last, 5 Next. The value is ignored for kinds 3..=5 (encoders
/// write 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PollingStrategy {
    Offset(u64),
    Timestamp(u64),
    First,
    Last,
    Next,
}

impl PollingStrategy {
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8("polling strategy kind")?;
        let value = reader.u64("polling strategy value")?;
        match kind {
            1 => Ok(Self::Offset(value)),
            2 => Ok(Self::Timestamp(value)),
            3 => Ok(Self::First),
            4 => Ok(Self::Last),
            5 => Ok(Self::Next),
            _ => Err(WireError::Malformed {
                what: "polling strategy kind",
                offset,
                reason: "must be 1..=5",
            }),
        }
    }

    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, value) = match self {
            Self::Offset(value) => (1, *value),
            Self::Timestamp(value) => (2, *value),
            Self::First => (3, 0),
            Self::Last => (4, 0),
            Self::Next => (5, 0),
        };
        out.put_u8(kind);
        out.put_u64(value);
    }
}

/// Acknowledgement level at the end of store/delete offset (§4.7). The SDK
/// always sends `Quorum`; a single node treats both the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AckLevel {
    NoAck = 0,
    Quorum = 1,
}

impl AckLevel {
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        let offset = reader.position();
        match reader.u8("ack level")? {
            0 => Ok(Self::NoAck),
            1 => Ok(Self::Quorum),
            _ => Err(WireError::Malformed {
                what: "ack level",
                offset,
                reason: "must be 0 (no ack) or 1 (quorum)",
            }),
        }
    }
}

/// User account status (§4.9): 1 active, 2 inactive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum UserStatus {
    Active = 1,
    Inactive = 2,
}

impl UserStatus {
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, WireError> {
        match reader.u8("user status")? {
            1 => Ok(Self::Active),
            2 => Ok(Self::Inactive),
            value => Err(WireError::InvalidUserStatus { value }),
        }
    }
}

/// The version prefix of every login body (§4.11).
///
/// Layout: `[protocol_version u32][sdk_name Name][sdk_version Name]`. The
/// Rust SDK and the Python wheel send `0x2C00`, `rust-sdk`, `0.11.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientVersionInfo<'a> {
    pub protocol_version: u32,
    pub sdk_name: &'a str,
    pub sdk_version: &'a str,
}

impl<'a> ClientVersionInfo<'a> {
    pub fn decode(reader: &mut Reader<'a>) -> Result<Self, WireError> {
        Ok(Self {
            protocol_version: reader.u32("protocol version")?,
            sdk_name: reader.name("sdk name")?,
            sdk_version: reader.name("sdk version")?,
        })
    }

    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.protocol_version);
        out.put_name(self.sdk_name);
        out.put_name(self.sdk_version);
    }

    /// The 0.11.0 login gate (§3): any 0.11.x, i.e. at least the minimum and
    /// with the same `major.minor` bits as ours.
    pub fn is_compatible(&self) -> bool {
        self.protocol_version >= PROTOCOL_VERSION_MIN
            && (self.protocol_version >> 10) <= (PROTOCOL_VERSION >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::Status;

    fn round_trip_identifier(identifier: Identifier<'_>) {
        let mut out = Vec::new();
        identifier.encode(&mut out);
        assert_eq!(out.len(), identifier.encoded_len());
        let mut reader = Reader::new(&out);
        assert_eq!(Identifier::decode(&mut reader, "id").unwrap(), identifier);
        reader.finish("id").unwrap();
    }

    // Proves identifiers round-trip and that the §9 malformed forms (numeric
    // len != 4, kind 0/3, empty string) are refused with status 3.
    #[test]
    fn identifier_round_trip_and_rejections() {
        round_trip_identifier(Identifier::Numeric(0));
        round_trip_identifier(Identifier::Numeric(u32::MAX));
        round_trip_identifier(Identifier::Name("s1"));
        round_trip_identifier(Identifier::Name(&"x".repeat(255)));
        let mut out = Vec::new();
        Identifier::Numeric(7).encode(&mut out);
        assert_eq!(out, [1, 4, 7, 0, 0, 0]);
        for bad in [
            &[1u8, 3, 1, 2, 3][..],
            &[0, 4, 0, 0, 0, 0],
            &[3, 1, b'a'],
            &[2, 0],
            &[1, 4, 1],
        ] {
            let error = Identifier::decode(&mut Reader::new(bad), "id").unwrap_err();
            assert_eq!(error.status().map(Status::code), Some(3), "{bad:?}");
        }
    }

    // Proves consumer round trip and the XXH32 key for string consumer ids.
    #[test]
    fn consumer_round_trip_and_key() {
        for consumer in [
            Consumer {
                kind: ConsumerKind::Consumer,
                id: Identifier::Numeric(3),
            },
            Consumer {
                kind: ConsumerKind::ConsumerGroup,
                id: Identifier::Name("g"),
            },
        ] {
            let mut out = Vec::new();
            consumer.encode(&mut out);
            assert_eq!(Consumer::decode(&mut Reader::new(&out)).unwrap(), consumer);
        }
        let named = Consumer {
            kind: ConsumerKind::Consumer,
            id: Identifier::Name("c"),
        };
        assert_eq!(named.single_consumer_key(), Some(xxh32(b"c", 0)));
        let numeric = Consumer {
            kind: ConsumerKind::Consumer,
            id: Identifier::Numeric(9),
        };
        assert_eq!(numeric.single_consumer_key(), Some(9));
        let group = Consumer {
            kind: ConsumerKind::ConsumerGroup,
            id: Identifier::Numeric(9),
        };
        assert_eq!(group.single_consumer_key(), None);
        assert!(Consumer::decode(&mut Reader::new(&[3, 1, 4, 0, 0, 0, 0])).is_err());
    }

    // Proves the fixed-size primitives round-trip and reject bad kinds.
    #[test]
    fn partitioning_strategy_partition_round_trip() {
        for partitioning in [
            Partitioning::Balanced,
            Partitioning::PartitionId(1),
            Partitioning::MessagesKey(b"key"),
        ] {
            let mut out = Vec::new();
            partitioning.encode(&mut out);
            assert_eq!(out.len(), partitioning.encoded_len());
            assert_eq!(
                Partitioning::decode(&mut Reader::new(&out)).unwrap(),
                partitioning
            );
        }
        for bad in [
            &[1u8, 1, 0][..],
            &[2, 3, 0, 0, 0],
            &[3, 0],
            &[4, 0],
            &[3, 2, 1],
        ] {
            assert!(
                Partitioning::decode(&mut Reader::new(bad)).is_err(),
                "{bad:?}"
            );
        }
        for strategy in [
            PollingStrategy::Offset(5),
            PollingStrategy::Timestamp(6),
            PollingStrategy::First,
            PollingStrategy::Last,
            PollingStrategy::Next,
        ] {
            let mut out = Vec::new();
            strategy.encode(&mut out);
            assert_eq!(out.len(), 9);
            assert_eq!(
                PollingStrategy::decode(&mut Reader::new(&out)).unwrap(),
                strategy
            );
        }
        assert!(PollingStrategy::decode(&mut Reader::new(&[6, 0, 0, 0, 0, 0, 0, 0, 0])).is_err());
        for partition in [None, Some(0), Some(42)] {
            let mut out = Vec::new();
            OptionalPartition::encode(partition, &mut out);
            assert_eq!(out.len(), 5);
            assert_eq!(
                OptionalPartition::decode(&mut Reader::new(&out)).unwrap(),
                partition
            );
        }
        assert_eq!(
            OptionalPartition::decode(&mut Reader::new(&[0, 9, 0, 0, 0])).unwrap(),
            None
        );
        assert!(OptionalPartition::decode(&mut Reader::new(&[2, 0, 0, 0, 0])).is_err());
        assert_eq!(partition_for_key(b"k", 0), None);
        assert_eq!(partition_for_key(b"k", 3), Some(xxh32(b"k", 0) % 3));
    }

    // Proves the version prefix round-trips and the 0.11.x gate of §3.
    #[test]
    fn client_version_gate() {
        let info = ClientVersionInfo {
            protocol_version: 0x2C00,
            sdk_name: "rust-sdk",
            sdk_version: "0.11.0",
        };
        let mut out = Vec::new();
        info.encode(&mut out);
        assert_eq!(
            ClientVersionInfo::decode(&mut Reader::new(&out)).unwrap(),
            info
        );
        assert!(info.is_compatible());
        let patch = ClientVersionInfo {
            protocol_version: 0x2C05,
            ..info
        };
        assert!(patch.is_compatible());
        let edge = ClientVersionInfo {
            protocol_version: (12 << 10) | 2,
            ..info
        };
        assert!(!edge.is_compatible());
        let old = ClientVersionInfo {
            protocol_version: 10 << 10,
            ..info
        };
        assert!(!old.is_compatible());
    }
}
