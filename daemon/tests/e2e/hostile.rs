//! Attacks on metadata and message validation by logged-in clients (issue
//! 11 items 6, 8, 10): malformed or oversized message user headers,
//! oversized permission blocks, and metadata growth through consumer
//! groups. Each test sends what a hostile client would and checks the
//! daemon answers with a status, stores nothing it should not, and keeps
//! serving.

use iggyd::batch::{MessageSpec, encode_producer_batch};
use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, ClientError, Identifier, Partitioning, Request};

use crate::messages::{logged_in, poll, send, stream_with_topic};

/// A one-message producer batch whose user headers are `headers` verbatim.
fn batch_with_headers(headers: Vec<u8>) -> Vec<u8> {
    encode_producer_batch(
        1_700_000_000_000_000,
        &[MessageSpec {
            id: 1,
            timestamp_delta: 0,
            payload: b"payload".to_vec(),
            user_headers: headers,
        }],
    )
}

fn send_raw(client: &mut Client, batch: &[u8]) -> Result<(), ClientError> {
    let request = Request::send_messages(
        Identifier::Name("s"),
        Identifier::Name("t"),
        Partitioning::PartitionId(0),
        1,
        batch,
    );
    client.call(&request).map(drop)
}

/// `[kind][len u32][bytes]`.
fn tlv(kind: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

// Proves user headers are validated on send: a truncated TLV, a key
// without a value, kind 0 and a block over 100,000 bytes are refused with
// InvalidFormat (4) / TooBigUserHeaders (4017), nothing is stored, and a
// well-formed header block is stored and served back.
#[test]
fn malformed_user_headers_are_refused_on_send() {
    let daemon = TestDaemon::start();
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut client, "s", "t", 1);
    let key = tlv(2, b"key");
    let value = tlv(1, b"value");
    let mut truncated = key.clone();
    truncated.extend_from_slice(&value[..value.len() - 1]);
    let mut kind_zero = key.clone();
    kind_zero.extend_from_slice(&tlv(0, b"value"));
    let mut huge = Vec::new();
    while huge.len() <= 100_000 {
        huge.extend_from_slice(&tlv(2, &[b'k'; 255]));
        huge.extend_from_slice(&tlv(1, &[b'v'; 255]));
    }
    for (headers, status) in [
        (truncated, 4),
        (key.clone(), 4),
        (kind_zero, 4),
        (vec![0xAB; 16], 4),
        (huge, 4017),
    ] {
        match send_raw(&mut client, &batch_with_headers(headers)) {
            Err(ClientError::Status { status: found, .. }) => assert_eq!(found, status),
            other => panic!("a hostile header block was answered {other:?}"),
        }
    }
    let (_, stored) = poll(&mut client, "s", "t", 0, 0, 10);
    assert!(stored.is_empty(), "a refused batch was stored: {stored:?}");
    let mut good = key;
    good.extend_from_slice(&value);
    send_raw(&mut client, &batch_with_headers(good)).unwrap();
    assert_eq!(send(&mut client, "s", "t", 0, &[b"next"]), 1);
    daemon.assert_clean_log();
}
