//! The pump's commit phase (see `mod.rs`): the coalesced writes of every
//! partition with pending batches, the foreground fsyncs that `persisted`
//! acknowledgements and flushes wait for, the release of acknowledgements,
//! and the background fsyncs of `replicated` partitions that the shard loop
//! polls. It also owns the flush-everything paths (`sync_all`, `drain`).
//! Nothing here takes an op from the inbox; `mod.rs` applies ops.

use super::{BackgroundSync, Need, Pump, elapsed_us};
use crate::shard::op::PumpError;
use crate::shard::partition::{Durability, PartitionKey};
use iggyd_storage::{StorageError, StorageIo};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs futures to completion concurrently inside one task (the pump's):
/// all are polled until every one is ready. Outputs keep the input order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every future completed"))
        .collect()
}

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// The commit phase (see the module doc): write, sync, release
    /// acknowledgements, start background syncs.
    pub async fn commit(&mut self) {
        self.propose_pending_offsets();
        let idle = self.log_sync.is_empty()
            && self.offsets_sync.is_empty()
            && self.background_due.is_empty()
            && self.waiters.is_empty()
            && !self.partitions.values().any(|partition| {
                partition.log.has_pending()
                    || partition
                        .replica
                        .as_ref()
                        .is_some_and(|replica| replica.files.has_pending())
            });
        if idle {
            return;
        }
        let mut failed: BTreeMap<PartitionKey, String> = BTreeMap::new();
        self.write_all(&mut failed).await;
        self.sync_logs(&mut failed).await;
        for key in std::mem::take(&mut self.offsets_sync) {
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            if !partition.offsets.is_unsynced() {
                continue;
            }
            self.counters.fsyncs += 1;
            if let Err(error) = partition.offsets.sync().await {
                failed.insert(key, error.to_string());
            }
        }
        self.counters.commits += 1;
        self.release(&failed);
        for (key, reason) in failed {
            let error = PumpError::Storage(StorageError::Poisoned { reason });
            self.note_fatal(key, &error);
        }
        self.start_background_syncs();
    }

    /// Phase 1: every partition with pending batches writes them, all at
    /// once. A `replicated` partition whose flush policy is then due gets a
    /// background sync.
    async fn write_all(&mut self, failed: &mut BTreeMap<PartitionKey, String>) {
        let writes: Vec<_> = self
            .partitions
            .values_mut()
            .filter(|partition| {
                partition.log.has_pending()
                    || partition
                        .replica
                        .as_ref()
                        .is_some_and(|replica| replica.files.has_pending())
            })
            .map(|partition| async {
                // A replicated partition's entry records go after the data
                // they name.
                let mut result = partition.log.write_pending().await;
                if result.is_ok()
                    && let Some(replica) = &mut partition.replica
                {
                    result = replica.files.write_pending().await;
                }
                (partition.key, result)
            })
            .collect();
        for (key, result) in join_all(writes).await {
            self.counters.writes += 1;
            match result {
                // ENOSPC dropped the pending batches (their waiters see the
                // epoch change); the partition stays usable.
                Err(StorageError::NoSpace { .. }) => {}
                Err(error) => {
                    failed.insert(key, error.to_string());
                }
                Ok(()) => {
                    // The write covered every pending batch: `Written`
                    // waiters up to the assigned offset may go.
                    if let Some(partition) = self.partitions.get(&key) {
                        assert!(!partition.log.has_pending());
                        assert!(partition.log.written_next_offset() == partition.log.next_offset());
                    }
                }
            }
        }
        for partition in self.partitions.values() {
            if partition.settings.durability == Durability::Replicated && partition.flush_due() {
                self.background_due.insert(partition.key);
            }
        }
    }

    /// Phase 2: fsync every partition with a `persisted` waiter or a flush,
    /// all at once.
    async fn sync_logs(&mut self, failed: &mut BTreeMap<PartitionKey, String>) {
        let mut jobs = Vec::new();
        let syncing = std::mem::take(&mut self.log_sync);
        let replicas: Vec<PartitionKey> = syncing
            .iter()
            .filter(|key| {
                self.partitions
                    .get(key)
                    .is_some_and(|partition| partition.replica.is_some())
            })
            .copied()
            .collect();
        for key in syncing {
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            match partition.log.begin_sync(false) {
                Ok(Some(job)) => jobs.push((key, job)),
                Ok(None) => {}
                Err(error) => {
                    failed.insert(key, error.to_string());
                }
            }
        }
        if jobs.is_empty() {
            self.sync_raft_files(replicas, failed).await;
            return;
        }
        let started = std::time::Instant::now();
        let io = self.io.clone();
        let outcomes = join_all(jobs.iter().map(|(_, job)| job.run(&io)).collect()).await;
        let micros = elapsed_us(started);
        for ((key, job), outcome) in jobs.into_iter().zip(outcomes) {
            self.counters.fsyncs += 1;
            self.fsync.saturating_record(micros);
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            let covers = job.next_offset();
            let purges = partition.log.epoch().purges;
            match partition.log.end_sync(job, outcome) {
                Err(error) => {
                    failed.insert(key, error.to_string());
                }
                // The sync made everything it covered durable: `Durable`
                // waiters up to `covers` may go (unless a purge replaced
                // the files it synced).
                Ok(()) if partition.log.epoch().purges == purges => {
                    assert!(partition.log.durable_next_offset() >= covers);
                }
                Ok(()) => {}
            }
        }
        self.sync_raft_files(replicas, failed).await;
    }

    /// The entry records of replicated partitions whose data was just
    /// synced: after their data, so a record never names lost data.
    async fn sync_raft_files(
        &mut self,
        keys: Vec<PartitionKey>,
        failed: &mut BTreeMap<PartitionKey, String>,
    ) {
        for key in keys {
            if failed.contains_key(&key) {
                continue;
            }
            let Some(replica) = self
                .partitions
                .get_mut(&key)
                .and_then(|partition| partition.replica.as_mut())
            else {
                continue;
            };
            self.counters.fsyncs += 1;
            if let Err(error) = replica.files.sync().await {
                failed.insert(key, error.to_string());
            }
        }
    }

    /// Phase 3: answer every waiter whose write or sync is done; keep the
    /// others parked.
    fn release(&mut self, failed: &BTreeMap<PartitionKey, String>) {
        for waiter in std::mem::take(&mut self.waiters) {
            let Some(partition) = self.partitions.get(&waiter.key) else {
                waiter.answer.fail(PumpError::NotHere(waiter.key));
                continue;
            };
            if let Some(reason) = failed.get(&waiter.key) {
                waiter
                    .answer
                    .fail(PumpError::Storage(StorageError::Poisoned {
                        reason: reason.clone(),
                    }));
                continue;
            }
            let epoch = partition.log.epoch();
            if epoch.purges != waiter.epoch.purges {
                // Purged after it was accepted: gone by request, not lost.
                waiter.answer.succeed();
                continue;
            }
            partition.log.assert_watermarks();
            let ready = match waiter.need {
                Need::OffsetsSynced => true,
                Need::Written { .. } | Need::Durable { .. }
                    if epoch.rollbacks != waiter.epoch.rollbacks =>
                {
                    waiter
                        .answer
                        .fail(PumpError::Storage(StorageError::NoSpace {
                            path: partition.log.dir().to_path_buf(),
                            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
                        }));
                    continue;
                }
                Need::Written { upto } => upto <= partition.log.written_next_offset(),
                Need::Durable { upto } => upto <= partition.log.durable_next_offset(),
            };
            if ready {
                // What the acknowledgement promises holds now.
                match waiter.need {
                    Need::Written { upto } => {
                        assert!(upto <= partition.log.written_next_offset());
                    }
                    Need::Durable { upto } => {
                        assert!(upto <= partition.log.durable_next_offset());
                    }
                    Need::OffsetsSynced => assert!(!partition.offsets.is_unsynced()),
                }
                waiter.answer.succeed();
            } else {
                self.waiters.push(waiter);
            }
        }
    }

    /// Phase 4: start the background syncs that are due, at most one per
    /// partition; the shard loop polls them ([`Self::poll_background`]).
    fn start_background_syncs(&mut self) {
        for key in std::mem::take(&mut self.background_due) {
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            match partition.log.begin_sync(true) {
                Ok(Some(job)) => {
                    let io = self.io.clone();
                    let future = job.run_owned(io);
                    self.background.push(BackgroundSync {
                        key,
                        job,
                        future: Box::pin(future),
                        started: std::time::Instant::now(),
                    });
                }
                // Already one running (the next tick or threshold starts
                // another), or nothing unsynced.
                Ok(None) => {}
                Err(error) => {
                    let error = PumpError::from(error);
                    self.note_fatal(key, &error);
                }
            }
        }
    }

    /// Polls the running background syncs; each one that completed advances
    /// its partition's durable offset (or poisons it: a failed background
    /// fsync is fatal like any other). Ready with the number completed when
    /// at least one did.
    pub fn poll_background(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        let mut completed = 0;
        let mut at = 0;
        while at < self.background.len() {
            let outcome = match self.background[at].future.as_mut().poll(cx) {
                Poll::Ready(outcome) => outcome,
                Poll::Pending => {
                    at += 1;
                    continue;
                }
            };
            let done = self.background.swap_remove(at);
            completed += 1;
            self.counters.fsyncs += 1;
            self.fsync.saturating_record(elapsed_us(done.started));
            let Some(partition) = self.partitions.get_mut(&done.key) else {
                continue;
            };
            if let Err(error) = partition.log.end_sync(done.job, outcome) {
                let error = PumpError::from(error);
                self.note_fatal(done.key, &error);
            }
        }
        if completed > 0 {
            Poll::Ready(completed)
        } else {
            Poll::Pending
        }
    }

    /// Waits for every running background sync.
    pub async fn finish_background(&mut self) {
        while !self.background.is_empty() {
            std::future::poll_fn(|cx| self.poll_background(cx)).await;
        }
    }

    /// Make everything appended so far written and durable now (the
    /// console's `flush` action).
    pub async fn sync_all(&mut self) {
        let keys: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        for key in keys {
            self.log_sync.insert(key);
            self.offsets_sync.insert(key);
        }
        self.commit().await;
        self.finish_background().await;
    }

    /// Shutdown: make everything written durable, let background syncs
    /// finish, and leave exact files (direct-I/O padding cut).
    pub async fn drain(&mut self) {
        self.resume_parked(true).await;
        self.sync_all().await;
        let mut failures = Vec::new();
        for partition in self.partitions.values_mut() {
            if let Some(replica) = &mut partition.replica
                && let Err(error) = replica.files.close().await
            {
                failures.push((partition.key, PumpError::from(error)));
            }
            if let Err(error) = partition.log.close().await {
                failures.push((partition.key, PumpError::from(error)));
            }
        }
        for (key, error) in failures {
            self.note_fatal(key, &error);
        }
    }
}
