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

use super::op::{POLL_HEADROOM, answer as send, reply_stopping};
use super::partition::{Durability, Partition, PartitionKey, PartitionSettings};
use crate::batch::ValidBatch;
use crate::protocol::primitives::PollingStrategy;
use crate::storage::consumer_offsets::{ConsumerKey, ConsumerOffsets};
use crate::storage::trash::{DiscardError, Trash, TrashStart, TrashStats};
use crate::storage::{
    Access, BufferPool, Clock, LogEpoch, PartitionConfig, PartitionLog, StorageError, StorageIo,
    SyncJob,
};
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
}

impl Answer {
    fn fail(self, error: PumpError) {
        match self {
            Answer::Append { reply, .. } => send(reply, Err(error)),
            Answer::Poll { reply, .. } => send(reply, Err(error)),
            Answer::Done { reply } => send(reply, Err(error)),
        }
    }

    fn succeed(self) {
        match self {
            Answer::Append { ack, reply } => send(reply, Ok(ack)),
            Answer::Poll { result, reply } => send(reply, Ok(result)),
            Answer::Done { reply } => send(reply, Ok(())),
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

/// A poll whose read waits for the disk: answered when the read is done.
struct ParkedPoll {
    key: PartitionKey,
    request: PollRequest,
    reply: Reply<PollResult>,
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
    /// Bytes of a read window (`limits::READ_WINDOW_BYTES`; small in the
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
    parked: Vec<ParkedPoll>,
    pub counters: PumpCounters,
    /// An append or poll ran since the last idle check.
    busy: bool,
    fatal: Option<FatalError>,
    /// µs an op waited in the inbox; µs per fsync. Reset at each report.
    queue_wait: hdrhistogram::Histogram<u64>,
    fsync: hdrhistogram::Histogram<u64>,
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

    /// Open (or create) a partition and recover it. Used by `Open` and at
    /// start-up for every partition this shard owns.
    pub async fn open(
        &mut self,
        key: PartitionKey,
        settings: PartitionSettings,
    ) -> Result<(), PumpError> {
        if let Some(partition) = self.partitions.get_mut(&key) {
            partition.settings = settings;
            return Ok(());
        }
        if self.removed.contains(&key.storage_id) {
            // Removed already (an open or a settings refresh that lost the
            // race with a delete): its directory must not come back.
            return Ok(());
        }
        let dir = key.dir(&self.storage.data_dir);
        let config = PartitionConfig::new(u64::from(key.partition), settings.segment_size_bytes)
            .with_access(self.storage.access)
            .with_read_window(self.storage.read_window_bytes);
        let log = PartitionLog::open(
            self.io.clone(),
            &dir,
            config,
            self.clock.clone(),
            self.storage.pool.clone(),
        )
        .await?;
        let (mut offsets, _dropped) = ConsumerOffsets::open(self.io.clone(), &dir).await?;
        repair_consumer_offsets(&key, &log, &mut offsets).await?;
        self.partitions.insert(
            key,
            Partition {
                key,
                log,
                offsets,
                settings,
            },
        );
        Ok(())
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
            PartitionOp::Append { key, batch, reply } => match self.append(key, &batch).await {
                Ok((ack, durability)) => {
                    let upto = ack.last_offset + 1;
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
                let result = self.store_offset(key, consumer, offset).await;
                self.answer_offset_change(key, result, reply);
            }
            PartitionOp::DeleteOffset {
                key,
                consumer,
                reply,
            } => {
                let result = self.delete_offset(key, consumer).await;
                self.answer_offset_change(key, result, reply);
            }
            PartitionOp::Purge { key, reply } => {
                let result = self.purge(key).await;
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            PartitionOp::DeleteSegments { key, count, reply } => {
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

    /// Answers a consumer-offset store or delete: at once when its topic's
    /// offsets are `replicated`, after the commit phase's sync otherwise.
    fn answer_offset_change(
        &mut self,
        key: PartitionKey,
        result: Result<Durability, PumpError>,
        reply: Reply<()>,
    ) {
        match result {
            Ok(Durability::Persisted) => {
                self.offsets_sync.insert(key);
                self.park(key, Need::OffsetsSynced, Answer::Done { reply });
            }
            Ok(Durability::Replicated) => send(reply, Ok(())),
            Err(error) => {
                self.note_fatal(key, &error);
                send(reply, Err(error));
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
        let appended = partition.log.append(batch).await?;
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

    /// Serve a poll; returns the offset durability when auto-commit stored
    /// an offset that must be synced before the reply.
    ///
    /// On a `persisted` topic a poll sees only durable messages: a consumer
    /// never reads a message that a crash could still take back (and that
    /// its producer has not been acknowledged for).
    /// Runs a poll and answers it. With `park`, a poll whose read must wait
    /// for the disk is parked instead (its read goes on; the shard loop
    /// resumes it when [`Pump::poll_parked`] is ready), so one consumer
    /// reading old data does not hold up every other partition of the
    /// shard. A resumed poll runs with `park` off: it waits for what is
    /// still missing, so no poll is parked twice.
    async fn run_poll(
        &mut self,
        key: PartitionKey,
        request: PollRequest,
        reply: Reply<PollResult>,
        park: bool,
    ) {
        self.set_park_reads(key, park);
        let outcome = self.poll(key, request).await;
        self.set_park_reads(key, false);
        match outcome {
            Err(PumpError::Storage(StorageError::ReadInFlight)) => {
                self.counters.polls_parked += 1;
                self.parked.push(ParkedPoll {
                    key,
                    request,
                    reply,
                });
            }
            Ok((result, Some(Durability::Persisted))) => {
                self.offsets_sync.insert(key);
                self.park(key, Need::OffsetsSynced, Answer::Poll { result, reply });
            }
            Ok((result, _)) => send(reply, Ok(result)),
            Err(error) => {
                self.note_fatal(key, &error);
                send(reply, Err(error));
            }
        }
    }

    fn set_park_reads(&self, key: PartitionKey, park: bool) {
        if let Some(partition) = self.partitions.get(&key) {
            partition.log.set_park_reads(park);
        }
    }

    /// Ready when a parked poll can go on: its partition's read is done (or
    /// gone). Polls every parked read, so `cx` is woken by the first that
    /// completes.
    pub fn poll_parked(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let mut ready = false;
        for parked in &self.parked {
            let done = self
                .partitions
                .get(&parked.key)
                .is_none_or(|partition| partition.log.poll_read(cx).is_ready());
            ready |= done;
        }
        if ready {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// Answers every parked poll, each as soon as its read is done (for
    /// callers that drive a pump without the shard loop).
    pub async fn finish_parked(&mut self) {
        while !self.parked.is_empty() {
            std::future::poll_fn(|cx| self.poll_parked(cx)).await;
            self.resume_parked(false).await;
        }
    }

    /// Answers the parked polls whose reads are done (all of them with
    /// `all`, waiting where needed: the shard is stopping).
    pub async fn resume_parked(&mut self, all: bool) {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        for parked in std::mem::take(&mut self.parked) {
            let ready = all
                || self
                    .partitions
                    .get(&parked.key)
                    .is_none_or(|partition| partition.log.poll_read(&mut context).is_ready());
            if ready {
                self.run_poll(parked.key, parked.request, parked.reply, false)
                    .await;
            } else {
                self.parked.push(parked);
            }
        }
    }

    async fn poll(
        &mut self,
        key: PartitionKey,
        request: PollRequest,
    ) -> Result<(PollResult, Option<Durability>), PumpError> {
        if request.auto_commit
            && let Some(consumer) = request.consumer
        {
            self.admit_offset(key, consumer)?;
        }
        let partition = self.partition(key)?;
        let highest_visible = match partition.settings.durability {
            Durability::Persisted => partition.log.durable_offset(),
            Durability::Replicated => partition.log.written_offset(),
        };
        let current_offset = highest_visible.unwrap_or(0);
        let empty = PollResult::empty(current_offset);
        let first = partition.log.first_offset();
        let Some(highest) = highest_visible.filter(|highest| *highest >= first) else {
            return Ok((empty, None));
        };
        if request.count == 0 {
            return Ok((empty, None));
        }
        let cap = request.bytes_max;
        let start = match request.strategy {
            PollingStrategy::Offset(offset) => offset.max(first),
            PollingStrategy::First => first,
            PollingStrategy::Last => (highest + 1)
                .saturating_sub(u64::from(request.count))
                .max(first),
            PollingStrategy::Next => {
                let stored = request
                    .consumer
                    .and_then(|consumer| partition.offsets.get(consumer));
                stored.map_or(0, |stored| stored + 1).max(first)
            }
            PollingStrategy::Timestamp(timestamp) => {
                let probe = partition.log.read_by_timestamp(timestamp, 1, cap).await?;
                match probe.first_offset {
                    Some(offset) => offset,
                    None => return Ok((empty, None)),
                }
            }
        };
        if start > highest {
            return Ok((empty, None));
        }
        let visible = highest - start + 1;
        let count = u64::from(request.count).min(visible) as u32;
        let read = partition
            .log
            .read_by_offset_into(start, count, cap, POLL_HEADROOM)
            .await?;
        assert!(read.headroom == POLL_HEADROOM);
        let records = read.records_len();
        let result = PollResult {
            current_offset,
            message_count: read.message_count,
            bytes: read.bytes,
            shared: read.shared,
        };
        let mut stored = None;
        if request.auto_commit
            && let (Some(consumer), Some(last)) = (request.consumer, read.last_offset)
        {
            partition.offsets.store(consumer, last).await?;
            stored = Some(partition.settings.offset_durability);
        }
        self.counters.messages_out += u64::from(result.message_count);
        self.counters.bytes_out += records as u64;
        Ok((result, stored))
    }

    /// Whether `consumer` may store an offset in partition `key`: it has
    /// one already, or the partition holds fewer than
    /// `limits.max_consumer_offsets_per_partition` (a client allowed to
    /// poll could otherwise make it hold one per name it invents).
    fn admit_offset(&mut self, key: PartitionKey, consumer: ConsumerKey) -> Result<(), PumpError> {
        let max = self.storage.consumer_offsets_max;
        let partition = self.partition(key)?;
        if partition.offsets.get(consumer).is_some() || partition.offsets.len() < max {
            return Ok(());
        }
        self.counters.offsets_refused += 1;
        Err(PumpError::TooManyConsumerOffsets { max })
    }

    async fn store_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
    ) -> Result<Durability, PumpError> {
        self.admit_offset(key, consumer)?;
        let partition = self.partition(key)?;
        let written = partition.log.written_offset();
        if written.is_none_or(|highest| offset > highest) {
            return Err(PumpError::InvalidOffset {
                offset,
                current: written,
            });
        }
        partition.offsets.store(consumer, offset).await?;
        Ok(partition.settings.offset_durability)
    }

    async fn delete_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
    ) -> Result<Durability, PumpError> {
        let partition = self.partition(key)?;
        if !partition.offsets.delete(consumer).await? {
            return Err(PumpError::OffsetNotFound);
        }
        Ok(partition.settings.offset_durability)
    }

    /// Purge: the partition's directory goes to the trash and a fresh one
    /// (segment 0, no consumer offsets) takes its place, durably, before
    /// the reply (see `storage::delete`).
    async fn purge(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.get_mut(&key) else {
            return Err(PumpError::NotHere(key));
        };
        partition.log.purge(&mut self.trash).await?;
        // Anything parked for this partition refers to purged data (the
        // epoch's purge count tells its waiters), and the purge itself is
        // durable now.
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.storage.data_dir);
        match ConsumerOffsets::open(self.io.clone(), &dir).await {
            Ok((offsets, _)) => {
                partition.offsets = offsets;
                Ok(())
            }
            // The old offsets went with the old directory: storing into
            // them now would be storing into the trash.
            Err(error) => Err(PumpError::Storage(StorageError::Poisoned {
                reason: format!("purge could not open fresh consumer offsets: {error}"),
            })),
        }
    }

    /// A deleted partition: closed, its directory moved to the trash. The
    /// delete is already durable in metadata (its storage id is never
    /// listed or given out again), so this never fails: a directory that
    /// cannot be moved is removed where it is, and a failure is reported
    /// by the trash.
    async fn remove(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        self.removed.insert(key.storage_id);
        if self.removed.len() > crate::limits::REMOVED_PARTITIONS_REMEMBERED {
            self.removed.pop_first();
        }
        let bytes = match self.partitions.remove(&key) {
            Some(partition) => partition.log.stats().bytes,
            None => 0,
        };
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.storage.data_dir);
        let label = key.storage_id.to_string();
        match self.trash.discard_durably(&dir, &label, bytes).await {
            Ok(_) => {}
            Err(error @ DiscardError::NotMoved { .. }) => {
                tracing::warn!(partition = %key, %error, "the deleted partition's directory is removed in place");
                self.trash.schedule(dir, bytes);
            }
            Err(error @ DiscardError::NotDurable { .. }) => {
                // A power loss may bring the directory back under
                // `partitions/`; start-up then moves it again.
                tracing::warn!(partition = %key, %error, "moving the deleted partition's directory");
            }
        }
        Ok(())
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

    /// Retention, once per `retention.check_interval`: delete the sealed
    /// segments whose newest message is older than the topic's expiry, then,
    /// while a partition holds more than 90 % of its `max_topic_size` share
    /// (`PartitionSettings::max_size_bytes`), its oldest sealed segments.
    /// The active segment is never deleted, so a partition can stay above
    /// its share by up to one segment.
    async fn retain(&mut self) {
        let now = self.clock.now_micros();
        let mut failures = Vec::new();
        for partition in self.partitions.values_mut() {
            let sealed = partition.log.sealed_segments();
            let expired = match partition.settings.message_expiry_us {
                Some(expiry) => {
                    let cutoff = now.saturating_sub(expiry);
                    sealed
                        .iter()
                        .take_while(|segment| segment.last_timestamp < cutoff)
                        .count()
                }
                None => 0,
            };
            let oversize = match partition.settings.max_size_bytes {
                Some(share) => {
                    let target = share / 10 * 9;
                    let mut bytes = partition.log.stats().bytes;
                    sealed
                        .iter()
                        .take_while(|segment| {
                            let over = bytes > target;
                            bytes = bytes.saturating_sub(segment.size_bytes);
                            over
                        })
                        .count()
                }
                None => 0,
            };
            let count = expired.max(oversize);
            if count == 0 {
                continue;
            }
            match partition
                .log
                .delete_oldest_segments(count, &mut self.trash)
                .await
            {
                Ok(deleted) => tracing::info!(
                    partition = %partition.key,
                    segments = deleted.segments,
                    messages = deleted.messages,
                    bytes = deleted.bytes,
                    expired,
                    oversize,
                    "retention: deleted the oldest segments"
                ),
                Err(error) => failures.push((partition.key, PumpError::from(error))),
            }
        }
        for (key, error) in failures {
            tracing::warn!(partition = %key, %error, "retention failed");
            self.note_fatal(key, &error);
        }
    }
}

/// A power loss can take back messages (the unsynced tail of a `replicated`
/// topic, or a torn one) while a consumer offset pointing at them was
/// already durable. Left alone, such an offset would make `Next` skip the
/// messages later appended at those offsets. Before the partition serves
/// anything, clamp it to the highest stored offset (delete it when nothing
/// was ever stored), durably.
async fn repair_consumer_offsets<I: StorageIo + Clone>(
    key: &PartitionKey,
    log: &PartitionLog<I>,
    offsets: &mut ConsumerOffsets<I>,
) -> Result<(), StorageError> {
    let highest = log.written_offset();
    let stale: Vec<(ConsumerKey, u64)> = offsets
        .iter()
        .filter(|(_, offset)| highest.is_none_or(|highest| *offset > highest))
        .collect();
    for (consumer, offset) in &stale {
        tracing::warn!(
            partition = %key,
            ?consumer,
            offset,
            highest = ?highest,
            "consumer offset points past the recovered log: clamped"
        );
        match highest {
            Some(highest) => offsets.store(*consumer, highest).await?,
            None => {
                offsets.delete(*consumer).await?;
            }
        }
    }
    if !stale.is_empty() {
        offsets.sync().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
