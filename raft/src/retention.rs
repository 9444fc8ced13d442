//! Retention on a replicated partition, decided the same way by the
//! daemon's pump and the cluster simulation: of the oldest sealed
//! segments retention wants gone, those whose messages end at or before
//! the log's purge point may go now (the entries naming them are purged);
//! for the rest, the group is asked for a snapshot at the last committed
//! segment end among them (the entry before the batch that starts there),
//! after which openraft purges the entries through it and a later check
//! deletes them.
//!
//! A purge applied (`crate::state_machine::AppliedPurge`) is decided the
//! same way: the snapshot it needs ([`purge_point`]) and, once the entries
//! through it are purged, the sealed segments below the group's floor that
//! may go ([`purged_deletable`]).
//!
//! Must not: delete anything (the caller does, in the order this gives),
//! or ask for a snapshot past what is committed.

use crate::state_machine::{AppliedPurge, SnapshotPoint};
use iggyd_storage::StorageError;
use iggyd_storage::io::StorageIo;
use iggyd_storage::partition_log::SegmentInfo;
use iggyd_storage::raft::RaftFiles;

/// What retention may do on a replicated partition now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPlan {
    /// How many of the oldest sealed segments may be deleted now.
    pub deletable: usize,
    /// Where the group should take a snapshot, so that more may go later.
    pub snapshot: Option<SnapshotPoint>,
}

/// The plan for deleting the `count` oldest of `sealed` (oldest first)
/// from a replicated partition whose Raft files are `files` and whose
/// committed messages end at `committed_end`.
pub async fn plan<I: StorageIo + Clone>(
    files: &RaftFiles<I>,
    sealed: &[SegmentInfo],
    count: usize,
    committed_end: u64,
) -> Result<RetentionPlan, StorageError> {
    let purged_end = if files.purged().is_some() {
        files.purged_next_offset()
    } else {
        0
    };
    let wanted = sealed.get(..count.min(sealed.len())).unwrap_or_default();
    let deletable = wanted
        .iter()
        .take_while(|segment| segment.next_offset <= purged_end)
        .count();
    let mut plan = RetentionPlan {
        deletable,
        snapshot: None,
    };
    let Some(end) = wanted
        .iter()
        .rev()
        .map(|segment| segment.next_offset)
        .find(|end| *end > purged_end && *end <= committed_end)
    else {
        return Ok(plan);
    };
    // The batch that starts where the deleted messages end, and the entry
    // before it: the snapshot's point.
    let Some(index) = files
        .data_entry_at(end)
        .await?
        .and_then(|first_kept| first_kept.checked_sub(1))
    else {
        return Ok(plan);
    };
    if let Some(term) = files.term_of(index).await? {
        plan.snapshot = Some(SnapshotPoint {
            index,
            term,
            next_offset: end,
        });
    }
    Ok(plan)
}

/// Where the group must take a snapshot so that `purge`'s messages may
/// go: at its own entry when it purges every message before it (its
/// append sealed the active segment), else at the entry before the batch
/// that starts where the purged messages end; `None` when the entries
/// naming them are purged already (or no batch starts there: nothing
/// more can go).
pub async fn purge_point<I: StorageIo + Clone>(
    files: &RaftFiles<I>,
    purge: &AppliedPurge,
) -> Result<Option<SnapshotPoint>, StorageError> {
    if purge.purges_all() {
        return Ok(Some(SnapshotPoint {
            index: purge.index,
            term: purge.term,
            next_offset: purge.messages_end,
        }));
    }
    let Some(index) = files
        .data_entry_at(purge.below)
        .await?
        .and_then(|first_kept| first_kept.checked_sub(1))
    else {
        return Ok(None);
    };
    Ok(files.term_of(index).await?.map(|term| SnapshotPoint {
        index,
        term,
        next_offset: purge.below,
    }))
}

/// How many of the oldest `sealed` segments may go now because a purge
/// (or the snapshot the group started from or installed) put them below
/// `floor`: those ending at or before it whose entries are purged.
pub fn purged_deletable<I: StorageIo + Clone>(
    files: &RaftFiles<I>,
    sealed: &[SegmentInfo],
    floor: u64,
) -> usize {
    if files.purged().is_none() {
        return 0;
    }
    let end = floor.min(files.purged_next_offset());
    sealed
        .iter()
        .take_while(|segment| segment.next_offset <= end)
        .count()
}
