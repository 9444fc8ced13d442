//! The pump's consumer offsets: admission against
//! `limits.max_consumer_offsets_per_partition`, store and delete, and the
//! answer of a change, released once the topic's offset durability allows
//! (after the commit's sync for `persisted`).
//!
//! On a replicated partition a store or delete is admitted here, then
//! proposed as an offsets entry of the partition's Raft group
//! (`iggyd_raft::offsets`) and answered once committed; every replica
//! writes the entries it applies into its own offsets store, in log
//! order, skipping those its store already holds (a restart applies the
//! log again: a stored offset never goes back). Stored offsets are read
//! only once the group applied an entry of the current term
//! (`Group::offsets_ready`), else the request is refused with 58, which
//! the SDK retries: a new leader never answers with an offset older than
//! one its predecessor acknowledged.
//!
//! Must not: read or write messages.

use super::*;
use crate::shard::replica::OffsetsDone;
use iggyd_raft::offsets::OffsetWrite;

/// A replicated partition's offset writes of one round, and who waits.
#[derive(Default)]
pub(super) struct PendingOffsets {
    writes: Vec<OffsetWrite>,
    done: Vec<OffsetsDone>,
}

/// The same outcome for another waiter of one offsets entry (the group
/// answers with these kinds).
fn copy_error(error: &PumpError) -> PumpError {
    match error {
        PumpError::NotLeader { leader } => PumpError::NotLeader { leader: *leader },
        PumpError::NotHere(key) => PumpError::NotHere(*key),
        other => PumpError::NotCommitted {
            reason: other.to_string(),
        },
    }
}

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

    /// Proposes `write` through `key`'s group with the round's other
    /// writes to it (one offsets entry at the commit phase); `done` hears
    /// once it is committed.
    pub(super) fn propose_offset_write(
        &mut self,
        key: PartitionKey,
        write: OffsetWrite,
        done: OffsetsDone,
    ) {
        let pending = self.offset_proposals.entry(key).or_default();
        // Last write wins per consumer, in the order received.
        pending
            .writes
            .retain(|earlier| earlier.consumer() != write.consumer());
        pending.writes.push(write);
        pending.done.push(done);
        if pending.writes.len() >= iggyd_raft::offsets::WRITES_MAX {
            self.propose_pending_offsets();
        }
    }

    /// Proposes the round's offset writes: one entry per partition, whose
    /// outcome every write's `done` hears.
    pub(super) fn propose_pending_offsets(&mut self) {
        for (key, pending) in std::mem::take(&mut self.offset_proposals) {
            let Some(replica) = self.partitions.get(&key).and_then(|p| p.replica.as_ref()) else {
                for done in pending.done {
                    done(Err(PumpError::NotHere(key)));
                }
                continue;
            };
            let payload = iggyd_raft::offsets::encode(&pending.writes);
            let dones = pending.done;
            replica.group.propose_offsets(
                payload,
                Box::new(move |result: Result<(), PumpError>| {
                    for done in dones {
                        done(match &result {
                            Ok(()) => Ok(()),
                            Err(error) => Err(copy_error(error)),
                        });
                    }
                }),
            );
        }
    }

    /// Whether `key` is replicated.
    pub(super) fn is_replicated(&self, key: PartitionKey) -> bool {
        self.partitions
            .get(&key)
            .is_some_and(|partition| partition.replica.is_some())
    }

    /// Writes the offsets entries `key`'s group applied into its offsets
    /// store, in log order, skipping those the store already holds; then
    /// refuses (58) when stored offsets may not be read yet.
    pub(super) async fn offsets_readable(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        self.apply_offsets(key).await?;
        let partition = self.partition(key)?;
        match &partition.replica {
            Some(replica) if !replica.group.offsets_ready() => {
                Err(PumpError::NotLeader { leader: None })
            }
            _ => Ok(()),
        }
    }

    /// Writes the offsets entries `key`'s group applied into its offsets
    /// store (a follower's too), in log order, after the offsets store of
    /// a snapshot it installed.
    pub(super) async fn apply_offsets(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.get_mut(&key) else {
            return Ok(());
        };
        let Some(replica) = &partition.replica else {
            return Ok(());
        };
        let installed = replica.group.take_installed_offsets();
        let applied = replica.group.take_offsets();
        if installed.is_none() && applied.is_empty() {
            return Ok(());
        }
        // An installed snapshot's store replaces this one when newer: its
        // consumers' offsets stored, the others deleted.
        if let Some((index, writes)) = installed
            && index > partition.offsets.raft_index()
        {
            let kept: std::collections::HashSet<ConsumerKey> =
                writes.iter().map(OffsetWrite::consumer).collect();
            let gone: Vec<ConsumerKey> = partition
                .offsets
                .iter()
                .map(|(consumer, _)| consumer)
                .filter(|consumer| !kept.contains(consumer))
                .collect();
            for consumer in gone {
                partition.offsets.delete_at(consumer, index).await?;
            }
            for write in writes {
                if let OffsetWrite::Store { consumer, offset } = write {
                    partition.offsets.store_at(consumer, offset, index).await?;
                }
            }
        }
        for (index, writes) in applied {
            if index <= partition.offsets.raft_index() {
                continue;
            }
            for write in writes {
                match write {
                    OffsetWrite::Store { consumer, offset } => {
                        partition.offsets.store_at(consumer, offset, index).await?;
                    }
                    OffsetWrite::Delete { consumer } => {
                        partition.offsets.delete_at(consumer, index).await?;
                    }
                }
            }
        }
        if partition.settings.offset_durability == Durability::Persisted {
            self.offsets_sync.insert(key);
        }
        Ok(())
    }

    pub(super) async fn store_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
    ) -> Result<Durability, PumpError> {
        self.check_offset(key, consumer, offset)?;
        let partition = self.partition(key)?;
        partition.offsets.store(consumer, offset).await?;
        Ok(partition.settings.offset_durability)
    }

    /// Whether `consumer` may store `offset` in `key`: admitted, and not
    /// past the last message written.
    pub(super) fn check_offset(
        &mut self,
        key: PartitionKey,
        consumer: ConsumerKey,
        offset: u64,
    ) -> Result<(), PumpError> {
        self.admit_offset(key, consumer)?;
        let partition = self.partition(key)?;
        let written = partition.log.written_offset();
        if written.is_none_or(|highest| offset > highest) {
            return Err(PumpError::InvalidOffset {
                offset,
                current: written,
            });
        }
        Ok(())
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
