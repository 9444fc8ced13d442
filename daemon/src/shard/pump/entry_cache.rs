//! The entries a shard's replicated partitions appended last, in memory,
//! for the reads that follow an append: a leader's replication to each
//! follower and every replica's apply read the entries openraft just
//! appended. Served from the files, each of those reads forced the
//! partition's pending data out in a write of its own (splitting the
//! commit phase's coalesced write), then read every batch back and copied
//! it; served from here they cost one copy of the bytes.
//!
//! Each partition's run is contiguous and ends at the last entry appended:
//! an append that does not follow the run starts a new one, a truncation
//! cuts the run's tail and a purge its head, so whatever the run holds is
//! what the files would answer. The runs of all partitions share one
//! budget (bytes and entries), and the oldest entries of the shard go
//! first; an entry the run no longer holds is read from the files.
//!
//! Must not: hold an entry the files do not (or hold it with other
//! bytes), or grow past its budget.

use super::PartitionKey;
use crate::shard::replica::{LogPosition, StoredBody, StoredEntry};
use std::collections::{HashMap, VecDeque};

/// What a cached entry counts against the budget beyond its payload.
const ENTRY_OVERHEAD_BYTES: usize = 64;

pub(super) struct EntryCache {
    bytes_max: usize,
    entries_max: usize,
    bytes: usize,
    runs: HashMap<PartitionKey, VecDeque<StoredEntry>>,
    /// Every entry inserted, oldest first, as `(partition, index)`; one
    /// whose run dropped it already is skipped when it comes up.
    order: VecDeque<(PartitionKey, u64)>,
}

fn cost(entry: &StoredEntry) -> usize {
    ENTRY_OVERHEAD_BYTES
        + match &entry.body {
            StoredBody::Data(bytes) => bytes.len(),
            StoredBody::Membership(bytes) | StoredBody::Offsets(bytes) => bytes.len(),
            StoredBody::Blank | StoredBody::Purge(_) => 0,
        }
}

impl EntryCache {
    pub(super) fn new(bytes_max: usize, entries_max: usize) -> EntryCache {
        EntryCache {
            bytes_max,
            entries_max,
            bytes: 0,
            runs: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Bytes held (payloads and the per-entry overhead).
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// `entry` was appended to `key`'s log just now (with the bytes the
    /// files keep for it).
    pub(super) fn insert(&mut self, key: PartitionKey, entry: StoredEntry) {
        let entry_cost = cost(&entry);
        if entry_cost > self.bytes_max {
            self.remove(key);
            return;
        }
        let run = self.runs.entry(key).or_default();
        if run.back().is_some_and(|last| last.index + 1 != entry.index) {
            let dropped: usize = run.drain(..).map(|entry| cost(&entry)).sum();
            self.bytes -= dropped;
        }
        self.order.push_back((key, entry.index));
        run.push_back(entry);
        self.bytes += entry_cost;
        self.evict();
    }

    /// The entries from `first` on, before `end`, while the run holds
    /// them and until `bytes_max` of data is reached (the entry that
    /// reaches it included), as the files would answer; `None` when the
    /// run does not hold `first`. `last` is the files' last entry: a run
    /// that does not end there is dropped (a change this cache was not
    /// told of), and the files answer.
    pub(super) fn read(
        &mut self,
        key: PartitionKey,
        last: Option<LogPosition>,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> Option<Vec<StoredEntry>> {
        let back = self
            .runs
            .get(&key)?
            .back()
            .map(|entry| (entry.index, entry.term));
        if back.is_some() && back != last {
            self.remove(key);
            return None;
        }
        let run = self.runs.get(&key)?;
        let front = run.front()?.index;
        if first < front || first >= end {
            return None;
        }
        let skip = usize::try_from(first - front).ok()?;
        if skip > run.len() {
            return None;
        }
        // (`skip == run.len()`: the log ends right before `first`.)
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for entry in run.iter().skip(skip) {
            if entry.index >= end {
                break;
            }
            if let StoredBody::Data(data) = &entry.body {
                bytes += data.len() as u64;
            }
            entries.push(entry.clone());
            if bytes >= bytes_max {
                break;
            }
        }
        Some(entries)
    }

    /// Entries after `keep` are gone from `key`'s log (all for `None`).
    pub(super) fn truncate_after(&mut self, key: PartitionKey, keep: Option<u64>) {
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        while let Some(last) = run.back() {
            if keep.is_some_and(|keep| last.index <= keep) {
                break;
            }
            if let Some(entry) = run.pop_back() {
                self.bytes -= cost(&entry);
            }
        }
    }

    /// Entries through `through` are purged from `key`'s log.
    pub(super) fn purge_through(&mut self, key: PartitionKey, through: u64) {
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        while run.front().is_some_and(|first| first.index <= through) {
            if let Some(entry) = run.pop_front() {
                self.bytes -= cost(&entry);
            }
        }
    }

    /// `key`'s log is gone or was reset: none of its entries stay.
    pub(super) fn remove(&mut self, key: PartitionKey) {
        if let Some(run) = self.runs.remove(&key) {
            let dropped: usize = run.iter().map(cost).sum();
            self.bytes -= dropped;
        }
    }

    /// Drops the shard's oldest entries until the budget holds.
    fn evict(&mut self) {
        while self.bytes > self.bytes_max || self.order.len() > self.entries_max {
            let Some((key, index)) = self.order.pop_front() else {
                break;
            };
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            if run.front().is_some_and(|first| first.index == index) {
                if let Some(entry) = run.pop_front() {
                    self.bytes -= cost(&entry);
                }
                if run.is_empty() {
                    self.runs.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "entry_cache_tests.rs"]
mod tests;
