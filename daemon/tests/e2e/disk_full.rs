//! A full disk on a real filesystem: the daemon's data directory is a small
//! tmpfs, the kit's wire client (login, create stream and topic, send and
//! poll; batches from `iggyd_wire::batch::encode_producer_batch`) produces until
//! the disk is full, and the test checks that the daemon refuses cleanly,
//! loses nothing it acknowledged, and takes appends again once space
//! returns. Mounting needs root (as in CI); without it the test skips
//! through the kit, which fails under `CI=true`.

use crate::messages::{logged_in, poll};
use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, Identifier, OptionEntry, Partitioning, Reply, Request};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch};
use std::path::{Path, PathBuf};
use std::process::Command;

const STREAM: &str = "full";
const TOPIC: &str = "disk";
const PARTITION: u32 = 0;
const TMPFS_SIZE: &str = "8m";
const FILLER_BYTES: usize = 3 * 1024 * 1024;

/// Unmounts the tmpfs when the test ends, even on failure: first the
/// daemon is killed, then the mount goes, then the temp directory.
struct Tmpfs {
    mount: PathBuf,
    daemon: Option<TestDaemon>,
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let dir = self.daemon.as_mut().map(TestDaemon::take_dir);
        drop(self.daemon.take());
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        drop(dir);
    }
}

fn mount_tmpfs(path: &Path) -> bool {
    std::fs::create_dir_all(path).expect("mount point");
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
        .arg(path)
        .stderr(std::process::Stdio::null())
        .status();
    matches!(status, Ok(status) if status.success())
}

/// A `persisted` topic with 1 MiB segments.
fn create_stream_and_topic(client: &mut Client) {
    client.create_stream(STREAM).expect("create stream");
    let options = [
        OptionEntry::uint64("segment_size", 1024 * 1024),
        OptionEntry::string("durability", "persisted"),
    ];
    client
        .create_topic(Identifier::Name(STREAM), TOPIC, 1, &options)
        .expect("create topic");
}

/// Sends one batch; the reply frame whatever its status.
fn send(client: &mut Client, batch: &[u8], messages: u32) -> Reply {
    let request = Request::send_messages(
        Identifier::Name(STREAM),
        Identifier::Name(TOPIC),
        Partitioning::PartitionId(PARTITION),
        messages,
        batch,
    );
    client
        .exchange(&request)
        .expect("a reply, not a dropped connection")
        .clone()
}

/// Payload of message `offset`: recognisable, 4 KiB.
fn payload(offset: u64) -> Vec<u8> {
    let mut bytes = vec![(offset % 251) as u8; 4096];
    bytes[..8].copy_from_slice(&offset.to_le_bytes());
    bytes
}

fn batch(first_offset: u64, messages: u64) -> Vec<u8> {
    let specs: Vec<MessageSpec> = (first_offset..first_offset + messages)
        .map(|offset| MessageSpec {
            id: u128::from(offset) + 1,
            timestamp_delta: 0,
            payload: payload(offset),
            user_headers: Vec::new(),
        })
        .collect();
    encode_producer_batch(1, &specs)
}

/// Proves a full disk is a clean, recoverable refusal on a real filesystem:
/// sends on a `persisted` topic fail with an error status (the connection
/// stays up, the daemon logs "no space left"), every acknowledged message
/// reads back byte for byte, and once a filler file is deleted appends
/// succeed again with dense offsets.
#[test]
fn a_full_disk_refuses_sends_cleanly_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    if !mount_tmpfs(&data) {
        return iggyd_testkit::skip(&format!(
            "disk_full: cannot mount a tmpfs at {} (needs root / CAP_SYS_ADMIN)",
            data.display()
        ));
    }
    let mut tmpfs = Tmpfs {
        mount: data.clone(),
        daemon: None,
    };
    let filler = data.join("filler");
    std::fs::write(&filler, vec![0xF1u8; FILLER_BYTES]).expect("filler file");
    let daemon = TestDaemon::builder().dir(dir).spawn();
    let daemon = tmpfs.daemon.insert(daemon);

    let mut client = logged_in(daemon.address, "iggy", "iggy");
    create_stream_and_topic(&mut client);

    // Produce until the disk is full.
    let mut acknowledged = 0u64;
    let refusal = loop {
        let messages = 16;
        let reply = send(&mut client, &batch(acknowledged, messages), messages as u32);
        assert_eq!(reply.command(), 8, "a reply, not an eviction");
        if reply.status() != 0 {
            break reply;
        }
        acknowledged += messages;
        assert!(
            acknowledged < 8 * 1024 * 1024 / 4096,
            "an 8 MiB tmpfs took {acknowledged} 4 KiB messages"
        );
    };
    assert!(acknowledged > 0, "nothing fitted before the disk was full");
    eprintln!(
        "disk_full: {acknowledged} messages acknowledged before the refusal (status {})",
        refusal.status()
    );
    assert_eq!(
        refusal.status(),
        iggyd_wire::protocol::Status::Error as u32,
        "a full disk answers with an error status"
    );
    assert!(refusal.body.is_empty());
    let log = daemon.log();
    assert!(
        log.to_lowercase().contains("no space left"),
        "the daemon log names the full disk:\n{log}"
    );

    // Every acknowledged message reads back, byte for byte.
    let check_all = |client: &mut Client, through: u64| {
        let mut next = 0u64;
        while next < through {
            let (_, messages) = poll(client, STREAM, TOPIC, PARTITION, next, 100);
            assert!(!messages.is_empty(), "offset {next} is gone");
            for (offset, bytes) in messages {
                assert_eq!(offset, next, "offsets are dense");
                assert_eq!(bytes, payload(offset), "message {offset} differs");
                next += 1;
            }
        }
        let (current, _) = poll(client, STREAM, TOPIC, PARTITION, 0, 1);
        assert_eq!(current, through - 1);
    };
    check_all(&mut client, acknowledged);

    // Space returns: appends succeed again and offsets stay dense.
    std::fs::remove_file(&filler).expect("free space");
    for _ in 0..8 {
        let reply = send(&mut client, &batch(acknowledged, 16), 16);
        assert!(reply.is_ok(), "append after space returned");
        acknowledged += 16;
    }
    check_all(&mut client, acknowledged);

    daemon.allow_log("no space left");
    daemon.allow_log("No space left");
    daemon.assert_clean_log();
}
