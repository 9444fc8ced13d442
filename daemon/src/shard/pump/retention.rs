//! The pump's retention: on each `RetentionTick`, delete the oldest sealed
//! segments of every partition whose messages expired or whose topic is
//! over `max_topic_size` (each partition trimmed to its share), through the
//! trash. Never the active segment.
//!
//! On a replicated partition the entries naming a segment's messages go
//! first: retention asks the group for a snapshot at the last entry before
//! the first message kept (`Group::snapshot_at`), openraft purges the
//! entries through it, and a later tick deletes the segments whose messages
//! end at or before the purge point's offset. Only committed messages go,
//! and each replica decides for itself, as every replica's retention sees
//! the same messages with the same timestamps.
//!
//! A purge of a replicated partition (a stream's or topic's purge, or
//! delete-segments) is a Raft entry (`iggyd_raft::Proposal::Purge`) naming
//! the offset below which messages go. Where it is applied (every
//! replica, in log order) consumers read nothing below it from then on
//! (`Group::floor`); the pump asks for a snapshot at the entry (a whole
//! purge: its append sealed the active segment, so the messages before it
//! are all in sealed segments) or at the end of the last message to go,
//! and deletes the sealed segments below the floor once openraft purged
//! the entries naming them (`delete_purged`, also at each retention
//! check). Offsets are not reused: the next message keeps the next offset,
//! and stored consumer offsets stay (unlike a single node's purge, which
//! starts the partition again at 0 — a replica's offsets are its log's).
//!
//! Must not: touch the active segment, delete anything a consumer of a
//! `persisted` topic may still be sent (only whole sealed segments go), or
//! delete a replicated partition's messages whose entries are not purged.

use super::*;
use crate::shard::partition::Replica;
use crate::shard::replica::OffsetsDone;
use iggyd_storage::partition_log::{DeletedSegments, SegmentInfo};

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Retention, once per `retention.check_interval`: delete the sealed
    /// segments whose newest message is older than the topic's expiry, then,
    /// while a partition holds more than 90 % of its `max_topic_size` share
    /// (`PartitionSettings::max_size_bytes`), its oldest sealed segments.
    /// The active segment is never deleted, so a partition can stay above
    /// its share by up to one segment.
    pub(super) async fn retain(&mut self) {
        let now = self.clock.now_micros();
        let mut failures = Vec::new();
        // What purges left behind (a deletion that failed, or a restart
        // between a purge and its deletion).
        let replicated: Vec<PartitionKey> = self
            .partitions
            .values()
            .filter(|partition| partition.replica.is_some())
            .map(|partition| partition.key)
            .collect();
        for key in replicated {
            if let Err(error) = self.delete_purged(key).await {
                failures.push((key, error));
            }
        }
        for partition in self.partitions.values_mut() {
            let sealed = partition.log.sealed_segments();
            let expired = match partition.settings.message_expiry_us {
                Some(expiry) => {
                    let cutoff = now.saturating_sub(expiry);
                    sealed
                        .iter()
                        .take_while(|segment| segment.last_timestamp < cutoff)
                        .count()
                }
                None => 0,
            };
            let oversize = match partition.settings.max_size_bytes {
                Some(share) => {
                    let target = share / 10 * 9;
                    let mut bytes = partition.log.stats().bytes;
                    sealed
                        .iter()
                        .take_while(|segment| {
                            let over = bytes > target;
                            bytes = bytes.saturating_sub(segment.size_bytes);
                            over
                        })
                        .count()
                }
                None => 0,
            };
            let mut count = expired.max(oversize);
            if count == 0 {
                continue;
            }
            if let Some(replica) = &partition.replica {
                match purge_for_retention(replica, &sealed, count).await {
                    Ok(deletable) => count = deletable,
                    Err(error) => {
                        failures.push((partition.key, PumpError::from(error)));
                        continue;
                    }
                }
                if count == 0 {
                    continue;
                }
            }
            match partition
                .log
                .delete_oldest_segments(count, &mut self.trash)
                .await
            {
                Ok(deleted) => tracing::info!(
                    partition = %partition.key,
                    segments = deleted.segments,
                    messages = deleted.messages,
                    bytes = deleted.bytes,
                    expired,
                    oversize,
                    "retention: deleted the oldest segments"
                ),
                Err(error) => failures.push((partition.key, PumpError::from(error))),
            }
        }
        for (key, error) in failures {
            tracing::warn!(partition = %key, %error, "retention failed");
            self.note_fatal(key, &error);
        }
    }
}

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Proposes a purge of `key`'s messages below `below` (all of them
    /// with `u64::MAX`) through its group; `done` hears once it is
    /// committed and applied here.
    pub(super) fn propose_purge(&mut self, key: PartitionKey, below: u64, done: OffsetsDone) {
        match self.partitions.get(&key).and_then(|p| p.replica.as_ref()) {
            Some(replica) => replica.group.propose_purge(below, done),
            None => done(Err(PumpError::NotHere(key))),
        }
    }

    /// Delete-segments on a replicated partition: a purge of the messages
    /// in its `count` oldest sealed segments here, which every replica
    /// applies. Answers what they held here.
    pub(super) fn delete_replicated_segments(
        &mut self,
        key: PartitionKey,
        count: usize,
        reply: Reply<DeletedSegments>,
    ) {
        let sealed = match self.partition(key) {
            Ok(partition) => partition.log.sealed_segments(),
            Err(error) => return send(reply, Err(error)),
        };
        let going = sealed.get(..count.min(sealed.len())).unwrap_or_default();
        let Some(last) = going.last() else {
            return send(reply, Ok(DeletedSegments::default()));
        };
        let deleted = DeletedSegments {
            segments: going.len(),
            messages: going
                .iter()
                .map(|segment| segment.next_offset - segment.start_offset)
                .sum(),
            bytes: going.iter().map(|segment| segment.size_bytes).sum(),
        };
        self.propose_purge(
            key,
            last.next_offset,
            Box::new(move |result| send(reply, result.map(|()| deleted))),
        );
    }

    /// Takes the purge entries `key`'s group applied and asks it for the
    /// snapshot after which their messages may go: at the entry itself
    /// for a whole purge, else at the entry before the batch that starts
    /// where the purged messages end. Then records the entry committed
    /// durably and deletes what may go already.
    pub(super) async fn apply_purges(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(replica) = self.partitions.get(&key).and_then(|p| p.replica.as_ref()) else {
            return Ok(());
        };
        let purges = replica.group.take_purges();
        let last = purges.last().copied();
        for purge in purges {
            let point = iggyd_raft::retention::purge_point(&replica.files, &purge).await?;
            tracing::info!(
                partition = %key,
                entry = purge.index,
                below = purge.below,
                "purge applied: consumers read from the purged offset on"
            );
            if let Some(point) = point {
                replica.group.snapshot_at(point);
            }
        }
        // A restart applies the purge again before its group serves, so
        // what it deleted is never served again here.
        // The entry and the messages before it are made durable first: a
        // power loss could otherwise take the entry, and the committed
        // position with it.
        if let Some(last) = last
            && let Some(partition) = self.partitions.get_mut(&key)
            && let Some(replica) = partition.replica.as_mut()
        {
            partition.log.write_pending().await?;
            partition.log.sync().await?;
            replica.files.sync().await?;
            replica
                .files
                .save_committed_through((last.index, last.term))
                .await?;
        }
        self.delete_purged(key).await
    }

    /// Deletes `key`'s sealed segments below its group's floor whose
    /// entries are purged (a purge applied here, or the snapshot the group
    /// started from or installed).
    pub(super) async fn delete_purged(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.get_mut(&key) else {
            return Ok(());
        };
        let Some(replica) = &partition.replica else {
            return Ok(());
        };
        let floor = replica.group.floor();
        let count = iggyd_raft::retention::purged_deletable(
            &replica.files,
            &partition.log.sealed_segments(),
            floor,
        );
        if count == 0 {
            return Ok(());
        }
        let deleted = partition
            .log
            .delete_oldest_segments(count, &mut self.trash)
            .await?;
        tracing::info!(
            partition = %key,
            segments = deleted.segments,
            messages = deleted.messages,
            bytes = deleted.bytes,
            floor,
            "purge: deleted the segments below the purged offset"
        );
        Ok(())
    }
}

/// How many of the `count` oldest `sealed` segments of a replicated
/// partition may go now (`iggyd_raft::retention`); asks its group for the
/// snapshot that lets more go later.
async fn purge_for_retention<I: StorageIo + Clone>(
    replica: &Replica<I>,
    sealed: &[SegmentInfo],
    count: usize,
) -> Result<usize, StorageError> {
    let plan =
        iggyd_raft::retention::plan(&replica.files, sealed, count, replica.group.committed_end())
            .await?;
    if let Some(point) = plan.snapshot {
        tracing::debug!(
            entry = point.index,
            next_offset = point.next_offset,
            "retention: asking the group for a snapshot before deleting"
        );
        replica.group.snapshot_at(point);
    }
    Ok(plan.deletable)
}
