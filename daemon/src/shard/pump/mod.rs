//! The pump: the only code that mutates this shard's partitions. It takes
//! one `PartitionOp` at a time from the shard's bounded inbox and applies it
//! to the partition it names. Periodic work (flush by interval, retention)
//! arrives as ops too, so nothing else ever touches a partition.
//!
//! Rounds: the shard applies every op already waiting in its inbox (up to
//! `limits::PUMP_OPS_PER_COMMIT`), then runs one commit phase here. First,
//! every partition with appended batches writes them, one coalesced write
//! each, all partitions at once. Second, every partition with a `persisted`
//! acknowledgement (or a flush) waiting fsyncs, all at once (group commit
//! across the shard). Third, acknowledgements are released: a `replicated`
//! append once its write completed, a `persisted` one once the sync that
//! covers it completed. Fourth, `replicated` partitions whose flush policy
//! is due start a background fsync, at most one per partition, which the
//! shard loop polls while the pump goes on appending
//! ([`Pump::poll_background`]); its completion advances the durable offset.
//! Appends that arrive during a write or sync wait in the inbox and share
//! the next round.
//!
//! A failed fsync or write poisons the partition (see `storage`): the waiting
//! acknowledgements get an error, and the pump reports a fatal error so the
//! supervisor stops the daemon and systemd restarts it. The pump never sends
//! a request to another shard's pump, so pumps cannot deadlock each other.
//!
//! Deleted data leaves through the shard's trash (`storage::trash`): a
//! removed partition's directory, a purged partition's old directory and
//! deleted segments are renamed there durably before the op answers, and
//! `TrashTick` removes their files a few at a time, retrying failures. A
//! partition removed once is never opened again by this pump (a late
//! settings refresh must not bring its directory back).

pub use super::op::{
    AppendAck, PartitionOp, PartitionReport, PollRequest, PollResult, PumpError, Reply,
    StoredOffset,
};
mod commit;
mod entry_cache;
mod lifecycle;
mod offsets;
mod raft;
mod reads;
mod retention;

use super::op::{POLL_HEADROOM, answer as send, reply_stopping};
use super::partition::{Durability, Partition, PartitionKey, PartitionSettings};
use iggyd_raft::offsets::OffsetWrite;
use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerOffsets};
use iggyd_storage::trash::{DiscardError, Trash, TrashStart, TrashStats};
use iggyd_storage::{
    Access, BufferPool, Clock, LogEpoch, PartitionConfig, PartitionLog, StorageError, StorageIo,
    SyncJob,
};
use iggyd_wire::batch::ValidBatch;
use iggyd_wire::protocol::primitives::PollingStrategy;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;

/// What an acknowledgement waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// The partition's written offset reaches `upto` (write completed).
    Written { upto: u64 },
    /// The partition's durable offset reaches `upto` (fsync completed).
    Durable { upto: u64 },
    /// The consumer offsets' sync in this commit phase.
    OffsetsSynced,
}

/// The reply an acknowledgement releases.
enum Answer {
    Append {
        ack: AppendAck,
        reply: Reply<AppendAck>,
    },
    Poll {
        result: PollResult,
        reply: Reply<PollResult>,
    },
    Done {
        reply: Reply<()>,
    },
    /// A replicated partition's Raft append is stored as its durability
    /// asks.
    Flushed {
        flushed: crate::shard::replica::Flushed,
    },
}

impl Answer {
    fn fail(self, error: PumpError) {
        match self {
            Answer::Append { reply, .. } => send(reply, Err(error)),
            Answer::Poll { reply, .. } => send(reply, Err(error)),
            Answer::Done { reply } => send(reply, Err(error)),
            Answer::Flushed { flushed } => flushed(Err(error.to_string())),
        }
    }

    fn succeed(self) {
        match self {
            Answer::Append { ack, reply } => send(reply, Ok(ack)),
            Answer::Poll { result, reply } => send(reply, Ok(result)),
            Answer::Done { reply } => send(reply, Ok(())),
            Answer::Flushed { flushed } => flushed(Ok(())),
        }
    }
}

/// An acknowledgement held back until the write or sync it needs is done.
struct Waiter {
    key: PartitionKey,
    /// The partition's epoch when the waiter was parked.
    epoch: LogEpoch,
    need: Need,
    answer: Answer,
}

/// A background fsync of one partition, polled by the shard loop.
struct BackgroundSync<F> {
    key: PartitionKey,
    job: SyncJob<F>,
    future: Pin<Box<dyn Future<Output = Result<(), String>>>>,
    started: std::time::Instant,
}

/// Counters the pump keeps for the console and `STATUS=`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpCounters {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
    pub fsyncs: u64,
    pub commits: u64,
    /// Coalesced log writes (each covers every batch appended to a
    /// partition since its previous write).
    pub writes: u64,
    /// Polls parked while their disk read was in flight.
    pub polls_parked: u64,
    /// Consumer offsets refused because their partition held
    /// `limits.max_consumer_offsets_per_partition` already.
    pub offsets_refused: u64,
}

/// A fatal storage failure: stop acknowledging, exit, let systemd restart.
#[derive(Debug, thiserror::Error)]
#[error("partition {key}: {error}")]
pub struct FatalError {
    pub key: PartitionKey,
    pub error: PumpError,
}

/// How the pump's partitions reach the disk.
#[derive(Debug, Clone)]
pub struct PumpStorage {
    pub data_dir: PathBuf,
    pub access: Access,
    pub pool: BufferPool,
    /// Where this shard's trash starts (from start-up reconciliation).
    pub trash: TrashStart,
    /// `limits.max_consumer_offsets_per_partition`.
    pub consumer_offsets_max: usize,
    /// Bytes of a read window (`limits::storage::READ_WINDOW_BYTES`; small in the
    /// simulations).
    pub read_window_bytes: usize,
}

pub struct Pump<I: StorageIo + Clone + 'static> {
    io: I,
    clock: Rc<dyn Clock>,
    storage: PumpStorage,
    partitions: BTreeMap<PartitionKey, Partition<I>>,
    /// Deleted data this shard removes in the background.
    trash: Trash<I>,
    /// Storage ids of the partitions removed since start (the most recent
    /// `limits::REMOVED_PARTITIONS_REMEMBERED`): never opened again.
    removed: BTreeSet<u64>,
    /// Partitions whose log must be fsynced in the next commit phase.
    log_sync: BTreeSet<PartitionKey>,
    /// `replicated` partitions whose flush policy asks for a background
    /// sync after the next commit phase's writes.
    background_due: BTreeSet<PartitionKey>,
    /// Partitions whose consumer offsets must be fsynced.
    offsets_sync: BTreeSet<PartitionKey>,
    waiters: Vec<Waiter>,
    background: Vec<BackgroundSync<I::File>>,
    /// Polls waiting for a disk read of their partition (see
    /// [`Pump::poll_parked`]); the pump serves other ops meanwhile.
    parked: Vec<reads::ParkedPoll>,
    pub counters: PumpCounters,
    /// An append or poll ran since the last idle check.
    busy: bool,
    fatal: Option<FatalError>,
    /// µs an op waited in the inbox; µs per fsync. Reset at each report.
    queue_wait: hdrhistogram::Histogram<u64>,
    fsync: hdrhistogram::Histogram<u64>,
    /// Replication above this shard, on a cluster node.
    replication: Option<Rc<dyn crate::shard::replica::Replication>>,
    /// Where this shard's groups send their Raft log operations.
    raft_queue: crate::shard::replica::RaftQueue,
    /// A replicated partition's poll auto-committed this offset: proposed
    /// before the poll is answered.
    auto_commit: Option<(ConsumerKey, u64)>,
    /// Replicated partitions' offset writes of this round, proposed as one
    /// offsets entry per partition at the commit phase (`offsets.rs`).
    offset_proposals: BTreeMap<PartitionKey, offsets::PendingOffsets>,
    /// The entries replicated partitions appended last, for the reads
    /// that follow (`entry_cache.rs`).
    entry_cache: entry_cache::EntryCache,
}

fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    // 1 µs .. 1 h at 2 significant digits: a few KiB, no allocation later.
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2)
        .expect("static histogram bounds are valid")
}

fn elapsed_us(since: std::time::Instant) -> u64 {
    since.elapsed().as_micros().max(1) as u64
}

impl<I: StorageIo + Clone + 'static> std::fmt::Debug for Pump<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("data_dir", &self.storage.data_dir)
            .field("partitions", &self.partitions.len())
            .field("waiters", &self.waiters.len())
            .field("background", &self.background.len())
            .finish()
    }
}

impl<I: StorageIo + Clone + 'static> Pump<I> {
    pub fn new(io: I, clock: Rc<dyn Clock>, mut storage: PumpStorage) -> Pump<I> {
        let trash = Trash::new(
            io.clone(),
            &storage.data_dir,
            std::mem::take(&mut storage.trash),
        );
        Pump {
            io,
            clock,
            storage,
            partitions: BTreeMap::new(),
            trash,
            removed: BTreeSet::new(),
            log_sync: BTreeSet::new(),
            background_due: BTreeSet::new(),
            offsets_sync: BTreeSet::new(),
            waiters: Vec::new(),
            background: Vec::new(),
            parked: Vec::new(),
            counters: PumpCounters::default(),
            busy: false,
            fatal: None,
            queue_wait: latency_histogram(),
            fsync: latency_histogram(),
            replication: None,
            auto_commit: None,
            offset_proposals: BTreeMap::new(),
            raft_queue: crate::shard::replica::RaftQueue::default(),
            entry_cache: entry_cache::EntryCache::new(
                crate::limits::ENTRY_CACHE_BYTES,
                crate::limits::ENTRY_CACHE_ENTRIES,
            ),
        }
    }

    pub fn record_queue_wait(&mut self, waited: std::time::Duration) {
        self.queue_wait
            .saturating_record(waited.as_micros().max(1) as u64);
    }

    /// Percentiles of the queue-wait and fsync histograms since the last
    /// call; both restart.
    pub fn take_latencies(
        &mut self,
    ) -> (
        crate::shard::heartbeat::Latency,
        crate::shard::heartbeat::Latency,
    ) {
        let latencies = (
            crate::shard::heartbeat::Latency::of(&self.queue_wait),
            crate::shard::heartbeat::Latency::of(&self.fsync),
        );
        self.queue_wait.reset();
        self.fsync.reset();
        latencies
    }

    /// Once a second (the shard's report tick): read windows no poll used
    /// since the last tick are released; when the shard did no appends or
    /// polls since then, the pool's idle buffers are freed too and the
    /// allocator returns free memory to the system, so the daemon's memory
    /// goes back toward idle after a burst. Returns the bytes the pool
    /// freed.
    pub fn release_idle_memory(&mut self) -> u64 {
        for partition in self.partitions.values() {
            partition.log.release_idle_window();
        }
        if std::mem::take(&mut self.busy) {
            return 0;
        }
        let freed = self.storage.pool.trim();
        if freed > 0 {
            // SAFETY: malloc_trim only releases free heap memory; it is
            // safe to call at any time from any thread.
            unsafe {
                libc::malloc_trim(0);
            }
        }
        freed
    }

    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// The partitions this pump holds.
    pub fn keys(&self) -> Vec<PartitionKey> {
        self.partitions.keys().copied().collect()
    }

    pub fn holds(&self, key: &PartitionKey) -> bool {
        self.partitions.contains_key(key)
    }

    /// The shard's buffer pool (for the console and trimming when idle).
    pub fn pool(&self) -> &BufferPool {
        &self.storage.pool
    }

    /// Background syncs running.
    pub fn background_syncs(&self) -> usize {
        self.background.len()
    }

    /// What this shard's trash holds and has removed.
    pub fn trash_stats(&self) -> TrashStats {
        self.trash.stats()
    }

    /// Set once a partition failed in a way that forbids further
    /// acknowledgements; the shard must stop.
    pub fn fatal(&self) -> Option<&FatalError> {
        self.fatal.as_ref()
    }

    fn note_fatal(&mut self, key: PartitionKey, error: &PumpError) {
        if error.is_fatal() && self.fatal.is_none() {
            tracing::error!(partition = %key, %error, "fatal storage error: no more acknowledgements");
            self.fatal = Some(FatalError {
                key,
                error: PumpError::Storage(StorageError::Poisoned {
                    reason: error.to_string(),
                }),
            });
        }
    }

    fn partition(&mut self, key: PartitionKey) -> Result<&mut Partition<I>, PumpError> {
        self.partitions.get_mut(&key).ok_or(PumpError::NotHere(key))
    }

    /// Parks `answer` until `need` is met (checked in the commit phase).
    fn park(&mut self, key: PartitionKey, need: Need, answer: Answer) {
        let epoch = match self.partitions.get(&key) {
            Some(partition) => partition.log.epoch(),
            None => {
                answer.fail(PumpError::NotHere(key));
                return;
            }
        };
        self.waiters.push(Waiter {
            key,
            epoch,
            need,
            answer,
        });
    }

    /// Apply one op. Acknowledgements that need a write or durability are
    /// parked until `commit`.
    pub async fn apply(&mut self, op: PartitionOp) {
        if self.fatal.is_some() {
            reply_stopping(op);
            return;
        }
        if matches!(op, PartitionOp::Append { .. } | PartitionOp::Poll { .. }) {
            self.busy = true;
        }
        match op {
            PartitionOp::Open {
                key,
                settings,
                reply,
            } => {
                let result = self.open(key, settings).await;
                send(reply, result);
            }
            PartitionOp::Remove { key, reply } => {
                let result = self.remove(key).await;
                send(reply, result);
            }
            PartitionOp::Append { key, batch, reply }
                if self
                    .partitions
                    .get(&key)
                    .is_some_and(|partition| partition.replica.is_some()) =>
            {
                self.propose(key, &batch, reply);
            }
            PartitionOp::Append { key, batch, reply } => match self.append(key, &batch).await {
                Ok((ack, durability)) => {
                    let upto = ack.last_offset + 1;
                    assert!(ack.base_offset <= ack.last_offset);
                    let need = match durability {
                        Durability::Persisted => {
                            self.log_sync.insert(key);
                            Need::Durable { upto }
                        }
                        Durability::Replicated => Need::Written { upto },
                    };
                    self.park(key, need, Answer::Append { ack, reply });
                }
                Err(error) => {
                    self.note_fatal(key, &error);
                    send(reply, Err(error));
                }
            },
            PartitionOp::Poll {
                key,
                request,
                reply,
            } => self.run_poll(key, request, reply, true).await,
            PartitionOp::GetOffset {
                key,
                consumer,
                reply,
            } => {
                if let Err(error) = self.offsets_readable(key).await {
                    self.note_fatal(key, &error);
                    send(reply, Err(error));
                    return;
                }
                let result = self.partition(key).map(|partition| {
                    partition
                        .offsets
                        .get(consumer)
                        .map(|stored_offset| StoredOffset {
                            current_offset: partition.log.current_offset(),
                            stored_offset,
                        })
                });
                send(reply, result);
            }
            PartitionOp::StoreOffset {
                key,
                consumer,
                offset,
                reply,
            } => {
                if self.is_replicated(key) {
                    match self.check_offset(key, consumer, offset) {
                        Ok(()) => self.propose_offset_write(
                            key,
                            OffsetWrite::Store { consumer, offset },
                            Box::new(move |result| send(reply, result)),
                        ),
                        Err(error) => send(reply, Err(error)),
                    }
                    return;
                }
                let result = self.store_offset(key, consumer, offset).await;
                self.answer_offset_change(key, result, reply);
            }
            PartitionOp::DeleteOffset {
                key,
                consumer,
                reply,
            } => {
                if self.is_replicated(key) {
                    let known = self.offsets_readable(key).await.and_then(|()| {
                        let partition = self.partition(key)?;
                        match partition.offsets.get(consumer) {
                            Some(_) => Ok(()),
                            None => Err(PumpError::OffsetNotFound),
                        }
                    });
                    match known {
                        Ok(()) => self.propose_offset_write(
                            key,
                            OffsetWrite::Delete { consumer },
                            Box::new(move |result| send(reply, result)),
                        ),
                        Err(error) => {
                            self.note_fatal(key, &error);
                            send(reply, Err(error));
                        }
                    }
                    return;
                }
                let result = self.delete_offset(key, consumer).await;
                self.answer_offset_change(key, result, reply);
            }
            PartitionOp::Purge { key, reply } => {
                if self.is_replicated(key) {
                    // Every replica deletes the messages once the purge
                    // entry is applied there.
                    self.propose_purge(key, u64::MAX, Box::new(move |result| send(reply, result)));
                    return;
                }
                let result = self.purge(key).await;
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            PartitionOp::DeleteSegments { key, count, reply } => {
                if self.is_replicated(key) {
                    self.delete_replicated_segments(key, count as usize, reply);
                    return;
                }
                let result = match self.partitions.get_mut(&key) {
                    Some(partition) => partition
                        .log
                        .delete_oldest_segments(count as usize, &mut self.trash)
                        .await
                        .map_err(PumpError::from),
                    None => Err(PumpError::NotHere(key)),
                };
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            PartitionOp::Flush { key, fsync, reply } => {
                let upto = match self.partition(key) {
                    Ok(partition) => partition.log.next_offset(),
                    Err(error) => {
                        send(reply, Err(error));
                        return;
                    }
                };
                // Everything appended so far is written in this round's
                // commit phase; with `fsync` it is synced there too.
                let need = if fsync {
                    self.log_sync.insert(key);
                    Need::Durable { upto }
                } else {
                    Need::Written { upto }
                };
                self.park(key, need, Answer::Done { reply });
            }
            PartitionOp::Report { reply } => send(reply, Ok(self.report())),
            PartitionOp::SyncAll { reply } => {
                let before = self.counters.fsyncs;
                self.sync_all().await;
                let result = match &self.fatal {
                    Some(fatal) => Err(PumpError::Storage(StorageError::Poisoned {
                        reason: fatal.to_string(),
                    })),
                    None => Ok(self.counters.fsyncs - before),
                };
                send(reply, result);
            }
            PartitionOp::FlushTick => {
                for partition in self.partitions.values() {
                    if partition.log.unsynced_bytes() > 0 || partition.log.has_pending() {
                        self.background_due.insert(partition.key);
                    }
                    if partition.offsets.is_unsynced() {
                        self.offsets_sync.insert(partition.key);
                    }
                }
            }
            PartitionOp::RetentionTick => self.retain().await,
            PartitionOp::TrashTick => {
                use crate::limits::{
                    TRASH_REMOVALS_PER_ROUND, TRASH_ROUNDS_PER_TICK, TRASH_TICK_TIME,
                };
                let started = self.clock.now_micros();
                let deadline = started.saturating_add(TRASH_TICK_TIME.as_micros() as u64);
                for _ in 0..TRASH_ROUNDS_PER_TICK {
                    let removed = self.trash.collect(started, TRASH_REMOVALS_PER_ROUND).await;
                    if removed < TRASH_REMOVALS_PER_ROUND || self.clock.now_micros() >= deadline {
                        break;
                    }
                }
            }
        }
    }

    async fn append(
        &mut self,
        key: PartitionKey,
        batch: &ValidBatch,
    ) -> Result<(AppendAck, Durability), PumpError> {
        let bytes = batch.len() as u64;
        let partition = self.partition(key)?;
        let next_before = partition.log.next_offset();
        let appended = partition.log.append(batch).await?;
        // Offsets are dense: the batch took the next ones, all of them
        // (the acknowledgement's `upto` relies on it).
        assert!(appended.base_offset == next_before);
        assert!(appended.last_offset + 1 == partition.log.next_offset());
        let durability = partition.settings.durability;
        let messages = appended.last_offset - appended.base_offset + 1;
        self.counters.messages_in += messages;
        self.counters.bytes_in += bytes;
        let ack = AppendAck {
            base_offset: appended.base_offset,
            last_offset: appended.last_offset,
        };
        Ok((ack, durability))
    }

    /// Partition numbers for requests (GetStreams and friends): no segment
    /// list, so a flood of them costs no allocation per segment.
    pub fn report(&self) -> Vec<PartitionReport> {
        self.report_of(false)
    }

    /// The once-a-second report: also every segment (the console's view).
    pub fn published_report(&self) -> Vec<PartitionReport> {
        self.report_of(true)
    }

    fn report_of(&self, segments: bool) -> Vec<PartitionReport> {
        self.partitions
            .values()
            .map(|partition| PartitionReport {
                key: partition.key,
                stats: partition.log.stats(),
                current_offset: partition.log.current_offset(),
                durable_next_offset: partition.log.durable_next_offset(),
                sealed_segments: partition
                    .log
                    .sealed_segments()
                    .iter()
                    .map(|segment| (segment.size_bytes, segment.last_timestamp))
                    .collect(),
                consumer_offsets: partition.offsets.iter().collect(),
                segments: if segments {
                    partition.log.segment_infos()
                } else {
                    Vec::new()
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
