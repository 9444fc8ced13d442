//! Messages for the e2e tests, on top of the kit's wire client
//! (`iggyd_testkit::wire`): payloads become a producer batch and a poll
//! reply becomes `(offset, payload)` pairs through the daemon's own batch
//! codec (`iggyd_wire::batch`), which is the point: the kit frames requests on
//! its own, the batch layout is the one the daemon stores. Helpers panic
//! with context; they are test instruments.

use iggyd_testkit::wire::{Client, Consumer, Identifier, Partitioning, PollingStrategy, Request};
use iggyd_wire::batch::{BatchHeader, MessageSpec, encode_producer_batch, frames};

/// A producer batch of `payloads` (ids 1, 2, …, no user headers).
pub fn batch(payloads: &[&[u8]]) -> Vec<u8> {
    let specs: Vec<MessageSpec> = payloads
        .iter()
        .enumerate()
        .map(|(index, payload)| MessageSpec {
            id: index as u128 + 1,
            timestamp_delta: 0,
            payload: payload.to_vec(),
            user_headers: Vec::new(),
        })
        .collect();
    encode_producer_batch(1_700_000_000_000_000, &specs)
}

/// A logged-in client (panics with the reason otherwise).
pub fn logged_in(address: std::net::SocketAddr, username: &str, password: &str) -> Client {
    let mut client = Client::connect(address).expect("connect to iggyd");
    client
        .login(username, password)
        .unwrap_or_else(|error| panic!("login as {username}: {error}"));
    client
}

/// Creates stream `stream` with one topic `topic` of `partitions`
/// partitions, both by name.
pub fn stream_with_topic(client: &mut Client, stream: &str, topic: &str, partitions: u32) {
    client
        .create_stream(stream)
        .unwrap_or_else(|error| panic!("create stream {stream}: {error}"));
    client
        .create_topic(Identifier::Name(stream), topic, partitions, &[])
        .unwrap_or_else(|error| panic!("create topic {topic}: {error}"));
}

/// Sends `payloads` to one partition; returns the base offset the daemon
/// acknowledged.
pub fn send(
    client: &mut Client,
    stream: &str,
    topic: &str,
    partition: u32,
    payloads: &[&[u8]],
) -> u64 {
    let count = u32::try_from(payloads.len()).expect("a test batch");
    let request = Request::send_messages(
        Identifier::Name(stream),
        Identifier::Name(topic),
        Partitioning::PartitionId(partition),
        count,
        &batch(payloads),
    );
    let reply = client
        .call(&request)
        .unwrap_or_else(|error| panic!("send to {stream}/{topic}/{partition}: {error}"));
    // [count u32][stream u32][topic u32][partition u32][base_offset u64]
    assert!(reply.len() >= 24, "send reply: {reply:?}");
    u64::from_le_bytes(reply[16..24].try_into().expect("8 bytes"))
}

/// Polls `count` messages from `offset` as consumer 1 (no auto-commit, so
/// nothing is written): the current offset and the messages by offset.
pub fn poll(
    client: &mut Client,
    stream: &str,
    topic: &str,
    partition: u32,
    offset: u64,
    count: u32,
) -> (u64, Vec<(u64, Vec<u8>)>) {
    let request = Request::poll_messages(
        Consumer::Single(Identifier::Numeric(1)),
        Identifier::Name(stream),
        Identifier::Name(topic),
        Some(partition),
        PollingStrategy::offset(offset),
        count,
        false,
    );
    let reply = client
        .call(&request)
        .unwrap_or_else(|error| panic!("poll {stream}/{topic}/{partition}: {error}"));
    poll_reply(reply)
}

/// A poll reply's body as the current offset and the messages by offset.
pub fn poll_reply(reply: &[u8]) -> (u64, Vec<(u64, Vec<u8>)>) {
    // [partition_id u32][current_offset u64][messages_count u32][records]
    assert!(reply.len() >= 16, "poll reply: {reply:?}");
    let current = u64::from_le_bytes(reply[4..12].try_into().expect("8 bytes"));
    let mut messages = Vec::new();
    let mut rest = &reply[16..];
    while !rest.is_empty() {
        let header = BatchHeader::decode(rest).expect("served batch header");
        let record = &rest[..header.batch_length as usize];
        for frame in frames(record).expect("served frames") {
            let frame = frame.expect("served frame");
            messages.push((frame.offset, record[frame.payload].to_vec()));
        }
        rest = &rest[header.batch_length as usize..];
    }
    (current, messages)
}
