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
//! (`auth`), what a login was granted and whether it still stands
//! (`grant`) and the root-user bootstrap (`bootstrap`).
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

// Bytes read back from the journal and snapshots, and every request a
// client sends, are never a programmer error: no unwrap, expect or
// unchecked indexing outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod admission;
pub mod apply;
pub mod auth;
pub mod bootstrap;
pub mod command;
pub mod error;
pub mod grant;
pub mod groups;
pub mod io;
pub mod limits;
pub mod journal;
pub mod model;
pub mod options;
pub mod permissions;
pub mod prepare;
pub mod snapshot;
mod snapshot_v1;
pub mod store;
pub mod view;

#[cfg(test)]
mod sim_test;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod tests;

pub use command::{Applied, Ident, MetadataCommand, PartitionRef};
pub use error::MetadataError;
pub use model::{
    ConsumerGroup, Member, MemberKey, Metadata, Partition, PersonalAccessToken, ShardId, Stream,
    TokenHash, Topic, User, UserStatus,
};
pub use options::{Compression, Durability, TopicOptions, TopicOptionsUpdate};
pub use store::{ExecuteError, ExportedStore, MetadataStore, RecoveryReport, StoreError};
pub use view::MetadataView;

// The bounds metadata enforces (stream, topic and token counts, name and
// credential lengths, topic option ranges, journal and snapshot sizes) are
// written in `limits`; the wire's own (names, partitions per request) in
// `iggyd_wire::protocol::limits`.

/// Raw token length in characters (URL-safe base64 of 32 random bytes fits
/// in 43; the SDK accepts up to 255, Apache's HTTP validation 100).
pub const PAT_TOKEN_BYTES: usize = 32;

/// Id of the root user: created at bootstrap, never deleted (48), its
/// permissions never changed (49).
pub const ROOT_USER_ID: u32 = 0;
