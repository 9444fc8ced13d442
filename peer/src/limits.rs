//! Every bound of the peer transport: the configurable ones with their
//! defaults and the check that turns a [`PeerLimits`] into the
//! [`ValidLimits`] that clients and servers take (so a connection never
//! runs on bounds nobody checked), and the fixed sizes of its buffers.
//! (The wire's own facts, the header size and the failure message cap,
//! are in `frame.rs`.)
//!
//! Must not: read configuration files or the environment (the daemon maps
//! its `[cluster]` keys onto these fields and reports the error).

use crate::frame::HEADER_BYTES;
use std::time::Duration;

/// The default largest body: 64 MiB (a Raft snapshot chunk, a batch of
/// entries). The frame limit is this plus the header.
pub const BODY_BYTES_DEFAULT: usize = 64 << 20;

/// No frame limit may exceed this (the length field is a `u32`, and one
/// frame's memory must stay well below a shard's budget).
pub const FRAME_BYTES_CEILING: usize = 1 << 30;

/// No frame limit may be below this: a failure frame (header, code and a
/// 1,024-byte message) and small calls must fit.
pub const FRAME_BYTES_FLOOR: usize = 4 << 10;

/// The most calls one connection may carry at once.
pub const CALLS_IN_FLIGHT_CEILING: usize = 1 << 16;

/// No timeout, interval or back-off may exceed this: a day is already far
/// past any useful value, and deadlines computed from one never overflow.
pub const DURATION_CEILING: Duration = Duration::from_secs(24 * 60 * 60);

/// Bytes asked of the socket per read: a connection buffers at most this
/// much beyond the frame it is receiving.
pub(crate) const READ_CHUNK_BYTES: usize = 64 << 10;

/// Plaintext handed to rustls per step (one TLS record's worth), so rustls
/// never holds more than a step of a large body at once.
pub(crate) const PLAINTEXT_STEP_BYTES: usize = 16 << 10;

/// Encrypted bytes gathered before a socket write; frames already queued
/// are packed into one write up to this.
pub(crate) const FLUSH_BYTES: usize = 256 << 10;

/// A pause after a failed accept (out of descriptors, say), so the accept
/// loop never spins on an error that persists.
pub(crate) const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The transport's bounds. `Default` gives the production values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// The largest frame, header included, in either direction; a call
    /// whose body is larger fails before it is sent, and a peer that
    /// announces a larger frame is disconnected.
    pub frame_bytes_max: usize,
    /// Calls one connection carries at once: a client's calls waiting for
    /// their answer (more wait for a slot, within their timeout), a
    /// server's handlers running (beyond it the server stops reading).
    pub calls_in_flight_max: usize,
    /// The request bodies of those calls, in bytes; at least one largest
    /// frame.
    pub call_bytes_in_flight_max: usize,
    /// Frames waiting for a connection's writer (senders wait when full).
    pub write_queue_frames_max: usize,
    /// Connections one server holds at once; more are refused at accept.
    pub connections_max: usize,
    /// A connection's setup: TCP connect (client), TLS handshake and
    /// hello exchange, together.
    pub handshake_timeout: Duration,
    /// A frame that has begun arriving must keep arriving, and a write
    /// must keep moving: no progress for this long ends the connection.
    pub stall_timeout: Duration,
    /// A connection on which nothing at all arrives for this long ends
    /// (clients ping every `ping_interval`, servers answer).
    pub idle_timeout: Duration,
    /// How often a client pings its server; below `idle_timeout`.
    pub ping_interval: Duration,
    /// The wait after a first failed connection attempt; it doubles with
    /// each further failure up to `reconnect_backoff_max`.
    pub reconnect_backoff_min: Duration,
    pub reconnect_backoff_max: Duration,
    /// On a graceful stop, how long a server lets the calls it already
    /// read finish before it drops them and closes.
    pub stop_grace: Duration,
}

impl Default for PeerLimits {
    fn default() -> PeerLimits {
        PeerLimits {
            frame_bytes_max: BODY_BYTES_DEFAULT + HEADER_BYTES,
            calls_in_flight_max: 1024,
            call_bytes_in_flight_max: 256 << 20,
            write_queue_frames_max: 64,
            connections_max: 1024,
            handshake_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            ping_interval: Duration::from_secs(5),
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(5),
            stop_grace: Duration::from_secs(10),
        }
    }
}

/// A bound outside its accepted range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("peer limit `{key}` = {value}: {expected}")]
pub struct LimitsError {
    pub key: &'static str,
    pub value: String,
    pub expected: String,
}

/// Limits that passed `PeerLimits::validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidLimits(PeerLimits);

impl std::ops::Deref for ValidLimits {
    type Target = PeerLimits;

    fn deref(&self) -> &PeerLimits {
        &self.0
    }
}

impl ValidLimits {
    /// The largest body a frame may carry.
    pub fn body_bytes_max(&self) -> usize {
        self.0.frame_bytes_max - HEADER_BYTES
    }
}

impl PeerLimits {
    pub fn validate(self) -> Result<ValidLimits, LimitsError> {
        let fail = |key: &'static str, value: String, expected: String| {
            Err(LimitsError {
                key,
                value,
                expected,
            })
        };
        if !(FRAME_BYTES_FLOOR..=FRAME_BYTES_CEILING).contains(&self.frame_bytes_max) {
            return fail(
                "frame_bytes_max",
                self.frame_bytes_max.to_string(),
                format!("between {FRAME_BYTES_FLOOR} and {FRAME_BYTES_CEILING}"),
            );
        }
        if !(1..=CALLS_IN_FLIGHT_CEILING).contains(&self.calls_in_flight_max) {
            return fail(
                "calls_in_flight_max",
                self.calls_in_flight_max.to_string(),
                format!("between 1 and {CALLS_IN_FLIGHT_CEILING}"),
            );
        }
        if self.call_bytes_in_flight_max < self.frame_bytes_max {
            return fail(
                "call_bytes_in_flight_max",
                self.call_bytes_in_flight_max.to_string(),
                format!(
                    "at least frame_bytes_max ({}), so one largest call fits",
                    self.frame_bytes_max
                ),
            );
        }
        for (key, value) in [
            ("write_queue_frames_max", self.write_queue_frames_max),
            ("connections_max", self.connections_max),
        ] {
            if value == 0 {
                return fail(key, "0".to_string(), "at least 1".to_string());
            }
        }
        for (key, value) in [
            ("handshake_timeout", self.handshake_timeout),
            ("stall_timeout", self.stall_timeout),
            ("idle_timeout", self.idle_timeout),
            ("ping_interval", self.ping_interval),
            ("reconnect_backoff_min", self.reconnect_backoff_min),
            ("reconnect_backoff_max", self.reconnect_backoff_max),
            ("stop_grace", self.stop_grace),
        ] {
            if value.is_zero() || value > DURATION_CEILING {
                return fail(
                    key,
                    format!("{value:?}"),
                    format!("longer than zero and at most {DURATION_CEILING:?}"),
                );
            }
        }
        if self.ping_interval >= self.idle_timeout {
            return fail(
                "ping_interval",
                format!("{:?}", self.ping_interval),
                format!(
                    "shorter than idle_timeout ({:?}), or healthy idle connections end",
                    self.idle_timeout
                ),
            );
        }
        if self.reconnect_backoff_min > self.reconnect_backoff_max {
            return fail(
                "reconnect_backoff_min",
                format!("{:?}", self.reconnect_backoff_min),
                format!(
                    "at most reconnect_backoff_max ({:?})",
                    self.reconnect_backoff_max
                ),
            );
        }
        Ok(ValidLimits(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the defaults pass and each bound is refused with its key.
    #[test]
    fn defaults_pass_and_bad_values_name_their_key() {
        let limits = PeerLimits::default().validate().unwrap();
        assert_eq!(limits.body_bytes_max(), 64 << 20);
        let key = |change: fn(&mut PeerLimits)| {
            let mut limits = PeerLimits::default();
            change(&mut limits);
            limits.validate().unwrap_err().key
        };
        assert_eq!(key(|l| l.frame_bytes_max = 100), "frame_bytes_max");
        assert_eq!(
            key(|l| l.frame_bytes_max = FRAME_BYTES_CEILING + 1),
            "frame_bytes_max"
        );
        assert_eq!(key(|l| l.calls_in_flight_max = 0), "calls_in_flight_max");
        assert_eq!(
            key(|l| l.call_bytes_in_flight_max = 1 << 20),
            "call_bytes_in_flight_max"
        );
        assert_eq!(
            key(|l| l.write_queue_frames_max = 0),
            "write_queue_frames_max"
        );
        assert_eq!(key(|l| l.connections_max = 0), "connections_max");
        assert_eq!(key(|l| l.stall_timeout = Duration::ZERO), "stall_timeout");
        assert_eq!(
            key(|l| l.reconnect_backoff_max = Duration::MAX),
            "reconnect_backoff_max"
        );
        assert_eq!(
            key(|l| l.stop_grace = DURATION_CEILING + Duration::from_nanos(1)),
            "stop_grace"
        );
        assert_eq!(
            key(|l| l.ping_interval = Duration::from_secs(30)),
            "ping_interval"
        );
        assert_eq!(
            key(|l| l.reconnect_backoff_min = Duration::from_secs(6)),
            "reconnect_backoff_min"
        );
    }
}
