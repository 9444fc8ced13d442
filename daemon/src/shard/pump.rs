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

pub use super::op::{
    AppendAck, PartitionOp, PartitionReport, PollRequest, PollResult, PumpError, Reply,
    StoredOffset,
};
use super::op::{POLL_HEADROOM, answer as send, reply_stopping};
use super::partition::{Durability, Partition, PartitionKey, PartitionSettings};
use crate::batch::ValidBatch;
use crate::protocol::primitives::PollingStrategy;
use crate::storage::consumer_offsets::{ConsumerKey, ConsumerOffsets};
use crate::storage::{
    Access, BufferPool, Clock, LogEpoch, PartitionConfig, PartitionLog, StorageError, StorageIo,
    SyncJob,
};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

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
}

pub struct Pump<I: StorageIo + Clone + 'static> {
    io: I,
    clock: Rc<dyn Clock>,
    storage: PumpStorage,
    partitions: BTreeMap<PartitionKey, Partition<I>>,
    /// Partitions whose log must be fsynced in the next commit phase.
    log_sync: BTreeSet<PartitionKey>,
    /// `replicated` partitions whose flush policy asks for a background
    /// sync after the next commit phase's writes.
    background_due: BTreeSet<PartitionKey>,
    /// Partitions whose consumer offsets must be fsynced.
    offsets_sync: BTreeSet<PartitionKey>,
    waiters: Vec<Waiter>,
    background: Vec<BackgroundSync<I::File>>,
    pub counters: PumpCounters,
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
    pub fn new(io: I, clock: Rc<dyn Clock>, storage: PumpStorage) -> Pump<I> {
        Pump {
            io,
            clock,
            storage,
            partitions: BTreeMap::new(),
            log_sync: BTreeSet::new(),
            background_due: BTreeSet::new(),
            offsets_sync: BTreeSet::new(),
            waiters: Vec::new(),
            background: Vec::new(),
            counters: PumpCounters::default(),
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
        let dir = key.dir(&self.storage.data_dir);
        let config = PartitionConfig::new(u64::from(key.partition), settings.segment_size_bytes)
            .with_access(self.storage.access);
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
            } => match self.poll(key, request).await {
                Ok((result, Some(Durability::Persisted))) => {
                    self.offsets_sync.insert(key);
                    self.park(key, Need::OffsetsSynced, Answer::Poll { result, reply });
                }
                Ok((result, _)) => send(reply, Ok(result)),
                Err(error) => {
                    self.note_fatal(key, &error);
                    send(reply, Err(error));
                }
            },
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
                let result = match self.partition(key) {
                    Ok(partition) => partition
                        .log
                        .delete_oldest_segments(count as usize)
                        .await
                        .map_err(PumpError::from),
                    Err(error) => Err(error),
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
    async fn poll(
        &mut self,
        key: PartitionKey,
        request: PollRequest,
    ) -> Result<(PollResult, Option<Durability>), PumpError> {
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
        let cap = crate::limits::READ_BYTES_MAX_DEFAULT;
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
        let records = read.bytes.len() - POLL_HEADROOM;
        let result = PollResult {
            current_offset,
            message_count: read.message_count,
            bytes: read.bytes,
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

    async fn store_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
    ) -> Result<Durability, PumpError> {
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

    async fn purge(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let partition = self.partition(key)?;
        partition.log.purge().await?;
        partition.offsets.clear().await?;
        // Anything parked for this partition refers to purged data (the
        // epoch's purge count tells its waiters), and the purge itself is
        // durable now.
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        Ok(())
    }

    async fn remove(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.remove(&key) else {
            return Ok(());
        };
        drop(partition);
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.storage.data_dir);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(PumpError::Storage(StorageError::io(
                    "remove partition",
                    &dir,
                    source,
                )));
            }
        }
        if let Some(parent) = dir.parent()
            && let Err(source) = self.io.sync_dir(parent).await
        {
            return Err(PumpError::Storage(StorageError::io(
                "sync dir", parent, source,
            )));
        }
        Ok(())
    }

    pub fn report(&self) -> Vec<PartitionReport> {
        self.partitions
            .values()
            .map(|partition| PartitionReport {
                key: partition.key,
                stats: partition.log.stats(),
                current_offset: partition.log.current_offset(),
                sealed_segments: partition
                    .log
                    .sealed_segments()
                    .iter()
                    .map(|segment| (segment.size_bytes, segment.last_timestamp))
                    .collect(),
                consumer_offsets: partition.offsets.iter().collect(),
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
            match partition.log.delete_oldest_segments(count).await {
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

    /// The commit phase (see the module doc): write, sync, release
    /// acknowledgements, start background syncs.
    pub async fn commit(&mut self) {
        let idle = self.log_sync.is_empty()
            && self.offsets_sync.is_empty()
            && self.background_due.is_empty()
            && self.waiters.is_empty()
            && !self
                .partitions
                .values()
                .any(|partition| partition.log.has_pending());
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
            .filter(|partition| partition.log.has_pending())
            .map(|partition| async {
                let result = partition.log.write_pending().await;
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
                Ok(()) => {}
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
        for key in std::mem::take(&mut self.log_sync) {
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
            if let Err(error) = partition.log.end_sync(job, outcome) {
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
        self.sync_all().await;
        let mut failures = Vec::new();
        for partition in self.partitions.values_mut() {
            if let Err(error) = partition.log.close().await {
                failures.push((partition.key, PumpError::from(error)));
            }
        }
        for (key, error) in failures {
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
mod tests {
    use super::*;
    use crate::batch::{MessageSpec, encode_producer_batch};
    use crate::protocol::codes::Status;
    use crate::storage::consumer_offsets::ConsumerKind;
    use crate::storage::sim::{SimClock, SimIo, block_on};

    const KEY: PartitionKey = PartitionKey {
        stream: 0,
        topic: 0,
        partition: 0,
    };
    const CONSUMER: ConsumerKey = ConsumerKey {
        kind: ConsumerKind::Consumer,
        id: 7,
    };

    fn storage() -> PumpStorage {
        PumpStorage {
            data_dir: PathBuf::from("/data"),
            access: Access::Direct,
            pool: BufferPool::new(1 << 20),
        }
    }

    fn batch(messages: usize) -> ValidBatch {
        let specs: Vec<MessageSpec> = (0..messages)
            .map(|index| MessageSpec {
                id: index as u128 + 1,
                timestamp_delta: 0,
                payload: vec![b'x'; 100],
                user_headers: Vec::new(),
            })
            .collect();
        let bytes = encode_producer_batch(1_000, &specs);
        let len = bytes.len();
        ValidBatch::new(bytes, 0..len).unwrap()
    }

    fn pump(io: &SimIo, durability: Durability) -> Pump<SimIo> {
        let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
        let settings = PartitionSettings {
            durability,
            ..PartitionSettings::default()
        };
        block_on(pump.open(KEY, settings)).unwrap();
        pump
    }

    fn channel<T>() -> (Reply<T>, flume::Receiver<Result<T, PumpError>>) {
        flume::bounded(1)
    }

    fn poll(pump: &mut Pump<SimIo>, strategy: PollingStrategy, auto_commit: bool) -> PollResult {
        let (reply, answer) = channel();
        let request = PollRequest {
            consumer: Some(CONSUMER),
            strategy,
            count: 100,
            auto_commit,
        };
        block_on(async {
            pump.apply(PartitionOp::Poll {
                key: KEY,
                request,
                reply,
            })
            .await;
            pump.commit().await;
        });
        answer.try_recv().unwrap().unwrap()
    }

    // Proves group commit for `persisted`: appends are acknowledged only in
    // the commit phase, several appends share one fsync, and a poll before
    // the commit sees none of them (nothing a crash could take back).
    #[test]
    fn persisted_acks_wait_for_one_shared_fsync_and_reads_see_only_durable_data() {
        let io = SimIo::new(1);
        let mut pump = pump(&io, Durability::Persisted);
        let answers: Vec<_> = (0..3)
            .map(|_| {
                let (reply, answer) = channel();
                block_on(pump.apply(PartitionOp::Append {
                    key: KEY,
                    batch: batch(10),
                    reply,
                }));
                answer
            })
            .collect();
        assert!(
            answers.iter().all(|answer| answer.try_recv().is_err()),
            "no ack before commit"
        );
        let (reply, early) = channel();
        let request = PollRequest {
            consumer: None,
            strategy: PollingStrategy::First,
            count: 100,
            auto_commit: false,
        };
        block_on(pump.apply(PartitionOp::Poll {
            key: KEY,
            request,
            reply,
        }));
        assert_eq!(early.try_recv().unwrap().unwrap().message_count, 0);
        let fsyncs_before = pump.counters.fsyncs;
        block_on(pump.commit());
        assert_eq!(
            pump.counters.fsyncs - fsyncs_before,
            1,
            "one fsync for three appends"
        );
        let acks: Vec<AppendAck> = answers
            .iter()
            .map(|answer| answer.try_recv().unwrap().unwrap())
            .collect();
        assert_eq!(
            acks[0],
            AppendAck {
                base_offset: 0,
                last_offset: 9
            }
        );
        assert_eq!(
            acks[2],
            AppendAck {
                base_offset: 20,
                last_offset: 29
            }
        );
        // Acknowledged means durable: a crash right now loses nothing.
        io.crash();
        let mut reopened = pump_reopen(&io, Durability::Persisted);
        assert_eq!(
            poll(&mut reopened, PollingStrategy::First, false).message_count,
            30
        );
    }

    fn pump_reopen(io: &SimIo, durability: Durability) -> Pump<SimIo> {
        pump(io, durability)
    }

    // Proves `replicated` acknowledges once the commit phase wrote the
    // batch (not before), and serves it from then on.
    #[test]
    fn replicated_acks_on_write() {
        let io = SimIo::new(2);
        let mut pump = pump(&io, Durability::Replicated);
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(5),
            reply,
        }));
        assert!(answer.try_recv().is_err(), "no ack before the write");
        assert_eq!(
            poll(&mut pump, PollingStrategy::First, false).message_count,
            0,
            "an unwritten batch is not visible"
        );
        block_on(pump.commit());
        assert_eq!(answer.try_recv().unwrap().unwrap().last_offset, 4);
        assert_eq!(
            poll(&mut pump, PollingStrategy::Offset(2), false).message_count,
            3
        );
    }

    // Proves next-polling resumes after the auto-committed offset, and the
    // offset rules: beyond the end is 4100, deleting nothing is 3021.
    #[test]
    fn next_polling_with_auto_commit_and_offset_rules() {
        let io = SimIo::new(3);
        let mut pump = pump(&io, Durability::Persisted);
        let (reply, _answer) = channel();
        block_on(async {
            pump.apply(PartitionOp::Append {
                key: KEY,
                batch: batch(4),
                reply,
            })
            .await;
            pump.commit().await;
        });
        assert_eq!(
            poll(&mut pump, PollingStrategy::Next, true).message_count,
            4
        );
        assert_eq!(
            poll(&mut pump, PollingStrategy::Next, true).message_count,
            0
        );
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::GetOffset {
            key: KEY,
            consumer: CONSUMER,
            reply,
        }));
        let stored = answer.try_recv().unwrap().unwrap().unwrap();
        assert_eq!(
            stored,
            StoredOffset {
                current_offset: 3,
                stored_offset: 3
            }
        );

        let (reply, answer) = channel();
        let op = PartitionOp::StoreOffset {
            key: KEY,
            consumer: CONSUMER,
            offset: 99,
            reply,
        };
        block_on(pump.apply(op));
        assert_eq!(
            answer.try_recv().unwrap().unwrap_err().status(),
            Status::InvalidOffset
        );
        let (reply, answer) = channel();
        let op = PartitionOp::StoreOffset {
            key: KEY,
            consumer: CONSUMER,
            offset: 1,
            reply,
        };
        block_on(async {
            pump.apply(op).await;
            pump.commit().await;
        });
        answer.try_recv().unwrap().unwrap();
        assert_eq!(
            poll(&mut pump, PollingStrategy::Next, false).message_count,
            2
        );

        let other = ConsumerKey {
            kind: ConsumerKind::Group,
            id: 1,
        };
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::DeleteOffset {
            key: KEY,
            consumer: other,
            reply,
        }));
        assert_eq!(
            answer.try_recv().unwrap().unwrap_err().status(),
            Status::ConsumerOffsetNotFound
        );
    }

    // Proves purge deletes messages and offsets and restarts offsets at 0,
    // and that an unknown partition is 3007.
    #[test]
    fn purge_resets_and_unknown_partitions_are_not_found() {
        let io = SimIo::new(4);
        let mut pump = pump(&io, Durability::Replicated);
        let (reply, _answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(3),
            reply,
        }));
        block_on(pump.commit());
        poll(&mut pump, PollingStrategy::Next, true);
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Purge { key: KEY, reply }));
        answer.try_recv().unwrap().unwrap();
        assert_eq!(
            poll(&mut pump, PollingStrategy::First, false).message_count,
            0
        );
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(1),
            reply,
        }));
        block_on(pump.commit());
        assert_eq!(answer.try_recv().unwrap().unwrap().base_offset, 0);
        assert_eq!(
            poll(&mut pump, PollingStrategy::Next, false).message_count,
            1
        );

        let missing = PartitionKey {
            stream: 9,
            topic: 9,
            partition: 9,
        };
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: missing,
            batch: batch(1),
            reply,
        }));
        assert_eq!(
            answer.try_recv().unwrap().unwrap_err().status(),
            Status::PartitionNotFound
        );
    }

    // Regression (pump simulation): on a `replicated` topic with `persisted`
    // consumer offsets, an offset can be durable while the messages it points
    // at are not. After a power loss the offset must not point past the
    // recovered log, or `Next` would skip the messages appended next.
    #[test]
    fn a_consumer_offset_past_the_recovered_log_is_clamped_on_open() {
        let io = SimIo::new(6);
        let settings = PartitionSettings {
            durability: Durability::Replicated,
            offset_durability: Durability::Persisted,
            ..PartitionSettings::default()
        };
        let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
        block_on(pump.open(KEY, settings)).unwrap();
        let (reply, _answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(5),
            reply,
        }));
        block_on(pump.commit());
        let (reply, answer) = channel();
        block_on(async {
            pump.apply(PartitionOp::StoreOffset {
                key: KEY,
                consumer: CONSUMER,
                offset: 4,
                reply,
            })
            .await;
            pump.commit().await;
        });
        answer.try_recv().unwrap().unwrap();
        io.crash();
        let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(2_000_000)), storage());
        block_on(pump.open(KEY, settings)).unwrap();
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::GetOffset {
            key: KEY,
            consumer: CONSUMER,
            reply,
        }));
        assert_eq!(answer.try_recv().unwrap().unwrap(), None);
        let (reply, _answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(3),
            reply,
        }));
        block_on(pump.commit());
        assert_eq!(
            poll(&mut pump, PollingStrategy::Next, false).message_count,
            3
        );
    }

    // Proves size retention: a partition over 90 % of its `max_topic_size`
    // share loses its oldest sealed segments until it is under, the active
    // segment stays even when it alone is over, and the newest data stays
    // readable.
    #[test]
    fn retention_trims_the_oldest_sealed_segments_to_the_size_share() {
        let io = SimIo::new(6);
        let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
        // One 10-message batch is about 1.7 KiB; 4 KiB segments hold 2-3.
        let settings = PartitionSettings {
            durability: Durability::Replicated,
            segment_size_bytes: 4096,
            max_size_bytes: Some(10_000),
            ..PartitionSettings::default()
        };
        block_on(pump.open(KEY, settings)).unwrap();
        for _ in 0..30 {
            let (reply, answer) = channel();
            block_on(pump.apply(PartitionOp::Append {
                key: KEY,
                batch: batch(10),
                reply,
            }));
            block_on(pump.commit());
            answer.try_recv().unwrap().unwrap();
        }
        let before = pump.partitions[&KEY].log.stats();
        assert!(before.bytes > 40_000, "{before:?}");
        assert!(before.segments > 10, "{before:?}");

        block_on(pump.apply(PartitionOp::RetentionTick));
        let after = pump.partitions[&KEY].log.stats();
        assert!(
            after.bytes <= 9_000,
            "trimmed to 90 % of the share: {after:?}"
        );
        assert!(after.first_offset > 0);
        assert_eq!(after.next_offset, 300, "the newest messages stay");
        let newest = poll(&mut pump, PollingStrategy::Last, false);
        assert_eq!(newest.message_count, 100.min(after.messages as u32));

        // A share smaller than the active segment: only sealed ones go.
        pump.partitions
            .get_mut(&KEY)
            .unwrap()
            .settings
            .max_size_bytes = Some(1);
        block_on(pump.apply(PartitionOp::RetentionTick));
        let last = pump.partitions[&KEY].log.stats();
        assert_eq!(last.segments, 1, "{last:?}");
        assert_eq!(last.next_offset, 300);
    }

    // Proves a failed fsync fails every acknowledgement waiting on it and
    // makes the pump fatal (so the daemon stops instead of lying).
    #[test]
    fn a_failed_fsync_fails_waiting_acks_and_is_fatal() {
        let io = SimIo::new(5);
        let mut pump = pump(&io, Durability::Persisted);
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(2),
            reply,
        }));
        io.fail_next_fsync();
        block_on(pump.commit());
        assert!(answer.try_recv().unwrap().is_err());
        assert!(pump.fatal().is_some());
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(1),
            reply,
        }));
        assert!(matches!(
            answer.try_recv().unwrap(),
            Err(PumpError::Stopping)
        ));
    }
}
