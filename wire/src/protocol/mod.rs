//! The Apache Iggy 0.11.0 TCP wire protocol as a sans-I/O codec: frames in,
//! typed commands out; typed replies in, bytes out.
//!
//! Owns: header layouts, frame size checks, the command/status/operation
//! tables, request decoding and reply encoding. Must not: do I/O, import
//! monoio or storage code, know about sessions or server state, or panic on
//! any input (every read is bounds-checked, arithmetic on input-derived
//! values is checked or saturating). `shared/iggy-tcp-protocol.md`
//! (§ numbers in comments) is the byte-level reference.
//!
//! Reading order: `limits` and `codes` (the numbers), `header` and `frame`
//! (the 256-byte envelope), `reader`, `primitives`, `options`,
//! `permissions` (field encodings), `command` (requests), `reply` (answers).
//! The daemon never encodes requests: the client side lives in the
//! workspace's test kit (`iggyd-testkit`), independent of this decoder.

// Bytes from the network and the disk are never a programmer error: no
// unwrap, expect or unchecked indexing here (tests may allow them).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod codes;
pub mod command;
pub mod error;
pub mod frame;
pub mod header;
pub mod limits;
pub mod options;
pub mod permissions;
pub mod primitives;
pub mod reader;
pub mod reply;

pub use codes::{CommandCode, EvictionReason, Operation, Status, is_result_framed};
pub use command::Command;
pub use error::{WireAction, WireError};
pub use frame::{Frame, decode_frame, frame_len};
pub use header::{EvictionHeader, ReplyHeader, RequestHeader};
