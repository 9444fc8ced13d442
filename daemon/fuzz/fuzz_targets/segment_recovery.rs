//! Fuzz target `segment_recovery`: arbitrary segment files on `SimIo`, then
//! `PartitionLog::open`. The input builds one to three segments; each
//! segment's `.log` and `.index` are either raw fuzzer bytes or real stamped
//! batches with their real index entries, then damaged by a few edits (byte
//! flips, truncations, appended garbage, a missing index). Start offsets
//! include values near `u64::MAX`.
//!
//! Properties: `open` returns a partition or a typed `StorageError`, never a
//! panic. When it opens, every read (by offset, timestamp, first, last,
//! the full scrub) returns either a typed error or well-formed records whose
//! offsets are dense, in the requested range and below `next_offset`; a
//! scrub that succeeds saw every stored message. An `Open` partition takes an
//! append that reads back, and recovery is idempotent: reopening gives the
//! same offsets.

#![no_main]

use std::path::{Path, PathBuf};
use std::rc::Rc;

use arbitrary::{Result, Unstructured};
use iggyd_wire::batch::{self, BatchHeader, MessageSpec, ValidBatch, encode_producer_batch};
use iggyd_storage::segment::{index_path, log_path};
use iggyd_storage::sim::{SimClock, SimIo, block_on};
use iggyd_storage::{
    BufferPool, PartitionConfig, PartitionLog, PartitionState, ReadBatches, StorageError, StorageIo,
};
use libfuzzer_sys::fuzz_target;

const NOW_MICROS: u64 = 1_700_000_000_000_000;

/// An index entry with any field values and a valid XXH32, so damage gets
/// past the checksum (layout in `storage::index::IndexEntry`).
fn raw_index_entry(
    relative: u32,
    count: u32,
    position: u64,
    length: u32,
    timestamp: u64,
) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[0..4].copy_from_slice(&relative.to_le_bytes());
    bytes[4..8].copy_from_slice(&count.to_le_bytes());
    bytes[8..16].copy_from_slice(&position.to_le_bytes());
    bytes[16..20].copy_from_slice(&length.to_le_bytes());
    bytes[20..28].copy_from_slice(&timestamp.to_le_bytes());
    let checksum = xxhash_rust::xxh32::xxh32(&bytes[0..28], 0);
    bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
    bytes
}

/// Stamped batches for a segment starting at `start`, with checksums that
/// verify: the `.log` bytes, the `.index` bytes and the next offset. Most
/// batches follow each other as the daemon writes them; some are hostile:
/// an arbitrary base offset or timestamp, offsets running past `u64::MAX`,
/// or an index entry whose fields lie (with a valid entry checksum).
fn real_segment(u: &mut Unstructured<'_>, start: u64) -> Result<(Vec<u8>, Vec<u8>, u64)> {
    let mut log = Vec::new();
    let mut index = Vec::new();
    let mut next = start;
    let mut timestamp = NOW_MICROS - 1_000_000;
    for _ in 0..u.int_in_range(0..=4)? {
        let count = u.int_in_range(1..=4u32)?;
        let messages: Vec<MessageSpec> = (0..count)
            .map(|index| {
                Ok(MessageSpec {
                    id: u128::from(index) + 1,
                    timestamp_delta: index,
                    payload: vec![u.arbitrary::<u8>()?; u.int_in_range(1..=40)?],
                    user_headers: Vec::new(),
                })
            })
            .collect::<Result<_>>()?;
        let mut record = encode_producer_batch(NOW_MICROS - 5_000_000, &messages);
        let hostile = u.ratio(1u8, 8)?;
        let base_offset = if hostile && u.arbitrary()? {
            u.arbitrary()?
        } else {
            next
        };
        timestamp = if hostile && u.arbitrary()? {
            u.arbitrary()?
        } else {
            timestamp.saturating_add(u64::from(u.int_in_range(0..=1000u16)?))
        };
        batch::stamp(&mut record, 0, base_offset, timestamp).expect("a fresh batch stamps");
        let entry = if hostile && u.arbitrary()? {
            raw_index_entry(
                u.arbitrary()?,
                u.arbitrary()?,
                u.arbitrary()?,
                u.arbitrary()?,
                u.arbitrary()?,
            )
        } else {
            raw_index_entry(
                base_offset.wrapping_sub(start) as u32,
                count,
                log.len() as u64,
                record.len() as u32,
                timestamp,
            )
        };
        index.extend_from_slice(&entry);
        log.extend_from_slice(&record);
        next = base_offset.wrapping_add(u64::from(count));
    }
    Ok((log, index, next))
}

/// Up to `max` raw input bytes.
fn raw(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let len = u.int_in_range(0..=max)?;
    Ok(u.bytes(len)?.to_vec())
}

/// A few edits that model damage: flips, truncation, appended garbage.
fn damage(u: &mut Unstructured<'_>, bytes: &mut Vec<u8>) -> Result<()> {
    for _ in 0..u.int_in_range(0..=3)? {
        match u.int_in_range(0..=3u8)? {
            0 if !bytes.is_empty() => {
                let at = u.choose_index(bytes.len())?;
                bytes[at] ^= u.int_in_range(1..=255u8)?;
            }
            1 => {
                let keep = u.int_in_range(0..=bytes.len())?;
                bytes.truncate(keep);
            }
            2 => {
                let garbage = raw(u, 300)?;
                bytes.extend_from_slice(&garbage);
            }
            _ => {}
        }
    }
    Ok(())
}

fn first_start(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 => u64::from(u.arbitrary::<u16>()?),
        2 => u64::MAX - u64::from(u.arbitrary::<u8>()?),
        _ => u.arbitrary()?,
    })
}

/// Lays out the partition directory on `io`.
fn build(u: &mut Unstructured<'_>, io: &SimIo, dir: &Path) -> Result<()> {
    let mut start = first_start(u)?;
    for _ in 0..u.int_in_range(1..=3)? {
        let (mut log, mut index, next) = if u.arbitrary()? {
            real_segment(u, start)?
        } else {
            let log = raw(u, 2048)?;
            let index = raw(u, 256)?;
            (log, index, u.arbitrary()?)
        };
        damage(u, &mut log)?;
        damage(u, &mut index)?;
        io.set_contents(&log_path(dir, start), log);
        if u.arbitrary()? {
            io.set_contents(&index_path(dir, start), index);
        }
        start = if u.ratio(7u8, 8)? {
            next
        } else {
            u.arbitrary()?
        };
    }
    if u.ratio(1u8, 8)? {
        io.set_contents(&dir.join("00000000000000000001.tmp"), Vec::new());
    }
    Ok(())
}

/// Checks records returned by a read: each is a valid record, offsets are
/// dense from `first`, inside `[first_offset, next_offset)`.
/// Checks a read's layout, offsets and counts; returns whether every
/// message checksum also holds. The hot read path checks records against
/// the index and the batch checksum only (a flipped payload bit passes it);
/// hashing every message is the scrub's job (`verify`).
fn check_read(log: &PartitionLog<SimIo>, read: &ReadBatches, from: u64, count: u32) -> bool {
    let Some(first) = read.first_offset else {
        assert!(read.bytes.is_empty());
        assert_eq!(read.message_count, 0);
        return true;
    };
    assert!(
        first >= from.max(log.first_offset()),
        "{first} before {from}"
    );
    assert!(read.message_count <= count);
    let mut rest = &read.bytes[..];
    let mut expected = first;
    let mut records = 0;
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).expect("a served record has a header");
        let length = header.batch_length as usize;
        let record = &rest[..length];
        if batch::validate_record(record).is_err() {
            // Damage the hot path does not look for (a message's bytes or a
            // frame header): what this read counted cannot be checked
            // against the frames; the scrub must report it.
            return false;
        }
        for frame in batch::frames(record).unwrap() {
            assert_eq!(frame.unwrap().offset, expected);
            expected += 1;
        }
        rest = &rest[length..];
        records += 1;
    }
    assert_eq!(records, read.records);
    assert_eq!(expected - first, u64::from(read.message_count));
    assert_eq!(read.last_offset, Some(expected - 1));
    assert!(expected <= log.next_offset());
    true
}

fn exercise(log: &mut PartitionLog<SimIo>, u: &mut Unstructured<'_>) -> Result<()> {
    let first = log.first_offset();
    let next = log.next_offset();
    assert!(first <= next);
    let _ = log.stats();
    let from = first.saturating_add(u.int_in_range(0..=8)?);
    let count = u.int_in_range(1..=16)?;
    let mut intact = true;
    if let Ok(read) = block_on(log.read_by_offset(from, count, 1 << 20)) {
        intact &= check_read(log, &read, from, count);
    }
    if let Ok(read) = block_on(log.read_by_timestamp(u.arbitrary()?, count, 4096)) {
        intact &= check_read(log, &read, 0, count);
    }
    if let Ok(read) = block_on(log.read_first(count, 1 << 20)) {
        intact &= check_read(log, &read, 0, count);
    }
    if let Ok(read) = block_on(log.read_last(count, 1 << 20)) {
        intact &= check_read(log, &read, next.saturating_sub(u64::from(count)), count);
    }
    match block_on(log.verify()) {
        Ok(checked) => {
            assert_eq!(checked, next - first, "the scrub saw every stored message");
            assert!(intact, "a damaged message was served and the scrub passed");
        }
        // The scrub found damage (what a served damaged message must lead to).
        Err(_) => {}
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let io = SimIo::new(1);
    let dir = PathBuf::from("/data/streams/1/topics/1/partitions/0");
    block_on(io.create_dir_all(&dir)).unwrap();
    if build(&mut u, &io, &dir).is_err() {
        return;
    }
    let clock = Rc::new(SimClock::new(NOW_MICROS));
    let segment_size = u.int_in_range(1..=1u64 << 20).unwrap_or(4096);
    let config = PartitionConfig::new(0, segment_size);
    let Ok(mut log) = block_on(PartitionLog::open(
        io.clone(),
        dir.clone(),
        config.clone(),
        clock.clone(),
        BufferPool::new(1 << 20),
    )) else {
        return;
    };
    // The state recovery decided. Reads may quarantine the partition later
    // (a sealed segment with a clean index is trusted on open and checked
    // batch by batch only when read); that decision lives in memory.
    let state = log.state();
    let _ = exercise(&mut log, &mut u);
    let next = log.next_offset();
    let first = log.first_offset();
    drop(log);

    // Recovery is idempotent: a second open finds what the first left.
    let mut log = block_on(PartitionLog::open(
        io.clone(),
        dir.clone(),
        config.clone(),
        clock.clone(),
        BufferPool::new(1 << 20),
    ))
    .expect("a partition that opened once opens again");
    assert_eq!((log.first_offset(), log.next_offset()), (first, next));
    assert_eq!(
        log.state() == PartitionState::Open,
        state == PartitionState::Open
    );
    if state != PartitionState::Open {
        return;
    }

    // An open partition takes an append that reads back.
    let message = MessageSpec {
        id: 9,
        timestamp_delta: 0,
        payload: b"after recovery".to_vec(),
        user_headers: Vec::new(),
    };
    let encoded = encode_producer_batch(NOW_MICROS, &[message]);
    let range = 0..encoded.len();
    let batch = ValidBatch::new(encoded, range).expect("the encoder writes valid batches");
    let appended = match block_on(log.append_and_write(&batch)) {
        Ok(appended) => appended,
        Err(StorageError::OffsetsExhausted { .. }) if next == u64::MAX => return,
        Err(error) => panic!("append to an open partition failed: {error}"),
    };
    assert_eq!(appended.base_offset, next);
    block_on(log.sync()).expect("sync on SimIo");
    let read = block_on(log.read_by_offset(next, 1, 1 << 20)).expect("read the appended batch");
    assert!(check_read(&log, &read, next, 1), "a fresh append reads back intact");
    assert_eq!(read.message_count, 1);
});
