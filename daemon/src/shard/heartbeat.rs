//! Per-shard progress counters and published gauges: the one piece of state
//! shared across shards. Each shard writes only its own slot (single writer,
//! relaxed atomics); the supervisor, `STATUS=` and the admin socket read
//! them without ever asking a shard, so observing the daemon never stalls
//! it.
//!
//! The heartbeat counter moves only while the shard's loop processes a
//! heartbeat message from its own inbox, so a counter that stops moving means
//! that shard's pump is wedged (not merely its timer). The other gauges are
//! monotone counters (messages, bytes, fsyncs) or levels (connections,
//! partitions) the shard publishes after each commit round. Once a second a
//! shard also publishes a `ShardReport` (its partitions' numbers, latency
//! percentiles of the last window and cumulative latency histograms with
//! fixed buckets) by swapping an `Arc` behind a mutex held for a pointer
//! copy, and shard 0 publishes the current metadata view the same way.
//! Shards never read each other's slots; only observers (supervisor, admin
//! socket, the metrics endpoint) do, so a scrape costs a shard nothing
//! beyond this once-a-second publish.

use crate::shard::op::PartitionReport;
use iggyd_metadata::MetadataView;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Upper bounds (µs, inclusive) of the latency histograms' buckets, from
/// 10 µs to 10 s; a last, unbounded bucket follows. Prometheus reads them
/// as the `le` bounds of `_bucket` series.
pub const LATENCY_BUCKET_BOUNDS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets of [`LATENCY_BUCKET_BOUNDS_US`] plus the unbounded one.
pub const LATENCY_BUCKETS: usize = LATENCY_BUCKET_BOUNDS_US.len() + 1;

/// Latencies counted into the fixed buckets: per bucket (not cumulative),
/// the total count and the sum in µs. Values come from a shard's
/// hdrhistogram (2 significant digits), so a value near a bound may land in
/// the neighbouring bucket and the sum is exact to about 1 %.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyBuckets {
    pub counts: [u64; LATENCY_BUCKETS],
    pub count: u64,
    pub sum_us: u64,
}

impl LatencyBuckets {
    /// Counts every value recorded in `histogram` (one pass over its
    /// recorded buckets: done once a second per histogram, off the
    /// per-request path).
    pub fn of(histogram: &hdrhistogram::Histogram<u64>) -> LatencyBuckets {
        let mut buckets = LatencyBuckets::default();
        for step in histogram.iter_recorded() {
            let value = histogram.median_equivalent(step.value_iterated_to());
            let count = step.count_at_value();
            let index = LATENCY_BUCKET_BOUNDS_US.partition_point(|bound| *bound < value);
            buckets.counts[index] += count;
            buckets.count += count;
            buckets.sum_us = buckets.sum_us.saturating_add(value.saturating_mul(count));
        }
        buckets
    }

    /// Adds another window's counts.
    pub fn add(&mut self, other: &LatencyBuckets) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }

    /// `(upper bound in µs, values at or below it)` for every bounded bucket,
    /// in order; the unbounded bucket's cumulative count is `self.count`.
    pub fn cumulative(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        LATENCY_BUCKET_BOUNDS_US
            .iter()
            .zip(self.counts)
            .scan(0u64, |total, (bound, count)| {
                *total += count;
                Some((*bound, *total))
            })
    }
}

/// Latency percentiles in µs over one publish window, and the window's
/// values in the fixed buckets (which the shard adds to its cumulative
/// histograms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub window: LatencyBuckets,
}

impl Latency {
    pub fn of(histogram: &hdrhistogram::Histogram<u64>) -> Latency {
        if histogram.is_empty() {
            return Latency::default();
        }
        Latency {
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            window: LatencyBuckets::of(histogram),
        }
    }
}

/// A shard's latency histograms since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyHistograms {
    pub request: LatencyBuckets,
    pub queue_wait: LatencyBuckets,
    pub fsync: LatencyBuckets,
}

/// What a shard publishes about once a second besides its counters.
#[derive(Debug, Clone, Default)]
pub struct ShardReport {
    pub partitions: Vec<PartitionReport>,
    /// Consumer offsets refused since start (partition full).
    pub consumer_offsets_refused: u64,
    /// Deleted data pending removal on this shard.
    pub trash: iggyd_storage::trash::TrashStats,
    /// The shard's pool of I/O buffers (write tails, read windows).
    pub io_buffers: iggyd_storage::PoolStats,
    /// Request latency on this shard's connections (frame read -> reply written).
    pub request: Latency,
    /// Time partition ops waited in this shard's inbox.
    pub queue_wait: Latency,
    pub fsync: Latency,
    /// Cumulative since the shard started (the windows above, added up).
    pub histograms: LatencyHistograms,
    pub published_at: Option<Instant>,
    /// Every client connection of this shard (the console's Clients view).
    pub clients: Vec<crate::shard::front::ClientReport>,
    /// A cluster node's replication counters (zero on a single node).
    pub cluster: ClusterCounters,
}

/// A cluster node's counters of one shard, cumulative since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterCounters {
    pub replication: crate::shard::replica::ReplicationCounters,
    /// Requests this shard's connections answered 58 (not accepted: no
    /// leader here, the client should look for it).
    pub not_accepted: u64,
    /// Requests answered 57 (not committed: an election is on, or the
    /// outcome is in doubt; the client resends).
    pub not_committed: u64,
}

/// A copy of one shard's published gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardCounters {
    pub messages_in: u64,
    pub messages_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub fsyncs: u64,
    pub connections: u64,
    pub partitions: u64,
    /// Sends accepted here for partitions this shard owns.
    pub sends_local: u64,
    /// Sends accepted here and handed to another shard.
    pub sends_forwarded: u64,
}

#[derive(Debug, Default)]
struct Slot {
    heartbeat: AtomicU64,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    fsyncs: AtomicU64,
    connections: AtomicU64,
    partitions: AtomicU64,
    sends_local: AtomicU64,
    sends_forwarded: AtomicU64,
    report: Mutex<Arc<ShardReport>>,
}

#[derive(Debug, Clone)]
pub struct Heartbeats {
    slots: Arc<[Slot]>,
    view: Arc<Mutex<Option<Arc<MetadataView>>>>,
    /// The supervisor's watchdog: interval in ms (0 = disabled) and the
    /// first wedged shard (`u64::MAX` = none).
    watchdog_interval_ms: Arc<AtomicU64>,
    watchdog_stalled: Arc<AtomicU64>,
}

impl Heartbeats {
    pub fn new(shards: usize) -> Heartbeats {
        assert!(shards > 0);
        Heartbeats {
            slots: (0..shards).map(|_| Slot::default()).collect(),
            view: Arc::new(Mutex::new(None)),
            watchdog_interval_ms: Arc::new(AtomicU64::new(0)),
            watchdog_stalled: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// Called by shard `shard`'s loop, and only by it.
    pub fn bump(&self, shard: usize) {
        self.slots[shard].heartbeat.fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self, shard: usize) -> u64 {
        self.slots[shard].heartbeat.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Vec<u64> {
        self.slots
            .iter()
            .map(|slot| slot.heartbeat.load(Ordering::Relaxed))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Called by shard `shard` only: publish its gauges.
    pub fn publish(&self, shard: usize, counters: &ShardCounters) {
        let slot = &self.slots[shard];
        slot.messages_in
            .store(counters.messages_in, Ordering::Relaxed);
        slot.messages_out
            .store(counters.messages_out, Ordering::Relaxed);
        slot.bytes_in.store(counters.bytes_in, Ordering::Relaxed);
        slot.bytes_out.store(counters.bytes_out, Ordering::Relaxed);
        slot.fsyncs.store(counters.fsyncs, Ordering::Relaxed);
        slot.connections
            .store(counters.connections, Ordering::Relaxed);
        slot.partitions
            .store(counters.partitions, Ordering::Relaxed);
        slot.sends_local
            .store(counters.sends_local, Ordering::Relaxed);
        slot.sends_forwarded
            .store(counters.sends_forwarded, Ordering::Relaxed);
    }

    pub fn counters(&self, shard: usize) -> ShardCounters {
        let slot = &self.slots[shard];
        ShardCounters {
            messages_in: slot.messages_in.load(Ordering::Relaxed),
            messages_out: slot.messages_out.load(Ordering::Relaxed),
            bytes_in: slot.bytes_in.load(Ordering::Relaxed),
            bytes_out: slot.bytes_out.load(Ordering::Relaxed),
            fsyncs: slot.fsyncs.load(Ordering::Relaxed),
            connections: slot.connections.load(Ordering::Relaxed),
            partitions: slot.partitions.load(Ordering::Relaxed),
            sends_local: slot.sends_local.load(Ordering::Relaxed),
            sends_forwarded: slot.sends_forwarded.load(Ordering::Relaxed),
        }
    }

    /// Called by shard `shard` only: swap in its latest report.
    pub fn publish_report(&self, shard: usize, report: ShardReport) {
        let mut slot = self.slots[shard]
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *slot = Arc::new(report);
    }

    pub fn report(&self, shard: usize) -> Arc<ShardReport> {
        self.slots[shard]
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Called by the metadata writer (shard 0) and at start.
    pub fn publish_view(&self, view: Arc<MetadataView>) {
        let mut slot = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        if slot
            .as_ref()
            .is_none_or(|current| current.is_superseded_by(&view))
        {
            *slot = Some(view);
        }
    }

    pub fn view(&self) -> Option<Arc<MetadataView>> {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Written by the supervisor's watchdog only.
    pub fn publish_watchdog(&self, interval_ms: u64, stalled: Option<usize>) {
        self.watchdog_interval_ms
            .store(interval_ms, Ordering::Relaxed);
        self.watchdog_stalled.store(
            stalled.map_or(u64::MAX, |shard| shard as u64),
            Ordering::Relaxed,
        );
    }

    /// `(interval_ms, stalled shard)`; interval 0 = the watchdog is off.
    pub fn watchdog(&self) -> (u64, Option<usize>) {
        let stalled = self.watchdog_stalled.load(Ordering::Relaxed);
        (
            self.watchdog_interval_ms.load(Ordering::Relaxed),
            (stalled != u64::MAX).then_some(stalled as usize),
        )
    }

    /// Sum of every shard's gauges.
    pub fn total(&self) -> ShardCounters {
        (0..self.len()).map(|shard| self.counters(shard)).fold(
            ShardCounters::default(),
            |sum, c| ShardCounters {
                messages_in: sum.messages_in + c.messages_in,
                messages_out: sum.messages_out + c.messages_out,
                bytes_in: sum.bytes_in + c.bytes_in,
                bytes_out: sum.bytes_out + c.bytes_out,
                fsyncs: sum.fsyncs + c.fsyncs,
                connections: sum.connections + c.connections,
                partitions: sum.partitions + c.partitions,
                sends_local: sum.sends_local + c.sends_local,
                sends_forwarded: sum.sends_forwarded + c.sends_forwarded,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shard_moves_only_its_own_counter() {
        let heartbeats = Heartbeats::new(3);
        heartbeats.bump(1);
        heartbeats.bump(1);
        assert_eq!(heartbeats.snapshot(), vec![0, 2, 0]);
        assert_eq!(heartbeats.read(1), 2);
    }

    /// Proves values land in the bucket whose bound is the first at or above
    /// them, the unbounded bucket takes the rest, and windows add up into
    /// cumulative counts.
    #[test]
    fn latency_buckets_count_and_accumulate() {
        let mut histogram =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).unwrap();
        for value in [5, 10, 11, 400, 20_000_000] {
            histogram.record(value).unwrap();
        }
        let window = Latency::of(&histogram).window;
        assert_eq!(window.count, 5);
        assert_eq!(window.counts[0], 2, "5 and 10 are at or below 10 µs");
        assert_eq!(window.counts[1], 1, "11 is in (10, 25]");
        assert_eq!(window.counts[5], 1, "400 is in (250, 500]");
        assert_eq!(window.counts[LATENCY_BUCKETS - 1], 1, "20 s is past 10 s");
        let sum = window.sum_us as f64;
        assert!((sum - 20_000_426.0).abs() / 20_000_426.0 < 0.01, "{sum}");
        let mut total = LatencyBuckets::default();
        total.add(&window);
        total.add(&window);
        let cumulative: Vec<(u64, u64)> = total.cumulative().collect();
        assert_eq!(cumulative.len(), LATENCY_BUCKET_BOUNDS_US.len());
        assert_eq!(cumulative[0], (10, 4));
        assert_eq!(cumulative[1], (25, 6));
        assert_eq!(*cumulative.last().unwrap(), (10_000_000, 8));
        assert_eq!(total.count, 10);
        assert_eq!(
            Latency::of(&hdrhistogram::Histogram::new(2).unwrap())
                .window
                .count,
            0
        );
    }

    #[test]
    fn published_gauges_read_back_and_sum() {
        let heartbeats = Heartbeats::new(2);
        let one = ShardCounters {
            messages_in: 5,
            connections: 2,
            ..ShardCounters::default()
        };
        heartbeats.publish(0, &one);
        heartbeats.publish(1, &one);
        assert_eq!(heartbeats.counters(1), one);
        assert_eq!(heartbeats.total().messages_in, 10);
        assert_eq!(heartbeats.total().connections, 4);
    }
}
