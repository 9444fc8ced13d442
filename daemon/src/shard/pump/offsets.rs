//! The pump's consumer offsets: admission against
//! `limits.max_consumer_offsets_per_partition`, store and delete, and the
//! answer of a change, released once the topic's offset durability allows
//! (after the commit's sync for `persisted`).
//!
//! Must not: read or write messages.

use super::*;

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Answers a consumer-offset store or delete: at once when its topic's
    /// offsets are `replicated`, after the commit phase's sync otherwise.
    pub(super) fn answer_offset_change(
        &mut self,
        key: PartitionKey,
        result: Result<Durability, PumpError>,
        reply: Reply<()>,
    ) {
        match result {
            Ok(Durability::Persisted) => {
                self.offsets_sync.insert(key);
                self.park(key, Need::OffsetsSynced, Answer::Done { reply });
            }
            Ok(Durability::Replicated) => send(reply, Ok(())),
            Err(error) => {
                self.note_fatal(key, &error);
                send(reply, Err(error));
            }
        }
    }

    /// Whether `consumer` may store an offset in partition `key`: it has
    /// one already, or the partition holds fewer than
    /// `limits.max_consumer_offsets_per_partition` (a client allowed to
    /// poll could otherwise make it hold one per name it invents).
    pub(super) fn admit_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
    ) -> Result<(), PumpError> {
        let max = self.storage.consumer_offsets_max;
        let partition = self.partition(key)?;
        if partition.offsets.get(consumer).is_some() || partition.offsets.len() < max {
            return Ok(());
        }
        self.counters.offsets_refused += 1;
        Err(PumpError::TooManyConsumerOffsets { max })
    }

    pub(super) async fn store_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
    ) -> Result<Durability, PumpError> {
        self.admit_offset(key, consumer)?;
        let partition = self.partition(key)?;
        let written = partition.log.written_offset();
        if written.is_none_or(|highest| offset > highest) {
            return Err(PumpError::InvalidOffset {
                offset,
                current: written,
            });
        }
        partition.offsets.store(consumer, offset).await?;
        Ok(partition.settings.offset_durability)
    }

    pub(super) async fn delete_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
    ) -> Result<Durability, PumpError> {
        let partition = self.partition(key)?;
        if !partition.offsets.delete(consumer).await? {
            return Err(PumpError::OffsetNotFound);
        }
        Ok(partition.settings.offset_durability)
    }
}
