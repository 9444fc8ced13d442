//! `MetadataStore`: shard 0's owner of the metadata, tying the in-memory
//! [`Metadata`] to its journal and snapshot.
//!
//! Must not: acknowledge a change before it is durable, or keep going after
//! a failed write. `execute` applies a command (validation included), then
//! appends it to the journal and fsyncs; if the append fails the in-memory
//! state is ahead of the disk, so the store is poisoned and every later
//! call fails with `Poisoned` — the caller reports and exits so systemd
//! restarts the daemon, which recovers from what is on disk.
//!
//! Recovery (`open`): load the snapshot (if any), replay journal records
//! with a higher sequence number in order (gaps are errors), truncate a
//! torn tail (reported in [`RecoveryReport`]), fsync the snapshot, the
//! journal and their directory (what was read may have been only in the
//! page cache after a failed fsync, and must not vanish once served), then
//! — if any consumer group still lists members — journal a `ResetMembers`,
//! because no session survives a restart. Every `SNAPSHOT_INTERVAL_COMMANDS` commands the
//! state is snapshotted and the journal truncated; a crash between the two
//! only leaves records the next recovery skips by sequence number.

use std::sync::Arc;

use super::admission::Admission;
use super::command::{Applied, MetadataCommand};
use super::error::MetadataError;
use super::io::MetadataIo;
use super::journal::{self, JOURNAL_FILE, JournalError, JournalRecord, TornTail};
use super::model::Metadata;
use super::snapshot::{SNAPSHOT_FILE, Snapshot, SnapshotError};
use super::view::MetadataView;
use crate::limits::SNAPSHOT_INTERVAL_COMMANDS;
use iggyd_wire::protocol::codes::Status;

/// A persistence failure: fatal for shard 0.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("metadata {operation} of {file} failed: {source}")]
    Io {
        operation: &'static str,
        file: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("metadata journal sequence gap: expected {expected}, found {found}")]
    SequenceGap { expected: u64, found: u64 },
    #[error("metadata journal record {seq} was accepted once but is rejected on replay: {error}")]
    ReplayRejected { seq: u64, error: MetadataError },
    #[error("metadata command could not be encoded: {reason}")]
    Encode { reason: String },
    #[error("metadata store is poisoned by an earlier write failure")]
    Poisoned,
}

/// Why `execute` did not apply a command.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// The command is invalid in the current state: answer the client with
    /// `error.status()`; nothing changed.
    #[error(transparent)]
    Rejected(#[from] MetadataError),
    /// Persistence failed: the store is poisoned; report and exit.
    #[error(transparent)]
    Fatal(#[from] StoreError),
}

impl ExecuteError {
    /// The wire status the requester gets: the rejection's own, or the
    /// generic error for a persistence failure.
    pub fn status(&self) -> Status {
        match self {
            ExecuteError::Rejected(error) => error.status(),
            ExecuteError::Fatal(_) => Status::Error,
        }
    }
}

/// What recovery found and did, for the start-up log and `STATUS=`.
/// The store as [`MetadataStore::export`] gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedStore {
    /// [`Snapshot`]'s encoding.
    pub bytes: Vec<u8>,
    /// The storage id the next partition gets (every partition the
    /// snapshot lists is below it).
    pub next_storage_id: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Sequence number of the loaded snapshot, if there was one.
    pub snapshot_seq: Option<u64>,
    /// Journal records applied on top of it.
    pub replayed: u64,
    /// Journal records already covered by the snapshot.
    pub skipped: u64,
    /// The damaged tail that was cut off, if any.
    pub torn_tail: Option<TornTail>,
    /// Whether stale consumer-group members were cleared.
    pub members_reset: bool,
}

#[derive(Debug)]
pub struct MetadataStore<Io: MetadataIo> {
    io: Io,
    metadata: Metadata,
    /// Sequence number of the last journaled command (0 = none yet).
    last_seq: u64,
    /// Sequence number covered by the current snapshot file.
    snapshot_seq: u64,
    snapshot_interval: u64,
    poisoned: bool,
    /// Bounds checked before a command is journaled.
    admission: Admission,
    /// Encoded size of `metadata` (a snapshot's body), kept after every
    /// change so the admission check costs nothing more.
    state_bytes: usize,
}

fn io_error(
    operation: &'static str,
    file: &'static str,
) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io {
        operation,
        file,
        source,
    }
}

/// The encoded size of a snapshot body of `metadata`.
fn encoded_size(metadata: &Metadata) -> usize {
    serialized_size(metadata)
}

/// Bytes of the postcard encoding of `value`, counted without a buffer
/// (`usize::MAX` if it cannot be encoded, which the caller refuses).
pub(crate) fn serialized_size<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    postcard::serialize_with_flavor::<T, postcard::ser_flavors::Size, usize>(
        value,
        postcard::ser_flavors::Size::default(),
    )
    .unwrap_or(usize::MAX)
}

impl<Io: MetadataIo> MetadataStore<Io> {
    /// Recovers the state from `io` (an empty directory gives empty
    /// metadata) with the default snapshot interval.
    pub fn open(io: Io) -> Result<(Self, RecoveryReport), StoreError> {
        Self::open_with_interval(io, SNAPSHOT_INTERVAL_COMMANDS)
    }

    pub fn open_with_interval(
        mut io: Io,
        snapshot_interval: u64,
    ) -> Result<(Self, RecoveryReport), StoreError> {
        assert!(snapshot_interval > 0);
        let mut report = RecoveryReport::default();
        let (mut metadata, snapshot_seq) = match io
            .read(SNAPSHOT_FILE)
            .map_err(io_error("read", SNAPSHOT_FILE))?
        {
            Some(bytes) => {
                let snapshot = Snapshot::decode(&bytes)?;
                report.snapshot_seq = Some(snapshot.seq);
                (snapshot.metadata, snapshot.seq)
            }
            None => (Metadata::new(), 0),
        };
        let snapshot_found = report.snapshot_seq.is_some();
        let mut last_seq = snapshot_seq;
        let journal = io
            .read(JOURNAL_FILE)
            .map_err(io_error("read", JOURNAL_FILE))?;
        let journal_found = journal.is_some();
        if let Some(bytes) = journal {
            let scan = journal::scan(&bytes)?;
            for record in scan.records {
                if record.seq <= snapshot_seq {
                    report.skipped += 1;
                    continue;
                }
                if record.seq != last_seq + 1 {
                    return Err(StoreError::SequenceGap {
                        expected: last_seq + 1,
                        found: record.seq,
                    });
                }
                metadata
                    .apply(record.command)
                    .map_err(|error| StoreError::ReplayRejected {
                        seq: record.seq,
                        error,
                    })?;
                last_seq = record.seq;
                report.replayed += 1;
            }
            if let Some(torn) = scan.torn_tail {
                tracing::warn!(
                    offset = torn.offset,
                    bytes = torn.bytes,
                    "metadata journal had a torn tail; truncated it (the last change was never acknowledged)"
                );
                io.truncate_durable(JOURNAL_FILE, scan.valid_len)
                    .map_err(io_error("truncate", JOURNAL_FILE))?;
                report.torn_tail = Some(torn);
            }
        }
        // What was read may be only in the page cache (a write whose fsync
        // failed before the restart, or a file whose directory entry was
        // never synced): make it durable before anything is served from it.
        for (found, file) in [
            (snapshot_found, SNAPSHOT_FILE),
            (journal_found, JOURNAL_FILE),
        ] {
            if found {
                io.sync_durable(file).map_err(io_error("sync", file))?;
            }
        }
        let state_bytes = encoded_size(&metadata);
        let mut store = Self {
            io,
            metadata,
            last_seq,
            snapshot_seq,
            snapshot_interval,
            poisoned: false,
            admission: Admission::default(),
            state_bytes,
        };
        if store.has_members() {
            match store.execute(MetadataCommand::ResetMembers) {
                Ok(_) => report.members_reset = true,
                Err(ExecuteError::Fatal(error)) => return Err(error),
                Err(ExecuteError::Rejected(error)) => {
                    return Err(StoreError::ReplayRejected {
                        seq: store.last_seq + 1,
                        error,
                    });
                }
            }
        }
        Ok((store, report))
    }

    fn has_members(&self) -> bool {
        self.metadata
            .streams()
            .flat_map(|stream| stream.topics.values())
            .flat_map(|topic| topic.groups.values())
            .any(|group| !group.members.is_empty())
    }

    /// Validates, applies and durably journals one command.
    pub fn execute(&mut self, command: MetadataCommand) -> Result<Applied, ExecuteError> {
        if self.poisoned {
            return Err(StoreError::Poisoned.into());
        }
        if let Some(applied) = self.metadata.unchanged_by(&command) {
            return Ok(applied);
        }
        let seq = self.last_seq + 1;
        // Measure before encoding: a record the journal loader would refuse
        // is refused here, with a status, before anything is written.
        // The record adds the format byte and the sequence number.
        let record_bytes = serialized_size(&command).saturating_add(9);
        self.admission
            .check(&self.metadata, self.state_bytes, &command, record_bytes)?;
        // Encode before applying (apply consumes the command); an encode
        // failure is a bug, reported without touching the state.
        let record = JournalRecord { seq, command };
        let bytes = record.encode().map_err(|error| StoreError::Encode {
            reason: error.to_string(),
        })?;
        let applied = self.metadata.apply(record.command)?;
        self.state_bytes = encoded_size(&self.metadata);
        if let Err(source) = self.io.append_durable(JOURNAL_FILE, &bytes) {
            self.poisoned = true;
            return Err(StoreError::Io {
                operation: "append",
                file: JOURNAL_FILE,
                source,
            }
            .into());
        }
        self.last_seq = seq;
        if self.last_seq - self.snapshot_seq >= self.snapshot_interval {
            self.snapshot()?;
        }
        Ok(applied)
    }

    /// Writes a snapshot of the current state and cuts the journal.
    pub fn snapshot(&mut self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let snapshot = Snapshot {
            seq: self.last_seq,
            metadata: self.metadata.clone(),
        };
        let bytes = snapshot.encode()?;
        self.keep_snapshot(&bytes)?;
        self.snapshot_seq = self.last_seq;
        Ok(())
    }

    /// Writes `bytes` as the snapshot file, then empties the journal (one
    /// never written is fine); a failure poisons the store.
    fn keep_snapshot(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        let result = self
            .io
            .replace_durable(SNAPSHOT_FILE, bytes)
            .map_err(io_error("replace", SNAPSHOT_FILE))
            .and_then(|()| match self.io.truncate_durable(JOURNAL_FILE, 0) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    Err(io_error("truncate", JOURNAL_FILE)(error))
                }
                _ => Ok(()),
            });
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// Sets the bounds (clamped to what the loaders accept).
    /// The whole state as a snapshot's bytes, at the last change (a
    /// cluster node's metadata group keeps and sends these).
    pub fn export(&self) -> Result<ExportedStore, SnapshotError> {
        let bytes = Snapshot {
            seq: self.last_seq,
            metadata: self.metadata.clone(),
        }
        .encode()?;
        Ok(ExportedStore {
            bytes,
            next_storage_id: self.metadata.next_storage_id(),
        })
    }

    /// Replaces the whole state with the snapshot `bytes` hold (a cluster
    /// node installing its metadata group's snapshot), checked whole first
    /// (`Snapshot::decode`): bytes that do not check change nothing. The
    /// journal starts again after it.
    pub fn replace(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned);
        }
        let snapshot = Snapshot::decode(bytes)?;
        self.keep_snapshot(bytes)?;
        self.metadata = snapshot.metadata;
        self.last_seq = snapshot.seq;
        self.snapshot_seq = snapshot.seq;
        self.state_bytes = encoded_size(&self.metadata);
        Ok(())
    }

    pub fn set_admission(&mut self, admission: Admission) {
        self.admission = admission.clamped();
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The view to send to every shard after a change.
    pub fn publish(&self) -> Arc<MetadataView> {
        self.metadata.publish()
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The I/O backend (tests inject faults through it).
    pub fn io_mut(&mut self) -> &mut Io {
        &mut self.io
    }

    pub fn into_io(self) -> Io {
        self.io
    }
}
