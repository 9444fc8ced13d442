//! iggyd's consensus layer: the openraft type configuration of a
//! partition's Raft group and openraft's storage traits on the partition's
//! segment log (`iggyd_storage::raft::RaftLog`), running on monoio, one
//! group per partition on the partition's owner shard (single-threaded: a
//! group never leaves its thread).
//!
//! - `codec.rs`: the vote and membership configurations as the bytes the
//!   storage keeps (the storage knows no consensus library).
//! - `log_store.rs`: `RaftLogStorage` and `RaftLogReader`: entries are the
//!   partition's batches (data), blank entries and membership entries;
//!   every replica appends the leader's stamped batch as is.
//! - `state_machine.rs`: `RaftStateMachine`: applying an entry makes its
//!   messages committed, which is what consumers may see; the log itself
//!   is the state, so a snapshot is a position (where retention deleted
//!   the messages before), its membership and the offsets store.
//! - `backend.rs`, `network.rs`: the log store over a backend (the
//!   daemon's pump), and the RPCs as bytes over a transport.
//! - `offsets.rs`: stored consumer offsets as an entry of their own
//!   (`Proposal::Offsets`, no messages), applied in log order on every
//!   replica.
//! - `replay.rs`: resends left in doubt.
//! - `retention.rs`: what retention may delete of a replicated partition
//!   now, and where its group should take a snapshot so more may go.
//! - `sim/` (tests only): the seeded cluster simulation of these on
//!   virtual time.
//!
//! The log stores, the state machine and the network are generic over the
//! type configuration ([`PartitionTypes`]: everything [`PartitionRaft`]
//! fixes but the runtime), their parameter defaulting to
//! [`PartitionRaft`], so the tests' cluster simulation runs the same code
//! on a runtime with virtual time.
//!
//! Must not: know about connections, shards or the wire protocol beyond the
//! batch record, or decide durability (the caller's commit phase does; this
//! step syncs before reporting an append flushed).
//!
//! Like the crates below it, it denies `unwrap`, `expect` and unchecked
//! indexing crate-wide outside tests: bytes from a peer or the disk are
//! never a reason to panic.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod backend;
pub mod codec;
pub mod log_store;
pub mod membership;
pub mod network;
pub mod offsets;
pub mod pipeline;
pub mod replay;
pub mod retention;
pub mod state_machine;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

/// What a leader proposes: a stamped batch (its base offset is where the
/// log will continue when the entry is appended, its server timestamp the
/// leader's, so every replica stores the same bytes), or stored consumer
/// offsets (`offsets.rs`; an entry with no messages, which takes no
/// message offset), or a purge: every message below the offset it names
/// (at most where the log ends when it is appended, so `u64::MAX` is all
/// of them) is deleted on every replica once it is applied (no messages
/// either; a purge of a stream or topic, or delete-segments).
///
/// A batch's bytes are shared (`Bytes`): the entry goes from the proposer
/// to the log store, and from the pump's entry cache to the replication
/// of each follower and to the state machine, without a copy.
///
/// The bytes travel as one byte string (postcard writes their length and
/// copies them), not as a sequence of `u8` values, which serde visits one
/// byte at a time: that cost a replicated send 40 % of the leader's CPU
/// (measured with `perf`). Both forms are the same bytes in postcard, so
/// nodes of either build understand each other. Decoded from a call
/// (`network::decode_shared`), a batch shares the call's buffer instead
/// of being copied out of it.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Proposal {
    Batch(#[serde(deserialize_with = "crate::network::shared_bytes")] bytes::Bytes),
    Offsets(#[serde(with = "serde_bytes")] Vec<u8>),
    Purge(u64),
}

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::fmt::Debug for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = match self {
            Proposal::Batch(bytes) => bytes,
            Proposal::Offsets(bytes) => {
                return write!(f, "Proposal(offsets, {} bytes)", bytes.len());
            }
            Proposal::Purge(below) => return write!(f, "Proposal(purge below {below})"),
        };
        match iggyd_wire::batch::BatchHeader::decode(bytes) {
            Ok(header) => write!(
                f,
                "Proposal(offset {}, {} messages, {} bytes)",
                header.base_offset,
                header.message_count,
                bytes.len()
            ),
            Err(_) => write!(f, "Proposal({} bytes, not a batch)", bytes.len()),
        }
    }
}

/// `config` with what every group on this adapter needs of openraft,
/// whatever its timing:
///
/// - snapshots only where asked (`SnapshotPolicy::Never`): a partition's
///   retention asks for one at the end of the messages it deletes
///   (`state_machine.rs`), and openraft purges every entry through it
///   (`max_in_snapshot_log_to_keep` 0: the entries name messages that are
///   about to go); a follower behind it is sent the snapshot, which
///   carries no messages, so sending it is quick whatever the timing;
/// - no leader restore (`enable_leader_restore`, on by default in openraft
///   0.10): a leader that restarts campaigns for a new term. Its log may
///   have lost entries it had already sent (an append is flushed by a
///   later fsync), and leading the same term again it would write other
///   entries at those indexes: two entries with one index and term, which
///   its followers take for the same one, so the logs diverge (Raft's log
///   matching is broken).
pub fn required_config(config: openraft::Config) -> openraft::Config {
    openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        install_snapshot_timeout: config.install_snapshot_timeout.max(5_000),
        enable_leader_restore: Some(false),
        // Six ring buffers of this many entries are allocated per group
        // for latency figures that only openraft's `runtime-stats`
        // feature (off here) records: 147 KiB a group at the default of
        // 1,024, for nothing.
        log_stage_capacity: Some(1),
        ..config
    }
}

/// What applying a data entry answers its proposer: the offsets its
/// messages got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Appended {
    pub base_offset: u64,
    pub last_offset: u64,
}

impl std::fmt::Display for Appended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offsets {}..={}", self.base_offset, self.last_offset)
    }
}

openraft::declare_raft_types!(
    /// The type configuration of a partition's Raft group: node ids are
    /// cluster node ids, terms u64, the standard leader id (one leader per
    /// term, so an entry's log id is its index and term), monoio.
    pub PartitionRaft:
        D = Proposal,
        R = Appended,
        NodeId = u64,
        Node = openraft::impls::BasicNode,
        Term = u64,
        LeaderId = StdLeaderId,
        AsyncRuntime = openraft_rt_monoio::MonoioRuntime,
);

/// An entry of a partition's Raft log.
pub type Entry = <PartitionRaft as openraft::RaftTypeConfig>::Entry;
/// A log id (`(term, index)`).
pub type LogId = openraft::alias::LogIdOf<PartitionRaft>;
/// A vote.
pub type Vote = openraft::alias::VoteOf<PartitionRaft>;
/// A membership configuration.
pub type Membership = openraft::Membership<u64, openraft::impls::BasicNode>;

/// The leader id of every partition group: a term and the node it was
/// granted to (one leader per term).
pub type StdLeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>;

/// What the adapter needs of a type configuration: everything
/// [`PartitionRaft`] fixes but the runtime (and the responder, batch and
/// error types openraft derives from it), so the same log stores, state
/// machine and network run in production on monoio and in the tests'
/// cluster simulation on virtual time.
pub trait PartitionTypes:
    openraft::RaftTypeConfig<
        D = Proposal,
        R = Appended,
        NodeId = u64,
        Node = openraft::impls::BasicNode,
        Term = u64,
        LeaderId = StdLeaderId,
        Vote = Vote,
        Entry = Entry,
    >
{
}

impl<C> PartitionTypes for C where
    C: openraft::RaftTypeConfig<
            D = Proposal,
            R = Appended,
            NodeId = u64,
            Node = openraft::impls::BasicNode,
            Term = u64,
            LeaderId = StdLeaderId,
            Vote = Vote,
            Entry = Entry,
        >
{
}
