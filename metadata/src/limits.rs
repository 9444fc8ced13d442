//! Every bound of the metadata layer: the caps Apache's server applies
//! (streams, topics, tokens, name and credential lengths), consumer-group
//! sizes, what one journal record and a snapshot may hold, and the ranges
//! of the topic options. Enforced by shard 0 when it admits and applies a
//! command (the codec only checks the wire), and by the journal and
//! snapshot decoders on what they read back.
//!
//! Not here: the wire's own facts (`iggyd_wire::protocol::limits`). The
//! daemon's `limits` module re-exports this one as `limits::metadata`.

// Metadata (`metadata/`): the caps Apache's server applies, enforced by
// shard 0 when it applies a command (the codec only checks the wire).

/// Streams the server holds at most (Apache: 1,048,576); beyond → 1020.
pub const STREAMS_MAX: usize = 1_048_576;
/// Topics per stream at most (Apache: 4,096); beyond → 2021.
pub const TOPICS_PER_STREAM_MAX: usize = 4_096;
/// Partition ids of one topic live in `0..PARTITION_ID_SPACE` (Apache:
/// 1,000,000); a create that would pass it → 3013.
pub const PARTITION_ID_SPACE: u32 = 1_000_000;
/// Usernames: 3..=50 characters (Apache's login rules, §6.2); outside → 43
/// (42 at login). `root.username` accepts the same.
pub const USERNAME_LEN_MIN: usize = 3;
/// See [`USERNAME_LEN_MIN`].
pub const USERNAME_LEN_MAX: usize = 50;
/// Passwords: 3..=100 characters; outside → 44 (42 at login).
/// `root.password` accepts the same (or empty: generate one).
pub const PASSWORD_LEN_MIN: usize = 3;
/// See [`PASSWORD_LEN_MIN`].
pub const PASSWORD_LEN_MAX: usize = 100;
/// Personal access tokens per user (Apache default, §6.3); beyond → 52.
pub const PATS_PER_USER_MAX: usize = 100;
/// Token names: 3..=30 characters (Apache's command validation); outside → 50.
pub const PAT_NAME_LEN_MIN: usize = 3;
/// See [`PAT_NAME_LEN_MIN`].
pub const PAT_NAME_LEN_MAX: usize = 30;
/// Members one consumer group may hold; the SDK gives each client one
/// membership per group, so this bounds per-group memory.
pub const GROUP_MEMBERS_MAX: usize = 65_536;
/// Consumer groups one topic may hold at most. Any user allowed to read a
/// topic may create groups on it, so the admitted number (default
/// [`GROUPS_PER_TOPIC_DEFAULT`]) bounds what one can make metadata hold.
pub const GROUPS_PER_TOPIC_MAX: usize = 65_536;
/// Consumer groups per topic shard 0 admits by default.
pub const GROUPS_PER_TOPIC_DEFAULT: usize = 1_024;
/// Members per consumer group shard 0 admits by default.
pub const GROUP_MEMBERS_DEFAULT: usize = 4_096;
/// Largest metadata record shard 0 admits by default: a permissions block,
/// option set or name list larger than this is refused (InvalidFormat)
/// before it reaches the journal. At most [`RECORD_PAYLOAD_MAX_BYTES`].
pub const METADATA_RECORD_BYTES_DEFAULT: u64 = 1024 * 1024;
/// `limits.max_metadata_record_size` accepts this much at least: room for
/// the largest permissions block of a few streams.
pub const METADATA_RECORD_BYTES_MIN: u64 = 4096;
/// How much one command can grow the encoded state beyond its own record:
/// the partitions it creates from a count (25 bytes each at most, 1,000 per
/// request) and the members and assignments a join adds, with room to
/// spare. Shard 0 refuses a command that could take the state past
/// [`SNAPSHOT_MAX_BYTES`] before applying it.
pub const METADATA_COMMAND_GROWTH_MAX_BYTES: usize = 64 * 1024;
/// Commands between two snapshots. Metadata changes are rare; 1,024 keeps
/// replay at start well under a second while snapshots stay infrequent.
pub const SNAPSHOT_INTERVAL_COMMANDS: u64 = 1_024;
/// Largest journal record payload accepted from disk. A length above it is
/// corruption, not a reason to allocate.
pub const RECORD_PAYLOAD_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Largest snapshot accepted from disk, and the bound on the state shard 0
/// admits (`metadata::admission`): one number, so a snapshot is never
/// written larger than a restart can load.
pub const SNAPSHOT_MAX_BYTES: usize = 1024 * 1024 * 1024;

// Topic options (§4.9), checked when a topic is created or updated.

/// `segment_size`: a multiple of [`SEGMENT_SIZE_ALIGN_BYTES`] in this range.
pub const SEGMENT_SIZE_MIN_BYTES: u64 = 1024 * 1024;
/// See [`SEGMENT_SIZE_MIN_BYTES`].
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Segment sizes are multiples of this.
pub const SEGMENT_SIZE_ALIGN_BYTES: u64 = 512;
/// Default segment size (Apache's default is 1 GiB).
pub const SEGMENT_SIZE_DEFAULT_BYTES: u64 = 1024 * 1024 * 1024;
/// `messages_required_to_save`: 1..=16,777,216.
pub const MESSAGES_REQUIRED_TO_SAVE_MAX: u32 = 16_777_216;
/// Default `messages_required_to_save`.
pub const MESSAGES_REQUIRED_TO_SAVE_DEFAULT: u32 = 1_024;
/// `size_of_messages_required_to_save`: at most 1 GiB.
pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Default `size_of_messages_required_to_save`: 1 MiB.
pub const SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_DEFAULT_BYTES: u64 = 1024 * 1024;
