//! The admin socket's request side, protocol v1: which ops exist, how a
//! request line becomes a `Request` (or a `RequestError` whose text the
//! client reads), and the actions the daemon performs. The response types,
//! the bounds both ends rely on and the capped line reader live in the
//! shared `iggyd-admin-api` crate (re-exported here), which `iggy-top` uses
//! too, so the console never links the daemon and no shape is written
//! twice.
//!
//! This module parses values only: it does no I/O, and it never panics on
//! input (every malformed request becomes a `RequestError`).

use crate::net::snapshot_request::{SnapshotFileError, SnapshotFileRequest};
pub use iggyd_admin_api::*;
use std::path::PathBuf;
use std::time::Duration;

/// Longest `level` accepted by `set_log_level`.
pub const LOG_LEVEL_BYTES_MAX: usize = 256;

/// Every op name, for the "unknown op" message.
pub const OPS: &[&str] = &[
    "hello",
    "snapshot",
    "subscribe",
    "history",
    "set_log_level",
    "rotate_logs",
    "flush",
    "fault",
    "disconnect_client",
    "snapshot_file",
    "cluster_status",
    "transfer_leader",
    "add_node",
    "remove_node",
];

/// An admin action the daemon performs on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A level or an `EnvFilter` directive list.
    SetLogLevel(String),
    RotateLogs,
    Flush,
    /// Close one client connection (by the `client_id` snapshots show).
    DisconnectClient(u64),
    /// Build an `iggy snapshot` ZIP on the snapshot worker and write it to
    /// `path`, a new file (absolute; checked again when written).
    SnapshotFile {
        path: PathBuf,
        request: SnapshotFileRequest,
    },
    /// Stop shard N's pump from making progress (watchdog tests).
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    FreezeShard(usize),
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello,
    Snapshot,
    /// `history`: whether each line also carries the history points this
    /// subscriber has not been sent yet.
    Subscribe {
        interval: Duration,
        history: bool,
    },
    History,
    Action(Action),
    /// `cluster_status` and `transfer_leader` (`iggyd cluster …`).
    Cluster(ClusterOp),
}

/// What `iggyd cluster …` asks of a cluster node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterOp {
    Status,
    /// Hand the leadership of `group` (every group this node leads when
    /// `None`) to node `to`.
    TransferLeader {
        to: u64,
        group: Option<cluster::GroupName>,
    },
    /// Make node `id` a voter of every group (`iggyd cluster add-node`).
    AddNode {
        id: u64,
        address: std::net::SocketAddr,
        replication_address: std::net::SocketAddr,
        name: Option<String>,
    },
    /// Take node `id` out of every group (`iggyd cluster remove-node`).
    RemoveNode {
        id: u64,
    },
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
            let history = match object.get("history") {
                None => false,
                Some(serde_json::Value::Bool(history)) => *history,
                Some(other) => {
                    return Err(RequestError::BadField {
                        op: "subscribe",
                        field: "history",
                        problem: format!("must be true or false, not {other}"),
                    });
                }
            };
            Ok(Request::Subscribe {
                interval: Duration::from_millis(interval_ms),
                history,
            })
        }
        "history" => Ok(Request::History),
        "disconnect_client" => match object.get("client_id").and_then(serde_json::Value::as_u64) {
            Some(client_id) => Ok(Request::Action(Action::DisconnectClient(client_id))),
            None => Err(RequestError::BadField {
                op: "disconnect_client",
                field: "client_id",
                problem: "must be a client id (a whole number, as snapshots show it)".into(),
            }),
        },
        "snapshot_file" => parse_snapshot_file(object),
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
        "cluster_status" => Ok(Request::Cluster(ClusterOp::Status)),
        "transfer_leader" => parse_transfer_leader(object),
        "add_node" => parse_add_node(object),
        "remove_node" => Ok(Request::Cluster(ClusterOp::RemoveNode {
            id: node_id_field(object, "remove_node", "id")?,
        })),
        other => Err(RequestError::UnknownOp(other.to_string())),
    }
}

/// A node id field (1 to `limits::CLUSTER_NODE_ID_MAX`).
fn node_id_field(
    object: &serde_json::Map<String, serde_json::Value>,
    op: &'static str,
    field: &'static str,
) -> Result<u64, RequestError> {
    match object.get(field).and_then(serde_json::Value::as_u64) {
        Some(id) if (1..=crate::limits::CLUSTER_NODE_ID_MAX).contains(&id) => Ok(id),
        _ => Err(RequestError::BadField {
            op,
            field,
            problem: format!(
                "must be a node id (a whole number from 1 to {})",
                crate::limits::CLUSTER_NODE_ID_MAX
            ),
        }),
    }
}

/// `add_node`: `id`, `address` and `replication_address` (`host:port`
/// with an IP address, as `[cluster.nodes]` takes them), `name`
/// (optional, an Iggy name).
fn parse_add_node(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<Request, RequestError> {
    let id = node_id_field(object, "add_node", "id")?;
    let address = |field: &'static str| -> Result<std::net::SocketAddr, RequestError> {
        object
            .get(field)
            .and_then(serde_json::Value::as_str)
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| RequestError::BadField {
                op: "add_node",
                field,
                problem: "must be an IP address and port, like \"10.0.0.4:8090\"".into(),
            })
    };
    let name = match object.get("name") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(name))
            if !name.trim().is_empty()
                && name.chars().count() <= crate::limits::CLUSTER_NODE_NAME_LEN_MAX =>
        {
            Some(name.clone())
        }
        Some(_) => {
            return Err(RequestError::BadField {
                op: "add_node",
                field: "name",
                problem: format!(
                    "must be a name of 1 to {} characters",
                    crate::limits::CLUSTER_NODE_NAME_LEN_MAX
                ),
            });
        }
    };
    Ok(Request::Cluster(ClusterOp::AddNode {
        id,
        address: address("address")?,
        replication_address: address("replication_address")?,
        name,
    }))
}

/// `transfer_leader`: `to` (a node id) and `group` (optional: `metadata`
/// or `<stream>/<topic>/<partition>`).
fn parse_transfer_leader(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<Request, RequestError> {
    let to = match object.get("to").and_then(serde_json::Value::as_u64) {
        Some(to) if to > 0 => to,
        _ => {
            return Err(RequestError::BadField {
                op: "transfer_leader",
                field: "to",
                problem: "must be a node id (a whole number from 1)".into(),
            });
        }
    };
    let group = match object.get("group") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(group)) => Some(cluster::GroupName::parse(group).map_err(
            |problem| RequestError::BadField {
                op: "transfer_leader",
                field: "group",
                problem,
            },
        )?),
        Some(other) => {
            return Err(RequestError::BadField {
                op: "transfer_leader",
                field: "group",
                problem: format!("must be a string, not {other}"),
            });
        }
    };
    Ok(Request::Cluster(ClusterOp::TransferLeader { to, group }))
}

/// `snapshot_file`: `path` (absolute, at most
/// `SNAPSHOT_FILE_PATH_BYTES_MAX` bytes, no NUL), `compression` (a name of
/// `SNAPSHOT_FILE_COMPRESSIONS`, default deflated) and `types` (names of
/// `SNAPSHOT_FILE_TYPES`, default all).
fn parse_snapshot_file(
    object: &serde_json::Map<String, serde_json::Value>,
) -> Result<Request, RequestError> {
    let bad = |field: &'static str, problem: String| RequestError::BadField {
        op: "snapshot_file",
        field,
        problem,
    };
    let path = match object.get("path") {
        Some(serde_json::Value::String(path)) => path,
        Some(other) => return Err(bad("path", format!("must be a string, not {other}"))),
        None => {
            return Err(bad(
                "path",
                "is missing: name the new file to write, an absolute path on the daemon's host"
                    .into(),
            ));
        }
    };
    if path.is_empty() || path.len() > SNAPSHOT_FILE_PATH_BYTES_MAX || path.contains('\0') {
        return Err(bad(
            "path",
            format!("must be 1 to {SNAPSHOT_FILE_PATH_BYTES_MAX} bytes without NUL"),
        ));
    }
    if !path.starts_with('/') {
        return Err(bad(
            "path",
            format!(
                "{path:?} is relative: give an absolute path (the daemon writes it, and its \
                 working directory is not yours)"
            ),
        ));
    }
    let compression = match object.get("compression") {
        None => SNAPSHOT_FILE_COMPRESSION_DEFAULT,
        Some(serde_json::Value::String(name)) => name.as_str(),
        Some(other) => {
            return Err(bad("compression", format!("must be a string, not {other}")));
        }
    };
    let compression_code = match compression {
        "stored" => 1,
        "deflated" => 2,
        "bzip2" => 3,
        "zstd" => 4,
        "lzma" => 5,
        "xz" => 6,
        other => {
            return Err(bad(
                "compression",
                format!(
                    "{other:?} is unknown: expected one of {}",
                    SNAPSHOT_FILE_COMPRESSIONS.join(", ")
                ),
            ));
        }
    };
    let type_codes = match object.get("types") {
        None => vec![100],
        Some(serde_json::Value::Array(types)) => {
            let mut codes = Vec::with_capacity(types.len());
            for value in types {
                codes.push(match value.as_str() {
                    Some("all") => 100,
                    Some("filesystem_overview") => 1,
                    Some("process_list") => 2,
                    Some("resource_usage") => 3,
                    Some("test") => 4,
                    Some("server_logs") => 5,
                    Some("server_config") => 6,
                    _ => {
                        return Err(bad(
                            "types",
                            format!(
                                "{value} is unknown: expected names among {}",
                                SNAPSHOT_FILE_TYPES.join(", ")
                            ),
                        ));
                    }
                });
            }
            codes
        }
        Some(other) => {
            return Err(bad(
                "types",
                format!("must be a list of names, not {other}"),
            ));
        }
    };
    let request = SnapshotFileRequest::parse(compression_code, &type_codes).map_err(|error| {
        let field = match error {
            SnapshotFileError::UnknownCompression(_) | SnapshotFileError::LzmaUnavailable => {
                "compression"
            }
            _ => "types",
        };
        let problem = match error {
            SnapshotFileError::LzmaUnavailable => format!(
                "lzma cannot be written into a ZIP here; use one of {}",
                SNAPSHOT_FILE_COMPRESSIONS.join(", ")
            ),
            SnapshotFileError::NoTypes => "must name at least one type (or \"all\")".into(),
            other => other.to_string(),
        };
        bad(field, problem)
    })?;
    Ok(Request::Action(Action::SnapshotFile {
        path: PathBuf::from(path),
        request,
    }))
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
    use crate::net::snapshot_request::Compression;

    /// Proves the request lines a client builds with the shared crate are
    /// the requests this parser reads them as.
    #[test]
    fn client_request_lines_parse() {
        let parse = |line: String| parse_request(line.trim_end().as_bytes());
        assert_eq!(parse(hello_request()), Ok(Request::Hello));
        assert_eq!(parse(snapshot_request()), Ok(Request::Snapshot));
        assert_eq!(
            parse(subscribe_request(250)),
            Ok(Request::Subscribe {
                interval: Duration::from_millis(250),
                history: false,
            })
        );
        assert_eq!(
            parse(subscribe_history_request(100)),
            Ok(Request::Subscribe {
                interval: Duration::from_millis(100),
                history: true,
            })
        );
        assert_eq!(parse(history_request()), Ok(Request::History));
        assert_eq!(
            parse(disconnect_client_request(1 << 24)),
            Ok(Request::Action(Action::DisconnectClient(1 << 24)))
        );
        assert_eq!(
            parse(set_log_level_request("debug")),
            Ok(Request::Action(Action::SetLogLevel("debug".into())))
        );
        assert_eq!(
            parse(snapshot_file_request(
                "/tmp/s.zip",
                "zstd",
                &["test", "server_config"]
            )),
            Ok(Request::Action(Action::SnapshotFile {
                path: PathBuf::from("/tmp/s.zip"),
                request: SnapshotFileRequest::parse(4, &[4, 6]).unwrap(),
            }))
        );
    }

    /// Proves `snapshot_file` defaults to a deflated ZIP of every type but
    /// `test` (as `iggy snapshot` asks for "all"), takes every compression
    /// the writer has by name, and expands "all" among other names.
    #[test]
    fn snapshot_file_defaults_and_names() {
        let parsed = parse_request(br#"{"v":1,"op":"snapshot_file","path":"/var/log/x.zip"}"#);
        assert_eq!(
            parsed,
            Ok(Request::Action(Action::SnapshotFile {
                path: PathBuf::from("/var/log/x.zip"),
                request: SnapshotFileRequest::parse(2, &[100]).unwrap(),
            }))
        );
        for (code, name) in (1u8..).zip(["stored", "deflated", "bzip2", "zstd"]) {
            let line = snapshot_file_request("/x.zip", name, &["all", "test"]);
            let Ok(Request::Action(Action::SnapshotFile { request, .. })) =
                parse_request(line.trim_end().as_bytes())
            else {
                panic!("{line}");
            };
            assert_eq!(request.compression, Compression::from_code(code).unwrap());
            assert_eq!(request.types.len(), 6, "all and test: {name}");
        }
        assert!(SNAPSHOT_FILE_COMPRESSIONS.iter().all(|name| {
            let line = snapshot_file_request("/x.zip", name, &["test"]);
            parse_request(line.trim_end().as_bytes()).is_ok()
        }));
        assert!(SNAPSHOT_FILE_TYPES.iter().all(|name| {
            let line = snapshot_file_request("/x.zip", "stored", &[name]);
            parse_request(line.trim_end().as_bytes()).is_ok()
        }));
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
                interval: Duration::from_millis(250),
                history: false,
            })
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"subscribe"}"#),
            Ok(Request::Subscribe {
                interval: Duration::from_millis(SUBSCRIBE_INTERVAL_MS_DEFAULT),
                history: false,
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
            (
                br#"{"v":1,"op":"subscribe","history":"yes"}"#,
                "history must be true or false",
            ),
            (
                br#"{"v":1,"op":"disconnect_client","client_id":-1}"#,
                "client_id must be a client id",
            ),
            (
                br#"{"v":1,"op":"snapshot_file"}"#,
                "snapshot_file: path is missing",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"snap.zip"}"#,
                "\"snap.zip\" is relative: give an absolute path",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":""}"#,
                "path must be 1 to 4096 bytes",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/a\u0000b"}"#,
                "without NUL",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":7}"#,
                "path must be a string",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/x","compression":"rar"}"#,
                "\"rar\" is unknown: expected one of stored, deflated, bzip2, zstd, xz",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/x","compression":"lzma"}"#,
                "lzma cannot be written",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/x","types":["cores"]}"#,
                "\"cores\" is unknown: expected names among all,",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/x","types":[]}"#,
                "types must name at least one type",
            ),
            (
                br#"{"v":1,"op":"snapshot_file","path":"/x","types":"all"}"#,
                "types must be a list of names",
            ),
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
