//! Attacks on metadata and message validation by logged-in clients (issue
//! 11 items 6, 8, 10): malformed or oversized message user headers,
//! oversized permission blocks, and metadata growth through consumer
//! groups. Each test sends what a hostile client would and checks the
//! daemon answers with a status, stores nothing it should not, and keeps
//! serving.

use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, ClientError, Identifier, Partitioning, Request};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch};

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

/// Size of the metadata journal in `daemon`'s data directory.
fn journal_bytes(daemon: &TestDaemon) -> u64 {
    let path = daemon.data_dir().join("metadata/metadata.journal");
    std::fs::metadata(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .len()
}

// Proves a permissions block larger than a metadata record may be (here
// 24 MB, over the journal's 16 MiB record bound) is refused with
// InvalidFormat before it reaches the journal: the daemon used to abort on
// the journal's size assertion. It keeps serving, and the journal did not
// grow.
#[test]
fn an_oversized_permissions_block_is_refused() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    root.call(&Request::create_user("mallory", "secret", 1, None, &[]))
        .unwrap();
    let entries = 2_000_000u32;
    let mut block = vec![0u8; 10];
    block.push(1); // has_streams
    for stream_id in 0..entries {
        block.extend_from_slice(&stream_id.to_le_bytes());
        block.extend_from_slice(&[1, 1, 0, 0, 1, 1]);
        block.push(0); // has_topics
        block.push(u8::from(stream_id + 1 < entries)); // has_next_stream
    }
    let before = journal_bytes(&daemon);
    match root.call(&Request::update_permissions(
        Identifier::Name("mallory"),
        Some(&block),
    )) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 4),
        other => panic!("a 24 MB permissions block was answered {other:?}"),
    }
    match root.call(&Request::create_user("eve", "secret", 1, Some(&block), &[])) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 4),
        other => panic!("a 24 MB permissions block was answered {other:?}"),
    }
    assert_eq!(journal_bytes(&daemon), before);
    root.ping().unwrap();
    daemon.assert_clean_log();
}

// Proves metadata growth by a low-privilege user is bounded: repeated joins
// of a group the session is already in are answered without a journal
// write, and a topic takes at most the admitted number of groups (1,024),
// the next create answering a status while the daemon keeps serving.
#[test]
fn consumer_group_growth_is_bounded_and_repeated_joins_are_free() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut root, "s", "t", 2);
    // read_topics and poll_messages on every stream: enough to use groups.
    let mut block = vec![0u8; 11];
    block[7] = 1;
    block[8] = 1;
    root.call(&Request::create_user(
        "reader",
        "secret",
        1,
        Some(&block),
        &[],
    ))
    .unwrap();
    let mut reader = logged_in(daemon.address, "reader", "secret");
    let group = |name: &str| {
        Request::create_consumer_group(Identifier::Name("s"), Identifier::Name("t"), name)
    };
    reader.call(&group("g")).unwrap();
    let join = Request::join_consumer_group(
        Identifier::Name("s"),
        Identifier::Name("t"),
        Identifier::Name("g"),
    );
    reader.call(&join).unwrap();
    let before = journal_bytes(&daemon);
    for _ in 0..200 {
        reader.call(&join).unwrap();
    }
    assert_eq!(
        journal_bytes(&daemon),
        before,
        "a repeated join was journaled"
    );

    for index in 1..1_024 {
        let name = format!("g{index}");
        reader.call(&group(&name)).unwrap();
    }
    match reader.call(&group("one-too-many")) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 1),
        other => panic!("group 1,025 was answered {other:?}"),
    }
    reader.ping().unwrap();
    daemon.assert_clean_log();
}

// Proves the `[limits]` keys for metadata growth are what shard 0 admits:
// with `max_consumer_groups_per_topic = 3`, `max_members_per_group = 1` and
// `max_metadata_record_size = 4 KiB`, the fourth group, the second member
// and a 20 KB permissions block are refused (status 1, 1 and
// InvalidFormat) while what fits is accepted.
#[test]
fn metadata_bounds_follow_the_limits_section() {
    let daemon = TestDaemon::builder()
        .env("IGGYD_LIMITS__MAX_CONSUMER_GROUPS_PER_TOPIC", "3")
        .env("IGGYD_LIMITS__MAX_MEMBERS_PER_GROUP", "1")
        .env("IGGYD_LIMITS__MAX_METADATA_RECORD_SIZE", "4 KiB")
        .spawn();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut root, "s", "t", 2);
    let group = |name: &str| {
        Request::create_consumer_group(Identifier::Name("s"), Identifier::Name("t"), name)
    };
    for name in ["a", "b", "c"] {
        root.call(&group(name)).unwrap();
    }
    match root.call(&group("d")) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 1),
        other => panic!("a fourth group was answered {other:?}"),
    }
    let join = Request::join_consumer_group(
        Identifier::Name("s"),
        Identifier::Name("t"),
        Identifier::Name("a"),
    );
    root.call(&join).unwrap();
    let mut second = logged_in(daemon.address, "iggy", "iggy");
    match second.call(&join) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 1),
        other => panic!("a second member was answered {other:?}"),
    }
    // A small permissions block fits; 2,000 streams' worth does not.
    let block = |entries: u32| {
        let mut block = vec![0u8; 10];
        block.push(1);
        for stream_id in 0..entries {
            block.extend_from_slice(&stream_id.to_le_bytes());
            block.extend_from_slice(&[1, 1, 0, 0, 1, 1]);
            block.push(0);
            block.push(u8::from(stream_id + 1 < entries));
        }
        block
    };
    root.call(&Request::create_user(
        "small",
        "secret",
        1,
        Some(&block(4)),
        &[],
    ))
    .unwrap();
    match root.call(&Request::create_user(
        "big",
        "secret",
        1,
        Some(&block(2_000)),
        &[],
    )) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 4),
        other => panic!("a 24 KB permissions block was answered {other:?}"),
    }
    root.ping().unwrap();
    daemon.assert_clean_log();
}
