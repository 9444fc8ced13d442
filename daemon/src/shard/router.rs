//! Routing: which partition a request names and which shard owns it. Pure
//! functions of a metadata view and the shard count, so every caller (the
//! handlers, the shard's own recovery, the control plane) answers the
//! question the same way. The key carries the partition's storage id, so a
//! request routed with a view from before a delete and re-create reaches the
//! old partition (or nothing), never the new one. This file holds no state,
//! does no I/O and never sends anything; callers send the op to the owner
//! over the mesh.

use super::mesh::ShardId;
use super::partition::PartitionKey;
use iggyd_metadata::command::PartitionRef;
use iggyd_metadata::model::Partition;
use iggyd_metadata::{Stream, Topic};

/// A partition and the shard whose pump owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub key: PartitionKey,
    pub owner: ShardId,
}

/// Which shard owns a partition whose recorded owner is `recorded`. A
/// recorded owner beyond today's shard count (the daemon was started with
/// fewer shards than when the partition was created) folds onto the
/// existing shards.
pub fn owner(recorded: ShardId, shards: usize) -> ShardId {
    assert!(shards > 0);
    recorded % shards
}

/// The key of partition `partition` of `topic` in `stream`.
pub fn key(stream: &Stream, topic: &Topic, partition: &Partition) -> PartitionKey {
    PartitionKey {
        stream: stream.id,
        topic: topic.id,
        partition: partition.id,
        storage_id: partition.storage_id,
    }
}

/// The route of a partition of a topic.
pub fn route(stream: &Stream, topic: &Topic, partition: &Partition, shards: usize) -> Route {
    Route {
        key: key(stream, topic, partition),
        owner: owner(partition.owner_shard, shards),
    }
}

/// The route of partition id `partition_id` of a topic, `None` when the
/// topic has no such partition.
pub fn partition_route(
    stream: &Stream,
    topic: &Topic,
    partition_id: u32,
    shards: usize,
) -> Option<Route> {
    let partition = topic.partitions.get(partition_id as usize)?;
    Some(route(stream, topic, partition, shards))
}

/// The routes of every partition of a topic, in partition order.
pub fn topic_routes<'a>(
    stream: &'a Stream,
    topic: &'a Topic,
    shards: usize,
) -> impl Iterator<Item = Route> + 'a {
    topic
        .partitions
        .iter()
        .map(move |partition| route(stream, topic, partition, shards))
}

/// The route of a partition named by a metadata change (created or removed).
pub fn ref_route(partition: &PartitionRef, shards: usize) -> Route {
    Route {
        key: PartitionKey {
            stream: partition.stream_id,
            topic: partition.topic_id,
            partition: partition.partition_id,
            storage_id: partition.storage_id,
        },
        owner: owner(partition.owner_shard, shards),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A recorded owner folds onto the shards that exist today.
    #[test]
    fn owners_fold_onto_the_current_shards() {
        assert_eq!(owner(0, 1), 0);
        assert_eq!(owner(3, 4), 3);
        assert_eq!(owner(5, 4), 1);
        assert_eq!(owner(7, 1), 0);
    }

    // A partition ref routes to the same key and owner as the view would.
    #[test]
    fn refs_route_like_the_view() {
        let partition = PartitionRef {
            stream_id: 2,
            topic_id: 3,
            partition_id: 4,
            owner_shard: 5,
            storage_id: 6,
        };
        let route = ref_route(&partition, 2);
        assert_eq!(
            route.key,
            PartitionKey {
                stream: 2,
                topic: 3,
                partition: 4,
                storage_id: 6,
            }
        );
        assert_eq!(route.owner, 1);
    }
}
