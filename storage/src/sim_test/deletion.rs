//! The storage simulation's deletion steps (see `sim_test.rs`): segment
//! deletion and purge through the trash (sometimes refused by an
//! undeletable segment or directory), the janitor with failing removals, a
//! failed fsync inside a deletion, start-up reconciliation after every
//! crash, and the final emptying of the trash with the check that nothing
//! but the live partitions' files is left on the disk.

use std::path::{Path, PathBuf};

use super::{DATA_DIR, Model, PARTITIONS, Sim};
use crate::StorageError;
use crate::partition_log::Clock;
use crate::partition_log::PartitionState;
use crate::segment::log_path;
use crate::sim::block_on;
use crate::trash::Trash;

impl Sim {
    /// Deletes 1..3 of the oldest segments through the trash. Now and then
    /// one of them cannot be moved (an undeletable file): the deletion
    /// stops before it, refusing when nothing could go, and the partition
    /// stays usable.
    pub(super) fn delete_oldest(&mut self, partition: usize) -> Result<(), StorageError> {
        let count = self.rng.range(1, 3) as usize;
        let before = self.logs[partition].stats();
        let deletable = count.min(before.segments - 1);
        let stuck = (deletable > 0 && self.rng.chance(1, 5)).then(|| {
            let starts = self.io_segment_starts(&self.dirs[partition]);
            let at = self.rng.below(deletable as u64) as usize;
            log_path(&self.dirs[partition], starts[at])
        });
        if let Some(path) = &stuck {
            self.io.set_immutable(path, true);
        }
        let result = block_on(self.logs[partition].delete_oldest_segments(count, &mut self.trash));
        if let Some(path) = &stuck {
            self.io.set_immutable(path, false);
        }
        let after = self.logs[partition].stats();
        let deleted = match result {
            Ok(deleted) => deleted,
            Err(StorageError::Io { .. }) if stuck.is_some() => {
                assert_eq!(
                    after, before,
                    "seed {}: a refused delete changed nothing",
                    self.seed
                );
                self.faults.deletes_refused += 1;
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        if stuck.is_some() {
            assert!(deleted.segments < deletable, "seed {}", self.seed);
        } else {
            assert_eq!(deleted.segments, deletable, "seed {}", self.seed);
        }
        assert_eq!(deleted.segments, before.segments - after.segments);
        assert!(after.segments >= 1);
        assert_eq!(deleted.messages, after.first_offset - before.first_offset);
        self.models[partition].drop_before(after.first_offset);
        Ok(())
    }

    /// Purges through the trash; now and then the directory cannot be
    /// moved (undeletable): the purge is refused and changes nothing.
    pub(super) fn purge(&mut self, partition: usize) -> Result<(), StorageError> {
        let stuck = self.rng.chance(1, 5);
        let dir = self.dirs[partition].clone();
        if stuck {
            self.io.set_immutable(&dir, true);
        }
        let before = self.logs[partition].stats();
        let result = block_on(self.logs[partition].purge(&mut self.trash));
        if stuck {
            self.io.set_immutable(&dir, false);
        }
        match result {
            Ok(_) => {
                assert!(
                    !stuck,
                    "seed {}: an undeletable directory was purged",
                    self.seed
                );
                self.models[partition] = Model::default();
                assert_eq!(self.logs[partition].stats().segments, 1);
                Ok(())
            }
            Err(StorageError::Io { .. }) if stuck => {
                assert_eq!(self.logs[partition].state(), PartitionState::Open);
                assert_eq!(self.logs[partition].stats(), before);
                self.faults.purges_refused += 1;
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// The janitor removes a few files; removals fail now and then.
    pub(super) fn collect_trash(&mut self) {
        let failing = self.rng.chance(1, 3);
        if failing {
            self.io.set_unlink_failures(Some((1, 3)));
        }
        let failing_before = self.trash.stats().failing;
        block_on(
            self.trash
                .collect(self.clock.now_micros(), self.rng.range(1, 12)),
        );
        self.io.set_unlink_failures(None);
        self.faults.removals_failed += self.trash.stats().failing.saturating_sub(failing_before);
    }

    /// A failed fsync inside a purge or a segment deletion (after its
    /// renames): the partition is poisoned, still answers without
    /// panicking, and after a restart the deletion took effect whole.
    pub(super) fn fault_deletion_fsync(&mut self) {
        let partition = self.rng.below(PARTITIONS as u64) as usize;
        if self.logs[partition].state() != PartitionState::Open {
            return;
        }
        let purge = self.logs[partition].stats().segments < 2 || self.rng.chance(1, 2);
        // A purge fsyncs four directories (its old place and the trash,
        // then the fresh directory and its parent); a deletion two.
        self.io
            .fail_fsync_after(self.rng.below(if purge { 4 } else { 2 }));
        let error = if purge {
            block_on(self.logs[partition].purge(&mut self.trash)).unwrap_err()
        } else {
            let count = self.logs[partition].stats().segments - 1;
            block_on(self.logs[partition].delete_oldest_segments(count, &mut self.trash))
                .unwrap_err()
        };
        assert!(error.is_fatal(), "seed {}: {error}", self.seed);
        self.faults.deletions_poisoned += 1;
        // Poisoned, not broken: stats and reads still answer.
        let log = &self.logs[partition];
        assert!(log.stats().segments >= 1);
        let _ = block_on(log.read_first(10, u64::MAX));
        if purge {
            self.models[partition] = Model::default();
        } else {
            // Only the active segment is left on disk (the renames are
            // done); what it holds is written, its unsynced tail may go.
            let active_start = *self
                .io_segment_starts(&self.dirs[partition])
                .last()
                .unwrap();
            self.models[partition].drop_before(active_start);
        }
        self.crash();
    }

    /// Start-up: the data directory against the two listed partitions.
    /// Nothing is orphaned (deletes happen inside live partitions), and
    /// the trash's entries go to a new janitor.
    pub(super) fn reconcile(&mut self) {
        let listed = (0..PARTITIONS as u64)
            .map(|storage_id| (storage_id, (1, 1, storage_id as u32)))
            .collect();
        let reconciled = block_on(crate::layout::reconcile(
            &self.io,
            Path::new(DATA_DIR),
            &listed,
        ))
        .unwrap_or_else(|error| panic!("seed {}: reconcile failed: {error}", self.seed));
        assert!(reconciled.orphans.is_empty(), "seed {}", self.seed);
        assert!(reconciled.stuck.is_empty(), "seed {}", self.seed);
        self.trash = Trash::new(self.io.clone(), Path::new(DATA_DIR), reconciled.trash);
    }

    /// The janitor runs until the trash is empty: nothing is left on the
    /// disk but the live partitions' files.
    pub(super) fn empty_trash(&mut self) {
        self.io.set_unlink_failures(None);
        for _ in 0..10_000 {
            if self.trash.is_empty() {
                break;
            }
            self.clock.advance(60_000_000);
            block_on(self.trash.collect(self.clock.now_micros(), 64));
        }
        assert!(
            self.trash.is_empty(),
            "seed {}: {:?}",
            self.seed,
            self.trash.stats()
        );
        let live = |path: &PathBuf| self.dirs.iter().any(|dir| path.parent() == Some(dir));
        let left: Vec<PathBuf> = self
            .io
            .files_under(Path::new(DATA_DIR))
            .into_iter()
            .filter(|path| !live(path))
            .collect();
        assert!(left.is_empty(), "seed {}: left behind: {left:?}", self.seed);
        let trash = block_on(crate::io::StorageIo::list_dir(&self.io, self.trash.dir())).unwrap();
        assert!(trash.is_empty(), "seed {}: {trash:?}", self.seed);
    }
}
