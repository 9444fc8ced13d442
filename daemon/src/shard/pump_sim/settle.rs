//! The second half of the pump simulation's driver: what happens after a
//! round's ops. The commit of every pump against the model's prediction
//! (writes, planned fsyncs, a failing one), the release of parked replies,
//! the shard loop's poll of background syncs, restarts with their recovery
//! checks, and the comparison of every partition's report with the model.

use super::{DATA_DIR, Sim, Waiting, channel, is_no_space, is_poisoned};
use crate::shard::pump::PumpError;
use crate::shard::pump::{AppendAck, PartitionOp, PartitionReport, PollRequest};
use iggyd_storage::consumer_offsets::ConsumerKey;
use iggyd_storage::sim::block_on;
use iggyd_wire::protocol::primitives::PollingStrategy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

impl Sim {
    // ----- commit --------------------------------------------------------

    fn shard_parts(&self, shard: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.parts.len())
            .filter(|part| self.parts[*part].shard == shard)
            .collect();
        order.sort_by_key(|part| self.parts[*part].key);
        order
    }

    /// Whether the commit of `shard` has anything to do (else it returns
    /// at once, without even checking flush policies).
    fn commit_is_idle(&self, shard: usize) -> bool {
        let parts = self.shard_parts(shard);
        parts.iter().all(|part| {
            let model = &self.parts[*part];
            !model.log_sync_requested
                && !model.offsets_sync_requested
                && !model.background_requested
                && !model.has_pending()
        }) && !self.waiting.iter().any(|parked| parked.shard == shard)
    }

    /// Phase 1 in the model: pending batches written, then the flush policy
    /// of `replicated` partitions asks for background syncs.
    fn model_writes(&mut self, shard: usize, observed: Option<&[PartitionReport]>) {
        for part in self.shard_parts(shard) {
            let model = &mut self.parts[part];
            if !model.has_pending() {
                continue;
            }
            match observed {
                None => model.write(),
                Some(reports) => {
                    let report = reports
                        .iter()
                        .find(|report| report.key == model.key)
                        .expect("reported");
                    if report.stats.next_offset == model.next_offset() {
                        model.write();
                    } else {
                        // The full disk refused the coalesced write.
                        assert_eq!(report.stats.next_offset, model.written_next_offset);
                        model.drop_pending();
                    }
                }
            }
        }
        for part in self.shard_parts(shard) {
            let model = &mut self.parts[part];
            if !model.persisted() && model.flush_due() {
                model.background_requested = true;
            }
        }
    }

    /// The foreground fsyncs the commit of `shard` does (after its writes),
    /// in order: logs by key, then consumer offsets by key. `true` marks a
    /// log.
    fn planned_syncs(&self, shard: usize) -> Vec<(usize, bool)> {
        let order = self.shard_parts(shard);
        let mut syncs = Vec::new();
        for part in &order {
            let model = &self.parts[*part];
            if model.log_sync_requested && model.unsynced_bytes() > 0 {
                syncs.push((*part, true));
            }
        }
        for part in &order {
            let model = &self.parts[*part];
            if model.offsets_sync_requested && !model.offsets_unsynced.is_empty() {
                syncs.push((*part, false));
            }
        }
        syncs
    }

    /// Commit every pump; `fail_shard` gets a failed foreground fsync (its
    /// first one). Returns true when a pump turned fatal.
    pub(super) fn commit(&mut self, fail_shard: Option<usize>) -> bool {
        let mut failed_parts = Vec::new();
        for shard in 0..self.pumps.len() {
            if self.commit_is_idle(shard) {
                block_on(self.pumps[shard].commit());
                continue;
            }
            // Without a full disk every write succeeds, so the syncs can be
            // planned (and one made to fail) before the commit runs.
            let predicted = !self.disk_full;
            if predicted {
                self.model_writes(shard, None);
            }
            let planned = predicted.then(|| self.planned_syncs(shard));
            let failing = fail_shard == Some(shard)
                && planned.as_ref().is_some_and(|syncs| !syncs.is_empty());
            if failing {
                self.io.fail_next_fsync();
                self.coverage.failed_fsyncs += 1;
            }
            let fsyncs_before = self.io.stats().fsyncs;
            block_on(self.pumps[shard].commit());
            let fsyncs = self.io.stats().fsyncs - fsyncs_before;
            let syncs = match planned {
                Some(syncs) => syncs,
                None => {
                    let reports = self.report(shard);
                    self.model_writes(shard, Some(&reports));
                    self.planned_syncs(shard)
                }
            };
            // A failed log fsync poisons the log (no background sync can
            // start on it); a failed offsets fsync fails the partition's
            // waiters but leaves its log usable.
            let mut poisoned_log = None;
            if failing {
                failed_parts.push(syncs[0].0);
                if syncs[0].1 {
                    poisoned_log = Some(syncs[0].0);
                }
            }
            for (number, (part, log)) in syncs.iter().enumerate() {
                if failing && number == 0 {
                    continue;
                }
                if *log {
                    self.parts[*part].sync_log();
                } else {
                    self.parts[*part].sync_offsets();
                }
            }
            let logs = syncs.iter().filter(|(_, log)| *log).count() as u64;
            // A log sync fsyncs the `.log` and the `.index` concurrently, so
            // both are attempted even when one of them fails.
            let expected_fsyncs = 2 * logs + (syncs.len() as u64 - logs);
            assert_eq!(
                fsyncs, expected_fsyncs,
                "seed {}: shard {shard} commit did {fsyncs} fsyncs, planned {syncs:?}",
                self.seed
            );
            assert_eq!(
                self.pumps[shard].fatal().is_some(),
                failing,
                "seed {}: fatal after commit",
                self.seed
            );
            // Phase 4: background syncs start (not yet polled).
            for part in self.shard_parts(shard) {
                let model = &mut self.parts[part];
                model.log_sync_requested = false;
                model.offsets_sync_requested = false;
                if std::mem::take(&mut model.background_requested)
                    && model.background.is_none()
                    && model.unsynced_bytes() > 0
                    && poisoned_log != Some(part)
                {
                    model.start_background();
                    self.background_order[shard].push((part, model.key));
                }
            }
            assert_eq!(
                self.pumps[shard].background_syncs(),
                self.background_order[shard].len(),
                "seed {}: background syncs running on shard {shard}",
                self.seed
            );
        }
        self.resolve_waiting(&failed_parts);
        !failed_parts.is_empty()
    }

    /// Every parked reply is answered by the commit, as the model says.
    fn resolve_waiting(&mut self, failed_parts: &[usize]) {
        for parked in std::mem::take(&mut self.waiting) {
            let waiting = parked.waiting;
            let part = waiting.part();
            if parked.key != self.parts[part].key {
                // Its partition was deleted before the commit: the reply
                // says so, whatever it waited for.
                let deleted = |result: &Result<(), PumpError>| matches!(result, Err(PumpError::NotHere(key)) if *key == parked.key);
                let answered = match waiting {
                    Waiting::Append { answer, .. } => answer.try_recv().map(|r| r.map(|_| ())),
                    Waiting::Flush { answer, .. } | Waiting::Offset { answer, .. } => {
                        answer.try_recv()
                    }
                    Waiting::Poll { answer, .. } => answer.try_recv().map(|r| r.map(|_| ())),
                };
                match answered {
                    Ok(result) if deleted(&result) => {}
                    other => self.fail(format!(
                        "a reply parked on deleted {}: {other:?}",
                        parked.key
                    )),
                }
                continue;
            }
            let failed = failed_parts.contains(&part);
            let key = self.parts[part].key;
            match waiting {
                Waiting::Append {
                    purges,
                    rollbacks,
                    ack,
                    answer,
                    ..
                } => {
                    let model = &self.parts[part];
                    let purged = model.purges != purges;
                    let dropped = !purged && model.rollbacks != rollbacks;
                    match answer.try_recv() {
                        Ok(Err(error)) if failed => assert!(is_poisoned(&error), "{error}"),
                        Ok(Err(error)) if dropped => {
                            assert!(is_no_space(&error), "seed {}: {error}", self.seed);
                            self.coverage.appends_refused_no_space += 1;
                        }
                        Ok(Ok(got)) if !failed && !dropped => {
                            assert_eq!(got, ack, "seed {}: ack of {key}", self.seed);
                            self.coverage.appends_acked += 1;
                            if !purged {
                                self.check_acknowledged(part, ack);
                            }
                        }
                        other => self.fail(format!("parked append to {key}: {other:?}")),
                    }
                }
                Waiting::Flush {
                    purges,
                    rollbacks,
                    answer,
                    ..
                } => {
                    let model = &self.parts[part];
                    let dropped = model.purges == purges && model.rollbacks != rollbacks;
                    match answer.try_recv() {
                        Ok(Err(error)) if failed => assert!(is_poisoned(&error), "{error}"),
                        Ok(Err(error)) if dropped => assert!(is_no_space(&error), "{error}"),
                        Ok(Ok(())) if !failed && !dropped => {}
                        other => self.fail(format!("parked flush of {key}: {other:?}")),
                    }
                }
                Waiting::Poll {
                    expected, answer, ..
                } => match answer.try_recv() {
                    Ok(Err(error)) if failed => assert!(is_poisoned(&error), "{error}"),
                    Ok(Ok(result)) if !failed => {
                        self.check_poll(part, &result, &expected);
                        self.check_offsets_durable(part);
                    }
                    other => self.fail(format!("parked poll of {key}: {other:?}")),
                },
                Waiting::Offset { answer, .. } => match answer.try_recv() {
                    Ok(Err(error)) if failed => assert!(is_poisoned(&error), "{error}"),
                    Ok(Ok(())) if !failed => self.check_offsets_durable(part),
                    other => self.fail(format!("parked offset change of {key}: {other:?}")),
                },
            }
        }
    }

    /// An acknowledged append is written (`replicated`: it survives a
    /// process crash) or durable (`persisted`: it survives power loss).
    fn check_acknowledged(&mut self, part: usize, ack: AppendAck) {
        let seed = self.seed;
        let model = &mut self.parts[part];
        let key = model.key;
        if model.persisted() {
            assert!(
                model.durable_next_offset > ack.last_offset,
                "seed {seed}: {key} acknowledged offset {} before it was durable ({})",
                ack.last_offset,
                model.durable_next_offset
            );
            model.acked_durable_next_offset =
                model.acked_durable_next_offset.max(ack.last_offset + 1);
        } else {
            assert!(
                model.written_next_offset > ack.last_offset,
                "seed {seed}: {key} acknowledged offset {} before it was written ({})",
                ack.last_offset,
                model.written_next_offset
            );
        }
        model.acked_written_next_offset = model.acked_written_next_offset.max(ack.last_offset + 1);
    }

    /// An acknowledged `persisted` offset change is durable.
    fn check_offsets_durable(&self, part: usize) {
        let model = &self.parts[part];
        assert!(
            model.offsets_unsynced.is_empty(),
            "seed {}: {} acknowledged an offset change that is not durable",
            self.seed,
            model.key
        );
    }

    /// The shard loop polls the running background syncs; `fail` makes the
    /// first fsync they do fail. Returns true when a pump turned fatal.
    pub(super) fn poll_background(&mut self, fail: bool) -> bool {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let mut fatal = false;
        for shard in 0..self.pumps.len() {
            let running = std::mem::take(&mut self.background_order[shard]);
            if running.is_empty() {
                continue;
            }
            // The oldest is polled first: its log fsync is the one that
            // fails. A failure of a sync a purge made stale changes nothing
            // (the files it synced are gone), so it is not fatal.
            let failing = fail && !fatal;
            let (first, first_key) = running[0];
            let fatal_expected = failing
                && self.parts[first].key == first_key
                && !self.parts[first]
                    .background
                    .is_some_and(|background| background.stale);
            if failing {
                self.io.fail_next_fsync();
                self.coverage.failed_background_syncs += 1;
                self.coverage.failed_fsyncs += 1;
            }
            let fsyncs_before = self.io.stats().fsyncs;
            let completed = match self.pumps[shard].poll_background(&mut context) {
                std::task::Poll::Ready(completed) => completed,
                std::task::Poll::Pending => 0,
            };
            assert_eq!(
                completed,
                running.len(),
                "seed {}: SimIo syncs never pend",
                self.seed
            );
            assert_eq!(self.io.stats().fsyncs - fsyncs_before, 2 * completed as u64);
            for (number, (part, key)) in running.into_iter().enumerate() {
                self.coverage.background_syncs += 1;
                if self.parts[part].key != key {
                    // A deleted partition's sync: nothing to account.
                    continue;
                }
                if failing && number == 0 {
                    self.parts[part].background = None;
                } else {
                    self.parts[part].finish_background();
                }
            }
            assert_eq!(
                self.pumps[shard].fatal().is_some(),
                fatal_expected,
                "seed {}: fatal after a background sync",
                self.seed
            );
            fatal |= fatal_expected;
        }
        fatal
    }

    // ----- restart -------------------------------------------------------

    /// The daemon stops (a process exit, or power loss when `power_loss`)
    /// and starts again: new pumps, every partition re-opened. Background
    /// syncs still running (never polled) die with the process.
    pub(super) fn restart(&mut self, power_loss: bool) {
        self.trace(|| format!("restart, power loss {power_loss}"));
        assert!(self.waiting.is_empty());
        if self
            .background_order
            .iter()
            .any(|running| !running.is_empty())
        {
            self.coverage.crashes_with_background_sync_in_flight += 1;
        }
        self.pumps.clear();
        self.background_order = vec![Vec::new(); self.shards];
        self.io.set_capacity(None);
        self.disk_full = false;
        self.coverage.restarts += 1;
        if power_loss {
            let torn = self.rng.chance(1, 2);
            self.io.set_torn_writes(torn);
            let torn_before = self.io.stats().torn_files;
            self.io.crash();
            self.coverage.torn_files += self.io.stats().torn_files - torn_before;
            self.coverage.power_losses += 1;
        }
        // Replies still being sent outlive their shard's pump.
        self.release_held();
        self.reconcile();
        for shard in 0..self.shards {
            let pump = self.new_pump(shard);
            self.pumps.push(pump);
        }
        self.open_all();
        let mut reports = BTreeMap::new();
        for shard in 0..self.pumps.len() {
            for report in self.report(shard) {
                reports.insert(report.key, report);
            }
        }
        for part in 0..self.parts.len() {
            let report = &reports[&self.parts[part].key];
            self.recover_model(part, report, power_loss);
        }
        self.check_reports();
        for part in 0..self.parts.len() {
            self.read_everything(part);
        }
    }

    /// Start-up reconciliation against the live partitions: only
    /// directories of deleted partitions may be orphaned (moved to the
    /// trash, or removed in place when they cannot be moved); the trash
    /// goes to the new shard 0.
    pub(super) fn reconcile(&mut self) {
        let listed = self
            .parts
            .iter()
            .map(|model| {
                let key = model.key;
                (key.storage_id, (key.stream, key.topic, key.partition))
            })
            .collect();
        let reconciled = iggyd_storage::sim::block_on(iggyd_storage::layout::reconcile(
            &self.io,
            Path::new(DATA_DIR),
            &listed,
        ))
        .unwrap_or_else(|error| self.fail(format!("reconcile: {error}")));
        for path in reconciled.orphans.iter().chain(&reconciled.stuck) {
            let storage_id: Option<u64> = path
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.parse().ok());
            assert!(
                storage_id.is_some_and(|id| self.deleted.contains(&id)),
                "seed {}: reconcile moved {} away, which is not a deleted partition",
                self.seed,
                path.display()
            );
            self.coverage.orphans_at_restart += 1;
        }
        self.trash_start = reconciled.trash;
    }

    /// The end of a seed: undeletable files become deletable, the janitors
    /// run until every trash is empty, and nothing is left on the disk but
    /// the live partitions' directories.
    pub(super) fn empty_trash(&mut self) {
        for path in self.io.immutable_paths() {
            self.io.set_immutable(&path, false);
        }
        self.io.set_unlink_failures(None);
        for _ in 0..1_000 {
            if (0..self.pumps.len()).all(|shard| self.pumps[shard].trash_stats().entries == 0) {
                break;
            }
            self.clock.advance(60_000_000);
            for shard in 0..self.pumps.len() {
                block_on(self.pumps[shard].apply(PartitionOp::TrashTick));
            }
        }
        for shard in 0..self.pumps.len() {
            let stats = self.pumps[shard].trash_stats();
            assert_eq!(stats.entries, 0, "seed {}: {stats:?}", self.seed);
        }
        let data = Path::new(DATA_DIR);
        let live: Vec<PathBuf> = self.parts.iter().map(|model| model.key.dir(data)).collect();
        let left: Vec<PathBuf> = self
            .io
            .files_under(data)
            .into_iter()
            .filter(|path| !live.iter().any(|dir| path.parent() == Some(dir.as_path())))
            .collect();
        assert!(
            left.is_empty(),
            "seed {}: left on the disk: {left:?}",
            self.seed
        );
        let partitions = iggyd_storage::layout::partition_dir(data, 0);
        let partitions = partitions.parent().expect("partitions directory");
        let names = block_on(iggyd_storage::StorageIo::list_dir(&self.io, partitions))
            .expect("list partitions");
        let mut expected: Vec<String> = self
            .parts
            .iter()
            .map(|model| model.key.storage_id.to_string())
            .collect();
        expected.sort();
        assert_eq!(names, expected, "seed {}: partition directories", self.seed);
    }

    fn recover_model(&mut self, part: usize, report: &PartitionReport, power_loss: bool) {
        let seed = self.seed;
        let model = &mut self.parts[part];
        let key = model.key;
        let recovered = report.stats.next_offset;
        let written = model.written_next_offset;
        if !power_loss {
            assert_eq!(
                recovered, written,
                "seed {seed}: {key} lost written data in a process restart"
            );
            assert!(
                recovered >= model.acked_written_next_offset,
                "seed {seed}: {key} lost an acknowledged message in a process restart"
            );
        }
        assert!(
            recovered >= model.durable_next_offset,
            "seed {seed}: {key} lost durable data: recovered to {recovered}, durable was {}",
            model.durable_next_offset
        );
        assert!(
            recovered >= model.acked_durable_next_offset,
            "seed {seed}: {key} lost an acknowledged persisted message: recovered to {recovered}, acknowledged up to {}",
            model.acked_durable_next_offset
        );
        assert!(
            recovered <= written,
            "seed {seed}: {key} invented offsets (or kept a batch that was never written)"
        );
        assert!(
            model.is_batch_boundary(recovered),
            "seed {seed}: {key} recovered to {recovered}, not a batch boundary"
        );
        if recovered < written {
            self.coverage.tail_lost_on_power_loss += 1;
        }
        model.recover_to(recovered);

        let recovered_offsets: BTreeMap<ConsumerKey, u64> =
            report.consumer_offsets.iter().copied().collect();
        // Open clamps offsets that point past the recovered log.
        let clamp = |offsets: &BTreeMap<ConsumerKey, u64>| -> BTreeMap<ConsumerKey, u64> {
            offsets
                .iter()
                .filter_map(|(consumer, offset)| {
                    recovered
                        .checked_sub(1)
                        .map(|highest| (*consumer, (*offset).min(highest)))
                })
                .collect()
        };
        let mut candidate = model.offsets_durable.clone();
        let mut matched = clamp(&candidate) == recovered_offsets;
        if power_loss {
            for (consumer, change) in &model.offsets_unsynced {
                if matched {
                    break;
                }
                match change {
                    Some(offset) => candidate.insert(*consumer, *offset),
                    None => candidate.remove(consumer),
                };
                matched = clamp(&candidate) == recovered_offsets;
            }
        } else {
            matched = recovered_offsets == clamp(&model.offsets);
        }
        assert!(
            matched,
            "seed {seed}: {key} consumer offsets after restart {recovered_offsets:?}; durable {:?}, unsynced {:?}, current {:?}",
            model.offsets_durable, model.offsets_unsynced, model.offsets
        );
        // After open everything readable is durable.
        model.offsets = recovered_offsets.clone();
        model.offsets_durable = recovered_offsets;
        model.offsets_unsynced.clear();
    }

    /// Polls every visible message of a partition and compares.
    fn read_everything(&mut self, part: usize) {
        let model = &self.parts[part];
        let request = PollRequest {
            consumer: None,
            strategy: PollingStrategy::First,
            count: u32::MAX,
            auto_commit: false,
            bytes_max: u64::MAX,
        };
        let expected = self.expected_poll(part, &request);
        let (reply, answer) = channel();
        block_on(self.pumps[model.shard].apply(PartitionOp::Poll {
            key: model.key,
            request,
            reply,
        }));
        match answer.try_recv() {
            Ok(Ok(result)) => self.check_poll(part, &result, &expected),
            other => self.fail(format!("full read: unexpected {other:?}")),
        }
    }

    /// Every partition's report equals the model (reports see written data
    /// only).
    pub(super) fn check_reports(&mut self) {
        for shard in 0..self.pumps.len() {
            let reports = self.report(shard);
            let owned = self
                .parts
                .iter()
                .filter(|model| model.shard == shard)
                .count();
            assert_eq!(reports.len(), owned, "seed {}", self.seed);
            for report in reports {
                let model = self
                    .parts
                    .iter()
                    .find(|model| model.key == report.key)
                    .expect("reported partition is modelled");
                let key = model.key;
                let stats = &report.stats;
                let written = model.written_next_offset;
                let context = format!("seed {}: {key}: {report:?}", self.seed);
                assert_eq!(stats.next_offset, written, "{context}");
                assert_eq!(stats.first_offset, model.first_offset(), "{context}");
                assert_eq!(stats.segments, model.segments.len(), "{context}");
                assert_eq!(stats.messages, written - model.first_offset(), "{context}");
                assert_eq!(
                    stats.messages,
                    model.written_messages_list().len() as u64,
                    "{context}"
                );
                let bytes: u64 = model
                    .segments
                    .iter()
                    .map(|segment| segment.written_bytes(written))
                    .sum();
                assert_eq!(stats.bytes, bytes, "{context}");
                assert_eq!(
                    report.current_offset,
                    written.saturating_sub(1),
                    "{context}"
                );
                let sealed: Vec<(u64, u64)> = model.segments[..model.segments.len() - 1]
                    .iter()
                    .map(|segment| (segment.size_bytes(), segment.last_timestamp()))
                    .collect();
                assert_eq!(report.sealed_segments, sealed, "{context}");
                let offsets: Vec<(ConsumerKey, u64)> =
                    model.offsets.iter().map(|(k, v)| (*k, *v)).collect();
                assert_eq!(report.consumer_offsets, offsets, "{context}");
                assert!(model.acked_durable_next_offset <= model.durable_next_offset);
                assert!(model.durable_next_offset <= written);
                // A stored offset never points past the written log, or
                // `Next` would skip the messages appended there later.
                for (consumer, offset) in &report.consumer_offsets {
                    assert!(
                        *offset < written,
                        "{context}: {consumer:?} stored {offset} past the log"
                    );
                }
            }
        }
        self.coverage.reports += 1;
    }
}
