//! Unit tests of the batch record: validation of every field and frame,
//! stamping, slicing, and decoding arbitrary bytes without a panic. They
//! build records with `encode_producer_batch` and corrupt them byte by
//! byte; they must not touch files or the network.

use super::*;

fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn write_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn message(index: u8, payload_len: usize, headers_len: usize) -> MessageSpec {
    MessageSpec {
        id: u128::from(index) + 1,
        timestamp_delta: u32::from(index) * 10,
        payload: vec![index; payload_len],
        user_headers: vec![0xA0 | (index & 0x0F); headers_len],
    }
}

fn good_batch() -> Vec<u8> {
    encode_producer_batch(
        1_000,
        &[message(0, 5, 0), message(1, 5, 7), message(2, 0, 3)],
    )
}

// A batch built by the encoder validates, and its summary matches.
#[test]
fn good_batch_validates() {
    let bytes = good_batch();
    let summary = validate(&bytes).unwrap();
    assert_eq!(summary.header.message_count, 3);
    assert_eq!(summary.header.batch_length, bytes.len() as u64);
    assert_eq!(summary.payload_bytes, 10);
    assert_eq!(bytes.len(), 256 + 53 + 60 + 51);
}

// Flipping a payload byte breaks that frame's checksum: 4027.
#[test]
fn frame_checksum_broken() {
    let mut bytes = good_batch();
    let second_payload = 256 + 53 + 48;
    bytes[second_payload] ^= 1;
    let error = validate(&bytes).unwrap_err();
    assert!(
        matches!(error, BatchError::FrameChecksum { index: 1, .. }),
        "{error}"
    );
    assert_eq!(error.status().code(), 4027);
}

// Changing a frame's checksum field (and fixing nothing else) is caught by
// the frame check first; changing a header field breaks the batch checksum.
#[test]
fn batch_checksum_broken() {
    let mut bytes = good_batch();
    bytes[ORIGIN_TIMESTAMP_AT] ^= 0x40;
    let error = validate(&bytes).unwrap_err();
    assert!(matches!(error, BatchError::BatchChecksum { .. }), "{error}");
    assert_eq!(error.status().code(), 4039);

    let mut bytes = good_batch();
    bytes[BATCH_CHECKSUM_AT] ^= 1;
    assert_eq!(validate(&bytes).unwrap_err().status().code(), 4039);
}

// Every prefix of a valid batch is rejected without a panic.
#[test]
fn truncated_batches_are_rejected() {
    let bytes = good_batch();
    for len in 0..bytes.len() {
        let error = validate(&bytes[..len]).unwrap_err();
        assert_eq!(error.status().code(), 3, "len {len}: {error}");
    }
    // Truncated and length field fixed up: frames no longer tile.
    let mut short = bytes[..bytes.len() - 1].to_vec();
    let len = short.len() as u64;
    write_u64(&mut short, BATCH_LENGTH_AT, len);
    assert!(matches!(
        validate(&short).unwrap_err(),
        BatchError::FrameTruncated { index: 2, .. }
    ));
}

// Reserved bytes in the batch header and frame header must be zero.
#[test]
fn reserved_bytes_set() {
    let mut bytes = good_batch();
    bytes[200] = 7;
    assert_eq!(
        validate(&bytes).unwrap_err(),
        BatchError::ReservedNotZero { at: 200, value: 7 }
    );
    let mut bytes = good_batch();
    bytes[256 + 44] = 1;
    assert!(matches!(
        validate(&bytes).unwrap_err(),
        BatchError::FrameReservedNotZero {
            index: 0,
            at: 44,
            ..
        }
    ));
}

// message_count 0 maps to 4009; a count larger than the frames is caught.
#[test]
fn message_count_checks() {
    let mut bytes = good_batch();
    write_u32(&mut bytes, MESSAGE_COUNT_AT, 0);
    let error = validate(&bytes).unwrap_err();
    assert_eq!(error, BatchError::EmptyBatch);
    assert_eq!(error.status().code(), 4009);

    let mut bytes = good_batch();
    write_u32(&mut bytes, MESSAGE_COUNT_AT, 2);
    assert!(matches!(
        validate(&bytes).unwrap_err(),
        BatchError::TrailingBytes { .. }
    ));
    let mut bytes = good_batch();
    write_u32(&mut bytes, MESSAGE_COUNT_AT, 4);
    assert!(matches!(
        validate(&bytes).unwrap_err(),
        BatchError::FrameTruncated { index: 3, .. }
    ));
}

// A length field that disagrees with the bytes is a typed error.
#[test]
fn length_mismatch() {
    let mut bytes = good_batch();
    bytes.push(0);
    assert!(matches!(
        validate(&bytes).unwrap_err(),
        BatchError::LengthMismatch { .. }
    ));
}

// Stamping sets the server fields, keeps the frames, and still validates.
#[test]
fn stamp_then_iterate() {
    let mut bytes = good_batch();
    let before = bytes.clone();
    let header = stamp(&mut bytes, 7, 100, 5_000_000).unwrap();
    assert_eq!(header.base_offset, 100);
    assert_eq!(bytes[BATCH_HEADER_SIZE..], before[BATCH_HEADER_SIZE..]);
    validate(&bytes).unwrap();
    let frames: Vec<Frame> = frames(&bytes).unwrap().map(Result::unwrap).collect();
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[2].offset, 102);
    assert_eq!(frames[1].timestamp, 5_000_000);
    assert_eq!(frames[1].origin_timestamp, 1_010);
    assert_eq!(&bytes[frames[1].payload.clone()], &[1u8; 5]);
    assert_eq!(&bytes[frames[1].user_headers.clone()], &[0xA1u8; 7]);
}

// A batch's own buffer, stamped in place and cut to the batch, is what
// stamping a copy gives (what a log stores), wherever in its frame the
// batch sat.
#[test]
fn into_stored_is_the_stamped_copy() {
    let batch = encode_producer_batch(1_000, &[message(0, 5, 0), message(1, 9, 0)]);
    for (before, after) in [(0, 0), (9, 0), (0, 5), (13, 21)] {
        let mut frame = vec![0xEE; before];
        frame.extend_from_slice(&batch);
        frame.extend(std::iter::repeat_n(0xDD, after));
        let valid = ValidBatch::new(frame.clone(), before..before + batch.len()).unwrap();
        let mut copy = batch.clone();
        valid.stamp_copy(&mut copy, 3, 77, 9_000);
        let stored = valid.into_stored(3, 77, 9_000);
        assert_eq!(stored, copy, "batch at {before}, {after} bytes after");
        assert_eq!(validate(&stored).unwrap().header.base_offset, 77);
    }
}

// A slice is a well-formed record (checksums valid) whose frames keep
// their offsets; only the dense-delta rule differs when start > 0.
#[test]
fn slice_keeps_offsets() {
    let mut bytes = good_batch();
    stamp(&mut bytes, 1, 40, 9).unwrap();
    let tail = slice(&bytes, 1, 3).unwrap();
    let header = BatchHeader::decode(&tail).unwrap();
    assert_eq!(header.base_offset, 40);
    assert_eq!(header.message_count, 2);
    assert_eq!(header.batch_length, tail.len() as u64);
    let offsets: Vec<u64> = frames(&tail).unwrap().map(|f| f.unwrap().offset).collect();
    assert_eq!(offsets, vec![41, 42]);
    assert!(matches!(
        validate(&tail).unwrap_err(),
        BatchError::OffsetDeltaMismatch { .. }
    ));
    assert_eq!(validate_record(&tail).unwrap().header.message_count, 2);
    let head = slice(&bytes, 0, 1).unwrap();
    validate(&head).unwrap();
    assert_eq!(slice(&bytes, 0, 3).unwrap(), bytes);
    assert!(slice(&bytes, 2, 2).is_err());
    assert!(slice(&bytes, 0, 4).is_err());
}

// Arbitrary bytes never panic any entry point; whatever `validate`
// accepts is a whole record whose frames match its count, and the
// mangled records are refused.
#[test]
fn garbage_never_panics() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let good = good_batch();
    assert!(validate(&good).is_ok());
    let mut refused = 0;
    for round in 0..2_000 {
        let mut bytes = good.clone();
        for _ in 0..(round % 7 + 1) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % bytes.len() as u64) as usize;
            bytes[at] = (state >> 32) as u8;
        }
        bytes.truncate((state >> 40) as usize % (good.len() + 1));
        match validate(&bytes) {
            Ok(summary) => {
                assert_eq!(summary.header.batch_length, bytes.len() as u64);
                let count = frames(&bytes).map_or(0, Iterator::count);
                assert_eq!(count as u32, summary.header.message_count);
            }
            Err(_) => refused += 1,
        }
        let _ = slice(&bytes, 0, 1);
        if let Ok(iter) = frames(&bytes) {
            for _ in iter {}
        }
        let _ = stamp(&mut bytes, 1, 2, 3);
    }
    assert!(
        refused > 1_900,
        "only {refused} of 2000 mangled records refused"
    );
}
