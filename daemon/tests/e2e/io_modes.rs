//! Both ways segments reach the disk (`storage.io_mode`), on the real
//! binary: the daemon says which one it uses; batches of every size (many
//! smaller than a 4 KiB block, so direct writes rewrite the partial last
//! block again and again, and some spanning blocks) are acknowledged, read
//! back byte for byte, survive `kill -9` (an acknowledged `replicated`
//! message is written, not only buffered), and survive a clean stop and
//! restart; sealed segments have exactly the size of their batches, and
//! only the active segment may end in zero padding.

use crate::messages::{logged_in, poll, send};
use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, Identifier, OptionEntry};
use std::path::Path;

const STREAM: &str = "modes";
const TOPIC: &str = "sizes";

/// Payload of message `offset`: its length walks from 0 to ~9 KB, so the
/// batches land on every alignment of the 4 KiB block.
fn payload(offset: u64) -> Vec<u8> {
    let len = (offset * 613 % 9_000) as usize;
    (0..len)
        .map(|at| (offset as usize * 7 + at) as u8)
        .collect()
}

/// A `replicated` topic with 1 MiB segments (the smallest; some rotate).
fn create_topic(client: &mut Client) {
    client.create_stream(STREAM).expect("create stream");
    let options = [
        OptionEntry::uint64("segment_size", 1024 * 1024),
        OptionEntry::string("durability", "replicated"),
    ];
    client
        .create_topic(Identifier::Name(STREAM), TOPIC, 1, &options)
        .expect("create topic");
}

/// Sends messages `from..to` in batches of 1..4 messages; returns `to`.
fn produce(client: &mut Client, from: u64, to: u64) -> u64 {
    let mut next = from;
    while next < to {
        let count = (next % 4 + 1).min(to - next);
        let payloads: Vec<Vec<u8>> = (next..next + count).map(payload).collect();
        let borrowed: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let base = send(client, STREAM, TOPIC, 0, &borrowed);
        assert_eq!(base, next, "offsets are dense");
        next += count;
    }
    next
}

/// Every message `0..through` reads back, byte for byte.
fn check_all(client: &mut Client, through: u64) {
    let mut next = 0u64;
    while next < through {
        let (_, messages) = poll(client, STREAM, TOPIC, 0, next, 50);
        assert!(!messages.is_empty(), "offset {next} is gone");
        for (offset, bytes) in messages {
            assert_eq!(offset, next, "offsets are dense");
            assert_eq!(bytes, payload(offset), "message {offset} differs");
            next += 1;
        }
    }
}

/// Sealed segments are exactly their batches; the active one (the last)
/// may end in zero padding up to the next block.
fn check_segment_files(partition_dir: &Path) {
    let mut logs: Vec<_> = std::fs::read_dir(partition_dir)
        .expect("partition directory")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() > 1, "the test wants sealed segments: {logs:?}");
    for log in &logs[..logs.len() - 1] {
        let bytes = std::fs::read(log).expect("sealed segment");
        let mut at = 0usize;
        while at < bytes.len() {
            let header =
                iggyd_wire::batch::BatchHeader::decode(&bytes[at..]).expect("batch header");
            at += header.batch_length as usize;
        }
        assert_eq!(
            at,
            bytes.len(),
            "{} ends inside or after a batch",
            log.display()
        );
    }
}

fn run(io_mode: &str, announced: &str) {
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_STORAGE__IO_MODE", io_mode)
        .spawn();
    let log = daemon.log();
    assert!(
        log.contains(announced),
        "the daemon says how it writes:\n{log}"
    );
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    create_topic(&mut client);
    let produced = produce(&mut client, 0, 300);
    check_all(&mut client, produced);
    drop(client);

    // kill -9: every acknowledged message was written.
    daemon.kill();
    daemon.restart();
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    check_all(&mut client, produced);
    let produced = produce(&mut client, produced, 450);
    drop(client);

    // A clean stop leaves exact files.
    daemon.stop();
    // The first partition of a fresh daemon has storage id 0.
    let partition_dir = daemon.data_dir().join("partitions/0");
    check_segment_files(&partition_dir);
    daemon.restart();
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    check_all(&mut client, produced);
}

#[test]
fn direct_io_writes_reads_and_survives_kill_and_restart() {
    run("direct", "segments are written with direct I/O");
}

#[test]
fn buffered_io_writes_reads_and_survives_kill_and_restart() {
    run("buffered", "through the page cache");
}
