//! The metadata model: [`Metadata`] holds every stream, topic, partition,
//! user, token and consumer group, plus the read-only lookups every shard
//! uses (by numeric id or by name).
//!
//! Must not: change state outside `apply.rs` (the only mutator, driven by
//! `MetadataCommand`s), read clocks or random sources, or hold anything that
//! cannot be serialised into a snapshot. Collections are `BTreeMap`s so
//! iteration order — and therefore snapshots, replies and replay — is
//! deterministic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::command::Ident;
use super::error::MetadataError;
use super::options::TopicOptions;
use iggyd_wire::protocol::permissions::Permissions;
use iggyd_wire::protocol::primitives::UserStatus as WireUserStatus;

/// A shard index, as the plan and the mesh number them (0 = the metadata
/// writer). Defined here, the lowest layer that names one (a partition's
/// owner); the daemon's mesh uses this type.
pub type ShardId = usize;

/// Who a consumer-group member is: the session / client id of the
/// connection that joined. A disconnect or logout removes the key from
/// every group (`MetadataCommand::MemberGone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemberKey(pub u128);

/// Blake2b-256 of a raw personal access token; the raw token is never
/// stored.
pub type TokenHash = [u8; 32];

/// User account status: active users may log in; inactive ones get
/// "invalid credentials" like a wrong password.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UserStatus {
    Active,
    Inactive,
}

impl UserStatus {
    pub fn to_wire(self) -> WireUserStatus {
        match self {
            Self::Active => WireUserStatus::Active,
            Self::Inactive => WireUserStatus::Inactive,
        }
    }
}

impl From<WireUserStatus> for UserStatus {
    fn from(status: WireUserStatus) -> Self {
        match status {
            WireUserStatus::Active => Self::Active,
            WireUserStatus::Inactive => Self::Inactive,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at_us: u64,
    pub topics: BTreeMap<u32, Topic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at_us: u64,
    pub options: TopicOptions,
    /// Invariant: `partitions[i].id == i` (ids are dense, 0-based).
    pub partitions: Vec<Partition>,
    pub groups: BTreeMap<u32, ConsumerGroup>,
    /// Group ids are never reused within a topic (§8 item 2).
    pub next_group_id: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub id: u32,
    pub created_at_us: u64,
    /// Set at create and never changed by later creates: this shard's pump
    /// is the only mutator of the partition's data.
    pub owner_shard: ShardId,
    /// Where the partition's data lives (`data_dir/partitions/<storage_id>`):
    /// drawn from [`Metadata::next_storage_id`] at create, never reused, so
    /// a partition created after a delete (same stream, topic and partition
    /// ids on the wire) never opens a directory the delete still owns.
    pub storage_id: u64,
}

/// A consumer group and its current assignment.
///
/// Invariants: `members` in join order, keys unique; the members'
/// partition lists are disjoint, sorted, and together cover exactly the
/// topic's partitions when there is at least one member. A partition in
/// `pending` is still in its current owner's list (who keeps serving it)
/// and names a member it moves to once that owner has committed what it
/// polled, or after the rebalance timeout (`groups.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    pub id: u32,
    pub name: String,
    pub members: Vec<Member>,
    /// Bumped on every membership or partition change.
    pub generation: u64,
    /// Cooperative hand-offs decided at a join, by partition id.
    pub pending: Vec<PendingMove>,
}

/// A partition that changes owner once its current owner lets go of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingMove {
    pub partition: u32,
    pub to: MemberKey,
}

impl ConsumerGroup {
    pub fn member(&self, key: MemberKey) -> Option<&Member> {
        self.members.iter().find(|member| member.key == key)
    }

    /// The member's slot index (Apache's "member id" in GroupDetails).
    pub fn member_slot(&self, key: MemberKey) -> Option<u32> {
        let slot = self.members.iter().position(|member| member.key == key)?;
        u32::try_from(slot).ok()
    }

    /// The partition ids assigned to `key`, or `None` when not a member.
    pub fn assignment(&self, key: MemberKey) -> Option<&[u32]> {
        self.member(key).map(|member| member.partitions.as_slice())
    }

    /// The member `partition` is being handed to, if a hand-off is pending.
    pub fn pending_move(&self, partition: u32) -> Option<MemberKey> {
        self.pending
            .iter()
            .find(|pending| pending.partition == partition)
            .map(|pending| pending.to)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub key: MemberKey,
    pub partitions: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u32,
    pub username: String,
    /// Argon2id PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`).
    pub password_hash: String,
    pub status: UserStatus,
    #[serde(with = "permissions_serde")]
    pub permissions: Option<Permissions>,
    pub created_at_us: u64,
    /// By token name.
    pub tokens: BTreeMap<String, PersonalAccessToken>,
    /// The metadata version (`applied_commands`) of the change that created
    /// this account or last withdrew its rights (deactivation, permissions
    /// removed). Ids are reused (§8 item 2) but incarnations never are: a
    /// session remembers the incarnation it logged in to and ends as soon
    /// as the account's differs.
    pub incarnation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonalAccessToken {
    pub name: String,
    pub token_hash: TokenHash,
    /// µs since epoch; `None` = never expires.
    pub expiry_at_us: Option<u64>,
    pub created_at_us: u64,
}

impl PersonalAccessToken {
    pub fn is_expired(&self, now_us: u64) -> bool {
        self.expiry_at_us.is_some_and(|expiry| expiry <= now_us)
    }
}

/// The whole metadata state.
///
/// Name indexes (`stream_names`, `user_names`, `token_hashes`) are derived
/// from the primary maps and kept in step by `apply.rs`;
/// [`Metadata::check_invariants`] verifies that (after a snapshot load and
/// in tests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub(crate) streams: BTreeMap<u32, Stream>,
    pub(crate) stream_names: BTreeMap<String, u32>,
    pub(crate) users: BTreeMap<u32, User>,
    pub(crate) user_names: BTreeMap<String, u32>,
    /// Token hash → (user id, token name), for PAT login.
    pub(crate) token_hashes: BTreeMap<TokenHash, (u32, String)>,
    /// Successful applies so far; the version of a published view.
    pub(crate) applied_commands: u64,
    /// The storage id the next created partition gets. Only grows: storage
    /// ids are never reused (see [`Partition::storage_id`]).
    pub(crate) next_storage_id: u64,
}

/// Lowest id not used as a key (streams, topics, users reuse freed ids).
pub(crate) fn lowest_free_id<V>(map: &BTreeMap<u32, V>) -> Option<u32> {
    let mut expected = 0u32;
    for id in map.keys() {
        if *id != expected {
            return Some(expected);
        }
        expected = expected.checked_add(1)?;
    }
    Some(expected)
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Commands applied successfully so far (the published version).
    pub fn applied_commands(&self) -> u64 {
        self.applied_commands
    }

    /// The storage id the next created partition gets (every storage id
    /// ever given out is below it).
    pub fn next_storage_id(&self) -> u64 {
        self.next_storage_id
    }

    /// Every partition's storage id, with its stream, topic and partition
    /// ids: what the data directory may hold (start-up reconciliation).
    pub fn storage_ids(&self) -> std::collections::BTreeMap<u64, (u32, u32, u32)> {
        let mut ids = std::collections::BTreeMap::new();
        for stream in self.streams.values() {
            for topic in stream.topics.values() {
                for partition in &topic.partitions {
                    ids.insert(partition.storage_id, (stream.id, topic.id, partition.id));
                }
            }
        }
        ids
    }

    pub fn streams(&self) -> impl Iterator<Item = &Stream> {
        self.streams.values()
    }

    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn stream_by_id(&self, id: u32) -> Option<&Stream> {
        self.streams.get(&id)
    }

    pub fn stream_by_name(&self, name: &str) -> Option<&Stream> {
        self.stream_names
            .get(name)
            .and_then(|id| self.streams.get(id))
    }

    /// A stream by identifier; unknown → 1009.
    pub fn stream(&self, stream: &Ident) -> Result<&Stream, MetadataError> {
        let found = match stream {
            Ident::Id(id) => self.stream_by_id(*id),
            Ident::Name(name) => self.stream_by_name(name),
        };
        found.ok_or_else(|| MetadataError::StreamNotFound {
            stream: stream.to_string(),
        })
    }

    /// A topic by identifiers; unknown stream → 1009, unknown topic → 2010.
    pub fn topic(&self, stream: &Ident, topic: &Ident) -> Result<(&Stream, &Topic), MetadataError> {
        let stream = self.stream(stream)?;
        let found = stream
            .topic(topic)
            .ok_or_else(|| MetadataError::TopicNotFound {
                stream_id: stream.id,
                topic: topic.to_string(),
            })?;
        Ok((stream, found))
    }

    /// A consumer group; unknown group → 5000.
    pub fn group(
        &self,
        stream: &Ident,
        topic: &Ident,
        group: &Ident,
    ) -> Result<(&Stream, &Topic, &ConsumerGroup), MetadataError> {
        let (stream, topic) = self.topic(stream, topic)?;
        let found = topic
            .group(group)
            .ok_or_else(|| MetadataError::ConsumerGroupNotFound {
                group: group.to_string(),
            })?;
        Ok((stream, topic, found))
    }

    /// Owner shard of a partition, for the router.
    pub fn partition_owner(
        &self,
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
    ) -> Option<ShardId> {
        let topic = self.streams.get(&stream_id)?.topics.get(&topic_id)?;
        let index = usize::try_from(partition_id).ok()?;
        topic
            .partitions
            .get(index)
            .map(|partition| partition.owner_shard)
    }

    pub fn user_by_id(&self, id: u32) -> Option<&User> {
        self.users.get(&id)
    }

    pub fn user_by_name(&self, username: &str) -> Option<&User> {
        self.user_names
            .get(username)
            .and_then(|id| self.users.get(id))
    }

    /// A user by identifier; unknown → 20 (ResourceNotFound, §6.2).
    pub fn user(&self, user: &Ident) -> Result<&User, MetadataError> {
        let found = match user {
            Ident::Id(id) => self.user_by_id(*id),
            Ident::Name(name) => self.user_by_name(name),
        };
        found.ok_or(MetadataError::UserNotFound)
    }

    /// The token with this hash and its owner.
    pub fn token_by_hash(&self, hash: &TokenHash) -> Option<(&User, &PersonalAccessToken)> {
        let (user_id, name) = self.token_hashes.get(hash)?;
        let user = self.users.get(user_id)?;
        let token = user.tokens.get(name)?;
        Some((user, token))
    }

    pub fn streams_count(&self) -> usize {
        self.streams.len()
    }

    pub fn topics_count(&self) -> usize {
        self.streams
            .values()
            .map(|stream| stream.topics.len())
            .sum()
    }

    pub fn partitions_count(&self) -> usize {
        self.streams
            .values()
            .flat_map(|stream| stream.topics.values())
            .map(|topic| topic.partitions.len())
            .sum()
    }

    pub fn consumer_groups_count(&self) -> usize {
        self.streams
            .values()
            .flat_map(|stream| stream.topics.values())
            .map(|topic| topic.groups.len())
            .sum()
    }

    /// Partitions per shard over all topics, for owner placement; shards
    /// at or above `shard_count` are ignored (they can exist after a restart
    /// on a machine with fewer cores; the router remaps those).
    pub(crate) fn partitions_per_shard(&self, shard_count: usize) -> Vec<u64> {
        let mut counts = vec![0u64; shard_count];
        for topic in self
            .streams
            .values()
            .flat_map(|stream| stream.topics.values())
        {
            for partition in &topic.partitions {
                if let Some(count) = counts.get_mut(partition.owner_shard) {
                    *count += 1;
                }
            }
        }
        counts
    }

    /// Verifies the structural invariants; used after loading a snapshot
    /// (bytes from disk must never become a panic later) and by tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.stream_names.len() != self.streams.len() {
            return Err("stream name index size differs from streams".into());
        }
        let mut storage_ids = std::collections::BTreeSet::new();
        for topic in self
            .streams
            .values()
            .flat_map(|stream| stream.topics.values())
        {
            for partition in &topic.partitions {
                if partition.storage_id >= self.next_storage_id
                    || !storage_ids.insert(partition.storage_id)
                {
                    return Err(format!(
                        "storage id {} of topic {} is reused or beyond the counter",
                        partition.storage_id, topic.id
                    ));
                }
            }
        }
        for (id, stream) in &self.streams {
            if stream.id != *id || self.stream_names.get(&stream.name) != Some(id) {
                return Err(format!("stream {id} is not indexed consistently"));
            }
            let mut topic_names = std::collections::BTreeSet::new();
            for (topic_id, topic) in &stream.topics {
                if topic.id != *topic_id || !topic_names.insert(topic.name.as_str()) {
                    return Err(format!("topic {topic_id} of stream {id} is inconsistent"));
                }
                for (index, partition) in topic.partitions.iter().enumerate() {
                    if usize::try_from(partition.id).ok() != Some(index) {
                        return Err(format!("partition ids of topic {topic_id} are not dense"));
                    }
                }
                let mut group_names = std::collections::BTreeSet::new();
                for (group_id, group) in &topic.groups {
                    if group.id != *group_id
                        || *group_id >= topic.next_group_id
                        || !group_names.insert(group.name.as_str())
                    {
                        return Err(format!(
                            "group {group_id} of topic {topic_id} is inconsistent"
                        ));
                    }
                    super::groups::check_assignment(group, topic.partitions.len())?;
                }
            }
        }
        if self.user_names.len() != self.users.len() {
            return Err("user name index size differs from users".into());
        }
        let mut tokens = 0usize;
        for (id, user) in &self.users {
            if user.id != *id || self.user_names.get(&user.username) != Some(id) {
                return Err(format!("user {id} is not indexed consistently"));
            }
            for (name, token) in &user.tokens {
                tokens += 1;
                if token.name != *name
                    || self.token_hashes.get(&token.token_hash) != Some(&(*id, name.clone()))
                {
                    return Err(format!("token {name:?} of user {id} is not indexed"));
                }
            }
        }
        if tokens != self.token_hashes.len() {
            return Err("token hash index size differs from tokens".into());
        }
        Ok(())
    }
}

impl Stream {
    pub fn topic_by_id(&self, id: u32) -> Option<&Topic> {
        self.topics.get(&id)
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&Topic> {
        self.topics.values().find(|topic| topic.name == name)
    }

    pub fn topic(&self, topic: &Ident) -> Option<&Topic> {
        match topic {
            Ident::Id(id) => self.topic_by_id(*id),
            Ident::Name(name) => self.topic_by_name(name),
        }
    }
}

impl Topic {
    pub fn partitions_count(&self) -> u32 {
        u32::try_from(self.partitions.len()).unwrap_or(u32::MAX)
    }

    pub fn group_by_id(&self, id: u32) -> Option<&ConsumerGroup> {
        self.groups.get(&id)
    }

    pub fn group_by_name(&self, name: &str) -> Option<&ConsumerGroup> {
        self.groups.values().find(|group| group.name == name)
    }

    pub fn group(&self, group: &Ident) -> Option<&ConsumerGroup> {
        match group {
            Ident::Id(id) => self.group_by_id(*id),
            Ident::Name(name) => self.group_by_name(name),
        }
    }
}

/// `Option<Permissions>` in snapshots and journal records as the wire
/// encoding of §4.10 (`None` = absent), so the codec's type is reused
/// without giving it serde derives.
pub(crate) mod permissions_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use iggyd_wire::protocol::permissions::Permissions;

    pub fn serialize<S: Serializer>(
        permissions: &Option<Permissions>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let bytes = permissions.as_ref().map(|permissions| {
            let mut out = Vec::new();
            permissions.encode(&mut out);
            out
        });
        bytes.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Permissions>, D::Error> {
        let bytes: Option<Vec<u8>> = Option::deserialize(deserializer)?;
        bytes
            .map(|bytes| {
                Permissions::decode(&bytes)
                    .map_err(|_| serde::de::Error::custom("permissions block does not decode"))
            })
            .transpose()
    }
}

pub(crate) use permissions_serde as permissions_with;

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the lowest-free-id rule: gaps are reused before appending.
    #[test]
    fn lowest_free_id_reuses_gaps() {
        let mut map = BTreeMap::new();
        assert_eq!(lowest_free_id(&map), Some(0));
        map.insert(0u32, ());
        map.insert(1, ());
        map.insert(3, ());
        assert_eq!(lowest_free_id(&map), Some(2));
        map.insert(2, ());
        assert_eq!(lowest_free_id(&map), Some(4));
    }
}
