//! Every bound of the storage layer: how large a batch may be, what a
//! partition keeps in memory of its index, how much it reads or buffers at
//! once, how large a consumer-offsets file may be replayed. Values are
//! checked where bytes enter (an append, a length read back from disk).
//!
//! Not here: byte layouts (with the types that encode them) and the wire's
//! own facts (`iggyd_wire::protocol::limits`, which this module may use).
//! The daemon's `limits` module re-exports this one as `limits::storage`.

use iggyd_wire::protocol::limits::FRAME_SIZE_MAX;

/// Largest batch record the storage accepts or believes when reading a
/// length from disk: the wire's frame cap, since a batch arrives in one frame.
pub const BATCH_BYTES_MAX: u64 = FRAME_SIZE_MAX as u64;
/// Every n-th index entry of a segment is kept in memory; a lookup reads at
/// most this many entries from the `.index` file. 1,024 keeps a 1 GiB
/// segment of 1 KiB batches at ~24 KiB of memory.
pub const INDEX_SAMPLE_EVERY: u32 = 1024;
/// Default byte cap of one read (poll) when the caller gives none.
pub const READ_BYTES_MAX_DEFAULT: u64 = 8 * 1024 * 1024;
/// Upper bound on index entries read in one window by the read path.
pub const INDEX_READ_ENTRIES_MAX: u64 = 4096;
/// A partition's tail buffer grows to at least this much while batches are
/// pending (appends coalesce into one write of up to this size; a larger
/// batch gets a buffer of its own size).
pub const TAIL_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// A poll that misses the partition's read window reads this much of the
/// segment at once (direct I/O has no kernel read-ahead): the next polls of
/// a sequential consumer are then served from memory.
pub const READ_WINDOW_BYTES: usize = 4 * 1024 * 1024;
/// A consumer-offsets file larger than this is not replayed (bounded memory
/// on open).
pub const CONSUMER_OFFSETS_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
