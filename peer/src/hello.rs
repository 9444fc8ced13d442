//! The hello each side sends once its TLS handshake is done, before any
//! frame: who is speaking (cluster, node, shard), which node it means to
//! reach, and the protocol version. Its layout, encoding and a decoder that
//! never panics; the checks against what a side expects are in
//! `handshake.rs`.
//!
//! Layout (little-endian):
//!
//! ```text
//! offset  size  field
//!      0     4  magic        "IGDP"
//!      4     2  version      u16, 1
//!      6     1  name length  n, 1..=63
//!      7     n  cluster      the cluster name, [a-z0-9-] (identity.rs)
//!    7+n     8  node id      u64, the sender
//!   15+n     2  shard        u16, the sender's shard
//!   17+n     8  target       u64, the node the sender means to reach (in
//!                            the server's hello: the client's node id)
//!   25+n        end
//! ```
//!
//! The client speaks first; the server answers only a hello it accepts.
//! A version other than `VERSION` is refused (there is one so far); a
//! later version would add a range here.
//!
//! Must not: do I/O or panic on any input.

use crate::identity::{ClusterName, ClusterNameError};

pub const MAGIC: [u8; 4] = *b"IGDP";
pub const VERSION: u16 = 1;

/// The fixed part read first: magic, version and the name's length.
pub const PREFIX_BYTES: usize = 7;

/// The part after the cluster name: node id, shard, target.
const SUFFIX_BYTES: usize = 18;

/// The longest hello.
pub const HELLO_BYTES_MAX: usize =
    PREFIX_BYTES + crate::identity::CLUSTER_NAME_BYTES_MAX + SUFFIX_BYTES;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub cluster: ClusterName,
    pub node_id: u64,
    pub shard: u16,
    pub target_node_id: u64,
}

/// Why bytes are not a hello this version accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("no hello: the magic is {0:02x?}, not \"IGDP\" (not an iggyd peer)")]
    Magic([u8; 4]),
    #[error("protocol version {found}, this node speaks {supported}")]
    Version { found: u16, supported: u16 },
    #[error("a cluster name of {0} bytes (1 to 63)")]
    NameLength(u8),
    #[error(transparent)]
    ClusterName(#[from] ClusterNameError),
    #[error("a hello of {found} bytes where its prefix announces {expected}")]
    Length { expected: usize, found: usize },
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let name = self.cluster.as_str().as_bytes();
        let mut bytes = Vec::with_capacity(PREFIX_BYTES + name.len() + SUFFIX_BYTES);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        // A `ClusterName` is at most 63 bytes.
        bytes.push(name.len() as u8);
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(&self.node_id.to_le_bytes());
        bytes.extend_from_slice(&self.shard.to_le_bytes());
        bytes.extend_from_slice(&self.target_node_id.to_le_bytes());
        bytes
    }

    /// Checks the prefix (magic, version, name length) and returns how
    /// many bytes follow it.
    pub fn remaining_after(prefix: &[u8; PREFIX_BYTES]) -> Result<usize, HelloError> {
        let [m0, m1, m2, m3, v0, v1, name_len] = *prefix;
        if [m0, m1, m2, m3] != MAGIC {
            return Err(HelloError::Magic([m0, m1, m2, m3]));
        }
        let version = u16::from_le_bytes([v0, v1]);
        if version != VERSION {
            return Err(HelloError::Version {
                found: version,
                supported: VERSION,
            });
        }
        if name_len == 0 || usize::from(name_len) > crate::identity::CLUSTER_NAME_BYTES_MAX {
            return Err(HelloError::NameLength(name_len));
        }
        Ok(usize::from(name_len) + SUFFIX_BYTES)
    }

    /// A whole hello, exactly.
    pub fn decode(bytes: &[u8]) -> Result<Hello, HelloError> {
        let mut prefix = [0u8; PREFIX_BYTES];
        let Some(head) = bytes.get(..PREFIX_BYTES) else {
            return Err(HelloError::Length {
                expected: PREFIX_BYTES,
                found: bytes.len(),
            });
        };
        prefix.copy_from_slice(head);
        let expected = PREFIX_BYTES + Hello::remaining_after(&prefix)?;
        if bytes.len() != expected {
            return Err(HelloError::Length {
                expected,
                found: bytes.len(),
            });
        }
        let name_end = expected - SUFFIX_BYTES;
        let name = bytes.get(PREFIX_BYTES..name_end).unwrap_or_default();
        let cluster = ClusterName::new(&String::from_utf8_lossy(name))?;
        let field = |at: usize, out: &mut [u8]| {
            if let Some(source) = bytes.get(name_end + at..name_end + at + out.len()) {
                out.copy_from_slice(source);
            }
        };
        let (mut node, mut shard, mut target) = ([0u8; 8], [0u8; 2], [0u8; 8]);
        field(0, &mut node);
        field(8, &mut shard);
        field(10, &mut target);
        Ok(Hello {
            cluster,
            node_id: u64::from_le_bytes(node),
            shard: u16::from_le_bytes(shard),
            target_node_id: u64::from_le_bytes(target),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggyd_testkit::rng::Rng;

    fn hello() -> Hello {
        Hello {
            cluster: ClusterName::new("prod").unwrap(),
            node_id: 0x0102_0304_0506_0708,
            shard: 0x0A0B,
            target_node_id: 3,
        }
    }

    // Proves the layout byte for byte and the round trip.
    #[test]
    fn the_layout_is_as_documented_and_round_trips() {
        let bytes = hello().encode();
        assert_eq!(
            bytes,
            [
                b'I', b'G', b'D', b'P', 1, 0, 4, b'p', b'r', b'o', b'd', //
                8, 7, 6, 5, 4, 3, 2, 1, 0x0B, 0x0A, 3, 0, 0, 0, 0, 0, 0, 0,
            ]
        );
        let prefix: [u8; PREFIX_BYTES] = bytes[..PREFIX_BYTES].try_into().unwrap();
        assert_eq!(
            Hello::remaining_after(&prefix).unwrap(),
            bytes.len() - PREFIX_BYTES
        );
        assert_eq!(Hello::decode(&bytes).unwrap(), hello());
        let longest = Hello {
            cluster: ClusterName::new(&"a".repeat(63)).unwrap(),
            ..hello()
        };
        assert_eq!(longest.encode().len(), HELLO_BYTES_MAX);
    }

    // Proves each refusal: magic, version, name length, a name outside
    // the rules, a wrong total length.
    #[test]
    fn bad_hellos_are_refused_with_the_reason() {
        let good = hello().encode();
        let with = |at: usize, value: &[u8]| {
            let mut bytes = good.clone();
            bytes[at..at + value.len()].copy_from_slice(value);
            Hello::decode(&bytes).unwrap_err()
        };
        assert_eq!(with(0, b"IGDX"), HelloError::Magic(*b"IGDX"));
        assert_eq!(
            with(4, &[2, 0]),
            HelloError::Version {
                found: 2,
                supported: 1
            }
        );
        assert_eq!(with(6, &[0]), HelloError::NameLength(0));
        assert_eq!(with(6, &[64]), HelloError::NameLength(64));
        assert!(matches!(with(7, b"P"), HelloError::ClusterName(_)));
        assert!(matches!(with(6, &[3]), HelloError::Length { .. }));
        assert!(matches!(
            Hello::decode(&good[..good.len() - 1]),
            Err(HelloError::Length { .. })
        ));
        assert!(matches!(
            Hello::decode(&good[..3]),
            Err(HelloError::Length { .. })
        ));
        // A TLS ClientHello or an Iggy frame is no hello.
        assert!(matches!(
            Hello::decode(&[0x16, 3, 1, 0, 0xC8, 1, 0]),
            Err(HelloError::Magic(_))
        ));
    }

    // Proves decoding never panics: every 7-byte prefix variation of the
    // version and length bytes, then 20,000 seeded random inputs (half with
    // the right magic and version).
    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        for version in 0..=3u16 {
            for name_len in 0..=255u8 {
                let mut prefix = [0u8; PREFIX_BYTES];
                prefix[..4].copy_from_slice(&MAGIC);
                prefix[4..6].copy_from_slice(&version.to_le_bytes());
                prefix[6] = name_len;
                let _ = Hello::remaining_after(&prefix);
                let _ = Hello::decode(&prefix);
            }
        }
        let seed = 0x4E11_0000;
        let mut rng = Rng(seed);
        for case in 0..20_000 {
            let len = rng.index(HELLO_BYTES_MAX + 10);
            let mut bytes = rng.bytes(len);
            if case % 2 == 0 && bytes.len() >= PREFIX_BYTES {
                bytes[..4].copy_from_slice(&MAGIC);
                bytes[4..6].copy_from_slice(&VERSION.to_le_bytes());
                bytes[6] = rng.below(70) as u8;
            }
            if let Ok(hello) = Hello::decode(&bytes) {
                assert_eq!(hello.encode(), bytes, "seed {seed:#x} case {case}");
            }
        }
    }
}
