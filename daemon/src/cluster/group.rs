//! A replicated partition's consensus group on this node: an openraft
//! group on the partition's owner shard whose log is the pump's (through
//! `PumpBackend`) and whose network is the node-to-node transport. The
//! pump sees it as a `shard::replica::Group`: it proposes a leader's
//! stamped batches, asks who leads, and reads how far consumers may read.
//!
//! The group starts in a task of its own (openraft reads the log through
//! the pump while it starts, and the pump must never wait for it); until
//! it has started it leads nothing and proposals are refused as
//! leaderless.
//!
//! Must not: block the pump, or answer a proposal before it is committed.

use crate::shard::op::{AppendAck, PumpError, Reply, answer};
use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, Leadership};
use iggyd_raft::state_machine::{Applied, StateMachine};
use iggyd_raft::{PartitionRaft, Proposal};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// An openraft group of this node.
pub type GroupRaft = openraft::Raft<PartitionRaft, StateMachine>;

/// A partition's group as its pump holds it.
pub struct PartitionGroup {
    key: PartitionKey,
    node_id: u64,
    raft: RefCell<Option<Rc<GroupRaft>>>,
    applied: Rc<Applied>,
    stopped: Cell<bool>,
}

impl PartitionGroup {
    /// A group not started yet; its messages start at `first_offset`.
    pub fn new(key: PartitionKey, node_id: u64, first_offset: u64) -> PartitionGroup {
        let applied = Applied::default();
        applied.committed_next_offset.set(first_offset);
        PartitionGroup {
            key,
            node_id,
            raft: RefCell::new(None),
            applied: Rc::new(applied),
            stopped: Cell::new(false),
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
        monoio::spawn(async move {
            let result = match raft.client_write(Proposal(batch)).await {
                Ok(written) => {
                    let appended = written.response();
                    Ok(AppendAck {
                        base_offset: appended.base_offset,
                        last_offset: appended.last_offset,
                    })
                }
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
                    Err(PumpError::NotLeader {
                        leader: forward.leader_id,
                    })
                }
                Err(error) => Err(PumpError::NotCommitted {
                    reason: error.to_string(),
                }),
            };
            answer(reply, result);
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
