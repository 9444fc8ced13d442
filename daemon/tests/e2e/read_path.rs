//! Slow readers on the wire: clients that read their large poll replies a
//! few KiB at a time, while other clients poll and append on the same
//! shard. Every byte of every reply is checked (each message carries a
//! payload stamped with its offset and its partition's tag), so a reply
//! that lends bytes which change before the kernel sent them, or bytes of
//! another partition, fails here.

use crate::messages::{logged_in, poll_reply, stream_with_topic};
use iggyd_testkit::TestDaemon;
use iggyd_testkit::rng::{Rng, stamped};
use iggyd_testkit::wire::{
    Client, Consumer, Identifier, PollingStrategy, Reply, Request, read_frame,
};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const LEN: usize = 1_000;
const TOPICS: [(&str, u8); 2] = [("a", 1), ("b", 2)];

/// Sends `count` messages stamped for offsets `first..` to `topic`.
fn append(client: &mut Client, topic: &str, tag: u8, first: u64, count: u64) {
    let payloads: Vec<Vec<u8>> = (first..first + count)
        .map(|offset| stamped(tag, offset, LEN))
        .collect();
    let views: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    let base = crate::messages::send(client, "s", topic, 0, &views);
    assert_eq!(base, first, "appends to {topic} land where counted");
}

/// Reads at most 4 KiB per call and pauses a millisecond every 8 calls:
/// a client that drains a 10 MB reply over about a second.
struct Slow<'a>(&'a mut std::net::TcpStream, u64);

impl Read for Slow<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.1 += 1;
        if self.1.is_multiple_of(8) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let end = buf.len().min(4096);
        self.0.read(&mut buf[..end])
    }
}

/// Checks a poll reply of `topic` (tag `tag`) asked from `start`: dense
/// offsets from `start`, at least `at_least` messages, every payload the
/// one stamped for its offset in this topic.
fn check_reply(reply: &Reply, tag: u8, start: u64, at_least: u64, what: &str) -> u64 {
    assert!(reply.is_ok(), "{what}: status {}", reply.status());
    let (_, messages) = poll_reply(&reply.body);
    assert!(
        messages.len() as u64 >= at_least,
        "{what}: {} messages, expected at least {at_least}",
        messages.len()
    );
    for (index, (offset, payload)) in messages.iter().enumerate() {
        assert_eq!(*offset, start + index as u64, "{what}: offsets are dense");
        if *payload != stamped(tag, *offset, LEN) {
            let other = TOPICS
                .iter()
                .find(|(_, other)| *payload == stamped(*other, *offset, LEN));
            panic!(
                "{what}: the payload at offset {offset} is not the one stored{}",
                match other {
                    Some((name, _)) => format!(" (it is topic {name}'s)"),
                    None => String::new(),
                }
            );
        }
    }
    messages.len() as u64
}

fn poll_request(topic: &str, start: u64, count: u32) -> Request {
    Request::poll_messages(
        Consumer::Single(Identifier::Numeric(1)),
        Identifier::Name("s"),
        Identifier::Name(topic),
        Some(0),
        PollingStrategy::offset(start),
        count,
        false,
    )
}

/// Proves that clients reading 10 MB poll replies slowly get every byte
/// right while, on the same (only) shard, a producer appends to both
/// topics and a fast consumer polls both, and that no reply ever holds a
/// message of the other topic. On the landed daemon the bytes after the
/// first few MiB of a slowly read reply came from the wrong place.
#[test]
fn slow_readers_get_their_replies_byte_for_byte() {
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_SHARDING__CPU_ALLOCATION", "1")
        .spawn();
    let address = daemon.address;
    let mut admin = logged_in(address, "iggy", "iggy");
    stream_with_topic(&mut admin, "s", "a", 1);
    admin
        .create_topic(Identifier::Name("s"), "b", 1, &[])
        .expect("create topic b");
    const FILLED: u64 = 12_000;
    for (topic, tag) in TOPICS {
        for first in (0..FILLED).step_by(1_000) {
            append(&mut admin, topic, tag, first, 1_000);
        }
    }
    let ends: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(FILLED), AtomicU64::new(FILLED)]);
    let stop = Arc::new(AtomicBool::new(false));

    let producer = {
        let (ends, stop) = (ends.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut client = logged_in(address, "iggy", "iggy");
            let mut batches = 0u64;
            while !stop.load(Ordering::SeqCst) {
                for (index, (topic, tag)) in TOPICS.into_iter().enumerate() {
                    let first = ends[index].load(Ordering::SeqCst);
                    append(&mut client, topic, tag, first, 100);
                    ends[index].store(first + 100, Ordering::SeqCst);
                    batches += 1;
                }
            }
            batches
        })
    };
    let fast = {
        let (ends, stop) = (ends.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut client = logged_in(address, "iggy", "iggy");
            let mut rng = Rng(0xFA57);
            let mut polls = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let index = rng.index(2);
                let (topic, tag) = TOPICS[index];
                let end = ends[index].load(Ordering::SeqCst);
                let start = rng.below(end);
                let count = 1 + rng.below(3_000) as u32;
                let reply = client
                    .exchange(&poll_request(topic, start, count))
                    .expect("fast poll")
                    .clone();
                let at_least = u64::from(count).min(end - start);
                check_reply(
                    &reply,
                    tag,
                    start,
                    at_least,
                    &format!("fast poll of {topic}"),
                );
                polls += 1;
            }
            polls
        })
    };
    let slow: Vec<_> = (0..3u64)
        .map(|reader| {
            let ends = ends.clone();
            std::thread::spawn(move || {
                let mut client = logged_in(address, "iggy", "iggy");
                let mut rng = Rng(0x510E ^ reader);
                for round in 0..3 {
                    let index = ((reader + round) % 2) as usize;
                    let (topic, tag) = TOPICS[index];
                    let end = ends[index].load(Ordering::SeqCst);
                    let start = rng.below(FILLED - 9_500);
                    let count = 9_500;
                    client
                        .send_only(&poll_request(topic, start, count))
                        .expect("send poll");
                    let reply = read_frame(&mut Slow(client.socket_mut(), 0))
                        .expect("read reply")
                        .expect("a reply");
                    let at_least = u64::from(count).min(end - start);
                    check_reply(
                        &reply,
                        tag,
                        start,
                        at_least,
                        &format!(
                            "slow reader {reader}, round {round}: {count} of {topic} from {start}"
                        ),
                    );
                }
            })
        })
        .collect();
    for reader in slow {
        reader.join().expect("slow reader");
    }
    stop.store(true, Ordering::SeqCst);
    let batches = producer.join().expect("producer");
    let polls = fast.join().expect("fast consumer");
    assert!(
        batches > 0 && polls > 0,
        "the others ran ({batches} batches, {polls} polls)"
    );
    daemon.assert_clean_log();
    let (status, _) = daemon.stop();
    assert!(status.success(), "iggyd exited with {status}");
}

/// Proves the poll-reply budget bounds what clients that ask for a lot and
/// stop reading can make a shard hold: with
/// `limits.max_poll_reply_bytes_in_flight = 16 MiB` (and 8 MiB per reply),
/// 32 connections each poll 300 MB and do not read; the shard's reply
/// bytes (admin snapshot) stay within the budget plus one batch per
/// connection, the daemon's RSS grows by less than that plus 32 MiB (it
/// grew by 185 MB with twelve of them while glibc kept freed windows in
/// its heap), a client arriving after them is still served (its first
/// batch at least, whole and right), and the stalled replies, read at
/// last, are whole.
#[test]
fn stalled_readers_hold_at_most_the_reply_budget() {
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_SHARDING__CPU_ALLOCATION", "1")
        .env("IGGYD_LIMITS__MAX_POLL_REPLY_BYTES", "8 MiB")
        .env("IGGYD_LIMITS__MAX_POLL_REPLY_BYTES_IN_FLIGHT", "16 MiB")
        .spawn();
    let address = daemon.address;
    let mut admin = logged_in(address, "iggy", "iggy");
    stream_with_topic(&mut admin, "s", "a", 1);
    const FILLED: u64 = 30_000;
    for first in (0..FILLED).step_by(1_000) {
        append(&mut admin, "a", 1, first, 1_000);
    }
    const BATCH_BYTES: u64 = 1_000 * (64 + LEN as u64) + 256;
    let rss_before =
        iggyd_testkit::daemon::status_kib(daemon.pid().unsigned_abs(), "VmRSS").expect("VmRSS");
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let mut client = logged_in(address, "iggy", "iggy");
        client
            .send_only(&poll_request("a", 0, 300_000))
            .expect("send poll");
        stalled.push(client);
    }
    // The bytes of replies the shard holds, from the admin socket.
    let socket = crate::control::admin_socket(&daemon);
    let reply_bytes = || {
        let answer = crate::control::ask(&socket, &[r#"{"v":1,"op":"snapshot"}"#]);
        answer[0]["snapshot"]["shards"][0]["poll_reply_bytes"]
            .as_u64()
            .expect("poll_reply_bytes")
    };
    let bound = 16 * 1024 * 1024 + 32 * BATCH_BYTES;
    let mut late = logged_in(address, "iggy", "iggy");
    let reply = late
        .exchange(&poll_request("a", 5_000, 300_000))
        .expect("a late poll is answered")
        .clone();
    let served = check_reply(&reply, 1, 5_000, 1, "the poll after the stalled ones");
    // Two stalled replies took the whole budget (8 MiB each).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while reply_bytes() < 16_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled polls were not answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let held = reply_bytes();
    assert!(held > 0, "the stalled replies are held");
    assert!(held <= bound, "{held} bytes of replies held, bound {bound}");
    let rss_after =
        iggyd_testkit::daemon::status_kib(daemon.pid().unsigned_abs(), "VmRSS").expect("VmRSS");
    let grown = rss_after.saturating_sub(rss_before) * 1024;
    assert!(
        grown <= bound + 32 * 1024 * 1024,
        "RSS grew by {grown} bytes with 32 stalled 300 MB polls (bound {bound} + slack)"
    );
    eprintln!(
        "stalled readers: {held} reply bytes held (bound {bound}), RSS +{} KiB, the late poll got {served} messages",
        grown / 1024
    );
    // The stalled replies, read at last, are whole and right.
    for (index, client) in stalled.iter_mut().enumerate() {
        let reply = read_frame(client.socket_mut())
            .expect("read a stalled reply")
            .expect("a stalled reply");
        check_reply(&reply, 1, 0, 1, &format!("stalled reply {index}"));
    }
    drop(stalled);
    daemon.assert_clean_log();
    let (status, _) = daemon.stop();
    assert!(status.success(), "iggyd exited with {status}");
}
