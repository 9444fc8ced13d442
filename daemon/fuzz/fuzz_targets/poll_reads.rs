//! Fuzz target `poll_reads`: how a poll reply is assembled from read
//! windows. The input chooses the layout (segment size, read-window size,
//! direct or buffered access), appends batches of any shape (written in
//! bursts, so the write path's buffers become windows too), and then polls
//! from any offset with any count, byte cap and reply headroom, holding
//! some answers back (like replies a slow client has not read yet) while
//! later polls replace the windows they lend from.
//!
//! Properties: every answer holds dense offsets from where it should
//! start, exactly as many messages as asked for unless the byte cap ended
//! it (never before its first record, never past the cap after it), every
//! stored record byte for byte as appended (offsets and timestamps as the
//! log stamped them), and every held answer unchanged when it is finally
//! dropped.

#![no_main]

use std::path::PathBuf;
use std::rc::Rc;

use arbitrary::{Result, Unstructured};
use iggyd_wire::batch::{self, BatchHeader, MessageSpec, ValidBatch, encode_producer_batch};
use iggyd_storage::sim::{SimClock, SimIo, block_on};
use iggyd_storage::{Access, BufferPool, PartitionConfig, PartitionLog, ReadBatches, StorageIo};
use libfuzzer_sys::fuzz_target;

const NOW_MICROS: u64 = 1_700_000_000_000_000;

/// One appended message as a poll must return it: its offset and the
/// payload it was sent with.
struct Stored {
    offset: u64,
    payload: Vec<u8>,
}

fn appended_batch(u: &mut Unstructured<'_>, first_payload: u64) -> Result<(ValidBatch, Vec<Vec<u8>>)> {
    let count = u.int_in_range(1..=12u32)?;
    let mut payloads = Vec::new();
    let specs: Vec<MessageSpec> = (0..count)
        .map(|index| {
            let len = if u.ratio(1u8, 6)? {
                u.int_in_range(1..=20_000)?
            } else {
                u.int_in_range(1..=300)?
            };
            // Payloads named by their place in the log, so a misplaced
            // byte range shows.
            let tag = (first_payload + u64::from(index)).to_le_bytes();
            let payload: Vec<u8> = (0..len).map(|at| tag[at % 8] ^ (at / 8) as u8).collect();
            payloads.push(payload.clone());
            Ok(MessageSpec {
                id: u128::from(index) + 1,
                timestamp_delta: index,
                payload,
                user_headers: Vec::new(),
            })
        })
        .collect::<Result<_>>()?;
    let bytes = encode_producer_batch(NOW_MICROS - 1_000_000, &specs);
    let len = bytes.len();
    Ok((ValidBatch::new(bytes, 0..len).expect("a fresh batch validates"), payloads))
}

/// The messages of an answer: `(offset, payload)`, records checked whole.
fn messages_of(read: &ReadBatches) -> (Vec<(u64, Vec<u8>)>, usize) {
    let records = read.records_bytes();
    let mut rest: &[u8] = &records;
    let mut out = Vec::new();
    let mut count = 0;
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).expect("a served record has a header");
        let length = header.batch_length as usize;
        let record = &rest[..length];
        batch::validate_record(record).expect("a served record is whole");
        for frame in batch::frames(record).expect("frames") {
            let frame = frame.expect("frame");
            out.push((frame.offset, record[frame.payload].to_vec()));
        }
        rest = &rest[length..];
        count += 1;
    }
    (out, count)
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let io = SimIo::new(1);
    let dir = PathBuf::from("/data/streams/1/topics/1/partitions/0");
    block_on(io.create_dir_all(&dir)).expect("mkdir");
    let access = if u.arbitrary()? {
        Access::Direct
    } else {
        Access::Buffered
    };
    let config = PartitionConfig::new(0, u.int_in_range(1..=16u64)? * 4096)
        .with_access(access)
        .with_read_window(u.int_in_range(1..=8usize)? * 4096);
    let clock = Rc::new(SimClock::new(NOW_MICROS));
    let Ok(mut log) = block_on(PartitionLog::open(
        io.clone(),
        &dir,
        config,
        clock,
        BufferPool::new(1 << 20),
    )) else {
        return Ok(());
    };
    let mut stored: Vec<Stored> = Vec::new();
    for _ in 0..u.int_in_range(1..=40)? {
        let (batch, payloads) = appended_batch(u, stored.len() as u64)?;
        let appended = block_on(log.append(&batch)).expect("append");
        for (index, payload) in payloads.into_iter().enumerate() {
            stored.push(Stored {
                offset: appended.base_offset + index as u64,
                payload,
            });
        }
        if u.ratio(1u8, 3)? {
            block_on(log.write_pending()).expect("write");
        }
    }
    block_on(log.write_pending()).expect("write");
    let next = log.next_offset();
    let mut held: Vec<(Vec<u8>, ReadBatches)> = Vec::new();
    while !u.is_empty() {
        let from = u.int_in_range(0..=next + 2)?;
        let count = if u.ratio(1u8, 4)? {
            u32::MAX
        } else {
            u.int_in_range(1..=400)?
        };
        let bytes_max = if u.arbitrary()? {
            u64::MAX
        } else {
            u.int_in_range(0..=64 * 1024)?
        };
        let headroom = if u.arbitrary()? { 272 } else { 0 };
        let read = block_on(log.read_by_offset_into(from, count, bytes_max, headroom))
            .expect("a read of a healthy log");
        assert_eq!(read.headroom, headroom);
        let (messages, records) = messages_of(&read);
        let start = from.min(next);
        let wanted = u64::from(count).min(next - start);
        assert!(messages.len() as u64 <= wanted);
        if (messages.len() as u64) < wanted {
            assert!(
                !messages.is_empty()
                    && (records == 1 || read.records_len() as u64 <= bytes_max),
                "{} messages in {records} records ({} bytes) for {wanted} wanted under a cap of {bytes_max}",
                messages.len(),
                read.records_len()
            );
        }
        for (index, (offset, payload)) in messages.iter().enumerate() {
            let expected = &stored[(start + index as u64) as usize];
            assert_eq!(*offset, expected.offset, "dense offsets from {start}");
            assert!(*payload == expected.payload, "the payload at {offset}");
        }
        if u.ratio(1u8, 3)? {
            held.push((read.records_bytes().into_owned(), read));
        }
        if held.len() > 4 || u.ratio(1u8, 5)? {
            if let Some((bytes, read)) = (!held.is_empty()).then(|| held.remove(0)) {
                assert!(read.records_bytes().as_ref() == bytes.as_slice(), "a held answer changed");
            }
        }
    }
    for (bytes, read) in held {
        assert!(read.records_bytes().as_ref() == bytes.as_slice(), "a held answer changed");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});
