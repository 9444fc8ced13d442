//! Cutting a partition's log back to an offset: what a Raft follower does
//! with an uncommitted tail its new leader does not have (`truncate_from`),
//! and the replica-side append that keeps the leader's stamp on every batch
//! (`append_replica`; a timestamp never goes back), so the replicas' logs
//! are the same bytes.
//!
//! Truncation writes what is pending, removes the segments that start at or
//! after the offset (newest first, each removal made durable in the
//! directory before the next), cuts the segment holding the offset at the
//! batch that starts there (the `.log` at its position, the `.index` at its
//! entry), fsyncs both, and rebuilds the in-memory state from the files. A
//! crash midway leaves a longer log than asked for, never a shorter one or
//! one with a hole: the caller (Raft) truncates again.
//!
//! Must not: remove anything below the offset, cut inside a batch, or run
//! while a background fsync of the active files is in flight.

use super::INDEX_ENTRY_SIZE;
use super::StorageError;
use super::index::IndexEntry;
use super::io::{OpenMode, StorageIo};
use super::partition_log::{AppendResult, PartitionLog};
use iggyd_wire::batch::{BatchHeader, ValidBatch};

impl<I: StorageIo> PartitionLog<I> {
    /// Removes every message from `offset` on (`offset` a batch boundary of
    /// the log, at most its next offset). Pending batches are written
    /// first; the epoch's `rollbacks` changes, so nothing waiting on the
    /// removed batches is acknowledged. A failure after the files started
    /// to change poisons the partition.
    pub async fn truncate_from(&mut self, offset: u64) -> Result<(), StorageError> {
        self.check_writable()?;
        self.write_pending().await?;
        if offset >= self.next_offset {
            return Ok(());
        }
        if offset < self.first_offset() {
            return Err(StorageError::Layout {
                path: self.dir.clone(),
                reason: format!(
                    "a truncation at offset {offset} below the first stored offset {}",
                    self.first_offset()
                ),
            });
        }
        if self.background_sync {
            return Err(StorageError::Layout {
                path: self.dir.clone(),
                reason: "a truncation while a background sync is in flight".to_string(),
            });
        }
        // Where the cut falls: the segment holding `offset` (the last one
        // starting at or before it), and the batch starting there.
        let holding = self
            .segments
            .iter()
            .rposition(|segment| segment.start_offset <= offset)
            .unwrap_or(0);
        let (cut_entry, cut_at) = self.batch_starting_at(holding, offset).await?;
        let durable = self.durable_next_offset.min(offset);
        // Newest first, so a crash leaves a contiguous (longer) log.
        for segment in self.segments.iter().skip(holding + 1).rev() {
            for path in [segment.index_path(&self.dir), segment.log_path(&self.dir)] {
                if let Err(source) = self.io.remove_file(&path).await {
                    return Err(self.poison(format!(
                        "truncation could not remove {}: {source}",
                        path.display()
                    )));
                }
            }
            if let Err(source) = self.io.sync_dir(&self.dir).await {
                return Err(
                    self.poison(format!("truncation could not sync the directory: {source}"))
                );
            }
        }
        let segment = self.segment_at(holding)?;
        let (log_path, index_path) = (segment.log_path(&self.dir), segment.index_path(&self.dir));
        let cut = async {
            let log = self.io.open(&log_path, OpenMode::Existing).await?;
            self.io.truncate(&log, cut_at).await?;
            self.io.sync(&log).await?;
            let index = self.io.open(&index_path, OpenMode::Existing).await?;
            self.io
                .truncate(&index, cut_entry * INDEX_ENTRY_SIZE as u64)
                .await?;
            self.io.sync(&index).await
        };
        if let Err(source) = cut.await {
            return Err(self.poison(format!(
                "truncation could not cut {} at byte {cut_at}: {source}",
                log_path.display()
            )));
        }
        self.epoch.rollbacks += 1;
        self.forget_reads();
        self.reload_from_disk("truncation").await?;
        assert!(
            self.next_offset == offset,
            "truncated to {} instead of {offset}",
            self.next_offset
        );
        self.durable_next_offset = durable;
        Ok(())
    }

    /// The index entry number and byte position of the batch of segment
    /// `segment_number` that starts at `offset` (its end when `offset` is
    /// the segment's next offset); an error when no batch starts there.
    async fn batch_starting_at(
        &self,
        segment_number: usize,
        offset: u64,
    ) -> Result<(u64, u64), StorageError> {
        let segment = self.segment_at(segment_number)?;
        if offset == segment.next_offset {
            return Ok((segment.entry_count, segment.size_bytes));
        }
        if offset == segment.start_offset {
            return Ok((0, 0));
        }
        let index = self
            .io
            .open(&segment.index_path(&self.dir), OpenMode::Existing)
            .await
            .map_err(|source| {
                StorageError::io("open index", segment.index_path(&self.dir), source)
            })?;
        let (number, entry): (u64, IndexEntry) = segment
            .locate_offset(&self.io, &index, &self.dir, offset)
            .await?;
        if entry.base_offset != offset {
            return Err(StorageError::Layout {
                path: self.dir.clone(),
                reason: format!(
                    "offset {offset} is inside the batch at {} ({} messages), not at its start",
                    entry.base_offset, entry.message_count
                ),
            });
        }
        Ok((number, entry.position))
    }

    /// Appends a batch as another replica stored it: its base offset must
    /// be this log's next offset. It keeps its proposer's server
    /// timestamp, or takes the last batch's when that is later: timestamps
    /// never go back in a log (recovery cuts the log at a batch older than
    /// the one before it, and the time index relies on the order), and a
    /// new leader's clock may be behind the old one's. The timestamp so
    /// depends only on the batches before it, which are the same on every
    /// replica appending the entry (Raft's log matching), so the bytes
    /// stored are the same everywhere. See [`Self::append`] for when it is
    /// written.
    pub async fn append_replica(
        &mut self,
        batch: &ValidBatch,
    ) -> Result<AppendResult, StorageError> {
        let header = BatchHeader::decode(batch.bytes()).map_err(StorageError::InvalidBatch)?;
        if header.base_offset != self.next_offset {
            return Err(StorageError::Layout {
                path: self.dir.clone(),
                reason: format!(
                    "a replicated batch at offset {} where the log continues at {}",
                    header.base_offset, self.next_offset
                ),
            });
        }
        let timestamp = header.base_timestamp.max(self.last_timestamp);
        self.append_at(batch, Some(timestamp)).await
    }
}
