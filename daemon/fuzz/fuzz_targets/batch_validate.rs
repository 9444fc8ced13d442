//! Fuzz target `batch_validate`: arbitrary bytes as a message batch record
//! (the send body's batch, a stored record, a poll reply record).
//!
//! Properties: `validate`, `validate_record`, `frames`, `stamp` and `slice`
//! never panic; a batch `validate` accepts is internally consistent (its
//! frames tile the record, the counts agree, the payload sum matches), stays
//! valid after `stamp` (stamping rewrites the checksum it covers), and every
//! `slice` of it is itself a valid record holding the same frames.

#![no_main]

use iggyd_wire::batch::{self, BATCH_HEADER_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = batch::validate_record(data);
    if let Ok(frames) = batch::frames(data) {
        for frame in frames.take(4096) {
            let Ok(frame) = frame else { break };
            assert!(frame.frame.end <= data.len());
        }
    }
    let Ok(summary) = batch::validate(data) else {
        return;
    };
    let header = summary.header;
    assert_eq!(header.batch_length, data.len() as u64);
    assert!(header.message_count >= 1);
    let mut payload_bytes = 0u64;
    let mut end = BATCH_HEADER_SIZE;
    let mut count = 0u32;
    for (index, frame) in batch::frames(data).unwrap().enumerate() {
        let frame = frame.expect("a validated batch has whole frames");
        assert_eq!(frame.index as usize, index);
        assert_eq!(frame.frame.start, end);
        assert_eq!(frame.header.offset_delta, frame.index);
        end = frame.frame.end;
        payload_bytes += frame.payload.len() as u64;
        count += 1;
    }
    assert_eq!(end, data.len());
    assert_eq!(count, header.message_count);
    assert_eq!(payload_bytes, summary.payload_bytes);

    let mut stamped = data.to_vec();
    let base_offset = u64::from(data.len() as u32) << 8;
    let stamped_header = batch::stamp(&mut stamped, 3, base_offset, 1_700_000_000_000_000)
        .expect("a validated batch stamps");
    assert_eq!(stamped_header.base_offset, base_offset);
    let restamped = batch::validate(&stamped).expect("a stamped batch stays valid");
    assert_eq!(restamped.header.message_count, header.message_count);

    let count = header.message_count;
    for (start, stop) in [(0, count), (0, 1), (count - 1, count), (count / 2, count)] {
        if start >= stop {
            continue;
        }
        let sliced = batch::slice(&stamped, start, stop).expect("an in-range slice works");
        let summary = batch::validate_record(&sliced).expect("a slice is a valid record");
        assert_eq!(summary.header.message_count, stop - start);
        assert_eq!(summary.header.base_offset, base_offset);
    }
    assert!(batch::slice(&stamped, count, count + 1).is_err());
});
