//! The plain in-memory model the pump simulation checks the pump against:
//! one `PartitionModel` per partition, with its segments, messages, the
//! three watermarks (assigned, written, durable), the flush policy's
//! counters, the background sync in flight and the consumer offsets. It
//! does no I/O and knows nothing of the pump's code; `mod.rs` drives both.

use crate::shard::partition::{Durability, PartitionKey, PartitionSettings};
use iggyd_storage::DeletedSegments;
use iggyd_storage::consumer_offsets::ConsumerKey;
use std::collections::BTreeMap;

/// One message as the model remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Message {
    pub offset: u64,
    /// Server timestamp of its batch.
    pub timestamp: u64,
    /// The frame bytes (header, payload, user headers) as produced.
    pub frame: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(super) struct BatchModel {
    pub base_offset: u64,
    pub messages: u64,
    pub bytes: u64,
    pub timestamp: u64,
}

#[derive(Debug, Clone)]
pub(super) struct SegmentModel {
    pub start_offset: u64,
    /// Appended batches, pending ones included (only the active segment
    /// ever holds pending batches).
    pub batches: Vec<BatchModel>,
}

impl SegmentModel {
    pub fn empty(start_offset: u64) -> SegmentModel {
        SegmentModel {
            start_offset,
            batches: Vec::new(),
        }
    }

    pub fn next_offset(&self) -> u64 {
        self.batches.last().map_or(self.start_offset, |batch| {
            batch.base_offset + batch.messages
        })
    }

    /// Bytes of the batches below `written` (all of a sealed segment).
    pub fn written_bytes(&self, written: u64) -> u64 {
        self.batches
            .iter()
            .filter(|batch| batch.base_offset < written)
            .map(|batch| batch.bytes)
            .sum()
    }

    pub fn size_bytes(&self) -> u64 {
        self.batches.iter().map(|batch| batch.bytes).sum()
    }

    pub fn last_timestamp(&self) -> u64 {
        self.batches.last().map_or(0, |batch| batch.timestamp)
    }
}

/// A background sync in flight: what it covers, and whether a purge made
/// it stale (its completion then changes nothing).
#[derive(Debug, Clone, Copy)]
pub(super) struct BackgroundModel {
    pub covers_next_offset: u64,
    pub covers_messages: u64,
    pub covers_bytes: u64,
    pub stale: bool,
}

/// The plain model of one partition.
#[derive(Debug)]
pub(super) struct PartitionModel {
    pub key: PartitionKey,
    pub shard: usize,
    pub settings: PartitionSettings,
    /// In offset order, the last one active. Never empty.
    pub segments: Vec<SegmentModel>,
    /// Every appended message from the first offset on (pending included).
    pub messages: Vec<Message>,
    /// One past the highest written offset (the write completed).
    pub written_next_offset: u64,
    /// One past the highest fsynced offset.
    pub durable_next_offset: u64,
    /// One past the highest `persisted` append acknowledged in this epoch.
    pub acked_durable_next_offset: u64,
    /// One past the highest `replicated` append acknowledged in this epoch:
    /// it must survive a process crash.
    pub acked_written_next_offset: u64,
    /// Monotone totals of written and synced data (the flush policy).
    pub written_messages: u64,
    pub written_bytes: u64,
    pub synced_messages: u64,
    pub synced_bytes: u64,
    /// The partition's log is in the pump's set for the next foreground
    /// sync.
    pub log_sync_requested: bool,
    /// A background sync was asked for (flush tick or flush policy).
    pub background_requested: bool,
    pub background: Option<BackgroundModel>,
    pub offsets: BTreeMap<ConsumerKey, u64>,
    pub offsets_durable: BTreeMap<ConsumerKey, u64>,
    /// Stores (`Some`) and deletes (`None`) since the last offsets fsync.
    pub offsets_unsynced: Vec<(ConsumerKey, Option<u64>)>,
    pub offsets_sync_requested: bool,
    /// Bumped by purge: acks parked before it refer to purged data.
    pub purges: u64,
    /// Bumped when a failed write dropped the pending batches.
    pub rollbacks: u64,
}

impl PartitionModel {
    pub fn new(key: PartitionKey, shard: usize, settings: PartitionSettings) -> PartitionModel {
        PartitionModel {
            key,
            shard,
            settings,
            segments: vec![SegmentModel::empty(0)],
            messages: Vec::new(),
            written_next_offset: 0,
            durable_next_offset: 0,
            acked_durable_next_offset: 0,
            acked_written_next_offset: 0,
            written_messages: 0,
            written_bytes: 0,
            synced_messages: 0,
            synced_bytes: 0,
            log_sync_requested: false,
            background_requested: false,
            background: None,
            offsets: BTreeMap::new(),
            offsets_durable: BTreeMap::new(),
            offsets_unsynced: Vec::new(),
            offsets_sync_requested: false,
            purges: 0,
            rollbacks: 0,
        }
    }

    pub fn first_offset(&self) -> u64 {
        self.segments[0].start_offset
    }

    /// One past the highest assigned offset (pending batches included).
    pub fn next_offset(&self) -> u64 {
        self.segments.last().expect("active segment").next_offset()
    }

    pub fn persisted(&self) -> bool {
        self.settings.durability == Durability::Persisted
    }

    pub fn has_pending(&self) -> bool {
        self.next_offset() > self.written_next_offset
    }

    pub fn unsynced_messages(&self) -> u64 {
        self.written_messages - self.synced_messages
    }

    pub fn unsynced_bytes(&self) -> u64 {
        self.written_bytes - self.synced_bytes
    }

    /// One past the highest offset a poll may see.
    pub fn visible_next_offset(&self) -> u64 {
        if self.persisted() {
            self.durable_next_offset
        } else {
            self.written_next_offset
        }
    }

    pub fn messages_from(&self, start: u64, count: u64) -> Vec<Message> {
        let from = (start - self.first_offset()) as usize;
        let to = from + count as usize;
        self.messages[from..to].to_vec()
    }

    /// The written messages (what reads and reports see).
    pub fn written_messages_list(&self) -> &[Message] {
        let written = (self.written_next_offset - self.first_offset()) as usize;
        &self.messages[..written.min(self.messages.len())]
    }

    pub fn is_batch_boundary(&self, offset: u64) -> bool {
        self.segments.iter().any(|segment| {
            segment.start_offset == offset
                || segment
                    .batches
                    .iter()
                    .any(|batch| batch.base_offset + batch.messages == offset)
        })
    }

    fn pending_batches(&self) -> impl Iterator<Item = &BatchModel> {
        let written = self.written_next_offset;
        self.segments
            .last()
            .expect("active segment")
            .batches
            .iter()
            .filter(move |batch| batch.base_offset >= written)
    }

    /// The pending batches were written (one coalesced write).
    pub fn write(&mut self) {
        let (messages, bytes) = self
            .pending_batches()
            .fold((0, 0), |(messages, bytes), batch| {
                (messages + batch.messages, bytes + batch.bytes)
            });
        self.written_messages += messages;
        self.written_bytes += bytes;
        self.written_next_offset = self.next_offset();
    }

    /// A failed write dropped every pending batch.
    pub fn drop_pending(&mut self) {
        let written = self.written_next_offset;
        let active = self.segments.last_mut().expect("active segment");
        active.batches.retain(|batch| batch.base_offset < written);
        let keep = (written - self.first_offset()) as usize;
        self.messages.truncate(keep);
        self.rollbacks += 1;
    }

    /// A foreground sync: everything written is durable.
    pub fn sync_log(&mut self) {
        self.durable_next_offset = self.written_next_offset;
        self.synced_messages = self.written_messages;
        self.synced_bytes = self.written_bytes;
    }

    /// A background sync starts: it covers what is written now.
    pub fn start_background(&mut self) {
        assert!(self.background.is_none());
        self.background = Some(BackgroundModel {
            covers_next_offset: self.written_next_offset,
            covers_messages: self.written_messages,
            covers_bytes: self.written_bytes,
            stale: false,
        });
    }

    /// The background sync completed.
    pub fn finish_background(&mut self) {
        let background = self.background.take().expect("a background sync runs");
        if background.stale {
            return;
        }
        self.durable_next_offset = self.durable_next_offset.max(background.covers_next_offset);
        self.synced_messages = self.synced_messages.max(background.covers_messages);
        self.synced_bytes = self.synced_bytes.max(background.covers_bytes);
    }

    pub fn sync_offsets(&mut self) {
        self.offsets_durable = self.offsets.clone();
        self.offsets_unsynced.clear();
    }

    pub fn store_offset(&mut self, consumer: ConsumerKey, offset: Option<u64>) {
        match offset {
            Some(offset) => self.offsets.insert(consumer, offset),
            None => self.offsets.remove(&consumer),
        };
        self.offsets_unsynced.push((consumer, offset));
    }

    pub fn flush_due(&self) -> bool {
        self.unsynced_messages() >= self.settings.messages_required_to_save
            || self.unsynced_bytes() >= self.settings.size_required_to_save_bytes
    }

    pub fn purge(&mut self) {
        self.segments = vec![SegmentModel::empty(0)];
        self.messages.clear();
        self.written_next_offset = 0;
        self.durable_next_offset = 0;
        self.acked_durable_next_offset = 0;
        self.acked_written_next_offset = 0;
        self.synced_messages = self.written_messages;
        self.synced_bytes = self.written_bytes;
        self.log_sync_requested = false;
        self.background_requested = false;
        if let Some(background) = &mut self.background {
            background.stale = true;
        }
        self.offsets.clear();
        self.offsets_durable.clear();
        self.offsets_unsynced.clear();
        self.offsets_sync_requested = false;
        self.purges += 1;
    }

    /// Deletes the `count` oldest sealed segments; returns what went.
    pub fn delete_oldest(&mut self, count: usize) -> DeletedSegments {
        let deletable = count.min(self.segments.len() - 1);
        let mut deleted = DeletedSegments::default();
        for segment in self.segments.drain(..deletable) {
            deleted.segments += 1;
            deleted.messages += segment.next_offset() - segment.start_offset;
            deleted.bytes += segment.size_bytes();
        }
        let drop = (self.first_offset() - self.messages.first().map_or(0, |m| m.offset)) as usize;
        let drop = drop.min(self.messages.len());
        self.messages.drain(..drop);
        assert!(
            self.messages
                .first()
                .is_none_or(|message| message.offset == self.first_offset())
        );
        deleted
    }

    /// A restart recovered the log to `recovered`: drop everything after it
    /// (pending batches always, unsynced written ones after a power loss).
    pub fn recover_to(&mut self, recovered: u64) {
        for segment in &mut self.segments {
            segment
                .batches
                .retain(|batch| batch.base_offset + batch.messages <= recovered);
        }
        assert!(
            self.segments
                .iter()
                .all(|segment| segment.start_offset <= recovered)
        );
        let keep = (recovered - self.first_offset()) as usize;
        self.messages.truncate(keep);
        self.written_next_offset = recovered;
        self.durable_next_offset = recovered;
        self.acked_durable_next_offset = self.acked_durable_next_offset.min(recovered);
        self.acked_written_next_offset = self.acked_written_next_offset.min(recovered);
        self.synced_messages = self.written_messages;
        self.synced_bytes = self.written_bytes;
        self.log_sync_requested = false;
        self.background_requested = false;
        self.background = None;
        self.offsets_sync_requested = false;
    }
}
