//! The benchmarks' view of a connection: the workspace's blocking wire
//! client (`iggyd_testkit::wire::Client`: one `TcpStream`, one request in
//! flight, the protocol's lockstep, §2.1) plus the handful of commands the
//! scenarios need, addressed by numeric ids.
//!
//! Why not the official `iggy` crate: its async client adds a runtime, a
//! heartbeat task and per-message work (ids, checksums, copies) to every
//! send, which would be measured as part of the server. Here a producer
//! builds its SendMessages frame once and then only patches the request
//! number, so the client costs one `write_all` and one small read per batch,
//! exactly what the raw loopback baseline costs.
//!
//! This file owns what a benchmark asks of a server (topics with a
//! durability and flush thresholds, group membership, polls by target) and
//! the producer batch; it frames nothing itself and times nothing (callers
//! do).

use std::net::SocketAddr;
use std::sync::Arc;

pub use iggyd_metadata::Durability;
use iggyd_testkit::wire::{
    Client, Consumer, Identifier, OptionEntry, Partitioning, PollingStrategy, Request,
};
pub use iggyd_testkit::wire::{ClientError, SendFrame};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch};

pub type Result<T> = std::result::Result<T, ClientError>;

/// Topic options that set when a `replicated` topic is fsynced (sent only
/// when given; the server's defaults apply otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SaveThresholds {
    pub messages: Option<u32>,
    pub bytes: Option<u64>,
}

/// What a consumer polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollTarget {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
    pub group: Option<u32>,
}

/// TLS for the connections of a scenario: the client configuration (see
/// `iggyd_testkit::tls::client_config`) and the name the server's
/// certificate carries.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<rustls::ClientConfig>,
    pub server_name: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// One logged-in connection.
#[derive(Debug)]
pub struct Connection {
    client: Client,
}

/// A u32 at `at` of a reply body.
fn u32_at(body: &[u8], at: usize, what: &str) -> Result<u32> {
    body.get(at..at + 4)
        .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
        .ok_or_else(|| ClientError::Protocol(format!("{what} reply too short")))
}

impl Connection {
    /// Connects and logs in with username and password.
    pub fn connect(address: SocketAddr, username: &str, password: &str) -> Result<Connection> {
        Connection::connect_over(address, None, username, password)
    }

    /// Connects (over TLS when `tls` is given) and logs in.
    pub fn connect_over(
        address: SocketAddr,
        tls: Option<&Tls>,
        username: &str,
        password: &str,
    ) -> Result<Connection> {
        let mut client = match tls {
            None => Client::connect(address)?,
            Some(tls) => Client::connect_tls(address, tls.config.clone(), &tls.server_name)?,
        };
        client.login(username, password)?;
        Ok(Connection { client })
    }

    pub fn ping(&mut self) -> Result<()> {
        self.client.ping()
    }

    /// Creates a stream and returns its id.
    pub fn create_stream(&mut self, name: &str) -> Result<u32> {
        self.client.create_stream(name)
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
        let mut options = vec![
            OptionEntry::string("consumer_offset_durability", durability.as_str()),
            OptionEntry::string("durability", durability.as_str()),
        ];
        if let Some(messages) = save.messages {
            options.push(OptionEntry::uint32("messages_required_to_save", messages));
        }
        if let Some(bytes) = save.bytes {
            options.push(OptionEntry::uint64(
                "size_of_messages_required_to_save",
                bytes,
            ));
        }
        self.client
            .create_topic(Identifier::Numeric(stream), name, partitions, &options)
    }

    pub fn delete_stream(&mut self, stream: u32) -> Result<()> {
        self.client
            .call(&Request::delete_stream(Identifier::Numeric(stream)))
            .map(drop)
    }

    /// Deletes the stream called `name` if it exists (leftovers of an
    /// interrupted run).
    pub fn delete_stream_named(&mut self, name: &str) -> Result<()> {
        match self
            .client
            .call(&Request::delete_stream(Identifier::Name(name)))
        {
            Ok(_) | Err(ClientError::Status { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Creates a consumer group and returns its id.
    pub fn create_group(&mut self, stream: u32, topic: u32, name: &str) -> Result<u32> {
        let request = Request::create_consumer_group(
            Identifier::Numeric(stream),
            Identifier::Numeric(topic),
            name,
        );
        u32_at(self.client.call(&request)?, 0, "consumer group")
    }

    pub fn join_group(&mut self, stream: u32, topic: u32, group: u32) -> Result<()> {
        let request = Request::join_consumer_group(
            Identifier::Numeric(stream),
            Identifier::Numeric(topic),
            Identifier::Numeric(group),
        );
        self.client.call(&request).map(drop)
    }

    /// The caller's assigned partitions (§6.10, SyncConsumerGroup).
    pub fn sync_group(&mut self, stream: u32, topic: u32, group: u32) -> Result<Vec<u32>> {
        let request = Request::sync_consumer_group(
            Identifier::Numeric(stream),
            Identifier::Numeric(topic),
            Identifier::Numeric(group),
        );
        let body = self.client.call(&request)?;
        if body.is_empty() {
            return Err(ClientError::Protocol("not a member of the group".into()));
        }
        // [generation u64][count u32][partition u32 × count]
        let count = u32_at(body, 8, "sync")?;
        (0..count as usize)
            .map(|index| u32_at(body, 12 + index * 4, "sync"))
            .collect()
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
        let request = Request::send_messages(
            Identifier::Numeric(stream),
            Identifier::Numeric(topic),
            Partitioning::PartitionId(partition),
            messages,
            batch,
        );
        self.client.prepare(&request, messages)
    }

    /// Sends a frame built by [`Self::send_frame`] (patching in the request
    /// number) and waits for the acknowledgement.
    pub fn send(&mut self, frame: &mut SendFrame) -> Result<()> {
        self.client.send_prepared(frame)
    }

    /// Stores `offset` for the consumer named `name` on `target`'s
    /// partition (the consumer-offsets scenario).
    pub fn store_named_offset(
        &mut self,
        target: &PollTarget,
        name: &str,
        offset: u64,
    ) -> Result<()> {
        let request = Request::store_consumer_offset(
            Consumer::Single(Identifier::Name(name)),
            Identifier::Numeric(target.stream),
            Identifier::Numeric(target.topic),
            Some(target.partition),
            offset,
            0,
        );
        self.client.call(&request).map(drop)
    }

    /// Sends a poll of `count` messages of `target` from `offset` (as
    /// consumer 1) and does not read the reply: a client that asked for a
    /// lot and stopped reading (the stalled-readers scenario).
    pub fn send_poll_only(&mut self, target: &PollTarget, offset: u64, count: u32) -> Result<()> {
        let request = Request::poll_messages(
            Consumer::Single(Identifier::Numeric(1)),
            Identifier::Numeric(target.stream),
            Identifier::Numeric(target.topic),
            Some(target.partition),
            PollingStrategy::offset(offset),
            count,
            false,
        );
        Ok(self.client.send_only(&request)?)
    }

    /// Polls `count` messages of `partition` and returns
    /// `(messages, reply body bytes)`. `group` polls as that consumer group
    /// with `Next` + auto-commit; otherwise as consumer 1 from `offset`.
    pub fn poll(&mut self, target: &PollTarget, offset: u64, count: u32) -> Result<(u32, usize)> {
        let (consumer, strategy, auto_commit) = match target.group {
            Some(group) => (
                Consumer::Group(Identifier::Numeric(group)),
                PollingStrategy::NEXT,
                true,
            ),
            None => (
                Consumer::Single(Identifier::Numeric(1)),
                PollingStrategy::offset(offset),
                false,
            ),
        };
        let request = Request::poll_messages(
            consumer,
            Identifier::Numeric(target.stream),
            Identifier::Numeric(target.topic),
            Some(target.partition),
            strategy,
            count,
            auto_commit,
        );
        let body = self.client.call(&request)?;
        // [partition_id u32][current_offset u64][messages_count u32][records]
        let messages = u32_at(body, 12, "poll")?;
        Ok((messages, body.len()))
    }
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
