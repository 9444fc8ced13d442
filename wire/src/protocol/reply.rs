//! Reply encoding: the reply/eviction frames (§2.5–§2.7) and every reply
//! body of §5–§7, built from plain structs that the server fills from its
//! own model.
//!
//! Body encoders append to a `Vec<u8>` and never fail: the values come from
//! the server, and names in it were validated on the way in. The frame
//! helpers enforce the two rules the SDK is strict about: a non-zero status
//! travels with an empty body, and a successful result-framed reply always
//! starts with the 4-byte `count = 0` result section (never an empty body).

use std::num::NonZeroU64;

use super::codes::{EvictionReason, Status, is_result_framed};
use super::error::{WireAction, WireError};
use super::header::{EvictionHeader, ReplyHeader, RequestHeader};
use super::limits::{BODY_SIZE_MAX, HEADER_SIZE};
use super::options::{OptionEntry, encode_option_block_prefixed};
use super::permissions::Permissions;
use super::reader::WireWrite;

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

/// The result section of a successful result-framed reply: `count = 0`.
pub const RESULT_OK: [u8; 4] = [0; 4];

/// A rejection result section (§2.7): `[count u32 = 1][index u32 = 0][result u32 = code]`.
pub fn result_rejection(status: Status) -> [u8; 12] {
    let mut section = [0u8; 12];
    section[0] = 1;
    section[8..12].copy_from_slice(&status.code().to_le_bytes());
    section
}

/// A complete reply frame to `request`.
///
/// * `status != Ok`: header only, whatever `payload` holds (§2.5).
/// * `status == Ok` on a result-framed operation (§2.4): body is
///   `00 00 00 00` ‖ `payload`, so callers pass only the typed payload.
/// * otherwise: body is `payload`.
///
/// `session` goes to the header's `op`, `commit` is raised to at least
/// `session`. Fails only if the frame would exceed 64 MiB.
pub fn encode_reply(
    request: &RequestHeader,
    status: Status,
    payload: &[u8],
    session: u64,
    commit: u64,
) -> Result<Vec<u8>, WireError> {
    let framed = status == Status::Ok && is_result_framed(request.operation);
    let payload = if status == Status::Ok { payload } else { &[] };
    let body_len = payload
        .len()
        .saturating_add(if framed { RESULT_OK.len() } else { 0 });
    if body_len > BODY_SIZE_MAX {
        return Err(WireError::ReplyTooLarge {
            size: body_len.saturating_add(HEADER_SIZE),
        });
    }
    let header = ReplyHeader::for_request(request, status, session, commit, body_len);
    let mut frame = Vec::with_capacity(HEADER_SIZE + body_len);
    frame.extend_from_slice(&header.encode());
    if framed {
        frame.extend_from_slice(&RESULT_OK);
    }
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// Builds a successful reply around a body that already sits in `frame`
/// after `HEADER_SIZE` free bytes, followed by `tail_len` more bytes the
/// caller sends after it (a poll's records, lent without a copy): fills
/// those bytes with the reply header. `None` when the operation is
/// result-framed (its body needs a result section first) or the body is
/// too large.
pub fn encode_reply_in_place(
    request: &RequestHeader,
    mut frame: Vec<u8>,
    tail_len: usize,
    session: u64,
    commit: u64,
) -> Option<Vec<u8>> {
    if is_result_framed(request.operation) || frame.len() < HEADER_SIZE {
        return None;
    }
    let body_len = (frame.len() - HEADER_SIZE).checked_add(tail_len)?;
    if body_len > BODY_SIZE_MAX {
        return None;
    }
    let header = ReplyHeader::for_request(request, Status::Ok, session, commit, body_len);
    *frame.first_chunk_mut::<HEADER_SIZE>()? = header.encode();
    Some(frame)
}

/// A header-only reply carrying `status` (`Ok` = an empty body, only
/// valid for operations that are not result-framed).
pub fn encode_status_reply(
    request: &RequestHeader,
    status: Status,
    session: u64,
    commit: u64,
) -> Vec<u8> {
    ReplyHeader::for_request(request, status, session, commit, 0)
        .encode()
        .to_vec()
}

/// An error answer with `status`: a result-section rejection for
/// result-framed operations (the Apache channel for metadata rejections),
/// a status reply for everything else. The SDK raises the same error for
/// both.
pub fn encode_rejection(
    request: &RequestHeader,
    status: Status,
    session: u64,
    commit: u64,
) -> Vec<u8> {
    if !is_result_framed(request.operation) {
        return encode_status_reply(request, status, session, commit);
    }
    let section = result_rejection(status);
    let header = ReplyHeader::for_request(request, Status::Ok, session, commit, section.len());
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&section);
    frame
}

/// An eviction frame for the client of `request` (§2.6).
pub fn encode_eviction(request: &RequestHeader, reason: EvictionReason) -> [u8; HEADER_SIZE] {
    EvictionHeader::for_request(request, reason).encode()
}

/// The bytes to send for a decode error, or `None` when the connection
/// must be closed without a reply.
pub fn encode_error(
    request: &RequestHeader,
    error: &WireError,
    session: u64,
    commit: u64,
) -> Option<Vec<u8>> {
    match error.action() {
        WireAction::Reply { status } => Some(encode_status_reply(request, status, session, commit)),
        WireAction::Evict { reason } => Some(encode_eviction(request, reason).to_vec()),
        WireAction::Close => None,
    }
}

// ---------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------

fn put_u32_str(out: &mut Vec<u8>, text: &str) {
    out.put_u32_prefixed(text.as_bytes());
}

fn count_u32(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Stream (§7.1), 33 fixed bytes then name and options:
/// `[id u32 @0][created_at u64 @4][topics_count u32 @12][size_bytes u64 @16]
/// [messages_count u64 @24][name Name @32][options_len u32][options TLV]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StreamInfo<'a> {
    pub id: u32,
    pub created_at_us: u64,
    pub topics_count: u32,
    pub size_bytes: u64,
    pub messages_count: u64,
    pub name: &'a str,
    pub options: &'a [OptionEntry<'a>],
}

pub fn encode_stream(out: &mut Vec<u8>, stream: &StreamInfo<'_>) {
    out.put_u32(stream.id);
    out.put_u64(stream.created_at_us);
    out.put_u32(stream.topics_count);
    out.put_u64(stream.size_bytes);
    out.put_u64(stream.messages_count);
    out.put_name(stream.name);
    encode_option_block_prefixed(stream.options, out);
}

/// GetStream / CreateStream reply: the stream with `topics_count` set to
/// `topics.len()`, then each TopicHeader.
pub fn encode_stream_details(out: &mut Vec<u8>, stream: &StreamInfo<'_>, topics: &[TopicInfo<'_>]) {
    encode_stream(
        out,
        &StreamInfo {
            topics_count: count_u32(topics.len()),
            ..*stream
        },
    );
    for topic in topics {
        encode_topic(out, topic);
    }
}

/// GetStreams reply: concatenated streams, no count prefix.
pub fn encode_streams(out: &mut Vec<u8>, streams: &[StreamInfo<'_>]) {
    for stream in streams {
        encode_stream(out, stream);
    }
}

/// Topic compression code (§4.9). There is no 0: the SDK fails to decode a
/// topic with compression 0, so the type makes it unrepresentable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CompressionAlgorithm {
    #[default]
    None = 1,
    Gzip = 2,
}

/// TopicHeader (§7.2), 50 fixed bytes then name and two option blocks:
/// `[id u32 @0][created_at u64 @4][partitions_count u32 @12][message_expiry u64 @16]
/// [compression u8 @24][max_topic_size u64 @25][size_bytes u64 @33][messages_count u64 @41]
/// [name Name @49][explicit_len u32][explicit options][derived_len u32][derived options]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TopicInfo<'a> {
    pub id: u32,
    pub created_at_us: u64,
    pub partitions_count: u32,
    /// µs; u64::MAX = never (Apache reports unset as u64::MAX).
    pub message_expiry: u64,
    pub compression: CompressionAlgorithm,
    /// bytes; u64::MAX = unlimited.
    pub max_topic_size: u64,
    pub size_bytes: u64,
    pub messages_count: u64,
    pub name: &'a str,
    /// Options the client sent at create.
    pub explicit_options: &'a [OptionEntry<'a>],
    /// Defaults the server filled in.
    pub derived_options: &'a [OptionEntry<'a>],
}

pub fn encode_topic(out: &mut Vec<u8>, topic: &TopicInfo<'_>) {
    out.put_u32(topic.id);
    out.put_u64(topic.created_at_us);
    out.put_u32(topic.partitions_count);
    out.put_u64(topic.message_expiry);
    out.put_u8(topic.compression as u8);
    out.put_u64(topic.max_topic_size);
    out.put_u64(topic.size_bytes);
    out.put_u64(topic.messages_count);
    out.put_name(topic.name);
    encode_option_block_prefixed(topic.explicit_options, out);
    encode_option_block_prefixed(topic.derived_options, out);
}

/// Partition (§7.2), 40 bytes:
/// `[id u32 @0][created_at u64 @4][segments_count u32 @12][current_offset u64 @16]
/// [size_bytes u64 @24][messages_count u64 @32]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub id: u32,
    pub created_at_us: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub size_bytes: u64,
    pub messages_count: u64,
}

pub fn encode_partition(out: &mut Vec<u8>, partition: &PartitionInfo) {
    out.put_u32(partition.id);
    out.put_u64(partition.created_at_us);
    out.put_u32(partition.segments_count);
    out.put_u64(partition.current_offset);
    out.put_u64(partition.size_bytes);
    out.put_u64(partition.messages_count);
}

/// GetTopic / CreateTopic reply: the header with `partitions_count` set to
/// `partitions.len()`, then each partition.
pub fn encode_topic_details(
    out: &mut Vec<u8>,
    topic: &TopicInfo<'_>,
    partitions: &[PartitionInfo],
) {
    encode_topic(
        out,
        &TopicInfo {
            partitions_count: count_u32(partitions.len()),
            ..*topic
        },
    );
    for partition in partitions {
        encode_partition(out, partition);
    }
}

/// GetTopics reply: `[topics_count u32]` then headers (the only list with a
/// count prefix).
pub fn encode_topics(out: &mut Vec<u8>, topics: &[TopicInfo<'_>]) {
    out.put_u32(count_u32(topics.len()));
    for topic in topics {
        encode_topic(out, topic);
    }
}

/// Consumer group header (§7.3):
/// `[id u32][partitions_count u32][members_count u32][name Name]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerGroupInfo<'a> {
    pub id: u32,
    /// The topic's partition count.
    pub partitions_count: u32,
    pub members_count: u32,
    pub name: &'a str,
}

pub fn encode_consumer_group(out: &mut Vec<u8>, group: &ConsumerGroupInfo<'_>) {
    out.put_u32(group.id);
    out.put_u32(group.partitions_count);
    out.put_u32(group.members_count);
    out.put_name(group.name);
}

/// GetConsumerGroups reply: concatenated headers, no count prefix.
pub fn encode_consumer_groups(out: &mut Vec<u8>, groups: &[ConsumerGroupInfo<'_>]) {
    for group in groups {
        encode_consumer_group(out, group);
    }
}

/// One member: `[member_id u32][partitions_count u32][partition_id u32 × n]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupMember<'a> {
    pub id: u32,
    pub partitions: &'a [u32],
}

/// GetConsumerGroup / CreateConsumerGroup reply: header with
/// `members_count = members.len()`, then the members.
pub fn encode_consumer_group_details(
    out: &mut Vec<u8>,
    group: &ConsumerGroupInfo<'_>,
    members: &[GroupMember<'_>],
) {
    encode_consumer_group(
        out,
        &ConsumerGroupInfo {
            members_count: count_u32(members.len()),
            ..*group
        },
    );
    for member in members {
        out.put_u32(member.id);
        out.put_u32(count_u32(member.partitions.len()));
        for partition_id in member.partitions {
            out.put_u32(*partition_id);
        }
    }
}

/// SyncConsumerGroup reply (§6.10), the caller's own assignment:
/// `[generation u64][partitions_count u32][partition_id u32 × n]`. A caller
/// that is not a member gets an empty body instead.
pub fn encode_group_assignment(out: &mut Vec<u8>, generation: u64, partitions: &[u32]) {
    out.put_u64(generation);
    out.put_u32(count_u32(partitions.len()));
    for partition_id in partitions {
        out.put_u32(*partition_id);
    }
}

/// User (§7.4): `[id u32][created_at u64][status u8][username Name][options_len u32][options]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UserInfo<'a> {
    pub id: u32,
    pub created_at_us: u64,
    pub status: super::primitives::UserStatus,
    pub username: &'a str,
    pub options: &'a [OptionEntry<'a>],
}

pub fn encode_user(out: &mut Vec<u8>, user: &UserInfo<'_>) {
    out.put_u32(user.id);
    out.put_u64(user.created_at_us);
    out.put_u8(user.status as u8);
    out.put_name(user.username);
    encode_option_block_prefixed(user.options, out);
}

/// GetUsers reply: concatenated users without permissions, no count prefix.
pub fn encode_users(out: &mut Vec<u8>, users: &[UserInfo<'_>]) {
    for user in users {
        encode_user(out, user);
    }
}

/// GetUser / CreateUser reply: the user then the permissions block
/// (`00 00 00 00` for none, `01 [len u32][Permissions]` for some).
pub fn encode_user_details(
    out: &mut Vec<u8>,
    user: &UserInfo<'_>,
    permissions: Option<&Permissions>,
) {
    encode_user(out, user);
    Permissions::encode_reply_block(permissions, out);
}

/// Transport byte of a client entry (§7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Transport {
    Tcp = 1,
    Quic = 2,
    Http = 3,
    WebSocket = 4,
}

/// Client (§7.5): `[client_id u32][user_id u32][transport u8][address_len u32][address]
/// [consumer_groups_count u32]`; `user_id` u32::MAX = not logged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInfo<'a> {
    pub client_id: u32,
    pub user_id: Option<u32>,
    pub transport: Transport,
    /// `ip:port` of the peer.
    pub address: &'a str,
    pub consumer_groups_count: u32,
}

/// One membership of a client: `[stream_id u32][topic_id u32][group_id u32]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientGroup {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

pub fn encode_client(out: &mut Vec<u8>, client: &ClientInfo<'_>) {
    out.put_u32(client.client_id);
    out.put_u32(client.user_id.unwrap_or(u32::MAX));
    out.put_u8(client.transport as u8);
    put_u32_str(out, client.address);
    out.put_u32(client.consumer_groups_count);
}

/// GetClients reply: concatenated clients, no count prefix.
pub fn encode_clients(out: &mut Vec<u8>, clients: &[ClientInfo<'_>]) {
    for client in clients {
        encode_client(out, client);
    }
}

/// GetMe / GetClient reply: the client with `consumer_groups_count =
/// groups.len()`, then the memberships.
pub fn encode_client_details(out: &mut Vec<u8>, client: &ClientInfo<'_>, groups: &[ClientGroup]) {
    encode_client(
        out,
        &ClientInfo {
            consumer_groups_count: count_u32(groups.len()),
            ..*client
        },
    );
    for group in groups {
        out.put_u32(group.stream_id);
        out.put_u32(group.topic_id);
        out.put_u32(group.group_id);
    }
}

/// One cache-metrics entry of Stats (32 bytes):
/// `[stream u32][topic u32][partition u32][hits u64][misses u64][hit_ratio f32]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheMetric {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f32,
}

/// Stats (§7.6): 108 fixed bytes at the offsets noted on each field, then
/// five `[len u32][UTF-8]` strings, `[server_semver u32]`,
/// `[cache_metrics_count u32]` + 32-byte entries, `[threads_count u32]`,
/// `[free_disk_space u64][total_disk_space u64]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats<'a> {
    /// @0
    pub process_id: u32,
    /// @4, percent
    pub cpu_usage: f32,
    /// @8, percent
    pub total_cpu_usage: f32,
    /// @12
    pub memory_usage_bytes: u64,
    /// @20
    pub total_memory_bytes: u64,
    /// @28
    pub available_memory_bytes: u64,
    /// @36, µs duration
    pub run_time_us: u64,
    /// @44, µs since epoch
    pub start_time_us: u64,
    /// @52
    pub read_bytes: u64,
    /// @60
    pub written_bytes: u64,
    /// @68
    pub messages_size_bytes: u64,
    /// @76
    pub streams_count: u32,
    /// @80
    pub topics_count: u32,
    /// @84
    pub partitions_count: u32,
    /// @88
    pub segments_count: u32,
    /// @92
    pub messages_count: u64,
    /// @100
    pub clients_count: u32,
    /// @104
    pub consumer_groups_count: u32,
    pub hostname: &'a str,
    pub os_name: &'a str,
    pub os_version: &'a str,
    pub kernel_version: &'a str,
    pub server_version: &'a str,
    /// major·10⁶ + minor·10³ + patch, 0 = unknown.
    pub server_semver: u32,
    pub cache_metrics: &'a [CacheMetric],
    pub threads_count: u32,
    pub free_disk_space_bytes: u64,
    pub total_disk_space_bytes: u64,
}

pub fn encode_stats(out: &mut Vec<u8>, stats: &Stats<'_>) {
    out.put_u32(stats.process_id);
    out.put_f32(stats.cpu_usage);
    out.put_f32(stats.total_cpu_usage);
    out.put_u64(stats.memory_usage_bytes);
    out.put_u64(stats.total_memory_bytes);
    out.put_u64(stats.available_memory_bytes);
    out.put_u64(stats.run_time_us);
    out.put_u64(stats.start_time_us);
    out.put_u64(stats.read_bytes);
    out.put_u64(stats.written_bytes);
    out.put_u64(stats.messages_size_bytes);
    out.put_u32(stats.streams_count);
    out.put_u32(stats.topics_count);
    out.put_u32(stats.partitions_count);
    out.put_u32(stats.segments_count);
    out.put_u64(stats.messages_count);
    out.put_u32(stats.clients_count);
    out.put_u32(stats.consumer_groups_count);
    for text in [
        stats.hostname,
        stats.os_name,
        stats.os_version,
        stats.kernel_version,
        stats.server_version,
    ] {
        put_u32_str(out, text);
    }
    out.put_u32(stats.server_semver);
    out.put_u32(count_u32(stats.cache_metrics.len()));
    for metric in stats.cache_metrics {
        out.put_u32(metric.stream_id);
        out.put_u32(metric.topic_id);
        out.put_u32(metric.partition_id);
        out.put_u64(metric.hits);
        out.put_u64(metric.misses);
        out.put_f32(metric.hit_ratio);
    }
    out.put_u32(stats.threads_count);
    out.put_u64(stats.free_disk_space_bytes);
    out.put_u64(stats.total_disk_space_bytes);
}

/// Role byte of a cluster node (§6.1); other values fail SDK decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NodeRole {
    Leader = 0,
    Follower = 1,
}

/// Status byte of a cluster node (§6.1); other values fail SDK decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NodeStatus {
    Healthy = 0,
    Starting = 1,
    Stopping = 2,
    Unreachable = 3,
    Maintenance = 4,
}

/// One roster entry: `[name_len u32][name][ip_len u32][ip][tcp u16][quic u16]
/// [http u16][websocket u16][role u8][status u8]`; port 0 = transport disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterNode<'a> {
    pub name: &'a str,
    /// Must be dialable by the client: the SDK keeps it as a failover target.
    pub ip: &'a str,
    pub tcp_port: u16,
    pub quic_port: u16,
    pub http_port: u16,
    pub websocket_port: u16,
    pub role: NodeRole,
    pub status: NodeStatus,
}

impl<'a> ClusterNode<'a> {
    /// A healthy leader that serves TCP only (the other ports are 0): what
    /// a single iggyd node reports about itself.
    pub fn tcp_leader(name: &'a str, ip: &'a str, tcp_port: u16) -> Self {
        ClusterNode {
            name,
            ip,
            tcp_port,
            quic_port: 0,
            http_port: 0,
            websocket_port: 0,
            role: NodeRole::Leader,
            status: NodeStatus::Healthy,
        }
    }
}

/// GetClusterMetadata reply (code 12): `[name_len u32][name][nodes_count u32]`
/// then the nodes. A single node must report exactly one node, role Leader,
/// status Healthy, or auto-commit polls fail (§5.4).
pub fn encode_cluster_metadata(out: &mut Vec<u8>, cluster_name: &str, nodes: &[ClusterNode<'_>]) {
    put_u32_str(out, cluster_name);
    out.put_u32(count_u32(nodes.len()));
    for node in nodes {
        encode_cluster_node(out, node);
    }
}

/// One node entry, as code 12 lists them and the routing answers of codes
/// 103 and 123 end with: `[name_len u32][name][ip_len u32][ip][tcp u16]
/// [quic u16][http u16][websocket u16][role u8][status u8]`.
pub fn encode_cluster_node(out: &mut Vec<u8>, node: &ClusterNode<'_>) {
    put_u32_str(out, node.name);
    put_u32_str(out, node.ip);
    out.put_u16(node.tcp_port);
    out.put_u16(node.quic_port);
    out.put_u16(node.http_port);
    out.put_u16(node.websocket_port);
    out.put_u8(node.role as u8);
    out.put_u8(node.status as u8);
}

/// Login reply payload (after the result section added by `encode_reply`):
/// `[user_id u32][session u64][server_protocol_version u32][server_version Name]`.
/// The session is non-zero by type because the SDK refuses 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginReply<'a> {
    pub user_id: u32,
    pub session: NonZeroU64,
    pub server_protocol_version: u32,
    pub server_version: &'a str,
}

pub fn encode_login(out: &mut Vec<u8>, login: &LoginReply<'_>) {
    out.put_u32(login.user_id);
    out.put_u64(login.session.get());
    out.put_u32(login.server_protocol_version);
    out.put_name(login.server_version);
}

/// One token of GetPersonalAccessTokens: `[name Name][expiry_at u64 µs]`, 0 = never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersonalAccessTokenInfo<'a> {
    pub name: &'a str,
    pub expiry_at_us: Option<u64>,
}

/// GetPersonalAccessTokens reply: concatenated entries, no count prefix.
pub fn encode_personal_access_tokens(out: &mut Vec<u8>, tokens: &[PersonalAccessTokenInfo<'_>]) {
    for token in tokens {
        out.put_name(token.name);
        out.put_u64(token.expiry_at_us.unwrap_or(0));
    }
}

/// CreatePersonalAccessToken reply: `[token Name]` (the raw token).
pub fn encode_created_token(out: &mut Vec<u8>, token: &str) {
    out.put_name(token);
}

/// Size of the poll reply prefix (§5.3).
pub const POLL_PREFIX_SIZE: usize = 16;

/// PollMessages reply prefix: `[partition_id u32][current_offset u64][messages_count u32]`.
/// The caller appends the batch records; with none, the 16 bytes are the
/// complete (empty) poll, which is never replaced by an empty body.
pub fn encode_poll_prefix(
    out: &mut Vec<u8>,
    partition_id: u32,
    current_offset: u64,
    messages_count: u32,
) {
    out.put_u32(partition_id);
    out.put_u64(current_offset);
    out.put_u32(messages_count);
}

/// One send confirmation (20 bytes): `[stream_id u32][topic_id u32][partition_id u32][base_offset u64]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendConfirmation {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub base_offset: u64,
}

/// SendMessages reply (§5.2, not result-framed): `[count u32]` + entries.
pub fn encode_send_confirmations(out: &mut Vec<u8>, confirmations: &[SendConfirmation]) {
    out.put_u32(count_u32(confirmations.len()));
    for confirmation in confirmations {
        out.put_u32(confirmation.stream_id);
        out.put_u32(confirmation.topic_id);
        out.put_u32(confirmation.partition_id);
        out.put_u64(confirmation.base_offset);
    }
}

/// GetConsumerOffset reply (§6.5, 20 bytes):
/// `[partition_id u32][current_offset u64][stored_offset u64]`; an empty
/// body means "no offset stored".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerOffsetInfo {
    pub partition_id: u32,
    pub current_offset: u64,
    pub stored_offset: u64,
}

pub fn encode_consumer_offset(out: &mut Vec<u8>, offset: &ConsumerOffsetInfo) {
    out.put_u32(offset.partition_id);
    out.put_u64(offset.current_offset);
    out.put_u64(offset.stored_offset);
}

/// One DescribeOptions entry (§6.1 code 13):
/// `[key Name][kind u8][default_len u32][default bytes][desc_len u32][desc UTF-8]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDescription<'a> {
    pub key: &'a str,
    /// Canonical value kind (see `options::ValueKind`).
    pub kind: u8,
    pub default: &'a [u8],
    pub description: &'a str,
}

/// DescribeOptions reply: `[count u32]` then the entries.
pub fn encode_option_descriptions(out: &mut Vec<u8>, descriptions: &[OptionDescription<'_>]) {
    out.put_u32(count_u32(descriptions.len()));
    for description in descriptions {
        out.put_name(description.key);
        out.put_u8(description.kind);
        out.put_u32_prefixed(description.default);
        put_u32_str(out, description.description);
    }
}

#[cfg(test)]
mod tests;
