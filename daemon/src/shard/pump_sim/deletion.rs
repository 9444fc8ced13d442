//! The pump simulation's deletion ops (see `mod.rs`): purge and segment
//! deletion (sometimes refused by an undeletable directory or segment), a
//! partition deleted and created again with the same wire ids (a new
//! storage id, either order, any shard, its old directory sometimes
//! undeletable), a crash right after such a delete and create were
//! journaled, and the janitors' ticks with failing removals. Each drives
//! the pump and the model the same way the rest of the workload does.

use super::model::PartitionModel;
use super::{DATA_DIR, Sim, channel, random_settings};
use crate::shard::partition::PartitionKey;
use crate::shard::pump::{PartitionOp, PumpError};
use iggyd_storage::StorageError;
use iggyd_storage::sim::block_on;
use iggyd_wire::batch::ValidBatch;
use std::path::Path;

impl Sim {
    /// Purge; now and then the partition's directory cannot be moved to
    /// the trash (undeletable): the purge is refused, nothing changes.
    pub(super) fn purge(&mut self, part: usize) {
        self.trace(|| format!("purge {part}"));
        let stuck = self.rng.chance(1, 6);
        let dir = self.parts[part].key.dir(Path::new(DATA_DIR));
        if stuck {
            self.io.set_immutable(&dir, true);
        }
        let (reply, answer) = channel();
        let model = &mut self.parts[part];
        block_on(self.pumps[model.shard].apply(PartitionOp::Purge {
            key: model.key,
            reply,
        }));
        if stuck {
            self.io.set_immutable(&dir, false);
        }
        match answer.try_recv() {
            Ok(Ok(())) if !stuck => model.purge(),
            Ok(Err(PumpError::Storage(StorageError::Io { .. }))) if stuck => {
                self.coverage.purges_refused += 1;
            }
            other => self.fail(format!("purge (stuck {stuck}): unexpected {other:?}")),
        }
        self.coverage.purges += 1;
    }

    /// Delete segments; now and then one of them cannot be moved to the
    /// trash: the deletion stops before it (refused when it is the first).
    pub(super) fn delete_segments(&mut self, part: usize) {
        let count = self.rng.range(0, 3) as u32;
        let model = &self.parts[part];
        let deletable = (count as usize).min(model.segments.len() - 1);
        let dir = model.key.dir(Path::new(DATA_DIR));
        let stuck = (deletable > 0 && self.rng.chance(1, 5)).then(|| {
            let at = self.rng.below(deletable as u64) as usize;
            let path = iggyd_storage::segment::log_path(&dir, model.segments[at].start_offset);
            (at, path)
        });
        if let Some((_, path)) = &stuck {
            self.io.set_immutable(path, true);
        }
        let (reply, answer) = channel();
        let model = &mut self.parts[part];
        block_on(self.pumps[model.shard].apply(PartitionOp::DeleteSegments {
            key: model.key,
            count,
            reply,
        }));
        if let Some((_, path)) = &stuck {
            self.io.set_immutable(path, false);
        }
        let expected_count = stuck.as_ref().map_or(count as usize, |(at, _)| *at);
        match answer.try_recv() {
            Ok(Err(PumpError::Storage(StorageError::Io { .. })))
                if expected_count == 0 && stuck.is_some() =>
            {
                self.coverage.deletes_refused += 1;
            }
            Ok(Ok(got)) => {
                let expected = model.delete_oldest(expected_count);
                assert_eq!(got, expected, "seed {}: delete segments", self.seed);
                self.coverage.segments_deleted += expected.segments as u64;
            }
            other => self.fail(format!("delete segments: unexpected {other:?}")),
        }
    }

    /// The partition is deleted and one with the same stream, topic and
    /// partition ids is created, with a new storage id, on a random shard;
    /// in either order (the open of the new one may reach a shard before
    /// the remove of the old one). Now and then the old directory cannot
    /// be moved to the trash (it is removed in place) or holds a file that
    /// cannot be removed yet. Then a stale append, poll and open with the
    /// old key: the old partition is gone and stays gone.
    pub(super) fn recreate(&mut self, part: usize) {
        let old = self.parts[part].key;
        let old_shard = self.parts[part].shard;
        let key = PartitionKey {
            storage_id: self.next_storage_id,
            ..old
        };
        self.next_storage_id += 1;
        let shard = self.rng.below(self.shards as u64) as usize;
        let settings = random_settings(&mut self.rng);
        self.trace(|| format!("recreate {part}: {old} -> {key} on shard {shard}"));
        let old_dir = old.dir(Path::new(DATA_DIR));
        match self.rng.below(6) {
            0 => {
                self.io.set_immutable(&old_dir, true);
                self.coverage.removed_in_place += 1;
            }
            1 => {
                let first = self.parts[part].segments[0].start_offset;
                self.io
                    .set_immutable(&iggyd_storage::segment::log_path(&old_dir, first), true);
            }
            _ => {}
        }
        let open_first = self.rng.chance(1, 2);
        let open = |sim: &mut Sim| {
            let (reply, answer) = channel();
            block_on(sim.pumps[shard].apply(PartitionOp::Open {
                key,
                settings,
                reply,
            }));
            match answer.try_recv() {
                Ok(Ok(())) => {}
                other => sim.fail(format!("open of {key}: unexpected {other:?}")),
            }
        };
        if open_first {
            open(self);
            self.coverage.recreated_open_first += 1;
        }
        let (reply, answer) = channel();
        block_on(self.pumps[old_shard].apply(PartitionOp::Remove { key: old, reply }));
        match answer.try_recv() {
            Ok(Ok(())) => {}
            other => self.fail(format!("remove of {old}: unexpected {other:?}")),
        }
        if !open_first {
            open(self);
        }
        self.deleted.push(old.storage_id);
        self.parts[part] = PartitionModel::new(key, shard, settings);
        // Stale requests routed with the old key.
        let bytes = self.random_batch().0;
        let len = bytes.len();
        let batch = ValidBatch::new(bytes, 0..len).expect("a generated batch is valid");
        let (reply, answer) = channel();
        block_on(self.pumps[old_shard].apply(PartitionOp::Append {
            key: old,
            batch,
            reply,
        }));
        match answer.try_recv() {
            Ok(Err(PumpError::NotHere(_))) => {}
            other => self.fail(format!("append to deleted {old}: {other:?}")),
        }
        let (reply, answer) = channel();
        block_on(self.pumps[old_shard].apply(PartitionOp::Open {
            key: old,
            settings,
            reply,
        }));
        match answer.try_recv() {
            Ok(Ok(())) => {}
            other => self.fail(format!("late open of deleted {old}: {other:?}")),
        }
        self.coverage.recreated += 1;
    }

    /// The daemon dies right after a delete and a create of the same ids
    /// were journaled, before any shard heard of them: start-up finds the
    /// deleted partition's directory orphaned (it goes to the trash, never
    /// served) and the new partition's missing (created empty).
    pub(super) fn recreate_then_crash(&mut self) {
        let part = self.rng.below(self.parts.len() as u64) as usize;
        let old = self.parts[part].key;
        let key = PartitionKey {
            storage_id: self.next_storage_id,
            ..old
        };
        self.next_storage_id += 1;
        let shard = self.rng.below(self.shards as u64) as usize;
        let settings = random_settings(&mut self.rng);
        self.trace(|| format!("crash after deleting {old} and creating {key}"));
        self.deleted.push(old.storage_id);
        self.parts[part] = PartitionModel::new(key, shard, settings);
        let power_loss = self.rng.chance(1, 2);
        self.restart(power_loss);
        self.coverage.recreated += 1;
    }

    /// The janitor of one shard removes a few files; now and then removals
    /// fail (and are retried later).
    pub(super) fn trash_tick(&mut self, shard: usize) {
        let failing = self.rng.chance(1, 4);
        if failing {
            self.io.set_unlink_failures(Some((1, 2)));
        }
        if self.rng.chance(1, 3) {
            self.clock.advance(self.rng.range(1_000_000, 30_000_000));
        }
        let before = self.pumps[shard].trash_stats();
        block_on(self.pumps[shard].apply(PartitionOp::TrashTick));
        self.io.set_unlink_failures(None);
        let after = self.pumps[shard].trash_stats();
        self.coverage.trash_removals += after.removed_entries - before.removed_entries;
        if after.failing > before.failing {
            self.coverage.trash_removals_failed += after.failing - before.failing;
        }
    }
}
