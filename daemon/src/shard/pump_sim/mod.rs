//! Deterministic simulation of the pump (`shard/pump.rs`) over `SimIo`.
//!
//! This file owns a seeded workload and the seed runner; `model.rs` owns
//! the plain in-memory model it is checked against. For one seed it builds
//! one or two `Pump<SimIo>` "shards" sharing one simulated disk (direct or
//! buffered segment writes), each holding some of 2–4 partitions with mixed
//! topic settings (`persisted` / `replicated` log and consumer-offset
//! durability, 2–16 KiB segments so rotation happens, some with a message
//! expiry), and drives them through rounds of random size: every op of a
//! round goes through `Pump::apply`, then every pump runs its `commit`, then
//! (usually) the shard loop's poll of background syncs. Ops: appends (random
//! batches), polls with every strategy (with and without auto-commit),
//! get/store/delete consumer offsets, flush with and without fsync,
//! `FlushTick`, `RetentionTick` (the `SimClock` jumps ahead so segments
//! expire), purge, delete segments and `Report`. Restarts re-create the
//! pumps and re-open every partition like a daemon restart, either after a
//! plain process exit (the page cache keeps everything written) or after
//! power loss (`SimIo::crash`, sometimes with torn writes), with background
//! syncs that were started and never completed in flight. Faults: a failed
//! foreground fsync in a commit, a failed background fsync after
//! `replicated` appends were acknowledged (the acks waiting on a failed
//! sync fail, the pump turns fatal, the daemon restarts) and a full disk
//! (`SimIo::set_capacity`: the coalesced writes fail with `NoSpace`, their
//! acknowledgements fail, nothing acknowledged is lost, appends succeed once
//! space returns).
//!
//! The model knows what was *acknowledged* (a reply arrived with `Ok`),
//! what is *written* (the commit phase wrote it: `replicated` acks need
//! this, and it survives a process exit) and what is *durable* (fsynced by
//! a foreground sync, a completed background sync, a rotation, a purge, or
//! recovery at open). After every op every partition's `Report` must equal
//! the model, every poll must return exactly the model's messages byte for
//! byte, `persisted` topics serve only durable messages and `replicated`
//! ones only written messages; a `persisted` acknowledgement is never
//! released before the sync that covers it. After a restart each partition
//! must recover to a batch boundary between its durable and written ends
//! (exactly the written end after a process exit), keeping every
//! acknowledged `persisted` message (and, after a process exit, every
//! acknowledged `replicated` one), and its consumer offsets must equal the
//! durable ones plus at most a prefix of the unsynced ones (torn tail).
//!
//! Deletion: a partition is deleted and created again with the same
//! stream, topic and partition ids (a new storage id, on a random shard,
//! the open of the new one sometimes reaching a shard before the remove
//! of the old one), with its old directory sometimes undeletable (removed
//! in place) or holding an undeletable file; stale appends, polls and
//! opens with the old key find nothing; purges and segment deletions are
//! sometimes refused by an undeletable directory or segment (nothing
//! changes); the shards' janitors empty their trashes with removals
//! failing at random; and the daemon sometimes dies right after a delete
//! and a create were journaled, before any shard heard of them. Every
//! restart reconciles the disk with the live partitions (only deleted
//! partitions' directories may be moved away), and a recreated partition
//! serves nothing of its predecessor. Each seed ends with every trash
//! emptied and nothing on the disk but the live partitions' directories.
//!
//! Runs 200 seeds by default; `IGGYD_SIM_SEEDS=N` runs seeds 0..N and
//! `IGGYD_SIM_SEED=S` runs only seed S. A failure prints the seed. This file
//! must stay deterministic: all randomness comes from the seed.

mod coverage;
mod deletion;
mod model;
mod reads;
mod settle;

use super::partition::{Durability, PartitionKey, PartitionSettings};
use super::pump::{
    AppendAck, PartitionOp, PartitionReport, PollRequest, PollResult, Pump, PumpError, PumpStorage,
    StoredOffset,
};
use coverage::Coverage;
use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
use iggyd_storage::sim::{SimClock, SimIo, SimRng, block_on};
use iggyd_storage::sim_workload::{BatchGenerator, BatchShape, run_seeds};
use iggyd_storage::{Access, BufferPool, Clock, StorageError};
use iggyd_wire::batch::{self, BATCH_HEADER_SIZE, BatchHeader, ValidBatch};
use iggyd_wire::protocol::primitives::PollingStrategy;
use model::{BatchModel, Message, PartitionModel, SegmentModel};
use std::path::PathBuf;
use std::rc::Rc;

const ROUNDS_PER_SEED: u64 = 70;
const DATA_DIR: &str = "/data";

/// Topic settings of a new partition: mixed durabilities, small segments
/// (rotation happens), some with a message expiry.
fn random_settings(rng: &mut SimRng) -> PartitionSettings {
    let durability = |rng: &mut SimRng| {
        if rng.chance(1, 2) {
            Durability::Persisted
        } else {
            Durability::Replicated
        }
    };
    PartitionSettings {
        durability: durability(rng),
        offset_durability: durability(rng),
        segment_size_bytes: rng.range(2 * 1024, 16 * 1024),
        messages_required_to_save: rng.range(1, 60),
        size_required_to_save_bytes: rng.range(512, 24 * 1024),
        message_expiry_us: rng.chance(1, 2).then(|| rng.range(1_000_000, 10_000_000)),
        // Size retention has its own pump test; the model here tracks
        // expiry only.
        max_size_bytes: None,
    }
}
const SEEDS_DEFAULT: u64 = 200;

/// 1..4 messages (1..30 one time in five), payloads up to 48 bytes (600 one
/// batch in four), user headers on one message in five.
const BATCH_SHAPE: BatchShape = BatchShape {
    large_batch_one_in: 5,
    small_batch_max: 4,
    large_batch_max: 30,
    large_payloads_one_in: 4,
    small_payload_max: 48,
    large_payload_max: 600,
    user_headers_one_in: 5,
    user_headers_max: 32,
    timestamp_step: 1,
};

const CONSUMERS: [ConsumerKey; 3] = [
    ConsumerKey {
        kind: ConsumerKind::Consumer,
        id: 1,
    },
    ConsumerKey {
        kind: ConsumerKind::Consumer,
        id: 2,
    },
    ConsumerKey {
        kind: ConsumerKind::Group,
        id: 1,
    },
];

type Answer<T> = flume::Receiver<Result<T, PumpError>>;

/// A reply the pump parked until its commit.
enum Waiting {
    Append {
        part: usize,
        purges: u64,
        rollbacks: u64,
        ack: AppendAck,
        answer: Answer<AppendAck>,
    },
    Flush {
        part: usize,
        purges: u64,
        rollbacks: u64,
        answer: Answer<()>,
    },
    Poll {
        part: usize,
        expected: ExpectedPoll,
        answer: Answer<PollResult>,
    },
    Offset {
        part: usize,
        answer: Answer<()>,
    },
}

impl Waiting {
    fn part(&self) -> usize {
        match self {
            Waiting::Append { part, .. }
            | Waiting::Flush { part, .. }
            | Waiting::Poll { part, .. }
            | Waiting::Offset { part, .. } => *part,
        }
    }
}

/// A parked reply, with the partition (and its shard) it was parked on:
/// the model's slot may hold another partition by the time it resolves
/// (deleted and created again).
struct Parked {
    key: PartitionKey,
    shard: usize,
    waiting: Waiting,
}

#[derive(Debug, Clone)]
struct ExpectedPoll {
    current_offset: u64,
    messages: Vec<Message>,
    /// The poll's byte cap: below `u64::MAX` the answer may be a prefix.
    bytes_max: u64,
}

struct Sim {
    seed: u64,
    rng: SimRng,
    io: SimIo,
    clock: SimClock,
    access: Access,
    shards: usize,
    pumps: Vec<Pump<SimIo>>,
    parts: Vec<PartitionModel>,
    waiting: Vec<Parked>,
    /// Per shard, the parts (and keys: a deleted partition's sync runs on)
    /// whose background sync runs, oldest first (the pump polls its
    /// running syncs in this order).
    background_order: Vec<Vec<(usize, PartitionKey)>>,
    /// The storage id the next created partition gets (never reused).
    next_storage_id: u64,
    /// Storage ids of deleted partitions (their data must never be seen
    /// again, and must leave the disk).
    deleted: Vec<u64>,
    /// Where the shards' trashes start after the next (re)start.
    trash_start: iggyd_storage::trash::TrashStart,
    batches: BatchGenerator,
    /// A full disk is being simulated: `NoSpace` refusals are expected.
    disk_full: bool,
    /// Bytes of the pumps' read windows (small, so polls span them).
    read_window_bytes: usize,
    /// Poll answers held back like replies still being sent.
    held: Vec<reads::HeldReply>,
    coverage: Coverage,
}

fn channel<T>() -> (flume::Sender<Result<T, PumpError>>, Answer<T>) {
    flume::bounded(1)
}

fn is_no_space(error: &PumpError) -> bool {
    matches!(error, PumpError::Storage(StorageError::NoSpace { .. }))
}

/// A failed fsync reaches the client as a poisoned-storage error.
fn is_poisoned(error: &PumpError) -> bool {
    matches!(error, PumpError::Storage(StorageError::Poisoned { .. }))
}

fn decode_messages(bytes: &[u8], partition_id: u64) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).expect("served record header decodes");
        let record = &rest[..header.batch_length as usize];
        batch::validate_record(record).expect("served record is well formed");
        assert_eq!(header.partition_id, partition_id);
        for frame in batch::frames(record).expect("frames") {
            let frame = frame.expect("frame");
            messages.push(Message {
                offset: frame.offset,
                timestamp: frame.timestamp,
                frame: record[frame.frame.clone()].to_vec(),
            });
        }
        rest = &rest[header.batch_length as usize..];
    }
    messages
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SimRng::new(seed);
        let io = SimIo::new(rng.next_u64());
        let clock = SimClock::new(1_700_000_000_000_000);
        let access = if rng.chance(1, 2) {
            Access::Direct
        } else {
            Access::Buffered
        };
        let shards = rng.range(1, 2) as usize;
        let read_window_bytes = rng.range(1, 4) as usize * iggyd_storage::buf::IO_ALIGN;
        let partitions = rng.range(2, 4);
        let mut parts = Vec::new();
        for partition in 0..partitions {
            let settings = random_settings(&mut rng);
            let key = PartitionKey {
                stream: 1 + (partition % 2) as u32,
                topic: 1,
                partition: partition as u32,
                storage_id: partition,
            };
            let shard = rng.below(shards as u64) as usize;
            parts.push(PartitionModel::new(key, shard, settings));
        }
        let mut sim = Sim {
            seed,
            rng,
            io,
            clock,
            access,
            shards,
            pumps: Vec::new(),
            parts,
            waiting: Vec::new(),
            background_order: vec![Vec::new(); shards],
            next_storage_id: partitions,
            deleted: Vec::new(),
            trash_start: Default::default(),
            batches: BatchGenerator::new(BATCH_SHAPE),
            disk_full: false,
            read_window_bytes,
            held: Vec::new(),
            coverage: Coverage::default(),
        };
        sim.reconcile();
        for shard in 0..sim.shards {
            let pump = sim.new_pump(shard);
            sim.pumps.push(pump);
        }
        sim.open_all();
        sim
    }

    /// A pump as the daemon starts one: shard 0 inherits what start-up
    /// found in the trash.
    fn new_pump(&mut self, shard: usize) -> Pump<SimIo> {
        let clock: Rc<dyn Clock> = Rc::new(self.clock.clone());
        let storage = PumpStorage {
            data_dir: PathBuf::from(DATA_DIR),
            access: self.access,
            pool: BufferPool::new(1 << 20),
            trash: iggyd_storage::trash::TrashStart {
                next_seq: self.trash_start.next_seq,
                pending: if shard == 0 {
                    std::mem::take(&mut self.trash_start.pending)
                } else {
                    Vec::new()
                },
            },
            consumer_offsets_max: usize::MAX,
            read_window_bytes: self.read_window_bytes,
        };
        Pump::new(self.io.clone(), clock, storage)
    }

    /// Parks a reply the pump holds until its commit.
    fn park(&mut self, waiting: Waiting) {
        let model = &self.parts[waiting.part()];
        self.waiting.push(Parked {
            key: model.key,
            shard: model.shard,
            waiting,
        });
    }

    fn open_all(&mut self) {
        for part in &self.parts {
            block_on(self.pumps[part.shard].open(part.key, part.settings)).unwrap_or_else(
                |error| panic!("seed {}: opening {} failed: {error}", self.seed, part.key),
            );
        }
    }

    fn random_batch(&mut self) -> (Vec<u8>, Vec<Vec<u8>>) {
        self.batches.next(&mut self.rng, self.clock.now_micros())
    }

    /// `IGGYD_SIM_TRACE=1` prints every step (to debug one seed).
    fn trace(&self, what: impl FnOnce() -> String) {
        if std::env::var_os("IGGYD_SIM_TRACE").is_some() {
            eprintln!(
                "seed {} t={}: {}",
                self.seed,
                self.clock.now_micros(),
                what()
            );
        }
    }

    fn fail(&self, why: impl std::fmt::Display) -> ! {
        panic!("seed {}: {why}", self.seed)
    }

    // ----- ops -----------------------------------------------------------

    fn append(&mut self, part: usize) {
        let (mut bytes, frames) = self.random_batch();
        if self.rng.chance(1, 50) {
            // A damaged batch is refused where it is received: it never
            // becomes a `ValidBatch`, so it never reaches a pump.
            let at = self
                .rng
                .range(BATCH_HEADER_SIZE as u64, bytes.len() as u64 - 1)
                as usize;
            bytes[at] ^= 0x20;
            let len = bytes.len();
            assert!(ValidBatch::new(bytes, 0..len).is_err());
            return;
        }
        let batch_len = bytes.len() as u64;
        let len = bytes.len();
        let batch = ValidBatch::new(bytes, 0..len).expect("a generated batch is valid");
        let (reply, answer) = channel();
        let key = self.parts[part].key;
        let shard = self.parts[part].shard;
        block_on(self.pumps[shard].apply(PartitionOp::Append { key, batch, reply }));
        // An append that does not fit the active segment writes the pending
        // batches and seals the segment first.
        let model = &mut self.parts[part];
        let active = model.segments.last().expect("active");
        let rotating = !active.batches.is_empty()
            && active.size_bytes() + batch_len > model.settings.segment_size_bytes;
        match answer.try_recv() {
            Ok(Err(error)) if self.disk_full && rotating && is_no_space(&error) => {
                // The seal's write failed: every pending batch is dropped
                // (their waiters fail at the commit) and so is this one.
                model.drop_pending();
                self.coverage.appends_refused_no_space += 1;
                return;
            }
            Err(flume::TryRecvError::Empty) => {}
            other => self.fail(format!("append to {key}: unexpected {other:?}")),
        }
        if rotating {
            model.write();
            model.sync_log();
            let next = model.next_offset();
            model.segments.push(SegmentModel::empty(next));
            self.coverage.rotations += 1;
        }
        let base_offset = model.next_offset();
        let ack = AppendAck {
            base_offset,
            last_offset: base_offset + frames.len() as u64 - 1,
        };
        let timestamp = self.clock.now_micros();
        for (index, frame) in frames.into_iter().enumerate() {
            model.messages.push(Message {
                offset: base_offset + index as u64,
                timestamp,
                frame,
            });
        }
        let messages = ack.last_offset - ack.base_offset + 1;
        model
            .segments
            .last_mut()
            .expect("active")
            .batches
            .push(BatchModel {
                base_offset,
                messages,
                bytes: batch_len,
                timestamp,
            });
        if model.persisted() {
            model.log_sync_requested = true;
        }
        let (purges, rollbacks) = (model.purges, model.rollbacks);
        self.park(Waiting::Append {
            part,
            purges,
            rollbacks,
            ack,
            answer,
        });
    }

    fn get_offset(&mut self, part: usize) {
        let consumer = CONSUMERS[self.rng.below(CONSUMERS.len() as u64) as usize];
        let (reply, answer) = channel();
        let model = &self.parts[part];
        block_on(self.pumps[model.shard].apply(PartitionOp::GetOffset {
            key: model.key,
            consumer,
            reply,
        }));
        let expected = model.offsets.get(&consumer).map(|stored| StoredOffset {
            current_offset: model.written_next_offset.saturating_sub(1),
            stored_offset: *stored,
        });
        match answer.try_recv() {
            Ok(Ok(got)) => assert_eq!(got, expected, "seed {}: get offset", self.seed),
            other => self.fail(format!("get offset: unexpected {other:?}")),
        }
        self.coverage.offset_ops += 1;
    }

    /// Store (`delete` false) or delete a consumer offset.
    fn change_offset(&mut self, part: usize, delete: bool) {
        let consumer = CONSUMERS[self.rng.below(CONSUMERS.len() as u64) as usize];
        let model = &self.parts[part];
        let offset = self.rng.range(0, model.next_offset() + 2);
        let (reply, answer) = channel();
        let op = if delete {
            PartitionOp::DeleteOffset {
                key: model.key,
                consumer,
                reply,
            }
        } else {
            PartitionOp::StoreOffset {
                key: model.key,
                consumer,
                offset,
                reply,
            }
        };
        block_on(self.pumps[model.shard].apply(op));
        self.coverage.offset_ops += 1;
        // Only written offsets can be committed to.
        let written = model.written_next_offset;
        let refusal = if delete {
            (!model.offsets.contains_key(&consumer)).then_some(3021)
        } else {
            (written == 0 || offset > written - 1).then_some(4100)
        };
        let persisted = model.settings.offset_durability == Durability::Persisted;
        let change = (!delete).then_some(offset);
        let model = &mut self.parts[part];
        match (answer.try_recv(), refusal) {
            (Ok(Err(error)), Some(status)) => {
                assert_eq!(error.status().code(), status, "seed {}: {error}", self.seed);
            }
            (Ok(Err(error)), None) if self.disk_full && is_no_space(&error) => {
                self.coverage.offset_stores_refused_no_space += 1;
            }
            (Ok(Ok(())), None) if !persisted => model.store_offset(consumer, change),
            (Err(flume::TryRecvError::Empty), None) if persisted => {
                model.store_offset(consumer, change);
                model.offsets_sync_requested = true;
                self.park(Waiting::Offset { part, answer });
            }
            (other, _) => self.fail(format!("offset change: unexpected {other:?}")),
        }
    }

    /// A flush waits for the commit phase: everything appended so far is
    /// written there, and with `fsync` synced too.
    fn flush(&mut self, part: usize) {
        let fsync = self.rng.chance(2, 3);
        let (reply, answer) = channel();
        let model = &mut self.parts[part];
        block_on(self.pumps[model.shard].apply(PartitionOp::Flush {
            key: model.key,
            fsync,
            reply,
        }));
        match answer.try_recv() {
            Err(flume::TryRecvError::Empty) => {}
            other => self.fail(format!("flush: unexpected {other:?}")),
        }
        if fsync {
            model.log_sync_requested = true;
        }
        let (purges, rollbacks) = (model.purges, model.rollbacks);
        self.park(Waiting::Flush {
            part,
            purges,
            rollbacks,
            answer,
        });
        self.coverage.flushes += 1;
    }

    fn flush_tick(&mut self, shard: usize) {
        block_on(self.pumps[shard].apply(PartitionOp::FlushTick));
        for model in self.parts.iter_mut().filter(|model| model.shard == shard) {
            if model.unsynced_bytes() > 0 || model.has_pending() {
                model.background_requested = true;
            }
            if !model.offsets_unsynced.is_empty() {
                model.offsets_sync_requested = true;
            }
        }
        self.coverage.flush_ticks += 1;
    }

    fn retention_tick(&mut self, shard: usize) {
        if self.rng.chance(1, 2) {
            self.clock.advance(self.rng.range(500_000, 8_000_000));
        }
        block_on(self.pumps[shard].apply(PartitionOp::RetentionTick));
        let now = self.clock.now_micros();
        for model in self.parts.iter_mut().filter(|model| model.shard == shard) {
            let Some(expiry) = model.settings.message_expiry_us else {
                continue;
            };
            let cutoff = now.saturating_sub(expiry);
            let sealed = model.segments.len() - 1;
            let expired = model.segments[..sealed]
                .iter()
                .take_while(|segment| segment.last_timestamp() < cutoff)
                .count();
            let deleted = model.delete_oldest(expired);
            self.coverage.segments_expired += deleted.segments as u64;
        }
        self.coverage.retention_ticks += 1;
    }

    fn report(&mut self, shard: usize) -> Vec<PartitionReport> {
        let (reply, answer) = channel();
        block_on(self.pumps[shard].apply(PartitionOp::Report { reply }));
        match answer.try_recv() {
            Ok(Ok(reports)) => reports,
            other => self.fail(format!("report: unexpected {other:?}")),
        }
    }

    // ----- the workload --------------------------------------------------

    fn random_op(&mut self) {
        self.clock.advance(self.rng.range(0, 3_000));
        let part = self.rng.below(self.parts.len() as u64) as usize;
        let shard = self.parts[part].shard;
        match self.rng.below(100) {
            0..35 => self.append(part),
            35..55 => self.poll(part),
            55..60 => self.get_offset(part),
            60..68 => self.change_offset(part, false),
            68..71 => self.change_offset(part, true),
            71..76 => self.flush(part),
            76..84 => self.flush_tick(shard),
            84..90 => self.retention_tick(shard),
            90..92 => self.purge(part),
            92..95 => self.delete_segments(part),
            95..97 => self.recreate(part),
            97..99 => self.trash_tick(shard),
            _ => {
                self.report(shard);
            }
        }
        self.trace(|| {
            format!(
                "after op on part {part}: {:?}",
                self.parts
                    .iter()
                    .map(|m| (
                        m.key.partition,
                        m.first_offset(),
                        m.durable_next_offset,
                        m.written_next_offset,
                        m.next_offset(),
                        &m.offsets,
                        m.offsets_unsynced.len()
                    ))
                    .collect::<Vec<_>>()
            )
        });
        self.check_reports();
    }

    /// One round: some ops, then every pump commits, then (usually) the
    /// background syncs are polled.
    fn round(&mut self) {
        self.coverage.rounds += 1;
        let ops = if self.rng.chance(1, 4) {
            self.rng.range(5, 25)
        } else {
            self.rng.range(1, 5)
        };
        for _ in 0..ops {
            self.random_op();
        }
        let fail_shard = (!self.disk_full && self.rng.chance(1, 40))
            .then(|| self.rng.below(self.pumps.len() as u64) as usize);
        if self.commit(fail_shard) {
            self.after_fatal();
            return;
        }
        self.check_reports();
        // Sometimes the loop does not get to the background syncs before
        // the next round (they stay in flight).
        if self.rng.chance(3, 4) {
            let fail = !self.disk_full && self.rng.chance(1, 60);
            if self.poll_background(fail) {
                self.after_fatal();
                return;
            }
            self.check_reports();
        }
    }

    /// A pump turned fatal: it refuses everything; the daemon restarts.
    fn after_fatal(&mut self) {
        let shard = (0..self.pumps.len())
            .find(|shard| self.pumps[*shard].fatal().is_some())
            .expect("a fatal pump");
        if let Some(part) = (0..self.parts.len()).find(|part| self.parts[*part].shard == shard) {
            let (reply, answer) = channel();
            let key = self.parts[part].key;
            let bytes = self.random_batch().0;
            let len = bytes.len();
            let batch = ValidBatch::new(bytes, 0..len).expect("valid");
            block_on(self.pumps[shard].apply(PartitionOp::Append { key, batch, reply }));
            match answer.try_recv() {
                Ok(Err(PumpError::Stopping)) => {}
                other => self.fail(format!("a fatal pump took an append: {other:?}")),
            }
        }
        let power_loss = self.rng.chance(1, 2);
        self.restart(power_loss);
    }

    /// A full disk for a few rounds, then space returns.
    fn disk_full(&mut self) {
        self.trace(|| "disk full".to_string());
        let used = self.io.used_bytes();
        self.io
            .set_capacity(Some(used + self.rng.range(0, 12 * 1024)));
        self.disk_full = true;
        for _ in 0..self.rng.range(2, 8) {
            self.round();
            if !self.disk_full {
                return; // a restart ended the episode
            }
        }
        self.io.set_capacity(None);
        self.disk_full = false;
        for part in 0..self.parts.len() {
            self.append(part);
        }
        if self.commit(None) {
            self.after_fatal();
            return;
        }
        self.check_reports();
    }
}

fn run_seed(seed: u64) -> Sim {
    let mut sim = Sim::new(seed);
    for _ in 0..ROUNDS_PER_SEED {
        match sim.rng.below(100) {
            0..3 => sim.restart(true),
            3..5 => sim.restart(false),
            5..7 => sim.disk_full(),
            7..9 => sim.recreate_then_crash(),
            _ => sim.round(),
        }
    }
    let power_loss = sim.rng.chance(1, 2);
    sim.restart(power_loss);
    sim.release_held();
    sim.empty_trash();
    sim
}

// Runs the seeded pump workload for every seed against the model; a failure
// names its seed so that `IGGYD_SIM_SEED=<seed>` reproduces it exactly.
#[test]
fn pump_simulation() {
    let runs = run_seeds("pump", SEEDS_DEFAULT, |seed| run_seed(seed).coverage);
    let mut coverage = Coverage::default();
    for seed_coverage in &runs {
        coverage.add(seed_coverage);
    }
    eprintln!("pump simulation: {coverage:?}");
    if runs.len() >= 100 {
        assert!(coverage.appends_acked > 0);
        assert!(coverage.appends_refused_no_space > 0);
        assert!(coverage.polls_auto_commit > 0);
        assert!(coverage.polls_parked > 0);
        assert!(coverage.polls_capped > 0);
        assert!(coverage.replies_held > 0);
        assert!(coverage.rotations > 0);
        assert!(coverage.segments_expired > 0);
        assert!(coverage.segments_deleted > 0);
        assert!(coverage.purges > 0);
        assert!(coverage.power_losses > 0);
        assert!(coverage.torn_files > 0);
        assert!(coverage.tail_lost_on_power_loss > 0);
        assert!(coverage.failed_fsyncs > 0);
        assert!(coverage.failed_background_syncs > 0);
        assert!(coverage.background_syncs > 0);
        assert!(coverage.crashes_with_background_sync_in_flight > 0);
        assert!(coverage.recreated > 0);
        assert!(coverage.recreated_open_first > 0);
        assert!(coverage.removed_in_place > 0);
        assert!(coverage.purges_refused > 0);
        assert!(coverage.deletes_refused > 0);
        assert!(coverage.trash_removals > 0);
        assert!(coverage.trash_removals_failed > 0);
        assert!(coverage.orphans_at_restart > 0);
    }
}

// Same seed, same run: the pump simulation is deterministic.
#[test]
fn pump_simulation_is_deterministic() {
    let first = run_seed(11);
    let second = run_seed(11);
    assert_eq!(first.io.stats(), second.io.stats());
    assert_eq!(first.coverage, second.coverage);
    for (first, second) in first.parts.iter().zip(&second.parts) {
        assert_eq!(first.messages, second.messages);
    }
}
