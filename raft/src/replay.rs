//! Sends whose outcome a client was told is unknown, resolved instead of
//! stored twice.
//!
//! A proposal can end without its proposer learning whether it committed:
//! the forward to the leader timed out or lost its connection, openraft
//! discarded the leader's entry when another leader took over (it may
//! still commit through that one), the group stopped. The client is then
//! answered 57 (`TransientNotCommitted`), and the official SDK sends the
//! same frame again on the same connection, to the same node, every 50 ms
//! for up to 30 s. Proposing that resend anew would store the messages
//! twice whenever the first attempt did commit.
//!
//! So the first attempt's node remembers the batch as *in doubt* (its
//! content [`fingerprint`] and the last entry it had applied when the
//! attempt began: every entry the attempt could have made comes after it),
//! and a resend of the same messages is proposed *resolving*: at the
//! leader, after a read barrier (the leader has committed an entry of its
//! own term and applied everything committed before the barrier, so an
//! entry from an earlier term that is not applied by then never commits)
//! and once every entry the leader held when the resend arrived is applied
//! (an entry of its own term whose proposer gave up, no longer in flight,
//! can still commit after the barrier), the applied entries after that
//! point are searched for the same content:
//!
//! - found: the first attempt committed; its offsets answer the resend and
//!   nothing new is proposed;
//! - an attempt with the same content still in flight at the leader: the
//!   outcome is still unknown (57 again; the SDK resends);
//! - not found, and the leader has every applied entry after that point in
//!   its recent window: the first attempt never commits; the resend is
//!   proposed;
//! - the window does not reach back that far (the leader restarted, or
//!   more than [`RECENT_MAX`] entries committed since): unknown (57); the
//!   SDK gives up after 30 s and the application decides, rather than the
//!   broker storing a copy.
//!
//! The SDK does not always resend to the same node: a send that keeps
//! meeting 57 for 2 s is re-issued through the leader it looks up, under
//! a new session, as a fresh send that no member holds in doubt. So the
//! leader also checks every fresh proposal's content: the same messages
//! applied within the window are answered with their offsets; while a
//! proposal of them is in flight there, 57; and when one was given up
//! there (its proposer stopped waiting, or its outcome was unknown; its
//! entry may still commit) the fresh one is resolved like a resend from
//! where that one began.
//!
//! The content is the batch's messages as the producer sent them (every
//! message's checksum, which covers its id, headers and payload, plus the
//! batch's origin time and count); stamping (offsets, server time) does not
//! change it. So the same messages sent again within the window through the
//! node that was left in doubt are taken for the resend, whichever request
//! carried them.
//!
//! Must not: hold more than [`RECENT_MAX`] applied entries and
//! [`GIVEN_UP_MAX`] given-up proposals per group, or take an unresolved
//! resend for a new one.

use crate::{Appended, PartitionTypes, Proposal};
use openraft::errors::{ClientWriteError, RaftError};
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

/// Proposals whose proposer gave up a group remembers (their entries may
/// still commit; 16 bytes each).
pub const GIVEN_UP_MAX: usize = 1024;

/// Applied data entries a group remembers for resolving resends (32 bytes
/// each; a group allocates only as it applies, up to this).
pub const RECENT_MAX: usize = 4096;

/// A batch's content, as the producer sent it: XXH3-64 over its origin
/// time, its message count and every message's checksum (each covers the
/// message's id, headers and payload). `None` when `batch` is not a batch.
pub fn fingerprint(batch: &[u8]) -> Option<u64> {
    let header = iggyd_wire::batch::BatchHeader::decode(batch).ok()?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&header.origin_timestamp.to_le_bytes());
    hasher.update(&header.message_count.to_le_bytes());
    for frame in iggyd_wire::batch::frames(batch).ok()? {
        hasher.update(&frame.ok()?.header.checksum.to_le_bytes());
    }
    Some(hasher.digest())
}

#[derive(Debug, Clone, Copy)]
struct Recent {
    index: u64,
    fingerprint: u64,
    appended: Appended,
}

/// What a group's node knows for resolving resends: the data entries it
/// applied recently and the proposals it has in flight.
#[derive(Debug, Default)]
pub struct Replays {
    recent: RefCell<VecDeque<Recent>>,
    /// Every data entry applied at or after this index is in `recent`.
    covered_from: Cell<Option<u64>>,
    /// The last entry applied here.
    last_index: Cell<Option<u64>>,
    /// Proposals in flight through this node's `client_write`, by content.
    pending: RefCell<HashMap<u64, u32>>,
    /// The latest entry in `recent` with each content: its index and
    /// offsets.
    by_content: RefCell<HashMap<u64, (u64, Appended)>>,
    /// Proposals whose `client_write` ended without an answer (their
    /// proposer gave up, or the outcome is unknown): the content and the
    /// last entry applied when each began. Their entries may still commit.
    given_up: RefCell<VecDeque<(u64, u64)>>,
}

/// Where a resend's content stands among the applied entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Committed, with these offsets.
    Found(Appended),
    /// Not among the entries applied after the point searched from.
    Absent,
    /// The recent window does not reach back to that point.
    NotCovered,
}

impl Replays {
    /// Entry `index` was applied; a data entry with its content and
    /// offsets.
    pub fn applied(&self, index: u64, data: Option<(u64, Appended)>) {
        self.last_index.set(Some(index));
        if self.covered_from.get().is_none() {
            self.covered_from.set(Some(index));
        }
        let Some((fingerprint, appended)) = data else {
            return;
        };
        let mut recent = self.recent.borrow_mut();
        let mut by_content = self.by_content.borrow_mut();
        if recent.len() == RECENT_MAX
            && let Some(evicted) = recent.pop_front()
        {
            self.covered_from.set(Some(evicted.index + 1));
            if by_content
                .get(&evicted.fingerprint)
                .is_some_and(|(latest, _)| *latest == evicted.index)
            {
                by_content.remove(&evicted.fingerprint);
            }
        }
        recent.push_back(Recent {
            index,
            fingerprint,
            appended,
        });
        by_content.insert(fingerprint, (index, appended));
    }

    /// The offsets of the latest applied entry in the window with this
    /// content.
    pub fn latest(&self, fingerprint: u64) -> Option<Appended> {
        self.by_content
            .borrow()
            .get(&fingerprint)
            .map(|(_, appended)| *appended)
    }

    /// Where a proposal with this content that was given up here began
    /// (the last entry applied then).
    fn given_up_after(&self, fingerprint: u64) -> Option<u64> {
        self.given_up
            .borrow()
            .iter()
            .rev()
            .find(|(given_up, _)| *given_up == fingerprint)
            .map(|(_, after)| *after)
    }

    fn forget_given_up(&self, fingerprint: u64) {
        self.given_up
            .borrow_mut()
            .retain(|(given_up, _)| *given_up != fingerprint);
    }

    /// The last entry applied here: an attempt that begins now can only
    /// make entries after it.
    pub fn last_index(&self) -> u64 {
        self.last_index.get().unwrap_or(0)
    }

    /// Looks for `fingerprint` among the entries applied after `after`.
    pub fn find_after(&self, after: u64, fingerprint: u64) -> Lookup {
        match self.last_index.get() {
            // Nothing applied after the point: nothing to find.
            None => return Lookup::Absent,
            Some(last) if last <= after => return Lookup::Absent,
            Some(_) => {}
        }
        if self
            .covered_from
            .get()
            .is_none_or(|covered| covered > after.saturating_add(1))
        {
            return Lookup::NotCovered;
        }
        self.recent
            .borrow()
            .iter()
            .rev()
            .take_while(|entry| entry.index > after)
            .find(|entry| entry.fingerprint == fingerprint)
            .map_or(Lookup::Absent, |entry| Lookup::Found(entry.appended))
    }

    /// Whether a proposal with this content is in flight here.
    pub fn in_flight(&self, fingerprint: u64) -> bool {
        self.pending.borrow().contains_key(&fingerprint)
    }

    fn begin(&self, fingerprint: u64, after: u64) -> InFlight<'_> {
        *self.pending.borrow_mut().entry(fingerprint).or_default() += 1;
        InFlight {
            replays: self,
            fingerprint,
            after,
            answered: false,
        }
    }
}

/// A proposal in flight; forgotten when it ends, however it ends, and
/// remembered as given up unless it was answered.
struct InFlight<'a> {
    replays: &'a Replays,
    fingerprint: u64,
    after: u64,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut pending = self.replays.pending.borrow_mut();
        if let Some(count) = pending.get_mut(&self.fingerprint) {
            *count -= 1;
            if *count == 0 {
                pending.remove(&self.fingerprint);
            }
        }
        if !self.answered {
            let mut given_up = self.replays.given_up.borrow_mut();
            if given_up.len() == GIVEN_UP_MAX {
                given_up.pop_front();
            }
            given_up.push_back((self.fingerprint, self.after));
        }
    }
}

/// Why a proposal has no offsets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProposeError {
    /// Not appended: this member does not lead (the leader, if known).
    NotLeader(Option<u64>),
    /// Not delivered to the leader (unreachable): nothing was appended.
    NotDelivered(String),
    /// The entry was appended and may still commit.
    Unknown(String),
    /// A resend whose first attempt's outcome is still unknown: nothing new
    /// was proposed.
    Unresolved(String),
}

impl std::fmt::Display for ProposeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposeError::NotLeader(Some(leader)) => write!(f, "node {leader} leads"),
            ProposeError::NotLeader(None) => write!(f, "no leader is known"),
            ProposeError::NotDelivered(why) => write!(f, "not delivered to the leader: {why}"),
            ProposeError::Unknown(why) => write!(f, "outcome unknown: {why}"),
            ProposeError::Unresolved(why) => write!(f, "a resend not resolved yet: {why}"),
        }
    }
}

/// Proposes `proposal` on `raft`, which leads here. With `resolve_after`
/// (a resend of a batch left in doubt, and the last entry applied where
/// its first attempt began) the first attempt is resolved first (see the
/// module doc). Proposals through here are known to resends while in
/// flight.
pub async fn propose<C, SM>(
    raft: &openraft::Raft<C, SM>,
    replays: &Replays,
    proposal: Vec<u8>,
    resolve_after: Option<u64>,
) -> Result<Appended, ProposeError>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    let fingerprint = fingerprint(&proposal);
    // The same messages arriving fresh (the SDK re-issues a send that met
    // 57 for 2 s through the leader it looks up, under a new session, so
    // no member holds it in doubt): answered with the entry already
    // applied, resolved when a proposal of them was given up here (its
    // entry may still commit), refused for now while one is in flight.
    let resolve_after = match (resolve_after, fingerprint) {
        (None, Some(fingerprint)) => {
            if let Some(appended) = replays.latest(fingerprint) {
                tracing::debug!(%appended, "the same messages again, answered with their offsets");
                return Ok(appended);
            }
            if replays.in_flight(fingerprint) {
                return Err(ProposeError::Unresolved(
                    "the same messages are in flight at the leader".to_string(),
                ));
            }
            replays.given_up_after(fingerprint)
        }
        (resolve_after, _) => resolve_after,
    };
    if let (Some(after), Some(fingerprint)) = (resolve_after, fingerprint) {
        if replays.in_flight(fingerprint) {
            return Err(ProposeError::Unresolved(
                "its first attempt is still in flight at the leader".to_string(),
            ));
        }
        // Everything this leader holds now, committed or not: a first
        // attempt whose proposer gave up (its future dropped when the
        // lease lapsed) is no longer in flight, yet its entry may still
        // commit. A read index covers only what is committed, so the
        // resend also waits until the whole log it arrived to is applied
        // (or gives up unresolved while that log cannot commit).
        let held = {
            use openraft::async_runtime::WatchReceiver;
            raft.metrics().borrow_watched().last_log_index
        };
        match raft
            .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
            .await
        {
            Ok(_) => {}
            Err(RaftError::APIError(openraft::errors::LinearizableReadError::ForwardToLeader(
                forward,
            ))) => return Err(ProposeError::NotLeader(forward.leader_id)),
            Err(error) => return Err(ProposeError::Unresolved(error.to_string())),
        }
        let patience =
            std::time::Duration::from_millis(raft.config().election_timeout_max.saturating_mul(2));
        if let Err(error) = raft
            .wait(Some(patience))
            .applied_index_at_least(held, "the log a resend arrived to, applied")
            .await
        {
            return Err(ProposeError::Unresolved(format!(
                "the entries the leader held when the resend arrived are not applied: {error}"
            )));
        }
        if replays.in_flight(fingerprint) {
            return Err(ProposeError::Unresolved(
                "its first attempt is still in flight at the leader".to_string(),
            ));
        }
        match replays.find_after(after, fingerprint) {
            Lookup::Found(appended) => {
                tracing::debug!(%appended, "a resend answered with its first attempt's offsets");
                return Ok(appended);
            }
            Lookup::NotCovered => {
                return Err(ProposeError::Unresolved(format!(
                    "the leader no longer holds the entries applied after {after}"
                )));
            }
            Lookup::Absent => {}
        }
        // Resolved: whatever was given up never commits.
        replays.forget_given_up(fingerprint);
    }
    let after = resolve_after.unwrap_or_else(|| replays.last_index());
    let mut in_flight = fingerprint.map(|fingerprint| replays.begin(fingerprint, after));
    let mut answered = |answered: bool| {
        if let Some(in_flight) = in_flight.as_mut() {
            in_flight.answered = answered;
        }
    };
    match raft.client_write(Proposal::Batch(proposal.into())).await {
        Ok(written) => {
            answered(true);
            Ok(*written.response())
        }
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            // Refused before anything was appended.
            answered(true);
            Err(ProposeError::NotLeader(forward.leader_id))
        }
        Err(error) => Err(ProposeError::Unknown(error.to_string())),
    }
}

/// An entry that carries no messages, as a member proposes it: stored
/// offsets (`crate::offsets`) or a purge (the offset below which every
/// replica deletes the messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlEntry {
    Offsets(Vec<u8>),
    Purge(u64),
}

impl From<ControlEntry> for Proposal {
    fn from(entry: ControlEntry) -> Proposal {
        match entry {
            ControlEntry::Offsets(payload) => Proposal::Offsets(payload),
            ControlEntry::Purge(below) => Proposal::Purge(below),
        }
    }
}

/// Proposes `entry` at this member, which must lead: answered with its
/// index once it is committed and applied. Stored offsets are
/// last-write-wins in log order and a purge only raises a floor, so a
/// resend is harmless and needs no resolving.
pub async fn propose_control<C, SM>(
    raft: &openraft::Raft<C, SM>,
    entry: ControlEntry,
) -> Result<u64, ProposeError>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    match raft.client_write(entry.into()).await {
        Ok(written) => Ok(written.log_id.index),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            Err(ProposeError::NotLeader(forward.leader_id))
        }
        Err(error) => Err(ProposeError::Unknown(error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(base: u64) -> Appended {
        Appended {
            base_offset: base,
            last_offset: base,
        }
    }

    #[test]
    fn lookups_see_only_entries_after_the_point_and_know_their_window() {
        let replays = Replays::default();
        assert_eq!(replays.find_after(0, 7), Lookup::Absent);
        replays.applied(10, Some((7, appended(0))));
        replays.applied(11, None);
        replays.applied(12, Some((8, appended(1))));
        assert_eq!(replays.find_after(9, 7), Lookup::Found(appended(0)));
        assert_eq!(replays.find_after(10, 7), Lookup::Absent);
        assert_eq!(replays.find_after(11, 8), Lookup::Found(appended(1)));
        assert_eq!(replays.find_after(12, 8), Lookup::Absent, "nothing after");
        // Entries before the first applied here are not known.
        assert_eq!(replays.find_after(5, 7), Lookup::NotCovered);
        assert_eq!(replays.last_index(), 12);
    }

    #[test]
    fn the_window_moves_as_it_fills() {
        let replays = Replays::default();
        for index in 1..=(RECENT_MAX as u64 + 10) {
            replays.applied(index, Some((index, appended(index))));
        }
        assert_eq!(replays.recent.borrow().len(), RECENT_MAX);
        assert_eq!(replays.find_after(5, 6), Lookup::NotCovered);
        assert_eq!(replays.find_after(10, 12), Lookup::Found(appended(12)));
        assert_eq!(replays.find_after(10, 5), Lookup::Absent);
    }

    #[test]
    fn in_flight_proposals_are_counted_until_they_end() {
        let replays = Replays::default();
        let mut first = replays.begin(3, 10);
        let second = replays.begin(3, 11);
        first.answered = true;
        drop(first);
        assert!(replays.in_flight(3));
        assert_eq!(replays.given_up_after(3), None, "an answered one");
        drop(second);
        assert!(!replays.in_flight(3));
        assert_eq!(replays.given_up_after(3), Some(11), "an unanswered one");
        replays.forget_given_up(3);
        assert_eq!(replays.given_up_after(3), None);
    }

    // Proves the content index follows the window: the latest entry with a
    // content answers, and one evicted from the window no longer does.
    #[test]
    fn the_latest_entry_with_a_content_is_found_until_it_leaves_the_window() {
        let replays = Replays::default();
        replays.applied(1, Some((7, appended(0))));
        replays.applied(2, Some((7, appended(1))));
        assert_eq!(replays.latest(7), Some(appended(1)));
        for index in 3..3 + RECENT_MAX as u64 {
            replays.applied(index, Some((index + 100, appended(index))));
        }
        assert_eq!(replays.latest(7), None, "both left the window");
        assert_eq!(replays.latest(103), Some(appended(3)));
    }

    #[test]
    fn the_fingerprint_ignores_stamping_and_sees_content() {
        use iggyd_wire::batch::{MessageSpec, encode_producer_batch, stamp};
        let message = |id: u128, payload: &[u8]| MessageSpec {
            id,
            payload: payload.to_vec(),
            user_headers: Vec::new(),
            timestamp_delta: 0,
        };
        let batch = encode_producer_batch(100, &[message(1, b"a"), message(2, b"b")]);
        let mut stamped = batch.clone();
        stamp(&mut stamped, 3, 4_000, 99).expect("stamps");
        assert_eq!(fingerprint(&batch), fingerprint(&stamped));
        let other = encode_producer_batch(100, &[message(1, b"a"), message(2, b"c")]);
        assert_ne!(fingerprint(&batch), fingerprint(&other));
        let other_ids = encode_producer_batch(100, &[message(1, b"a"), message(3, b"b")]);
        assert_ne!(fingerprint(&batch), fingerprint(&other_ids));
        assert_eq!(fingerprint(b"not a batch"), None);
    }
}
