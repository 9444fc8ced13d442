//! The pump's retention: on each `RetentionTick`, delete the oldest sealed
//! segments of every partition whose messages expired or whose topic is
//! over `max_topic_size` (each partition trimmed to its share), through the
//! trash. Never the active segment.
//!
//! Must not: touch the active segment, or delete anything a consumer of a
//! `persisted` topic may still be sent (only whole sealed segments go).

use super::*;

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
            // A replicated partition's entries name its segments; deleting
            // them needs the group's snapshot of sealed segments (a later
            // step), so replicated partitions keep theirs for now.
            if partition.replica.is_some() {
                continue;
            }
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
            let count = expired.max(oversize);
            if count == 0 {
                continue;
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
