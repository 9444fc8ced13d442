//! The topics part of a snapshot: every stream, topic and partition of
//! the published metadata view joined with the shards' published partition
//! reports (messages, bytes, segments, offsets, durable watermark),
//! consumer groups with their lag per partition and their members, each
//! member named by the client connection that joined (the session number
//! the shards report per client is the group member key).
//!
//! Must not: send anything to a shard or wait; it reads published state
//! only, like the rest of `DaemonSource`.

use super::DaemonSource;
use crate::control::api;
use crate::control::metrics::GroupLag;
use iggyd_storage::consumer_offsets::ConsumerKind;
use std::collections::BTreeMap;

impl DaemonSource {
    /// Topics from the published metadata view and the shards' published
    /// partition reports.
    pub(super) fn topics(&self) -> Vec<api::TopicStats> {
        self.topics_and_lags().0
    }

    /// Topics, each consumer group's lag per partition, and each partition's
    /// durable watermark (by stream, topic and partition id).
    #[allow(clippy::type_complexity)]
    pub(in crate::control) fn topics_and_lags(
        &self,
    ) -> (
        Vec<api::TopicStats>,
        Vec<GroupLag>,
        BTreeMap<(u32, u32, u32), u64>,
    ) {
        let mut group_lags = Vec::new();
        let mut durable_next_offsets = BTreeMap::new();
        let Some(view) = self.parts.heartbeats.view() else {
            return (Vec::new(), group_lags, durable_next_offsets);
        };
        let shard_reports: Vec<_> = (0..self.parts.shards.len())
            .map(|shard| self.parts.heartbeats.report(shard))
            .collect();
        let mut reports = BTreeMap::new();
        // A group member's key is its login's session number.
        let mut clients_by_session = BTreeMap::new();
        for (shard, report) in shard_reports.iter().enumerate() {
            for partition in &report.partitions {
                reports.insert(partition.key, (shard, partition));
            }
            for client in report.clients.iter().filter(|client| client.session != 0) {
                clients_by_session.insert(u128::from(client.session), client.client_id);
            }
        }
        let mut topics = Vec::new();
        for stream in view.streams() {
            for topic in stream.topics.values() {
                let mut stats = api::TopicStats {
                    stream_id: stream.id,
                    stream: stream.name.clone(),
                    topic_id: topic.id,
                    topic: topic.name.clone(),
                    messages: 0,
                    bytes: 0,
                    partitions: Vec::with_capacity(topic.partitions.len()),
                    consumer_groups: Vec::new(),
                    max_size_bytes: topic.options.max_topic_size_bytes,
                    message_expiry_us: topic.options.message_expiry_us,
                };
                let mut lag_by_group: BTreeMap<u32, u64> = BTreeMap::new();
                let mut partitions_by_group: BTreeMap<u32, Vec<api::GroupPartitionStats>> =
                    BTreeMap::new();
                for partition in &topic.partitions {
                    let crate::shard::router::Route { key, owner } = crate::shard::router::route(
                        stream,
                        topic,
                        partition,
                        self.parts.shards.len(),
                    );
                    let (messages, bytes, segments, current_offset, offsets) =
                        match reports.get(&key) {
                            Some((_, report)) => {
                                durable_next_offsets.insert(
                                    (stream.id, topic.id, partition.id),
                                    report.durable_next_offset,
                                );
                                (
                                    report.stats.messages,
                                    report.stats.bytes,
                                    report.stats.segments as u64,
                                    report.current_offset,
                                    report.consumer_offsets.as_slice(),
                                )
                            }
                            None => (0, 0, 0, 0, &[][..]),
                        };
                    let report = reports.get(&key).map(|(_, report)| report);
                    let segment_count = report.map_or(0, |report| report.segments.len());
                    stats.messages += messages;
                    stats.bytes += bytes;
                    stats.partitions.push(api::PartitionStats {
                        partition_id: partition.id,
                        shard: u32::try_from(owner).unwrap_or(u32::MAX),
                        messages,
                        bytes,
                        segments,
                        current_offset,
                        consumer_offsets: offsets.len() as u64,
                        durable_next_offset: report.map_or(0, |report| report.durable_next_offset),
                        segment_list: report
                            .map(|report| {
                                report
                                    .segments
                                    .iter()
                                    .enumerate()
                                    .map(|(index, segment)| api::SegmentStats {
                                        start_offset: segment.start_offset,
                                        next_offset: segment.next_offset,
                                        size_bytes: segment.size_bytes,
                                        last_timestamp_us: segment.last_timestamp,
                                        sealed: index + 1 < segment_count,
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    });
                    for group in topic.groups.values() {
                        let stored = stored_group_offset(offsets, group.id);
                        let lag = group_lag(messages, current_offset, stored);
                        *lag_by_group.entry(group.id).or_default() += lag;
                        partitions_by_group.entry(group.id).or_default().push(
                            api::GroupPartitionStats {
                                partition_id: partition.id,
                                offset: stored,
                                lag,
                            },
                        );
                        group_lags.push(GroupLag {
                            stream: stream.name.clone(),
                            topic: topic.name.clone(),
                            group: group.name.clone(),
                            partition_id: partition.id,
                            lag,
                        });
                    }
                }
                stats.consumer_groups = topic
                    .groups
                    .values()
                    .map(|group| api::ConsumerGroupStats {
                        group_id: group.id,
                        name: group.name.clone(),
                        members: u32::try_from(group.members.len()).unwrap_or(u32::MAX),
                        lag: lag_by_group.get(&group.id).copied().unwrap_or(0),
                        partitions: partitions_by_group.remove(&group.id).unwrap_or_default(),
                        member_list: group
                            .members
                            .iter()
                            .map(|member| api::GroupMemberStats {
                                member: format!("{:032x}", member.key.0),
                                partitions: member.partitions.clone(),
                                client_id: clients_by_session
                                    .get(&member.key.0)
                                    .map(|client_id| u64::from(*client_id)),
                            })
                            .collect(),
                    })
                    .collect();
                topics.push(stats);
            }
        }
        (topics, group_lags, durable_next_offsets)
    }
}

/// What the history samples of the topics each second: per partition its
/// bytes and next offset, per consumer group its lag summed over its
/// partitions; the buffers are reused from one second to the next.
#[derive(Debug, Default)]
pub struct TopicFigures {
    pub partitions: Vec<PartitionFigure>,
    pub groups: Vec<GroupFigure>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFigure {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
    pub bytes: u64,
    /// One past the newest message (0 when empty).
    pub next_offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupFigure {
    pub stream: u32,
    pub topic: u32,
    pub group: u32,
    pub lag: u64,
}

impl DaemonSource {
    /// `figures` from the same published state as `topics_and_lags`, in
    /// the same order, with the same lags, but without a snapshot's lists
    /// (segments, names, per-partition group entries): the history's lean
    /// pass.
    pub(in crate::control) fn topic_figures(&self, figures: &mut TopicFigures) {
        figures.partitions.clear();
        figures.groups.clear();
        let Some(view) = self.parts.heartbeats.view() else {
            return;
        };
        let shard_reports: Vec<_> = (0..self.parts.shards.len())
            .map(|shard| self.parts.heartbeats.report(shard))
            .collect();
        let reports: BTreeMap<_, _> = shard_reports
            .iter()
            .flat_map(|report| report.partitions.iter())
            .map(|partition| (partition.key, partition))
            .collect();
        for stream in view.streams() {
            for topic in stream.topics.values() {
                let first_group = figures.groups.len();
                figures
                    .groups
                    .extend(topic.groups.values().map(|group| GroupFigure {
                        stream: stream.id,
                        topic: topic.id,
                        group: group.id,
                        lag: 0,
                    }));
                for partition in &topic.partitions {
                    let route = crate::shard::router::route(
                        stream,
                        topic,
                        partition,
                        self.parts.shards.len(),
                    );
                    let report = reports.get(&route.key);
                    let (messages, bytes, current_offset, offsets) =
                        report.map_or((0, 0, 0, &[][..]), |report| {
                            (
                                report.stats.messages,
                                report.stats.bytes,
                                report.current_offset,
                                report.consumer_offsets.as_slice(),
                            )
                        });
                    figures.partitions.push(PartitionFigure {
                        stream: stream.id,
                        topic: topic.id,
                        partition: partition.id,
                        bytes,
                        next_offset: if messages == 0 && current_offset == 0 {
                            0
                        } else {
                            current_offset + 1
                        },
                    });
                    for group in &mut figures.groups[first_group..] {
                        let stored = stored_group_offset(offsets, group.group);
                        group.lag += group_lag(messages, current_offset, stored);
                    }
                }
            }
        }
    }
}

/// The offset consumer group `group` stored in a partition, if any.
fn stored_group_offset(
    offsets: &[(iggyd_storage::consumer_offsets::ConsumerKey, u64)],
    group: u32,
) -> Option<u64> {
    offsets.iter().find_map(|(consumer, offset)| {
        (consumer.kind == ConsumerKind::Group && consumer.id == group).then_some(*offset)
    })
}

/// Messages a group has yet to consume in a partition: behind its stored
/// offset, or all of them before its first commit.
fn group_lag(messages: u64, current_offset: u64, stored: Option<u64>) -> u64 {
    match stored {
        Some(stored) => current_offset.saturating_sub(stored),
        None if messages > 0 => messages,
        None => 0,
    }
}
