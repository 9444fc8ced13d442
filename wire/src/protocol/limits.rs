//! Protocol limits of the Iggy 0.11.0 wire: frame caps, name lengths,
//! option-block caps and per-request counts, as numbers the decoder enforces.
//!
//! These are facts of the wire (what the official SDKs and the Apache server
//! agree on), not tunables. Every other bound (server-side rules such as
//! username and password lengths, inbox depths, memory budgets) lives in
//! `crate::limits`, which this module must not depend on, so that the codec
//! stays a leaf. The batch record's layout (header and frame sizes, field
//! offsets) is `crate::batch`'s.

/// Size of every frame header in both directions (§2.2).
pub const HEADER_SIZE: usize = 256;

/// Largest accepted frame, header included (§2.9, Apache
/// `message_bus.max_message_size`). Frames above it close the connection;
/// replies must stay at or below it as well.
pub const FRAME_SIZE_MAX: usize = 64 * 1024 * 1024;

/// Largest body of a frame: the frame cap minus the header.
pub const BODY_SIZE_MAX: usize = FRAME_SIZE_MAX - HEADER_SIZE;

/// Names (`[len u8][UTF-8]`) are 1..=255 bytes on the wire (§4.1).
pub const NAME_LEN_MIN: usize = 1;
/// Upper bound of a wire name; a `u8` length cannot say more.
pub const NAME_LEN_MAX: usize = 255;

/// Option blocks: at most this many key/value entries (§4.8).
pub const OPTIONS_ENTRIES_MAX: usize = 1024;
/// Option blocks: at most this many bytes (§4.8).
pub const OPTIONS_BYTES_MAX: usize = 100_000;
/// User headers of one message: at most this many bytes (§4.8).
pub const USER_HEADERS_BYTES_MAX: usize = 100_000;
/// Each TLV key or value is 1..=255 bytes (§4.8), although the length field is a u32.
pub const TLV_VALUE_LEN_MAX: usize = 255;

/// CreatePartitions takes 1..=1000, CreateTopic 0..=1000 partitions (§6.7, §6.8).
pub const PARTITIONS_PER_REQUEST_MAX: u32 = 1000;

/// Protocol 0.11.0 packed as `major<<20 | minor<<10 | patch` (§1.2).
pub const PROTOCOL_VERSION: u32 = 11 << 10;
/// Lowest protocol version accepted at login (§3): any 0.11.x.
pub const PROTOCOL_VERSION_MIN: u32 = PROTOCOL_VERSION;

/// Partition id a poll reply carries when the caller's consumer-group
/// assignment is stale (§5.3): the SDK re-syncs on seeing it.
pub const STALE_ASSIGNMENT_PARTITION_ID: u32 = u32::MAX;

const _: () = assert!(PROTOCOL_VERSION == 0x2C00);
