//! A partition's segment log as a Raft log, independent of the consensus
//! library: every Raft entry has an index and a term; a data entry is one
//! stored batch of the partition's segment log, a blank entry (a new
//! leader's first), a membership entry (a change of the replica set) and
//! an offsets entry (stored consumer offsets, `offsets.rs`) and a purge
//! entry (the offset below which every replica deletes the messages) have
//! no messages. The messages stay the segment log's alone, with dense
//! offsets; the entry table (`entries.rs`) translates a Raft index to its
//! batch, the configurations (`configs.rs`) hold membership payloads, and
//! the state file (`state.rs`) the vote, the committed entry and the purge
//! point; [`RaftLog`] (`log.rs`) holds the segment log and these files
//! together. The adapter of a consensus library (crate `iggyd-raft`)
//! speaks its types on top of this.
//!
//! Every replica stores the same bytes: the leader stamps a batch (offsets,
//! server time) before it is proposed, and every replica, the leader
//! included, appends it as stamped (`PartitionLog::append_replica`), after
//! checking that it continues the log; a server time older than the log's
//! last batch's is raised to it, which every replica holding the same
//! entries before it does alike.
//!
//! A purge (the consensus library's, once a snapshot covers the entries)
//! drops entry records only; the messages stay until retention deletes
//! their segments. A snapshot installed from a leader past the log's end
//! ([`RaftFiles::install_snapshot`]) drops every entry, and the segment
//! log starts again, empty, at the snapshot's offset
//! (`PartitionLog::restart_at`): the messages before it were deleted by
//! the leader's retention.
//!
//! Crash consistency: data is written before the records that name it, and
//! records are dropped before the data they name, so open only ever finds
//! data without records (cut from the log) or records whose data was lost
//! (cut from the table), never the reverse in the middle. Nothing cut was
//! acknowledged: an acknowledgement needs both written (and, for
//! `persisted`, fsynced) on a majority.
//!
//! Must not: decide what is committed (the consensus library does), serve
//! consumers (the pump caps their reads at what is committed), or panic on
//! file content.

pub mod configs;
pub mod entries;
mod log;
pub mod machine;
pub mod offsets;
pub mod state;
#[cfg(test)]
mod tests;

use crate::StorageError;
use crate::io::StorageIo;
use crate::partition_log::{AppendResult, PartitionLog};
use configs::{Configs, StoredConfig};
use entries::{EntryKind, EntryRecord, EntryTable, MESSAGES_MAX};
use iggyd_wire::batch::ValidBatch;
pub use log::RaftLog;
use offsets::OffsetPayloads;
pub use state::{LogPosition, RaftState};
use std::path::{Path, PathBuf};

/// The directory of a partition that holds its Raft files.
pub const RAFT_DIR: &str = "raft";

/// What an entry carries, to append.
#[derive(Debug)]
pub enum EntryBody<'a> {
    /// A batch stamped by the leader (base offset = the log's next offset).
    Data(&'a ValidBatch),
    Blank,
    /// The consensus library's encoded membership configuration.
    Membership(&'a [u8]),
    /// Stored consumer offsets, as the consensus adapter encodes them.
    Offsets(&'a [u8]),
    /// Every message below `below` (at most where the log ends: all of
    /// them) is to be deleted on every replica. When it names the log's
    /// end, the active segment is sealed first, so the messages to delete
    /// are all in sealed segments and the ones after the entry in new
    /// ones.
    Purge {
        below: u64,
    },
}

/// What an entry carries, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// The stored batch record, as consumers are served it (shared:
    /// cloning an entry copies no batch).
    Data(bytes::Bytes),
    Blank,
    Membership(Vec<u8>),
    Offsets(Vec<u8>),
    /// The messages below this offset are deleted (where the log ended
    /// when the entry was appended, at most).
    Purge(u64),
}

/// One entry read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub index: u64,
    pub term: u64,
    pub body: StoredBody,
}

/// What open found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftRecovery {
    /// Entry records dropped: torn, or naming data the log lost.
    pub entries_dropped: u64,
    /// Messages cut from the log that no entry named (written before a
    /// crash took their records).
    pub messages_cut: u64,
}

/// A Raft log's purge point as a restarted group needs it
/// ([`RaftFiles::purge_point`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgePoint {
    pub index: u64,
    pub term: u64,
    /// Where the messages of the entries through `index` end.
    pub next_offset: u64,
    /// The membership stored for entry `index` (encoded as the group
    /// stores configurations), if any.
    pub membership: Option<Vec<u8>>,
}

/// A partition's Raft files beside its segment log: the entry table, the
/// membership configurations and the state file. The segment log itself is
/// passed to each call, so that its owner (the pump, which serves polls
/// and runs retention on it) keeps it; [`RaftLog`] bundles the two.
pub struct RaftFiles<I: StorageIo> {
    io: I,
    raft_dir: PathBuf,
    entries: EntryTable<I>,
    configs: Configs<I>,
    offsets: OffsetPayloads<I>,
    state: RaftState,
    /// The committed entry changed since the state file was written.
    committed_unsaved: bool,
}

impl<I: StorageIo> std::fmt::Debug for RaftFiles<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftFiles")
            .field("entries", &self.entries)
            .field("state", &self.state)
            .finish()
    }
}

impl<I: StorageIo + Clone> RaftFiles<I> {
    /// Opens (creating when missing) and recovers the Raft files of the
    /// partition whose segment log `log` is (already opened from
    /// `partition_dir`), reconciling the two (see the module doc).
    pub async fn open(
        io: I,
        partition_dir: &Path,
        log: &mut PartitionLog<I>,
    ) -> Result<(RaftFiles<I>, RaftRecovery), StorageError> {
        let raft_dir = partition_dir.join(RAFT_DIR);
        let (mut entries, dropped) = EntryTable::open(io.clone(), &raft_dir).await?;
        let mut configs = Configs::open(io.clone(), &raft_dir).await?;
        let mut offsets = OffsetPayloads::open(io.clone(), &raft_dir).await?;
        let mut state = RaftState::load(&io, &raft_dir).await?;
        let mut recovery = RaftRecovery {
            entries_dropped: dropped,
            messages_cut: 0,
        };
        // The entry files wholly at or below the purge point go, as the
        // purge (or a snapshot's install, past the log's end) that saved
        // it does right after: a crash between the two left them, and
        // the next entry must not follow them.
        if let Some((purged, _)) = state.purged {
            entries.purge_through(purged).await?;
        }
        // The entries whose data or configuration is missing go, with
        // everything after them. Data is lost only as a suffix of the
        // offsets, so the walk back ends at the last data entry whose
        // batch is whole; blank and membership entries after a lost batch
        // go with it.
        let mut keep = entries.last().map(|last| last.index);
        let mut at = keep;
        while let Some(index) = at {
            if entries.first_index().is_none_or(|first| index < first) {
                break;
            }
            let Some(record) = entries.get(index).await? else {
                break;
            };
            let below = index.checked_sub(1);
            match record.kind {
                EntryKind::Data if record.value + u64::from(record.count) <= log.next_offset() => {
                    break;
                }
                EntryKind::Data => keep = below,
                EntryKind::Membership if configs.at(record.value).is_none() => keep = below,
                EntryKind::Offsets if !offsets.holds(record.value) => keep = below,
                EntryKind::Membership
                | EntryKind::Blank
                | EntryKind::Offsets
                | EntryKind::Purge => {}
            }
            at = below;
        }
        let offsets_cut = Self::first_offsets_after(&entries, keep).await?;
        let before = entries.last().map(|last| last.index);
        if keep != before {
            recovery.entries_dropped += before.unwrap_or(0) - keep.unwrap_or(0);
            entries.truncate_after(keep).await?;
        }
        // A configuration stored at the purge point (an installed
        // snapshot's) stays with the entries kept.
        configs
            .truncate_after(keep.max(state.purged.map(|(index, _)| index)))
            .await?;
        if let Some(position) = offsets_cut {
            offsets.truncate_at(position).await?;
        }
        // Messages no entry names go too (those through the purge point
        // are named by the state file).
        let floor = log.first_offset().max(state.purged_next_offset);
        let named_end = Self::data_end(&entries, state.purged, floor).await?;
        if log.next_offset() > named_end {
            recovery.messages_cut = log.next_offset() - named_end;
            log.truncate_from(named_end).await?;
        }
        // The committed entry is a hint saved with the vote, so it may name
        // entries a crash took before they were synced (a node may learn
        // that entries are committed, on a quorum of others, before its
        // own copies are synced); what is left is committed at most: the
        // last entry, else the purge point, else nothing.
        match (state.committed, entries.last()) {
            (Some(committed), Some(last)) if committed.0 > last.index => {
                state.committed = Some((last.index, last.term));
            }
            (Some(committed), None) if state.purged.is_none_or(|purged| committed.0 > purged.0) => {
                state.committed = state.purged;
            }
            _ => {}
        }
        Ok((
            RaftFiles {
                io,
                raft_dir,
                entries,
                configs,
                offsets,
                state,
                committed_unsaved: false,
            },
            recovery,
        ))
    }

    /// The payload position of the first offsets entry after `keep` (all
    /// for `None`), if any.
    async fn first_offsets_after(
        entries: &EntryTable<I>,
        keep: Option<u64>,
    ) -> Result<Option<u64>, StorageError> {
        let Some(last) = entries.last() else {
            return Ok(None);
        };
        let mut at = match keep {
            Some(keep) => keep + 1,
            None => entries.first_index().unwrap_or(0),
        };
        while at <= last.index {
            if let Some(record) = entries.get(at).await?
                && record.kind == EntryKind::Offsets
            {
                return Ok(Some(record.value));
            }
            at += 1;
        }
        Ok(None)
    }

    /// Where the data named by the table ends: one past the last data
    /// entry's last message after the purge point, or `floor` when none is
    /// named (the purge point's messages end there).
    async fn data_end(
        entries: &EntryTable<I>,
        purged: Option<LogPosition>,
        floor: u64,
    ) -> Result<u64, StorageError> {
        let mut index = entries.last().map(|last| last.index);
        while let Some(at) = index {
            if Some(at) < entries.first_index() || purged.is_some_and(|(purged, _)| at <= purged) {
                break;
            }
            match entries.get(at).await? {
                Some(record) if record.kind == EntryKind::Data => {
                    return Ok(record.value + u64::from(record.count));
                }
                Some(_) => index = at.checked_sub(1),
                None => break,
            }
        }
        Ok(floor)
    }

    /// The last entry's position, or the purge point when no entry is left.
    pub fn last(&self) -> Option<LogPosition> {
        match (self.entries.last(), self.state.purged) {
            (Some(last), Some(purged)) if purged.0 >= last.index => Some(purged),
            (Some(last), _) => Some((last.index, last.term)),
            (None, purged) => purged,
        }
    }

    /// The first index the log still holds.
    pub fn first_index(&self) -> Option<u64> {
        self.entries.first_index()
    }

    pub fn purged(&self) -> Option<LogPosition> {
        self.state.purged
    }

    /// The group's state-machine snapshot (`machine.rs`), if one was saved.
    pub async fn machine_snapshot(&self) -> Result<Option<Vec<u8>>, StorageError> {
        machine::load(&self.io, &self.raft_dir).await
    }

    /// Saves the group's state-machine snapshot durably before returning
    /// (the entries it covers may be purged once it is).
    pub async fn save_machine_snapshot(&self, bytes: &[u8]) -> Result<(), StorageError> {
        machine::save(&self.io, &self.raft_dir, bytes).await
    }

    pub fn vote(&self) -> Option<&[u8]> {
        self.state.vote.as_deref()
    }

    /// Saves the vote durably before returning (a node must not forget a
    /// vote it cast).
    pub async fn save_vote(&mut self, vote: &[u8]) -> Result<(), StorageError> {
        self.state.vote = Some(vote.to_vec());
        self.state.save(&self.io, &self.raft_dir).await?;
        self.committed_unsaved = false;
        Ok(())
    }

    pub fn committed(&self) -> Option<LogPosition> {
        self.state.committed
    }

    /// Records the committed entry; saved with the next state write and at
    /// [`Self::close`] (a hint: a restarted node learns it again).
    pub fn set_committed(&mut self, committed: Option<LogPosition>) {
        if self.state.committed != committed {
            self.state.committed = committed;
            self.committed_unsaved = true;
        }
    }

    /// Makes `position` (an entry this log holds, applied, and durable: the
    /// caller synced the log and these files) the committed entry durably
    /// when it is past the one recorded: a restarted group
    /// applies every entry through it again before it serves (a purge
    /// entry's, so that the messages it deleted stay hidden).
    pub async fn save_committed_through(
        &mut self,
        position: LogPosition,
    ) -> Result<(), StorageError> {
        if self
            .state
            .committed
            .is_some_and(|committed| committed.0 >= position.0)
            && !self.committed_unsaved
        {
            return Ok(());
        }
        if self
            .state
            .committed
            .is_none_or(|committed| committed.0 < position.0)
        {
            self.state.committed = Some(position);
        }
        self.state.save(&self.io, &self.raft_dir).await?;
        self.committed_unsaved = false;
        Ok(())
    }

    /// Appends one entry (`index` one past the last) to the files and a
    /// data entry's batch to `log`, whose offsets and stamp it answers.
    /// Nothing is written until [`Self::write_pending`].
    pub async fn append(
        &mut self,
        log: &mut PartitionLog<I>,
        index: u64,
        term: u64,
        body: EntryBody<'_>,
    ) -> Result<Option<AppendResult>, StorageError> {
        if let Some((last_index, last_term)) = self.last()
            && (index != last_index + 1 || term < last_term)
        {
            return Err(StorageError::Layout {
                path: self.raft_dir.clone(),
                reason: format!(
                    "entry {index} (term {term}) does not follow entry {last_index} (term {last_term})"
                ),
            });
        }
        let mut stored = None;
        let record = match body {
            EntryBody::Data(batch) => {
                let count = batch.message_count();
                if count > MESSAGES_MAX {
                    return Err(StorageError::BatchTooLarge {
                        found: u64::from(count),
                        max: u64::from(MESSAGES_MAX),
                    });
                }
                let appended = log.append_replica(batch).await?;
                assert!(appended.last_offset + 1 == appended.base_offset + u64::from(count));
                stored = Some(appended);
                EntryRecord {
                    index,
                    term,
                    kind: EntryKind::Data,
                    value: appended.base_offset,
                    count,
                }
            }
            EntryBody::Blank => EntryRecord {
                index,
                term,
                kind: EntryKind::Blank,
                value: 0,
                count: 0,
            },
            EntryBody::Purge { below } => {
                let end = log.next_offset();
                if below >= end {
                    log.start_segment().await?;
                }
                EntryRecord {
                    index,
                    term,
                    kind: EntryKind::Purge,
                    value: below.min(end),
                    count: 0,
                }
            }
            EntryBody::Membership(payload) => {
                let position = self.configs.append(index, term, payload).await?;
                EntryRecord {
                    index,
                    term,
                    kind: EntryKind::Membership,
                    value: position,
                    count: 0,
                }
            }
            EntryBody::Offsets(payload) => {
                let position = self.offsets.append(index, term, payload).await?;
                EntryRecord {
                    index,
                    term,
                    kind: EntryKind::Offsets,
                    value: position,
                    count: 0,
                }
            }
        };
        self.entries.append(record).await?;
        Ok(stored)
    }

    /// Writes the records appended (after `log`'s data they name: write
    /// the log's pending data first, as [`RaftLog::write_pending`] does).
    pub async fn write_pending(&mut self) -> Result<(), StorageError> {
        self.entries.write_pending().await
    }

    /// Makes the records durable (after `log`'s data is synced).
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        self.entries.write_pending().await?;
        self.entries.sync().await
    }

    /// Whether records wait to be written.
    pub fn has_pending(&self) -> bool {
        self.entries.has_pending()
    }

    /// Where a read from `first` starts: there, or at the first entry the
    /// log still holds.
    pub fn first_readable(&self, first: u64) -> u64 {
        let held = self.first_index().unwrap_or(first);
        let after_purge = self.state.purged.map_or(0, |(index, _)| index + 1);
        first.max(held).max(after_purge)
    }

    /// The entries from [`Self::first_readable`]`(first)` on, before
    /// `end`, until `bytes_max` of data is reached (the entry that reaches
    /// it included). Written data only, as [`Self::get`].
    pub async fn read_range(
        &self,
        log: &PartitionLog<I>,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> Result<Vec<StoredEntry>, StorageError> {
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for index in self.first_readable(first)..end {
            let Some(entry) = self.get(log, index).await? else {
                break;
            };
            if let StoredBody::Data(data) = &entry.body {
                bytes += data.len() as u64;
            }
            entries.push(entry);
            if bytes >= bytes_max {
                break;
            }
        }
        Ok(entries)
    }

    /// The entry at `index` (written data only: write `log`'s pending
    /// data first), or `None` when the log does not hold it (purged, or
    /// past the end).
    pub async fn get(
        &self,
        log: &PartitionLog<I>,
        index: u64,
    ) -> Result<Option<StoredEntry>, StorageError> {
        if self.entries.first_index().is_none_or(|first| index < first)
            || self.state.purged.is_some_and(|(purged, _)| index <= purged)
        {
            return Ok(None);
        }
        let Some(record) = self.entries.get(index).await? else {
            return Ok(None);
        };
        let body = match record.kind {
            EntryKind::Blank => StoredBody::Blank,
            EntryKind::Purge => StoredBody::Purge(record.value),
            EntryKind::Offsets => {
                StoredBody::Offsets(self.offsets.read(record.value, index).await?)
            }
            EntryKind::Membership => match self.configs.at(record.value) {
                Some(config) => StoredBody::Membership(config.payload.clone()),
                None => {
                    return Err(StorageError::Layout {
                        path: self.raft_dir.clone(),
                        reason: format!("entry {index} names a configuration that is gone"),
                    });
                }
            },
            EntryKind::Data => {
                let read = log
                    .read_by_offset(record.value, record.count, u64::MAX)
                    .await?;
                if read.first_offset != Some(record.value)
                    || read.message_count != record.count
                    || read.records != 1
                {
                    return Err(StorageError::Layout {
                        path: self.raft_dir.clone(),
                        reason: format!(
                            "entry {index} names the batch at offset {} ({} messages) that the log does not hold whole",
                            record.value, record.count
                        ),
                    });
                }
                StoredBody::Data(read.records_bytes().into_owned().into())
            }
        };
        Ok(Some(StoredEntry {
            index,
            term: record.term,
            body,
        }))
    }

    /// The messages of data entry `index` as `(base offset, count)`;
    /// `None` for another kind of entry or one the table does not hold.
    pub async fn data_of(&self, index: u64) -> Result<Option<(u64, u32)>, StorageError> {
        if self.entries.first_index().is_none_or(|first| index < first) {
            return Ok(None);
        }
        Ok(self
            .entries
            .get(index)
            .await?
            .filter(|record| record.kind == EntryKind::Data)
            .map(|record| (record.value, record.count)))
    }

    /// The term of entry `index` (also of the purge point), if known.
    pub async fn term_of(&self, index: u64) -> Result<Option<u64>, StorageError> {
        if let Some((purged, term)) = self.state.purged
            && index == purged
        {
            return Ok(Some(term));
        }
        Ok(self.entries.get(index).await?.map(|record| record.term))
    }

    /// The offset one past the last message of the data entries up to
    /// `index` (what consumers may see once `index` is committed).
    pub async fn messages_end_through(
        &self,
        log: &PartitionLog<I>,
        index: u64,
    ) -> Result<u64, StorageError> {
        let mut at = Some(index);
        while let Some(current) = at {
            if self
                .entries
                .first_index()
                .is_none_or(|first| current < first)
            {
                break;
            }
            match self.entries.get(current).await? {
                Some(record) if record.kind == EntryKind::Data => {
                    return Ok(record.value + u64::from(record.count));
                }
                Some(_) => at = current.checked_sub(1),
                None => break,
            }
        }
        Ok(log.first_offset().max(self.state.purged_next_offset))
    }

    /// Drops every entry after `keep` (all for `None`): the records and
    /// configurations first, then the messages they named. `log`'s pending
    /// data must be written first.
    pub async fn truncate_after(
        &mut self,
        log: &mut PartitionLog<I>,
        keep: Option<u64>,
    ) -> Result<(), StorageError> {
        if let (Some(keep), Some((committed, _))) = (keep, self.state.committed) {
            assert!(
                keep >= committed,
                "a truncation after {keep} below the committed {committed}"
            );
        }
        self.entries.write_pending().await?;
        let first_cut = match keep {
            Some(keep) => keep + 1,
            None => self.entries.first_index().unwrap_or(0),
        };
        let offsets_cut = Self::first_offsets_after(&self.entries, keep).await?;
        // The first dropped data entry's offset: where the messages end.
        let mut cut_offset = None;
        if let Some(last) = self.entries.last() {
            let mut at = first_cut;
            while at <= last.index {
                if let Some(record) = self.entries.get(at).await?
                    && record.kind == EntryKind::Data
                {
                    cut_offset = Some(record.value);
                    break;
                }
                at += 1;
            }
        }
        self.entries.truncate_after(keep).await?;
        self.configs.truncate_after(keep).await?;
        if let Some(position) = offsets_cut {
            self.offsets.truncate_at(position).await?;
        }
        if let Some(offset) = cut_offset {
            log.truncate_from(offset).await?;
        }
        Ok(())
    }

    /// Marks every entry through `position` purged (the consensus library
    /// no longer needs them); entry files wholly below it are removed. The
    /// messages stay: retention deletes those. `log`'s pending data must be
    /// written first.
    pub async fn purge_through(
        &mut self,
        log: &PartitionLog<I>,
        position: LogPosition,
    ) -> Result<(), StorageError> {
        if self
            .state
            .purged
            .is_some_and(|(purged, _)| purged >= position.0)
        {
            return Ok(());
        }
        self.entries.write_pending().await?;
        let through = position
            .0
            .min(self.entries.last().map_or(position.0, |last| last.index));
        self.state.purged_next_offset = self.messages_end_through(log, through).await?;
        self.state.purged = Some(position);
        self.state.save(&self.io, &self.raft_dir).await?;
        self.committed_unsaved = false;
        self.entries.purge_through(position.0).await
    }

    /// The index of the data entry whose batch starts at `offset`, if the
    /// log holds one after its purge point (a binary search over the
    /// entries: data entries' offsets grow with their index).
    pub async fn data_entry_at(&self, offset: u64) -> Result<Option<u64>, StorageError> {
        let (Some(first), Some(last)) = (self.entries.first_index(), self.entries.last()) else {
            return Ok(None);
        };
        let mut low = first.max(self.state.purged.map_or(0, |(index, _)| index + 1));
        let mut high = last.index;
        while low <= high {
            let middle = low + (high - low) / 2;
            // The first data entry at or after the middle, up to `high`.
            let mut at = middle;
            let mut found = None;
            while at <= high {
                match self.entries.get(at).await? {
                    Some(record) if record.kind == EntryKind::Data => {
                        found = Some(record);
                        break;
                    }
                    Some(_) => at += 1,
                    None => return Ok(None),
                }
            }
            match found {
                Some(record) if record.value == offset => return Ok(Some(record.index)),
                Some(record) if record.value < offset => low = record.index + 1,
                // Only later data, or none from the middle on: look below.
                _ => match middle.checked_sub(1) {
                    Some(below) => high = below,
                    None => break,
                },
            }
        }
        Ok(None)
    }

    /// One past the last message of the data entries through the purge
    /// point (where a log purged past its end starts again).
    pub fn purged_next_offset(&self) -> u64 {
        self.state.purged_next_offset
    }

    /// Where `log` must start again, if it must: a crash came between an
    /// installed snapshot's save and the log's restart at its offset.
    pub fn restart_needed(&self, log: &PartitionLog<I>) -> Option<u64> {
        (self.state.purged.is_some() && log.next_offset() < self.state.purged_next_offset)
            .then_some(self.state.purged_next_offset)
    }

    /// Where a group restarted on this log starts: its purge point (index
    /// and term), where the messages through it end (the first offset the
    /// log may hold) and the membership stored for it (the snapshot the
    /// group starts from); `None` when nothing was purged.
    pub async fn purge_point(
        &self,
        log: &PartitionLog<I>,
    ) -> Result<Option<PurgePoint>, StorageError> {
        let Some((index, term)) = self.purged() else {
            return Ok(None);
        };
        Ok(Some(PurgePoint {
            index,
            term,
            next_offset: self.messages_end_through(log, index).await?,
            membership: self
                .membership_through(index)
                .map(|config| config.payload.clone()),
        }))
    }

    /// The membership configuration in force at entry `index`: the last
    /// one stored at or before it.
    pub fn membership_through(&self, index: u64) -> Option<&StoredConfig> {
        self.configs
            .all()
            .iter()
            .rev()
            .find(|config| config.index <= index)
    }

    /// Installs the group's snapshot of `position`, past every entry this
    /// log holds: the entries go, the purge point becomes `position` with
    /// its messages ending at `next_offset`, and `membership` (the
    /// snapshot's configuration) is stored as entry `position`'s, so a
    /// restart rebuilds the snapshot. The state is saved before any entry
    /// file goes (a crash between keeps the entries below the purge point,
    /// which reads skip). The caller then starts `log` again at
    /// `next_offset` (`PartitionLog::restart_at`), which [`Self::open`]'s
    /// caller repeats when a crash came first.
    pub async fn install_snapshot(
        &mut self,
        position: LogPosition,
        next_offset: u64,
        membership: &[u8],
    ) -> Result<(), StorageError> {
        if let Some(last) = self.entries.last()
            && last.index >= position.0
        {
            return Err(StorageError::Layout {
                path: self.raft_dir.clone(),
                reason: format!(
                    "a snapshot of entry {} installed where the log holds entry {}",
                    position.0, last.index
                ),
            });
        }
        self.entries.write_pending().await?;
        if self
            .membership_through(position.0)
            .is_none_or(|config| config.payload != membership)
        {
            self.configs
                .append(position.0, position.1, membership)
                .await?;
        }
        self.state.purged = Some(position);
        self.state.purged_next_offset = next_offset;
        // A snapshot holds only committed entries.
        if self
            .state
            .committed
            .is_none_or(|(committed, _)| committed < position.0)
        {
            self.state.committed = Some(position);
        }
        self.state.save(&self.io, &self.raft_dir).await?;
        self.committed_unsaved = false;
        self.entries.purge_through(position.0).await
    }

    /// Shutdown: the records durable (after `log`'s data), the committed
    /// entry saved.
    pub async fn close(&mut self) -> Result<(), StorageError> {
        self.sync().await?;
        if self.committed_unsaved {
            self.state.save(&self.io, &self.raft_dir).await?;
            self.committed_unsaved = false;
        }
        Ok(())
    }
}
