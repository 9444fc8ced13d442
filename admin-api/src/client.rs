//! The client half of protocol v1: the request lines a client sends and the
//! decoder that turns one response line into its payload or into a message
//! for a status line. It builds and parses values only (no I/O) and never
//! panics on what the daemon sends.

use crate::{HistoryWindow, PROTOCOL_VERSION, Payload};

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

/// A subscription whose lines also carry the history points not sent yet.
pub fn subscribe_history_request(interval_ms: u64) -> String {
    format!(
        "{{\"v\":{PROTOCOL_VERSION},\"op\":\"subscribe\",\"interval_ms\":{interval_ms},\"history\":true}}\n"
    )
}

pub fn history_request() -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"history\"}}\n")
}

/// `level` is JSON-escaped, so any text makes one valid line.
pub fn set_log_level_request(level: &str) -> String {
    let level = serde_json::Value::String(level.to_string());
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"set_log_level\",\"level\":{level}}}\n")
}

pub fn disconnect_client_request(client_id: u64) -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"disconnect_client\",\"client_id\":{client_id}}}\n")
}

/// Ask the daemon to write an `iggy snapshot` ZIP to `path`, a new file on
/// the daemon's host. `path` and the names are JSON-escaped, so any text
/// makes one valid line (the daemon judges it).
pub fn snapshot_file_request(path: &str, compression: &str, types: &[&str]) -> String {
    let path = serde_json::Value::from(path);
    let compression = serde_json::Value::from(compression);
    let types = serde_json::Value::from(types.to_vec());
    format!(
        "{{\"v\":{PROTOCOL_VERSION},\"op\":\"snapshot_file\",\"path\":{path},\"compression\":{compression},\"types\":{types}}}\n"
    )
}

/// Decode one response line into its payload; a daemon error, another
/// protocol version or malformed JSON becomes a message for the console's
/// status line. Decoding goes field by field first so the message names what
/// is wrong rather than "did not match any variant".
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
            let history = match value.get_mut("history").map(serde_json::Value::take) {
                None | Some(serde_json::Value::Null) => None,
                Some(history) => Some(Box::new(
                    serde_json::from_value::<HistoryWindow>(history)
                        .map_err(|error| format!("bad history from the daemon: {error}"))?,
                )),
            };
            serde_json::from_value(snapshot)
                .map(|snapshot| Payload::Snapshot {
                    snapshot: Box::new(snapshot),
                    history,
                })
                .map_err(|error| format!("bad snapshot from the daemon: {error}"))
        }
        Some("history") => {
            let history = value
                .get_mut("history")
                .map(serde_json::Value::take)
                .unwrap_or_default();
            serde_json::from_value::<HistoryWindow>(history)
                .map(|history| Payload::History {
                    history: Box::new(history),
                })
                .map_err(|error| format!("bad history from the daemon: {error}"))
        }
        Some("done") => Ok(Payload::Done {
            message: value
                .get("message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }),
        Some("cluster_status") => serde_json::from_value(value)
            .map_err(|error| format!("bad cluster status from the daemon: {error}")),
        Some("transfer_leader") => serde_json::from_value(value)
            .map_err(|error| format!("bad transfer answer from the daemon: {error}")),
        Some("membership_change") => serde_json::from_value(value)
            .map_err(|error| format!("bad membership change answer from the daemon: {error}")),
        other => Err(format!(
            "unexpected response type {other:?} from the daemon"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Proves the request lines are exactly what the daemon parses.
    #[test]
    fn request_lines() {
        assert_eq!(hello_request(), "{\"v\":1,\"op\":\"hello\"}\n");
        assert_eq!(
            subscribe_request(250),
            "{\"v\":1,\"op\":\"subscribe\",\"interval_ms\":250}\n"
        );
        assert_eq!(snapshot_request(), "{\"v\":1,\"op\":\"snapshot\"}\n");
        assert_eq!(
            subscribe_history_request(100),
            "{\"v\":1,\"op\":\"subscribe\",\"interval_ms\":100,\"history\":true}\n"
        );
        assert_eq!(history_request(), "{\"v\":1,\"op\":\"history\"}\n");
        assert_eq!(
            set_log_level_request("in\"fo"),
            "{\"v\":1,\"op\":\"set_log_level\",\"level\":\"in\\\"fo\"}\n"
        );
        assert_eq!(
            disconnect_client_request(7),
            "{\"v\":1,\"op\":\"disconnect_client\",\"client_id\":7}\n"
        );
        let line = snapshot_file_request("/var/log/iggyd/a \"b\".zip", "xz", &["all", "test"]);
        assert_eq!(
            line,
            "{\"v\":1,\"op\":\"snapshot_file\",\"path\":\"/var/log/iggyd/a \\\"b\\\".zip\",\
             \"compression\":\"xz\",\"types\":[\"all\",\"test\"]}\n"
        );
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"v":1,"op":"snapshot_file","path":"/var/log/iggyd/a \"b\".zip",
                "compression":"xz","types":["all","test"]})
        );
    }
}
