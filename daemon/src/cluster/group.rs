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
//! The group starts in a task of its own (openraft reads the log through
//! the pump while it starts, and the pump must never wait for it); until
//! it has started it leads nothing and proposals are refused as
//! leaderless.
//!
//! Must not: block the pump, or answer a proposal before it is committed.

use crate::cluster::metadata::LocalFuture;
use crate::shard::op::{AppendAck, PumpError, Reply, answer};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, Leadership};
use iggyd_raft::state_machine::{Applied, StateMachine};
use iggyd_raft::{Appended, PartitionRaft, Proposal};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// How long a proposal waits for the group to have a leader before it is
/// refused as not committed (an election takes one to two election
/// timeouts).
pub const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a forwarded proposal waits for the leader's answer.
pub const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a proposal to the group's leader (its node id) and answers with
/// the leader's outcome.
pub type Forward = Rc<dyn Fn(u64, Vec<u8>) -> LocalFuture<Result<Appended, String>>>;

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
}

impl PartitionGroup {
    /// A group not started yet; its messages start at `first_offset`.
    pub fn new(
        key: PartitionKey,
        node_id: u64,
        first_offset: u64,
        forward: Forward,
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
        }
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
}

impl Group for PartitionGroup {
    fn propose(&self, batch: Vec<u8>, reply: Reply<AppendAck>) {
        let Some(raft) = self.raft() else {
            answer(reply, Err(PumpError::NotLeader { leader: None }));
            return;
        };
        let node_id = self.node_id;
        let forward = self.forward.clone();
        monoio::spawn(async move {
            let result = propose_at_leader(&raft, node_id, &forward, batch).await;
            answer(
                reply,
                result.map(|appended| AppendAck {
                    base_offset: appended.base_offset,
                    last_offset: appended.last_offset,
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
}

/// Proposes `batch` here when this member leads, at the leader when
/// another member does, and waits up to `LEADER_WAIT` while none does.
async fn propose_at_leader(
    raft: &GroupRaft,
    node_id: u64,
    forward: &Forward,
    batch: Vec<u8>,
) -> Result<Appended, PumpError> {
    let deadline = std::time::Instant::now() + LEADER_WAIT;
    loop {
        let leader = raft.metrics().borrow_watched().current_leader;
        match leader {
            Some(leader) if leader == node_id => {
                return match raft.client_write(Proposal(batch)).await {
                    Ok(written) => Ok(*written.response()),
                    Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                        Err(PumpError::NotLeader {
                            leader: forward.leader_id,
                        })
                    }
                    Err(error) => Err(PumpError::NotCommitted {
                        reason: error.to_string(),
                    }),
                };
            }
            Some(leader) => {
                return forward(leader, batch)
                    .await
                    .map_err(|reason| PumpError::NotCommitted { reason });
            }
            None => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(PumpError::NotCommitted {
                        reason: "the partition's group has no leader".to_string(),
                    });
                }
                // Woken when the metrics change (a leader is elected) or
                // when the wait runs out; the loop looks again either way.
                let _ = raft
                    .wait(Some(left))
                    .metrics(|metrics| metrics.current_leader.is_some(), "a leader")
                    .await;
            }
        }
    }
}
