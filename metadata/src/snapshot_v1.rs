//! Reading snapshots of format version 1, written before partitions had
//! storage ids (their data lived at `streams/<s>/topics/<t>/partitions/<p>`).
//! This file owns the version-1 shapes of the types that changed (the model
//! as postcard encoded it then) and their conversion into today's
//! [`Metadata`]: every partition gets a storage id, in stream, topic and
//! partition order from 0, and the counter continues after them, so the
//! same snapshot always converts to the same ids (start-up moves each
//! partition's directory to its storage id, see `storage::layout`). Users
//! get the snapshot's version as their incarnation (every later change
//! has a higher one; no session outlives the restart anyway), consumer
//! groups no pending hand-offs.
//!
//! Must not: write version 1, or change a field here (these shapes are what
//! old daemons wrote; the unchanged types are reused from the model).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{
    ConsumerGroup, Member, Metadata, Partition, PersonalAccessToken, ShardId, Stream, TokenHash,
    Topic, User, UserStatus, permissions_serde,
};
use super::options::TopicOptions;
use iggyd_wire::protocol::permissions::Permissions;

/// `Metadata` as version 1 encoded it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MetadataV1 {
    pub streams: BTreeMap<u32, StreamV1>,
    pub stream_names: BTreeMap<String, u32>,
    pub users: BTreeMap<u32, UserV1>,
    pub user_names: BTreeMap<String, u32>,
    pub token_hashes: BTreeMap<TokenHash, (u32, String)>,
    pub applied_commands: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StreamV1 {
    pub id: u32,
    pub name: String,
    pub created_at_us: u64,
    pub topics: BTreeMap<u32, TopicV1>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicV1 {
    pub id: u32,
    pub name: String,
    pub created_at_us: u64,
    pub options: TopicOptions,
    pub partitions: Vec<PartitionV1>,
    pub groups: BTreeMap<u32, ConsumerGroupV1>,
    pub next_group_id: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConsumerGroupV1 {
    pub id: u32,
    pub name: String,
    pub members: Vec<Member>,
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UserV1 {
    pub id: u32,
    pub username: String,
    pub password_hash: String,
    pub status: UserStatus,
    #[serde(with = "permissions_serde")]
    pub permissions: Option<Permissions>,
    pub created_at_us: u64,
    pub tokens: BTreeMap<String, PersonalAccessToken>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PartitionV1 {
    pub id: u32,
    pub created_at_us: u64,
    pub owner_shard: ShardId,
}

impl MetadataV1 {
    /// Today's model, with storage ids given out in stream, topic and
    /// partition order.
    pub(crate) fn upgrade(self) -> Metadata {
        let mut next_storage_id = 0u64;
        let mut streams = BTreeMap::new();
        for (stream_id, stream) in self.streams {
            let mut topics = BTreeMap::new();
            for (topic_id, topic) in stream.topics {
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|partition| {
                        let storage_id = next_storage_id;
                        next_storage_id += 1;
                        Partition {
                            id: partition.id,
                            created_at_us: partition.created_at_us,
                            owner_shard: partition.owner_shard,
                            storage_id,
                        }
                    })
                    .collect();
                topics.insert(
                    topic_id,
                    Topic {
                        id: topic.id,
                        name: topic.name,
                        created_at_us: topic.created_at_us,
                        options: topic.options,
                        partitions,
                        groups: topic
                            .groups
                            .into_iter()
                            .map(|(id, group)| {
                                let group = ConsumerGroup {
                                    id: group.id,
                                    name: group.name,
                                    members: group.members,
                                    generation: group.generation,
                                    pending: Vec::new(),
                                };
                                (id, group)
                            })
                            .collect(),
                        next_group_id: topic.next_group_id,
                    },
                );
            }
            streams.insert(
                stream_id,
                Stream {
                    id: stream.id,
                    name: stream.name,
                    created_at_us: stream.created_at_us,
                    topics,
                },
            );
        }
        Metadata {
            streams,
            stream_names: self.stream_names,
            users: self
                .users
                .into_iter()
                .map(|(id, user)| {
                    let user = User {
                        id: user.id,
                        username: user.username,
                        password_hash: user.password_hash,
                        status: user.status,
                        permissions: user.permissions,
                        created_at_us: user.created_at_us,
                        tokens: user.tokens,
                        incarnation: self.applied_commands,
                    };
                    (id, user)
                })
                .collect(),
            user_names: self.user_names,
            token_hashes: self.token_hashes,
            applied_commands: self.applied_commands,
            next_storage_id,
        }
    }
}
