//! The vote and membership configurations as bytes, for the storage (which
//! keeps them opaque): small, versioned by their first byte, and decoded
//! without trusting a length (bytes read back from a disk).
//!
//! - Vote (18 bytes): `[1][term u64][voted_for u64][committed u8]`.
//! - Membership: `[1][configs u16]([voters u16][id u64 × voters])×configs
//!   [nodes u16]([id u64][addr_len u16][addr])×nodes`, everything
//!   little-endian.
//!
//! Must not: panic on any input.

use crate::{Membership, Vote};
use openraft::impls::BasicNode;
use std::collections::{BTreeMap, BTreeSet};

const VERSION: u8 = 1;

pub fn encode_vote(vote: &Vote) -> Vec<u8> {
    let mut out = Vec::with_capacity(18);
    out.push(VERSION);
    let leader = vote.leader_id();
    out.extend_from_slice(&leader.term.to_le_bytes());
    out.extend_from_slice(&leader.voted_for.to_le_bytes());
    out.push(u8::from(vote.is_committed()));
    out
}

pub fn decode_vote(bytes: &[u8]) -> Option<Vote> {
    let mut reader = Reader(bytes);
    if reader.u8()? != VERSION {
        return None;
    }
    let term = reader.u64()?;
    let node = reader.u64()?;
    let committed = match reader.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    reader.end()?;
    Some(if committed {
        Vote::new_committed(term, node)
    } else {
        Vote::new(term, node)
    })
}

pub fn encode_membership(membership: &Membership) -> Vec<u8> {
    let mut out = vec![VERSION];
    let configs = membership.get_joint_config();
    out.extend_from_slice(&(configs.len() as u16).to_le_bytes());
    for config in configs {
        out.extend_from_slice(&(config.len() as u16).to_le_bytes());
        for id in config {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    let nodes: Vec<(&u64, &BasicNode)> = membership.nodes().collect();
    out.extend_from_slice(&(nodes.len() as u16).to_le_bytes());
    for (id, node) in nodes {
        out.extend_from_slice(&id.to_le_bytes());
        let addr = node.addr.as_bytes();
        out.extend_from_slice(&(addr.len() as u16).to_le_bytes());
        out.extend_from_slice(addr);
    }
    out
}

pub fn decode_membership(bytes: &[u8]) -> Option<Membership> {
    let mut reader = Reader(bytes);
    if reader.u8()? != VERSION {
        return None;
    }
    let mut configs = Vec::new();
    for _ in 0..reader.u16()? {
        let mut config = BTreeSet::new();
        for _ in 0..reader.u16()? {
            config.insert(reader.u64()?);
        }
        configs.push(config);
    }
    let mut nodes = BTreeMap::new();
    for _ in 0..reader.u16()? {
        let id = reader.u64()?;
        let length = usize::from(reader.u16()?);
        let addr = String::from_utf8(reader.bytes(length)?.to_vec()).ok()?;
        nodes.insert(id, BasicNode { addr });
    }
    reader.end()?;
    Membership::new(configs, nodes).ok()
}

/// Reads little-endian fields off the front of a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, length: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(length)?;
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.bytes(1)?.first().copied()
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves votes and memberships round-trip, joint configurations and
    // learners included, and that truncated or extended bytes decode to
    // nothing rather than to a wrong value.
    #[test]
    fn votes_and_memberships_round_trip_and_damage_is_refused() {
        for vote in [Vote::new(3, 7), Vote::new_committed(9, 1)] {
            let bytes = encode_vote(&vote);
            assert_eq!(decode_vote(&bytes), Some(vote));
            assert_eq!(decode_vote(&bytes[..bytes.len() - 1]), None);
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode_vote(&longer), None);
        }
        let nodes: BTreeMap<u64, BasicNode> = (1..=4)
            .map(|id| {
                (
                    id,
                    BasicNode {
                        addr: format!("10.0.0.{id}:8091"),
                    },
                )
            })
            .collect();
        let joint = Membership::new(
            vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3])],
            nodes,
        )
        .unwrap();
        let bytes = encode_membership(&joint);
        assert_eq!(decode_membership(&bytes), Some(joint));
        for cut in 0..bytes.len() {
            assert_eq!(decode_membership(&bytes[..cut]), None, "cut at {cut}");
        }
    }
}
