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
//! Must not: touch the active segment, delete anything a consumer of a
//! `persisted` topic may still be sent (only whole sealed segments go), or
//! delete a replicated partition's messages whose entries are not purged.

use super::*;
use crate::shard::partition::Replica;
use iggyd_storage::partition_log::SegmentInfo;

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
