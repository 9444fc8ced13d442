//! A full disk on a real filesystem: the daemon's data directory is a small
//! tmpfs, a minimal raw-protocol client (login, create stream and topic,
//! send and poll, frames built with `iggyd::protocol` and
//! `iggyd::batch::encode_producer_batch`) produces until the disk is full,
//! and the test checks that the daemon refuses cleanly, loses nothing it
//! acknowledged, and takes appends again once space returns. Mounting needs
//! root (as in CI); without it the test says so and returns.

use crate::harness::TestDaemon;
use iggyd::batch::{MessageSpec, encode_producer_batch};
use iggyd::protocol::frame::request_checksum;
use iggyd::protocol::limits::HEADER_SIZE;
use iggyd::protocol::options::{OptionEntry, ValueKind, encode_option_entries};
use iggyd::protocol::primitives::{
    ClientVersionInfo, Consumer, ConsumerKind, Identifier, OptionalPartition, Partitioning,
    PollingStrategy,
};
use iggyd::protocol::reader::WireWrite;
use iggyd::protocol::{CommandCode, Operation, ReplyHeader, RequestHeader};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// A reply: wire status and body (the result section already stripped).
struct Reply {
    status: u32,
    body: Vec<u8>,
}

/// The smallest client that speaks the 0.11.0 protocol (§2–§6).
struct Client {
    stream: TcpStream,
    client: u128,
    session: u64,
    request: u64,
}

impl Client {
    fn connect(daemon: &TestDaemon) -> Client {
        let stream = TcpStream::connect(daemon.address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Client {
            stream,
            client: 0x5EED_D15C_F011,
            session: 0,
            request: 0,
        }
    }

    fn call(&mut self, code: CommandCode, body: &[u8]) -> Reply {
        let operation = code.operation();
        let replicated = operation.is_replicated();
        let register = operation == Operation::Register;
        let stamped = !matches!(
            operation,
            Operation::NonReplicated
                | Operation::SendMessages
                | Operation::StoreConsumerOffset
                | Operation::DeleteConsumerOffset
        );
        if replicated && !register {
            self.request += 1;
        }
        let header = RequestHeader {
            client: self.client,
            request_checksum: if stamped { request_checksum(body) } else { 0 },
            request: if register { 0 } else { self.request.max(1) },
            session: if register { 0 } else { self.session },
            ..RequestHeader::client_request(
                operation as u8,
                if operation == Operation::NonReplicated {
                    code as u32
                } else {
                    0
                },
                body.len(),
            )
        };
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).expect("send request");
        let mut header = [0u8; HEADER_SIZE];
        self.stream
            .read_exact(&mut header)
            .expect("a reply, not a dropped connection");
        let reply = ReplyHeader::decode(&header);
        let mut body = vec![0u8; reply.size as usize - HEADER_SIZE];
        self.stream.read_exact(&mut body).expect("reply body");
        if reply.status != 0 {
            return Reply {
                status: reply.status,
                body,
            };
        }
        let result_framed = iggyd::protocol::is_result_framed(operation as u8);
        if result_framed {
            let count = u32::from_le_bytes(body[..4].try_into().unwrap());
            if count > 0 {
                let result = u32::from_le_bytes(body[8..12].try_into().unwrap());
                return Reply {
                    status: result,
                    body: Vec::new(),
                };
            }
            body.drain(..4);
        }
        Reply { status: 0, body }
    }

    fn login(&mut self) {
        let mut body = Vec::new();
        ClientVersionInfo {
            protocol_version: iggyd::protocol::limits::PROTOCOL_VERSION,
            sdk_name: "rust-sdk",
            sdk_version: "0.11.0",
        }
        .encode(&mut body);
        body.put_name("iggy");
        body.put_u8(4);
        body.put_bytes(b"iggy");
        body.put_u32(0);
        let reply = self.call(CommandCode::LoginRegister, &body);
        assert_eq!(reply.status, 0, "login");
        self.session = u64::from_le_bytes(reply.body[4..12].try_into().unwrap());
        assert_ne!(self.session, 0);
    }

    fn create_stream_and_topic(&mut self) {
        let mut body = Vec::new();
        body.put_name(STREAM);
        assert_eq!(self.call(CommandCode::CreateStream, &body).status, 0);
        let mut body = Vec::new();
        Identifier::Name(STREAM).encode(&mut body);
        body.put_u32(1);
        body.put_name(TOPIC);
        let segment_size = (1024u64 * 1024).to_le_bytes();
        encode_option_entries(
            &[
                OptionEntry {
                    key: "segment_size",
                    kind: ValueKind::Uint64 as u8,
                    value: &segment_size,
                },
                OptionEntry {
                    key: "durability",
                    kind: ValueKind::String as u8,
                    value: b"persisted",
                },
            ],
            &mut body,
        );
        let reply = self.call(CommandCode::CreateTopic, &body);
        assert_eq!(reply.status, 0, "create topic");
    }

    fn send(&mut self, batch: &[u8], messages: u32) -> Reply {
        let stream = Identifier::Name(STREAM);
        let topic = Identifier::Name(TOPIC);
        let partitioning = Partitioning::PartitionId(PARTITION);
        let mut body = Vec::new();
        let metadata = stream.encoded_len() + topic.encoded_len() + partitioning.encoded_len() + 4;
        body.put_u32(metadata as u32);
        stream.encode(&mut body);
        topic.encode(&mut body);
        partitioning.encode(&mut body);
        body.put_u32(messages);
        body.put_bytes(batch);
        self.call(CommandCode::SendMessages, &body)
    }

    /// Polls `count` messages from `offset`: `(current_offset, payloads by offset)`.
    fn poll(&mut self, offset: u64, count: u32) -> (u64, Vec<(u64, Vec<u8>)>) {
        let mut body = Vec::new();
        Consumer {
            kind: ConsumerKind::Consumer,
            id: Identifier::Numeric(1),
        }
        .encode(&mut body);
        Identifier::Name(STREAM).encode(&mut body);
        Identifier::Name(TOPIC).encode(&mut body);
        OptionalPartition::encode(Some(PARTITION), &mut body);
        PollingStrategy::Offset(offset).encode(&mut body);
        body.put_u32(count);
        body.put_u8(0);
        let reply = self.call(CommandCode::PollMessages, &body);
        assert_eq!(reply.status, 0, "poll");
        let current = u64::from_le_bytes(reply.body[4..12].try_into().unwrap());
        let mut messages = Vec::new();
        let mut rest = &reply.body[16..];
        while !rest.is_empty() {
            let header = iggyd::batch::BatchHeader::decode(rest).expect("record header");
            let record = &rest[..header.batch_length as usize];
            for frame in iggyd::batch::frames(record).expect("frames") {
                let frame = frame.expect("frame");
                messages.push((frame.offset, record[frame.payload].to_vec()));
            }
            rest = &rest[header.batch_length as usize..];
        }
        (current, messages)
    }
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
        eprintln!(
            "SKIP disk_full: cannot mount a tmpfs at {} (needs root / CAP_SYS_ADMIN)",
            data.display()
        );
        return;
    }
    let mut tmpfs = Tmpfs {
        mount: data.clone(),
        daemon: None,
    };
    let filler = data.join("filler");
    std::fs::write(&filler, vec![0xF1u8; FILLER_BYTES]).expect("filler file");
    let daemon = TestDaemon::builder().dir(dir).spawn();
    let daemon = tmpfs.daemon.insert(daemon);

    let mut client = Client::connect(daemon);
    client.login();
    client.create_stream_and_topic();

    // Produce until the disk is full.
    let mut acknowledged = 0u64;
    let refusal = loop {
        let messages = 16;
        let reply = client.send(&batch(acknowledged, messages), messages as u32);
        if reply.status != 0 {
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
        refusal.status
    );
    assert_eq!(
        refusal.status,
        iggyd::protocol::Status::Error as u32,
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
            let (_, messages) = client.poll(next, 100);
            assert!(!messages.is_empty(), "offset {next} is gone");
            for (offset, bytes) in messages {
                assert_eq!(offset, next, "offsets are dense");
                assert_eq!(bytes, payload(offset), "message {offset} differs");
                next += 1;
            }
        }
        let (current, _) = client.poll(0, 1);
        assert_eq!(current, through - 1);
    };
    check_all(&mut client, acknowledged);

    // Space returns: appends succeed again and offsets stay dense.
    std::fs::remove_file(&filler).expect("free space");
    for _ in 0..8 {
        let reply = client.send(&batch(acknowledged, 16), 16);
        assert_eq!(reply.status, 0, "append after space returned");
        acknowledged += 16;
    }
    check_all(&mut client, acknowledged);

    daemon.allow_log("no space left");
    daemon.allow_log("No space left");
    daemon.assert_clean_log();
}
