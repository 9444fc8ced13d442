//! Tests of [`PartitionLog`] on real files (monoio, legacy driver), in both
//! I/O modes: append, write, sync, rotate, reopen and read back; direct-I/O
//! padding and torn tails on open. The simulated disk's seeded runs are in
//! `sim_test.rs`.

use std::path::PathBuf;
use std::rc::Rc;

use super::buf::{BufferPool, IO_ALIGN, align_up};
use super::io::Access;
use super::partition_log::{Clock, PartitionConfig, PartitionLog, PartitionState, SystemClock};
use crate::io::test_runtime as runtime;
use crate::{MonoioIo, ReadBatches};
use iggyd_wire::batch::ValidBatch;
use iggyd_wire::batch::{BatchHeader, MessageSpec, encode_producer_batch, frames};

fn producer_batch(messages: usize, payload_len: usize) -> ValidBatch {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: index as u128 + 1,
            timestamp_delta: index as u32,
            payload: vec![index as u8; payload_len],
            user_headers: vec![],
        })
        .collect();
    let bytes = encode_producer_batch(1, &specs);
    let len = bytes.len();
    ValidBatch::new(bytes, 0..len).unwrap()
}

fn offsets(read: &ReadBatches) -> Vec<u64> {
    let mut offsets = Vec::new();
    let records = read.records_bytes();
    let mut rest = &records[..];
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).unwrap();
        let record = &rest[..header.batch_length as usize];
        offsets.extend(frames(record).unwrap().map(|frame| frame.unwrap().offset));
        rest = &rest[header.batch_length as usize..];
    }
    offsets
}

fn pool() -> BufferPool {
    BufferPool::new(1 << 20)
}

// On real files (monoio, legacy driver), in both I/O modes: append,
// write, sync, rotate, reopen, and read back by offset, timestamp,
// first and last; sealed segments have their exact size.
#[test]
fn monoio_append_sync_reopen_read() {
    for access in [Access::Buffered, Access::Direct] {
        let dir = tempfile::tempdir().unwrap();
        let partition_dir = dir.path().join("streams/1/topics/1/partitions/0");
        runtime().block_on(append_sync_reopen_read(partition_dir, access));
    }
}

async fn append_sync_reopen_read(partition_dir: PathBuf, access: Access) {
    let config = PartitionConfig {
        partition_id: 3,
        segment_size_bytes: 4096,
        index_sample_every: 2,
        access,
        read_window_bytes: crate::limits::READ_WINDOW_BYTES,
    };
    let clock: Rc<dyn Clock> = Rc::new(SystemClock);
    let mut log = PartitionLog::open(
        MonoioIo,
        &partition_dir,
        config.clone(),
        clock.clone(),
        pool(),
    )
    .await
    .unwrap();
    assert_eq!(log.written_offset(), None);
    for round in 0..20u64 {
        let appended = log.append(&producer_batch(3, 300)).await.unwrap();
        assert_eq!(appended.base_offset, round * 3);
        assert_eq!(appended.last_offset, round * 3 + 2);
        if round % 3 == 2 {
            log.write_pending().await.unwrap();
        }
    }
    assert_eq!(log.next_offset(), 60);
    log.write_pending().await.unwrap();
    assert_eq!(log.written_offset(), Some(59));
    assert!(log.unsynced_messages() > 0);
    log.sync().await.unwrap();
    assert_eq!(log.durable_offset(), Some(59));
    assert!(log.stats().segments > 1);
    for sealed in &log.segments[..log.segments.len() - 1] {
        let path = sealed.log_path(&partition_dir);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), sealed.size_bytes);
    }
    log.close().await.unwrap();
    drop(log);

    let log = PartitionLog::open(MonoioIo, &partition_dir, config, clock, pool())
        .await
        .unwrap();
    assert_eq!(log.state(), PartitionState::Open);
    assert_eq!(log.recovery_report().torn_tail, None, "{access:?}");
    assert_eq!(log.next_offset(), 60);
    let read = log.read_by_offset(10, 7, u64::MAX).await.unwrap();
    assert_eq!(offsets(&read), (10..17).collect::<Vec<_>>());
    assert_eq!(read.message_count, 7);
    let first = log.read_first(2, u64::MAX).await.unwrap();
    assert_eq!(offsets(&first), vec![0, 1]);
    let last = log.read_last(4, u64::MAX).await.unwrap();
    assert_eq!(offsets(&last), vec![56, 57, 58, 59]);
    let by_time = log.read_by_timestamp(0, 1, u64::MAX).await.unwrap();
    assert_eq!(offsets(&by_time), vec![0]);
    let with_headroom = log.read_by_offset_into(10, 7, u64::MAX, 272).await.unwrap();
    assert_eq!(with_headroom.headroom, 272);
    assert_eq!(with_headroom.records_bytes(), read.records_bytes());
    assert_eq!(log.verify().await.unwrap(), 60);
    let stored = std::fs::read(partition_dir.join("00000000000000000000.log")).unwrap();
    let header = BatchHeader::decode(&stored).unwrap();
    assert_eq!(header.partition_id, 3);
}

// Direct mode: a write pads the file to the next block with zeros and
// the next write rewrites the partial block whole; a process crash
// (no close) leaves the padding, which recovery trims without calling
// it a torn tail; appends continue where the written data ends.
#[test]
fn direct_writes_rewrite_the_tail_block_and_padding_is_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let clock: Rc<dyn Clock> = Rc::new(SystemClock);
        let config = PartitionConfig::new(0, 1 << 20).with_access(Access::Direct);
        let mut log =
            PartitionLog::open(MonoioIo, dir.path(), config.clone(), clock.clone(), pool())
                .await
                .unwrap();
        let path = dir.path().join("00000000000000000000.log");
        log.append_and_write(&producer_batch(2, 10)).await.unwrap();
        let size = log.active().size_bytes;
        assert!(size % IO_ALIGN as u64 != 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), align_up(size));
        log.append_and_write(&producer_batch(3, 2000))
            .await
            .unwrap();
        let size = log.active().size_bytes;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), align_up(size));
        log.sync().await.unwrap();
        drop(log);
        let mut log = PartitionLog::open(MonoioIo, dir.path(), config, clock, pool())
            .await
            .unwrap();
        assert_eq!(log.recovery_report().torn_tail, None);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert_eq!(log.next_offset(), 5);
        let appended = log.append_and_write(&producer_batch(1, 1)).await.unwrap();
        assert_eq!(appended.base_offset, 5);
        let read = log.read_by_offset(0, 10, u64::MAX).await.unwrap();
        assert_eq!(offsets(&read), (0..6).collect::<Vec<_>>());
    });
}

// A torn tail on real files (a half-written batch) is truncated on open.
#[test]
fn monoio_torn_tail_truncated() {
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let clock: Rc<dyn Clock> = Rc::new(SystemClock);
        let config = PartitionConfig::new(0, 1 << 20);
        let mut log =
            PartitionLog::open(MonoioIo, dir.path(), config.clone(), clock.clone(), pool())
                .await
                .unwrap();
        log.append_and_write(&producer_batch(2, 10)).await.unwrap();
        log.sync().await.unwrap();
        drop(log);
        let path = dir.path().join("00000000000000000000.log");
        let good_len = std::fs::metadata(&path).unwrap().len();
        let torn = producer_batch(5, 100);
        let half = &torn.bytes()[..200];
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(half);
        std::fs::write(&path, bytes).unwrap();
        let mut log = PartitionLog::open(MonoioIo, dir.path(), config, clock, pool())
            .await
            .unwrap();
        let torn = log.recovery_report().torn_tail.clone().unwrap();
        assert_eq!(torn.position, good_len);
        assert_eq!(torn.first_dropped_offset, 2);
        assert_eq!(torn.bytes_dropped, 200);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
        assert_eq!(
            log.append_and_write(&producer_batch(1, 1))
                .await
                .unwrap()
                .base_offset,
            2
        );
    });
}

// Over its budget a shard takes only what each operation needs: a read
// window holds just the records a poll asked for, a tail just the batch;
// within budget a window reads ahead and a tail leaves room.
#[test]
fn over_budget_buffers_take_only_what_is_needed() {
    for (budget, reads_ahead) in [(u64::MAX, true), (0, false)] {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let pool = BufferPool::with_budget(1 << 20, budget);
            let config = PartitionConfig::new(0, 1 << 30).with_access(Access::Direct);
            let mut log =
                PartitionLog::open(MonoioIo, dir.path(), config, Rc::new(SystemClock), pool)
                    .await
                    .unwrap();
            for _ in 0..8 {
                log.append_and_write(&producer_batch(4, 3000))
                    .await
                    .unwrap();
            }
            let tail_capacity = log.tail.capacity();
            log.close().await.unwrap();
            drop(log);
            let pool = BufferPool::with_budget(1 << 20, budget);
            let config = PartitionConfig::new(0, 1 << 30).with_access(Access::Direct);
            let log = PartitionLog::open(MonoioIo, dir.path(), config, Rc::new(SystemClock), pool)
                .await
                .unwrap();
            let read = log.read_by_offset(0, 4, u64::MAX).await.unwrap();
            assert_eq!(read.message_count, 4);
            let window_len = log.read_path.window().as_ref().unwrap().buf.len();
            let written = log.stats().bytes as usize;
            if reads_ahead {
                assert_eq!(window_len, written, "the whole (small) segment at once");
            } else {
                assert!(
                    window_len <= 5 * IO_ALIGN,
                    "one batch's blocks: {window_len}"
                );
                assert!(tail_capacity <= 2 * IO_ALIGN, "{tail_capacity}");
            }
        });
    }
}

// A sequential reader of a segment larger than a read window, in both I/O
// modes: every window after the first is read ahead while the one before
// is served (the first poll of a window already starts the read of the
// next), every message comes back once and in order, and when the
// partition goes idle both windows go back to the pool.
#[test]
fn sequential_reads_prefetch_the_next_window() {
    for access in [Access::Buffered, Access::Direct] {
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let config = PartitionConfig::new(0, 1 << 30).with_access(access);
            let mut log = PartitionLog::open(
                MonoioIo,
                dir.path(),
                config.clone(),
                Rc::new(SystemClock),
                pool(),
            )
            .await
            .unwrap();
            // 48 batches of 100 x 2,000 B: about 9.6 MB, over two windows.
            for _ in 0..48 {
                log.append_and_write(&producer_batch(100, 2000))
                    .await
                    .unwrap();
            }
            log.close().await.unwrap();
            drop(log);
            let pool = pool();
            let log = PartitionLog::open(
                MonoioIo,
                dir.path(),
                config,
                Rc::new(SystemClock),
                pool.clone(),
            )
            .await
            .unwrap();
            // The write tail's buffer; the windows come on top.
            let at_open = pool.stats().outstanding_bytes;
            let mut next = 0u64;
            let mut prefetched = 0;
            while next < 4800 {
                let read = log.read_by_offset(next, 500, 1 << 20).await.unwrap();
                let got = offsets(&read);
                assert!(!got.is_empty(), "{access:?}: nothing at {next}");
                assert_eq!(got, (next..next + got.len() as u64).collect::<Vec<_>>());
                if next == 0 {
                    assert!(
                        log.read_ahead.has_prefetch(),
                        "{access:?}: the first poll of a window did not start reading the next"
                    );
                }
                next += got.len() as u64;
                if log.read_ahead.has_prefetch() {
                    prefetched += 1;
                }
            }
            assert!(prefetched > 0, "{access:?}: no window was read ahead");
            log.release_idle_window();
            log.release_idle_window();
            assert!(!log.read_ahead.has_prefetch());
            assert_eq!(pool.stats().outstanding_bytes, at_open, "{access:?}");
        });
    }
}

use super::sim::{SimClock, SimIo, block_on};

/// A direct-I/O log on the simulated disk with `batches` batches of 100 x
/// 2,000 B written, closed and opened again (nothing of it in memory).
async fn reopened_sim_log(io: &SimIo, batches: usize) -> PartitionLog<SimIo> {
    reopened_sim_log_with(io, batches, pool()).await
}

/// [`reopened_sim_log`], opened again with `pool`.
async fn reopened_sim_log_with(
    io: &SimIo,
    batches: usize,
    reopen_pool: BufferPool,
) -> PartitionLog<SimIo> {
    let dir = PathBuf::from("/sim/partition");
    let config = PartitionConfig::new(0, 1 << 30).with_access(Access::Direct);
    let clock = Rc::new(SimClock::new(1_700_000_000_000_000));
    let mut log = PartitionLog::open(io.clone(), &dir, config.clone(), clock.clone(), pool())
        .await
        .unwrap();
    for _ in 0..batches {
        log.append_and_write(&producer_batch(100, 2000))
            .await
            .unwrap();
    }
    log.close().await.unwrap();
    drop(log);
    PartitionLog::open(io.clone(), &dir, config, clock, reopen_pool)
        .await
        .unwrap()
}

// A sequential consumer's windows overlap (a poll straddling a window's end
// is served whole from the next), but the overlap is copied from the window
// in memory: the disk reads each byte of the log once.
#[test]
fn sequential_reads_read_each_byte_from_the_disk_once() {
    // 80 batches of 100 x 2,000 B: about 16 MB, four windows and more.
    let io = SimIo::new(7);
    block_on(async {
        let log = reopened_sim_log(&io, 80).await;
        let log_bytes = log
            .segments
            .iter()
            .map(|segment| segment.size_bytes)
            .sum::<u64>();
        let before = io.stats().read_bytes;
        let mut next = 0u64;
        while next < 8000 {
            let read = log.read_by_offset(next, 500, 1 << 20).await.unwrap();
            let got = offsets(&read);
            assert_eq!(got, (next..next + got.len() as u64).collect::<Vec<_>>());
            next += got.len() as u64;
        }
        let read = io.stats().read_bytes - before;
        assert!(
            read <= align_up(log_bytes) + 16 * IO_ALIGN as u64,
            "{read} bytes read from the disk for a log of {log_bytes}"
        );
    });
}

// A sequential consumer whose replies are still being sent when its next
// poll moves to a new window (as when another shard sends them): each
// window goes back to the pool once its last reply is done and is read
// into again, so the scan allocates a few buffers, not one per window
// (each fresh one faulted in and zeroed by the kernel inside the read).
#[test]
fn windows_still_sending_come_back_to_the_pool() {
    // 160 batches of 100 x 2,000 B: about 32 MB, eight windows.
    let io = SimIo::new(11);
    block_on(async {
        // A shard's pool keeps up to 32 MiB of idle buffers.
        let pool = BufferPool::new(32 << 20);
        let log = reopened_sim_log_with(&io, 160, pool.clone()).await;
        let before = pool.stats();
        let mut next = 0u64;
        let mut sending = None;
        while next < 16_000 {
            // With room for a reply header, as the pump reads: whole
            // records are lent from the window, not copied.
            let read = log
                .read_by_offset_into(next, 500, 1 << 20, 64)
                .await
                .unwrap();
            let got = offsets(&read);
            assert_eq!(got, (next..next + got.len() as u64).collect::<Vec<_>>());
            next += got.len() as u64;
            // The previous reply is done only now, after this poll.
            sending = Some(read);
        }
        drop(sending);
        let stats = pool.stats();
        let allocations = stats.allocations - before.allocations;
        let reuses = stats.reuses - before.reuses;
        assert!(
            allocations <= 4 && reuses >= 7,
            "{allocations} buffers allocated, {reuses} reused for a scan of eight windows"
        );
        log.release_idle_window();
        log.release_idle_window();
        pool.trim();
        assert_eq!(pool.stats().lent_bytes, 0, "every reply is done");
    });
}

// A read dropped while the disk still works on it is kept until it
// completes (the kernel writes into its buffer), and `close` waits for it;
// with reads parking, a read that must wait says so instead of waiting.
#[test]
fn reads_in_flight_outlive_their_drop_and_close_waits_for_them() {
    use super::StorageError;
    let io = SimIo::new(9);
    block_on(async {
        let mut log = reopened_sim_log(&io, 4).await;
        io.hold_reads(true);
        log.set_park_reads(true);
        let parked = log.read_by_offset(0, 100, 1 << 20).await;
        assert!(
            matches!(parked, Err(StorageError::ReadInFlight)),
            "{parked:?}"
        );
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(log.poll_read(&mut context).is_pending());
        log.drop_prefetch(None);
        assert_eq!(
            log.read_ahead.orphan_count(),
            1,
            "a read in flight was freed"
        );
        assert!(log.poll_orphan_reads(&mut context).is_pending());
        io.hold_reads(false);
        // The pump's idle check frees a dropped read once it is done.
        log.release_idle_window();
        assert!(log.read_ahead.orphan_count() == 0);
        log.set_park_reads(false);
        log.close().await.unwrap();
        assert!(log.read_ahead.orphan_count() == 0);
        let read = log.read_by_offset(0, 100, 1 << 20).await.unwrap();
        assert_eq!(offsets(&read), (0..100).collect::<Vec<_>>());
    });
}
