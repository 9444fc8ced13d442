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
//!
//! Cost: a sample must stay well under 1 ms of the thread per second. So a
//! second's values carry typed keys (`SeriesKey`: ids and a static metric
//! name), compared and looked up without building strings; a series' name
//! is formatted once, when it first appears; topics are read through a
//! lean pass (`DaemonSource::topic_figures`) rather than a snapshot's
//! lists; shard threads' CPU comes from their CPU clocks, not `/proc`.

use crate::control::api::{History, HistoryWindow, Series, history::name};
use crate::control::daemon_source::{self, DaemonSource};
use crate::control::sysinfo;
use crate::limits::{HISTORY_BYTES_MAX, HISTORY_SERIES_MAX};
use crate::shard::heartbeat::ShardCounters;
use std::collections::VecDeque;
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

/// Which series a value belongs to, as the parts of its name
/// (`api::history::name`): cheap to build, compare and order every second;
/// `name` formats the string once, when the series first appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SeriesKey {
    /// A process-wide series, named as it is.
    Process(&'static str),
    /// `shard.<id>.<metric>`.
    Shard(u32, &'static str),
    /// `group.<stream>.<topic>.<group>.lag`.
    Group(u32, u32, u32),
    /// `partition.<stream>.<topic>.<partition>.<metric>`.
    Partition(u32, u32, u32, &'static str),
}

impl SeriesKey {
    pub fn name(self) -> String {
        match self {
            SeriesKey::Process(series_name) => series_name.to_string(),
            SeriesKey::Shard(shard, metric) => name::shard(shard, metric),
            SeriesKey::Group(stream, topic, group) => name::group(stream, topic, group),
            SeriesKey::Partition(stream, topic, partition, metric) => {
                name::partition(stream, topic, partition, metric)
            }
        }
    }
}

/// One sampled value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value {
    pub key: SeriesKey,
    pub aggregate: Aggregate,
    pub value: f32,
}

/// One series of a ring: its name (formatted once) and its values, aligned
/// to the ring's newest point.
#[derive(Debug)]
struct RingSeries {
    name: String,
    values: VecDeque<f32>,
}

/// One ring: point times and, per series (sorted by key), values aligned
/// to the newest point. Every deque is allocated at `capacity` when
/// created.
#[derive(Debug)]
struct Ring {
    step_ms: u64,
    capacity: usize,
    times: VecDeque<u64>,
    series: Vec<(SeriesKey, RingSeries)>,
}

impl Ring {
    fn new(step_ms: u64, capacity: usize) -> Ring {
        assert!(capacity > 0);
        Ring {
            step_ms,
            capacity,
            times: VecDeque::with_capacity(capacity),
            series: Vec::new(),
        }
    }

    /// Append a point; `values` are sorted by key without duplicates.
    /// Series missing from `values` are gone (their entity no longer
    /// exists), new ones start here. A second with the same series as the
    /// one before (the usual case) updates them in place; otherwise one
    /// merge of the two sorted lists keeps, drops and adds series.
    fn push(&mut self, at_ms: u64, values: &[Value]) {
        debug_assert!(values.windows(2).all(|pair| pair[0].key < pair[1].key));
        // The series a point may carry are capped here too: the ten-second
        // bucket is a union of ten seconds' series.
        let values = &values[..values.len().min(HISTORY_SERIES_MAX)];
        if self.times.len() == self.capacity {
            self.times.pop_front();
        }
        self.times.push_back(at_ms);
        let capacity = self.capacity;
        let same_series = self.series.len() == values.len()
            && self
                .series
                .iter()
                .zip(values)
                .all(|((kept, _), value)| *kept == value.key);
        if !same_series {
            let mut kept = std::mem::take(&mut self.series).into_iter().peekable();
            let mut series = Vec::with_capacity(values.len());
            for value in values {
                while kept.next_if(|(key, _)| *key < value.key).is_some() {}
                let ring_series = match kept.next_if(|(key, _)| *key == value.key) {
                    Some((_, ring_series)) => ring_series,
                    None => RingSeries {
                        name: value.key.name(),
                        values: VecDeque::with_capacity(capacity),
                    },
                };
                series.push((value.key, ring_series));
            }
            self.series = series;
        }
        let points = self.times.len();
        for ((_, series), value) in self.series.iter_mut().zip(values) {
            if series.values.len() == capacity {
                series.values.pop_front();
            }
            let value = value.value;
            series
                .values
                .push_back(if value.is_finite() { value } else { 0.0 });
            debug_assert!(series.values.len() <= points);
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
                .map(|(_, series)| {
                    let take = series.values.len().min(count);
                    Series {
                        name: series.name.clone(),
                        values: series
                            .values
                            .iter()
                            .skip(series.values.len() - take)
                            .copied()
                            .collect(),
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
            .map(|(_, series)| series.name.capacity() + series.values.capacity() * size_of::<f32>())
            .sum();
        self.times.capacity() * size_of::<u64>()
            + values
            + self.series.capacity().max(self.series.len()) * SERIES_OVERHEAD_BYTES
    }
}

/// Per series: its slot in a ring's list (key, `String` and `VecDeque`
/// headers), with room to spare.
pub const SERIES_OVERHEAD_BYTES: usize = 128;
const _: () = assert!(size_of::<(SeriesKey, RingSeries)>() <= SERIES_OVERHEAD_BYTES);
/// The longest series name: a partition's, with every id at `u32::MAX`.
pub const SERIES_NAME_BYTES_MAX: usize =
    "partition.4294967295.4294967295.4294967295.messages_in".len();

/// One series of the ten-second point being built.
#[derive(Debug, Clone, Copy)]
struct Folded {
    aggregate: Aggregate,
    running: f64,
    samples: u32,
}

impl Folded {
    fn new(value: &Value) -> Folded {
        Folded {
            aggregate: value.aggregate,
            running: f64::from(value.value),
            samples: 1,
        }
    }

    fn add(&mut self, value: &Value) {
        let sample = f64::from(value.value);
        self.samples += 1;
        match self.aggregate {
            Aggregate::Mean => self.running += sample,
            Aggregate::Max => self.running = self.running.max(sample),
            Aggregate::Last => self.running = sample,
        }
    }

    fn value(&self) -> f32 {
        match self.aggregate {
            Aggregate::Mean => (self.running / f64::from(self.samples.max(1))) as f32,
            Aggregate::Max | Aggregate::Last => self.running as f32,
        }
    }
}

/// The ten-second point being built from one-second samples: the union of
/// their series, sorted by key, at most `HISTORY_SERIES_MAX` (key order is
/// also priority order: process, shards, groups, partitions).
#[derive(Debug, Default)]
struct Bucket {
    index: u64,
    at_ms: u64,
    values: Vec<(SeriesKey, Folded)>,
}

impl Bucket {
    /// Fold one second's `values` (sorted by key, no duplicates) in.
    fn fold(&mut self, values: &[Value]) {
        let same_series = self.values.len() == values.len()
            && self
                .values
                .iter()
                .zip(values)
                .all(|((kept, _), value)| *kept == value.key);
        if same_series {
            for ((_, folded), value) in self.values.iter_mut().zip(values) {
                folded.add(value);
            }
            return;
        }
        let mut kept = std::mem::take(&mut self.values).into_iter().peekable();
        let mut offered = values.iter().peekable();
        let mut merged = Vec::with_capacity(kept.len().max(values.len()));
        loop {
            match (kept.peek(), offered.peek()) {
                (Some((key, _)), Some(value)) if *key < value.key => merged.extend(kept.next()),
                (Some((key, _)), Some(value)) if *key == value.key => {
                    if let Some((key, mut folded)) = kept.next() {
                        folded.add(value);
                        merged.push((key, folded));
                    }
                    offered.next();
                }
                (_, Some(value)) => {
                    if merged.len() + kept.len() < HISTORY_SERIES_MAX {
                        merged.push((value.key, Folded::new(value)));
                    }
                    offered.next();
                }
                (Some(_), None) => merged.extend(kept.next()),
                (None, None) => break,
            }
        }
        self.values = merged;
    }
}

/// Both rings.
#[derive(Debug)]
pub struct Rings {
    second: Ring,
    ten_second: Ring,
    bucket: Option<Bucket>,
    /// The second's values by key, kept between calls (no allocation per
    /// second once it has grown).
    sorted: Vec<Value>,
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
            sorted: Vec::new(),
        }
    }

    /// Record one second's values at `at_ms` (Unix ms, increasing). Values
    /// past `HISTORY_SERIES_MAX` are dropped (callers order them by
    /// priority); of two values with one key the first counts. Each
    /// completed ten-second bucket becomes a point of the ten-second ring.
    pub fn record(&mut self, at_ms: u64, values: &[Value]) {
        if self.second.times.back().is_some_and(|last| at_ms <= *last) {
            return;
        }
        let values = &values[..values.len().min(HISTORY_SERIES_MAX)];
        self.sorted.clear();
        self.sorted.extend_from_slice(values);
        // Stable, so `dedup` keeps the first (higher-priority) value.
        self.sorted.sort_by_key(|value| value.key);
        self.sorted.dedup_by(|later, kept| later.key == kept.key);
        self.second.push(at_ms, &self.sorted);
        let index = at_ms / TEN_SECOND_STEP_MS;
        if self
            .bucket
            .as_ref()
            .is_some_and(|bucket| bucket.index != index)
            && let Some(done) = self.bucket.take()
        {
            let point: Vec<Value> = done
                .values
                .iter()
                .map(|(key, folded)| Value {
                    key: *key,
                    aggregate: folded.aggregate,
                    value: folded.value(),
                })
                .collect();
            self.ten_second.push(done.at_ms, &point);
        }
        let bucket = self.bucket.get_or_insert_with(|| Bucket {
            index,
            ..Bucket::default()
        });
        bucket.at_ms = at_ms;
        bucket.fold(&self.sorted);
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
        self.second.memory_bytes()
            + self.ten_second.memory_bytes()
            + self.sorted.capacity() * size_of::<Value>()
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
    /// Per shard: thread id and CPU ns at `at`.
    cpu: Vec<(Option<i32>, u64)>,
    /// The topics' figures at `at` (next offsets, for append rates), and
    /// the buffer the next second's figures go into.
    topics: daemon_source::TopicFigures,
    spare_topics: daemon_source::TopicFigures,
    /// Kept between seconds.
    values: Vec<Value>,
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
        let mut previous = self.previous.lock().unwrap_or_else(PoisonError::into_inner);
        sample(source, &mut previous);
        let at_ms = daemon_source::unix_ms();
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(at_ms, &previous.values);
    }
}

/// One second's values into `previous.values`, in priority order: process,
/// shards, groups, partitions. Rates need a previous sample, so the first
/// call records levels only.
fn sample(source: &DaemonSource, previous: &mut Previous) {
    let now = Instant::now();
    let parts = source.parts();
    let heartbeats = &parts.heartbeats;
    let shards = parts.shards.len();
    let elapsed = previous
        .at
        .map(|at| now.saturating_duration_since(at).as_secs_f64())
        .filter(|seconds| *seconds > 0.0);
    let mut topics = std::mem::take(&mut previous.spare_topics);
    source.topic_figures(&mut topics);
    let mut values = std::mem::take(&mut previous.values);
    values.clear();
    values.reserve(
        (16 + shards * 11 + topics.groups.len() + topics.partitions.len() * 2)
            .min(HISTORY_SERIES_MAX),
    );
    // Values past the cap would be dropped by `Rings::record` anyway.
    let mut push = |key: SeriesKey, aggregate: Aggregate, value: f64| {
        if values.len() >= HISTORY_SERIES_MAX {
            return;
        }
        values.push(Value {
            key,
            aggregate,
            value: value as f32,
        });
    };
    if let Ok(disk) = sysinfo::disk_usage(&parts.data_dir) {
        push(
            SeriesKey::Process(name::DISK_USED),
            Aggregate::Last,
            disk.used_bytes as f64,
        );
    }
    let total = heartbeats.total();
    push(
        SeriesKey::Process(name::PROCESS_CONNECTIONS),
        Aggregate::Last,
        total.connections as f64,
    );
    if let Some(admission) = &parts.security {
        push(
            SeriesKey::Process(name::CONNECTIONS_REFUSED),
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
        let cpu_ns = previous.cpu[shard]
            .0
            .and_then(|tid| sysinfo::thread_cpu_time_ns(tid).ok())
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
                push(
                    SeriesKey::Shard(id, metric),
                    Aggregate::Mean,
                    rate(now, then),
                );
            }
            let busy = cpu_ns.saturating_sub(previous.cpu[shard].1) as f64 / (seconds * 1e7);
            push(
                SeriesKey::Shard(id, name::BUSY_PERCENT),
                Aggregate::Mean,
                busy.min(100.0),
            );
        }
        previous.counters[shard] = counters;
        previous.cpu[shard].1 = cpu_ns;
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
            push(SeriesKey::Shard(id, metric), aggregate, value as f64);
        }
    }
    for group in &topics.groups {
        push(
            SeriesKey::Group(group.stream, group.topic, group.group),
            Aggregate::Last,
            group.lag as f64,
        );
    }
    let before = &previous.topics.partitions;
    for (index, partition) in topics.partitions.iter().enumerate() {
        let (stream, topic, partition_id) =
            (partition.stream, partition.topic, partition.partition);
        push(
            SeriesKey::Partition(stream, topic, partition_id, name::BYTES),
            Aggregate::Last,
            partition.bytes as f64,
        );
        // The same partition a second ago: at the same place unless
        // partitions came or went.
        let same = |other: &&daemon_source::PartitionFigure| {
            (other.stream, other.topic, other.partition) == (stream, topic, partition_id)
        };
        let then = before
            .get(index)
            .filter(same)
            .or_else(|| before.iter().find(same));
        if let (Some(seconds), Some(then)) = (elapsed, then) {
            push(
                SeriesKey::Partition(stream, topic, partition_id, name::MESSAGES_IN),
                Aggregate::Mean,
                partition.next_offset.saturating_sub(then.next_offset) as f64 / seconds,
            );
        }
    }
    previous.at = Some(now);
    previous.values = values;
    previous.spare_topics = std::mem::replace(&mut previous.topics, topics);
}

/// The bound `limits::HISTORY_BYTES_MAX` must cover: every series at full
/// length in both rings, with the longest name.
pub const fn memory_bound_bytes() -> usize {
    let points = SECOND_POINTS + TEN_SECOND_POINTS;
    points * size_of::<u64>()
        + 2 * HISTORY_SERIES_MAX * (SERIES_NAME_BYTES_MAX + SERIES_OVERHEAD_BYTES)
        + HISTORY_SERIES_MAX * points * size_of::<f32>()
        + HISTORY_SERIES_MAX * size_of::<Value>()
}

const _: () = assert!(memory_bound_bytes() <= HISTORY_BYTES_MAX);

#[cfg(test)]
mod tests;
