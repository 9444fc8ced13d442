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
//! partitions) the shard publishes after each commit round.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

#[derive(Debug, Clone)]
pub struct Heartbeats {
    slots: Arc<[Slot]>,
}

impl Heartbeats {
    pub fn new(shards: usize) -> Heartbeats {
        assert!(shards > 0);
        Heartbeats {
            slots: (0..shards).map(|_| Slot::default()).collect(),
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
        }
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
