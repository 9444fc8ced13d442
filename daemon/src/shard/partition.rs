//! One partition as its owner shard holds it: the partition log, its consumer
//! offsets, and the topic settings that decide durability and retention. Only
//! the pump (`shard/pump.rs`) creates, mutates and drops these values; nothing
//! here is shared with another thread.

use iggyd_storage::consumer_offsets::ConsumerOffsets;
use iggyd_storage::{PartitionLog, StorageIo};
use std::path::{Path, PathBuf};

/// Identifies a partition across the daemon: numeric stream, topic and
/// partition ids as metadata assigned them (reused on the wire after a
/// delete), and the partition's storage id (never reused), so a partition
/// deleted and created again under the same ids is another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
    pub storage_id: u64,
}

impl PartitionKey {
    /// `data_dir/partitions/<storage_id>` (see `storage::layout`); a
    /// cluster node's metadata log in `data_dir/cluster/metadata`.
    pub fn dir(&self, data_dir: &Path) -> PathBuf {
        if self.storage_id == super::replica::METADATA_STORAGE_ID {
            return data_dir.join("cluster").join("metadata");
        }
        iggyd_storage::layout::partition_dir(data_dir, self.storage_id)
    }
}

impl std::fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{} (storage {})",
            self.stream, self.topic, self.partition, self.storage_id
        )
    }
}

pub use iggyd_metadata::options::Durability;

/// Topic settings a partition's owner needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionSettings {
    pub durability: Durability,
    pub offset_durability: Durability,
    pub segment_size_bytes: u64,
    /// `replicated`: fsync once this many messages are unsynced.
    pub messages_required_to_save: u64,
    /// `replicated`: fsync once this many bytes are unsynced.
    pub size_required_to_save_bytes: u64,
    /// Sealed segments whose newest message is older than this are deleted.
    pub message_expiry_us: Option<u64>,
    /// This partition's share of the topic's `max_topic_size`: the oldest
    /// sealed segments are deleted while the partition holds more than 90 %
    /// of it. `None` = unlimited.
    pub max_size_bytes: Option<u64>,
}

impl PartitionSettings {
    /// What the owner shard needs from a topic: its options, and its
    /// partition count for the size share.
    ///
    /// `max_topic_size` is split evenly: each partition may hold
    /// `max_topic_size / partitions` bytes (Apache's rule too). Each owner can
    /// then enforce the cap alone, with no cross-shard coordination; the
    /// price is that a skewed topic (one hot partition) is trimmed before the
    /// topic as a whole reaches the cap. The shares change with the partition
    /// count, so creating or deleting partitions refreshes every partition's
    /// settings.
    pub fn from_topic(topic: &iggyd_metadata::Topic) -> PartitionSettings {
        let options = &topic.options;
        let partitions = u64::from(topic.partitions_count()).max(1);
        PartitionSettings {
            durability: options.durability,
            offset_durability: options.consumer_offset_durability,
            segment_size_bytes: options.segment_size_bytes,
            messages_required_to_save: u64::from(options.messages_required_to_save),
            size_required_to_save_bytes: options.size_of_messages_required_to_save_bytes,
            message_expiry_us: options.message_expiry_us,
            max_size_bytes: options
                .max_topic_size_bytes
                .map(|max_topic_size| max_topic_size / partitions),
        }
    }
}

impl Default for PartitionSettings {
    fn default() -> Self {
        PartitionSettings {
            durability: Durability::Persisted,
            offset_durability: Durability::Persisted,
            segment_size_bytes: crate::limits::metadata::SEGMENT_SIZE_DEFAULT_BYTES,
            messages_required_to_save: 1024,
            size_required_to_save_bytes: 1024 * 1024,
            message_expiry_us: None,
            max_size_bytes: None,
        }
    }
}

pub struct Partition<I: StorageIo + Clone> {
    pub key: PartitionKey,
    pub log: PartitionLog<I>,
    pub offsets: ConsumerOffsets<I>,
    pub settings: PartitionSettings,
    /// A replicated partition's Raft side; `None` on a single node.
    pub replica: Option<Replica<I>>,
}

/// What a replicated partition's owner keeps beside its log: the Raft
/// files and its group (which knows how far consumers may read).
pub struct Replica<I: StorageIo + Clone> {
    pub files: iggyd_storage::raft::RaftFiles<I>,
    pub group: std::rc::Rc<dyn super::replica::Group>,
}

impl<I: StorageIo + Clone> Partition<I> {
    /// The highest offset a consumer may read now, if any: what is
    /// written (`replicated`) or durable (`persisted`), and on a
    /// replicated partition also committed.
    pub fn highest_visible(&self) -> Option<u64> {
        self.highest_local_or_committed()
    }

    /// The first offset a consumer may read: the log's first, or on a
    /// replicated partition its group's floor when higher (the messages
    /// below a purge applied here are not served while they are deleted).
    pub fn first_readable(&self) -> u64 {
        let first = self.log.first_offset();
        match &self.replica {
            None => first,
            Some(replica) => first.max(replica.group.floor()),
        }
    }

    fn highest_local_or_committed(&self) -> Option<u64> {
        let local = match self.settings.durability {
            Durability::Persisted => self.log.durable_offset(),
            Durability::Replicated => self.log.written_offset(),
        };
        match &self.replica {
            None => local,
            Some(replica) => {
                let committed = replica.group.committed_end().checked_sub(1);
                match (local, committed) {
                    (Some(local), Some(committed)) => Some(local.min(committed)),
                    _ => None,
                }
            }
        }
    }
}

impl<I: StorageIo + Clone> std::fmt::Debug for Partition<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("key", &self.key)
            .field("log", &self.log)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<I: StorageIo + Clone> Partition<I> {
    /// True when the flush policy of a `replicated` topic asks for an fsync.
    pub fn flush_due(&self) -> bool {
        self.log.unsynced_messages() >= self.settings.messages_required_to_save
            || self.log.unsynced_bytes() >= self.settings.size_required_to_save_bytes
    }
}
