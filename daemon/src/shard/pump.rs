//! The pump: the only code that mutates this shard's partitions. It takes
//! one `PartitionOp` at a time from the shard's bounded inbox and applies it
//! to the partition it names. Periodic work (flush by interval, retention)
//! arrives as ops too, so nothing else ever touches a partition.
//!
//! Group commit: the pump applies every op that is already waiting in the
//! inbox (up to `limits::PUMP_OPS_PER_COMMIT`), then runs one commit phase:
//! every partition with acknowledgements waiting for durability is fsynced
//! once, and only then are those acknowledgements sent. Appends that arrive
//! while an fsync is in flight wait in the inbox and share the next one,
//! across all of the shard's partitions.
//!
//! A failed fsync or write poisons the partition (see `storage`): the waiting
//! acknowledgements get an error, and the pump reports a fatal error so the
//! supervisor stops the daemon and systemd restarts it. The pump never sends
//! a request to another shard's pump, so pumps cannot deadlock each other.

pub use super::op::{
    AppendAck, PartitionOp, PartitionReport, PollRequest, PollResult, PumpError, Reply,
    StoredOffset,
};
use super::op::{answer as send, reply_stopping};
use super::partition::{Durability, Partition, PartitionKey, PartitionSettings};
use crate::protocol::primitives::PollingStrategy;
use crate::storage::consumer_offsets::{ConsumerKey, ConsumerOffsets};
use crate::storage::{Clock, PartitionConfig, PartitionLog, StorageError, StorageIo};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;

/// An acknowledgement held back until the commit phase made it durable.
enum Pending {
    Append {
        key: PartitionKey,
        ack: AppendAck,
        reply: Reply<AppendAck>,
    },
    Poll {
        key: PartitionKey,
        result: PollResult,
        reply: Reply<PollResult>,
    },
    Offset {
        key: PartitionKey,
        reply: Reply<()>,
    },
}

impl Pending {
    fn key(&self) -> PartitionKey {
        match self {
            Pending::Append { key, .. }
            | Pending::Poll { key, .. }
            | Pending::Offset { key, .. } => *key,
        }
    }
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
}

/// A fatal storage failure: stop acknowledging, exit, let systemd restart.
#[derive(Debug, thiserror::Error)]
#[error("partition {key}: {error}")]
pub struct FatalError {
    pub key: PartitionKey,
    pub error: PumpError,
}

pub struct Pump<I: StorageIo + Clone> {
    io: I,
    clock: Rc<dyn Clock>,
    data_dir: PathBuf,
    partitions: BTreeMap<PartitionKey, Partition<I>>,
    /// Partitions whose log must be fsynced in the next commit phase.
    log_sync: BTreeSet<PartitionKey>,
    /// Partitions whose consumer offsets must be fsynced.
    offsets_sync: BTreeSet<PartitionKey>,
    pending: Vec<Pending>,
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

impl<I: StorageIo + Clone> std::fmt::Debug for Pump<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("data_dir", &self.data_dir)
            .field("partitions", &self.partitions.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl<I: StorageIo + Clone> Pump<I> {
    pub fn new(io: I, clock: Rc<dyn Clock>, data_dir: PathBuf) -> Pump<I> {
        Pump {
            io,
            clock,
            data_dir,
            partitions: BTreeMap::new(),
            log_sync: BTreeSet::new(),
            offsets_sync: BTreeSet::new(),
            pending: Vec::new(),
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
        let dir = key.dir(&self.data_dir);
        let config = PartitionConfig::new(u64::from(key.partition), settings.segment_size_bytes);
        let log = PartitionLog::open(self.io.clone(), &dir, config, self.clock.clone()).await?;
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

    /// Apply one op. Acknowledgements that need durability are parked until
    /// `commit`.
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
            PartitionOp::Append { key, batch, reply } => match self.append(key, batch).await {
                Ok((ack, Durability::Persisted)) => {
                    self.log_sync.insert(key);
                    self.pending.push(Pending::Append { key, ack, reply });
                }
                Ok((ack, Durability::Replicated)) => send(reply, Ok(ack)),
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
                    self.pending.push(Pending::Poll { key, result, reply });
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
            } => match self.store_offset(key, consumer, offset).await {
                Ok(Durability::Persisted) => {
                    self.offsets_sync.insert(key);
                    self.pending.push(Pending::Offset { key, reply });
                }
                Ok(Durability::Replicated) => send(reply, Ok(())),
                Err(error) => {
                    self.note_fatal(key, &error);
                    send(reply, Err(error));
                }
            },
            PartitionOp::DeleteOffset {
                key,
                consumer,
                reply,
            } => match self.delete_offset(key, consumer).await {
                Ok(Durability::Persisted) => {
                    self.offsets_sync.insert(key);
                    self.pending.push(Pending::Offset { key, reply });
                }
                Ok(Durability::Replicated) => send(reply, Ok(())),
                Err(error) => {
                    self.note_fatal(key, &error);
                    send(reply, Err(error));
                }
            },
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
                let result = match self.partition(key) {
                    Ok(partition) if fsync => {
                        let synced = partition.log.sync().await;
                        synced.map_err(PumpError::from)
                    }
                    // Writes go straight to the file: nothing is buffered
                    // in the daemon, so a flush without fsync has no work.
                    Ok(_) => Ok(()),
                    Err(error) => Err(error),
                };
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            PartitionOp::Report { reply } => send(reply, Ok(self.report())),
            PartitionOp::SyncAll { reply } => {
                let before = self.counters.fsyncs;
                self.drain().await;
                let result = match &self.fatal {
                    Some(fatal) => Err(PumpError::Storage(StorageError::Poisoned {
                        reason: fatal.to_string(),
                    })),
                    None => Ok(self.counters.fsyncs - before),
                };
                send(reply, result);
            }
            PartitionOp::FlushTick => {
                let dirty: Vec<PartitionKey> = self
                    .partitions
                    .values()
                    .filter(|partition| {
                        partition.log.unsynced_bytes() > 0 || partition.offsets.is_unsynced()
                    })
                    .map(|partition| partition.key)
                    .collect();
                for key in dirty {
                    self.log_sync.insert(key);
                    self.offsets_sync.insert(key);
                }
            }
            PartitionOp::RetentionTick => self.retain().await,
        }
    }

    async fn append(
        &mut self,
        key: PartitionKey,
        batch: Vec<u8>,
    ) -> Result<(AppendAck, Durability), PumpError> {
        let bytes = batch.len() as u64;
        let partition = self.partition(key)?;
        let appended = partition.log.append(batch).await?;
        let durability = partition.settings.durability;
        if durability == Durability::Replicated && partition.flush_due() {
            self.log_sync.insert(key);
        }
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
        let empty = PollResult {
            current_offset,
            message_count: 0,
            bytes: Vec::new(),
        };
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
        let read = partition.log.read_by_offset(start, count, cap).await?;
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
        self.counters.bytes_out += result.bytes.len() as u64;
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
        // Anything parked for this partition refers to purged data; its
        // writes were durable-or-gone, and the purge itself is durable now.
        self.log_sync.remove(&key);
        self.offsets_sync.remove(&key);
        Ok(())
    }

    async fn remove(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.remove(&key) else {
            return Ok(());
        };
        drop(partition);
        self.log_sync.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.data_dir);
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

    /// The commit phase: fsync every partition that has durability waiting,
    /// then release the acknowledgements parked behind it.
    pub async fn commit(&mut self) {
        if self.log_sync.is_empty() && self.offsets_sync.is_empty() && self.pending.is_empty() {
            return;
        }
        let mut failed: BTreeMap<PartitionKey, String> = BTreeMap::new();
        for key in std::mem::take(&mut self.log_sync) {
            let Some(partition) = self.partitions.get_mut(&key) else {
                continue;
            };
            if partition.log.unsynced_bytes() == 0 {
                continue;
            }
            self.counters.fsyncs += 1;
            let started = std::time::Instant::now();
            let synced = partition.log.sync().await;
            self.fsync
                .saturating_record(started.elapsed().as_micros().max(1) as u64);
            if let Err(error) = synced {
                failed.insert(key, error.to_string());
            }
        }
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
        for pending in std::mem::take(&mut self.pending) {
            let key = pending.key();
            let failure = failed.get(&key).map(|reason| {
                PumpError::Storage(StorageError::Poisoned {
                    reason: reason.clone(),
                })
            });
            match (pending, failure) {
                (Pending::Append { ack, reply, .. }, None) => send(reply, Ok(ack)),
                (Pending::Poll { result, reply, .. }, None) => send(reply, Ok(result)),
                (Pending::Offset { reply, .. }, None) => send(reply, Ok(())),
                (Pending::Append { reply, .. }, Some(error)) => send(reply, Err(error)),
                (Pending::Poll { reply, .. }, Some(error)) => send(reply, Err(error)),
                (Pending::Offset { reply, .. }, Some(error)) => send(reply, Err(error)),
            }
        }
        for (key, reason) in failed {
            let error = PumpError::Storage(StorageError::Poisoned { reason });
            self.note_fatal(key, &error);
        }
    }

    /// Shutdown: make everything written durable.
    pub async fn drain(&mut self) {
        let keys: Vec<PartitionKey> = self.partitions.keys().copied().collect();
        for key in keys {
            self.log_sync.insert(key);
            self.offsets_sync.insert(key);
        }
        self.commit().await;
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

    fn batch(messages: usize) -> Vec<u8> {
        let specs: Vec<MessageSpec> = (0..messages)
            .map(|index| MessageSpec {
                id: index as u128 + 1,
                timestamp_delta: 0,
                payload: vec![b'x'; 100],
                user_headers: Vec::new(),
            })
            .collect();
        encode_producer_batch(1_000, &specs)
    }

    fn pump(io: &SimIo, durability: Durability) -> Pump<SimIo> {
        let mut pump = Pump::new(
            io.clone(),
            Rc::new(SimClock::new(1_000_000)),
            PathBuf::from("/data"),
        );
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

    // Proves `replicated` acknowledges on write and serves the data at once.
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
        let mut pump = Pump::new(
            io.clone(),
            Rc::new(SimClock::new(1_000_000)),
            PathBuf::from("/data"),
        );
        block_on(pump.open(KEY, settings)).unwrap();
        let (reply, _answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(5),
            reply,
        }));
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
        let mut pump = Pump::new(
            io.clone(),
            Rc::new(SimClock::new(2_000_000)),
            PathBuf::from("/data"),
        );
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
        let mut pump = Pump::new(
            io.clone(),
            Rc::new(SimClock::new(1_000_000)),
            PathBuf::from("/data"),
        );
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
