//! A minimal, blocking Iggy 0.11.0 client built from the daemon's own codec
//! (`iggyd::protocol` headers and primitive encoders, `iggyd::batch` for
//! message batches), for tests that need a well-behaved client next to raw
//! or hostile traffic: login, ping, create stream/topic, send, poll. It
//! stamps headers the way the SDK does (§2.3): a random non-zero client id,
//! the request checksum for Register and metadata operations, a request
//! counter for replicated operations, the session number after login.
//!
//! It is deliberately small and panics with context on anything unexpected;
//! it is a test instrument, not an SDK.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use iggyd::batch::{MessageSpec, encode_producer_batch};
use iggyd::protocol::frame::request_checksum;
use iggyd::protocol::primitives::{
    ClientVersionInfo, Consumer, ConsumerKind, Identifier, OptionalPartition, Partitioning,
    PollingStrategy,
};
use iggyd::protocol::reader::WireWrite;
use iggyd::protocol::{Operation, RequestHeader};

/// Generous: a debug daemon on a loaded 2-core machine.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// One reply or eviction frame as read off the socket.
#[derive(Debug, Clone)]
pub struct Reply {
    pub header: [u8; 256],
    pub body: Vec<u8>,
}

impl Reply {
    /// Header byte 60: 8 = Reply, 13 = Eviction.
    pub fn command(&self) -> u8 {
        self.header[60]
    }
    /// Reply status (offset 216); meaningless for an eviction.
    pub fn status(&self) -> u32 {
        u32::from_le_bytes(self.header[216..220].try_into().unwrap())
    }
    /// Eviction reason (offset 255).
    pub fn eviction_reason(&self) -> u8 {
        self.header[255]
    }
    pub fn is_ok(&self) -> bool {
        self.command() == 8 && self.status() == 0
    }
}

/// Writes `[header][body]` and reads one frame back; `None` when the
/// daemon closed the connection instead of answering.
pub fn exchange(stream: &mut TcpStream, frame: &[u8]) -> Option<Reply> {
    stream.write_all(frame).ok()?;
    read_frame(stream)
}

/// Reads one `[256-byte header][body]` frame; `None` on EOF or reset.
pub fn read_frame(stream: &mut TcpStream) -> Option<Reply> {
    let mut header = [0u8; 256];
    stream.read_exact(&mut header).ok()?;
    let size = u32::from_le_bytes(header[48..52].try_into().unwrap()) as usize;
    assert!(size >= 256, "reply size {size} below the header size");
    let mut body = vec![0u8; size - 256];
    stream.read_exact(&mut body).ok()?;
    Some(Reply { header, body })
}

/// Encodes a request frame.
pub fn frame(header: &RequestHeader, body: &[u8]) -> Vec<u8> {
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

pub fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect to iggyd");
    stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(REPLY_TIMEOUT)).unwrap();
    stream
}

/// A logged-in (after [`WireClient::login`]) lockstep connection.
pub struct WireClient {
    pub stream: TcpStream,
    pub client: u128,
    pub session: u64,
    next_request: u64,
}

impl WireClient {
    pub fn connect(address: SocketAddr) -> WireClient {
        let mut random = [0u8; 16];
        getrandom_fill(&mut random);
        WireClient {
            stream: connect(address),
            client: u128::from_le_bytes(random) | 1,
            session: 0,
            next_request: 1,
        }
    }

    /// Sends one request with the SDK's header rules and returns the reply.
    pub fn request(&mut self, operation: Operation, code: u32, body: &[u8]) -> Reply {
        let replicated = operation.is_replicated();
        let stamped = !matches!(
            operation,
            Operation::NonReplicated
                | Operation::SendMessages
                | Operation::StoreConsumerOffset
                | Operation::DeleteConsumerOffset
        );
        let register = operation == Operation::Register;
        let header = RequestHeader {
            client: self.client,
            request_checksum: if stamped { request_checksum(body) } else { 0 },
            request: if register { 0 } else { self.next_request },
            session: if register { 0 } else { self.session },
            ..RequestHeader::client_request(
                operation as u8,
                if operation == Operation::NonReplicated {
                    code
                } else {
                    0
                },
                body.len(),
            )
        };
        if replicated && !register {
            self.next_request += 1;
        }
        exchange(&mut self.stream, &frame(&header, body)).unwrap_or_else(|| {
            panic!("iggyd closed the connection instead of answering {operation:?}/{code}")
        })
    }

    /// Like [`Self::request`], but the reply must be a status-0 reply.
    pub fn ok(&mut self, operation: Operation, code: u32, body: &[u8]) -> Vec<u8> {
        let reply = self.request(operation, code, body);
        assert!(
            reply.is_ok(),
            "{operation:?}/{code}: reply command {} status {}",
            reply.command(),
            reply.status()
        );
        reply.body
    }

    /// Register (op 1) with a username and password; keeps the session.
    pub fn login(&mut self, username: &str, password: &str) {
        let mut body = Vec::new();
        ClientVersionInfo {
            protocol_version: 0x2C00,
            sdk_name: "iggyd-e2e",
            sdk_version: "0.11.0",
        }
        .encode(&mut body);
        body.put_name(username);
        body.put_u8(password.len() as u8);
        body.put_bytes(password.as_bytes());
        body.put_u32(0);
        let reply = self.ok(Operation::Register, 40, &body);
        // [count 0][user_id u32][session u64]...
        assert!(reply.len() >= 16, "login reply too short: {reply:?}");
        self.session = u64::from_le_bytes(reply[8..16].try_into().unwrap());
        assert_ne!(self.session, 0);
    }

    pub fn ping(&mut self) {
        self.ok(Operation::NonReplicated, 1, &[]);
    }

    pub fn create_stream(&mut self, name: &str) {
        let mut body = Vec::new();
        body.put_name(name);
        self.ok(Operation::CreateStream, 202, &body);
    }

    pub fn create_topic(&mut self, stream: &str, name: &str, partitions: u32) {
        let mut body = Vec::new();
        Identifier::Name(stream).encode(&mut body);
        body.put_u32(partitions);
        body.put_name(name);
        self.ok(Operation::CreateTopic, 302, &body);
    }

    /// Sends `payloads` to one partition; returns the base offset.
    pub fn send(&mut self, stream: &str, topic: &str, partition: u32, payloads: &[&[u8]]) -> u64 {
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
        let batch = encode_producer_batch(1_700_000_000_000_000, &specs);
        let stream_id = Identifier::Name(stream);
        let topic_id = Identifier::Name(topic);
        let partitioning = Partitioning::PartitionId(partition);
        let mut body = Vec::new();
        body.put_u32(
            (stream_id.encoded_len() + topic_id.encoded_len() + partitioning.encoded_len() + 4)
                as u32,
        );
        stream_id.encode(&mut body);
        topic_id.encode(&mut body);
        partitioning.encode(&mut body);
        body.put_u32(payloads.len() as u32);
        body.put_bytes(&batch);
        let reply = self.ok(Operation::SendMessages, 101, &body);
        // [count u32][stream u32][topic u32][partition u32][base_offset u64]
        assert!(reply.len() >= 24, "send reply: {reply:?}");
        u64::from_le_bytes(reply[16..24].try_into().unwrap())
    }

    /// Polls `count` messages from `offset` (no auto-commit, so nothing is
    /// written); returns the message payloads.
    pub fn poll(
        &mut self,
        stream: &str,
        topic: &str,
        partition: u32,
        offset: u64,
        count: u32,
    ) -> Vec<Vec<u8>> {
        let mut body = Vec::new();
        Consumer {
            kind: ConsumerKind::Consumer,
            id: Identifier::Numeric(1),
        }
        .encode(&mut body);
        Identifier::Name(stream).encode(&mut body);
        Identifier::Name(topic).encode(&mut body);
        OptionalPartition::encode(Some(partition), &mut body);
        PollingStrategy::Offset(offset).encode(&mut body);
        body.put_u32(count);
        body.put_bool(false);
        let reply = self.ok(Operation::NonReplicated, 100, &body);
        assert!(reply.len() >= 16, "poll reply: {reply:?}");
        let mut payloads = Vec::new();
        let mut rest = &reply[16..];
        while !rest.is_empty() {
            let header = iggyd::batch::BatchHeader::decode(rest).expect("served batch header");
            let record = &rest[..header.batch_length as usize];
            for frame in iggyd::batch::frames(record).unwrap() {
                let frame = frame.unwrap();
                payloads.push(record[frame.payload].to_vec());
            }
            rest = &rest[header.batch_length as usize..];
        }
        payloads
    }
}

fn getrandom_fill(bytes: &mut [u8]) {
    // Enough entropy for a client id without a dependency: the clock, the
    // process id and a stack address.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let seed = nanos ^ (u128::from(std::process::id()) << 64) ^ (bytes.as_ptr() as u128);
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = (seed >> ((index % 16) * 8)) as u8 ^ (index as u8).wrapping_mul(37);
    }
}
