//! Test-only fixtures the control plane's tests share: a `DaemonSource`
//! over a given plan with no logger, and a published view holding the
//! stream, topic and consumer group those tests scrape. Compiled only under
//! `cfg(test)`; it must not grow assertions (the tests own those) or reach
//! a real shard.

use crate::control::daemon_source::{DaemonSource, DaemonSourceParts};
use crate::net::admission::Admission;
use crate::preflight::Driver;
use crate::shard::heartbeat::Heartbeats;
use crate::shard::mesh::Mesh;
use crate::topology::PlannedShard;
use iggyd_metadata::{Ident, Metadata, MetadataCommand, TopicOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// A daemon source over `shards`, each reporting `driver`, on one NUMA
/// node, with persisted as the default durability and no logger. The mesh's
/// inboxes are dropped: nothing here may send to a shard.
pub fn source(
    shards: Vec<PlannedShard>,
    driver: Driver,
    heartbeats: &Heartbeats,
    data_dir: PathBuf,
    log_dir: PathBuf,
    security: Option<Arc<Admission>>,
) -> DaemonSource {
    let (mesh, _inboxes) = Mesh::new(shards.len());
    DaemonSource::new(DaemonSourceParts {
        drivers: vec![driver; shards.len()],
        shards,
        numa_nodes: 1,
        heartbeats: heartbeats.clone(),
        mesh,
        started: Instant::now(),
        data_dir,
        log_dir,
        durability_default: iggyd_metadata::Durability::Persisted,
        log: None,
        security,
        reply_budgets: Vec::new(),
        snapshot_files: None,
        cluster: None,
    })
}

/// Publishes a view with stream `stream` (id 0), its topic `created` (id 0)
/// of `partitions` partitions, the topic's consumer group `billing`, then
/// whatever `more` commands add.
pub fn publish_view(
    heartbeats: &Heartbeats,
    stream: &str,
    partitions: u32,
    more: impl IntoIterator<Item = MetadataCommand>,
) {
    let mut metadata = Metadata::new();
    let commands = [
        MetadataCommand::CreateStream {
            name: stream.into(),
            created_at_us: 1,
        },
        MetadataCommand::CreateTopic {
            stream: Ident::Id(0),
            name: "created".into(),
            partitions_count: partitions,
            options: TopicOptions::defaults(iggyd_metadata::Durability::Persisted),
            created_at_us: 1,
            shard_count: 1,
        },
        MetadataCommand::CreateConsumerGroup {
            stream: Ident::Id(0),
            topic: Ident::Id(0),
            name: "billing".into(),
        },
    ];
    for command in commands.into_iter().chain(more) {
        metadata.apply(command).unwrap();
    }
    heartbeats.publish_view(metadata.publish());
}
