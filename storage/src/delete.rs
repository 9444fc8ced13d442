//! Deleting a partition's data while it stays open: segment deletion (the
//! `DeleteSegments` command and retention) and purge. Both go through the
//! trash (`storage::trash`): the data is renamed out of the partition's
//! directory, both directories are fsynced, and only then does the call
//! return, so an acknowledged deletion is durable; the files are removed
//! later, in the background.
//!
//! * Segment deletion moves the oldest sealed segments (`.log` first: once
//!   it is gone the segment is gone; a `.index` left behind is ignored by
//!   recovery), never the active one. A segment that cannot be moved stops
//!   the deletion there, so what remains is still a contiguous log; the
//!   partition stays usable. A crash midway leaves a prefix deleted.
//! * Purge moves the whole directory to the trash in one rename and
//!   recovers a fresh one in its place (segment 0, no consumer offsets).
//!   A crash before the rename leaves the partition whole, after it the
//!   partition empty (recovery creates the first segment). A failed rename
//!   changes nothing; a failure after it poisons the partition (the owner
//!   restarts) with its in-memory segments untouched, never empty.
//!
//! This file must not decide what to delete (the pump and retention do) and
//! never panics on an I/O error.

use super::StorageError;
use super::io::OpenMode;
use super::io::StorageIo;
use super::partition_log::{DeletedSegments, PartitionLog, open_active};
use super::recovery::{create_segment_files, recover};
use super::segment::Segment;
use super::trash::{DiscardError, Trash};

impl<I: StorageIo> PartitionLog<I> {
    /// The trash label of this partition's data: its directory's name (the
    /// storage id).
    fn trash_label(&self) -> String {
        self.dir
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("partition")
            .to_string()
    }

    /// Moves `segment` to the trash: its `.log` (once it is gone the
    /// segment is gone), then its `.index` (one left behind is ignored by
    /// recovery).
    async fn discard_segment(
        &self,
        segment: &Segment,
        label: &str,
        trash: &mut Trash<I>,
    ) -> Result<(), DiscardError> {
        let log = segment.log_path(&self.dir);
        let log_label = format!("{label}-{:020}.log", segment.start_offset);
        trash.discard(&log, &log_label, segment.size_bytes).await?;
        let index = segment.index_path(&self.dir);
        let index_label = format!("{label}-{:020}.index", segment.start_offset);
        if let Err(error) = trash.discard(&index, &index_label, 0).await {
            tracing::warn!(%error, "segment deleted, its index left behind (ignored by recovery)");
        }
        Ok(())
    }

    /// Deletes up to `count` of the oldest sealed segments (never the active
    /// one) through the trash. Used by retention and DeleteSegments.
    pub async fn delete_oldest_segments(
        &mut self,
        count: usize,
        trash: &mut Trash<I>,
    ) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        let deletable = count.min(self.segments.len() - 1);
        let label = self.trash_label();
        let mut deleted = DeletedSegments::default();
        let mut failure = None;
        for _ in 0..deletable {
            let Some(segment) = self.segments.first() else {
                break;
            };
            if let Err(error) = self.discard_segment(segment, &label, trash).await {
                failure = Some(error);
                break;
            }
            let segment = self.segments.remove(0);
            assert!(!self.segments.is_empty());
            self.forget_window_of(segment.start_offset);
            deleted.segments += 1;
            deleted.messages += segment.message_count();
            deleted.bytes += segment.size_bytes;
        }
        if deleted.segments > 0
            && let Err(error) = trash.make_durable(&self.dir).await
        {
            return Err(self.poison(format!("deleting segments: {error}")));
        }
        match failure {
            None => Ok(deleted),
            Some(DiscardError::NotMoved { path, source }) if deleted.segments == 0 => {
                Err(StorageError::io("move segment to the trash", path, source))
            }
            Some(error) => {
                tracing::warn!(
                    dir = %self.dir.display(),
                    deleted = deleted.segments,
                    %error,
                    "deleted fewer segments than asked"
                );
                Ok(deleted)
            }
        }
    }

    /// Deletes every message and resets the partition to offset 0 (protocol
    /// §8 item 11): the directory goes to the trash and a fresh one takes
    /// its place. Pending batches are dropped with the rest (the epoch's
    /// `purges` changes). The caller re-opens what else lives in the
    /// directory (consumer offsets).
    pub async fn purge(&mut self, trash: &mut Trash<I>) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        let deleted = DeletedSegments {
            segments: self.segments.len(),
            messages: self.written_next_offset() - self.first_offset(),
            bytes: self.segments.iter().map(|segment| segment.size_bytes).sum(),
        };
        match trash
            .discard(
                &self.dir,
                &format!("{}-purged", self.trash_label()),
                deleted.bytes,
            )
            .await
        {
            Ok(_) => {}
            Err(DiscardError::NotMoved { path, source }) => {
                return Err(StorageError::io(
                    "move partition to the trash",
                    path,
                    source,
                ));
            }
            Err(error) => return Err(self.poison(format!("purge: {error}"))),
        }
        // The old data is unreachable from here on: nothing appended before
        // may be acknowledged, and the state must follow before anything
        // else can fail.
        self.tail.drop_pending();
        self.epoch.purges += 1;
        self.forget_reads();
        if let Some(parent) = self.dir.parent()
            && let Err(error) = trash.make_durable(parent).await
        {
            return Err(self.poison(format!("purge: {error}")));
        }
        self.reload_from_disk("purge").await?;
        self.durable_next_offset = self.next_offset;
        self.synced_bytes = self.written_bytes;
        self.synced_messages = self.written_messages;
        Ok(deleted)
    }

    /// Deletes every segment and starts the log again, empty, at
    /// `next_offset` (at or past its end): a replica that installs its
    /// group's snapshot of a point its own log never reached (the
    /// messages before it were deleted by the leader's retention). The
    /// segments go to the trash like retention's, oldest first, then the
    /// new segment is created; the caller records `next_offset` durably
    /// first, so a crash midway leaves a prefix deleted (or no segment at
    /// all, which recovery makes segment 0) that the caller restarts
    /// again. A failure after the first move poisons the log.
    pub async fn restart_at(
        &mut self,
        next_offset: u64,
        trash: &mut Trash<I>,
    ) -> Result<DeletedSegments, StorageError> {
        self.check_writable()?;
        if next_offset < self.next_offset {
            return Err(StorageError::Layout {
                path: self.dir.clone(),
                reason: format!(
                    "a restart at offset {next_offset} would drop messages up to {}",
                    self.next_offset
                ),
            });
        }
        if next_offset == self.next_offset && self.segments.len() == 1 && self.active().is_empty() {
            // Already an empty log starting there.
            return Ok(DeletedSegments::default());
        }
        let label = self.trash_label();
        let mut deleted = DeletedSegments::default();
        for segment in &self.segments {
            if let Err(error) = self.discard_segment(segment, &label, trash).await {
                return Err(match error {
                    DiscardError::NotMoved { path, source } if deleted.segments == 0 => {
                        StorageError::io("move segment to the trash", path, source)
                    }
                    error => self.poison(format!("restart at {next_offset}: {error}")),
                });
            }
            deleted.segments += 1;
            deleted.messages += segment.message_count();
            deleted.bytes += segment.size_bytes;
        }
        // The old data is unreachable from here on.
        self.tail.drop_pending();
        self.epoch.purges += 1;
        self.forget_reads();
        if let Err(error) = create_segment_files(&self.io, &self.dir, next_offset).await {
            return Err(self.poison(format!("restart at {next_offset}: {error}")));
        }
        if let Err(error) = trash.make_durable(&self.dir).await {
            return Err(self.poison(format!("restart at {next_offset}: {error}")));
        }
        self.reload_from_disk("restart").await?;
        self.durable_next_offset = self.next_offset;
        self.synced_bytes = self.written_bytes;
        self.synced_messages = self.written_messages;
        Ok(deleted)
    }

    /// Rebuilds the in-memory state from the partition's files (recovery:
    /// segments, indexes, the active segment's handles and tail) after an
    /// operation changed them under it (purge, truncation). Durability
    /// watermarks are the caller's to set. A failure poisons: the files
    /// changed and the old state no longer describes them.
    pub(super) async fn reload_from_disk(&mut self, what: &str) -> Result<(), StorageError> {
        let recovered = match recover(&self.io, &self.dir, self.config.index_sample_every).await {
            Ok(recovered) => recovered,
            Err(error) => {
                return Err(self.poison(format!("{what}: recovery failed: {error}")));
            }
        };
        let Some(active) = recovered.segments.last() else {
            return Err(self.poison(format!("{what}: recovery returned no segment")));
        };
        let opened = open_active(
            &self.io,
            &self.dir,
            active,
            self.config.access,
            OpenMode::Existing,
        )
        .await;
        let (active_log, active_read, active_index) = match opened {
            Ok(files) => files,
            Err(error) => {
                return Err(self.poison(format!(
                    "{what}: could not open the active segment: {error}"
                )));
            }
        };
        let next_offset = active.next_offset;
        let size_bytes = active.size_bytes;
        self.segments = recovered.segments;
        // The last timestamp is the remaining batches' (a truncated log
        // stamps its next batch as a log that never held the cut ones).
        self.last_timestamp = self
            .segments
            .iter()
            .map(|segment| segment.last_timestamp)
            .max()
            .unwrap_or(0);
        self.active_log = active_log;
        self.active_read = active_read;
        self.active_index = active_index;
        self.next_offset = next_offset;
        self.load_tail(size_bytes).await
    }
}
