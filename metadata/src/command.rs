//! `MetadataCommand`: the closed set of metadata changes, the unit that is
//! validated, applied, journaled and (later) replicated; and `Applied`, what
//! a successful apply reports back to shard 0.
//!
//! Must not: contain anything that is not fully resolved. A command carries
//! its timestamps, password hashes, token hashes, resolved topic options and
//! the shard count used for placement, so applying it is a pure function of
//! (state, command) and replaying the journal rebuilds the same state.
//! Identifiers stay unresolved (`Ident`) on purpose: resolving a name
//! against the state at apply time gives the same answer on replay, and
//! spares the caller a race between its view and shard 0's state.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::model::{MemberKey, ShardId, TokenHash, UserStatus, permissions_with};
use super::options::{TopicOptions, TopicOptionsUpdate};
use iggyd_wire::protocol::permissions::Permissions;
use iggyd_wire::protocol::primitives::Identifier;

/// An owned stream/topic/group/user identifier: numeric id or exact name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ident {
    Id(u32),
    Name(String),
}

impl From<Identifier<'_>> for Ident {
    fn from(identifier: Identifier<'_>) -> Self {
        match identifier {
            Identifier::Numeric(id) => Self::Id(id),
            Identifier::Name(name) => Self::Name(name.to_owned()),
        }
    }
}

impl From<&Identifier<'_>> for Ident {
    fn from(identifier: &Identifier<'_>) -> Self {
        Self::from(*identifier)
    }
}

impl From<u32> for Ident {
    fn from(id: u32) -> Self {
        Self::Id(id)
    }
}

impl From<&str> for Ident {
    fn from(name: &str) -> Self {
        Self::Name(name.to_owned())
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(formatter, "{id}"),
            Self::Name(name) => write!(formatter, "{name:?}"),
        }
    }
}

/// Every metadata change. Variant order is part of the journal format
/// (postcard encodes the variant index): append new variants at the end,
/// never reorder or remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataCommand {
    CreateStream {
        name: String,
        created_at_us: u64,
    },
    UpdateStream {
        stream: Ident,
        name: String,
    },
    DeleteStream {
        stream: Ident,
    },
    CreateTopic {
        stream: Ident,
        name: String,
        partitions_count: u32,
        /// Parsed by `options::parse_create_options` with the server's
        /// default durability.
        options: TopicOptions,
        created_at_us: u64,
        /// Shards to spread new partitions over (the plan's shard count when
        /// the command was made).
        shard_count: u32,
    },
    UpdateTopic {
        stream: Ident,
        topic: Ident,
        name: String,
        update: TopicOptionsUpdate,
    },
    DeleteTopic {
        stream: Ident,
        topic: Ident,
    },
    CreatePartitions {
        stream: Ident,
        topic: Ident,
        count: u32,
        created_at_us: u64,
        shard_count: u32,
    },
    DeletePartitions {
        stream: Ident,
        topic: Ident,
        count: u32,
    },
    CreateUser {
        username: String,
        /// Argon2id PHC string; the caller checked the password's length.
        password_hash: String,
        status: UserStatus,
        #[serde(with = "permissions_with")]
        permissions: Option<Permissions>,
        created_at_us: u64,
    },
    UpdateUser {
        user: Ident,
        username: Option<String>,
        status: Option<UserStatus>,
    },
    DeleteUser {
        user: Ident,
    },
    /// The caller verified the current password (or the caller's right to
    /// skip that) before hashing the new one.
    ChangePassword {
        user: Ident,
        password_hash: String,
    },
    UpdatePermissions {
        user: Ident,
        #[serde(with = "permissions_with")]
        permissions: Option<Permissions>,
    },
    CreatePat {
        user_id: u32,
        name: String,
        token_hash: TokenHash,
        /// µs since epoch; `None` = never.
        expiry_at_us: Option<u64>,
        created_at_us: u64,
    },
    DeletePat {
        user_id: u32,
        name: String,
    },
    CreateConsumerGroup {
        stream: Ident,
        topic: Ident,
        name: String,
    },
    DeleteConsumerGroup {
        stream: Ident,
        topic: Ident,
        group: Ident,
    },
    JoinConsumerGroup {
        stream: Ident,
        topic: Ident,
        group: Ident,
        member: MemberKey,
    },
    LeaveConsumerGroup {
        stream: Ident,
        topic: Ident,
        group: Ident,
        member: MemberKey,
    },
    /// A session ended (disconnect, logout, stale-client eviction): leave
    /// every group it was in.
    MemberGone {
        member: MemberKey,
    },
    /// The process restarted, so no session from before exists: empty
    /// every group. Journaled so that later records replay against the
    /// same (empty) memberships they were applied to.
    ResetMembers,
    /// Hand pending partitions to the members a join promised them to
    /// (their owner committed what it polled, or the rebalance timeout
    /// passed). Partitions without a pending hand-off are ignored.
    CompleteMoves {
        stream: Ident,
        topic: Ident,
        group: Ident,
        partitions: Vec<u32>,
    },
}

/// A partition the caller must create or delete data for, with its owner
/// and its storage id (which names its directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionRef {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub owner_shard: ShardId,
    pub storage_id: u64,
}

/// A consumer group whose assignment changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupRef {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
    pub generation: u64,
}

/// What a successful apply did, with the ids the reply needs and the
/// partitions whose data the owner shards must create or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    StreamCreated {
        stream_id: u32,
    },
    StreamUpdated {
        stream_id: u32,
    },
    StreamDeleted {
        stream_id: u32,
        removed: Vec<PartitionRef>,
    },
    TopicCreated {
        stream_id: u32,
        topic_id: u32,
        created: Vec<PartitionRef>,
    },
    TopicUpdated {
        stream_id: u32,
        topic_id: u32,
    },
    TopicDeleted {
        stream_id: u32,
        topic_id: u32,
        removed: Vec<PartitionRef>,
    },
    PartitionsCreated {
        created: Vec<PartitionRef>,
        rebalanced: Vec<GroupRef>,
    },
    PartitionsDeleted {
        removed: Vec<PartitionRef>,
        rebalanced: Vec<GroupRef>,
    },
    UserCreated {
        user_id: u32,
    },
    UserUpdated {
        user_id: u32,
    },
    UserDeleted {
        user_id: u32,
    },
    PasswordChanged {
        user_id: u32,
    },
    PermissionsUpdated {
        user_id: u32,
    },
    PatCreated {
        user_id: u32,
    },
    PatDeleted {
        user_id: u32,
    },
    GroupCreated {
        stream_id: u32,
        topic_id: u32,
        group_id: u32,
    },
    GroupDeleted {
        stream_id: u32,
        topic_id: u32,
        group_id: u32,
    },
    /// `changed` is false for an existing member (join is idempotent and
    /// does not bump the generation).
    GroupJoined {
        group: GroupRef,
        changed: bool,
    },
    GroupLeft {
        group: GroupRef,
    },
    MembersRemoved {
        groups: Vec<GroupRef>,
    },
    MovesCompleted {
        group: GroupRef,
    },
}
