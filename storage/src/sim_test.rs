//! Deterministic simulation of `PartitionLog` over `SimIo`.
//!
//! This file owns the seeded workload, the in-memory model it is checked
//! against and the seed runner. For one seed it drives two partitions on one
//! simulated disk, each in direct or buffered I/O mode, through random
//! appends (1..50 messages, 0..2000-byte payloads, some user headers) that
//! are written at once or left pending for a later coalesced write, reads
//! by offset / timestamp / first / last with random counts and byte caps,
//! foreground syncs, background syncs (held in flight by `SimIo` while more
//! is appended, then completed or cut short by a crash), rotations (4–16 KiB
//! segments), oldest-segment deletes and purges through the trash (with an
//! undeletable segment or directory now and then: the delete stops there or
//! changes nothing, and the partition stays usable), the trash's janitor
//! (with removals failing at random) and crashes (unsynced writes dropped,
//! sometimes torn, at sector granularity for direct files), each followed
//! by start-up reconciliation, reopen and recovery. After every step the
//! partitions are compared with the model; after every recovery every
//! stored message is read back and compared byte for byte, so nothing
//! deleted or purged is ever visible again. Some seeds add a fault: bit rot
//! in a sealed segment (quarantine), a failed fsync (poison), a full disk
//! (ENOSPC, then space returns), or a failed fsync inside a purge or a
//! segment deletion (poison; after the restart the deletion took effect
//! whole). Every seed ends with the trash emptied and nothing left on the
//! disk but the two partitions' live files.
//!
//! Runs 200 seeds by default; `IGGYD_SIM_SEEDS=N` runs seeds 0..N and
//! `IGGYD_SIM_SEED=S` runs only seed S. A failure prints the seed.
//! This file must stay deterministic: all randomness comes from the seed.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::buf::{BufferPool, align_up};
use super::io::Access;
use super::partition_log::{Clock, PartitionConfig, PartitionLog, PartitionState};
use super::read::ReadBatches;
use super::segment::log_path;
use super::sim::{SimClock, SimIo, SimRng, block_on};
use super::sim_workload::{BatchGenerator, BatchShape, run_seeds};
use super::trash::{Trash, TrashStart};

mod deletion;
use super::{INDEX_ENTRY_SIZE, StorageError};
use iggyd_wire::batch::{self, BATCH_HEADER_SIZE, BatchHeader, FRAME_HEADER_SIZE, ValidBatch};

const STEPS_PER_SEED: u64 = 250;
const DATA_DIR: &str = "/data";
const PARTITIONS: usize = 2;
const SEEDS_DEFAULT: u64 = 200;

/// 1..5 messages (1..50 one time in four), payloads up to 64 bytes (2,000 one
/// batch in three), user headers on one message in four.
const BATCH_SHAPE: BatchShape = BatchShape {
    large_batch_one_in: 4,
    small_batch_max: 5,
    large_batch_max: 50,
    large_payloads_one_in: 3,
    small_payload_max: 64,
    large_payload_max: 2000,
    user_headers_one_in: 4,
    user_headers_max: 64,
    timestamp_step: 3,
};

/// One message as the model remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelMessage {
    offset: u64,
    /// Server timestamp of its batch.
    timestamp: u64,
    /// The frame bytes (header, payload, user headers) as produced.
    frame: Vec<u8>,
}

/// The plain model of one partition.
#[derive(Debug, Default)]
struct Model {
    first_offset: u64,
    messages: Vec<ModelMessage>,
    /// Offset one past each appended batch, ascending.
    batch_ends: Vec<u64>,
    /// Assigned (pending batches included).
    next_offset: u64,
    /// Written: readable, survives a process crash.
    written_next_offset: u64,
    durable_next_offset: u64,
}

impl Model {
    /// Written messages from `start` (reads never see pending ones).
    fn expected(&self, start: u64, count: u32) -> &[ModelMessage] {
        if count == 0 || start >= self.written_next_offset {
            return &[];
        }
        let start = start.max(self.first_offset);
        let from = (start - self.first_offset) as usize;
        let written = (self.written_next_offset - self.first_offset) as usize;
        let to = (from + count as usize).min(written);
        &self.messages[from..to]
    }

    fn written(&self) -> &[ModelMessage] {
        self.expected(self.first_offset, u32::MAX)
    }

    fn truncate_to(&mut self, next_offset: u64) {
        assert!(next_offset >= self.first_offset);
        self.messages
            .truncate((next_offset - self.first_offset) as usize);
        self.batch_ends.retain(|end| *end <= next_offset);
        self.next_offset = next_offset;
        self.written_next_offset = next_offset;
        self.durable_next_offset = next_offset;
    }

    /// A failed write dropped every pending batch.
    fn drop_pending(&mut self) {
        let written = self.written_next_offset;
        self.messages
            .truncate((written - self.first_offset) as usize);
        self.batch_ends.retain(|end| *end <= written);
        self.next_offset = written;
    }

    /// The log wrote pending batches on its own (flush by size, rotation):
    /// its written offset must be a batch boundary the model knows.
    fn observe_written(&mut self, written: u64) {
        assert!(written >= self.written_next_offset);
        assert!(written <= self.next_offset);
        assert!(written == self.first_offset || self.batch_ends.contains(&written));
        self.written_next_offset = written;
    }

    fn drop_before(&mut self, first_offset: u64) {
        assert!(first_offset >= self.first_offset);
        let drop = (first_offset - self.first_offset) as usize;
        self.messages.drain(..drop);
        self.first_offset = first_offset;
    }
}

struct Sim {
    seed: u64,
    rng: SimRng,
    io: SimIo,
    clock: SimClock,
    configs: Vec<PartitionConfig>,
    dirs: Vec<PathBuf>,
    logs: Vec<PartitionLog<SimIo>>,
    trash: Trash<SimIo>,
    pool: BufferPool,
    models: Vec<Model>,
    batches: BatchGenerator,
    crashes: u64,
    torn_tails: u64,
    rotations_seen: usize,
    faults: FaultCounts,
}

/// How often each injected fault was observed, summed over seeds.
#[derive(Debug, Default, Clone, Copy)]
struct FaultCounts {
    quarantined_on_open: u64,
    quarantined_on_read: u64,
    poisoned: u64,
    no_space_refused: u64,
    deletes_refused: u64,
    purges_refused: u64,
    removals_failed: u64,
    deletions_poisoned: u64,
}

fn decode_read(read: &ReadBatches, partition_id: u64) -> Vec<ModelMessage> {
    let mut messages = Vec::new();
    let mut rest = &read.bytes[..];
    let mut records = 0;
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).expect("served record header decodes");
        let record = &rest[..header.batch_length as usize];
        batch::validate_record(record).expect("served record is well formed");
        assert_eq!(header.partition_id, partition_id);
        for frame in batch::frames(record).expect("frames") {
            let frame = frame.expect("frame");
            messages.push(ModelMessage {
                offset: frame.offset,
                timestamp: frame.timestamp,
                frame: record[frame.frame.clone()].to_vec(),
            });
        }
        rest = &rest[header.batch_length as usize..];
        records += 1;
    }
    assert_eq!(records, read.records);
    assert_eq!(messages.len() as u32, read.message_count);
    assert_eq!(read.first_offset, messages.first().map(|m| m.offset));
    assert_eq!(read.last_offset, messages.last().map(|m| m.offset));
    messages
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = SimRng::new(seed);
        let io = SimIo::new(rng.next_u64());
        let clock = SimClock::new(1_700_000_000_000_000);
        let mut configs = Vec::new();
        let mut dirs = Vec::new();
        for partition in 0..PARTITIONS {
            configs.push(PartitionConfig {
                partition_id: partition as u64,
                segment_size_bytes: rng.range(4 * 1024, 16 * 1024),
                index_sample_every: rng.range(1, 8) as u32,
                access: if rng.chance(1, 2) {
                    Access::Direct
                } else {
                    Access::Buffered
                },
                // Small windows, so reads span and replace them.
                read_window_bytes: rng.range(1, 5) as usize * crate::buf::IO_ALIGN,
            });
            dirs.push(super::layout::partition_dir(
                Path::new(DATA_DIR),
                partition as u64,
            ));
        }
        let trash = Trash::new(io.clone(), Path::new(DATA_DIR), TrashStart::default());
        let mut sim = Sim {
            seed,
            rng,
            io,
            clock,
            configs,
            dirs,
            logs: Vec::new(),
            trash,
            pool: BufferPool::new(1 << 20),
            models: (0..PARTITIONS).map(|_| Model::default()).collect(),
            batches: BatchGenerator::new(BATCH_SHAPE),
            crashes: 0,
            torn_tails: 0,
            rotations_seen: 0,
            faults: FaultCounts::default(),
        };
        sim.reconcile();
        sim.open_all();
        sim
    }

    fn open_all(&mut self) {
        self.logs.clear();
        for partition in 0..PARTITIONS {
            let clock: Rc<dyn Clock> = Rc::new(self.clock.clone());
            let log = block_on(PartitionLog::open(
                self.io.clone(),
                &self.dirs[partition],
                self.configs[partition].clone(),
                clock,
                self.pool.clone(),
            ))
            .unwrap_or_else(|error| panic!("seed {}: open failed: {error}", self.seed));
            self.logs.push(log);
        }
    }

    fn random_batch(&mut self) -> (Vec<u8>, Vec<Vec<u8>>) {
        self.batches.next(&mut self.rng, self.clock.now_micros())
    }

    fn append(&mut self, partition: usize) -> Result<(), StorageError> {
        let write_now = self.rng.chance(1, 2);
        self.append_with(partition, write_now)
    }

    /// Appends a random batch; with `write_now` it is written at once,
    /// else it stays pending until a later write.
    fn append_with(&mut self, partition: usize, write_now: bool) -> Result<(), StorageError> {
        let (bytes, frames) = self.random_batch();
        if self.rng.chance(1, 40) {
            // A damaged producer batch is refused where it is received and
            // never reaches the log.
            let mut broken = bytes;
            let at = self
                .rng
                .range(BATCH_HEADER_SIZE as u64, broken.len() as u64 - 1)
                as usize;
            broken[at] ^= 0x10;
            let len = broken.len();
            assert!(ValidBatch::new(broken, 0..len).is_err());
            return Ok(());
        }
        let len = bytes.len();
        let batch = ValidBatch::new(bytes, 0..len).unwrap();
        let segments_before = self.logs[partition].stats().segments;
        let next_before = self.models[partition].next_offset;
        let result = if write_now {
            block_on(self.logs[partition].append_and_write(&batch))
        } else {
            block_on(self.logs[partition].append(&batch))
        };
        let log = &self.logs[partition];
        let model = &mut self.models[partition];
        if log.stats().segments > segments_before {
            // Rotation wrote and sealed (fsynced) the previous segment,
            // even when the append itself then fails.
            self.rotations_seen += 1;
            model.written_next_offset = next_before;
            model.durable_next_offset = next_before;
        }
        let appended = match result {
            Ok(appended) => appended,
            Err(error @ StorageError::NoSpace { .. }) => {
                // Every pending batch (this one too, if it got in) is gone.
                model.observe_written(log.written_next_offset().min(model.next_offset));
                model.drop_pending();
                assert_eq!(log.next_offset(), model.next_offset, "seed {}", self.seed);
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        assert_eq!(appended.base_offset, model.next_offset);
        assert_eq!(
            appended.last_offset,
            model.next_offset + frames.len() as u64 - 1
        );
        assert!(
            model
                .messages
                .last()
                .is_none_or(|last| last.timestamp <= appended.timestamp)
        );
        for (index, frame) in frames.into_iter().enumerate() {
            model.messages.push(ModelMessage {
                offset: appended.base_offset + index as u64,
                timestamp: appended.timestamp,
                frame,
            });
        }
        model.next_offset = appended.last_offset + 1;
        model.batch_ends.push(model.next_offset);
        model.observe_written(log.written_next_offset());
        if write_now {
            assert_eq!(model.written_next_offset, model.next_offset);
        }
        Ok(())
    }

    fn write_pending(&mut self, partition: usize) -> Result<(), StorageError> {
        let result = block_on(self.logs[partition].write_pending());
        let model = &mut self.models[partition];
        match result {
            Ok(()) => {
                model.written_next_offset = model.next_offset;
                Ok(())
            }
            Err(error @ StorageError::NoSpace { .. }) => {
                model.drop_pending();
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    fn sync(&mut self, partition: usize) -> Result<(), StorageError> {
        block_on(self.logs[partition].sync())?;
        let model = &mut self.models[partition];
        model.durable_next_offset = model.written_next_offset;
        Ok(())
    }

    /// A background sync: started, held in flight by the disk while more is
    /// appended and written, then either completed (the durable offset moves
    /// to what it covered, not further) or cut short by a power loss (it
    /// made nothing durable that a crash must keep).
    fn background_sync(&mut self, partition: usize) -> Result<(), StorageError> {
        let Some(job) = self.logs[partition].begin_sync(true)? else {
            return Ok(());
        };
        let covers = job.next_offset();
        assert_eq!(covers, self.models[partition].written_next_offset);
        assert!(
            self.logs[partition].begin_sync(true)?.is_none(),
            "one at a time"
        );
        // Submitted: the disk holds it in flight (what it makes durable is
        // what the files held now).
        self.io.hold_syncs(true);
        let mut future = Box::pin(job.run_owned(self.io.clone()));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(future.as_mut().poll(&mut context).is_pending());
        self.io.hold_syncs(false);
        for _ in 0..self.rng.range(0, 3) {
            self.append(partition)?;
        }
        if self.rng.chance(1, 3) {
            drop(future);
            self.crash();
            return Ok(());
        }
        let outcome = block_on(future);
        self.logs[partition].end_sync(job, outcome)?;
        let model = &mut self.models[partition];
        model.durable_next_offset = model.durable_next_offset.max(covers);
        assert_eq!(
            self.logs[partition].durable_next_offset(),
            model.durable_next_offset,
            "seed {}: a background sync moves the durable offset to what it covered",
            self.seed
        );
        Ok(())
    }

    fn check_read(
        &self,
        partition: usize,
        read: &ReadBatches,
        expected: &[ModelMessage],
        bytes_max: u64,
    ) {
        let got = decode_read(read, partition as u64);
        if bytes_max == u64::MAX {
            assert_eq!(got.len(), expected.len(), "seed {}: read length", self.seed);
        } else {
            assert!(got.len() <= expected.len());
            assert!(
                expected.is_empty() || !got.is_empty(),
                "a capped read returns at least one record"
            );
            assert!(read.records <= 1 || read.bytes.len() as u64 <= bytes_max);
        }
        for (got, expected) in got.iter().zip(expected) {
            assert_eq!(
                got, expected,
                "seed {}: message {} differs",
                self.seed, expected.offset
            );
        }
    }

    fn random_read(&mut self, partition: usize) -> Result<(), StorageError> {
        let count = match self.rng.below(4) {
            0 => 1,
            1 => self.rng.range(0, 10) as u32,
            _ => self.rng.range(1, 200) as u32,
        };
        let bytes_max = if self.rng.chance(1, 3) {
            self.rng.range(1, 8192)
        } else {
            u64::MAX
        };
        let log = &self.logs[partition];
        let model = &self.models[partition];
        let kind = self.rng.below(4);
        let (read, expected) = match kind {
            0 => {
                let low = model.first_offset.saturating_sub(2);
                let offset = self.rng.range(low, model.written_next_offset + 2);
                (
                    block_on(log.read_by_offset(offset, count, bytes_max))?,
                    model.expected(offset, count),
                )
            }
            1 => {
                let (low, high) = match (model.written().first(), model.written().last()) {
                    (Some(first), Some(last)) => {
                        (first.timestamp.saturating_sub(10), last.timestamp + 10)
                    }
                    _ => (0, 10),
                };
                let timestamp = self.rng.range(low, high);
                let start = model
                    .written()
                    .iter()
                    .find(|message| message.timestamp >= timestamp)
                    .map_or(model.written_next_offset, |message| message.offset);
                (
                    block_on(log.read_by_timestamp(timestamp, count, bytes_max))?,
                    model.expected(start, count),
                )
            }
            2 => (
                block_on(log.read_first(count, bytes_max))?,
                model.expected(model.first_offset, count),
            ),
            _ => {
                let start = model
                    .written_next_offset
                    .saturating_sub(u64::from(count))
                    .max(model.first_offset);
                (
                    block_on(log.read_last(count, bytes_max))?,
                    model.expected(start, count),
                )
            }
        };
        self.check_read(partition, &read, expected, bytes_max);
        Ok(())
    }

    /// Power loss, start-up reconciliation, reopen, and the recovery
    /// checks.
    fn crash(&mut self) {
        let torn = self.rng.chance(1, 2);
        self.io.set_torn_writes(torn);
        self.io.crash();
        self.crashes += 1;
        self.reconcile();
        self.open_all();
        for partition in 0..PARTITIONS {
            let log = &self.logs[partition];
            let model = &mut self.models[partition];
            let report = log.recovery_report();
            assert!(
                report.corruption.is_none(),
                "seed {}: {report:?}",
                self.seed
            );
            if report.torn_tail.is_some() {
                self.torn_tails += 1;
            }
            let recovered = log.next_offset();
            assert!(
                recovered >= model.durable_next_offset,
                "seed {}: partition {partition} lost durable data: recovered to {recovered}, durable was {}",
                self.seed,
                model.durable_next_offset
            );
            assert!(
                recovered <= model.written_next_offset,
                "seed {}: offsets invented (or a pending batch that was never written survived)",
                self.seed
            );
            assert!(
                recovered == model.first_offset || model.batch_ends.contains(&recovered),
                "seed {}: recovered to {recovered}, not a batch boundary",
                self.seed
            );
            assert_eq!(log.first_offset(), model.first_offset);
            model.truncate_to(recovered);
            assert_eq!(log.durable_offset(), log.written_offset());
        }
        self.check_everything();
    }

    /// Reads every stored message of every partition and compares.
    fn check_everything(&self) {
        for partition in 0..PARTITIONS {
            let model = &self.models[partition];
            let read = block_on(self.logs[partition].read_first(u32::MAX, u64::MAX))
                .unwrap_or_else(|error| panic!("seed {}: full read failed: {error}", self.seed));
            self.check_read(partition, &read, model.written(), u64::MAX);
        }
    }

    fn check_step(&self) {
        for partition in 0..PARTITIONS {
            let log = &self.logs[partition];
            let model = &self.models[partition];
            assert_eq!(log.next_offset(), model.next_offset, "seed {}", self.seed);
            assert_eq!(log.first_offset(), model.first_offset, "seed {}", self.seed);
            assert_eq!(
                log.written_offset(),
                model.written_next_offset.checked_sub(1),
                "seed {}",
                self.seed
            );
            assert_eq!(
                log.durable_offset(),
                model.durable_next_offset.checked_sub(1)
            );
            let stats = log.stats();
            assert_eq!(stats.messages, model.written().len() as u64);
            assert!(
                stats.memory_bytes < 64 * 1024 + crate::limits::TAIL_CHUNK_BYTES,
                "seed {}: {stats:?}",
                self.seed
            );
            assert_eq!(
                log.unsynced_messages(),
                model.written_next_offset - model.durable_next_offset,
                "seed {}",
                self.seed
            );
        }
    }

    fn step(&mut self) {
        if self.rng.chance(1, 20) {
            // Wall clocks step back sometimes; stored timestamps must not.
            let now = self.clock.now_micros();
            self.clock
                .set(now.saturating_sub(self.rng.range(0, 10_000)));
        } else {
            self.clock.advance(self.rng.range(0, 5_000));
        }
        let partition = self.rng.below(PARTITIONS as u64) as usize;
        let roll = self.rng.below(100);
        let result = match roll {
            0..38 => self.append(partition),
            38..44 => self.write_pending(partition),
            44..52 => self.sync(partition),
            52..55 => self.background_sync(partition),
            55..85 => self.random_read(partition),
            85..89 => self.delete_oldest(partition),
            89..90 => self.purge(partition),
            90..93 => {
                self.collect_trash();
                Ok(())
            }
            _ => {
                if self.rng.chance(1, 2) {
                    self.crash();
                }
                Ok(())
            }
        };
        if let Err(error) = result {
            panic!("seed {}: unexpected error: {error}", self.seed);
        }
        self.check_step();
    }

    /// Bit rot in a sealed segment: the corruption is found (on open when it
    /// hits the last batch of the segment, else on read/verify), reported
    /// with its position, the partition turns read-only, data before it
    /// stays readable and no file changes.
    fn fault_bit_flip(&mut self) {
        let partition = 0;
        while self.logs[partition].stats().segments < 3 {
            self.append(partition).unwrap();
        }
        self.write_pending(partition).unwrap();
        self.sync(partition).unwrap();
        // A clean close leaves exact files (no direct-I/O padding), so that
        // "no file changes" below is about data only.
        block_on(self.logs[partition].close()).unwrap();
        let log = &self.logs[partition];
        let dir = self.dirs[partition].clone();
        // Pick a sealed segment and a batch in it.
        let sealed = log.stats().segments - 1;
        let first = log.first_offset();
        let durable_before = self.models[partition].durable_next_offset;
        let segment_starts: Vec<u64> = self
            .io_segment_starts(&dir)
            .into_iter()
            .filter(|start| *start >= first)
            .collect();
        let segment = self.rng.below(sealed as u64) as usize;
        let start = segment_starts[segment];
        let path = log_path(&dir, start);
        let len = self.io.len_of(&path).unwrap();
        let position = self.rng.below(len);
        let bit = self.rng.below(8) as u8;
        assert!(self.io.flip_bit(&path, position, bit));
        let lengths_before = self.file_lengths(&dir);

        self.open_all();
        if self.logs[partition].recovery_report().corruption.is_some() {
            self.faults.quarantined_on_open += 1;
        } else {
            self.faults.quarantined_on_read += 1;
        }
        let log = &self.logs[partition];
        let verified = block_on(log.verify());
        let state = log.state();
        let reason = match state {
            PartitionState::Quarantined { reason } => reason,
            other => panic!(
                "seed {}: bit flip not detected: {other:?} {verified:?}",
                self.seed
            ),
        };
        assert!(
            reason.contains(&path.display().to_string()),
            "seed {}: {reason}",
            self.seed
        );
        let batch = valid(self.random_batch().0);
        let error = block_on(self.logs[partition].append(&batch)).unwrap_err();
        assert!(matches!(error, StorageError::Quarantined { .. }), "{error}");
        // Everything in the segments before the damaged one reads back intact.
        let log = &self.logs[partition];
        if start > first {
            let read =
                block_on(log.read_by_offset(first, (start - first) as u32, u64::MAX)).unwrap();
            let model = &self.models[partition];
            self.check_read(
                partition,
                &read,
                model.expected(first, (start - first) as u32),
                u64::MAX,
            );
        }
        assert!(log.next_offset() >= start);
        assert!(log.next_offset() <= durable_before);
        assert_eq!(
            self.file_lengths(&dir),
            lengths_before,
            "seed {}: files changed",
            self.seed
        );
    }

    /// A failed fsync poisons; nothing durable is lost after restart.
    fn fault_fsync(&mut self) {
        let partition = self.rng.below(PARTITIONS as u64) as usize;
        // (A generated batch is now and then a damaged one, which appends
        // nothing: append until something is unsynced.)
        while self.logs[partition].unsynced_bytes() == 0 {
            self.append_with(partition, true).unwrap();
        }
        self.io.fail_next_fsync();
        let error = block_on(self.logs[partition].sync()).unwrap_err();
        assert!(error.is_fatal(), "{error}");
        assert!(matches!(
            self.logs[partition].state(),
            PartitionState::Poisoned { .. }
        ));
        self.faults.poisoned += 1;
        let batch = valid(self.random_batch().0);
        let error = block_on(self.logs[partition].append(&batch)).unwrap_err();
        assert!(error.is_fatal(), "{error}");
        let error = block_on(self.logs[partition].sync()).unwrap_err();
        assert!(error.is_fatal(), "{error}");
        // Still readable.
        let model = &self.models[partition];
        let read = block_on(self.logs[partition].read_first(u32::MAX, u64::MAX)).unwrap();
        self.check_read(partition, &read, model.written(), u64::MAX);
        // The supervisor restarts the process: crash and recover.
        self.crash();
    }

    /// A full disk: appends fail cleanly, then succeed once space returns.
    fn fault_no_space(&mut self) {
        let used = self.io.used_bytes();
        self.io.set_capacity(Some(used + self.rng.range(0, 20_000)));
        let mut refused = 0;
        for _ in 0..20 {
            let partition = self.rng.below(PARTITIONS as u64) as usize;
            match self.append(partition) {
                Ok(()) => {}
                Err(StorageError::NoSpace { .. }) => {
                    refused += 1;
                    self.faults.no_space_refused += 1;
                    assert_eq!(self.logs[partition].state(), PartitionState::Open);
                    // The rolled-back write left no bytes of dropped batches
                    // behind: the active log holds exactly what is written
                    // (plus, in direct mode, padding to the next block).
                    let log = &self.logs[partition];
                    let written = log.stats().bytes
                        - log
                            .sealed_segments()
                            .iter()
                            .map(|s| s.size_bytes)
                            .sum::<u64>();
                    let starts = self.io_segment_starts(&self.dirs[partition]);
                    let active = log_path(&self.dirs[partition], *starts.last().unwrap());
                    let len = self.io.len_of(&active).unwrap();
                    assert!(
                        len == written || len == align_up(written),
                        "seed {}: {} holds {len} bytes, {written} written",
                        self.seed,
                        active.display()
                    );
                }
                Err(error) => panic!("seed {}: {error}", self.seed),
            }
            self.check_step();
            if self.rng.chance(1, 3) {
                self.sync(partition).unwrap();
            }
        }
        self.check_everything();
        self.io.set_capacity(None);
        for partition in 0..PARTITIONS {
            self.append_with(partition, true).unwrap();
        }
        if refused > 0 && self.rng.chance(1, 2) {
            self.crash();
        }
        self.check_everything();
    }

    fn io_segment_starts(&self, dir: &Path) -> Vec<u64> {
        let names = block_on(super::io::StorageIo::list_dir(&self.io, dir)).unwrap();
        names
            .iter()
            .filter_map(|name| super::segment::parse_segment_file_name(name))
            .filter(|(_, kind)| *kind == super::segment::SegmentFileKind::Log)
            .map(|(start, _)| start)
            .collect()
    }

    fn file_lengths(&self, dir: &Path) -> Vec<(String, u64)> {
        let names = block_on(super::io::StorageIo::list_dir(&self.io, dir)).unwrap();
        names
            .into_iter()
            .map(|name| {
                let len = self.io.len_of(&dir.join(&name)).unwrap();
                (name, len)
            })
            .collect()
    }
}

fn valid(bytes: Vec<u8>) -> ValidBatch {
    let len = bytes.len();
    ValidBatch::new(bytes, 0..len).unwrap()
}

fn run_seed(seed: u64) -> Sim {
    let mut sim = Sim::new(seed);
    let fault_at = sim.rng.range(STEPS_PER_SEED / 4, STEPS_PER_SEED - 1);
    for step in 0..STEPS_PER_SEED {
        if step == fault_at {
            match seed % 10 {
                0 => {
                    sim.fault_bit_flip();
                    return sim;
                }
                1 => sim.fault_fsync(),
                2 => sim.fault_no_space(),
                3 => sim.fault_deletion_fsync(),
                _ => {}
            }
        }
        sim.step();
    }
    sim.crash();
    sim.empty_trash();
    sim
}

// Runs the seeded workload for every seed; a failure names its seed so that
// `IGGYD_SIM_SEED=<seed>` reproduces it exactly.
#[test]
fn simulation() {
    let runs = run_seeds("storage", SEEDS_DEFAULT, |seed| {
        let sim = run_seed(seed);
        (sim.crashes, sim.torn_tails, sim.rotations_seen, sim.faults)
    });
    let mut crashes = 0;
    let mut torn_tails = 0;
    let mut rotations = 0;
    let mut faults = FaultCounts::default();
    for (seed_crashes, seed_torn, seed_rotations, seed_faults) in &runs {
        crashes += seed_crashes;
        torn_tails += seed_torn;
        rotations += seed_rotations;
        faults.quarantined_on_open += seed_faults.quarantined_on_open;
        faults.quarantined_on_read += seed_faults.quarantined_on_read;
        faults.poisoned += seed_faults.poisoned;
        faults.no_space_refused += seed_faults.no_space_refused;
        faults.deletes_refused += seed_faults.deletes_refused;
        faults.purges_refused += seed_faults.purges_refused;
        faults.removals_failed += seed_faults.removals_failed;
        faults.deletions_poisoned += seed_faults.deletions_poisoned;
    }
    eprintln!(
        "simulation: {crashes} crashes, {torn_tails} torn tails, {rotations} rotations, {faults:?}"
    );
    if runs.len() >= 100 {
        assert!(crashes > 0);
        assert!(torn_tails > 0);
        assert!(rotations > 0);
        assert!(faults.quarantined_on_open > 0);
        assert!(faults.quarantined_on_read > 0);
        assert!(faults.poisoned > 0);
        assert!(faults.no_space_refused > 0);
        assert!(faults.deletes_refused > 0);
        assert!(faults.purges_refused > 0);
        assert!(faults.removals_failed > 0);
        assert!(faults.deletions_poisoned > 0);
    }
}

// Same seed, same run: the simulation is deterministic.
#[test]
fn simulation_is_deterministic() {
    let first = run_seed(7);
    let second = run_seed(7);
    assert_eq!(first.io.stats(), second.io.stats());
    assert_eq!(first.models[0].messages, second.models[0].messages);
}

// A deleted index and a short index are rebuilt from the log on open.
#[test]
fn missing_and_short_index_rebuilt() {
    let mut sim = Sim::new(1234);
    while sim.logs[0].stats().segments < 3 {
        sim.append_with(0, true).unwrap();
    }
    sim.sync(0).unwrap();
    let dir = sim.dirs[0].clone();
    let starts = sim.io_segment_starts(&dir);
    let first_index = super::segment::index_path(&dir, starts[0]);
    let last_index = super::segment::index_path(&dir, *starts.last().unwrap());
    assert!(sim.io.remove_now(&first_index));
    let last_len = sim.io.len_of(&last_index).unwrap();
    if last_len >= INDEX_ENTRY_SIZE as u64 {
        sim.io
            .set_contents(&last_index, vec![0u8; (last_len - 5) as usize]);
    }
    sim.open_all();
    let report = sim.logs[0].recovery_report().clone();
    assert!(report.corruption.is_none(), "{report:?}");
    assert!(
        report
            .indexes_rebuilt
            .iter()
            .any(|(path, _)| *path == first_index)
    );
    assert_eq!(
        sim.io.len_of(&first_index).unwrap() % INDEX_ENTRY_SIZE as u64,
        0
    );
    sim.check_step();
    sim.check_everything();
}

// A corrupt batch in the middle of the last segment, with valid batches
// after it, quarantines on open instead of truncating.
#[test]
fn mid_segment_corruption_in_last_segment_quarantines() {
    let mut sim = Sim::new(99);
    sim.configs[0].segment_size_bytes = 1 << 20;
    sim.open_all();
    for _ in 0..6 {
        sim.append_with(0, true).unwrap();
    }
    sim.sync(0).unwrap();
    let dir = sim.dirs[0].clone();
    let path = log_path(&dir, 0);
    // Flip a payload bit of the second batch: frame checksum fails, the
    // header still gives its length, and the third batch is valid.
    let read = block_on(sim.logs[0].read_first(u32::MAX, u64::MAX)).unwrap();
    let first_len = BatchHeader::decode(&read.bytes).unwrap().batch_length;
    let second = first_len + (BATCH_HEADER_SIZE + FRAME_HEADER_SIZE) as u64 - 1;
    assert!(sim.io.flip_bit(&path, second, 3));
    // Break the index too so that the open has to scan.
    let index = super::segment::index_path(&dir, 0);
    sim.io.remove_now(&index);
    let len_before = sim.io.len_of(&path).unwrap();
    sim.open_all();
    let report = sim.logs[0].recovery_report().clone();
    let corruption = report.corruption.expect("corruption reported");
    assert_eq!(corruption.position, first_len);
    assert_eq!(corruption.segment, path);
    assert!(report.torn_tail.is_none());
    assert_eq!(sim.io.len_of(&path).unwrap(), len_before);
    assert!(matches!(
        sim.logs[0].state(),
        PartitionState::Quarantined { .. }
    ));
    let batch = valid(sim.random_batch().0);
    let error = block_on(sim.logs[0].append(&batch)).unwrap_err();
    assert!(matches!(error, StorageError::Quarantined { .. }), "{error}");
}
