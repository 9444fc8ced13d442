//! Metadata: streams, topics, partitions (and their owner shards), users,
//! personal access tokens and consumer groups — the state every shard needs
//! to route and authorise a request, but that only shard 0 changes.
//!
//! Owns: the model (`model`), the closed set of state changes
//! (`command::MetadataCommand`) and their deterministic application
//! (`apply`), the topic option catalog (`options`), consumer-group
//! assignment (`groups`), the permission rules (`permissions`), the
//! checksummed command journal and snapshots (`journal`, `snapshot`,
//! `store`), the immutable published view (`view`), password/token helpers
//! (`auth`) and the root-user bootstrap (`bootstrap`).
//!
//! Must not: touch partition data (purge, segments and offsets belong to
//! the owner shard's pump), do network I/O, or edit the wire codec in
//! `protocol/` (it is reused read-only: `Permissions`, option TLVs, reply
//! info structs). Nothing here reads the clock or a random source while
//! applying a command: the caller resolves time, hashes and tokens first, so
//! replaying the journal rebuilds exactly the same state.
//!
//! The intended flow: a connection on any shard that receives a metadata
//! change forwards it to shard 0. Shard 0 turns it into a
//! [`MetadataCommand`] (reading the clock, hashing the password, drawing a
//! token), calls [`MetadataStore::execute`] (apply + append to the journal +
//! fsync), then [`Metadata::publish`] and sends the new
//! `Arc<MetadataView>` to every shard over the mesh. Each shard swaps its
//! local `Arc` — readers never lock, a view never changes after it is
//! published.

pub mod apply;
pub mod auth;
pub mod bootstrap;
pub mod command;
pub mod error;
pub mod groups;
pub mod io;
pub mod journal;
pub mod model;
pub mod options;
pub mod permissions;
pub mod prepare;
pub mod snapshot;
pub mod store;
pub mod view;

#[cfg(test)]
mod tests;

pub use command::{Applied, Ident, MetadataCommand, PartitionRef};
pub use error::MetadataError;
pub use model::{
    ConsumerGroup, Member, MemberKey, Metadata, Partition, PersonalAccessToken, ShardId, Stream,
    TokenHash, Topic, User, UserStatus,
};
pub use options::{Compression, Durability, TopicOptions, TopicOptionsUpdate};
pub use store::{ExecuteError, MetadataStore, RecoveryReport, StoreError};
pub use view::MetadataView;

/// Streams the server holds at most (Apache: 1,048,576); beyond → 1020.
pub const STREAMS_MAX: usize = 1_048_576;
/// Topics per stream at most (Apache: 4,096); beyond → 2021.
pub const TOPICS_PER_STREAM_MAX: usize = 4_096;
/// Partition ids of one topic live in `0..PARTITION_ID_SPACE` (Apache:
/// 1,000,000); a create that would pass it → 3013.
pub const PARTITION_ID_SPACE: u32 = 1_000_000;
/// Partitions one CreatePartitions/DeletePartitions may add or remove
/// (CreateTopic allows 0..=this); outside → 2015.
pub const PARTITIONS_PER_REQUEST_MAX: u32 = 1_000;
/// Stream, topic and consumer-group names: 1..=255 bytes (a wire `Name`).
pub const NAME_LEN_MIN: usize = 1;
/// See [`NAME_LEN_MIN`].
pub const NAME_LEN_MAX: usize = 255;
/// Usernames: 3..=50 characters; outside → 43.
pub const USERNAME_LEN_MIN: usize = 3;
/// See [`USERNAME_LEN_MIN`].
pub const USERNAME_LEN_MAX: usize = 50;
/// Passwords: 3..=100 characters; outside → 44 (42 at login).
pub const PASSWORD_LEN_MIN: usize = 3;
/// See [`PASSWORD_LEN_MIN`].
pub const PASSWORD_LEN_MAX: usize = 100;
/// Personal access tokens per user (Apache default); beyond → 52.
pub const PATS_PER_USER_MAX: usize = 100;
/// Token names: 3..=30 characters (Apache's command validation); outside → 50.
pub const PAT_NAME_LEN_MIN: usize = 3;
/// See [`PAT_NAME_LEN_MIN`].
pub const PAT_NAME_LEN_MAX: usize = 30;
/// Raw token length in characters (URL-safe base64 of 32 random bytes fits
/// in 43; the SDK accepts up to 255, Apache's HTTP validation 100).
pub const PAT_TOKEN_BYTES: usize = 32;
/// Members one consumer group may hold; the SDK gives each client one
/// membership per group, so this bounds per-group memory.
pub const GROUP_MEMBERS_MAX: usize = 65_536;
/// Commands between two snapshots. Metadata changes are rare; 1,024 keeps
/// replay at start well under a second while snapshots stay infrequent.
pub const SNAPSHOT_INTERVAL_COMMANDS: u64 = 1_024;
/// Largest journal record payload and largest snapshot body accepted from
/// disk. A length above it is corruption, not a reason to allocate.
pub const RECORD_PAYLOAD_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Largest snapshot accepted from disk.
pub const SNAPSHOT_MAX_BYTES: usize = 1024 * 1024 * 1024;

/// Topic option bounds (§4.9).
pub const SEGMENT_SIZE_MIN_BYTES: u64 = 1024 * 1024;
/// See [`SEGMENT_SIZE_MIN_BYTES`].
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Segment sizes are multiples of this.
pub const SEGMENT_SIZE_ALIGN_BYTES: u64 = 512;
/// Default segment size: 1 GiB.
pub const SEGMENT_SIZE_DEFAULT_BYTES: u64 = 1024 * 1024 * 1024;
/// `messages_required_to_save`: 1..=16,777,216, default 1,024.
pub const MESSAGES_REQUIRED_TO_SAVE_MAX: u32 = 16_777_216;
/// See [`MESSAGES_REQUIRED_TO_SAVE_MAX`].
pub const MESSAGES_REQUIRED_TO_SAVE_DEFAULT: u32 = 1_024;
/// `size_of_messages_required_to_save`: at most 1 GiB, default 1 MiB.
pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// See [`SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES`].
pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_DEFAULT_BYTES: u64 = 1024 * 1024;

/// Id of the root user: created at bootstrap, never deleted (48), its
/// permissions never changed (49).
pub const ROOT_USER_ID: u32 = 0;
