//! The admin socket's protocol v1, shared by its server (the daemon's
//! `control/` module) and its client (`iggy-top`): the serde types of every
//! response line, the shared `Durability` as the snapshot shows it, the
//! bounds both sides rely on, the capped line reader (`line`) and the
//! client's request lines and response decoder (`client`). Parsing a request
//! into an action stays in the daemon, which alone performs actions.
//!
//! A request is one line of JSON carrying `"v":1` and `"op"`; every response
//! line carries `"v":1`, `"ok"`, and either `"type"` with its payload or
//! `"error"` with a human message. The golden files in
//! `daemon/tests/golden/control_v1_*.json` pin the shapes.
//!
//! ```text
//! {"v":1,"op":"hello"}                        -> {"v":1,"ok":true,"type":"hello","version":"0.1.0","pid":123,"uptime_ms":4567}
//! {"v":1,"op":"snapshot"}                     -> {"v":1,"ok":true,"type":"snapshot","snapshot":{...}}
//! {"v":1,"op":"subscribe","interval_ms":1000} -> a snapshot line now, then one per interval
//!   (with "history":true each line also carries the history points it has not sent yet)
//! {"v":1,"op":"history"}                      -> {"v":1,"ok":true,"type":"history","history":{...}}
//! {"v":1,"op":"disconnect_client","client_id":N} -> done (closes that client's connection)
//! {"v":1,"op":"snapshot_file","path":"/abs/x.zip","compression":"deflated","types":["all"]}
//!   -> done once the daemon wrote an `iggy snapshot` ZIP to that new file
//! {"v":1,"op":"set_log_level","level":"debug"}-> {"v":1,"ok":true,"type":"done","message":"..."}
//! {"v":1,"op":"rotate_logs"} / {"v":1,"op":"flush"} -> done
//! {"v":1,"op":"fault","fault":"freeze_shard","shard":N} (debug builds and `fault-injection`)
//! {"v":1,"op":"cluster_status"} / {"v":1,"op":"transfer_leader","to":N} -> see `cluster`
//! {"v":1,"op":"add_node",...} / {"v":1,"op":"remove_node","id":N}     -> see `cluster`
//! anything else                               -> {"v":1,"ok":false,"error":"..."}
//! ```
//!
//! Changing a field here is a one-way door: add fields (readers ignore
//! unknown ones), never rename or retype them within v1. This crate does no
//! I/O beyond the reader it is handed, must not depend on the daemon, and
//! never panics on what a peer sends.

pub mod client;
pub mod cluster;
pub mod history;
pub mod line;

pub use client::{
    decode, disconnect_client_request, hello_request, history_request, set_log_level_request,
    snapshot_file_request, snapshot_request, subscribe_history_request, subscribe_request,
};
pub use history::{History, HistoryWindow, Series};
pub use line::{LineRead, read_line_capped};

use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// A request line longer than this (without its newline) is refused and the
/// connection closed: a client cannot make the daemon buffer without bound.
pub const REQUEST_LINE_BYTES_MAX: usize = 64 * 1024;
/// Bounds of a subscription's `interval_ms`.
pub const SUBSCRIBE_INTERVAL_MS_MIN: u64 = 100;
pub const SUBSCRIBE_INTERVAL_MS_MAX: u64 = 60_000;
/// `interval_ms` when a subscribe request does not carry one.
pub const SUBSCRIBE_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// At most this many events travel in one snapshot.
pub const EVENTS_MAX: usize = 200;
/// Longest `path` a `snapshot_file` request may name (Linux's `PATH_MAX`).
pub const SNAPSHOT_FILE_PATH_BYTES_MAX: usize = 4096;
/// How long the daemon waits for a `snapshot_file` ZIP (the queue of the
/// snapshot worker and the build) before it answers that nothing was
/// written; a client waits a little longer for the answer.
pub const SNAPSHOT_FILE_WAIT_MS_MAX: u64 = 60_000;
/// The `compression` a `snapshot_file` request takes when it names none.
pub const SNAPSHOT_FILE_COMPRESSION_DEFAULT: &str = "deflated";
/// The compressions a `snapshot_file` request may name (the ZIP methods the
/// daemon writes; `iggy snapshot`'s LZMA has no writer).
pub const SNAPSHOT_FILE_COMPRESSIONS: &[&str] = &["stored", "deflated", "bzip2", "zstd", "xz"];
/// The types a `snapshot_file` request may name; `all` is every type but
/// `test`, as `iggy snapshot` expands it, and the default.
pub const SNAPSHOT_FILE_TYPES: &[&str] = &[
    "all",
    "filesystem_overview",
    "process_list",
    "resource_usage",
    "test",
    "server_logs",
    "server_config",
];

/// Answer to `hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: String,
    pub pid: u32,
    pub uptime_ms: u64,
}

/// Everything the console shows, taken at one moment. Counters that the
/// daemon does not collect yet are zero (or empty lists), never estimated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Unix time in milliseconds.
    pub taken_at_ms: u64,
    pub process: ProcessStats,
    pub shards: Vec<ShardStats>,
    pub topics: Vec<TopicStats>,
    /// Recent warnings and errors, newest last, at most `EVENTS_MAX`.
    pub events: Vec<EventRecord>,
    /// Every client connection, at most `CLIENTS_MAX` (added within v1:
    /// absent from older daemons).
    #[serde(default)]
    pub clients: Vec<ClientStats>,
}

/// At most this many client connections travel in one snapshot.
pub const CLIENTS_MAX: usize = 10_000;

/// One client connection as its shard last published it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStats {
    /// The daemon's id of the connection (what `disconnect_client` takes).
    pub client_id: u64,
    /// Peer address, `ip:port`.
    pub address: String,
    /// The logged-in user's name; `None` before login.
    pub user: Option<String>,
    pub tls: bool,
    /// The shard whose loop serves the connection.
    pub shard: u32,
    pub requests_total: u64,
    /// Bytes of frames read from the client and of replies written to it.
    pub bytes_in_total: u64,
    pub bytes_out_total: u64,
    /// The command code of the last request (Iggy's numbering), 0 before
    /// the first.
    pub last_command: u32,
    /// Milliseconds since the last request (or since connect).
    pub idle_ms: u64,
    /// Milliseconds since the connection was accepted.
    pub connected_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub version: String,
    pub pid: u32,
    pub uptime_ms: u64,
    pub rss_bytes: u64,
    /// The filesystem holding `data_dir`: used, free to the daemon, total.
    pub disk_used_bytes: u64,
    pub disk_free_bytes: u64,
    pub disk_total_bytes: u64,
    pub durability_default: Durability,
    /// Bytes of the files under `logging.dir`.
    pub log_dir_bytes: u64,
    pub connections: u64,
    pub numa_nodes: u32,
    /// Physical cores that run a shard.
    pub cores: u32,
    pub watchdog: Watchdog,
    /// Deleted data (streams, topics, partitions, purged data, segments)
    /// still on the disk, summed over the shards' trashes. Absent in
    /// snapshots from daemons that predate it.
    #[serde(default)]
    pub pending_removal: PendingRemoval,
    /// Hostile and broken clients (added within v1: absent from older
    /// daemons, read as zeros).
    #[serde(default)]
    pub security: SecurityStats,
}

/// What the daemon still has to remove from the disk after deletes: it is
/// never served, and is removed in the background; `failing` entries could
/// not be removed yet (retried with backoff; `last_error` says why).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRemoval {
    pub entries: u64,
    pub bytes: u64,
    pub failing: u64,
    pub last_error: Option<String>,
}

/// What clients pressed on and what the daemon refused, since start
/// (`[limits]`), plus the connection caps in force now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityStats {
    /// Connections closed at accept: over `limits.max_connections` or
    /// `limits.max_connections_per_address`.
    pub connections_refused_total: u64,
    /// Logins with a wrong password or token (each one an eviction).
    pub logins_failed_total: u64,
    /// Logins turned away unchecked: the login queue was full (status 58),
    /// or the address's backoff outlasted the login timeout.
    pub logins_refused_total: u64,
    /// Frames over `limits.max_login_frame_size` before login, refused
    /// unread.
    pub frames_refused_total: u64,
    /// Connections closed for `limits.login_timeout` or
    /// `limits.idle_timeout`.
    pub timeouts_total: u64,
    /// Failed TLS handshakes and plaintext/TLS mismatches.
    pub tls_failures_total: u64,
    /// Sessions the server ended: stale consumer-group members and
    /// connections closed after too many failed logins.
    pub evictions_total: u64,
    /// The connection caps in force (they follow the partition count).
    pub max_connections: u64,
    pub max_connections_per_address: u64,
}

/// Per-topic durability: `persisted` acknowledges after fsync; `replicated`
/// (on one node) acknowledges after the write and fsyncs on the flush
/// policy. The daemon's metadata uses this very type, so the variant order
/// is also its on-disk encoding (postcard writes the variant index): append
/// new variants at the end, never reorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    Persisted,
    Replicated,
}

impl Durability {
    /// The word used in JSON, in the `durability` topic option and in the
    /// configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Persisted => "persisted",
            Durability::Replicated => "replicated",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "persisted" => Ok(Durability::Persisted),
            "replicated" => Ok(Durability::Replicated),
            other => Err(format!(
                "durability must be replicated or persisted, not {other:?}"
            )),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watchdog {
    pub enabled: bool,
    pub interval_ms: u64,
    pub state: WatchdogState,
    /// The shard whose heartbeat stopped, when `state` is `stalled`.
    pub stalled_shard: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchdogState {
    Ok,
    Stalled,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    IoUring,
    Epoll,
}

impl Driver {
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::IoUring => "io_uring",
            Driver::Epoll => "epoll",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardStats {
    pub shard: u32,
    /// OS index of the PU the shard is pinned to.
    pub pu: u32,
    /// Logical index of its physical core.
    pub core: u32,
    pub numa_node: Option<u32>,
    pub driver: Driver,
    pub partitions: u64,
    pub connections: u64,
    pub messages_in_per_sec: f64,
    pub messages_out_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub bytes_out_per_sec: f64,
    pub messages_in_total: u64,
    pub messages_out_total: u64,
    pub bytes_in_total: u64,
    pub bytes_out_total: u64,
    /// Messages waiting in the shard's inbox.
    pub queue_depth: u64,
    pub request_latency_us: Percentiles,
    pub queue_wait_us: Percentiles,
    pub fsync_latency_us: Percentiles,
    /// Milliseconds since the shard's heartbeat counter was last seen moving.
    pub heartbeat_age_ms: u64,
    /// CPU time (user + system) of the shard thread.
    pub cpu_time_ms: u64,
    /// Share of one CPU the shard thread used recently (100 = one full core).
    pub cpu_percent: f64,
    /// Sends accepted on this shard for partitions it owns.
    #[serde(default)]
    pub sends_local_total: u64,
    /// Sends accepted on this shard and handed to the owner shard (the
    /// frame's buffer moves over; nothing is copied).
    #[serde(default)]
    pub sends_forwarded_total: u64,
    /// Consumer offsets refused on this shard's partitions because their
    /// partition held `limits.max_consumer_offsets_per_partition`.
    #[serde(default)]
    pub consumer_offsets_refused_total: u64,
    /// Bytes of poll replies this shard's connections hold now (built, not
    /// yet taken by the kernel); bounded by
    /// `limits.max_poll_reply_bytes_in_flight`.
    #[serde(default)]
    pub poll_reply_bytes: u64,
    /// Bytes of the shard's I/O buffers (write tails, read windows) in use,
    /// including windows that poll replies still send from.
    #[serde(default)]
    pub io_buffer_bytes: u64,
    /// Bytes of idle I/O buffers the shard keeps for reuse.
    #[serde(default)]
    pub io_buffer_idle_bytes: u64,
    /// I/O buffers allocated because no idle one fitted (each one's pages
    /// are faulted in and zeroed by the kernel on first use).
    #[serde(default)]
    pub io_buffer_allocations_total: u64,
    /// I/O buffers served from the idle ones.
    #[serde(default)]
    pub io_buffer_reuses_total: u64,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicStats {
    pub stream_id: u32,
    pub stream: String,
    pub topic_id: u32,
    pub topic: String,
    pub messages: u64,
    pub bytes: u64,
    pub partitions: Vec<PartitionStats>,
    pub consumer_groups: Vec<ConsumerGroupStats>,
    /// The topic's size limit (`max_topic_size`); `None` = unlimited
    /// (added within v1).
    #[serde(default)]
    pub max_size_bytes: Option<u64>,
    /// Messages older than this are deleted by retention; `None` = kept
    /// (added within v1).
    #[serde(default)]
    pub message_expiry_us: Option<u64>,
}

impl TopicStats {
    /// The largest lag of any consumer group (0 without groups).
    pub fn lag_max(&self) -> u64 {
        self.consumer_groups
            .iter()
            .map(|group| group.lag)
            .max()
            .unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub partition_id: u32,
    /// The owner shard.
    pub shard: u32,
    pub messages: u64,
    pub bytes: u64,
    pub segments: u64,
    pub current_offset: u64,
    /// Stored consumer offsets (single consumers and groups).
    #[serde(default)]
    pub consumer_offsets: u64,
    /// One past the last fsynced offset (added within v1).
    #[serde(default)]
    pub durable_next_offset: u64,
    /// The partition's segments, oldest first, the active one last (added
    /// within v1).
    #[serde(default)]
    pub segment_list: Vec<SegmentStats>,
}

/// One segment of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentStats {
    pub start_offset: u64,
    /// One past its last offset (`start_offset` when empty).
    pub next_offset: u64,
    pub size_bytes: u64,
    /// Server timestamp (µs since the Unix epoch) of its newest batch; 0
    /// when empty. Its oldest message is newer than the previous segment's
    /// newest.
    pub last_timestamp_us: u64,
    /// Sealed segments are read-only; the last one is active.
    pub sealed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupStats {
    pub group_id: u32,
    pub name: String,
    pub members: u32,
    /// Messages behind the end of the topic, summed over its partitions.
    pub lag: u64,
    /// Per partition: the group's stored offset, its lag and the member it
    /// is assigned to (added within v1).
    #[serde(default)]
    pub partitions: Vec<GroupPartitionStats>,
    /// The members and the partitions each holds (added within v1).
    #[serde(default)]
    pub member_list: Vec<GroupMemberStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPartitionStats {
    pub partition_id: u32,
    /// The group's stored offset; `None` before its first commit.
    pub offset: Option<u64>,
    pub lag: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMemberStats {
    /// The member's key as the daemon knows it (hex).
    pub member: String,
    pub partitions: Vec<u32>,
    /// The connection that joined, as `clients` lists it (`client_id`);
    /// `None` when no shard reported that session in its last report (it
    /// just left, or the daemon predates the field: added within v1).
    #[serde(default)]
    pub client_id: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    pub level: EventLevel,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventLevel {
    Info,
    Warn,
    Error,
}

/// The successful payloads, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Payload {
    Hello(Hello),
    Snapshot {
        snapshot: Box<Snapshot>,
        /// In a subscription that asked for history: the points it has not
        /// sent yet (the whole window on the first line).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        history: Option<Box<HistoryWindow>>,
    },
    History {
        history: Box<HistoryWindow>,
    },
    Done {
        message: String,
    },
    /// `cluster_status` (`cluster`).
    ClusterStatus {
        status: Box<cluster::ClusterStatus>,
    },
    /// `transfer_leader` (`cluster`).
    TransferLeader {
        transfer: cluster::Transfer,
    },
    /// `add_node` and `remove_node` (`cluster`).
    MembershipChange {
        change: cluster::MembershipChange,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Body {
    Payload(Payload),
    Error { error: String },
}

/// One response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(flatten)]
    pub body: Body,
}

impl Response {
    pub fn payload(payload: Payload) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: true,
            body: Body::Payload(payload),
        }
    }

    pub fn error(message: impl Into<String>) -> Response {
        Response {
            v: PROTOCOL_VERSION,
            ok: false,
            body: Body::Error {
                error: message.into(),
            },
        }
    }

    /// The response as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail (no maps with non-string
        // keys, no custom serializers); a failure would be a programmer error.
        let mut line = serde_json::to_vec(self).expect("control response serializes");
        line.push(b'\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_SNAPSHOT: &str =
        include_str!("../../daemon/tests/golden/control_v1_snapshot.json");
    const GOLDEN_HELLO: &str = include_str!("../../daemon/tests/golden/control_v1_hello.json");
    const GOLDEN_HISTORY: &str = include_str!("../../daemon/tests/golden/control_v1_history.json");

    fn round_trip(golden: &str) -> Response {
        let expected: serde_json::Value = serde_json::from_str(golden).unwrap();
        let response: Response = serde_json::from_str(golden).unwrap();
        let line = response.to_line();
        assert_eq!(line.last(), Some(&b'\n'));
        assert!(!line[..line.len() - 1].contains(&b'\n'), "one line");
        let actual: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            actual, expected,
            "serialized form differs from the golden file"
        );
        response
    }

    /// Proves the v1 snapshot, history and hello shapes: the golden files parse into
    /// the typed values and serialize back to exactly the same JSON, so no
    /// field is missing, renamed or retyped; the console's decoder reads
    /// them into the same values.
    #[test]
    fn golden_files_round_trip() {
        let snapshot = round_trip(GOLDEN_SNAPSHOT);
        let Body::Payload(Payload::Snapshot { snapshot, history }) = snapshot.body else {
            panic!("golden snapshot is not a snapshot payload");
        };
        assert_eq!(snapshot.shards.len(), 2);
        assert_eq!(snapshot.shards[1].numa_node, Some(1));
        assert_eq!(snapshot.process.watchdog.state, WatchdogState::Ok);
        assert_eq!(snapshot.topics[0].partitions.len(), 2);
        assert_eq!(snapshot.topics[0].lag_max(), 1500);
        assert_eq!(snapshot.topics[0].partitions[0].segment_list.len(), 4);
        assert!(!snapshot.topics[0].partitions[0].segment_list[3].sealed);
        assert_eq!(
            snapshot.topics[0].consumer_groups[0].partitions[1].lag,
            1000
        );
        assert_eq!(snapshot.clients.len(), 3);
        assert!(history.is_none());
        assert_eq!(
            decode(GOLDEN_SNAPSHOT.as_bytes()),
            Ok(Payload::Snapshot { snapshot, history })
        );
        let history = round_trip(GOLDEN_HISTORY);
        let Body::Payload(Payload::History { history }) = history.body else {
            panic!("golden history is not a history payload");
        };
        assert_eq!(history.second.at_ms.len(), 3);
        assert_eq!(
            history.second.series("partition.1.1.1.messages_in"),
            Some(&[15_000.0, 15_001.0][..]),
            "a series that started late is aligned to the newest point"
        );
        assert_eq!(
            decode(GOLDEN_HISTORY.as_bytes()),
            Ok(Payload::History { history })
        );
        let hello = round_trip(GOLDEN_HELLO);
        assert!(matches!(
            hello.body,
            Body::Payload(Payload::Hello(Hello { pid: 4242, .. }))
        ));
        assert!(matches!(
            decode(GOLDEN_HELLO.as_bytes()),
            Ok(Payload::Hello(Hello { pid: 4242, .. }))
        ));
    }

    /// Proves the exact text of the short lines the protocol documents.
    #[test]
    fn small_lines_have_the_documented_shape() {
        let hello = Response::payload(Payload::Hello(Hello {
            version: "0.1.0".into(),
            pid: 123,
            uptime_ms: 4567,
        }));
        assert_eq!(
            String::from_utf8(hello.to_line()).unwrap(),
            "{\"v\":1,\"ok\":true,\"type\":\"hello\",\"version\":\"0.1.0\",\"pid\":123,\"uptime_ms\":4567}\n"
        );
        let done = Response::payload(Payload::Done {
            message: "flushed".into(),
        });
        assert_eq!(
            String::from_utf8(done.to_line()).unwrap(),
            "{\"v\":1,\"ok\":true,\"type\":\"done\",\"message\":\"flushed\"}\n"
        );
        let error = Response::error("nope");
        assert_eq!(
            String::from_utf8(error.to_line()).unwrap(),
            "{\"v\":1,\"ok\":false,\"error\":\"nope\"}\n"
        );
        let parsed: Response = serde_json::from_slice(&error.to_line()).unwrap();
        assert_eq!(parsed, error);
    }

    /// Proves the durability words: JSON, `as_str` and `FromStr` agree, and
    /// anything else is refused with a message naming both choices.
    #[test]
    fn durability_words() {
        for durability in [Durability::Persisted, Durability::Replicated] {
            let json = serde_json::to_string(&durability).unwrap();
            assert_eq!(json, format!("\"{}\"", durability.as_str()));
            assert_eq!(durability.as_str().parse(), Ok(durability));
        }
        let error = "fsynced".parse::<Durability>().unwrap_err();
        assert!(error.contains("replicated or persisted"), "{error}");
    }
}
