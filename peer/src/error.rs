//! What a call can end with besides its reply ([`PeerError`], the
//! client's boundary) and what a handler answers instead of a reply
//! ([`PeerFailure`]).
//!
//! Failure codes belong to the callers (the Raft layer defines its own:
//! not the leader, unknown group, …), except `0xFF00..=0xFFFF`, which this
//! crate keeps for failures of the transport itself.
//!
//! Must not: decide retries. Whether a call may be sent again is the
//! caller's decision; each variant says what is known about whether the
//! request ran.

use std::time::Duration;

/// The first failure code this crate keeps for itself.
pub const TRANSPORT_CODES: u16 = 0xFF00;

/// The handler's reply was larger than a frame may carry, so the server
/// answered this instead (the handler ran).
pub const CODE_REPLY_TOO_LARGE: u16 = 0xFF01;

/// A handler's answer when it cannot produce a reply: a code the calling
/// layer defines and a short message (cut to 1,024 bytes on the wire).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failure {code}: {message}")]
pub struct PeerFailure {
    pub code: u16,
    pub message: String,
}

/// Why a call returned no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// No connection to the node could be made (connect, TLS, hello, or
    /// the back-off after such a failure): the request was not sent.
    #[error("node {node} is unreachable: {reason}")]
    Unreachable { node: u64, reason: String },
    /// The connection ended while the call was queued or waiting for its
    /// answer: the request may or may not have run. Never sent again
    /// automatically.
    #[error(
        "the connection to node {node} ended before the answer came ({reason}); the call may or \
         may not have run"
    )]
    Disconnected { node: u64, reason: String },
    /// No answer within the call's timeout; an answer that comes later is
    /// discarded. The request may or may not have run.
    #[error("node {node} did not answer within {timeout:?}")]
    TimedOut { node: u64, timeout: Duration },
    /// The node's handler answered with a failure.
    #[error("node {node} answered {failure}")]
    Failed { node: u64, failure: PeerFailure },
    /// The request is larger than a frame may carry; nothing was sent.
    #[error("a request of {bytes} bytes is larger than the {max} a frame carries")]
    TooLarge { bytes: usize, max: usize },
}
