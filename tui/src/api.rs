//! Mirror of the daemon's admin-socket types, protocol v1
//! (`daemon/src/control/api.rs`). The console does not link the daemon, so
//! the shapes are repeated here and both crates check themselves against
//! the same golden files (`daemon/tests/golden/control_v1_*.json`).
//!
//! Readers ignore fields they do not know, so a newer v1 daemon that adds
//! fields still works. This module parses lines; it does no I/O and never
//! panics on what the socket sends.

use serde::{Deserialize, Serialize};

pub const PROTOCOL_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: String,
    pub pid: u32,
    pub uptime_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub taken_at_ms: u64,
    pub process: ProcessStats,
    pub shards: Vec<ShardStats>,
    pub topics: Vec<TopicStats>,
    pub events: Vec<EventRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub version: String,
    pub pid: u32,
    pub uptime_ms: u64,
    pub rss_bytes: u64,
    pub disk_used_bytes: u64,
    pub disk_free_bytes: u64,
    pub disk_total_bytes: u64,
    pub durability_default: Durability,
    pub log_dir_bytes: u64,
    pub connections: u64,
    pub numa_nodes: u32,
    pub cores: u32,
    pub watchdog: Watchdog,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    Persisted,
    Replicated,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Persisted => "persisted",
            Durability::Replicated => "replicated",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watchdog {
    pub enabled: bool,
    pub interval_ms: u64,
    pub state: WatchdogState,
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
    pub pu: u32,
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
    pub queue_depth: u64,
    pub request_latency_us: Percentiles,
    pub queue_wait_us: Percentiles,
    pub fsync_latency_us: Percentiles,
    pub heartbeat_age_ms: u64,
    pub cpu_time_ms: u64,
    pub cpu_percent: f64,
}

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
    pub shard: u32,
    pub messages: u64,
    pub bytes: u64,
    pub segments: u64,
    pub current_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupStats {
    pub group_id: u32,
    pub name: String,
    pub members: u32,
    pub lag: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Payload {
    Hello(Hello),
    Snapshot { snapshot: Box<Snapshot> },
    Done { message: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Body {
    Payload(Payload),
    Error { error: String },
}

/// One response line, as the daemon writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(flatten)]
    pub body: Body,
}

/// Request lines (newline included).
pub fn hello_request() -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"hello\"}}\n")
}

pub fn snapshot_request() -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"snapshot\"}}\n")
}

pub fn subscribe_request(interval_ms: u64) -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"subscribe\",\"interval_ms\":{interval_ms}}}\n")
}

/// Decode one response line into its payload; a daemon error, another
/// protocol version or malformed JSON becomes a message for the status
/// line. Decoding goes field by field first so the message names what is
/// wrong rather than "did not match any variant".
pub fn decode(line: &[u8]) -> Result<Payload, String> {
    let mut value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|error| format!("the daemon sent a line that is not JSON: {error}"))?;
    let version = value.get("v").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(PROTOCOL_VERSION)) {
        return Err(format!(
            "the daemon speaks admin protocol {}, this iggy-top speaks v{PROTOCOL_VERSION}",
            value
                .get("v")
                .map_or("(none)".to_string(), ToString::to_string)
        ));
    }
    if value.get("ok").and_then(serde_json::Value::as_bool) != Some(true) {
        let message = value
            .get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("the daemon refused the request without a message");
        return Err(format!("the daemon answered: {message}"));
    }
    match value.get("type").and_then(serde_json::Value::as_str) {
        Some("hello") => serde_json::from_value(value)
            .map(Payload::Hello)
            .map_err(|error| format!("bad hello from the daemon: {error}")),
        Some("snapshot") => {
            let snapshot = value
                .get_mut("snapshot")
                .map(serde_json::Value::take)
                .unwrap_or_default();
            serde_json::from_value(snapshot)
                .map(|snapshot| Payload::Snapshot {
                    snapshot: Box::new(snapshot),
                })
                .map_err(|error| format!("bad snapshot from the daemon: {error}"))
        }
        Some("done") => Ok(Payload::Done {
            message: value
                .get("message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }),
        other => Err(format!(
            "unexpected response type {other:?} from the daemon"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const GOLDEN_SNAPSHOT: &str =
        include_str!("../../daemon/tests/golden/control_v1_snapshot.json");
    const GOLDEN_HELLO: &str = include_str!("../../daemon/tests/golden/control_v1_hello.json");

    /// Proves the mirror matches the daemon's v1 shapes: the golden files
    /// (shared with the daemon's own test) parse and serialize back to the
    /// same JSON, so no field is missing or retyped here.
    #[test]
    fn golden_files_round_trip() {
        for golden in [GOLDEN_SNAPSHOT, GOLDEN_HELLO] {
            let expected: serde_json::Value = serde_json::from_str(golden).unwrap();
            let response: Response = serde_json::from_str(golden).unwrap();
            let actual = serde_json::to_value(&response).unwrap();
            assert_eq!(actual, expected);
        }
        let Ok(Payload::Snapshot { snapshot }) = decode(GOLDEN_SNAPSHOT.as_bytes()) else {
            panic!("golden snapshot decodes");
        };
        assert_eq!(snapshot.shards.len(), 2);
        assert_eq!(snapshot.topics[0].lag_max(), 1500);
        assert!(matches!(
            decode(GOLDEN_HELLO.as_bytes()),
            Ok(Payload::Hello(Hello { pid: 4242, .. }))
        ));
    }

    /// Proves decode errors name the problem: daemon errors, versions,
    /// missing fields, garbage; and that unknown extra fields are ignored.
    #[test]
    fn decode_explains_failures() {
        let error = decode(br#"{"v":1,"ok":false,"error":"permission denied: uid 7"}"#);
        assert_eq!(
            error,
            Err("the daemon answered: permission denied: uid 7".into())
        );
        assert!(
            decode(br#"{"v":2,"ok":true,"type":"hello"}"#)
                .unwrap_err()
                .contains("protocol 2")
        );
        assert!(decode(b"garbage").unwrap_err().contains("not JSON"));
        let missing =
            decode(br#"{"v":1,"ok":true,"type":"snapshot","snapshot":{"taken_at_ms":1}}"#);
        assert!(missing.unwrap_err().contains("missing field"));
        let extra = decode(
            br#"{"v":1,"ok":true,"type":"hello","version":"9","pid":1,"uptime_ms":2,"new":true}"#,
        );
        assert!(extra.is_ok());
        assert!(decode(br#"{"v":1,"ok":true,"type":"mystery"}"#).is_err());
        assert_eq!(
            decode(br#"{"v":1,"ok":true,"type":"done","message":"m"}"#),
            Ok(Payload::Done {
                message: "m".into()
            })
        );
    }

    #[test]
    fn request_lines() {
        assert_eq!(hello_request(), "{\"v\":1,\"op\":\"hello\"}\n");
        assert_eq!(
            subscribe_request(250),
            "{\"v\":1,\"op\":\"subscribe\",\"interval_ms\":250}\n"
        );
        assert_eq!(snapshot_request(), "{\"v\":1,\"op\":\"snapshot\"}\n");
    }
}
