//! Tests of the metrics page: built from a `DaemonSource` over published
//! state (a view with a stream, a topic and a consumer group; counters; a
//! report with partitions and histograms), so the whole path from what a
//! shard publishes to the text a scraper reads is covered; and the check
//! that the packaged Grafana dashboard asks only for series the page has.

use super::*;
use crate::control::daemon_source::DaemonSource;
use crate::control::test_fixture;
use crate::preflight::Driver;
use crate::shard::heartbeat::ClusterCounters;
use crate::shard::heartbeat::{Heartbeats, Latency, ShardReport};
use crate::shard::op::PartitionReport;
use crate::shard::partition::PartitionKey;
use crate::shard::replica::ReplicationCounters;
use crate::topology::PlannedShard;
use iggyd_admin_api::cluster::{FollowerStatus, GroupStatus, Role};
use iggyd_storage::PartitionStats;
use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
use std::collections::BTreeSet;

/// A daemon source with one shard whose published state covers every
/// family: the stream's name needs escaping in a label.
fn populated() -> (DaemonSource, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let admission = crate::net::admission::Admission::new(crate::net::admission::AdmissionLimits {
        max_connections: Some(500),
        max_connections_per_address: Some(100),
        descriptors: None,
        shards: 1,
        login_backoff: crate::limits::LOGIN_BACKOFF,
        max_login_backoff: crate::limits::LOGIN_BACKOFF_CAP,
    });
    admission
        .counters
        .logins_failed
        .store(5, std::sync::atomic::Ordering::Relaxed);
    admission
        .counters
        .connections_refused
        .store(9, std::sync::atomic::Ordering::Relaxed);
    let heartbeats = Heartbeats::new(1);
    let planned = PlannedShard {
        shard: 0,
        pu: 3,
        core: 1,
        package: Some(0),
        numa_node: Some(0),
        skipped_siblings: Vec::new(),
    };
    let source = test_fixture::source(
        vec![planned],
        Driver::IoUring,
        &heartbeats,
        dir.path().to_path_buf(),
        dir.path().join("logs"),
        Some(admission),
    );
    test_fixture::publish_view(&heartbeats, "orders \"eu\"", 2, []);
    heartbeats.publish(
        0,
        &ShardCounters {
            messages_in: 30,
            messages_out: 12,
            bytes_in: 3000,
            bytes_out: 1200,
            fsyncs: 4,
            connections: 2,
            partitions: 2,
            sends_local: 7,
            sends_forwarded: 3,
        },
    );
    let partition =
        |id: u32, messages: u64, durable_next: u64, committed: Option<u64>| PartitionReport {
            key: PartitionKey {
                stream: 0,
                topic: 0,
                partition: id,
                storage_id: u64::from(id),
            },
            stats: PartitionStats {
                messages,
                bytes: messages * 100,
                segments: 1,
                first_offset: 0,
                next_offset: messages,
                memory_bytes: 0,
            },
            current_offset: messages - 1,
            durable_next_offset: durable_next,
            sealed_segments: Vec::new(),
            segments: Vec::new(),
            consumer_offsets: committed
                .map(|offset| {
                    (
                        ConsumerKey {
                            kind: ConsumerKind::Group,
                            id: 0,
                        },
                        offset,
                    )
                })
                .into_iter()
                .collect(),
        };
    let mut request = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).unwrap();
    for value in [20, 20, 700, 3_000] {
        request.record(value).unwrap();
    }
    let window = Latency::of(&request);
    let mut histograms = LatencyHistograms::default();
    histograms.request.add(&window.window);
    heartbeats.publish_report(
        0,
        ShardReport {
            partitions: vec![partition(0, 20, 18, Some(14)), partition(1, 10, 10, None)],
            request: window,
            histograms,
            trash: iggyd_storage::trash::TrashStats {
                entries: 3,
                bytes: 4096,
                failing: 1,
                ..Default::default()
            },
            ..ShardReport::default()
        },
    );
    (source, dir)
}

/// `name{labels} value` lines of a page, as (name, labels, value).
fn samples(page: &str) -> Vec<(String, String, f64)> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            (name.to_string(), labels.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn value(page: &str, name: &str, label: &str) -> f64 {
    let found: Vec<f64> = samples(page)
        .into_iter()
        .filter(|(found, labels, _)| found == name && labels.contains(label))
        .map(|(_, _, value)| value)
        .collect();
    assert_eq!(found.len(), 1, "{name} {label}:\n{page}");
    found[0]
}

/// Proves the page carries each family once, typed, with the numbers the
/// admin snapshot of the same moment shows, per-partition lag and durable
/// offsets, cumulative histogram buckets and escaped label values.
#[test]
fn page_reports_published_state() {
    let (source, _dir) = populated();
    let input = source.metrics_input();
    let page = encode(&input);
    let shard = "shard=\"0\",cpu=\"3\",core=\"1\",numa_node=\"0\"";
    assert_eq!(value(&page, "iggyd_shard_messages_in_total", shard), 30.0);
    assert_eq!(value(&page, "iggyd_shard_messages_out_total", shard), 12.0);
    assert_eq!(value(&page, "iggyd_shard_in_bytes_total", shard), 3000.0);
    assert_eq!(value(&page, "iggyd_shard_out_bytes_total", shard), 1200.0);
    assert_eq!(value(&page, "iggyd_shard_fsyncs_total", shard), 4.0);
    assert_eq!(value(&page, "iggyd_shard_sends_local_total", shard), 7.0);
    assert_eq!(
        value(&page, "iggyd_shard_sends_forwarded_total", shard),
        3.0
    );
    assert_eq!(value(&page, "iggyd_shard_connections", shard), 2.0);
    assert_eq!(value(&page, "iggyd_connections", ""), 2.0);
    assert!(page.contains("# TYPE iggyd_shard_messages_in_total counter\n"));
    assert!(page.contains("# TYPE iggyd_shard_request_duration_seconds histogram\n"));

    // Buckets are cumulative: 20 µs twice, 700 µs, 3 ms.
    let bucket = |le: &str| {
        value(
            &page,
            "iggyd_shard_request_duration_seconds_bucket",
            &format!("le=\"{le}\""),
        )
    };
    assert_eq!(bucket("1e-05"), 0.0);
    assert_eq!(bucket("2.5e-05"), 2.0);
    assert_eq!(bucket("0.0005"), 2.0);
    assert_eq!(bucket("0.001"), 3.0);
    assert_eq!(bucket("0.005"), 4.0);
    assert_eq!(bucket("+Inf"), 4.0);
    assert_eq!(
        value(&page, "iggyd_shard_request_duration_seconds_count", shard),
        4.0
    );
    let sum = value(&page, "iggyd_shard_request_duration_seconds_sum", shard);
    assert!((sum - 0.00374).abs() < 0.0001, "{sum}");

    let partition = "stream=\"orders \\\"eu\\\"\",topic=\"created\",partition=\"0\"";
    assert_eq!(value(&page, "iggyd_partition_messages", partition), 20.0);
    assert_eq!(
        value(&page, "iggyd_partition_size_bytes", partition),
        2000.0
    );
    assert_eq!(
        value(&page, "iggyd_partition_current_offset", partition),
        19.0
    );
    assert_eq!(
        value(&page, "iggyd_partition_durable_offset", partition),
        17.0
    );
    // Partition 0: committed 14 of 19 → 5; partition 1: nothing committed → 10.
    let lag = |id: u32| {
        value(
            &page,
            "iggyd_consumer_group_lag_messages",
            &format!("group=\"billing\",partition=\"{id}\""),
        )
    };
    assert_eq!((lag(0), lag(1)), (5.0, 10.0));
    let snapshot_lag = input.snapshot.topics[0].consumer_groups[0].lag;
    assert_eq!(lag(0) + lag(1), snapshot_lag as f64);
    assert!(value(&page, "iggyd_process_resident_memory_bytes", "") > 0.0);
    assert!(value(&page, "iggyd_process_open_fds", "") > 0.0);
    // The connection layer's counters and the trash, process-wide.
    assert_eq!(value(&page, "iggyd_logins_failed_total", ""), 5.0);
    assert_eq!(value(&page, "iggyd_connections_refused_total", ""), 9.0);
    assert_eq!(value(&page, "iggyd_evictions_total", ""), 0.0);
    assert_eq!(value(&page, "iggyd_connections_max", ""), 500.0);
    assert_eq!(value(&page, "iggyd_trash_pending_bytes", ""), 4096.0);
    assert_eq!(value(&page, "iggyd_trash_pending_entries", ""), 3.0);
    assert_eq!(value(&page, "iggyd_trash_failing_entries", ""), 1.0);
    assert_eq!(
        value(&page, "iggyd_build_info", "version="),
        1.0,
        "build info"
    );

    let families: Vec<&str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    let unique: BTreeSet<&str> = families.iter().copied().collect();
    assert_eq!(unique.len(), families.len(), "a family appears twice");
}

/// Every series name (`name` before `{` or a space) the page has.
fn exported_series() -> BTreeSet<String> {
    let (source, _dir) = populated();
    let page = encode(&source.metrics_input());
    samples(&page)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

/// Every `expr` string in a Grafana dashboard, at any depth.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(inner, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| exprs(item, out)),
        _ => {}
    }
}

/// Proves `packaging/grafana/iggyd.json` parses, has panels, and that every
/// query names at least one series and only series the daemon exports.
#[test]
fn grafana_dashboard_queries_exported_series() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/grafana/iggyd.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        dashboard["title"]
            .as_str()
            .is_some_and(|title| !title.is_empty())
    );
    assert!(
        dashboard["panels"]
            .as_array()
            .is_some_and(|panels| panels.len() >= 6)
    );
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 6, "{queries:?}");
    let exported = exported_series();
    for query in &queries {
        let named: Vec<&str> = query
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| word.starts_with("iggyd_"))
            .collect();
        assert!(!named.is_empty(), "{query} names no iggyd series");
        for name in named {
            assert!(
                exported.contains(name),
                "{query}: the daemon does not export {name}"
            );
        }
    }
}

fn group(name: &str, role: Role, leader: Option<u64>, term: u64) -> GroupStatus {
    GroupStatus {
        group: name.to_string(),
        storage_id: None,
        shard: 0,
        leader,
        term,
        role,
        last_log: Some(12),
        committed: Some(10),
        applied: Some(9),
        voters: vec![1, 2, 3],
        learners: Vec::new(),
        followers: Vec::new(),
    }
}

/// Proves a cluster node's page: each group's term, indexes and whether
/// this node leads it; follower lag only where this node leads; no index
/// sample for a group with nothing committed yet; the shard's election,
/// forwarding and 58/57 counters with their labels; every family once.
/// And that a single node's page has no `iggyd_cluster_` series at all.
#[test]
fn cluster_series_only_on_a_cluster_node() {
    let (source, _dir) = populated();
    let single = encode(&source.metrics_input());
    assert!(!single.contains("iggyd_cluster_"), "{single}");

    let mut input = source.metrics_input();
    let mut metadata = group("metadata", Role::Leader, Some(1), 4);
    metadata.followers = vec![
        FollowerStatus {
            node: 2,
            matched: Some(12),
            lag: 0,
        },
        FollowerStatus {
            node: 3,
            matched: Some(8),
            lag: 4,
        },
    ];
    let follower = group("1/1/0", Role::Follower, Some(2), 3);
    let mut electing = group("1/1/1", Role::Candidate, None, 6);
    electing.committed = None;
    electing.applied = None;
    input.cluster = Some(ClusterSeries {
        groups: vec![metadata, follower, electing],
        shards_silent: vec![1],
    });
    input.shards[0].cluster = ClusterCounters {
        replication: ReplicationCounters {
            elections: 13,
            forwarded_messages: 5,
            forwarded_offsets: 2,
        },
        not_accepted: 3,
        not_committed: 1,
    };
    let page = encode(&input);
    let of = |name: &str, label: &str| value(&page, name, label);
    assert_eq!(of("iggyd_cluster_group_term", "group=\"metadata\""), 4.0);
    assert_eq!(of("iggyd_cluster_group_term", "group=\"1/1/0\""), 3.0);
    assert_eq!(of("iggyd_cluster_group_term", "group=\"1/1/1\""), 6.0);
    assert_eq!(of("iggyd_cluster_group_leader", "group=\"metadata\""), 1.0);
    assert_eq!(of("iggyd_cluster_group_leader", "group=\"1/1/0\""), 0.0);
    assert_eq!(of("iggyd_cluster_group_leader", "group=\"1/1/1\""), 0.0);
    assert_eq!(
        of("iggyd_cluster_group_commit_index", "group=\"1/1/0\""),
        10.0
    );
    assert_eq!(
        of("iggyd_cluster_group_applied_index", "group=\"1/1/0\""),
        9.0
    );
    assert_eq!(
        of("iggyd_cluster_group_last_log_index", "group=\"1/1/0\""),
        12.0
    );
    assert!(
        !page.contains("iggyd_cluster_group_commit_index{group=\"1/1/1\"}"),
        "{page}"
    );
    assert_eq!(
        of(
            "iggyd_cluster_follower_lag",
            "group=\"metadata\",follower=\"3\""
        ),
        4.0
    );
    assert_eq!(
        of(
            "iggyd_cluster_follower_lag",
            "group=\"metadata\",follower=\"2\""
        ),
        0.0
    );
    assert_eq!(
        samples(&page)
            .iter()
            .filter(|(name, ..)| name == "iggyd_cluster_follower_lag")
            .count(),
        2,
        "lag only where this node leads:\n{page}"
    );
    assert_eq!(of("iggyd_cluster_shards_silent", ""), 1.0);
    let shard = "shard=\"0\",cpu=\"3\",core=\"1\",numa_node=\"0\"";
    assert_eq!(of("iggyd_cluster_elections_total", shard), 13.0);
    assert_eq!(
        of("iggyd_cluster_forwarded_total", "kind=\"messages\""),
        5.0
    );
    assert_eq!(of("iggyd_cluster_forwarded_total", "kind=\"offsets\""), 2.0);
    assert_eq!(
        of("iggyd_cluster_refusals_total", "status=\"not_accepted\""),
        3.0
    );
    assert_eq!(
        of("iggyd_cluster_refusals_total", "status=\"not_committed\""),
        1.0
    );
    assert!(page.contains("# TYPE iggyd_cluster_elections_total counter\n"));
    assert!(page.contains("# TYPE iggyd_cluster_group_term gauge\n"));
    let families: Vec<&str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    let unique: BTreeSet<&str> = families.iter().copied().collect();
    assert_eq!(unique.len(), families.len(), "a family appears twice");
}
