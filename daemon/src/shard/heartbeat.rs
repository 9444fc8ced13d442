//! Per-shard progress counters: the one piece of state shared across shards.
//! Each shard's pump bumps only its own counter, and only while processing a
//! heartbeat message from its own inbox, so a counter that stops moving means
//! that shard's pump is wedged (not merely its timer). The supervisor reads
//! the counters to decide whether the service is alive.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone)]
pub struct Heartbeats {
    counters: Arc<[AtomicU64]>,
}

impl Heartbeats {
    pub fn new(shards: usize) -> Heartbeats {
        assert!(shards > 0);
        Heartbeats {
            counters: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Called by shard `shard`'s pump, and only by it.
    pub fn bump(&self, shard: usize) {
        self.counters[shard].fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self, shard: usize) -> u64 {
        self.counters[shard].load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|counter| counter.load(Ordering::Relaxed))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.counters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
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
}
