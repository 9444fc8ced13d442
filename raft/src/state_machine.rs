//! openraft's `RaftStateMachine` for a partition: the log is the state, so
//! applying an entry only moves what is committed forward. A data entry's
//! messages become visible to consumers (`committed_next_offset`, which the
//! pump caps polls at: a consumer never reads a message a failover could
//! take back) and its proposer hears the offsets they got; a membership
//! entry becomes the applied membership; an offsets entry's writes
//! (stored consumer offsets, `crate::offsets`) are queued, in log order,
//! for the partition's offsets store (`Applied::take_offsets`), and its
//! owner is told (`Applied::set_offsets_notify`). A snapshot is the applied
//! position and membership (the messages are the log's; a follower too far
//! behind for the log gets sealed segments, a later step).
//!
//! Must not: change the log (the log store does), or panic on an entry.

use crate::{Appended, LogId, PartitionRaft, PartitionTypes, Proposal};
use futures_util::{Stream, TryStreamExt};
use iggyd_wire::batch::BatchHeader;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};

/// The last snapshot built or installed: its metadata and its bytes.
type BuiltSnapshot<C> = (SnapshotMetaOf<C>, Vec<u8>);
use crate::offsets::OffsetWrite;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::io::Cursor;
use std::rc::Rc;

/// What a partition's group has applied, shared with its readers.
#[derive(Debug, Default)]
pub struct Applied {
    /// One past the last committed message: consumers read below it.
    pub committed_next_offset: Cell<u64>,
    /// The data entries applied recently, and the proposals in flight
    /// here, for resolving resends (`crate::replay`).
    pub replays: crate::replay::Replays,
    /// Offsets entries applied and not yet taken by the offsets store:
    /// `(index, writes)` in log order.
    offsets: RefCell<VecDeque<(u64, Vec<OffsetWrite>)>>,
    offsets_notify: OffsetsNotify,
}

/// Called when an offsets entry is applied.
#[derive(Default)]
struct OffsetsNotify(RefCell<Option<Box<dyn Fn()>>>);

impl std::fmt::Debug for OffsetsNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffsetsNotify")
    }
}

impl Applied {
    /// The offsets entries applied since the last call, in log order, each
    /// with its index (the store skips what it already holds).
    pub fn take_offsets(&self) -> Vec<(u64, Vec<OffsetWrite>)> {
        self.offsets.borrow_mut().drain(..).collect()
    }

    /// Whether offsets entries wait to be taken.
    pub fn has_offsets(&self) -> bool {
        !self.offsets.borrow().is_empty()
    }

    /// `notify` runs each time an offsets entry is applied (the owner of
    /// the offsets store takes them).
    pub fn set_offsets_notify(&self, notify: Box<dyn Fn()>) {
        *self.offsets_notify.0.borrow_mut() = Some(notify);
    }

    fn offsets_applied(&self, index: u64, writes: Vec<OffsetWrite>) {
        self.offsets.borrow_mut().push_back((index, writes));
        if let Some(notify) = self.offsets_notify.0.borrow().as_ref() {
            notify();
        }
    }
}

/// The state machine of one partition's group, for the type configuration
/// `C` (production's by default, or the cluster simulation's).
#[derive(Debug)]
pub struct StateMachine<C: PartitionTypes = PartitionRaft> {
    applied: Rc<Applied>,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<C>,
    /// The last snapshot built or installed, shared with the builders
    /// (clones of this state machine at the time they were asked for).
    snapshot: Rc<RefCell<Option<BuiltSnapshot<C>>>>,
}

impl<C: PartitionTypes> Clone for StateMachine<C> {
    fn clone(&self) -> Self {
        StateMachine {
            applied: self.applied.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshot: self.snapshot.clone(),
        }
    }
}

impl<C: PartitionTypes> StateMachine<C> {
    /// A state machine that has applied nothing yet; `applied` is where its
    /// readers see what it has, and must start at the log's first offset.
    pub fn new(applied: Rc<Applied>) -> StateMachine<C> {
        StateMachine {
            applied,
            last_applied: None,
            membership: StoredMembershipOf::<C>::default(),
            snapshot: Rc::new(RefCell::new(None)),
        }
    }

    pub fn applied(&self) -> Rc<Applied> {
        self.applied.clone()
    }

    /// The snapshot's bytes: `[has u8][term u64][index u64]` of the last
    /// applied entry and the committed next offset.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(25);
        match &self.last_applied {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(&id.leader_id.term.to_le_bytes());
                out.extend_from_slice(&id.index.to_le_bytes());
            }
            None => out.extend_from_slice(&[0; 17]),
        }
        out.extend_from_slice(&self.applied.committed_next_offset.get().to_le_bytes());
        out
    }
}

impl<C: PartitionTypes> RaftSnapshotBuilder<C> for StateMachine<C> {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<C, Cursor<Vec<u8>>>, io::Error> {
        let meta = SnapshotMetaOf::<C> {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
        };
        let data = self.encode();
        *self.snapshot.borrow_mut() = Some((meta.clone(), data.clone()));
        Ok(SnapshotOf::<C, Cursor<Vec<u8>>> {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

impl<C: PartitionTypes> RaftStateMachine<C> for StateMachine<C> {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembershipOf<C>), io::Error> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            if let Some(last) = self.last_applied {
                assert!(
                    entry.log_id.index > last.index,
                    "applied {} after {}",
                    entry.log_id.index,
                    last.index
                );
            }
            self.last_applied = Some(entry.log_id);
            self.applied.replays.applied(entry.log_id.index, None);
            let response = match &entry.payload {
                EntryPayload::Blank => Appended::default(),
                EntryPayload::Normal(Proposal::Offsets(bytes)) => {
                    let writes = crate::offsets::decode(bytes).map_err(|error| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("entry {}: {error}", entry.log_id.index),
                        )
                    })?;
                    self.applied.offsets_applied(entry.log_id.index, writes);
                    Appended::default()
                }
                EntryPayload::Normal(Proposal::Batch(bytes)) => {
                    let header = BatchHeader::decode(bytes).map_err(|error| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("entry {}: {error}", entry.log_id.index),
                        )
                    })?;
                    let next = header.base_offset + u64::from(header.message_count);
                    // Committed messages only grow, densely.
                    assert!(
                        header.base_offset == self.applied.committed_next_offset.get(),
                        "entry {} commits offset {} where {} was next",
                        entry.log_id.index,
                        header.base_offset,
                        self.applied.committed_next_offset.get()
                    );
                    self.applied.committed_next_offset.set(next);
                    let appended = Appended {
                        base_offset: header.base_offset,
                        last_offset: next - 1,
                    };
                    if let Some(fingerprint) = crate::replay::fingerprint(bytes) {
                        self.applied
                            .replays
                            .applied(entry.log_id.index, Some((fingerprint, appended)));
                    }
                    appended
                }
                EntryPayload::Membership(membership) => {
                    self.membership =
                        StoredMembershipOf::<C>::new(Some(entry.log_id), membership.clone());
                    Appended::default()
                }
            };
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<C>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        let next = data
            .get(17..25)
            .and_then(|bytes| bytes.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a damaged snapshot"))?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.applied.committed_next_offset.set(next);
        *self.snapshot.borrow_mut() = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<C, Self::SnapshotData>>, io::Error> {
        Ok(self
            .snapshot
            .borrow()
            .as_ref()
            .map(|(meta, data)| SnapshotOf::<C, Cursor<Vec<u8>>> {
                meta: meta.clone(),
                snapshot: Cursor::new(data.clone()),
            }))
    }
}
