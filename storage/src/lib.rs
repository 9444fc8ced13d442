//! Durable partition storage: segment files, their indexes, recovery.
//!
//! This module owns everything a partition keeps on disk and the promise of
//! what survives a crash. It reaches the disk only through [`io::StorageIo`]
//! (monoio files in production, `sim::SimIo` in tests). It must not decide
//! *when* to fsync (the shard's pump does, for group commit), must not parse
//! requests, and never panics on disk content: bytes read back are checked and
//! every defect becomes a typed [`StorageError`].
//!
//! # On-disk layout
//!
//! ```text
//! data_dir/
//!     metadata/                        journal and snapshot (iggyd-metadata)
//!     partitions/<storage_id>/         one partition (layout.rs)
//!         00000000000000000000.log     segment starting at offset 0
//!         00000000000000000000.index
//!         00000000000000004711.log     next segment, first offset 4711
//!         00000000000000004711.index
//!         consumer_offsets.log         (consumer_offsets.rs)
//!     trash/<seq>.<label>              deleted data being removed (trash.rs)
//! ```
//!
//! A partition's directory is named by its storage id, which metadata gives
//! out once and never again (stream, topic and partition ids are reused on
//! the wire; storage ids are not), so a directory belongs to one partition
//! for ever. Deleted data goes *live → trash → gone*: deleting a partition,
//! purging it or deleting segments renames the data into `trash/` and
//! fsyncs both parents before the request is acknowledged; the shard's
//! janitor then removes the files in the background, retrying failures
//! ([`trash`]). Start-up reconciles the tree with metadata before anything
//! is opened ([`layout::reconcile`]): a directory metadata does not list is
//! moved to the trash, never served; the trash is handed to the janitor.
//! Data directories of the earlier layout
//! (`streams/<stream>/topics/<topic>/partitions/<partition>/`, metadata
//! snapshot format 1) are adopted there: each listed partition's directory
//! is moved to its storage id, as a whole, before anything else happens.
//!
//! A segment is named by its first offset, 20 decimal digits, zero padded.
//! The last segment (highest start offset) is the *active* one; all others are
//! *sealed* and never written again.
//!
//! * `.log`: batch records back to back, in the stored wire layout of
//!   [`iggyd_wire::batch`] (256-byte batch header + 48-byte frame headers, XXH3-64
//!   checksums), stamped with the partition id, dense server offsets (the
//!   first message of a partition is offset 0) and the server append time in
//!   µs. A poll reply is a copy of these bytes (only the first and last record
//!   may be sliced to the requested range).
//! * `.index`: one fixed 32-byte [`index::IndexEntry`] per batch, in log
//!   order (relative offset, message count, byte position, batch length,
//!   base timestamp, XXH32 of the entry). The index is derived data: it can
//!   always be rebuilt from the log. In memory a segment keeps only every
//!   [`INDEX_SAMPLE_EVERY`](crate::limits::INDEX_SAMPLE_EVERY)-th entry; a lookup reads one window of entries
//!   from the `.index` file.
//!
//! # Durability contract
//!
//! * [`PartitionLog::append`] takes a batch validated where it was received
//!   ([`iggyd_wire::batch::ValidBatch`]), copies it into the partition's
//!   write-behind tail (an aligned buffer), stamps it there and returns its
//!   offsets. It is **pending**: not readable, lost if the process dies.
//! * [`PartitionLog::write_pending`] writes every pending batch with one
//!   write (in `direct` mode, `O_DIRECT` from the aligned tail: from the
//!   partial last block, which is rewritten whole, to the next block
//!   boundary, zero padded; in `buffered` mode, through the page cache) and
//!   their index entries with one more. When it returns `Ok` the batches
//!   are **written**: readable, and they survive a crash of the process
//!   (`written_offset` moves). A `replicated` acknowledgement waits for
//!   this.
//! * [`PartitionLog::sync`] (or a [`SyncJob`] from `begin_sync`, which can
//!   run in the background while appends go on, at most one background job
//!   at a time) fdatasyncs the active `.log` and `.index`. When it
//!   completes, everything written before it started is **durable** and
//!   `durable_offset` covers it. The pump decides when (group commit) and
//!   acknowledges `persisted` producers only for offsets ≤ `durable_offset`.
//! * Rotation writes what is pending, cuts the direct-I/O padding and seals
//!   the active segment with an fsync before creating the next one (and
//!   fsyncs the directory), so only the active segment can ever hold
//!   unsynced bytes and a sealed segment's length is exact.
//! * A failed write (other than ENOSPC) or a failed fsync **poisons** the
//!   partition: after a failed fsync the kernel may have dropped the dirty
//!   pages, so nothing written since the last good sync can be trusted.
//!   Appends and syncs are refused with [`StorageError::Poisoned`]; the
//!   caller must stop acknowledging and exit so systemd restarts the daemon,
//!   and recovery sorts out the tail.
//! * ENOSPC on a write fails every pending batch (none was acknowledged):
//!   the partial bytes are truncated away, written data is untouched, the
//!   epoch's `rollbacks` count moves so their waiters can tell, the
//!   partition stays readable and later appends succeed once space returns.
//! * Recovery on open checks every segment (sealed ones against their index,
//!   the tail of the active one batch by batch), cuts direct-I/O zero padding
//!   after the last batch (not a torn tail), truncates a torn tail
//!   (incomplete or checksum-failing last batches), rebuilds missing or short
//!   indexes and fsyncs the result, so after `open` everything readable is
//!   durable. A corrupt batch with valid data after it is never truncated:
//!   the partition is [`PartitionState::Quarantined`] — readable up to the
//!   damage, appends refused, nothing deleted.
//! * Sealed segments are trusted on open when their index is clean; a bad
//!   batch found later by a read or by [`PartitionLog::verify`] (a scrub)
//!   quarantines the partition the same way and is returned as
//!   [`StorageError::CorruptBatch`].
//! * Reads see written data, synced or not (never pending data). They are
//!   served from one read window per partition: a large read of the
//!   segment (direct where the log is written direct) or the buffer a write
//!   just put on the disk when a consumer is tailing; a poll reply borrows
//!   whole records from the window instead of copying them. A record read
//!   from the disk is checked against its index entry (header, offsets,
//!   length); its message checksums were verified where it was received,
//!   and recovery's tail scan and the scrub ([`PartitionLog::verify`])
//!   verify them again. Timestamps are made monotone per partition (a clock
//!   stepping back reuses the last timestamp), so lookup by timestamp is a
//!   binary search.
//!
//! # What the pump calls
//!
//! `PartitionLog::open(io, dir, config, clock, pool)` once (its
//! [`RecoveryReport`] says what recovery did); `append(batch)` per producer
//! batch → [`AppendResult`] offsets; `write_pending()` once per round;
//! `sync()` or `begin_sync`/`end_sync` when its group-commit and flush
//! policies say so; `unsynced_bytes()` / `unsynced_messages()` /
//! `written_offset()` / `durable_offset()` to drive them and to release
//! acknowledgements; `read_by_offset[_into]` / `read_by_timestamp` /
//! `read_first` / `read_last` for polls (`current_offset()` for the reply
//! prefix); `delete_oldest_segments` for retention and `purge`, both
//! through the shard's [`trash::Trash`] (`delete.rs`: durable when they
//! return, refused without harm when the data cannot be moved), `stats`,
//! `close` at shutdown. Any error with [`StorageError::is_fatal`] means:
//! stop acknowledging, exit, let systemd restart.

// Bytes from the disk are never a programmer error: no unwrap, expect or
// unchecked indexing outside tests and the test doubles.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod buf;
pub mod consumer_offsets;
mod delete;
pub mod index;
pub mod io;
pub mod layout;
pub mod limits;
pub mod partition_log;
pub mod raft;
pub mod read;
mod read_ahead;
pub mod write;
pub mod recovery;
pub mod segment;
pub mod trash;
mod truncate;
// The test double (also built for other crates' tests with `sim`): a panic
// there fails a test, it never runs in the daemon.
#[cfg(any(test, feature = "sim"))]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a test double: a panic there fails a test"
)]
pub mod sim;

#[cfg(test)]
mod log_tests;
#[cfg(test)]
mod purge_fault_test;
#[cfg(test)]
mod sim_test;
#[cfg(any(test, feature = "sim"))]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "the simulations' seed runner: a panic there fails a test"
)]
pub mod sim_workload;

use std::path::PathBuf;

pub use buf::{AlignedBuf, BufferPool, IO_ALIGN, PoolStats, SharedSlice};
pub use io::{Access, MonoioIo, OpenMode, StorageIo};
pub use partition_log::{
    AppendResult, Clock, DeletedSegments, LogEpoch, PartitionConfig, PartitionLog, PartitionState,
    PartitionStats, SegmentInfo, SyncJob, SystemClock,
};
pub use read::ReadBatches;
pub use recovery::RecoveryReport;

use iggyd_wire::batch::BatchError;

// Storage's bounds (batch size, index sampling, read windows, write
// chunks) are written in `limits`.

/// Size of one `.index` entry.
pub const INDEX_ENTRY_SIZE: usize = 32;
/// Read-ahead used while scanning a log file during recovery.
pub const SCAN_CHUNK_BYTES: u64 = 1024 * 1024;
/// Width of the zero-padded start offset in segment file names.
pub const SEGMENT_NAME_DIGITS: usize = 20;

/// Every storage failure, carrying what an operator needs: path, offset,
/// byte position, expected versus found.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no space left on device writing {path}; the append was rolled back, nothing acknowledged was lost"
    )]
    NoSpace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("partition is poisoned after a failed write or fsync ({reason}); restart to recover")]
    Poisoned { reason: String },
    #[error("partition is quarantined read-only: {reason}")]
    Quarantined { reason: String },
    #[error("invalid batch: {0}")]
    InvalidBatch(#[source] BatchError),
    #[error("batch of {found} bytes exceeds the {max}-byte limit")]
    BatchTooLarge { found: u64, max: u64 },
    #[error(
        "offsets exhausted: a batch of {message_count} messages at offset {next_offset} would run past the largest offset"
    )]
    OffsetsExhausted {
        next_offset: u64,
        message_count: u32,
    },
    #[error("corrupt batch in {path} at byte {position} (expected offset {offset}): {source}")]
    CorruptBatch {
        path: PathBuf,
        position: u64,
        offset: u64,
        #[source]
        source: BatchError,
    },
    #[error("corrupt batch in {path} at byte {position}: expected {expected}, found {found}")]
    BatchMismatch {
        path: PathBuf,
        position: u64,
        expected: String,
        found: String,
    },
    #[error("corrupt index {path} entry {entry}: {reason}")]
    CorruptIndex {
        path: PathBuf,
        entry: u64,
        reason: String,
    },
    #[error("partition directory {path}: {reason}")]
    Layout { path: PathBuf, reason: String },
    /// Not a failure: the read needs bytes a disk read now in flight will
    /// bring (only while reads park; see `PartitionLog::set_park_reads`).
    #[error("a read of the log is in flight")]
    ReadInFlight,
}

impl StorageError {
    /// True when the caller must stop acknowledging and exit (so systemd
    /// restarts the daemon and recovery runs).
    pub fn is_fatal(&self) -> bool {
        matches!(self, StorageError::Poisoned { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// True for ENOSPC (and EDQUOT, which behaves the same for us).
pub(crate) fn is_no_space(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT)
    ) || error.kind() == std::io::ErrorKind::StorageFull
        || error.kind() == std::io::ErrorKind::QuotaExceeded
}
