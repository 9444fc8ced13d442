//! The admin socket's wire types, protocol v1: the only serializable control
//! types of the daemon. A request is one line of JSON carrying `"v":1` and
//! `"op"`; every response line carries `"v":1`, `"ok"`, and either `"type"`
//! with its payload or `"error"` with a human message. `tui/src/api.rs`
//! mirrors these types (the console does not link the daemon); both crates
//! check themselves against the same golden files in `daemon/tests/golden/`.
//!
//! This module parses and builds values only: it does no I/O, and it never
//! panics on input (every malformed request becomes a `RequestError`).
//!
//! ```text
//! {"v":1,"op":"hello"}                        -> {"v":1,"ok":true,"type":"hello","version":"0.1.0","pid":123,"uptime_ms":4567}
//! {"v":1,"op":"snapshot"}                     -> {"v":1,"ok":true,"type":"snapshot","snapshot":{...}}
//! {"v":1,"op":"subscribe","interval_ms":1000} -> a snapshot line now, then one per interval
//! {"v":1,"op":"set_log_level","level":"debug"}-> {"v":1,"ok":true,"type":"done","message":"..."}
//! {"v":1,"op":"rotate_logs"} / {"v":1,"op":"flush"} -> done
//! {"v":1,"op":"fault","fault":"freeze_shard","shard":N} (debug builds and `fault-injection`)
//! anything else                               -> {"v":1,"ok":false,"error":"..."}
//! ```
//!
//! Changing a field here is a one-way door: add fields (readers ignore
//! unknown ones), never rename or retype them within v1.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The protocol version this module speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// A request line longer than this (without its newline) is refused and the
/// connection closed: a client cannot make the daemon buffer without bound.
pub const REQUEST_LINE_BYTES_MAX: usize = 64 * 1024;
/// Bounds of a subscription's `interval_ms`.
pub const SUBSCRIBE_INTERVAL_MS_MIN: u64 = 100;
pub const SUBSCRIBE_INTERVAL_MS_MAX: u64 = 60_000;
/// `interval_ms` when a subscribe request does not carry one.
pub const SUBSCRIBE_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Longest `level` accepted by `set_log_level`.
pub const LOG_LEVEL_BYTES_MAX: usize = 256;

/// Every op name, for the "unknown op" message.
pub const OPS: &[&str] = &[
    "hello",
    "snapshot",
    "subscribe",
    "set_log_level",
    "rotate_logs",
    "flush",
    "fault",
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
}

/// At most this many events travel in one snapshot.
pub const EVENTS_MAX: usize = 200;

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    Persisted,
    Replicated,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupStats {
    pub group_id: u32,
    pub name: String,
    pub members: u32,
    /// Messages behind the end of the topic, summed over its partitions.
    pub lag: u64,
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
    Snapshot { snapshot: Box<Snapshot> },
    Done { message: String },
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

/// An admin action the daemon performs on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A level or an `EnvFilter` directive list.
    SetLogLevel(String),
    RotateLogs,
    Flush,
    /// Stop shard N's pump from making progress (watchdog tests).
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    FreezeShard(usize),
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello,
    Snapshot,
    Subscribe { interval: Duration },
    Action(Action),
}

/// Why a request line was refused. The `Display` text is what the client
/// reads in `"error"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("bad request: not JSON: {0}")]
    NotJson(String),
    #[error("bad request: expected a JSON object like {{\"v\":1,\"op\":\"hello\"}}")]
    NotAnObject,
    #[error("bad request: missing \"v\"; every request carries \"v\":1")]
    MissingVersion,
    #[error("unsupported protocol version {0}: this daemon speaks v1 (\"v\":1)")]
    UnsupportedVersion(String),
    #[error("bad request: missing \"op\" (one of {ops})", ops = OPS.join(", "))]
    MissingOp,
    #[error("unknown op {0:?}: expected one of {ops}", ops = OPS.join(", "))]
    UnknownOp(String),
    #[error("bad request: {op}: {field} {problem}")]
    BadField {
        op: &'static str,
        field: &'static str,
        problem: String,
    },
    #[error(
        "bad request: subscribe: interval_ms {0} is out of range: expected {min} to {max} \
         (100 ms to 60 s)",
        min = SUBSCRIBE_INTERVAL_MS_MIN,
        max = SUBSCRIBE_INTERVAL_MS_MAX
    )]
    IntervalOutOfRange(String),
    #[error("fault injection is not compiled into this build")]
    FaultInjectionNotCompiled,
    #[error("unknown fault {0:?}: expected \"freeze_shard\"")]
    UnknownFault(String),
}

/// Parse one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, RequestError> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|error| RequestError::NotJson(error.to_string()))?;
    let object = value.as_object().ok_or(RequestError::NotAnObject)?;
    match object.get("v") {
        None => return Err(RequestError::MissingVersion),
        Some(version) if version.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
        Some(version) => return Err(RequestError::UnsupportedVersion(version.to_string())),
    }
    let op = match object.get("op") {
        Some(serde_json::Value::String(op)) => op.as_str(),
        _ => return Err(RequestError::MissingOp),
    };
    match op {
        "hello" => Ok(Request::Hello),
        "snapshot" => Ok(Request::Snapshot),
        "subscribe" => {
            let interval_ms = match object.get("interval_ms") {
                None => SUBSCRIBE_INTERVAL_MS_DEFAULT,
                Some(value) => match value.as_u64() {
                    Some(ms)
                        if (SUBSCRIBE_INTERVAL_MS_MIN..=SUBSCRIBE_INTERVAL_MS_MAX)
                            .contains(&ms) =>
                    {
                        ms
                    }
                    Some(_) => return Err(RequestError::IntervalOutOfRange(value.to_string())),
                    None if value.is_number() => {
                        return Err(RequestError::IntervalOutOfRange(value.to_string()));
                    }
                    None => {
                        return Err(RequestError::BadField {
                            op: "subscribe",
                            field: "interval_ms",
                            problem: format!("must be a whole number of milliseconds, not {value}"),
                        });
                    }
                },
            };
            Ok(Request::Subscribe {
                interval: Duration::from_millis(interval_ms),
            })
        }
        "set_log_level" => match object.get("level") {
            Some(serde_json::Value::String(level))
                if !level.trim().is_empty() && level.len() <= LOG_LEVEL_BYTES_MAX =>
            {
                Ok(Request::Action(Action::SetLogLevel(
                    level.trim().to_string(),
                )))
            }
            _ => Err(RequestError::BadField {
                op: "set_log_level",
                field: "level",
                problem: format!(
                    "must be a non-empty string of at most {LOG_LEVEL_BYTES_MAX} bytes, e.g. \
                     \"debug\" or \"info,iggyd::shard=trace\""
                ),
            }),
        },
        "rotate_logs" => Ok(Request::Action(Action::RotateLogs)),
        "flush" => Ok(Request::Action(Action::Flush)),
        "fault" => parse_fault(object),
        other => Err(RequestError::UnknownOp(other.to_string())),
    }
}

#[cfg(any(debug_assertions, feature = "fault-injection"))]
fn parse_fault(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<Request, RequestError> {
    match object.get("fault").and_then(serde_json::Value::as_str) {
        Some("freeze_shard") => {}
        Some(other) => return Err(RequestError::UnknownFault(other.to_string())),
        None => {
            return Err(RequestError::BadField {
                op: "fault",
                field: "fault",
                problem: "is missing; expected \"freeze_shard\"".into(),
            });
        }
    }
    let shard = object
        .get("shard")
        .and_then(serde_json::Value::as_u64)
        .and_then(|shard| usize::try_from(shard).ok())
        .ok_or_else(|| RequestError::BadField {
            op: "fault",
            field: "shard",
            problem: "must be a shard number (0, 1, ...)".into(),
        })?;
    Ok(Request::Action(Action::FreezeShard(shard)))
}

#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
fn parse_fault(
    _object: &serde_json::Map<String, serde_json::Value>,
) -> Result<Request, RequestError> {
    Err(RequestError::FaultInjectionNotCompiled)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN_SNAPSHOT: &str = include_str!("../../tests/golden/control_v1_snapshot.json");
    const GOLDEN_HELLO: &str = include_str!("../../tests/golden/control_v1_hello.json");

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

    /// Proves the v1 snapshot and hello shapes: the golden files parse into
    /// the typed values and serialize back to exactly the same JSON, so no
    /// field is missing, renamed or retyped on either side.
    #[test]
    fn golden_files_round_trip() {
        let snapshot = round_trip(GOLDEN_SNAPSHOT);
        let Body::Payload(Payload::Snapshot { snapshot }) = snapshot.body else {
            panic!("golden snapshot is not a snapshot payload");
        };
        assert_eq!(snapshot.shards.len(), 2);
        assert_eq!(snapshot.shards[1].numa_node, Some(1));
        assert_eq!(snapshot.process.watchdog.state, WatchdogState::Ok);
        assert_eq!(snapshot.topics[0].partitions.len(), 2);
        let hello = round_trip(GOLDEN_HELLO);
        assert!(matches!(
            hello.body,
            Body::Payload(Payload::Hello(Hello { pid: 4242, .. }))
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

    /// Proves every documented request parses, with defaults and bounds.
    #[test]
    fn requests_parse() {
        assert_eq!(
            parse_request(br#"{"v":1,"op":"hello"}"#),
            Ok(Request::Hello)
        );
        assert_eq!(
            parse_request(br#"{"op":"snapshot","v":1}"#),
            Ok(Request::Snapshot)
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"subscribe","interval_ms":250}"#),
            Ok(Request::Subscribe {
                interval: Duration::from_millis(250)
            })
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"subscribe"}"#),
            Ok(Request::Subscribe {
                interval: Duration::from_millis(SUBSCRIBE_INTERVAL_MS_DEFAULT)
            })
        );
        for bound in [SUBSCRIBE_INTERVAL_MS_MIN, SUBSCRIBE_INTERVAL_MS_MAX] {
            let line = format!(r#"{{"v":1,"op":"subscribe","interval_ms":{bound}}}"#);
            assert!(parse_request(line.as_bytes()).is_ok(), "{bound} is allowed");
        }
        assert_eq!(
            parse_request(br#"{"v":1,"op":"set_log_level","level":"debug"}"#),
            Ok(Request::Action(Action::SetLogLevel("debug".into())))
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"rotate_logs"}"#),
            Ok(Request::Action(Action::RotateLogs))
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"flush","extra":"ignored"}"#),
            Ok(Request::Action(Action::Flush))
        );
    }

    /// Proves malformed requests become errors with messages that say what
    /// is wrong and what is expected.
    #[test]
    fn bad_requests_are_explained() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "not JSON"),
            (b"", "not JSON"),
            (b"\xff\xfe", "not JSON"),
            (b"[1,2]", "expected a JSON object"),
            (br#"{"op":"hello"}"#, "missing \"v\""),
            (br#"{"v":2,"op":"hello"}"#, "unsupported protocol version 2"),
            (
                br#"{"v":"1","op":"hello"}"#,
                "unsupported protocol version \"1\"",
            ),
            (br#"{"v":1}"#, "missing \"op\""),
            (br#"{"v":1,"op":7}"#, "missing \"op\""),
            (
                br#"{"v":1,"op":"reboot"}"#,
                "unknown op \"reboot\": expected one of hello",
            ),
            (
                br#"{"v":1,"op":"subscribe","interval_ms":99}"#,
                "interval_ms 99 is out of range",
            ),
            (
                br#"{"v":1,"op":"subscribe","interval_ms":60001}"#,
                "out of range",
            ),
            (
                br#"{"v":1,"op":"subscribe","interval_ms":-5}"#,
                "out of range",
            ),
            (
                br#"{"v":1,"op":"subscribe","interval_ms":"1s"}"#,
                "whole number",
            ),
            (
                br#"{"v":1,"op":"set_log_level"}"#,
                "level must be a non-empty string",
            ),
            (br#"{"v":1,"op":"set_log_level","level":" "}"#, "non-empty"),
        ];
        for (line, needle) in cases {
            let error = parse_request(line).expect_err("must be refused");
            let text = error.to_string();
            assert!(
                text.contains(needle),
                "{:?}: {text:?} lacks {needle:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    /// Proves the fault op exists exactly when fault injection is compiled
    /// in, and is otherwise refused with the documented message.
    #[test]
    fn fault_op_follows_the_build() {
        let parsed = parse_request(br#"{"v":1,"op":"fault","fault":"freeze_shard","shard":1}"#);
        #[cfg(any(debug_assertions, feature = "fault-injection"))]
        {
            assert_eq!(parsed, Ok(Request::Action(Action::FreezeShard(1))));
            assert!(matches!(
                parse_request(br#"{"v":1,"op":"fault","fault":"melt","shard":1}"#),
                Err(RequestError::UnknownFault(_))
            ));
            assert!(parse_request(br#"{"v":1,"op":"fault","fault":"freeze_shard"}"#).is_err());
        }
        #[cfg(not(any(debug_assertions, feature = "fault-injection")))]
        assert_eq!(
            parsed.unwrap_err().to_string(),
            "fault injection is not compiled into this build"
        );
    }
}
