//! The Prometheus series of a running daemon: [`MetricsInput`] (what one
//! scrape reads, assembled by `daemon_source` from the state the shards
//! publish anyway) and [`encode`], which writes it in the Prometheus text
//! format (0.0.4) with the `prometheus-client` crate. Names follow the
//! Prometheus conventions: an `iggyd_` prefix, base units (`_seconds`,
//! `_bytes`) and `_total` on counters.
//!
//! Must not: read shard state, the clock or `/proc` itself (everything is in
//! the input, so the encoding is a pure function tests can feed), or write
//! any HTTP (that is `metrics_server`).
//!
//! Adding a series is one entry in the matching table below
//! (`process_gauges`, `shard_counters`, `shard_gauges`, `shard_histograms`,
//! `partition_gauges`, `process_counters`, and a cluster node's in
//! `metrics/cluster.rs`); `packaging/grafana/iggyd.json` may use any series
//! the tests see exported.

use crate::control::api::{self, Snapshot};
use crate::shard::heartbeat::{ClusterCounters, LatencyBuckets, LatencyHistograms, ShardCounters};
pub use cluster::ClusterSeries;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap};

/// The `Content-Type` of what [`encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Everything one scrape reports. `snapshot` is the admin socket's snapshot
/// taken at the same moment (so the two always agree); the rest is what the
/// snapshot does not carry.
#[derive(Debug, Clone)]
pub struct MetricsInput {
    pub snapshot: Snapshot,
    /// Per shard, in the order of `snapshot.shards`.
    pub shards: Vec<ShardSeries>,
    /// `(stream_id, topic_id, partition_id)` → offset one past the last
    /// fsynced message.
    pub durable_next_offsets: BTreeMap<(u32, u32, u32), u64>,
    /// Lag of each consumer group on each partition of its topic.
    pub group_lags: Vec<GroupLag>,
    /// Open file descriptors of the process (`None` when `/proc` says nothing).
    pub open_fds: Option<u64>,
    /// A cluster node's groups (`None` on a single node, which exports no
    /// `iggyd_cluster_*` series).
    pub cluster: Option<ClusterSeries>,
}

/// What a shard publishes beyond the admin snapshot's numbers: its raw
/// counters (fsyncs), its cumulative latency histograms and, on a cluster
/// node, its replication counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShardSeries {
    pub counters: ShardCounters,
    pub histograms: LatencyHistograms,
    pub cluster: ClusterCounters,
}

/// One consumer group's lag on one partition: stored messages after the
/// group's committed offset (all of them when it has committed nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    pub stream: String,
    pub topic: String,
    pub group: String,
    pub partition_id: u32,
    pub lag: u64,
}

type Labels = Vec<(&'static str, String)>;

/// A process-wide gauge: name (before the unit suffix), help, unit, value.
type ProcessGauge = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&MetricsInput) -> f64,
);

fn process_gauges() -> Vec<ProcessGauge> {
    vec![
        (
            "iggyd_process_resident_memory",
            "Resident memory of the daemon process.",
            Some(Unit::Bytes),
            |input| input.snapshot.process.rss_bytes as f64,
        ),
        (
            "iggyd_process_open_fds",
            "Open file descriptors of the daemon process.",
            None,
            |input| input.open_fds.unwrap_or(0) as f64,
        ),
        (
            "iggyd_process_uptime",
            "Time since the daemon process started.",
            Some(Unit::Seconds),
            |input| input.snapshot.process.uptime_ms as f64 / 1000.0,
        ),
        (
            "iggyd_connections",
            "Open Iggy protocol connections, all shards together.",
            None,
            |input| input.snapshot.process.connections as f64,
        ),
        (
            "iggyd_data_dir_free",
            "Free space on the file system of the data directory.",
            Some(Unit::Bytes),
            |input| input.snapshot.process.disk_free_bytes as f64,
        ),
        (
            "iggyd_data_dir_used",
            "Used space on the file system of the data directory.",
            Some(Unit::Bytes),
            |input| input.snapshot.process.disk_used_bytes as f64,
        ),
        (
            "iggyd_log_dir_size",
            "Bytes of the log directory's files.",
            Some(Unit::Bytes),
            |input| input.snapshot.process.log_dir_bytes as f64,
        ),
        (
            "iggyd_connections_max",
            "The connection cap in force (limits.max_connections, or derived from RLIMIT_NOFILE).",
            None,
            |input| input.snapshot.process.security.max_connections as f64,
        ),
        (
            "iggyd_trash_pending",
            "Bytes of deleted data still on the disk, waiting for the janitor.",
            Some(Unit::Bytes),
            |input| input.snapshot.process.pending_removal.bytes as f64,
        ),
        (
            "iggyd_trash_pending_entries",
            "Deleted files and directories still on the disk, waiting for the janitor.",
            None,
            |input| input.snapshot.process.pending_removal.entries as f64,
        ),
        (
            "iggyd_trash_failing_entries",
            "Trash entries whose removal failed and waits for a retry.",
            None,
            |input| input.snapshot.process.pending_removal.failing as f64,
        ),
        (
            "iggyd_watchdog_stalled",
            "1 while the systemd watchdog sees a shard make no progress, else 0.",
            None,
            |input| {
                f64::from(u8::from(
                    input.snapshot.process.watchdog.stalled_shard.is_some(),
                ))
            },
        ),
    ]
}

/// A per-shard counter: name (before unit and `_total`), help, unit, value.
type ShardCounter = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&api::ShardStats, &ShardSeries) -> f64,
);

fn shard_counters() -> Vec<ShardCounter> {
    vec![
        (
            "iggyd_shard_messages_in",
            "Messages appended to the partitions this shard owns.",
            None,
            |stats, _| stats.messages_in_total as f64,
        ),
        (
            "iggyd_shard_messages_out",
            "Messages polled from the partitions this shard owns.",
            None,
            |stats, _| stats.messages_out_total as f64,
        ),
        (
            "iggyd_shard_in",
            "Bytes of messages appended to the partitions this shard owns.",
            Some(Unit::Bytes),
            |stats, _| stats.bytes_in_total as f64,
        ),
        (
            "iggyd_shard_out",
            "Bytes of messages polled from the partitions this shard owns.",
            Some(Unit::Bytes),
            |stats, _| stats.bytes_out_total as f64,
        ),
        (
            "iggyd_shard_sends_local",
            "Send requests accepted on this shard for partitions it owns.",
            None,
            |stats, _| stats.sends_local_total as f64,
        ),
        (
            "iggyd_shard_sends_forwarded",
            "Send requests accepted on this shard and handed to the owner shard.",
            None,
            |stats, _| stats.sends_forwarded_total as f64,
        ),
        (
            "iggyd_shard_fsyncs",
            "fsyncs of this shard's partition files (one may cover many appends).",
            None,
            |_, series| series.counters.fsyncs as f64,
        ),
        (
            "iggyd_shard_consumer_offsets_refused",
            "Consumer offsets refused because their partition held limits.max_consumer_offsets_per_partition.",
            None,
            |stats, _| stats.consumer_offsets_refused_total as f64,
        ),
        (
            "iggyd_shard_io_buffer_allocations",
            "I/O buffers (write tails, read windows) this shard allocated because no idle one fitted.",
            None,
            |stats, _| stats.io_buffer_allocations_total as f64,
        ),
        (
            "iggyd_shard_io_buffer_reuses",
            "I/O buffers this shard served from its idle ones (no allocation, no page faults).",
            None,
            |stats, _| stats.io_buffer_reuses_total as f64,
        ),
        (
            "iggyd_shard_cpu",
            "CPU time of this shard's thread (its core's load is the rate).",
            Some(Unit::Seconds),
            |stats, _| stats.cpu_time_ms as f64 / 1000.0,
        ),
    ]
}

/// A per-shard gauge: name, help, unit, value.
type ShardGauge = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&api::ShardStats) -> f64,
);

fn shard_gauges() -> Vec<ShardGauge> {
    vec![
        (
            "iggyd_shard_queue_depth",
            "Messages waiting in this shard's inbox.",
            None,
            |stats| stats.queue_depth as f64,
        ),
        (
            "iggyd_shard_connections",
            "Iggy protocol connections this shard serves.",
            None,
            |stats| stats.connections as f64,
        ),
        (
            "iggyd_shard_partitions",
            "Partitions this shard owns.",
            None,
            |stats| stats.partitions as f64,
        ),
        (
            "iggyd_shard_poll_reply",
            "Bytes of poll replies this shard's connections hold (built, not yet sent).",
            Some(Unit::Bytes),
            |stats| stats.poll_reply_bytes as f64,
        ),
        (
            "iggyd_shard_io_buffer",
            "Bytes of this shard's I/O buffers in use, windows that poll replies still send from included.",
            Some(Unit::Bytes),
            |stats| stats.io_buffer_bytes as f64,
        ),
        (
            "iggyd_shard_io_buffer_idle",
            "Bytes of idle I/O buffers this shard keeps for reuse.",
            Some(Unit::Bytes),
            |stats| stats.io_buffer_idle_bytes as f64,
        ),
        (
            "iggyd_shard_heartbeat_age",
            "Time since this shard's loop last processed its heartbeat (about 1 s when healthy).",
            Some(Unit::Seconds),
            |stats| stats.heartbeat_age_ms as f64 / 1000.0,
        ),
    ]
}

/// A per-shard histogram: name, help, which of the shard's histograms.
type ShardHistogram = (
    &'static str,
    &'static str,
    fn(&LatencyHistograms) -> &LatencyBuckets,
);

fn shard_histograms() -> Vec<ShardHistogram> {
    vec![
        (
            "iggyd_shard_request_duration",
            "Requests on this shard's connections, from the frame read to the reply written.",
            |histograms| &histograms.request,
        ),
        (
            "iggyd_shard_inbox_wait",
            "Time partition operations waited in this shard's inbox.",
            |histograms| &histograms.queue_wait,
        ),
        (
            "iggyd_shard_fsync_duration",
            "fsyncs of this shard's partition files.",
            |histograms| &histograms.fsync,
        ),
    ]
}

/// A per-partition gauge: name, help, unit, value.
type PartitionGauge = (
    &'static str,
    &'static str,
    Option<Unit>,
    fn(&api::PartitionStats, u64) -> f64,
);

fn partition_gauges() -> Vec<PartitionGauge> {
    vec![
        (
            "iggyd_partition_messages",
            "Messages stored in the partition (after retention).",
            None,
            |stats, _| stats.messages as f64,
        ),
        (
            "iggyd_partition_size",
            "Bytes of the partition's stored messages.",
            Some(Unit::Bytes),
            |stats, _| stats.bytes as f64,
        ),
        (
            "iggyd_partition_segments",
            "Segments of the partition.",
            None,
            |stats, _| stats.segments as f64,
        ),
        (
            "iggyd_partition_current_offset",
            "Offset of the partition's newest message (0 when empty).",
            None,
            |stats, _| stats.current_offset as f64,
        ),
        (
            "iggyd_partition_consumer_offsets",
            "Consumer offsets stored for the partition (at most limits.max_consumer_offsets_per_partition).",
            None,
            |stats, _| stats.consumer_offsets as f64,
        ),
        (
            "iggyd_partition_durable_offset",
            "Offset of the partition's newest fsynced message (0 when none).",
            None,
            |_, durable_next| durable_next.saturating_sub(1) as f64,
        ),
    ]
}

/// A process-wide counter: name (before `_total`), help, value. The
/// connection layer's counters are shared by every shard's connections.
type ProcessCounter = (&'static str, &'static str, fn(&api::SecurityStats) -> u64);

fn process_counters() -> Vec<ProcessCounter> {
    vec![
        (
            "iggyd_connections_refused",
            "Connections closed at accept: over limits.max_connections or max_connections_per_address.",
            |security| security.connections_refused_total,
        ),
        (
            "iggyd_logins_failed",
            "Logins with a wrong password or token.",
            |security| security.logins_failed_total,
        ),
        (
            "iggyd_logins_refused",
            "Logins turned away unchecked (login queue full, or backoff past the login timeout).",
            |security| security.logins_refused_total,
        ),
        (
            "iggyd_frames_refused",
            "Frames over limits.max_login_frame_size before login, refused unread.",
            |security| security.frames_refused_total,
        ),
        (
            "iggyd_connection_timeouts",
            "Connections closed for limits.login_timeout or limits.idle_timeout.",
            |security| security.timeouts_total,
        ),
        (
            "iggyd_tls_failures",
            "Failed TLS handshakes and plaintext/TLS mismatches.",
            |security| security.tls_failures_total,
        ),
        (
            "iggyd_evictions",
            "Sessions the server ended (stale group members, too many failed logins).",
            |security| security.evictions_total,
        ),
    ]
}

/// The input as a Prometheus text page.
pub fn encode(input: &MetricsInput) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(input.clone())));
    let mut page = String::new();
    // Writing into a `String` cannot fail, and every label value is a
    // plain string: an error here would be the crate's own.
    if let Err(error) = prometheus_client::encoding::prometheus_text::encode(&mut page, &registry) {
        tracing::warn!(%error, "encoding metrics failed");
    }
    page
}

/// The collector a registry calls while encoding one scrape.
#[derive(Debug)]
struct Scrape(MetricsInput);

fn shard_labels(stats: &api::ShardStats) -> Labels {
    vec![
        ("shard", stats.shard.to_string()),
        ("cpu", stats.pu.to_string()),
        ("core", stats.core.to_string()),
        (
            "numa_node",
            stats
                .numa_node
                .map_or_else(|| "unknown".to_string(), |node| node.to_string()),
        ),
    ]
}

fn gauge_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, value) in samples {
        family.encode_family(labels)?.encode_gauge(value)?;
    }
    Ok(())
}

fn counter_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, value) in samples {
        family
            .encode_family(labels)?
            .encode_counter::<NoLabelSet, f64, f64>(value, None)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let input = &self.0;
        let snapshot = &input.snapshot;

        let info: Labels = vec![("version", snapshot.process.version.clone())];
        gauge_family(
            &mut encoder,
            "iggyd_build_info",
            "Always 1; the label says which iggyd version runs.",
            None,
            &[(info, 1.0)],
        )?;
        for (name, help, unit, value) in process_gauges() {
            gauge_family(
                &mut encoder,
                name,
                help,
                unit.as_ref(),
                &[(Vec::new(), value(input))],
            )?;
        }

        let shards: Vec<(Labels, &api::ShardStats, ShardSeries)> = snapshot
            .shards
            .iter()
            .enumerate()
            .map(|(index, stats)| {
                let series = input.shards.get(index).copied().unwrap_or_default();
                (shard_labels(stats), stats, series)
            })
            .collect();
        for (name, help, unit, value) in shard_counters() {
            let samples: Vec<(Labels, f64)> = shards
                .iter()
                .map(|(labels, stats, series)| (labels.clone(), value(stats, series)))
                .collect();
            counter_family(&mut encoder, name, help, unit.as_ref(), &samples)?;
        }
        for (name, help, unit, value) in shard_gauges() {
            let samples: Vec<(Labels, f64)> = shards
                .iter()
                .map(|(labels, stats, _)| (labels.clone(), value(stats)))
                .collect();
            gauge_family(&mut encoder, name, help, unit.as_ref(), &samples)?;
        }
        for (name, help, which) in shard_histograms() {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for (labels, _, series) in &shards {
                let buckets = which(&series.histograms);
                // Per-bucket counts; the encoder accumulates them and adds
                // the `+Inf` bucket (the total count) itself.
                let bounds: Vec<(f64, u64)> = crate::shard::heartbeat::LATENCY_BUCKET_BOUNDS_US
                    .iter()
                    .zip(buckets.counts)
                    .map(|(bound_us, count)| (*bound_us as f64 / 1e6, count))
                    .collect();
                family
                    .encode_family(labels)?
                    .encode_histogram::<NoLabelSet>(
                        buckets.sum_us as f64 / 1e6,
                        buckets.count,
                        &bounds,
                        None::<&HashMap<usize, Exemplar<NoLabelSet, f64>>>,
                    )?;
            }
        }

        let mut partitions: Vec<(Labels, &api::PartitionStats, u64)> = Vec::new();
        let mut members: Vec<(Labels, f64)> = Vec::new();
        for topic in &snapshot.topics {
            for partition in &topic.partitions {
                let durable_next = input
                    .durable_next_offsets
                    .get(&(topic.stream_id, topic.topic_id, partition.partition_id))
                    .copied()
                    .unwrap_or(0);
                let labels = vec![
                    ("stream", topic.stream.clone()),
                    ("topic", topic.topic.clone()),
                    ("partition", partition.partition_id.to_string()),
                ];
                partitions.push((labels, partition, durable_next));
            }
            for group in &topic.consumer_groups {
                let labels = vec![
                    ("stream", topic.stream.clone()),
                    ("topic", topic.topic.clone()),
                    ("group", group.name.clone()),
                ];
                members.push((labels, f64::from(group.members)));
            }
        }
        for (name, help, unit, value) in partition_gauges() {
            let samples: Vec<(Labels, f64)> = partitions
                .iter()
                .map(|(labels, stats, durable_next)| (labels.clone(), value(stats, *durable_next)))
                .collect();
            gauge_family(&mut encoder, name, help, unit.as_ref(), &samples)?;
        }

        let lags: Vec<(Labels, f64)> = input
            .group_lags
            .iter()
            .map(|lag| {
                let labels = vec![
                    ("stream", lag.stream.clone()),
                    ("topic", lag.topic.clone()),
                    ("group", lag.group.clone()),
                    ("partition", lag.partition_id.to_string()),
                ];
                (labels, lag.lag as f64)
            })
            .collect();
        gauge_family(
            &mut encoder,
            "iggyd_consumer_group_lag",
            "Stored messages on the partition after the group's committed offset (all of them \
             before its first commit).",
            Some(&Unit::Other("messages".to_string())),
            &lags,
        )?;
        gauge_family(
            &mut encoder,
            "iggyd_consumer_group_members",
            "Members of the consumer group.",
            None,
            &members,
        )?;

        for (name, help, value) in process_counters() {
            let samples = [(Vec::new(), value(&snapshot.process.security) as f64)];
            counter_family(&mut encoder, name, help, None, &samples)?;
        }

        let shard_series: Vec<(Labels, ShardSeries)> = shards
            .iter()
            .map(|(labels, _, series)| (labels.clone(), *series))
            .collect();
        cluster::encode(&mut encoder, input, &shard_series)
    }
}

mod cluster;
#[cfg(test)]
mod tests;
