//! openraft's `RaftStateMachine` for a partition: the log is the state, so
//! applying an entry only moves what is committed forward. A data entry's
//! messages become visible to consumers (`committed_next_offset`, which the
//! pump caps polls at: a consumer never reads a message a failover could
//! take back) and its proposer hears the offsets they got; a membership
//! entry becomes the applied membership; an offsets entry's writes
//! (stored consumer offsets, `crate::offsets`) are queued, in log order,
//! for the partition's offsets store (`Applied::take_offsets`), and its
//! owner is told (`Applied::set_offsets_notify`); a purge entry raises the
//! partition's floor (`Applied::floor`: consumers read nothing below it
//! from then on, on every replica) and is queued for its owner
//! (`Applied::take_purges`), which asks for the snapshot that lets it
//! delete the messages below (told the same way).
//!
//! A snapshot is taken where retention wants to delete messages: at a
//! point its owner asks for (`Applied::snapshot_at`, an applied entry
//! whose messages end where the deletion does), so openraft purges the
//! entries naming the messages before they go. It carries the point, the
//! offset its messages end at, the membership in force there, and, when
//! sent, the partition's whole offsets store (`Applied::set_offsets_source`)
//! — never messages: those before the point are deleted everywhere, and
//! those after it are the entries that follow. A follower that installs
//! one starts its log again at the point's offset (`Applied::installed`)
//! and replaces its offsets store. The owner seeds a restarted group with
//! the snapshot of its purge point ([`StateMachine::with_snapshot`]).
//!
//! Must not: change the log (the log store does), or panic on an entry.

use crate::{Appended, LogId, PartitionRaft, PartitionTypes, Proposal};
use futures_util::{Stream, TryStreamExt};
use iggyd_wire::batch::BatchHeader;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};

/// The last snapshot built, installed or seeded: its metadata and point.
type BuiltSnapshot<C> = (SnapshotMetaOf<C>, SnapshotPoint);
use crate::offsets::OffsetWrite;
use futures_util::future::LocalBoxFuture;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::io::Cursor;
use std::rc::Rc;

/// Where a snapshot is: its last entry and the offset its messages end
/// at (where the messages after it start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotPoint {
    pub index: u64,
    pub term: u64,
    pub next_offset: u64,
}

/// The partition's whole offsets store when a snapshot is sent: the
/// index of the last offsets entry it holds and a store write per
/// consumer offset.
pub type StoredOffsets = (u64, Vec<OffsetWrite>);

/// Reads the partition's offsets store (its owner answers).
pub type OffsetsSource = Box<dyn Fn() -> LocalBoxFuture<'static, Result<StoredOffsets, String>>>;

/// The snapshot's bytes: `[version u8 = 2][index u64][term u64][next
/// offset u64][has offsets u8]`, then, with offsets, the index of the
/// store's last offsets entry (u64) and its writes (`crate::offsets`
/// layout, any count).
const SNAPSHOT_VERSION: u8 = 2;
const SNAPSHOT_HEAD: usize = 1 + 8 + 8 + 8 + 1;

fn encode_snapshot(point: SnapshotPoint, offsets: Option<&StoredOffsets>) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEAD + 8);
    out.push(SNAPSHOT_VERSION);
    out.extend_from_slice(&point.index.to_le_bytes());
    out.extend_from_slice(&point.term.to_le_bytes());
    out.extend_from_slice(&point.next_offset.to_le_bytes());
    match offsets {
        None => out.push(0),
        Some((index, writes)) => {
            out.push(1);
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&crate::offsets::encode(writes));
        }
    }
    out
}

/// A snapshot's point and offsets, or why its bytes are not a snapshot
/// (they come from a peer).
fn decode_snapshot(bytes: &[u8]) -> Result<(SnapshotPoint, Option<StoredOffsets>), String> {
    let word = |at: usize| -> Result<u64, String> {
        bytes
            .get(at..at + 8)
            .and_then(|word| word.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| format!("a snapshot of {} bytes", bytes.len()))
    };
    if bytes.first() != Some(&SNAPSHOT_VERSION) {
        return Err(format!("a snapshot of version {:?}", bytes.first()));
    }
    let point = SnapshotPoint {
        index: word(1)?,
        term: word(9)?,
        next_offset: word(17)?,
    };
    let offsets = match bytes.get(25) {
        Some(0) if bytes.len() == SNAPSHOT_HEAD => None,
        Some(1) => {
            let index = word(SNAPSHOT_HEAD)?;
            let writes = bytes
                .get(SNAPSHOT_HEAD + 8..)
                .ok_or_else(|| "a snapshot without its offsets".to_string())
                .and_then(crate::offsets::decode_all)?;
            Some((index, writes))
        }
        other => return Err(format!("a snapshot with offsets flag {other:?}")),
    };
    Ok((point, offsets))
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A purge entry applied: every message below `below` goes (where the
/// messages through entry `index` end, `messages_end`, when it purges them
/// all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedPurge {
    pub index: u64,
    pub term: u64,
    pub below: u64,
    pub messages_end: u64,
}

impl AppliedPurge {
    /// Whether it purges every message before its entry (a stream's or
    /// topic's purge; the entry itself is then the snapshot's point).
    pub fn purges_all(&self) -> bool {
        self.below >= self.messages_end
    }
}

/// What a partition's group has applied, shared with its readers.
#[derive(Debug, Default)]
pub struct Applied {
    /// One past the last committed message: consumers read below it.
    pub committed_next_offset: Cell<u64>,
    /// Consumers read nothing below this offset: the messages a purge
    /// entry applied here deleted (or is deleting), or those before the
    /// snapshot the group started from or installed.
    floor: Cell<u64>,
    /// Purge entries applied and not yet taken by the owner.
    purges: RefCell<VecDeque<AppliedPurge>>,
    /// The data entries applied recently, and the proposals in flight
    /// here, for resolving resends (`crate::replay`).
    pub replays: crate::replay::Replays,
    /// Offsets entries applied and not yet taken by the offsets store:
    /// `(index, writes)` in log order.
    offsets: RefCell<VecDeque<(u64, Vec<OffsetWrite>)>>,
    offsets_notify: OffsetsNotify,
    /// Where the next snapshot is built (its owner's retention asks).
    snapshot_at: Cell<Option<SnapshotPoint>>,
    /// The last entry of the current snapshot, if any.
    snapshot_index: Cell<Option<u64>>,
    /// The last snapshot installed from a leader: where the log starts
    /// again when it is purged past its end.
    installed: Cell<Option<SnapshotPoint>>,
    /// The installed snapshot's membership, encoded (`crate::codec`): the
    /// log keeps it for its purge point.
    installed_membership: RefCell<Vec<u8>>,
    /// An installed snapshot's offsets store, not taken yet: it replaces
    /// the partition's (before the entries queued after it).
    installed_offsets: RefCell<Option<StoredOffsets>>,
    offsets_source: OffsetsSourceCell,
}

/// Reads the offsets store for a snapshot being sent.
#[derive(Default)]
struct OffsetsSourceCell(RefCell<Option<Rc<OffsetsSource>>>);

impl std::fmt::Debug for OffsetsSourceCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffsetsSource")
    }
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

    /// `notify` runs each time an offsets or purge entry is applied or a
    /// snapshot with an offsets store is installed (the owner takes them:
    /// [`Self::take_offsets`], [`Self::take_purges`]).
    pub fn set_offsets_notify(&self, notify: Box<dyn Fn()>) {
        *self.offsets_notify.0.borrow_mut() = Some(notify);
    }

    /// The first offset consumers may read: those below were purged.
    pub fn floor(&self) -> u64 {
        self.floor.get()
    }

    fn raise_floor(&self, offset: u64) {
        self.floor.set(self.floor.get().max(offset));
    }

    /// The purge entries applied since the last call, in log order.
    pub fn take_purges(&self) -> Vec<AppliedPurge> {
        self.purges.borrow_mut().drain(..).collect()
    }

    fn notify_owner(&self) {
        if let Some(notify) = self.offsets_notify.0.borrow().as_ref() {
            notify();
        }
    }

    fn purge_applied(&self, purge: AppliedPurge) {
        self.raise_floor(purge.below);
        self.purges.borrow_mut().push_back(purge);
        self.notify_owner();
    }

    /// The next snapshot is built at `point`, an applied entry (retention
    /// deletes the messages before `point.next_offset` once openraft
    /// purged the entries through it); false when the current snapshot
    /// is there already (nothing to build). A later point asked and not
    /// built yet stays asked (a purge's, which retention's earlier one
    /// must not undo).
    pub fn snapshot_at(&self, point: SnapshotPoint) -> bool {
        let built = self.snapshot_index.get();
        if built.is_some_and(|index| index >= point.index) {
            return false;
        }
        let later_pending = self.snapshot_at.get().filter(|asked| {
            asked.index > point.index && built.is_none_or(|index| index < asked.index)
        });
        self.snapshot_at.set(Some(later_pending.unwrap_or(point)));
        true
    }

    /// The last snapshot installed from a leader, if any, with its
    /// membership encoded (`crate::codec`).
    pub fn installed(&self) -> Option<(SnapshotPoint, Vec<u8>)> {
        self.installed
            .get()
            .map(|point| (point, self.installed_membership.borrow().clone()))
    }

    /// An installed snapshot's offsets store, once: the partition's store
    /// becomes it (when it is newer), before any entry queued.
    pub fn take_installed_offsets(&self) -> Option<StoredOffsets> {
        self.installed_offsets.borrow_mut().take()
    }

    /// Where a snapshot being sent reads the partition's offsets store.
    pub fn set_offsets_source(&self, source: OffsetsSource) {
        *self.offsets_source.0.borrow_mut() = Some(Rc::new(source));
    }

    async fn stored_offsets(&self) -> Result<Option<StoredOffsets>, io::Error> {
        let source = self.offsets_source.0.borrow().clone();
        match source {
            None => Ok(None),
            Some(source) => source().await.map(Some).map_err(io::Error::other),
        }
    }

    fn offsets_applied(&self, index: u64, writes: Vec<OffsetWrite>) {
        self.offsets.borrow_mut().push_back((index, writes));
        self.notify_owner();
    }
}

/// The state machine of one partition's group, for the type configuration
/// `C` (production's by default, or the cluster simulation's).
#[derive(Debug)]
pub struct StateMachine<C: PartitionTypes = PartitionRaft> {
    applied: Rc<Applied>,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<C>,
    /// The memberships applied since the last snapshot, oldest first, the
    /// snapshot's first: a snapshot below the last applied entry carries
    /// the one in force at its point.
    memberships: Vec<StoredMembershipOf<C>>,
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
            memberships: self.memberships.clone(),
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
            memberships: Vec::new(),
            snapshot: Rc::new(RefCell::new(None)),
        }
    }

    /// A restarted group's state machine: starting from the snapshot of
    /// its log's purge point when there is one (with the membership stored
    /// for it), empty otherwise.
    pub fn at_purge_point(
        applied: Rc<Applied>,
        purged: Option<&iggyd_storage::raft::PurgePoint>,
    ) -> StateMachine<C> {
        let seed = purged.and_then(|purged| {
            let membership = crate::codec::decode_membership(purged.membership.as_deref()?)?;
            let point = SnapshotPoint {
                index: purged.index,
                term: purged.term,
                next_offset: purged.next_offset,
            };
            let at = LogId::new_term_index(purged.term, purged.index);
            Some((point, StoredMembershipOf::<C>::new(Some(at), membership)))
        });
        match seed {
            Some((point, membership)) => StateMachine::with_snapshot(applied, point, membership),
            None => StateMachine::new(applied),
        }
    }

    /// A state machine whose current snapshot is `point` with
    /// `membership` (a restarted group's log purged through it): openraft
    /// installs it first, then applies the entries after it.
    pub fn with_snapshot(
        applied: Rc<Applied>,
        point: SnapshotPoint,
        membership: StoredMembershipOf<C>,
    ) -> StateMachine<C> {
        let machine = StateMachine::new(applied);
        let meta = SnapshotMetaOf::<C> {
            last_log_id: Some(LogId::new_term_index(point.term, point.index)),
            last_membership: membership,
        };
        *machine.snapshot.borrow_mut() = Some((meta, point));
        machine.applied.snapshot_index.set(Some(point.index));
        machine.applied.raise_floor(point.next_offset);
        machine
    }

    pub fn applied(&self) -> Rc<Applied> {
        self.applied.clone()
    }

    /// The membership in force at entry `index`.
    fn membership_at(&self, index: u64) -> StoredMembershipOf<C> {
        self.memberships
            .iter()
            .rev()
            .find(|stored| stored.log_id().is_some_and(|id| id.index <= index))
            .cloned()
            .unwrap_or_else(|| self.membership.clone())
    }
}

impl<C: PartitionTypes> RaftSnapshotBuilder<C> for StateMachine<C> {
    type SnapshotData = Cursor<Vec<u8>>;

    /// Builds at the point asked for ([`Applied::snapshot_at`]) when it is
    /// applied and past the current snapshot; else answers the current
    /// snapshot again, or none (openraft ignores one that is not newer).
    /// A state machine never asked builds at its applied position
    /// (openraft's contract, which its storage suite checks).
    async fn build_snapshot(&mut self) -> Result<SnapshotOf<C, Cursor<Vec<u8>>>, io::Error> {
        let current = self.snapshot.borrow().clone();
        let asked = self.applied.snapshot_at.get();
        let buildable = asked.filter(|point| {
            self.last_applied
                .is_some_and(|last| point.index <= last.index)
                && current
                    .as_ref()
                    .is_none_or(|(_, built)| point.index > built.index)
        });
        let (meta, point) = match (buildable, current.filter(|_| asked.is_some())) {
            (Some(point), _) => {
                let meta = SnapshotMetaOf::<C> {
                    last_log_id: Some(LogId::new_term_index(point.term, point.index)),
                    last_membership: self.membership_at(point.index),
                };
                *self.snapshot.borrow_mut() = Some((meta.clone(), point));
                self.applied.snapshot_index.set(Some(point.index));
                (meta, point)
            }
            (None, Some(current)) => current,
            // Asked for a point not applied yet, with no snapshot: none
            // (openraft ignores one that is not newer). Never the applied
            // position: its messages are not deleted, and a follower
            // installing it would start past messages it lacks.
            (None, None) if asked.is_some() => {
                (SnapshotMetaOf::<C>::default(), SnapshotPoint::default())
            }
            // Never asked: at the applied position, openraft's contract
            // (its storage suite) and its rebuild of a log purged with no
            // snapshot kept, which the daemon never meets (it seeds each
            // group whose log is purged with the snapshot of its purge
            // point).
            (None, None) => {
                let meta = SnapshotMetaOf::<C> {
                    last_log_id: self.last_applied,
                    last_membership: self.membership.clone(),
                };
                let point = SnapshotPoint {
                    index: self.last_applied.map_or(0, |last| last.index),
                    term: self.last_applied.map_or(0, |last| last.leader_id.term),
                    next_offset: self.applied.committed_next_offset.get(),
                };
                if self.last_applied.is_some() {
                    *self.snapshot.borrow_mut() = Some((meta.clone(), point));
                    self.applied.snapshot_index.set(Some(point.index));
                }
                (meta, point)
            }
        };
        Ok(SnapshotOf::<C, Cursor<Vec<u8>>> {
            meta,
            snapshot: Cursor::new(encode_snapshot(point, None)),
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
                EntryPayload::Normal(Proposal::Purge(below)) => {
                    // Applied in log order: the committed messages end
                    // where this entry's log did when it was appended.
                    let messages_end = self.applied.committed_next_offset.get();
                    let below = (*below).min(messages_end);
                    self.applied.purge_applied(AppliedPurge {
                        index: entry.log_id.index,
                        term: entry.log_id.leader_id.term,
                        below,
                        messages_end,
                    });
                    Appended {
                        base_offset: below,
                        last_offset: below,
                    }
                }
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
                    self.memberships.push(self.membership.clone());
                    // Those before the one in force at the current
                    // snapshot are no snapshot's any more.
                    if let Some(at) = self.applied.snapshot_index.get()
                        && let Some(keep_from) = self
                            .memberships
                            .iter()
                            .rposition(|stored| stored.log_id().is_some_and(|id| id.index <= at))
                    {
                        self.memberships.drain(..keep_from);
                    }
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
        let (point, offsets) = decode_snapshot(snapshot.get_ref()).map_err(invalid)?;
        if meta.last_log_id.map(|id| (id.index, id.leader_id.term))
            != Some((point.index, point.term))
        {
            return Err(invalid(format!(
                "a snapshot of entry {} ({}) named {:?}",
                point.index, point.term, meta.last_log_id
            )));
        }
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.memberships = vec![self.membership.clone()];
        self.applied.committed_next_offset.set(point.next_offset);
        self.applied.raise_floor(point.next_offset);
        self.applied.installed.set(Some(point));
        *self.applied.installed_membership.borrow_mut() =
            crate::codec::encode_membership(self.membership.membership());
        *self.snapshot.borrow_mut() = Some((meta.clone(), point));
        self.applied.snapshot_index.set(Some(point.index));
        if let Some(offsets) = offsets {
            *self.applied.installed_offsets.borrow_mut() = Some(offsets);
            self.applied.notify_owner();
        }
        Ok(())
    }

    /// The current snapshot, with the partition's offsets store as it is
    /// now (a follower installing it skips the offsets entries the store
    /// already holds).
    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<C, Self::SnapshotData>>, io::Error> {
        let current = self.snapshot.borrow().clone();
        let Some((meta, point)) = current else {
            return Ok(None);
        };
        let offsets = self.applied.stored_offsets().await?;
        Ok(Some(SnapshotOf::<C, Cursor<Vec<u8>>> {
            meta,
            snapshot: Cursor::new(encode_snapshot(point, offsets.as_ref())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};

    // Proves a snapshot's bytes read back as written, with and without an
    // offsets store, and that bytes a peer damaged are refused, never a
    // panic.
    #[test]
    fn a_snapshot_reads_back_and_damaged_bytes_are_refused() {
        let point = SnapshotPoint {
            index: 41,
            term: 3,
            next_offset: 9_000,
        };
        let consumer = ConsumerKey {
            kind: ConsumerKind::Group,
            id: 7,
        };
        let offsets = (
            40,
            vec![OffsetWrite::Store {
                consumer,
                offset: 8_999,
            }],
        );
        for stored in [None, Some(offsets)] {
            let bytes = encode_snapshot(point, stored.as_ref());
            assert_eq!(decode_snapshot(&bytes), Ok((point, stored.clone())));
            for cut in 0..bytes.len() {
                assert!(decode_snapshot(&bytes[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode_snapshot(&longer).is_err());
        }
        assert!(decode_snapshot(&[1; 25]).is_err(), "another version");
    }

    fn voters(ids: &[u64]) -> crate::Membership {
        crate::Membership::new_with_defaults(vec![ids.iter().copied().collect()], [])
    }

    async fn apply(machine: &mut StateMachine, entries: Vec<crate::Entry>) {
        let stream = futures_util::stream::iter(
            entries
                .into_iter()
                .map(|entry| Ok::<_, io::Error>((entry, None))),
        );
        machine.apply(stream).await.expect("applied");
    }

    // Proves a snapshot is built where it is asked, once that entry is
    // applied, with the membership in force there (not a later one), and
    // that asking again for a point it covers builds nothing new; a point
    // not applied yet builds nothing (never the applied position, whose
    // messages are not deleted).
    #[test]
    fn a_snapshot_is_built_where_asked_with_the_membership_in_force_there() {
        use openraft::entry::RaftEntry;
        crate::tests::runtime().block_on(async {
            let applied = Rc::new(Applied::default());
            let mut machine = StateMachine::<PartitionRaft>::new(applied.clone());
            apply(
                &mut machine,
                vec![
                    crate::Entry::new_membership(LogId::new_term_index(1, 1), voters(&[1, 2, 3])),
                    crate::Entry::new_blank(LogId::new_term_index(1, 2)),
                ],
            )
            .await;
            let point = SnapshotPoint {
                index: 3,
                term: 1,
                next_offset: 0,
            };
            assert!(applied.snapshot_at(point));
            let built = machine.build_snapshot().await.expect("built");
            assert_eq!(built.meta.last_log_id, None, "entry 3 is not applied yet");
            apply(
                &mut machine,
                vec![
                    crate::Entry::new_blank(LogId::new_term_index(1, 3)),
                    crate::Entry::new_membership(LogId::new_term_index(2, 4), voters(&[1, 2, 4])),
                ],
            )
            .await;
            let built = machine.build_snapshot().await.expect("built");
            assert_eq!(built.meta.last_log_id, Some(LogId::new_term_index(1, 3)));
            assert_eq!(built.meta.last_membership.membership(), &voters(&[1, 2, 3]));
            assert_eq!(
                decode_snapshot(built.snapshot.get_ref()).map(|(at, _)| at),
                Ok(point)
            );
            assert!(!applied.snapshot_at(point), "built already");
            let current = machine.get_current_snapshot().await.expect("read");
            assert_eq!(current.map(|current| current.meta), Some(built.meta));
        });
    }
}
