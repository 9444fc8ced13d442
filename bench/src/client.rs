//! A lean, blocking Iggy 0.11.0 client for measurement: one `TcpStream`, one
//! request in flight (the protocol's lockstep, §2.1), built on the daemon's
//! sans-I/O codec (`iggyd::protocol`) and `iggyd::batch`.
//!
//! Why not the official `iggy` crate: its async client adds a runtime, a
//! heartbeat task and per-message work (ids, checksums, copies) to every
//! send, which would be measured as part of the server. Here a producer
//! builds its SendMessages frame once and then only patches the request
//! number, so the client costs one `write_all` and one small read per batch,
//! exactly what the raw loopback baseline costs.
//!
//! This file owns the connection and the handful of commands the
//! benchmarks need; it does not time anything (callers do).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use iggyd::batch::{MessageSpec, encode_producer_batch};
use iggyd::protocol::ReplyHeader;
use iggyd::protocol::codes::{CommandCode, HEADER_COMMAND_REPLY, is_result_framed};
use iggyd::protocol::command::{Command, GroupRef, PasswordLogin, PollMessages, Register};
use iggyd::protocol::limits::HEADER_SIZE;
use iggyd::protocol::options::{OptionBlock, OptionEntry, ValueKind};
use iggyd::protocol::primitives::{
    ClientVersionInfo, Consumer, ConsumerKind, Identifier, Partitioning, PollingStrategy,
};
use iggyd::protocol::request_encode::{encode_body, session_header};

/// Byte offset of the request number in a request header (§2.3).
const REQUEST_NUMBER_AT: usize = 168;
/// Replies larger than this are refused (the 64 MiB frame cap, §2.9).
const REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What can go wrong talking to the server.
#[derive(Debug)]
pub enum ClientError {
    Io(io::Error),
    /// The server answered with a non-zero status (or a result-section
    /// rejection) for `code`.
    Status {
        code: CommandCode,
        status: u32,
    },
    /// The server evicted the session (§2.6).
    Evicted {
        reason: u8,
    },
    /// The reply did not have the expected shape.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(error) => write!(f, "I/O error: {error}"),
            ClientError::Status { code, status } => {
                write!(f, "{code:?} failed with status {status}")
            }
            ClientError::Evicted { reason } => write!(f, "evicted by the server (reason {reason})"),
            ClientError::Protocol(reason) => write!(f, "protocol error: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(error: io::Error) -> Self {
        ClientError::Io(error)
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// Topic durability as sent in the `durability` topic option (§4.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Replicated,
    Persisted,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Replicated => "replicated",
            Durability::Persisted => "persisted",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "replicated" => Ok(Durability::Replicated),
            "persisted" => Ok(Durability::Persisted),
            other => Err(format!(
                "durability must be replicated or persisted, not {other:?}"
            )),
        }
    }
}

/// Topic options that set when a `replicated` topic is fsynced (sent only
/// when given; the server's defaults apply otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveThresholds {
    pub messages: Option<u32>,
    pub bytes: Option<u64>,
}

/// One logged-in connection.
pub struct Connection {
    stream: TcpStream,
    client: u128,
    session: u64,
    /// The request number of the next replicated request (§2.3).
    next_request: u64,
    reply: Vec<u8>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("session", &self.session)
            .finish()
    }
}

/// A client id: random enough for a benchmark (time, pid and a counter),
/// never zero.
fn client_id() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    (now << 32) ^ (u128::from(std::process::id()) << 16) ^ u128::from(counter) | 1
}

/// A parsed reply: header and body (result section already stripped).
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    pub header: ReplyHeader,
    pub body_len: usize,
}

impl Connection {
    /// Connects and logs in with username and password.
    pub fn connect(address: SocketAddr, username: &str, password: &str) -> Result<Connection> {
        let stream = TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        let mut connection = Connection {
            stream,
            client: client_id(),
            session: 0,
            next_request: 1,
            reply: Vec::with_capacity(64 * 1024),
        };
        connection.login(username, password)?;
        Ok(connection)
    }

    fn login(&mut self, username: &str, password: &str) -> Result<()> {
        let command = Command::Register(Register {
            version: ClientVersionInfo {
                protocol_version: 0x2C00,
                sdk_name: "iggyd-bench",
                sdk_version: env!("CARGO_PKG_VERSION"),
            },
            password: Some(PasswordLogin {
                username,
                password,
                context: &[],
            }),
            token: None,
        });
        self.execute(&command)?;
        // [user_id u32][session u64][protocol u32][server_version Name]
        let body = self.body();
        let session = body
            .get(4..12)
            .map(|bytes| u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            .ok_or_else(|| ClientError::Protocol("login reply too short".into()))?;
        if session == 0 {
            return Err(ClientError::Protocol("login returned session 0".into()));
        }
        self.session = session;
        Ok(())
    }

    /// The body of the last reply (after any result section).
    pub fn body(&self) -> &[u8] {
        &self.reply
    }

    /// Encodes `command` for this session, sends it and reads the reply.
    pub fn execute(&mut self, command: &Command<'_>) -> Result<Reply> {
        let code = command.code();
        let body = encode_body(command);
        let request = self.next_request;
        let header = session_header(code, &body, self.client, self.session, request);
        if code.operation().is_replicated() {
            self.next_request += 1;
        }
        let mut frame = Vec::with_capacity(HEADER_SIZE + body.len());
        frame.extend_from_slice(&header.encode());
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame)?;
        self.read_reply(code)
    }

    /// Reads one reply frame into `self.reply`, checks status, command byte
    /// and eviction, and strips the result section where there is one.
    fn read_reply(&mut self, code: CommandCode) -> Result<Reply> {
        let mut header_bytes = [0u8; HEADER_SIZE];
        self.stream.read_exact(&mut header_bytes)?;
        let command_byte = header_bytes[60];
        if command_byte == 13 {
            return Err(ClientError::Evicted {
                reason: header_bytes[255],
            });
        }
        if command_byte != HEADER_COMMAND_REPLY {
            return Err(ClientError::Protocol(format!(
                "reply command byte {command_byte}"
            )));
        }
        let header = ReplyHeader::decode(&header_bytes);
        let size = header.size as usize;
        if !(HEADER_SIZE..=REPLY_BYTES_MAX).contains(&size) {
            return Err(ClientError::Protocol(format!("reply size {size}")));
        }
        let body_len = size - HEADER_SIZE;
        self.reply.resize(body_len, 0);
        self.stream.read_exact(&mut self.reply)?;
        if header.status != 0 {
            return Err(ClientError::Status {
                code,
                status: header.status,
            });
        }
        if is_result_framed(header.operation) && body_len > 0 {
            let count = self
                .reply
                .get(..4)
                .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
                .ok_or_else(|| ClientError::Protocol("short result section".into()))?;
            if count > 0 {
                let status = self
                    .reply
                    .get(8..12)
                    .map_or(1, |bytes| u32::from_le_bytes(bytes.try_into().expect("4")));
                return Err(ClientError::Status { code, status });
            }
            self.reply.drain(..4);
        }
        Ok(Reply {
            header,
            body_len: self.reply.len(),
        })
    }

    pub fn ping(&mut self) -> Result<()> {
        self.execute(&Command::Ping).map(drop)
    }

    /// Creates a stream and returns its id.
    pub fn create_stream(&mut self, name: &str) -> Result<u32> {
        self.execute(&Command::CreateStream {
            name,
            options: OptionBlock::default(),
        })?;
        self.leading_u32("stream")
    }

    /// Creates a topic with `partitions` partitions and the given durability
    /// (sent as `durability` and `consumer_offset_durability`, as the stable
    /// SDK always does), and returns its id.
    pub fn create_topic(
        &mut self,
        stream: u32,
        name: &str,
        partitions: u32,
        durability: Durability,
    ) -> Result<u32> {
        self.create_topic_with(
            stream,
            name,
            partitions,
            durability,
            &SaveThresholds::default(),
        )
    }

    /// [`Self::create_topic`] with the flush thresholds of a `replicated`
    /// topic (`messages_required_to_save`, `size_of_messages_required_to_save`)
    /// where given.
    pub fn create_topic_with(
        &mut self,
        stream: u32,
        name: &str,
        partitions: u32,
        durability: Durability,
        save: &SaveThresholds,
    ) -> Result<u32> {
        let value = durability.as_str().as_bytes();
        let messages = save.messages.map(u32::to_le_bytes);
        let bytes = save.bytes.map(u64::to_le_bytes);
        let mut entries = vec![
            OptionEntry {
                key: "consumer_offset_durability",
                kind: ValueKind::String as u8,
                value,
            },
            OptionEntry {
                key: "durability",
                kind: ValueKind::String as u8,
                value,
            },
        ];
        if let Some(messages) = &messages {
            entries.push(OptionEntry {
                key: "messages_required_to_save",
                kind: ValueKind::Uint32 as u8,
                value: messages,
            });
        }
        if let Some(bytes) = &bytes {
            entries.push(OptionEntry {
                key: "size_of_messages_required_to_save",
                kind: ValueKind::Uint64 as u8,
                value: bytes,
            });
        }
        self.execute(&Command::CreateTopic {
            stream: Identifier::Numeric(stream),
            partitions_count: partitions,
            name,
            options: OptionBlock { entries },
        })?;
        self.leading_u32("topic")
    }

    pub fn delete_stream(&mut self, stream: u32) -> Result<()> {
        self.execute(&Command::DeleteStream {
            stream: Identifier::Numeric(stream),
        })
        .map(drop)
    }

    /// Deletes the stream called `name` if it exists (leftovers of an
    /// interrupted run).
    pub fn delete_stream_named(&mut self, name: &str) -> Result<()> {
        match self.execute(&Command::DeleteStream {
            stream: Identifier::Name(name),
        }) {
            Ok(_) => Ok(()),
            Err(ClientError::Status { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Creates a consumer group and returns its id.
    pub fn create_group(&mut self, stream: u32, topic: u32, name: &str) -> Result<u32> {
        self.execute(&Command::CreateConsumerGroup {
            stream: Identifier::Numeric(stream),
            topic: Identifier::Numeric(topic),
            name,
        })?;
        self.leading_u32("consumer group")
    }

    pub fn join_group(&mut self, stream: u32, topic: u32, group: u32) -> Result<()> {
        self.execute(&Command::JoinConsumerGroup(GroupRef {
            stream: Identifier::Numeric(stream),
            topic: Identifier::Numeric(topic),
            group: Identifier::Numeric(group),
        }))
        .map(drop)
    }

    /// The caller's assigned partitions (§6.10, SyncConsumerGroup).
    pub fn sync_group(&mut self, stream: u32, topic: u32, group: u32) -> Result<Vec<u32>> {
        self.execute(&Command::SyncConsumerGroup(GroupRef {
            stream: Identifier::Numeric(stream),
            topic: Identifier::Numeric(topic),
            group: Identifier::Numeric(group),
        }))?;
        let body = self.body();
        if body.is_empty() {
            return Err(ClientError::Protocol("not a member of the group".into()));
        }
        let count = body
            .get(8..12)
            .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            .ok_or_else(|| ClientError::Protocol("short sync reply".into()))?;
        (0..count as usize)
            .map(|index| {
                body.get(12 + index * 4..16 + index * 4)
                    .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
                    .ok_or_else(|| ClientError::Protocol("short sync reply".into()))
            })
            .collect()
    }

    fn leading_u32(&self, what: &str) -> Result<u32> {
        self.body()
            .get(..4)
            .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            .ok_or_else(|| ClientError::Protocol(format!("{what} reply too short")))
    }

    /// Sends a frame built by [`SendFrame`] (patching in the request
    /// number) and waits for the acknowledgement.
    pub fn send(&mut self, frame: &mut SendFrame) -> Result<()> {
        let request = self.next_request;
        self.next_request += 1;
        frame.bytes[REQUEST_NUMBER_AT..REQUEST_NUMBER_AT + 8]
            .copy_from_slice(&request.to_le_bytes());
        self.stream.write_all(&frame.bytes)?;
        self.read_reply(CommandCode::SendMessages).map(drop)
    }

    /// Builds a SendMessages frame for this session (see [`SendFrame`]).
    pub fn send_frame(
        &self,
        stream: u32,
        topic: u32,
        partition: u32,
        batch: &[u8],
        messages: u32,
    ) -> SendFrame {
        let command = Command::SendMessages(iggyd::protocol::command::SendMessages {
            stream: Identifier::Numeric(stream),
            topic: Identifier::Numeric(topic),
            partitioning: Partitioning::PartitionId(partition),
            messages_count: messages,
            batch,
        });
        let body = encode_body(&command);
        let header = session_header(
            CommandCode::SendMessages,
            &body,
            self.client,
            self.session,
            0,
        );
        let mut bytes = Vec::with_capacity(HEADER_SIZE + body.len());
        bytes.extend_from_slice(&header.encode());
        bytes.extend_from_slice(&body);
        SendFrame { bytes, messages }
    }

    /// Polls `count` messages of `partition` and returns
    /// `(messages, reply body bytes)`. `group` polls as that consumer group
    /// with `Next` + auto-commit; otherwise as consumer 1 from `offset`.
    pub fn poll(&mut self, target: &PollTarget, offset: u64, count: u32) -> Result<(u32, usize)> {
        let (consumer, strategy, auto_commit) = match target.group {
            Some(group) => (
                Consumer {
                    kind: ConsumerKind::ConsumerGroup,
                    id: Identifier::Numeric(group),
                },
                PollingStrategy::Next,
                true,
            ),
            None => (
                Consumer {
                    kind: ConsumerKind::Consumer,
                    id: Identifier::Numeric(1),
                },
                PollingStrategy::Offset(offset),
                false,
            ),
        };
        let reply = self.execute(&Command::PollMessages(PollMessages {
            consumer,
            stream: Identifier::Numeric(target.stream),
            topic: Identifier::Numeric(target.topic),
            partition_id: Some(target.partition),
            strategy,
            count,
            auto_commit,
        }))?;
        // [partition_id u32][current_offset u64][messages_count u32][records]
        let messages = self
            .body()
            .get(12..16)
            .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            .ok_or_else(|| ClientError::Protocol("poll reply shorter than 16 bytes".into()))?;
        Ok((messages, reply.body_len))
    }

    /// Raw access for the idle/inspection tools.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

/// What a consumer polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollTarget {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
    pub group: Option<u32>,
}

/// A complete SendMessages request frame, built once per producer and sent
/// over and over (the server stamps offsets; the bytes never change except
/// for the request number).
#[derive(Debug, Clone)]
pub struct SendFrame {
    pub bytes: Vec<u8>,
    pub messages: u32,
}

/// A producer batch of `messages` messages of `payload_bytes` each, with
/// distinct ids, valid checksums and no user headers.
pub fn producer_batch(messages: u32, payload_bytes: usize, seed: u64) -> Vec<u8> {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: (u128::from(seed) << 64) | u128::from(index + 1),
            timestamp_delta: 0,
            payload: (0..payload_bytes)
                .map(|byte| (byte as u64 ^ seed ^ u64::from(index)) as u8)
                .collect(),
            user_headers: Vec::new(),
        })
        .collect();
    let origin = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64);
    encode_producer_batch(origin, &specs)
}
