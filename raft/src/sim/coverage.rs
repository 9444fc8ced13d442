//! What one seed's run of the cluster simulation covered (`cluster.rs`
//! counts it), summed over seeds, so the tests can insist that a run of
//! many seeds did each thing it is meant to.

use super::network::NetStats;

/// What a seed's run did, so a test can insist it did something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    pub nodes: u64,
    /// Runs of five nodes (the others have three).
    pub five_node_runs: u64,
    /// Runs on the pump-like backend (the others on the shared log).
    pub backend_runs: u64,
    pub steps: u64,
    pub crashes: u64,
    /// Crashes while the node's disk held an fsync (a write in flight).
    pub crashes_mid_sync: u64,
    /// Slow commit phases (flushes held back on the pump-like backend).
    pub late_flushes: u64,
    /// Crashes while the node's flushes were held back.
    pub crashes_mid_flush: u64,
    /// Fatal storage errors from an injected fsync failure.
    pub disk_failures: u64,
    /// Restarts whose recovery cut a torn or unsynced tail.
    pub torn_tails: u64,
    /// Files a crash left with a torn write.
    pub torn_files: u64,
    pub partitions: u64,
    pub fault_bursts: u64,
    pub membership_changes: u64,
    pub terms_led: u64,
    pub entries_replaced: u64,
    pub committed_entries: u64,
    pub acknowledged: u64,
    pub rejected: u64,
    pub unknown: u64,
    pub messages: u64,
    /// Offsets entries written into a replica's store, and those skipped
    /// as already held (a restart applying its log again).
    pub offsets_entries: u64,
    pub offsets_skipped: u64,
    /// Runs with retention on (pump-like backend only).
    pub retention_runs: u64,
    /// Segments retention deleted, snapshots it asked for, and snapshots
    /// installed from a leader.
    pub segments_deleted: u64,
    pub snapshots_asked: u64,
    pub snapshots_installed: u64,
    /// Purges proposed (whole or of the messages below an offset) and
    /// those acknowledged.
    pub purges_proposed: u64,
    pub purges_acknowledged: u64,
    pub net: NetStats,
}

impl std::ops::AddAssign for Coverage {
    fn add_assign(&mut self, other: Coverage) {
        self.nodes += other.nodes;
        self.five_node_runs += other.five_node_runs;
        self.backend_runs += other.backend_runs;
        self.steps += other.steps;
        self.crashes += other.crashes;
        self.crashes_mid_sync += other.crashes_mid_sync;
        self.late_flushes += other.late_flushes;
        self.crashes_mid_flush += other.crashes_mid_flush;
        self.disk_failures += other.disk_failures;
        self.torn_tails += other.torn_tails;
        self.torn_files += other.torn_files;
        self.partitions += other.partitions;
        self.fault_bursts += other.fault_bursts;
        self.membership_changes += other.membership_changes;
        self.terms_led += other.terms_led;
        self.entries_replaced += other.entries_replaced;
        self.committed_entries += other.committed_entries;
        self.acknowledged += other.acknowledged;
        self.rejected += other.rejected;
        self.unknown += other.unknown;
        self.messages += other.messages;
        self.offsets_entries += other.offsets_entries;
        self.offsets_skipped += other.offsets_skipped;
        self.retention_runs += other.retention_runs;
        self.segments_deleted += other.segments_deleted;
        self.snapshots_asked += other.snapshots_asked;
        self.snapshots_installed += other.snapshots_installed;
        self.purges_proposed += other.purges_proposed;
        self.purges_acknowledged += other.purges_acknowledged;
        self.net.sent += other.net.sent;
        self.net.delivered += other.net.delivered;
        self.net.lost += other.net.lost;
        self.net.duplicated += other.net.duplicated;
        self.net.unreachable += other.net.unreachable;
        self.net.refused += other.net.refused;
    }
}
