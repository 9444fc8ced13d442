//! Tests of the history rings: the merge of seconds into ten-second
//! points, the end-aligned series, the cursor a subscriber follows, the
//! memory bound, and the cost of one sample against a daemon source whose
//! published state looks like a loaded daemon.

use super::*;
use crate::control::test_fixture;
use crate::preflight::Driver;
use crate::shard::heartbeat::{Heartbeats, Latency, ShardReport};
use crate::shard::op::PartitionReport;
use crate::shard::partition::PartitionKey;
use crate::topology::PlannedShard;
use iggyd_storage::PartitionStats;

fn value(key: SeriesKey, aggregate: Aggregate, value: f32) -> Value {
    Value {
        key,
        aggregate,
        value,
    }
}

fn named(series_name: &'static str) -> SeriesKey {
    SeriesKey::Process(series_name)
}

/// Proves one-second points land in the one-second ring as given, and each
/// completed ten-second bucket becomes one ten-second point whose value
/// follows its series' aggregate (mean, max, last).
#[test]
fn seconds_fold_into_ten_second_points() {
    let mut rings = Rings::new();
    for second in 0..25u64 {
        let at_ms = 1_000_000 + second * 1000;
        rings.record(
            at_ms,
            &[
                value(named("mean"), Aggregate::Mean, second as f32),
                value(named("max"), Aggregate::Max, (second % 7) as f32),
                value(named("last"), Aggregate::Last, second as f32),
            ],
        );
    }
    let (window, _) = rings.since(Cursor::default());
    assert_eq!(window.second.at_ms.len(), 25);
    assert_eq!(window.second.series("last").unwrap()[24], 24.0);
    // Buckets [1000 s, 1010 s) and [1010 s, 1020 s) are complete: seconds
    // 0..=9 and 10..=19.
    let ten = &window.ten_second;
    assert_eq!(ten.at_ms, vec![1_009_000, 1_019_000]);
    assert_eq!(ten.series("mean"), Some(&[4.5, 14.5][..]));
    assert_eq!(ten.series("max"), Some(&[6.0, 6.0][..]));
    assert_eq!(ten.series("last"), Some(&[9.0, 19.0][..]));
    // A time that does not move forward is ignored.
    rings.record(1_000_000, &[value(named("last"), Aggregate::Last, 99.0)]);
    assert_eq!(rings.since(Cursor::default()).0.second.at_ms.len(), 25);
}

/// Proves a second's values are kept by key whatever order they come in,
/// the first of two values with one key counts, and series are served in
/// key order (process, shards, groups, partitions) with their names.
#[test]
fn values_are_keyed_and_ordered() {
    let mut rings = Rings::new();
    rings.record(
        1_000_000,
        &[
            value(
                SeriesKey::Partition(1, 2, 3, name::BYTES),
                Aggregate::Last,
                7.0,
            ),
            value(SeriesKey::Shard(1, name::CONNECTIONS), Aggregate::Last, 2.0),
            value(SeriesKey::Shard(1, name::CONNECTIONS), Aggregate::Last, 9.0),
            value(SeriesKey::Group(1, 2, 5), Aggregate::Last, 4.0),
            value(SeriesKey::Shard(0, name::CONNECTIONS), Aggregate::Last, 1.0),
            value(named(name::DISK_USED), Aggregate::Last, 3.0),
        ],
    );
    let (window, _) = rings.since(Cursor::default());
    let served: Vec<(&str, f32)> = window
        .second
        .series
        .iter()
        .map(|series| (series.name.as_str(), series.values[0]))
        .collect();
    assert_eq!(
        served,
        [
            ("disk_used_bytes", 3.0),
            ("shard.0.connections", 1.0),
            ("shard.1.connections", 2.0),
            ("group.1.2.5.lag", 4.0),
            ("partition.1.2.3.bytes", 7.0),
        ]
    );
}

/// Proves a series that appears late is aligned to the newest point, one
/// that disappears is dropped, rings keep at most their capacity, and a
/// cursor yields only the points after it (nothing when up to date).
#[test]
fn series_align_to_the_end_and_cursors_follow() {
    let mut rings = Rings::new();
    let start = 5_000_000u64;
    for second in 0..(SECOND_POINTS as u64 + 5) {
        let mut values = vec![value(named("always"), Aggregate::Last, second as f32)];
        if second >= SECOND_POINTS as u64 {
            values.push(value(named("late"), Aggregate::Last, 1.0));
        }
        if second < 3 {
            values.push(value(named("early"), Aggregate::Last, 1.0));
        }
        rings.record(start + second * 1000, &values);
    }
    let (window, cursor) = rings.since(Cursor::default());
    assert_eq!(window.second.at_ms.len(), SECOND_POINTS);
    assert_eq!(window.second.at_ms[0], start + 5000);
    assert_eq!(window.second.series("always").unwrap().len(), SECOND_POINTS);
    assert_eq!(window.second.series("late").unwrap().len(), 5);
    assert_eq!(window.second.series("early"), None);
    assert_eq!(
        cursor.second,
        Some(start + (SECOND_POINTS as u64 + 4) * 1000)
    );
    let (nothing, same) = rings.since(cursor);
    assert!(nothing.second.at_ms.is_empty());
    assert!(
        nothing
            .second
            .series
            .iter()
            .all(|series| series.values.is_empty())
    );
    assert_eq!(same, cursor);
    rings.record(
        start + (SECOND_POINTS as u64 + 5) * 1000,
        &[value(named("always"), Aggregate::Last, 7.0)],
    );
    let (next, _) = rings.since(cursor);
    assert_eq!(next.second.at_ms.len(), 1);
    assert_eq!(next.second.series("always"), Some(&[7.0][..]));
    assert_eq!(next.second.series("late"), None, "gone at the newest point");
    // What a console does with it: the merge rule of the shared crate.
    let mut console = window.clone();
    console.append(next);
    assert_eq!(console.second.at_ms.len(), SECOND_POINTS);
    assert_eq!(console.second.series("always").unwrap().last(), Some(&7.0));
}

/// Proves the memory bound: with more than `HISTORY_SERIES_MAX` series
/// offered, only that many are kept, and the rings' allocations stay
/// within `limits::HISTORY_BYTES_MAX` (every series is allocated at full
/// length at once, so a few points show the steady state).
#[test]
fn memory_stays_within_the_bound() {
    let mut rings = Rings::new();
    let values: Vec<Value> = (0..HISTORY_SERIES_MAX as u32 + 100)
        .map(|id| {
            value(
                SeriesKey::Partition(u32::MAX, u32::MAX, id, name::MESSAGES_IN),
                Aggregate::Mean,
                1.0,
            )
        })
        .collect();
    for second in 0..12u64 {
        rings.record(1_000_000 + second * 1000, &values);
    }
    // Seconds whose series differ (partitions come and go): the union in a
    // ten-second bucket is capped as well.
    for second in 12..24u64 {
        let shifted: Vec<Value> = (0..HISTORY_SERIES_MAX as u32)
            .map(|id| {
                value(
                    SeriesKey::Partition(7, 7, id + second as u32 * 100, name::BYTES),
                    Aggregate::Last,
                    1.0,
                )
            })
            .collect();
        rings.record(1_000_000 + second * 1000, &shifted);
    }
    let (window, _) = rings.since(Cursor::default());
    assert_eq!(window.second.series.len(), HISTORY_SERIES_MAX);
    assert_eq!(window.ten_second.series.len(), HISTORY_SERIES_MAX);
    let used = rings.memory_bytes();
    assert!(used <= HISTORY_BYTES_MAX, "{used} > {HISTORY_BYTES_MAX}");
    assert!(
        used <= memory_bound_bytes(),
        "{used} > {}",
        memory_bound_bytes()
    );
    // The bound is tight enough to mean something: the full rings of this
    // many series use most of it.
    assert!(used > memory_bound_bytes() / 2, "{used}");
}

/// A daemon source with `shards` shards and `partitions` partitions of one
/// topic, published as a loaded daemon would.
fn loaded_source(shards: usize, partitions: u32) -> (DaemonSource, Heartbeats, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let heartbeats = Heartbeats::new(shards);
    let plan = (0..shards)
        .map(|shard| PlannedShard {
            shard,
            pu: shard as u32,
            core: shard as u32,
            package: Some(0),
            numa_node: Some(0),
            skipped_siblings: Vec::new(),
        })
        .collect();
    test_fixture::publish_view(&heartbeats, "orders", partitions, []);
    let source = test_fixture::source(
        plan,
        Driver::Epoll,
        &heartbeats,
        dir.path().to_path_buf(),
        dir.path().join("logs"),
        None,
    );
    publish_load(&heartbeats, shards, partitions, 1);
    (source, heartbeats, dir)
}

/// Publish the counters and reports of second `second` of a steady load.
fn publish_load(heartbeats: &Heartbeats, shards: usize, partitions: u32, second: u64) {
    for shard in 0..shards {
        heartbeats.publish(
            shard,
            &ShardCounters {
                messages_in: second * 10_000,
                bytes_in: second * 10_000_000,
                connections: 4,
                partitions: u64::from(partitions),
                ..ShardCounters::default()
            },
        );
        let reports = (0..partitions)
            .map(|partition| PartitionReport {
                key: PartitionKey {
                    stream: 0,
                    topic: 0,
                    partition,
                    storage_id: u64::from(partition),
                },
                stats: PartitionStats {
                    messages: second * 1000,
                    bytes: second * 1_000_000,
                    segments: 1,
                    first_offset: 0,
                    next_offset: second * 1000,
                    memory_bytes: 0,
                },
                current_offset: (second * 1000).saturating_sub(1),
                durable_next_offset: second * 1000,
                sealed_segments: Vec::new(),
                consumer_offsets: Vec::new(),
                segments: Vec::new(),
            })
            .collect();
        heartbeats.publish_report(
            shard,
            ShardReport {
                partitions: reports,
                request: Latency {
                    p50: 80,
                    p99: 900,
                    ..Latency::default()
                },
                ..ShardReport::default()
            },
        );
    }
}

/// Proves sampling a daemon source records what its shards published:
/// per-shard rates from counter deltas, latency, per-partition bytes and
/// append rates, group lag and disk use.
#[test]
fn samples_follow_published_state() {
    let (source, heartbeats, _dir) = loaded_source(2, 4);
    let recorder = Recorder::default();
    recorder.record(&source);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    publish_load(&heartbeats, 2, 4, 2);
    recorder.record(&source);
    let (window, _) = recorder.since(Cursor::default());
    let series = |series_name: &str| {
        window
            .second
            .series(series_name)
            .unwrap_or_else(|| panic!("{series_name} missing"))
            .to_vec()
    };
    assert_eq!(window.second.at_ms.len(), 2);
    let rate = series(&name::shard(1, name::MESSAGES_IN));
    assert_eq!(rate.len(), 1, "rates start with the second sample");
    assert!((8_000.0..=10_000.0).contains(&rate[0]), "{rate:?}");
    assert_eq!(
        series(&name::shard(0, name::REQUEST_P99)),
        vec![900.0, 900.0]
    );
    assert_eq!(series(&name::shard(0, name::CONNECTIONS)), vec![4.0, 4.0]);
    // Partitions are routed to shards by the view; each shows its bytes.
    assert_eq!(
        series(&name::partition(0, 0, 3, name::BYTES)).last(),
        Some(&2_000_000.0)
    );
    let appended = series(&name::partition(0, 0, 3, name::MESSAGES_IN));
    assert!((800.0..=1_000.0).contains(&appended[0]), "{appended:?}");
    assert_eq!(series(&name::group(0, 0, 0)).len(), 2);
    assert!(series(name::DISK_USED)[0] > 0.0);
    assert!(recorder.memory_bytes() <= HISTORY_BYTES_MAX);
    assert!(source.history_memory_bytes() <= HISTORY_BYTES_MAX);
}

/// Proves the history's lean pass over the topics agrees with the
/// snapshot's: the same partitions in the same order with the same bytes
/// and next offsets, and every group's lag equal to the snapshot's (here
/// with a stored group offset on half the partitions, so both rules of a
/// lag are used).
#[test]
fn topic_figures_agree_with_the_snapshot() {
    use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
    let (source, heartbeats, _dir) = loaded_source(2, 8);
    publish_load(&heartbeats, 2, 8, 3);
    for shard in 0..2 {
        let mut report = (*heartbeats.report(shard)).clone();
        for partition in &mut report.partitions {
            if partition.key.partition % 2 == 0 {
                partition.consumer_offsets = vec![(
                    ConsumerKey {
                        kind: ConsumerKind::Group,
                        id: 0,
                    },
                    1_234,
                )];
            }
        }
        heartbeats.publish_report(shard, report);
    }
    let mut figures = crate::control::daemon_source::TopicFigures::default();
    source.topic_figures(&mut figures);
    let (topics, _, _) = source.topics_and_lags();
    let expected: Vec<(u32, u32, u32, u64, u64)> = topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| {
                (
                    topic.stream_id,
                    topic.topic_id,
                    partition.partition_id,
                    partition.bytes,
                    partition.current_offset + 1,
                )
            })
        })
        .collect();
    let found: Vec<(u32, u32, u32, u64, u64)> = figures
        .partitions
        .iter()
        .map(|figure| {
            (
                figure.stream,
                figure.topic,
                figure.partition,
                figure.bytes,
                figure.next_offset,
            )
        })
        .collect();
    assert_eq!(found.len(), 8);
    assert_eq!(found, expected);
    let groups: Vec<(u32, u64)> = topics
        .iter()
        .flat_map(|topic| {
            topic
                .consumer_groups
                .iter()
                .map(|group| (group.group_id, group.lag))
        })
        .collect();
    let lags: Vec<(u32, u64)> = figures
        .groups
        .iter()
        .map(|group| (group.group, group.lag))
        .collect();
    // Four partitions at 3,000 messages with no stored offset, four behind
    // a stored 1,234 from the newest offset 2,999.
    assert_eq!(lags, vec![(0, 4 * 3_000 + 4 * (2_999 - 1_234))]);
    assert_eq!(lags, groups);
}

/// Measures the cost of one history sample (the work of thread `history`
/// each second) against a source with 4 shards and 256 partitions, and
/// proves it fits the budget of 1 ms per second in an optimized build. The
/// number is printed (`cargo nextest run -p iggyd --lib history --release
/// --no-capture`); debug builds only check it stays under 5 ms.
#[test]
fn one_sample_costs_well_under_a_millisecond() {
    let (source, heartbeats, _dir) = loaded_source(4, 256);
    let recorder = Recorder::default();
    recorder.record(&source);
    let rounds = 50u64;
    let mut cpu_ns = 0u128;
    for second in 2..2 + rounds {
        publish_load(&heartbeats, 4, 256, second);
        let before = thread_cpu_ns();
        recorder.record(&source);
        cpu_ns += thread_cpu_ns() - before;
    }
    let per_sample_us = cpu_ns / u128::from(rounds) / 1000;
    println!(
        "history: one sample of 4 shards and 256 partitions costs {per_sample_us} µs of CPU \
         ({} series, {} bytes of rings)",
        recorder.since(Cursor::default()).0.second.series.len(),
        recorder.memory_bytes()
    );
    let budget_us = if cfg!(debug_assertions) { 5_000 } else { 1_000 };
    assert!(per_sample_us < budget_us, "{per_sample_us} µs per sample");
}

/// CPU time of the calling thread in nanoseconds.
fn thread_cpu_ns() -> u128 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec for the call's duration.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    assert_eq!(result, 0);
    time.tv_sec as u128 * 1_000_000_000 + time.tv_nsec as u128
}
