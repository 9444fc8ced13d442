//! The pump's side of a replicated partition: the Raft log operations its
//! group sends through the shard's `RaftQueue` (`shard::replica`), applied
//! to the partition's segment log and Raft files like any other op, and a
//! leader's appends handed to the group as proposals.
//!
//! An append's entries are readable when it is answered; its `flushed`
//! callback waits in the commit phase like an acknowledgement, for the
//! write (`replicated`) or the fsync (`persisted`) that covers them, so a
//! Raft append shares the shard's coalesced writes and group-commit fsyncs.
//! The leader's batch gets its base offset where it joins the log (the
//! offsets of a failed proposal are never holes), a follower's continues
//! the log already; every replica stores the same bytes.
//!
//! Must not: wait for the group (it waits for the pump), or decide what is
//! committed (the group tells, through `Applied`).

use super::entry_cache::EntryCache;
use super::*;
use crate::shard::partition::Replica;
use crate::shard::replica::{Group, RaftLogState, RaftOp, Replication};
use iggyd_raft::offsets::OffsetWrite;
use iggyd_storage::raft::{EntryBody, RaftFiles, RaftRecovery, StoredBody, StoredEntry};

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Replication above this shard (a cluster node): partitions it
    /// replicates get their Raft files and group at open.
    pub fn set_replication(&mut self, replication: Rc<dyn Replication>) {
        self.replication = Some(replication);
    }

    /// The queue this shard's groups send their log operations through.
    pub fn raft_queue(&self) -> &crate::shard::replica::RaftQueue {
        &self.raft_queue
    }

    /// Opens the Raft files of a partition whose log was just opened, when
    /// it is replicated (many partitions may be opening at once).
    pub(super) async fn open_raft_files(
        &self,
        key: PartitionKey,
        log: &mut PartitionLog<I>,
    ) -> Result<Option<(RaftFiles<I>, RaftRecovery)>, PumpError> {
        let Some(replication) = &self.replication else {
            return Ok(None);
        };
        if !replication.replicates(&key) {
            return Ok(None);
        }
        let dir = key.dir(&self.storage.data_dir);
        Ok(Some(RaftFiles::open(self.io.clone(), &dir, log).await?))
    }

    /// Starts the group of a replicated partition whose files are open.
    pub(super) async fn start_replica(
        &mut self,
        key: PartitionKey,
        log: &mut PartitionLog<I>,
        (files, recovery): (RaftFiles<I>, RaftRecovery),
        replication: Rc<dyn Replication>,
    ) -> Result<Replica<I>, PumpError> {
        if recovery.entries_dropped > 0 || recovery.messages_cut > 0 {
            tracing::warn!(
                partition = %key,
                entries_dropped = recovery.entries_dropped,
                messages_cut = recovery.messages_cut,
                "the Raft log lost an unacknowledged tail in a crash; the leader sends it again"
            );
        }
        // A snapshot installed past the log's end: the log starts again at
        // its offset (again, when a crash came between the two).
        if let Some(next_offset) = files.restart_needed(log) {
            let deleted = log.restart_at(next_offset, &mut self.trash).await?;
            tracing::warn!(
                partition = %key,
                next_offset,
                messages = deleted.messages,
                "finished starting the log again at an installed snapshot"
            );
        }
        // Messages start after what is purged (their entries are gone),
        // and the group's snapshot is there.
        let purged = files.purge_point(log).await?;
        let first_offset = purged
            .as_ref()
            .map_or(log.first_offset(), |purged| purged.next_offset);
        let group = replication.start_group(key, self.raft_queue.clone(), first_offset, purged);
        Ok(Replica { files, group })
    }

    /// An append to a replicated partition: stamped with this node's time
    /// and proposed; the group answers `reply` once it is committed (it
    /// forwards the proposal when another member leads, and the leader's
    /// log gives the batch its offsets).
    pub(super) fn propose(
        &mut self,
        key: PartitionKey,
        batch: &ValidBatch,
        reply: Reply<AppendAck>,
    ) {
        let now = self.clock.now_micros();
        let partition = match self.partition(key) {
            Ok(partition) => partition,
            Err(error) => {
                send(reply, Err(error));
                return;
            }
        };
        let Some(replica) = &partition.replica else {
            send(reply, Err(PumpError::NotHere(key)));
            return;
        };
        let mut bytes = batch.bytes().to_vec();
        batch.stamp_copy(
            &mut bytes,
            u64::from(key.partition),
            partition.log.next_offset(),
            now,
        );
        replica.group.propose(bytes, reply);
    }

    /// Applies one Raft log operation of `key`'s group.
    pub async fn apply_raft(&mut self, key: PartitionKey, op: RaftOp) {
        if self.fatal.is_some() {
            op.fail(|| PumpError::Stopping);
            return;
        }
        if self
            .partitions
            .get(&key)
            .is_none_or(|partition| partition.replica.is_none())
        {
            op.fail(|| PumpError::NotHere(key));
            return;
        }
        match op {
            RaftOp::State { reply } => {
                let partition = self.partitions.get(&key).expect("checked above");
                let files = &partition.replica.as_ref().expect("checked above").files;
                send(
                    reply,
                    Ok(RaftLogState {
                        last: files.last(),
                        purged: files.purged(),
                        committed: files.committed(),
                        vote: files.vote().map(<[u8]>::to_vec),
                    }),
                );
            }
            RaftOp::Append {
                entries,
                flushed,
                reply,
            } => match self.append_entries(key, entries).await {
                Ok(()) => {
                    let partition = self.partitions.get(&key).expect("appended to it");
                    let upto = partition.log.next_offset();
                    let need = match partition.settings.durability {
                        Durability::Persisted => {
                            self.log_sync.insert(key);
                            Need::Durable { upto }
                        }
                        Durability::Replicated => Need::Written { upto },
                    };
                    self.park(key, need, Answer::Flushed { flushed });
                    send(reply, Ok(()));
                }
                Err(error) => {
                    self.note_fatal(key, &error);
                    flushed(Err(error.to_string()));
                    send(reply, Err(error));
                }
            },
            RaftOp::Truncate { keep, reply } => {
                let result = self.truncate_entries(key, keep).await;
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            RaftOp::Purge { through, reply } => {
                self.entry_cache.purge_through(key, through.0);
                let partition = self.partitions.get_mut(&key).expect("checked above");
                let trash = &mut self.trash;
                let result = async {
                    partition.log.write_pending().await?;
                    let replica = partition.replica.as_mut().expect("checked above");
                    replica.files.write_pending().await?;
                    if replica
                        .files
                        .last()
                        .is_some_and(|(last, _)| through.0 <= last)
                    {
                        replica.files.purge_through(&partition.log, through).await?;
                        return Ok(());
                    }
                    // Past the log's end: a snapshot installed from the
                    // leader, whose retention deleted the messages before
                    // its offset; the log starts again there.
                    let Some((point, membership)) = replica
                        .group
                        .installed()
                        .filter(|(point, _)| (point.index, point.term) == through)
                    else {
                        return Err(PumpError::Storage(StorageError::Layout {
                            path: partition.log.dir().to_path_buf(),
                            reason: format!(
                                "a purge through entry {} past the log's end, with no snapshot installed there",
                                through.0
                            ),
                        }));
                    };
                    replica
                        .files
                        .install_snapshot(through, point.next_offset, &membership)
                        .await?;
                    let deleted = partition.log.restart_at(point.next_offset, trash).await?;
                    tracing::info!(
                        partition = %key,
                        entry = through.0,
                        next_offset = point.next_offset,
                        messages_dropped = deleted.messages,
                        "installed the leader's snapshot: the log starts again at its offset"
                    );
                    Ok(())
                }
                .await;
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                let purged = result.is_ok();
                send(reply, result);
                // The messages of a purge applied here go once the entries
                // naming them are purged (the group's purge stands either
                // way: a failed deletion is the partition's, like
                // retention's).
                if purged && let Err(error) = self.delete_purged(key).await {
                    tracing::warn!(partition = %key, %error, "deleting purged messages failed");
                    self.note_fatal(key, &error);
                }
            }
            RaftOp::SaveVote { vote, reply } => {
                let partition = self.partitions.get_mut(&key).expect("checked above");
                let replica = partition.replica.as_mut().expect("checked above");
                let result = replica
                    .files
                    .save_vote(&vote)
                    .await
                    .map_err(PumpError::from);
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            RaftOp::SaveCommitted { committed, reply } => {
                let partition = self.partitions.get_mut(&key).expect("checked above");
                let replica = partition.replica.as_mut().expect("checked above");
                replica.files.set_committed(committed);
                send(reply, Ok(()));
            }
            RaftOp::StoredOffsets { reply } => {
                let result = self.apply_offsets(key).await.map(|()| {
                    let partition = self.partitions.get(&key).expect("checked above");
                    let writes = partition
                        .offsets
                        .iter()
                        .map(|(consumer, offset)| OffsetWrite::Store { consumer, offset })
                        .collect();
                    (partition.offsets.raft_index(), writes)
                });
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            RaftOp::MachineSnapshot { reply } => {
                let partition = self.partitions.get(&key).expect("checked above");
                let files = &partition.replica.as_ref().expect("checked above").files;
                let result = files.machine_snapshot().await.map_err(PumpError::from);
                send(reply, result);
            }
            RaftOp::SaveMachineSnapshot { bytes, reply } => {
                let partition = self.partitions.get(&key).expect("checked above");
                let files = &partition.replica.as_ref().expect("checked above").files;
                let result = files
                    .save_machine_snapshot(&bytes)
                    .await
                    .map_err(PumpError::from);
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
            RaftOp::OffsetsApplied => {
                if let Err(error) = self.apply_offsets(key).await {
                    self.note_fatal(key, &error);
                }
                if let Err(error) = self.apply_purges(key).await {
                    tracing::warn!(partition = %key, %error, "purge failed");
                    self.note_fatal(key, &error);
                }
            }
            RaftOp::Read {
                first,
                end,
                bytes_max,
                reply,
            } => {
                let result = self.read_entries(key, first, end, bytes_max).await;
                if let Err(error) = &result {
                    self.note_fatal(key, error);
                }
                send(reply, result);
            }
        }
    }

    async fn append_entries(
        &mut self,
        key: PartitionKey,
        entries: Vec<StoredEntry>,
    ) -> Result<(), PumpError> {
        let result = self.append_to_files(key, entries).await;
        if result.is_err() {
            // The files may hold part of the entries: none stay cached.
            self.entry_cache.remove(key);
        }
        result
    }

    /// Appends `entries` to the partition's files and their cache.
    async fn append_to_files(
        &mut self,
        key: PartitionKey,
        entries: Vec<StoredEntry>,
    ) -> Result<(), PumpError> {
        let partition = self
            .partitions
            .get_mut(&key)
            .ok_or(PumpError::NotHere(key))?;
        let replica = partition.replica.as_mut().ok_or(PumpError::NotHere(key))?;
        let mut messages = 0u64;
        let mut bytes_in = 0u64;
        for entry in entries {
            let (count, bytes) = append_entry(
                &mut replica.files,
                &mut partition.log,
                &mut self.entry_cache,
                key,
                entry,
            )
            .await?;
            messages += count;
            bytes_in += bytes;
        }
        self.counters.messages_in += messages;
        self.counters.bytes_in += bytes_in;
        Ok(())
    }

    /// Truncation after a leader change: what is appended is made durable
    /// first (the callbacks waiting for it are answered: those entries
    /// were stored), then the tail after `keep` goes.
    async fn truncate_entries(
        &mut self,
        key: PartitionKey,
        keep: Option<u64>,
    ) -> Result<(), PumpError> {
        self.entry_cache.truncate_after(key, keep);
        self.log_sync.insert(key);
        self.commit().await;
        if let Some(fatal) = &self.fatal {
            return Err(PumpError::Storage(StorageError::Poisoned {
                reason: fatal.to_string(),
            }));
        }
        let partition = self.partition(key)?;
        let replica = partition.replica.as_mut().ok_or(PumpError::NotHere(key))?;
        replica
            .files
            .truncate_after(&mut partition.log, keep)
            .await?;
        Ok(())
    }

    async fn read_entries(
        &mut self,
        key: PartitionKey,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> Result<Vec<StoredEntry>, PumpError> {
        let partition = self
            .partitions
            .get_mut(&key)
            .ok_or(PumpError::NotHere(key))?;
        let replica = partition.replica.as_mut().ok_or(PumpError::NotHere(key))?;
        read_entries(
            &mut replica.files,
            &mut partition.log,
            &mut self.entry_cache,
            key,
            (first, end),
            bytes_max,
        )
        .await
    }
}

/// Appends one entry to a replicated partition's files (a data entry's
/// batch to its log, restamped where the log continues when its proposer
/// could not know that), and to `cache` with the bytes the files keep for
/// it. Answers the entry's messages and batch bytes.
pub(super) async fn append_entry<I: StorageIo + Clone>(
    files: &mut RaftFiles<I>,
    log: &mut PartitionLog<I>,
    cache: &mut EntryCache,
    key: PartitionKey,
    entry: StoredEntry,
) -> Result<(u64, u64), PumpError> {
    let body = match entry.body {
        StoredBody::Data(bytes) => {
            // Unshared (the proposal's own, or decoded from the leader's
            // call): taken back as a vector without a copy.
            let mut bytes = Vec::from(bytes);
            let next = log.next_offset();
            let header = iggyd_wire::batch::BatchHeader::decode(&bytes)
                .map_err(|error| PumpError::Storage(StorageError::InvalidBatch(error)))?;
            if header.base_offset != next {
                // A leader's proposal takes its offsets here.
                iggyd_wire::batch::stamp(
                    &mut bytes,
                    header.partition_id,
                    next,
                    header.base_timestamp,
                )
                .map_err(|error| PumpError::Storage(StorageError::InvalidBatch(error)))?;
            }
            let len = bytes.len();
            let batch = ValidBatch::new(bytes, 0..len)
                .map_err(|error| PumpError::Storage(StorageError::InvalidBatch(error)))?;
            let count = batch.message_count();
            let appended = files
                .append(log, entry.index, entry.term, EntryBody::Data(&batch))
                .await?;
            assert!(log.next_offset() == next + u64::from(count));
            let Some(appended) = appended else {
                cache.remove(key);
                return Ok((u64::from(count), len as u64));
            };
            // The bytes the files keep: the batch as the log stamped it
            // where it joined.
            let stored = batch.into_stored(
                log.config().partition_id,
                appended.base_offset,
                appended.timestamp,
            );
            cache.insert(
                key,
                StoredEntry {
                    index: entry.index,
                    term: entry.term,
                    body: StoredBody::Data(stored.into()),
                },
            );
            return Ok((u64::from(count), len as u64));
        }
        StoredBody::Blank => EntryBody::Blank,
        StoredBody::Purge(below) => {
            // What the files keep: the purged messages end where the log
            // does at most (a whole purge seals the active segment).
            let kept = below.min(log.next_offset());
            files
                .append(log, entry.index, entry.term, EntryBody::Purge { below })
                .await?;
            cache.insert(
                key,
                StoredEntry {
                    index: entry.index,
                    term: entry.term,
                    body: StoredBody::Purge(kept),
                },
            );
            return Ok((0, 0));
        }
        StoredBody::Membership(ref payload) => EntryBody::Membership(payload),
        StoredBody::Offsets(ref payload) => EntryBody::Offsets(payload),
    };
    files.append(log, entry.index, entry.term, body).await?;
    cache.insert(key, entry);
    Ok((0, 0))
}

/// A replicated partition's entries from `first` on, before `end`, until
/// `bytes_max` of data (the entry that passes it included): from `cache`
/// while it holds them (entries appended a moment ago, which replication
/// and apply read most), else from the files, whose pending data is
/// written first (the commit phase would have; a read may come sooner).
/// A range starting before what the log still holds starts where it does.
pub(super) async fn read_entries<I: StorageIo + Clone>(
    files: &mut RaftFiles<I>,
    log: &mut PartitionLog<I>,
    cache: &mut EntryCache,
    key: PartitionKey,
    (first, end): (u64, u64),
    bytes_max: u64,
) -> Result<Vec<StoredEntry>, PumpError> {
    let start = files.first_readable(first);
    if let Some(entries) = cache.read(key, files.last(), start, end, bytes_max) {
        return Ok(entries);
    }
    log.write_pending().await?;
    files.write_pending().await?;
    Ok(files.read_range(log, start, end, bytes_max).await?)
}

/// Stops a removed partition's group.
pub(super) fn stop_group(group: &Rc<dyn Group>) {
    group.stop();
}
