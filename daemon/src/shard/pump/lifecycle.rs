//! The pump's partition lifecycle: opening (and recovering) a partition
//! this shard owns, or refreshing the settings of one it holds; removing one
//! (its directory into the trash, never opened again); purging one (a fresh
//! directory in place of the old, durably, before the answer); and the
//! repair of consumer offsets that point past a recovered log.
//!
//! Must not: serve reads or appends (the dispatch in `mod.rs` does).

use super::*;

/// A partition's files opened and recovered by [`Pump::open_files`], for
/// [`Pump::take_in`].
struct OpenedFiles<I: StorageIo> {
    key: PartitionKey,
    settings: PartitionSettings,
    log: PartitionLog<I>,
    /// A replicated partition's Raft files, and what their recovery did.
    raft: Option<(
        iggyd_storage::raft::RaftFiles<I>,
        iggyd_storage::raft::RaftRecovery,
    )>,
    offsets: ConsumerOffsets<I>,
}

impl<I: StorageIo + Clone + 'static> Pump<I> {
    /// Open (or create) a partition and recover it. Used by `Open` and at
    /// start-up for every partition this shard owns.
    pub async fn open(
        &mut self,
        key: PartitionKey,
        settings: PartitionSettings,
    ) -> Result<(), PumpError> {
        if !self.needs_opening(key, settings) {
            return Ok(());
        }
        let files = self.open_files(key, settings).await?;
        self.take_in(files).await
    }

    /// Opens many partitions: their files (created, read and recovered,
    /// each with its fsyncs) `limits::PARTITION_OPENS_IN_FLIGHT` at a time,
    /// then each taken in, in order. One after another, a cluster node
    /// creating a topic of 1,000 partitions waited on 1,000 partitions'
    /// fsyncs in turn, for longer than its peers and the client waited.
    /// Returns the partitions that did not open, with why.
    pub async fn open_many(
        &mut self,
        wanted: Vec<(PartitionKey, PartitionSettings)>,
    ) -> Vec<(PartitionKey, PumpError)> {
        use futures_util::StreamExt;
        // Each once: two opens of one directory at a time would race.
        let mut listed = std::collections::BTreeSet::new();
        let wanted: Vec<_> = wanted
            .into_iter()
            .filter(|(key, settings)| listed.insert(*key) && self.needs_opening(*key, *settings))
            .collect();
        let this = &*self;
        let opened: Vec<_> = futures_util::stream::iter(wanted)
            .map(|(key, settings)| async move { (key, this.open_files(key, settings).await) })
            .buffered(crate::limits::PARTITION_OPENS_IN_FLIGHT)
            .collect()
            .await;
        let mut failed = Vec::new();
        for (key, files) in opened {
            if let Err(error) = match files {
                Ok(files) => self.take_in(files).await,
                Err(error) => Err(error),
            } {
                failed.push((key, error));
            }
        }
        failed
    }

    /// Whether `key` must be opened: not held (a held one takes the new
    /// settings here) and not removed.
    fn needs_opening(&mut self, key: PartitionKey, settings: PartitionSettings) -> bool {
        if let Some(partition) = self.partitions.get_mut(&key) {
            partition.settings = settings;
            return false;
        }
        // Removed already (an open or a settings refresh that lost the race
        // with a delete): its directory must not come back.
        !self.removed.contains(&key.storage_id)
    }

    /// A partition's files opened and recovered, not yet the pump's (many
    /// may be opening at once; nothing here touches the pump's state).
    async fn open_files(
        &self,
        key: PartitionKey,
        settings: PartitionSettings,
    ) -> Result<OpenedFiles<I>, PumpError> {
        let dir = key.dir(&self.storage.data_dir);
        let config = PartitionConfig::new(u64::from(key.partition), settings.segment_size_bytes)
            .with_access(self.storage.access)
            .with_read_window(self.storage.read_window_bytes);
        let mut log = PartitionLog::open(
            self.io.clone(),
            &dir,
            config,
            self.clock.clone(),
            self.storage.pool.clone(),
        )
        .await?;
        let raft = self.open_raft_files(key, &mut log).await?;
        let (offsets, _dropped) = ConsumerOffsets::open(self.io.clone(), &dir).await?;
        Ok(OpenedFiles {
            key,
            settings,
            log,
            raft,
            offsets,
        })
    }

    /// Takes in a partition whose files are open: its group started, its
    /// consumer offsets checked against its log.
    async fn take_in(&mut self, files: OpenedFiles<I>) -> Result<(), PumpError> {
        let OpenedFiles {
            key,
            settings,
            mut log,
            raft,
            mut offsets,
        } = files;
        if !self.needs_opening(key, settings) {
            // Opened or removed while its files were opening.
            return Ok(());
        }
        // Raft files are opened only where replication is set.
        let replica = match (raft, self.replication.clone()) {
            (Some(raft), Some(replication)) => {
                Some(self.start_replica(key, &mut log, raft, replication).await?)
            }
            _ => None,
        };
        repair_consumer_offsets(&key, &log, &mut offsets).await?;
        self.partitions.insert(
            key,
            Partition {
                key,
                log,
                offsets,
                settings,
                replica,
            },
        );
        Ok(())
    }

    /// A deleted partition: closed, its directory moved to the trash. The
    /// delete is already durable in metadata (its storage id is never
    /// listed or given out again), so this never fails: a directory that
    /// cannot be moved is removed where it is, and a failure is reported
    /// by the trash.
    pub(super) async fn remove(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        self.removed.insert(key.storage_id);
        self.entry_cache.remove(key);
        if self.removed.len() > crate::limits::REMOVED_PARTITIONS_REMEMBERED {
            self.removed.pop_first();
        }
        let bytes = match self.partitions.remove(&key) {
            Some(partition) => {
                if let Some(replica) = &partition.replica {
                    raft::stop_group(&replica.group);
                }
                partition.log.stats().bytes
            }
            None => 0,
        };
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.storage.data_dir);
        let label = key.storage_id.to_string();
        match self.trash.discard_durably(&dir, &label, bytes).await {
            Ok(_) => {}
            Err(error @ DiscardError::NotMoved { .. }) => {
                tracing::warn!(partition = %key, %error, "the deleted partition's directory is removed in place");
                self.trash.schedule(dir, bytes);
            }
            Err(error @ DiscardError::NotDurable { .. }) => {
                // A power loss may bring the directory back under
                // `partitions/`; start-up then moves it again.
                tracing::warn!(partition = %key, %error, "moving the deleted partition's directory");
            }
        }
        Ok(())
    }

    /// Purge: the partition's directory goes to the trash and a fresh one
    /// (segment 0, no consumer offsets) takes its place, durably, before
    /// the reply (see `storage::delete`).
    pub(super) async fn purge(&mut self, key: PartitionKey) -> Result<(), PumpError> {
        let Some(partition) = self.partitions.get_mut(&key) else {
            return Err(PumpError::NotHere(key));
        };
        if partition.replica.is_some() {
            return Err(PumpError::NotReplicated { what: "purging" });
        }
        partition.log.purge(&mut self.trash).await?;
        // Anything parked for this partition refers to purged data (the
        // epoch's purge count tells its waiters), and the purge itself is
        // durable now.
        self.log_sync.remove(&key);
        self.background_due.remove(&key);
        self.offsets_sync.remove(&key);
        let dir = key.dir(&self.storage.data_dir);
        match ConsumerOffsets::open(self.io.clone(), &dir).await {
            Ok((offsets, _)) => {
                partition.offsets = offsets;
                Ok(())
            }
            // The old offsets went with the old directory: storing into
            // them now would be storing into the trash.
            Err(error) => Err(PumpError::Storage(StorageError::Poisoned {
                reason: format!("purge could not open fresh consumer offsets: {error}"),
            })),
        }
    }
}

/// A power loss can take back messages (the unsynced tail of a `replicated`
/// topic, or a torn one) while a consumer offset pointing at them was
/// already durable. Left alone, such an offset would make `Next` skip the
/// messages later appended at those offsets. Before the partition serves
/// anything, clamp it to the highest stored offset (delete it when nothing
/// was ever stored), durably.
async fn repair_consumer_offsets<I: StorageIo + Clone>(
    key: &PartitionKey,
    log: &PartitionLog<I>,
    offsets: &mut ConsumerOffsets<I>,
) -> Result<(), StorageError> {
    let highest = log.written_offset();
    let stale: Vec<(ConsumerKey, u64)> = offsets
        .iter()
        .filter(|(_, offset)| highest.is_none_or(|highest| *offset > highest))
        .collect();
    for (consumer, offset) in &stale {
        tracing::warn!(
            partition = %key,
            ?consumer,
            offset,
            highest = ?highest,
            "consumer offset points past the recovered log: clamped"
        );
        match highest {
            Some(highest) => offsets.store(*consumer, highest).await?,
            None => {
                offsets.delete(*consumer).await?;
            }
        }
    }
    if !stale.is_empty() {
        offsets.sync().await?;
    }
    Ok(())
}
