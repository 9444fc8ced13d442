//! What the seeded pump simulation covered, summed over seeds: the
//! simulation's final test asserts that every kind of event happened.

/// What the runs covered, summed over seeds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Coverage {
    pub(super) rounds: u64,
    pub(super) appends_acked: u64,
    pub(super) appends_refused_no_space: u64,
    pub(super) polls: u64,
    pub(super) polls_auto_commit: u64,
    /// Polls that met a disk read in flight and were parked, then resumed.
    pub(super) polls_parked: u64,
    /// Polls whose byte cap ended the answer early.
    pub(super) polls_capped: u64,
    /// Answers held back while the pump went on, then found unchanged.
    pub(super) replies_held: u64,
    pub(super) offset_ops: u64,
    pub(super) flushes: u64,
    pub(super) flush_ticks: u64,
    pub(super) retention_ticks: u64,
    pub(super) segments_expired: u64,
    pub(super) segments_deleted: u64,
    pub(super) purges: u64,
    pub(super) reports: u64,
    pub(super) rotations: u64,
    pub(super) restarts: u64,
    pub(super) power_losses: u64,
    pub(super) torn_files: u64,
    pub(super) tail_lost_on_power_loss: u64,
    pub(super) failed_fsyncs: u64,
    pub(super) failed_background_syncs: u64,
    pub(super) background_syncs: u64,
    pub(super) crashes_with_background_sync_in_flight: u64,
    pub(super) offset_stores_refused_no_space: u64,
    pub(super) recreated: u64,
    pub(super) recreated_open_first: u64,
    pub(super) removed_in_place: u64,
    pub(super) purges_refused: u64,
    pub(super) deletes_refused: u64,
    pub(super) trash_removals: u64,
    pub(super) trash_removals_failed: u64,
    pub(super) orphans_at_restart: u64,
}

impl Coverage {
    pub(super) fn add(&mut self, other: &Coverage) {
        self.rounds += other.rounds;
        self.appends_acked += other.appends_acked;
        self.appends_refused_no_space += other.appends_refused_no_space;
        self.polls += other.polls;
        self.polls_auto_commit += other.polls_auto_commit;
        self.polls_parked += other.polls_parked;
        self.polls_capped += other.polls_capped;
        self.replies_held += other.replies_held;
        self.offset_ops += other.offset_ops;
        self.flushes += other.flushes;
        self.flush_ticks += other.flush_ticks;
        self.retention_ticks += other.retention_ticks;
        self.segments_expired += other.segments_expired;
        self.segments_deleted += other.segments_deleted;
        self.purges += other.purges;
        self.reports += other.reports;
        self.rotations += other.rotations;
        self.restarts += other.restarts;
        self.power_losses += other.power_losses;
        self.torn_files += other.torn_files;
        self.tail_lost_on_power_loss += other.tail_lost_on_power_loss;
        self.failed_fsyncs += other.failed_fsyncs;
        self.failed_background_syncs += other.failed_background_syncs;
        self.background_syncs += other.background_syncs;
        self.crashes_with_background_sync_in_flight += other.crashes_with_background_sync_in_flight;
        self.offset_stores_refused_no_space += other.offset_stores_refused_no_space;
        self.recreated += other.recreated;
        self.recreated_open_first += other.recreated_open_first;
        self.removed_in_place += other.removed_in_place;
        self.purges_refused += other.purges_refused;
        self.deletes_refused += other.deletes_refused;
        self.trash_removals += other.trash_removals;
        self.trash_removals_failed += other.trash_removals_failed;
        self.orphans_at_restart += other.orphans_at_restart;
    }
}
