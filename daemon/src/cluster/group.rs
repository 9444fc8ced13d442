//! A replicated partition's consensus group on this node: an openraft
//! group on the partition's owner shard whose log is the pump's (through
//! `PumpBackend`) and whose network is the node-to-node transport. The
//! pump sees it as a `shard::replica::Group`: it proposes a leader's
//! stamped batches, asks who leads, and reads how far consumers may read.
//!
//! A member that does not lead forwards a proposal to the member that does
//! (so a client may write through any node), and a member that knows no
//! leader waits up to `LEADER_WAIT` for one before refusing.
//!
//! A proposal whose outcome stays unknown (answered 57, which the SDK
//! resends on the same connection) leaves its batch *in doubt* here; the
//! same messages proposed again through this member are resolved at the
//! leader before anything new is proposed, so a resend is not stored twice
//! (`iggyd_raft::replay`).
//!
//! The group starts in a task of its own (openraft reads the log through
//! the pump while it starts, and the pump must never wait for it); until
//! it has started it leads nothing and proposals are refused as
//! leaderless.
//!
//! Must not: block the pump, or answer a proposal before it is committed.

use crate::cluster::metadata::LocalFuture;
use crate::cluster::quiet::{Lease, Quiet};
use crate::shard::op::{AppendAck, PumpError, Reply, answer};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{AppliedOffsets, Group, Leadership, OffsetsDone};
use iggyd_raft::replay::{self, ControlEntry, ProposeError};
use iggyd_raft::state_machine::{
    Applied, AppliedPurge, SnapshotPoint, StateMachine, StoredOffsets,
};
use iggyd_raft::{Appended, PartitionRaft};
use openraft::async_runtime::WatchReceiver;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

/// How long a proposal waits for the group to have a leader before it is
/// refused as not committed (an election takes one to two election
/// timeouts).
pub const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The pause before a proposal that reached no leader tries again.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a forwarded proposal waits for the leader's answer.
pub const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a proposal to the group's leader (its node id), to be resolved
/// first when it is a resend of a batch in doubt (the last entry applied
/// where its first attempt began), and answers with the leader's outcome.
pub type Forward =
    Rc<dyn Fn(u64, Vec<u8>, Option<u64>) -> LocalFuture<Result<Appended, ProposeError>>>;

/// Whether this node is cut off from the cluster: it led the metadata
/// group and no quorum has answered it for a lease.
pub type CutOff = Rc<dyn Fn() -> bool>;

/// Sends an entry that carries no messages (stored offsets, a purge) to
/// the group's leader (its node id) and answers with the leader's outcome:
/// the entry's index once committed.
pub type ForwardEntry = Rc<dyn Fn(u64, ControlEntry) -> LocalFuture<Result<u64, ProposeError>>>;

/// Batches in doubt a member remembers per group (a resend comes within
/// the SDK's 30 s; 16 bytes each).
pub const IN_DOUBT_MAX: usize = 1024;

/// Batches whose outcome this member's clients were told is unknown: the
/// content and the last entry applied here when the first attempt began.
#[derive(Debug, Default)]
struct InDoubt {
    batches: VecDeque<(u64, u64)>,
}

impl InDoubt {
    fn take(&mut self, fingerprint: u64) -> Option<u64> {
        let at = self
            .batches
            .iter()
            .position(|(doubted, _)| *doubted == fingerprint)?;
        self.batches.remove(at).map(|(_, after)| after)
    }

    fn remember(&mut self, fingerprint: u64, after: u64) {
        if self.batches.len() == IN_DOUBT_MAX {
            self.batches.pop_front();
        }
        self.batches.push_back((fingerprint, after));
    }
}

/// An openraft group of this node.
pub type GroupRaft = openraft::Raft<PartitionRaft, StateMachine>;

/// A partition's group as its pump holds it.
pub struct PartitionGroup {
    key: PartitionKey,
    node_id: u64,
    raft: RefCell<Option<Rc<GroupRaft>>>,
    applied: Rc<Applied>,
    stopped: Cell<bool>,
    forward: Forward,
    forward_entry: ForwardEntry,
    in_doubt: Rc<RefCell<InDoubt>>,
    cut_off: CutOff,
    /// Its leader's lease (openraft's, or a quorum of live voters while
    /// the group is quiet).
    lease: Lease,
    /// What the shard's tick keeps for it (`crate::cluster::quiet`).
    quiet: Quiet,
}

impl PartitionGroup {
    /// A group not started yet; its messages start at `first_offset`.
    pub fn new(
        key: PartitionKey,
        node_id: u64,
        first_offset: u64,
        forward: Forward,
        forward_entry: ForwardEntry,
        cut_off: CutOff,
        lease: Lease,
    ) -> PartitionGroup {
        let applied = Applied::default();
        applied.committed_next_offset.set(first_offset);
        PartitionGroup {
            key,
            node_id,
            raft: RefCell::new(None),
            applied: Rc::new(applied),
            stopped: Cell::new(false),
            forward,
            forward_entry,
            in_doubt: Rc::default(),
            cut_off,
            quiet: Quiet::new(
                node_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.storage_id,
                lease.timing,
            ),
            lease,
        }
    }

    /// Proposes `entry`, one without messages (stored offsets, a purge),
    /// here when this member leads, else at the leader; `done` hears once
    /// it is committed and applied here (read your write on a follower
    /// too), or why not.
    fn propose_entry(&self, entry: ControlEntry, done: OffsetsDone) {
        let Some(raft) = self.raft() else {
            done(Err(PumpError::NotLeader { leader: None }));
            return;
        };
        let node_id = self.node_id;
        let forward = self.forward_entry.clone();
        let lease = self.lease.clone();
        monoio::spawn(async move {
            let result = propose_entry_at_leader(&raft, &lease, node_id, &forward, entry).await;
            if let Ok(index) = result {
                // Committed already: a timeout only means this member
                // lags.
                let _ = raft
                    .wait(Some(LEADER_WAIT))
                    .applied_index_at_least(Some(index), "the entry applied")
                    .await;
            }
            done(result.map(|_| ()).map_err(|error| match error {
                // Nothing was appended: the SDK tries again (58).
                ProposeError::NotLeader(leader) => PumpError::NotLeader { leader },
                ProposeError::NotDelivered(_) => PumpError::NotLeader { leader: None },
                other => PumpError::NotCommitted {
                    reason: other.to_string(),
                },
            }));
        });
    }

    /// What the shard's tick keeps for this group.
    pub fn quiet(&self) -> &Quiet {
        &self.quiet
    }

    /// Its leader's lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Where the state machine tells what is committed.
    pub fn applied(&self) -> Rc<Applied> {
        self.applied.clone()
    }

    /// The group has started.
    pub fn started(&self, raft: Rc<GroupRaft>) {
        if self.stopped.get() {
            monoio::spawn(async move {
                let _ = raft.shutdown().await;
            });
            return;
        }
        *self.raft.borrow_mut() = Some(raft);
    }

    pub fn raft(&self) -> Option<Rc<GroupRaft>> {
        self.raft.borrow().clone()
    }

    pub fn key(&self) -> PartitionKey {
        self.key
    }

    /// Whether this member believes it leads the group but no quorum has
    /// acknowledged it for a lease.
    fn leads_without_quorum(&self, raft: &GroupRaft) -> bool {
        let leads = raft.metrics().borrow_watched().current_leader == Some(self.node_id);
        leads && !self.lease.renewable(raft)
    }
}

impl Group for PartitionGroup {
    fn propose(&self, batch: Vec<u8>, reply: Reply<AppendAck>) {
        let Some(raft) = self.raft() else {
            answer(reply, Err(PumpError::NotLeader { leader: None }));
            return;
        };
        let node_id = self.node_id;
        let forward = self.forward.clone();
        let applied = self.applied.clone();
        let in_doubt = self.in_doubt.clone();
        let lease = self.lease.clone();
        // A resend of a batch in doubt is resolved from where its first
        // attempt began; a first attempt can only make entries after the
        // last one applied here now.
        let fingerprint = replay::fingerprint(&batch);
        let resolve_after =
            fingerprint.and_then(|fingerprint| in_doubt.borrow_mut().take(fingerprint));
        let after = resolve_after.unwrap_or_else(|| applied.replays.last_index());
        // A new batch at a node cut off from its quorum is refused with
        // nothing appended (58: the SDK looks for the leader elsewhere). A
        // resend of a batch in doubt is not: proposed elsewhere it could be
        // stored twice, so it waits here to be resolved (57) until the node
        // is reachable again or the SDK gives up.
        if resolve_after.is_none() && ((self.cut_off)() || self.leads_without_quorum(&raft)) {
            answer(reply, Err(PumpError::NotLeader { leader: None }));
            return;
        }
        monoio::spawn(async move {
            let result = propose_at_leader(
                &raft,
                &lease,
                &applied,
                node_id,
                &forward,
                batch,
                resolve_after,
            )
            .await;
            if let (Err(error), Some(fingerprint)) = (&result, fingerprint) {
                // Still in doubt: a first attempt that may commit, or a
                // resend not resolved (the first attempt's outcome stays
                // unknown whatever the resend met).
                if resolve_after.is_some() || matches!(error, ProposeError::Unknown(_)) {
                    in_doubt.borrow_mut().remember(fingerprint, after);
                }
            }
            answer(
                reply,
                result
                    .map(|appended| AppendAck {
                        base_offset: appended.base_offset,
                        last_offset: appended.last_offset,
                    })
                    .map_err(|error| match error {
                        // 58: a new batch that reached no leader was not
                        // appended anywhere; the SDK looks for another
                        // node (at one cut off from the leader, 57 kept
                        // it replaying here for its whole budget).
                        ProposeError::NotLeader(_) | ProposeError::NotDelivered(_)
                            if resolve_after.is_none() =>
                        {
                            PumpError::NotLeader { leader: None }
                        }
                        // 57: what was appended is in doubt, or a resend
                        // is not resolved yet; the SDK resends on the same
                        // connection.
                        error => PumpError::NotCommitted {
                            reason: error.to_string(),
                        },
                    }),
            );
        });
    }

    fn leadership(&self) -> Leadership {
        let Some(raft) = self.raft() else {
            return Leadership::Unknown;
        };
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        match metrics.current_leader {
            Some(leader) if leader == self.node_id => {
                if metrics.state.is_leader() {
                    Leadership::Here
                } else {
                    Leadership::Unknown
                }
            }
            Some(leader) => Leadership::Elsewhere(leader),
            None => Leadership::Unknown,
        }
    }

    fn committed_end(&self) -> u64 {
        self.applied.committed_next_offset.get()
    }

    fn stop(&self) {
        self.stopped.set(true);
        if let Some(raft) = self.raft.borrow_mut().take() {
            monoio::spawn(async move {
                let _ = raft.shutdown().await;
            });
        }
    }

    fn propose_offsets(&self, payload: Vec<u8>, done: OffsetsDone) {
        self.propose_entry(ControlEntry::Offsets(payload), done);
    }

    fn propose_purge(&self, below: u64, done: OffsetsDone) {
        self.propose_entry(ControlEntry::Purge(below), done);
    }

    fn floor(&self) -> u64 {
        self.applied.floor()
    }

    fn readable(&self) -> bool {
        self.raft().is_some()
    }

    fn take_purges(&self) -> Vec<AppliedPurge> {
        self.applied.take_purges()
    }

    fn offsets_ready(&self) -> bool {
        let Some(raft) = self.raft() else {
            return false;
        };
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics.current_leader.is_some()
            && metrics
                .last_applied
                .is_some_and(|applied| applied.leader_id.term == metrics.current_term)
    }

    fn take_offsets(&self) -> AppliedOffsets {
        self.applied.take_offsets()
    }

    fn snapshot_at(&self, point: SnapshotPoint) {
        if !self.applied.snapshot_at(point) {
            return;
        }
        if let Some(raft) = self.raft() {
            monoio::spawn(async move {
                let _ = raft.trigger().snapshot().await;
            });
        }
    }

    fn installed(&self) -> Option<(SnapshotPoint, Vec<u8>)> {
        self.applied.installed()
    }

    fn take_installed_offsets(&self) -> Option<StoredOffsets> {
        self.applied.take_installed_offsets()
    }
}

/// Proposes an entry without messages (stored offsets, a purge) here
/// when this member leads, at the leader when another does, waiting up to
/// `LEADER_WAIT` while none does; answers its index.
async fn propose_entry_at_leader(
    raft: &GroupRaft,
    lease: &Lease,
    node_id: u64,
    forward: &ForwardEntry,
    entry: ControlEntry,
) -> Result<u64, ProposeError> {
    at_leader(
        raft,
        lease,
        node_id,
        async || {
            let proposing = replay::propose_control(raft, entry.clone());
            while_leased(raft, lease, proposing).await
        },
        async |leader| forward(leader, entry.clone()).await,
    )
    .await
}

/// Proposes `batch` here when this member leads, at the leader when
/// another member does, and waits up to `LEADER_WAIT` while none does;
/// a resend of a batch in doubt is resolved first (`resolve_after`).
async fn propose_at_leader(
    raft: &GroupRaft,
    lease: &Lease,
    applied: &Applied,
    node_id: u64,
    forward: &Forward,
    batch: Vec<u8>,
    resolve_after: Option<u64>,
) -> Result<Appended, ProposeError> {
    at_leader(
        raft,
        lease,
        node_id,
        async || {
            let proposing = replay::propose(raft, &applied.replays, batch.clone(), resolve_after);
            while_leased(raft, lease, proposing).await
        },
        async |leader| forward(leader, batch.clone(), resolve_after).await,
    )
    .await
}

/// Runs `here` when this member leads (and a quorum still answers it),
/// `there` with the leader's id when another member does, and waits while
/// none does or this one is cut off; a try that appended nothing is made
/// again against the leader as it is then, all within `LEADER_WAIT`.
async fn at_leader<T>(
    raft: &GroupRaft,
    lease: &Lease,
    node_id: u64,
    mut here: impl AsyncFnMut() -> Result<T, ProposeError>,
    mut there: impl AsyncFnMut(u64) -> Result<T, ProposeError>,
) -> Result<T, ProposeError> {
    let deadline = std::time::Instant::now() + LEADER_WAIT;
    loop {
        let leader = raft.metrics().borrow_watched().current_leader;
        if leader == Some(node_id) && !lease.holds(raft) {
            // Idle (a quiet group's acknowledgements are old) or cut
            // off: one heartbeat tells which.
            lease.renew(raft).await;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let result = match leader {
            Some(leader) if leader == node_id && !lease.holds(raft) => {
                // Cut off from its quorum (or just elected, before the
                // first acknowledgement): nothing is proposed until a
                // quorum answers again or another member leads.
                if left.is_zero() {
                    return Err(ProposeError::NotDelivered(
                        "no quorum answers this member, which leads the partition's group"
                            .to_string(),
                    ));
                }
                monoio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Some(leader) if leader == node_id => {
                lease.renew(raft).await;
                here().await
            }
            Some(leader) => there(leader).await,
            None => {
                if left.is_zero() {
                    return Err(ProposeError::NotDelivered(
                        "the partition's group has no leader".to_string(),
                    ));
                }
                // Woken when the metrics change (a leader is elected) or
                // when the wait runs out; the loop looks again either way.
                let _ = raft
                    .wait(Some(left))
                    .metrics(|metrics| metrics.current_leader.is_some(), "a leader")
                    .await;
                continue;
            }
        };
        match result {
            // Nothing was appended (leadership moved, or the leader could
            // not be reached): try the leader as it is now, while the wait
            // lasts.
            Err(ProposeError::NotLeader(_) | ProposeError::NotDelivered(_))
                if !deadline
                    .saturating_duration_since(std::time::Instant::now())
                    .is_zero() =>
            {
                monoio::time::sleep(RETRY_PAUSE).await;
            }
            other => return other,
        }
    }
}

/// Waits for `proposing`, a proposal made here as the leader, until it
/// ends or this member's lease runs out: a leader cut off from its quorum
/// keeps believing it leads and openraft would wait for ever; its client
/// is told the outcome is unknown instead (57: the entry may still commit
/// through a later leader, so a batch is in doubt here).
async fn while_leased<T>(
    raft: &GroupRaft,
    lease: &Lease,
    proposing: impl std::future::Future<Output = Result<T, ProposeError>>,
) -> Result<T, ProposeError> {
    let every = std::time::Duration::from_millis((raft.config().election_timeout_max / 4).max(10));
    let proposing = std::pin::pin!(proposing);
    let lease_lost = std::pin::pin!(async {
        loop {
            monoio::time::sleep(every).await;
            if !lease.holds(raft) {
                return;
            }
        }
    });
    match futures_util::future::select(proposing, lease_lost).await {
        futures_util::future::Either::Left((result, _)) => result,
        futures_util::future::Either::Right(((), _)) => Err(ProposeError::Unknown(
            "this member lost its quorum while the proposal was out".to_string(),
        )),
    }
}
