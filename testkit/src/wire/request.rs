//! Every 0.11.0 request as the SDK lays it out (§4 field encodings, §6
//! command bodies): a `Request` is an operation byte, a command code and a
//! body, built by one constructor per command from a `Body` writer. Header
//! stamping (checksum, request number, session) follows the SDK's rules in
//! `Request::header`.
//!
//! This is the client side only and deliberately independent of the
//! daemon: the daemon decodes, this encodes, and the round-trip tests and
//! fuzz targets hold them against each other. It panics on values no client
//! can send (a name over 255 bytes), because that is a bug in the test.

use super::{Header, OPERATION_NON_REPLICATED, OPERATION_REGISTER, is_stamped, request_checksum};

/// A resource by number or by name (§4.1): `[kind u8][len u8][value]`,
/// kind 1 numeric (len 4, u32) or 2 string (len 1..=255).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identifier<'a> {
    Numeric(u32),
    Name(&'a str),
}

/// Who polls or owns an offset (§4.3): `[kind u8][Identifier]`, kind 1 a
/// single consumer, 2 a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer<'a> {
    Single(Identifier<'a>),
    Group(Identifier<'a>),
}

/// How a send picks its partition (§4.5): `[kind u8][len u8][value]`, kind 1
/// balanced (len 0), 2 partition id (len 4), 3 messages key (len 1..=255).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioning<'a> {
    Balanced,
    PartitionId(u32),
    MessagesKey(&'a [u8]),
}

/// Where a poll starts (§4.6), as it travels: `[kind u8][value u64]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollingStrategy {
    pub kind: u8,
    pub value: u64,
}

impl PollingStrategy {
    pub const FIRST: PollingStrategy = PollingStrategy { kind: 3, value: 0 };
    pub const LAST: PollingStrategy = PollingStrategy { kind: 4, value: 0 };
    /// The consumer's stored offset + 1.
    pub const NEXT: PollingStrategy = PollingStrategy { kind: 5, value: 0 };

    pub fn offset(offset: u64) -> PollingStrategy {
        PollingStrategy {
            kind: 1,
            value: offset,
        }
    }
    /// From the first message at or after this time (µs since the epoch).
    pub fn timestamp(micros: u64) -> PollingStrategy {
        PollingStrategy {
            kind: 2,
            value: micros,
        }
    }
}

/// One option (§4.9): a String key TLV then a value TLV, each
/// `[kind u8][len u32][bytes]` (String is kind 2, Uint32 11, Uint64 12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionEntry {
    pub key: String,
    pub kind: u8,
    pub value: Vec<u8>,
}

impl OptionEntry {
    pub const KIND_STRING: u8 = 2;
    pub const KIND_UINT32: u8 = 11;
    pub const KIND_UINT64: u8 = 12;

    pub fn string(key: &str, value: &str) -> OptionEntry {
        OptionEntry::raw(key, Self::KIND_STRING, value.as_bytes())
    }
    pub fn uint32(key: &str, value: u32) -> OptionEntry {
        OptionEntry::raw(key, Self::KIND_UINT32, &value.to_le_bytes())
    }
    pub fn uint64(key: &str, value: u64) -> OptionEntry {
        OptionEntry::raw(key, Self::KIND_UINT64, &value.to_le_bytes())
    }
    pub fn raw(key: &str, kind: u8, value: &[u8]) -> OptionEntry {
        OptionEntry {
            key: key.to_string(),
            kind,
            value: value.to_vec(),
        }
    }
}

/// The version prefix of a login body (§4.11):
/// `[protocol_version u32][sdk_name Name][sdk_version Name]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version<'a> {
    pub protocol_version: u32,
    pub sdk_name: &'a str,
    pub sdk_version: &'a str,
}

impl Version<'static> {
    /// Protocol 0.11.0 (`11 << 10`), as the SDKs send it.
    pub const PROTOCOL_0_11_0: u32 = 11 << 10;
    /// What this kit's client says it is.
    pub const TESTKIT: Version<'static> = Version {
        protocol_version: Self::PROTOCOL_0_11_0,
        sdk_name: "iggyd-testkit",
        sdk_version: "0.11.0",
    };
}

/// A little-endian body writer; each method appends one field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body(Vec<u8>);

impl Body {
    pub fn new() -> Body {
        Body::default()
    }
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
    pub fn bytes(mut self, bytes: &[u8]) -> Body {
        self.0.extend_from_slice(bytes);
        self
    }
    pub fn u8(self, value: u8) -> Body {
        self.bytes(&[value])
    }
    pub fn bool(self, value: bool) -> Body {
        self.u8(u8::from(value))
    }
    pub fn u32(self, value: u32) -> Body {
        self.bytes(&value.to_le_bytes())
    }
    pub fn u64(self, value: u64) -> Body {
        self.bytes(&value.to_le_bytes())
    }
    /// `[len u8][bytes]`: names, passwords, tokens.
    pub fn name(self, text: &str) -> Body {
        let length = u8::try_from(text.len())
            .unwrap_or_else(|_| panic!("a wire name is at most 255 bytes: {text:?}"));
        self.u8(length).bytes(text.as_bytes())
    }
    /// `[len u32][bytes]`.
    pub fn u32_prefixed(self, bytes: &[u8]) -> Body {
        let length = u32::try_from(bytes.len()).expect("below 4 GiB");
        self.u32(length).bytes(bytes)
    }
    pub fn identifier(self, identifier: Identifier<'_>) -> Body {
        match identifier {
            Identifier::Numeric(id) => self.u8(1).u8(4).u32(id),
            Identifier::Name(name) => self.u8(2).name(name),
        }
    }
    pub fn consumer(self, consumer: Consumer<'_>) -> Body {
        match consumer {
            Consumer::Single(id) => self.u8(1).identifier(id),
            Consumer::Group(id) => self.u8(2).identifier(id),
        }
    }
    /// `[flag u8][partition_id u32]`, 0 when absent.
    pub fn partition(self, partition_id: Option<u32>) -> Body {
        self.bool(partition_id.is_some())
            .u32(partition_id.unwrap_or(0))
    }
    pub fn partitioning(self, partitioning: Partitioning<'_>) -> Body {
        match partitioning {
            Partitioning::Balanced => self.u8(1).u8(0),
            Partitioning::PartitionId(id) => self.u8(2).u8(4).u32(id),
            Partitioning::MessagesKey(key) => {
                let length = u8::try_from(key.len()).expect("a messages key is 1..=255 bytes");
                self.u8(3).u8(length).bytes(key)
            }
        }
    }
    pub fn strategy(self, strategy: PollingStrategy) -> Body {
        self.u8(strategy.kind).u64(strategy.value)
    }
    /// Entries back to back, without a length prefix (the request form).
    pub fn options(self, entries: &[OptionEntry]) -> Body {
        entries.iter().fold(self, |body, entry| {
            body.u8(OptionEntry::KIND_STRING)
                .u32_prefixed(entry.key.as_bytes())
                .u8(entry.kind)
                .u32_prefixed(&entry.value)
        })
    }
    /// `[has u8]` then, when present, `[len u32][permissions]`; the
    /// permissions bytes come encoded by the caller.
    pub fn permissions(self, permissions: Option<&[u8]>) -> Body {
        match permissions {
            None => self.bool(false),
            Some(bytes) => self.bool(true).u32_prefixed(bytes),
        }
    }
    pub fn version(self, version: Version<'_>) -> Body {
        self.u32(version.protocol_version)
            .name(version.sdk_name)
            .name(version.sdk_version)
    }
    fn stream_topic(self, stream: Identifier<'_>, topic: Identifier<'_>) -> Body {
        self.identifier(stream).identifier(topic)
    }
    fn offset_target(
        self,
        consumer: Consumer<'_>,
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: Option<u32>,
    ) -> Body {
        self.consumer(consumer)
            .stream_topic(stream, topic)
            .partition(partition_id)
    }
    fn group(self, stream: Identifier<'_>, topic: Identifier<'_>, group: Identifier<'_>) -> Body {
        self.stream_topic(stream, topic).identifier(group)
    }
}

/// One request: the operation byte (header offset 176), the command code
/// (in the header only for NonReplicated, offset 196) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub operation: u8,
    pub code: u32,
    pub body: Vec<u8>,
}

impl Request {
    /// Any request, as given.
    pub fn new(operation: u8, code: u32, body: Vec<u8>) -> Request {
        Request {
            operation,
            code,
            body,
        }
    }

    /// A request that travels as NonReplicated with its code in the header.
    fn query(code: u32, body: Body) -> Request {
        Request::new(OPERATION_NON_REPLICATED, code, body.into_vec())
    }

    /// A request with an operation of its own (§2.4).
    fn change(operation: u8, code: u32, body: Body) -> Request {
        Request::new(operation, code, body.into_vec())
    }

    /// The header the SDK sends with this request (§2.3): the code at
    /// 196..200 only for NonReplicated, the checksum stamped except for
    /// non-replicated and partition operations, and request number and
    /// session 0 for a login.
    pub fn header(&self, client: u128, session: u64, request: u64) -> Header {
        let register = self.operation == OPERATION_REGISTER;
        let code = if self.operation == OPERATION_NON_REPLICATED {
            self.code
        } else {
            0
        };
        Header {
            client,
            request_checksum: if is_stamped(self.operation) {
                request_checksum(&self.body)
            } else {
                0
            },
            request: if register { 0 } else { request },
            session: if register { 0 } else { session },
            ..Header::new(self.operation, code, self.body.len())
        }
    }

    /// `[header][body]` with `header(client, session, request)`.
    pub fn frame(&self, client: u128, session: u64, request: u64) -> Vec<u8> {
        self.header(client, session, request).frame(&self.body)
    }

    // System (§6.1).

    pub fn ping() -> Request {
        Request::query(1, Body::new())
    }
    pub fn get_stats() -> Request {
        Request::query(10, Body::new())
    }
    /// `compression` 1..=6; `types` 1..=6 or 100.
    pub fn get_snapshot(compression: u8, types: &[u8]) -> Request {
        let count = u8::try_from(types.len()).expect("at most 255 snapshot types");
        Request::query(11, Body::new().u8(compression).u8(count).bytes(types))
    }
    pub fn get_cluster_metadata() -> Request {
        Request::query(12, Body::new())
    }
    /// `scope`: 1 topic, 2 stream, 3 user.
    pub fn describe_options(scope: u8) -> Request {
        Request::query(13, Body::new().u8(scope))
    }
    pub fn get_me() -> Request {
        Request::query(20, Body::new())
    }
    pub fn get_client(client_id: u32) -> Request {
        Request::query(21, Body::new().u32(client_id))
    }
    pub fn get_clients() -> Request {
        Request::query(22, Body::new())
    }
    /// The cluster-routing codes (14, 103, 104, 123) a single node refuses.
    pub fn cluster_routing(code: u32) -> Request {
        Request::query(code, Body::new())
    }
    /// AttachConsumerSession (code 14): `[client u128][session u64][watermark u64]`.
    pub fn attach_consumer_session(client: u128, session: u64, watermark: u64) -> Request {
        Request::query(
            14,
            Body::new()
                .bytes(&client.to_le_bytes())
                .u64(session)
                .u64(watermark),
        )
    }

    // Login and users (§6.2–§6.4).

    /// A password login as this kit's client.
    pub fn login(username: &str, password: &str) -> Request {
        Request::login_password(Version::TESTKIT, username, password, &[])
    }
    /// Register (code 40) with username and password.
    pub fn login_password(
        version: Version<'_>,
        username: &str,
        password: &str,
        context: &[u8],
    ) -> Request {
        let body = Body::new()
            .version(version)
            .name(username)
            .name(password)
            .u32_prefixed(context);
        Request::change(OPERATION_REGISTER, 40, body)
    }
    /// Register (code 45) with a personal access token.
    pub fn login_token(version: Version<'_>, token: &str, context: &[u8]) -> Request {
        let body = Body::new()
            .version(version)
            .name(token)
            .u32_prefixed(context);
        Request::change(OPERATION_REGISTER, 45, body)
    }
    pub fn logout() -> Request {
        Request::change(3, 39, Body::new())
    }
    pub fn get_user(user: Identifier<'_>) -> Request {
        Request::query(31, Body::new().identifier(user))
    }
    pub fn get_users() -> Request {
        Request::query(32, Body::new())
    }
    /// `status` 1 active, 2 inactive; `permissions` encoded by the caller.
    pub fn create_user(
        username: &str,
        password: &str,
        status: u8,
        permissions: Option<&[u8]>,
        options: &[OptionEntry],
    ) -> Request {
        let body = Body::new()
            .name(username)
            .name(password)
            .u8(status)
            .permissions(permissions)
            .options(options);
        Request::change(141, 33, body)
    }
    pub fn delete_user(user: Identifier<'_>) -> Request {
        Request::change(143, 34, Body::new().identifier(user))
    }
    pub fn update_user(
        user: Identifier<'_>,
        username: Option<&str>,
        status: Option<u8>,
        options: &[OptionEntry],
    ) -> Request {
        let mut body = Body::new().identifier(user).bool(username.is_some());
        if let Some(username) = username {
            body = body.name(username);
        }
        body = body.bool(status.is_some());
        if let Some(status) = status {
            body = body.u8(status);
        }
        Request::change(142, 35, body.options(options))
    }
    pub fn update_permissions(user: Identifier<'_>, permissions: Option<&[u8]>) -> Request {
        let body = Body::new().identifier(user).permissions(permissions);
        Request::change(145, 36, body)
    }
    pub fn change_password(user: Identifier<'_>, current: &str, new: &str) -> Request {
        let body = Body::new().identifier(user).name(current).name(new);
        Request::change(144, 37, body)
    }
    pub fn get_personal_access_tokens() -> Request {
        Request::query(41, Body::new())
    }
    pub fn create_personal_access_token(name: &str, expiry: u64) -> Request {
        Request::change(146, 42, Body::new().name(name).u64(expiry))
    }
    pub fn delete_personal_access_token(name: &str) -> Request {
        Request::change(147, 43, Body::new().name(name))
    }

    // Messages and offsets (§6.5–§6.7).

    pub fn poll_messages(
        consumer: Consumer<'_>,
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: Option<u32>,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> Request {
        let body = Body::new()
            .offset_target(consumer, stream, topic, partition_id)
            .strategy(strategy)
            .u32(count)
            .bool(auto_commit);
        Request::query(100, body)
    }
    /// `[metadata_length u32][stream][topic][partitioning][messages_count
    /// u32][batch]`; `batch` is a producer batch record (§5.1).
    pub fn send_messages(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partitioning: Partitioning<'_>,
        messages_count: u32,
        batch: &[u8],
    ) -> Request {
        let metadata = Body::new()
            .stream_topic(stream, topic)
            .partitioning(partitioning)
            .u32(messages_count)
            .into_vec();
        let length = u32::try_from(metadata.len()).expect("small");
        let body = Body::new().u32(length).bytes(&metadata).bytes(batch);
        Request::change(160, 101, body)
    }
    pub fn flush_unsaved_buffer(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: u32,
        fsync: bool,
    ) -> Request {
        let body = Body::new()
            .stream_topic(stream, topic)
            .u32(partition_id)
            .bool(fsync);
        Request::query(102, body)
    }
    pub fn get_consumer_offset(
        consumer: Consumer<'_>,
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: Option<u32>,
    ) -> Request {
        let body = Body::new().offset_target(consumer, stream, topic, partition_id);
        Request::query(120, body)
    }
    /// `ack` 0 no ack, 1 quorum (the SDK always sends 1).
    pub fn store_consumer_offset(
        consumer: Consumer<'_>,
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: Option<u32>,
        offset: u64,
        ack: u8,
    ) -> Request {
        let body = Body::new()
            .offset_target(consumer, stream, topic, partition_id)
            .u64(offset)
            .u8(ack);
        Request::change(161, 121, body)
    }
    pub fn delete_consumer_offset(
        consumer: Consumer<'_>,
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: Option<u32>,
        ack: u8,
    ) -> Request {
        let body = Body::new()
            .offset_target(consumer, stream, topic, partition_id)
            .u8(ack);
        Request::change(162, 122, body)
    }

    // Streams (§6.8).

    pub fn get_stream(stream: Identifier<'_>) -> Request {
        Request::query(200, Body::new().identifier(stream))
    }
    pub fn get_streams() -> Request {
        Request::query(201, Body::new())
    }
    pub fn create_stream(name: &str, options: &[OptionEntry]) -> Request {
        Request::change(128, 202, Body::new().name(name).options(options))
    }
    pub fn delete_stream(stream: Identifier<'_>) -> Request {
        Request::change(130, 203, Body::new().identifier(stream))
    }
    pub fn update_stream(stream: Identifier<'_>, name: &str, options: &[OptionEntry]) -> Request {
        let body = Body::new().identifier(stream).name(name).options(options);
        Request::change(129, 204, body)
    }
    pub fn purge_stream(stream: Identifier<'_>) -> Request {
        Request::change(131, 205, Body::new().identifier(stream))
    }

    // Topics, partitions and segments (§6.9).

    pub fn get_topic(stream: Identifier<'_>, topic: Identifier<'_>) -> Request {
        Request::query(300, Body::new().stream_topic(stream, topic))
    }
    pub fn get_topics(stream: Identifier<'_>) -> Request {
        Request::query(301, Body::new().identifier(stream))
    }
    pub fn create_topic(
        stream: Identifier<'_>,
        partitions_count: u32,
        name: &str,
        options: &[OptionEntry],
    ) -> Request {
        let body = Body::new()
            .identifier(stream)
            .u32(partitions_count)
            .name(name)
            .options(options);
        Request::change(132, 302, body)
    }
    pub fn delete_topic(stream: Identifier<'_>, topic: Identifier<'_>) -> Request {
        Request::change(134, 303, Body::new().stream_topic(stream, topic))
    }
    pub fn update_topic(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        name: &str,
        options: &[OptionEntry],
    ) -> Request {
        let body = Body::new()
            .stream_topic(stream, topic)
            .name(name)
            .options(options);
        Request::change(133, 304, body)
    }
    pub fn purge_topic(stream: Identifier<'_>, topic: Identifier<'_>) -> Request {
        Request::change(135, 305, Body::new().stream_topic(stream, topic))
    }
    pub fn create_partitions(stream: Identifier<'_>, topic: Identifier<'_>, count: u32) -> Request {
        let body = Body::new().stream_topic(stream, topic).u32(count);
        Request::change(136, 402, body)
    }
    pub fn delete_partitions(stream: Identifier<'_>, topic: Identifier<'_>, count: u32) -> Request {
        let body = Body::new().stream_topic(stream, topic).u32(count);
        Request::change(137, 403, body)
    }
    pub fn delete_segments(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        partition_id: u32,
        segments_count: u32,
    ) -> Request {
        let body = Body::new()
            .stream_topic(stream, topic)
            .u32(partition_id)
            .u32(segments_count);
        Request::change(138, 503, body)
    }

    // Consumer groups (§6.10).

    pub fn get_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        group: Identifier<'_>,
    ) -> Request {
        Request::query(600, Body::new().group(stream, topic, group))
    }
    pub fn get_consumer_groups(stream: Identifier<'_>, topic: Identifier<'_>) -> Request {
        Request::query(601, Body::new().stream_topic(stream, topic))
    }
    pub fn create_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        name: &str,
    ) -> Request {
        let body = Body::new().stream_topic(stream, topic).name(name);
        Request::change(139, 602, body)
    }
    pub fn delete_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        group: Identifier<'_>,
    ) -> Request {
        Request::change(140, 603, Body::new().group(stream, topic, group))
    }
    pub fn join_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        group: Identifier<'_>,
    ) -> Request {
        Request::change(148, 604, Body::new().group(stream, topic, group))
    }
    pub fn leave_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        group: Identifier<'_>,
    ) -> Request {
        Request::change(149, 605, Body::new().group(stream, topic, group))
    }
    /// The caller's assigned partitions (a query, not an operation).
    pub fn sync_consumer_group(
        stream: Identifier<'_>,
        topic: Identifier<'_>,
        group: Identifier<'_>,
    ) -> Request {
        Request::query(606, Body::new().group(stream, topic, group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the byte layouts of the primitives against the examples of
    /// the reference: identifiers, consumers, partitioning, strategies, an
    /// option entry and the optional-partition field.
    #[test]
    fn primitive_layouts() {
        let bytes = |body: Body| body.into_vec();
        assert_eq!(
            bytes(Body::new().identifier(Identifier::Numeric(7))),
            [1, 4, 7, 0, 0, 0]
        );
        assert_eq!(
            bytes(Body::new().identifier(Identifier::Name("s1"))),
            [2, 2, b's', b'1']
        );
        assert_eq!(
            bytes(Body::new().consumer(Consumer::Group(Identifier::Numeric(1)))),
            [2, 1, 4, 1, 0, 0, 0]
        );
        assert_eq!(
            bytes(Body::new().partitioning(Partitioning::PartitionId(1))),
            [2, 4, 1, 0, 0, 0]
        );
        assert_eq!(
            bytes(Body::new().partitioning(Partitioning::Balanced)),
            [1, 0]
        );
        assert_eq!(
            bytes(Body::new().strategy(PollingStrategy::NEXT)),
            [5, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(Body::new().partition(None)), [0, 0, 0, 0, 0]);
        assert_eq!(
            bytes(Body::new().options(&[OptionEntry::string("k", "v")])),
            [2, 1, 0, 0, 0, b'k', 2, 1, 0, 0, 0, b'v']
        );
    }

    /// Proves the SDK's header rules: login carries request and session 0
    /// and a checksum; non-replicated requests carry their code and no
    /// checksum; partition operations carry no code and no checksum.
    #[test]
    fn header_rules() {
        let login = Request::login("iggy", "iggy").header(9, 5, 3);
        assert_eq!((login.operation, login.request, login.session), (1, 0, 0));
        assert_ne!(login.request_checksum, 0);
        assert_eq!(login.code, 0);
        let ping = Request::ping().header(9, 5, 3);
        assert_eq!(
            (ping.operation, ping.code, ping.request_checksum),
            (2, 1, 0)
        );
        assert_eq!((ping.request, ping.session, ping.size), (3, 5, 256));
        let send = Request::send_messages(
            Identifier::Numeric(1),
            Identifier::Numeric(1),
            Partitioning::PartitionId(0),
            1,
            &[],
        )
        .header(9, 5, 3);
        assert_eq!(
            (send.operation, send.code, send.request_checksum),
            (160, 0, 0)
        );
        let encoded = Request::create_stream("s", &[]).header(9, 5, 3).encode();
        assert_eq!(encoded[60], 5);
        assert_eq!(encoded[176], 128);
        assert_eq!(&encoded[48..52], &258u32.to_le_bytes());
        assert_eq!(&encoded[168..176], &3u64.to_le_bytes());
    }
}
