//! The rows every list of the console shows, in display order, computed
//! from the last snapshot and the view's sort and filter: shards, streams
//! and their drill-down levels, consumer groups, clients, events. Both the
//! selection (`App::update`) and the screen (`ui`) use these, so they
//! always agree. Reads `App` only.

use super::App;
use crate::api::cluster::GroupStatus;
use crate::api::{
    ClientStats, ConsumerGroupStats, EventLevel, EventRecord, GroupPartitionStats, PartitionStats,
    SegmentStats, ShardStats, TopicStats,
};

/// A level of the Streams drill-down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Streams,
    Topics {
        stream_id: u32,
    },
    Partitions {
        stream_id: u32,
        topic_id: u32,
    },
    Segments {
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
    },
}

/// Order of shards inside their NUMA group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardSort {
    Id,
    Cpu,
    Throughput,
    Queue,
}

impl ShardSort {
    pub fn label(self) -> &'static str {
        match self {
            ShardSort::Id => "shard",
            ShardSort::Cpu => "CPU% ↓",
            ShardSort::Throughput => "msg/s ↓",
            ShardSort::Queue => "queue ↓",
        }
    }

    pub fn next(self) -> ShardSort {
        match self {
            ShardSort::Id => ShardSort::Cpu,
            ShardSort::Cpu => ShardSort::Throughput,
            ShardSort::Throughput => ShardSort::Queue,
            ShardSort::Queue => ShardSort::Id,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientSort {
    BytesIn,
    BytesOut,
    Requests,
    Idle,
    Address,
}

impl ClientSort {
    pub fn label(self) -> &'static str {
        match self {
            ClientSort::BytesIn => "bytes in ↓",
            ClientSort::BytesOut => "bytes out ↓",
            ClientSort::Requests => "requests ↓",
            ClientSort::Idle => "idle ↓",
            ClientSort::Address => "address",
        }
    }

    pub fn next(self) -> ClientSort {
        match self {
            ClientSort::BytesIn => ClientSort::BytesOut,
            ClientSort::BytesOut => ClientSort::Requests,
            ClientSort::Requests => ClientSort::Idle,
            ClientSort::Idle => ClientSort::Address,
            ClientSort::Address => ClientSort::BytesIn,
        }
    }
}

/// Which events the Events view lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFilter {
    All,
    WarnAndError,
    Error,
}

impl EventFilter {
    pub fn label(self) -> &'static str {
        match self {
            EventFilter::All => "all levels",
            EventFilter::WarnAndError => "warn + error",
            EventFilter::Error => "errors only",
        }
    }

    pub fn next(self) -> EventFilter {
        match self {
            EventFilter::All => EventFilter::WarnAndError,
            EventFilter::WarnAndError => EventFilter::Error,
            EventFilter::Error => EventFilter::All,
        }
    }

    fn admits(self, level: EventLevel) -> bool {
        match self {
            EventFilter::All => true,
            EventFilter::WarnAndError => level != EventLevel::Info,
            EventFilter::Error => level == EventLevel::Error,
        }
    }
}

/// One stream: its topics summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    pub stream_id: u32,
    pub name: String,
    pub topics: usize,
    pub partitions: usize,
    pub messages: u64,
    pub bytes: u64,
}

fn matches(filter: &str, text: &str) -> bool {
    filter.is_empty() || text.to_lowercase().contains(&filter.to_lowercase())
}

impl App {
    fn topics(&self) -> &[TopicStats] {
        self.snapshot
            .as_ref()
            .map_or(&[], |snapshot| snapshot.topics.as_slice())
    }

    /// Shards in display order: grouped by NUMA node (nodes ascending, an
    /// unknown node last), sorted inside each group by `shard_sort`.
    pub fn shard_rows(&self) -> Vec<&ShardStats> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let mut rows: Vec<&ShardStats> = snapshot.shards.iter().collect();
        let throughput =
            |shard: &ShardStats| shard.messages_in_per_sec + shard.messages_out_per_sec;
        rows.sort_by(|a, b| {
            let node = |shard: &ShardStats| shard.numa_node.unwrap_or(u32::MAX);
            node(a).cmp(&node(b)).then_with(|| match self.shard_sort {
                ShardSort::Id => a.shard.cmp(&b.shard),
                ShardSort::Cpu => b.cpu_percent.total_cmp(&a.cpu_percent),
                ShardSort::Throughput => throughput(b).total_cmp(&throughput(a)),
                ShardSort::Queue => b.queue_depth.cmp(&a.queue_depth),
            })
        });
        rows
    }

    pub fn stream_rows(&self) -> Vec<StreamRow> {
        let mut streams: Vec<StreamRow> = Vec::new();
        for topic in self.topics() {
            match streams
                .iter_mut()
                .find(|row| row.stream_id == topic.stream_id)
            {
                Some(row) => {
                    row.topics += 1;
                    row.partitions += topic.partitions.len();
                    row.messages += topic.messages;
                    row.bytes += topic.bytes;
                }
                None => streams.push(StreamRow {
                    stream_id: topic.stream_id,
                    name: topic.stream.clone(),
                    topics: 1,
                    partitions: topic.partitions.len(),
                    messages: topic.messages,
                    bytes: topic.bytes,
                }),
            }
        }
        let filter = &self.filters[super::View::Streams.index()];
        streams.retain(|row| matches(filter, &row.name));
        streams.sort_by(|a, b| a.name.cmp(&b.name).then(a.stream_id.cmp(&b.stream_id)));
        streams
    }

    pub fn topic_rows(&self, stream_id: u32) -> Vec<&TopicStats> {
        let filter = &self.filters[super::View::Streams.index()];
        let mut topics: Vec<&TopicStats> = self
            .topics()
            .iter()
            .filter(|topic| topic.stream_id == stream_id && matches(filter, &topic.topic))
            .collect();
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        topics
    }

    pub fn topic(&self, stream_id: u32, topic_id: u32) -> Option<&TopicStats> {
        self.topics()
            .iter()
            .find(|topic| topic.stream_id == stream_id && topic.topic_id == topic_id)
    }

    pub fn partition_rows(&self, stream_id: u32, topic_id: u32) -> Vec<&PartitionStats> {
        let filter = &self.filters[super::View::Streams.index()];
        self.topic(stream_id, topic_id)
            .map(|topic| {
                topic
                    .partitions
                    .iter()
                    .filter(|partition| matches(filter, &partition.partition_id.to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn partition(
        &self,
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
    ) -> Option<&PartitionStats> {
        self.topic(stream_id, topic_id)?
            .partitions
            .iter()
            .find(|partition| partition.partition_id == partition_id)
    }

    /// Segments newest first (the active one on top).
    pub fn segment_rows(
        &self,
        stream_id: u32,
        topic_id: u32,
        partition_id: u32,
    ) -> Vec<&SegmentStats> {
        self.partition(stream_id, topic_id, partition_id)
            .map(|partition| partition.segment_list.iter().rev().collect())
            .unwrap_or_default()
    }

    /// The level shown now in the Streams view.
    pub fn level(&self) -> Level {
        self.path.last().map_or(Level::Streams, |(level, _)| *level)
    }

    pub fn level_selected(&self) -> usize {
        self.path.last().map_or(0, |(_, selected)| *selected)
    }

    pub(super) fn level_row_count(&self) -> usize {
        match self.level() {
            Level::Streams => self.stream_rows().len(),
            Level::Topics { stream_id } => self.topic_rows(stream_id).len(),
            Level::Partitions {
                stream_id,
                topic_id,
            } => self.partition_rows(stream_id, topic_id).len(),
            Level::Segments {
                stream_id,
                topic_id,
                partition_id,
            } => self.segment_rows(stream_id, topic_id, partition_id).len(),
        }
    }

    /// The level Enter opens from the selected row.
    pub(super) fn selected_child(&self) -> Option<Level> {
        let selected = self.level_selected();
        match self.level() {
            Level::Streams => self.stream_rows().get(selected).map(|row| Level::Topics {
                stream_id: row.stream_id,
            }),
            Level::Topics { stream_id } => {
                self.topic_rows(stream_id)
                    .get(selected)
                    .map(|topic| Level::Partitions {
                        stream_id,
                        topic_id: topic.topic_id,
                    })
            }
            Level::Partitions {
                stream_id,
                topic_id,
            } => self
                .partition_rows(stream_id, topic_id)
                .get(selected)
                .map(|partition| Level::Segments {
                    stream_id,
                    topic_id,
                    partition_id: partition.partition_id,
                }),
            Level::Segments { .. } => None,
        }
    }

    /// "streams › orders › created › partition 1".
    pub fn path_text(&self) -> String {
        let mut parts = vec!["streams".to_string()];
        for (level, _) in self.path.iter().skip(1) {
            match *level {
                Level::Streams => {}
                Level::Topics { stream_id } => parts.push(
                    self.topics()
                        .iter()
                        .find(|topic| topic.stream_id == stream_id)
                        .map_or_else(|| format!("stream {stream_id}"), |t| t.stream.clone()),
                ),
                Level::Partitions {
                    stream_id,
                    topic_id,
                } => parts.push(
                    self.topic(stream_id, topic_id)
                        .map_or_else(|| format!("topic {topic_id}"), |t| t.topic.clone()),
                ),
                Level::Segments { partition_id, .. } => {
                    parts.push(format!("partition {partition_id}"));
                }
            }
        }
        parts.join(" › ")
    }

    /// Every consumer group with its topic, by stream, topic and name.
    pub fn group_rows(&self) -> Vec<(&TopicStats, &ConsumerGroupStats)> {
        let filter = &self.filters[super::View::Groups.index()];
        let mut rows: Vec<(&TopicStats, &ConsumerGroupStats)> = self
            .topics()
            .iter()
            .flat_map(|topic| {
                topic
                    .consumer_groups
                    .iter()
                    .map(move |group| (topic, group))
            })
            .filter(|(topic, group)| {
                matches(
                    filter,
                    &format!("{}/{}/{}", topic.stream, topic.topic, group.name),
                )
            })
            .collect();
        rows.sort_by(|a, b| {
            (&a.0.stream, &a.0.topic, &a.1.name).cmp(&(&b.0.stream, &b.0.topic, &b.1.name))
        });
        rows
    }

    /// The opened group, with its topic.
    pub fn open_group(&self) -> Option<(&TopicStats, &ConsumerGroupStats)> {
        let (stream_id, topic_id, group_id) = self.group_open?;
        let topic = self.topic(stream_id, topic_id)?;
        let group = topic
            .consumer_groups
            .iter()
            .find(|group| group.group_id == group_id)?;
        Some((topic, group))
    }

    pub fn group_partition_rows(&self) -> Vec<&GroupPartitionStats> {
        self.open_group()
            .map(|(_, group)| group.partitions.iter().collect())
            .unwrap_or_default()
    }

    /// Clients matching the filter (address, user, shard), sorted.
    pub fn client_rows(&self) -> Vec<&ClientStats> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let filter = &self.filters[super::View::Clients.index()];
        let mut rows: Vec<&ClientStats> = snapshot
            .clients
            .iter()
            .filter(|client| {
                matches(
                    filter,
                    &format!(
                        "{} {} shard {}",
                        client.address,
                        client.user.as_deref().unwrap_or("-"),
                        client.shard
                    ),
                )
            })
            .collect();
        rows.sort_by(|a, b| match self.client_sort {
            ClientSort::BytesIn => b.bytes_in_total.cmp(&a.bytes_in_total),
            ClientSort::BytesOut => b.bytes_out_total.cmp(&a.bytes_out_total),
            ClientSort::Requests => b.requests_total.cmp(&a.requests_total),
            ClientSort::Idle => b.idle_ms.cmp(&a.idle_ms),
            ClientSort::Address => a.address.cmp(&b.address),
        });
        rows
    }

    /// Events at the chosen levels containing the search text, oldest
    /// first.
    pub fn event_rows(&self) -> Vec<&EventRecord> {
        let Some(snapshot) = &self.snapshot else {
            return Vec::new();
        };
        let filter = &self.filters[super::View::Events.index()];
        snapshot
            .events
            .iter()
            .filter(|event| {
                self.event_filter.admits(event.level) && matches(filter, &event.message)
            })
            .collect()
    }

    /// The Cluster view's groups (filtered by name), the laggiest first:
    /// by their largest follower lag (known only where this node leads),
    /// then in the daemon's order (metadata first, then by ids).
    pub fn cluster_group_rows(&self) -> Vec<&GroupStatus> {
        let super::ClusterPane::Member(status) = &self.cluster else {
            return Vec::new();
        };
        let filter = &self.filters[super::View::Cluster.index()];
        let mut rows: Vec<&GroupStatus> = status
            .groups
            .iter()
            .filter(|group| matches(filter, &group.group))
            .collect();
        rows.sort_by_key(|group| std::cmp::Reverse(lag_max(group)));
        rows
    }
}

/// A group's largest follower lag (0 when this node does not lead it).
pub fn lag_max(group: &GroupStatus) -> u64 {
    group
        .followers
        .iter()
        .map(|follower| follower.lag)
        .max()
        .unwrap_or(0)
}
