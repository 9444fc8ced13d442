//! `WireError`: everything that can be wrong with bytes a client sent, and
//! what the server must do about it (reply with a status, evict, or close).
//!
//! Each variant carries what an operator needs to understand a bad frame
//! (field, body offset, expected versus found). The decision "which status
//! code" is made here, once, from the table in `codes.rs`; callers never
//! invent status codes for decode failures.

use super::codes::{EvictionReason, Status};

/// What the connection must do after a [`WireError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireAction {
    /// Answer the request with this status and an empty body.
    Reply { status: Status },
    /// Answer with an eviction frame carrying this reason (§2.6); the
    /// connection may stay open.
    Evict { reason: EvictionReason },
    /// Close the connection without a reply: the byte stream cannot be
    /// trusted to be in sync any more (§2.9).
    Close,
}

/// A frame or request body that the codec refuses.
///
/// Offsets are relative to the start of the request body unless the variant
/// says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Header `size` outside `256..=64 MiB` (§2.9).
    #[error("frame size {size} outside 256..={max}", max = super::limits::FRAME_SIZE_MAX)]
    FrameSize { size: u32 },
    /// Header command byte is not 5 (`Request`).
    #[error("header command byte is {found}, expected 5 (Request)")]
    NotARequest { found: u8 },
    /// Operation byte that no client sends (§2.4).
    #[error("unknown operation byte {operation}")]
    UnknownOperation { operation: u8 },
    /// A field needs more bytes than the body has left.
    #[error("truncated {what} at offset {offset}: needed {needed} bytes, {available} left")]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// The request decoded but bytes remain after it.
    #[error("{remaining} trailing bytes after {what} at offset {offset}")]
    TrailingBytes {
        what: &'static str,
        offset: usize,
        remaining: usize,
    },
    /// A field has a value outside its domain (bad kind byte, zero-length
    /// name, invalid UTF-8, non-boolean flag, length mismatch...).
    #[error("malformed {what} at offset {offset}: {reason}")]
    Malformed {
        what: &'static str,
        offset: usize,
        reason: &'static str,
    },
    /// Non-zero `request_checksum` that does not match XXH3-64 of the body.
    #[error(
        "request checksum mismatch: header has {stamped:#034x}, body hashes to {computed:#034x}"
    )]
    ChecksumMismatch { stamped: u128, computed: u128 },
    /// `NonReplicated` request with a code this protocol does not know.
    #[error("unknown command code {code}")]
    UnknownCommand { code: u32 },
    /// A replicated command's code sent as `NonReplicated` (§8 item 8).
    #[error("command code {code} must be sent as its replicated operation, not as NonReplicated")]
    ReplicatedCodeAsNonReplicated { code: u32 },
    /// Legacy login codes 38/44 from pre-0.11 clients (§6.2).
    #[error("legacy login code {code} is not part of protocol 0.11")]
    LegacyLogin { code: u32 },
    /// Register body whose version prefix or credentials do not decode, or
    /// a Register header with non-zero request/session.
    #[error("malformed login: {reason}")]
    MalformedLogin { reason: &'static str },
    /// Register from a client speaking another protocol version.
    #[error("incompatible client protocol version {version:#x}, server speaks {server:#x}", server = super::limits::PROTOCOL_VERSION)]
    IncompatibleProtocol { version: u32 },
    /// Option block beyond 1024 entries or 100,000 bytes.
    #[error("option block too large: {entries} entries, {bytes} bytes")]
    OptionsTooLarge { entries: usize, bytes: usize },
    /// Option key that is not a UTF-8 String TLV.
    #[error("unsupported option key at offset {offset}: {reason}")]
    UnsupportedOptionKey { offset: usize, reason: &'static str },
    /// The same option key twice in one block.
    #[error("duplicate option key {key:?}")]
    DuplicateOptionKey { key: String },
    /// A message's user headers beyond 100,000 bytes.
    #[error("user headers of {bytes} bytes exceed the limit")]
    UserHeadersTooLarge { bytes: usize },
    /// User status byte other than 1 (active) or 2 (inactive).
    #[error("invalid user status {value}")]
    InvalidUserStatus { value: u8 },
    /// Partition count outside what one request may create (§6.7, §6.8).
    #[error("partitions count {count} outside {min}..={max}")]
    PartitionsCount { count: u32, min: u32, max: u32 },
    /// A reply body that would exceed the 64 MiB frame cap.
    #[error("reply of {size} bytes exceeds the frame cap")]
    ReplyTooLarge { size: usize },
}

impl WireError {
    /// What the connection does about this error.
    pub fn action(&self) -> WireAction {
        let status = match self {
            Self::FrameSize { .. } | Self::NotARequest { .. } | Self::UnknownOperation { .. } => {
                return WireAction::Close;
            }
            Self::LegacyLogin { .. } | Self::MalformedLogin { .. } => {
                return WireAction::Evict {
                    reason: EvictionReason::MalformedLogin,
                };
            }
            Self::IncompatibleProtocol { .. } => {
                return WireAction::Evict {
                    reason: EvictionReason::IncompatibleProtocol,
                };
            }
            // §9: malformed bodies, unknown codes and send framing errors are
            // all status 3 on the Apache server.
            Self::Truncated { .. }
            | Self::TrailingBytes { .. }
            | Self::Malformed { .. }
            | Self::UnknownCommand { .. } => Status::InvalidCommand,
            Self::ChecksumMismatch { .. } => Status::InvalidFormat,
            Self::ReplicatedCodeAsNonReplicated { .. } => Status::FeatureUnavailable,
            Self::OptionsTooLarge { .. } => Status::OptionsBlockTooLarge,
            Self::UnsupportedOptionKey { .. } => Status::UnsupportedOptionKey,
            Self::DuplicateOptionKey { .. } => Status::InvalidOptionValue,
            Self::InvalidUserStatus { .. } => Status::InvalidUserStatus,
            Self::UserHeadersTooLarge { .. } => Status::TooBigUserHeaders,
            Self::PartitionsCount { .. } => Status::TooManyPartitions,
            Self::ReplyTooLarge { .. } => Status::Error,
        };
        WireAction::Reply { status }
    }

    /// The status to reply with, or `None` when the connection must evict
    /// or close instead (see [`WireError::action`]).
    pub fn status(&self) -> Option<Status> {
        match self.action() {
            WireAction::Reply { status } => Some(status),
            WireAction::Evict { .. } | WireAction::Close => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the error -> action table: framing errors close, login errors
    // evict with the §2.6 reason, everything else replies with its code.
    #[test]
    fn actions_match_reference() {
        let close = [
            WireError::FrameSize { size: 0 },
            WireError::NotARequest { found: 8 },
            WireError::UnknownOperation { operation: 0 },
        ];
        for error in close {
            assert_eq!(error.action(), WireAction::Close);
            assert_eq!(error.status(), None);
        }
        assert_eq!(
            WireError::LegacyLogin { code: 38 }.action(),
            WireAction::Evict {
                reason: EvictionReason::MalformedLogin
            }
        );
        assert_eq!(
            WireError::IncompatibleProtocol { version: 0 }.action(),
            WireAction::Evict {
                reason: EvictionReason::IncompatibleProtocol
            }
        );
        let replies = [
            (
                WireError::Truncated {
                    what: "x",
                    offset: 0,
                    needed: 1,
                    available: 0,
                },
                3,
            ),
            (
                WireError::TrailingBytes {
                    what: "x",
                    offset: 0,
                    remaining: 1,
                },
                3,
            ),
            (
                WireError::Malformed {
                    what: "x",
                    offset: 0,
                    reason: "r",
                },
                3,
            ),
            (WireError::UnknownCommand { code: 7 }, 3),
            (
                WireError::ChecksumMismatch {
                    stamped: 1,
                    computed: 2,
                },
                4,
            ),
            (WireError::ReplicatedCodeAsNonReplicated { code: 202 }, 5),
            (
                WireError::OptionsTooLarge {
                    entries: 0,
                    bytes: 0,
                },
                4043,
            ),
            (
                WireError::UnsupportedOptionKey {
                    offset: 0,
                    reason: "r",
                },
                4041,
            ),
            (WireError::DuplicateOptionKey { key: "k".into() }, 4042),
            (WireError::UserHeadersTooLarge { bytes: 0 }, 4017),
            (WireError::InvalidUserStatus { value: 0 }, 45),
            (
                WireError::PartitionsCount {
                    count: 0,
                    min: 1,
                    max: 1000,
                },
                2015,
            ),
        ];
        for (error, status) in replies {
            assert_eq!(error.status().map(Status::code), Some(status), "{error}");
        }
    }
}
