//! The daemon's history: two rings of the per-second figures the shards
//! already publish (throughput, latency percentiles, inbox depth,
//! connections, loop busy %, per-partition bytes and append rate,
//! per-group lag, disk use), one-second points for `history::SECOND_POINTS`
//! (15 minutes) and ten-second points for `history::TEN_SECOND_POINTS`
//! (6 hours), so a console that attaches late shows the whole window at
//! once. The admin socket serves it (`history` op, subscriptions with
//! `"history":true`).
//!
//! Who runs it: the admin server's thread `history`, once a second
//! (`ControlSource::record_history`). It reads published state only
//! (`Heartbeats` counters and reports, the published view, `Mesh::depth`,
//! `/proc`, `statvfs`), exactly as a snapshot does, and never runs on or
//! waits for a shard. Its memory is fixed: at most `HISTORY_SERIES_MAX`
//! series (process, then shards, then groups, then partitions; the rest are
//! not recorded), each allocated at its ring's full length when it first
//! appears, so the rings never pass `limits::HISTORY_BYTES_MAX`.

use crate::control::api::{History, HistoryWindow, Series, history::name};
use crate::control::daemon_source::{self, DaemonSource};
use crate::control::sysinfo;
use crate::limits::{HISTORY_BYTES_MAX, HISTORY_SERIES_MAX};
use crate::shard::heartbeat::ShardCounters;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

pub use crate::control::api::history::{
    SECOND_POINTS, SECOND_STEP_MS, TEN_SECOND_POINTS, TEN_SECOND_STEP_MS,
};

/// How ten one-second values of a series become one ten-second value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// Rates and levels that average (messages per second, busy %).
    Mean,
    /// Tails, where an average would hide a spike (p99s, inbox depth).
    Max,
    /// Levels that are read, not summed (bytes stored, lag, disk used).
    Last,
}

/// One sampled value.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: String,
    pub aggregate: Aggregate,
    pub value: f32,
}

/// One ring: point times and, per series, values aligned to the newest
/// point. Every deque is allocated at `capacity` when created.
#[derive(Debug)]
struct Ring {
    step_ms: u64,
    capacity: usize,
    times: VecDeque<u64>,
    series: BTreeMap<String, VecDeque<f32>>,
}

impl Ring {
    fn new(step_ms: u64, capacity: usize) -> Ring {
        assert!(capacity > 0);
        Ring {
            step_ms,
            capacity,
            times: VecDeque::with_capacity(capacity),
            series: BTreeMap::new(),
        }
    }

    /// Append a point; series missing from `values` are gone (their entity
    /// no longer exists), new ones start here.
    fn push(&mut self, at_ms: u64, values: &[(&str, f32)]) {
        // The series a point may carry are capped here too: the ten-second
        // bucket is a union of ten seconds' series.
        let values = &values[..values.len().min(HISTORY_SERIES_MAX)];
        if self.times.len() == self.capacity {
            self.times.pop_front();
        }
        self.times.push_back(at_ms);
        let present: HashMap<&str, f32> = values.iter().copied().collect();
        self.series
            .retain(|name, _| present.contains_key(name.as_str()));
        let points = self.times.len();
        for (series_name, value) in values {
            let capacity = self.capacity;
            let series = match self.series.get_mut(*series_name) {
                Some(series) => series,
                None => self
                    .series
                    .entry((*series_name).to_string())
                    .or_insert_with(|| VecDeque::with_capacity(capacity)),
            };
            if series.len() == capacity {
                series.pop_front();
            }
            series.push_back(if value.is_finite() { *value } else { 0.0 });
            debug_assert!(series.len() <= points);
        }
    }

    /// The points newer than `after_ms` (all of them for `None`).
    fn since(&self, after_ms: Option<u64>) -> History {
        let skip = match after_ms {
            None => 0,
            Some(after) => self.times.partition_point(|at| *at <= after),
        };
        let count = self.times.len() - skip;
        History {
            step_ms: self.step_ms,
            at_ms: self.times.iter().skip(skip).copied().collect(),
            series: self
                .series
                .iter()
                .map(|(series_name, values)| {
                    let take = values.len().min(count);
                    Series {
                        name: series_name.clone(),
                        values: values.iter().skip(values.len() - take).copied().collect(),
                    }
                })
                .collect(),
        }
    }

    /// Bytes this ring holds (allocations, not lengths).
    fn memory_bytes(&self) -> usize {
        let values: usize = self
            .series
            .iter()
            .map(|(series_name, values)| {
                series_name.capacity()
                    + values.capacity() * size_of::<f32>()
                    + SERIES_OVERHEAD_BYTES
            })
            .sum();
        self.times.capacity() * size_of::<u64>() + values
    }
}

/// Per series: a `String` and a `VecDeque` header plus a B-tree slot.
pub const SERIES_OVERHEAD_BYTES: usize = 96;
/// The longest series name: a partition's, with every id at `u32::MAX`.
pub const SERIES_NAME_BYTES_MAX: usize =
    "partition.4294967295.4294967295.4294967295.messages_in".len();

/// The ten-second point being built from one-second samples.
#[derive(Debug, Default)]
struct Bucket {
    index: u64,
    at_ms: u64,
    /// Per series: aggregate, running value, samples seen.
    values: BTreeMap<String, (Aggregate, f64, u32)>,
}

/// Both rings.
#[derive(Debug)]
pub struct Rings {
    second: Ring,
    ten_second: Ring,
    bucket: Option<Bucket>,
}

impl Default for Rings {
    fn default() -> Rings {
        Rings::new()
    }
}

impl Rings {
    pub fn new() -> Rings {
        Rings {
            second: Ring::new(SECOND_STEP_MS, SECOND_POINTS),
            ten_second: Ring::new(TEN_SECOND_STEP_MS, TEN_SECOND_POINTS),
            bucket: None,
        }
    }

    /// Record one second's values at `at_ms` (Unix ms, increasing). Values
    /// past `HISTORY_SERIES_MAX` are dropped (callers order them by
    /// priority). Each completed ten-second bucket becomes a point of the
    /// ten-second ring.
    pub fn record(&mut self, at_ms: u64, values: &[Value]) {
        if self.second.times.back().is_some_and(|last| at_ms <= *last) {
            return;
        }
        let values = &values[..values.len().min(HISTORY_SERIES_MAX)];
        let pairs: Vec<(&str, f32)> = values
            .iter()
            .map(|value| (value.name.as_str(), value.value))
            .collect();
        self.second.push(at_ms, &pairs);
        let index = at_ms / TEN_SECOND_STEP_MS;
        if self
            .bucket
            .as_ref()
            .is_some_and(|bucket| bucket.index != index)
            && let Some(done) = self.bucket.take()
        {
            let pairs: Vec<(&str, f32)> = done
                .values
                .iter()
                .map(|(series_name, (aggregate, value, count))| {
                    let value = match aggregate {
                        Aggregate::Mean => *value / f64::from((*count).max(1)),
                        Aggregate::Max | Aggregate::Last => *value,
                    };
                    (series_name.as_str(), value as f32)
                })
                .collect();
            self.ten_second.push(done.at_ms, &pairs);
        }
        let bucket = self.bucket.get_or_insert_with(|| Bucket {
            index,
            ..Bucket::default()
        });
        bucket.at_ms = at_ms;
        for value in values {
            let sample = f64::from(value.value);
            let full = bucket.values.len() >= HISTORY_SERIES_MAX;
            match bucket.values.get_mut(&value.name) {
                Some((aggregate, running, count)) => {
                    *count += 1;
                    match aggregate {
                        Aggregate::Mean => *running += sample,
                        Aggregate::Max => *running = running.max(sample),
                        Aggregate::Last => *running = sample,
                    }
                }
                None if !full => {
                    bucket
                        .values
                        .insert(value.name.clone(), (value.aggregate, sample, 1));
                }
                None => {}
            }
        }
    }

    /// The points of both rings newer than `cursor`, and the cursor that
    /// follows them.
    pub fn since(&self, cursor: Cursor) -> (HistoryWindow, Cursor) {
        let window = HistoryWindow {
            second: self.second.since(cursor.second),
            ten_second: self.ten_second.since(cursor.ten_second),
        };
        let next = Cursor {
            second: self.second.times.back().copied().or(cursor.second),
            ten_second: self.ten_second.times.back().copied().or(cursor.ten_second),
        };
        (window, next)
    }

    /// Bytes both rings hold.
    pub fn memory_bytes(&self) -> usize {
        self.second.memory_bytes() + self.ten_second.memory_bytes()
    }
}

/// What a subscriber was sent last: the newest point of each ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub second: Option<u64>,
    pub ten_second: Option<u64>,
}

/// The rings plus what sampling needs between two seconds: the previous
/// counters (for rates) and CPU readings (for busy %).
#[derive(Debug, Default)]
pub struct Recorder {
    rings: Mutex<Rings>,
    previous: Mutex<Previous>,
}

#[derive(Debug, Default)]
struct Previous {
    at: Option<Instant>,
    counters: Vec<ShardCounters>,
    /// Per shard: thread id and CPU ms at `at`.
    cpu: Vec<(Option<i32>, u64)>,
    /// Per partition (stream, topic, partition id): its next offset at `at`.
    next_offsets: HashMap<(u32, u32, u32), u64>,
}

impl Recorder {
    pub fn since(&self, cursor: Cursor) -> (HistoryWindow, Cursor) {
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .since(cursor)
    }

    pub fn memory_bytes(&self) -> usize {
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .memory_bytes()
    }

    /// Sample `source`'s published state now and record it.
    pub fn record(&self, source: &DaemonSource) {
        let values = {
            let mut previous = self.previous.lock().unwrap_or_else(PoisonError::into_inner);
            sample(source, &mut previous)
        };
        let at_ms = daemon_source::unix_ms();
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(at_ms, &values);
    }
}

/// One second's values, in priority order: process, shards, groups,
/// partitions. Rates need a previous sample, so the first call records
/// levels only.
fn sample(source: &DaemonSource, previous: &mut Previous) -> Vec<Value> {
    let now = Instant::now();
    let parts = source.parts();
    let heartbeats = &parts.heartbeats;
    let shards = parts.shards.len();
    let elapsed = previous
        .at
        .map(|at| now.saturating_duration_since(at).as_secs_f64())
        .filter(|seconds| *seconds > 0.0);
    let mut values = Vec::with_capacity(16 + shards * 11);
    let mut push = |series_name: String, aggregate: Aggregate, value: f64| {
        values.push(Value {
            name: series_name,
            aggregate,
            value: value as f32,
        });
    };
    if let Ok(disk) = sysinfo::disk_usage(&parts.data_dir) {
        push(
            name::DISK_USED.into(),
            Aggregate::Last,
            disk.used_bytes as f64,
        );
    }
    let total = heartbeats.total();
    push(
        name::PROCESS_CONNECTIONS.into(),
        Aggregate::Last,
        total.connections as f64,
    );
    if let Some(admission) = &parts.security {
        push(
            name::CONNECTIONS_REFUSED.into(),
            Aggregate::Last,
            admission.snapshot().connections_refused as f64,
        );
    }
    if previous.cpu.len() != shards || previous.cpu.iter().any(|(tid, _)| tid.is_none()) {
        let mut tids = vec![None; shards];
        daemon_source::find_shard_threads(&mut tids);
        previous.cpu = tids.into_iter().map(|tid| (tid, 0)).collect();
        previous.at = None;
    }
    previous.counters.resize(shards, ShardCounters::default());
    for shard in 0..shards {
        let id = u32::try_from(parts.shards[shard].shard).unwrap_or(u32::MAX);
        let counters = heartbeats.counters(shard);
        let report = heartbeats.report(shard);
        let before = previous.counters[shard];
        let cpu_ms = previous.cpu[shard]
            .0
            .and_then(|tid| sysinfo::thread_cpu_time_ms(tid).ok())
            .unwrap_or(0);
        if let Some(seconds) = elapsed {
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
            for (metric, now, then) in [
                (name::MESSAGES_IN, counters.messages_in, before.messages_in),
                (
                    name::MESSAGES_OUT,
                    counters.messages_out,
                    before.messages_out,
                ),
                (name::BYTES_IN, counters.bytes_in, before.bytes_in),
                (name::BYTES_OUT, counters.bytes_out, before.bytes_out),
            ] {
                push(name::shard(id, metric), Aggregate::Mean, rate(now, then));
            }
            let busy = cpu_ms.saturating_sub(previous.cpu[shard].1) as f64 / (seconds * 10.0);
            push(
                name::shard(id, name::BUSY_PERCENT),
                Aggregate::Mean,
                busy.min(100.0),
            );
        }
        previous.counters[shard] = counters;
        previous.cpu[shard].1 = cpu_ms;
        for (metric, aggregate, value) in [
            (name::REQUEST_P50, Aggregate::Mean, report.request.p50),
            (name::REQUEST_P99, Aggregate::Max, report.request.p99),
            (name::FSYNC_P99, Aggregate::Max, report.fsync.p99),
            (name::QUEUE_WAIT_P99, Aggregate::Max, report.queue_wait.p99),
            (
                name::QUEUE_DEPTH,
                Aggregate::Max,
                parts.mesh.depth(shard) as u64,
            ),
            (name::CONNECTIONS, Aggregate::Last, counters.connections),
        ] {
            push(name::shard(id, metric), aggregate, value as f64);
        }
    }
    let (topics, _, _) = source.topics_and_lags();
    for topic in &topics {
        for group in &topic.consumer_groups {
            push(
                name::group(topic.stream_id, topic.topic_id, group.group_id),
                Aggregate::Last,
                group.lag as f64,
            );
        }
    }
    let mut next_offsets = HashMap::with_capacity(previous.next_offsets.len());
    for topic in &topics {
        for partition in &topic.partitions {
            let key = (topic.stream_id, topic.topic_id, partition.partition_id);
            let (stream, topic_id, partition_id) = key;
            push(
                name::partition(stream, topic_id, partition_id, name::BYTES),
                Aggregate::Last,
                partition.bytes as f64,
            );
            let next_offset = if partition.messages == 0 && partition.current_offset == 0 {
                0
            } else {
                partition.current_offset + 1
            };
            if let (Some(seconds), Some(before)) = (elapsed, previous.next_offsets.get(&key)) {
                push(
                    name::partition(stream, topic_id, partition_id, name::MESSAGES_IN),
                    Aggregate::Mean,
                    next_offset.saturating_sub(*before) as f64 / seconds,
                );
            }
            next_offsets.insert(key, next_offset);
        }
    }
    previous.next_offsets = next_offsets;
    previous.at = Some(now);
    values
}

/// The bound `limits::HISTORY_BYTES_MAX` must cover: every series at full
/// length in both rings, with the longest name.
pub const fn memory_bound_bytes() -> usize {
    let points = SECOND_POINTS + TEN_SECOND_POINTS;
    points * size_of::<u64>()
        + 2 * HISTORY_SERIES_MAX * (SERIES_NAME_BYTES_MAX + SERIES_OVERHEAD_BYTES)
        + HISTORY_SERIES_MAX * points * size_of::<f32>()
}

const _: () = assert!(memory_bound_bytes() <= HISTORY_BYTES_MAX);

#[cfg(test)]
mod tests;
