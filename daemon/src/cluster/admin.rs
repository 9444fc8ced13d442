//! What the admin socket asks of a shard's groups (`iggyd cluster …`):
//! each group's state from openraft's metrics (read from the metrics
//! channel at once, never waiting on a group), and a leader transfer
//! (openraft's `trigger().transfer_leader`, which only a leader acts on),
//! and a membership change (`iggyd_raft::membership::change_members` where
//! the group's leader is: here, or forwarded to it).
//!
//! Must not: wait for a pump or a peer while the shard's loop waits (a
//! transfer's trigger runs in a task of its own and answers on a channel).

use super::ShardCluster;
use super::metadata::METADATA_CHANNEL;
use crate::shard::replica::ReplicationCounters;
use iggyd_admin_api::cluster::{FollowerStatus, GroupStatus, METADATA_GROUP, Role};
use iggyd_raft::PartitionRaft;
use iggyd_raft::membership::{MemberError, fresh_acknowledgements};
use iggyd_raft::network::{ForwardedChange, Network, Transport};
use openraft::async_runtime::WatchReceiver;
use openraft::storage::RaftStateMachine;

/// The name a partition's group goes by (`<stream>/<topic>/<partition>`).
pub fn partition_group_name(stream: u32, topic: u32, partition: u32) -> String {
    format!("{stream}/{topic}/{partition}")
}

fn role(state: openraft::ServerState) -> Role {
    match state {
        openraft::ServerState::Leader => Role::Leader,
        openraft::ServerState::Follower => Role::Follower,
        openraft::ServerState::Candidate => Role::Candidate,
        openraft::ServerState::Learner => Role::Learner,
        openraft::ServerState::Shutdown => Role::Shutdown,
    }
}

/// `raft`'s state as the admin socket shows it.
pub fn group_status<SM: RaftStateMachine<PartitionRaft>>(
    raft: &openraft::Raft<PartitionRaft, SM>,
    group: String,
    storage_id: Option<u64>,
    shard: u32,
) -> GroupStatus {
    let receiver = raft.metrics();
    let metrics = receiver.borrow_watched();
    // A restarted node remembers voting for itself: it leads only once it
    // has won an election again (as `follow_leader` reads it too).
    let leader = match metrics.current_leader {
        Some(leader) if leader == metrics.id && !metrics.state.is_leader() => None,
        leader => leader,
    };
    let membership = metrics.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    let last_log = metrics.last_log_index;
    let followers = metrics
        .replication
        .as_ref()
        .map(|replication| {
            replication
                .iter()
                .filter(|(node, _)| **node != metrics.id)
                .map(|(node, matched)| {
                    let matched = matched.as_ref().map(|log_id| log_id.index());
                    let lag = match (last_log, matched) {
                        (Some(last), Some(matched)) => last.saturating_sub(matched),
                        (Some(last), None) => last.saturating_add(1),
                        (None, _) => 0,
                    };
                    FollowerStatus {
                        node: *node,
                        matched,
                        lag,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    GroupStatus {
        group,
        storage_id,
        shard,
        leader,
        term: metrics.current_term,
        role: role(metrics.state),
        last_log,
        committed: metrics
            .local_committed
            .as_ref()
            .map(|log_id| log_id.index()),
        applied: metrics.last_applied.as_ref().map(|log_id| log_id.index()),
        voters,
        learners,
        followers,
    }
}

impl<T: Transport> ShardCluster<T> {
    /// Every started group of this shard (shard 0's metadata group first).
    pub fn status(&self, shard: u32) -> Vec<GroupStatus> {
        let mut groups = Vec::new();
        if let Some(raft) = self.metadata().and_then(|group| group.raft()) {
            groups.push(group_status(&raft, METADATA_GROUP.to_string(), None, shard));
        }
        let mut partitions: Vec<GroupStatus> = self
            .groups
            .borrow()
            .values()
            .filter_map(|group| {
                let raft = group.raft()?;
                let key = group.key();
                Some(group_status(
                    &raft,
                    partition_group_name(key.stream, key.topic, key.partition),
                    Some(key.storage_id),
                    shard,
                ))
            })
            .collect();
        partitions.sort_by(|a, b| a.group.cmp(&b.group));
        groups.extend(partitions);
        groups
    }

    /// This shard's election and forwarding counters: every started
    /// group's term read from openraft's metrics (the metadata group's on
    /// the metadata channel). Walks the groups: once a second, not per
    /// round.
    pub fn counters(&self) -> ReplicationCounters {
        let mut terms = std::collections::BTreeMap::new();
        if let Some(raft) = self.metadata().and_then(|group| group.raft()) {
            terms.insert(
                METADATA_CHANNEL,
                raft.metrics().borrow_watched().current_term,
            );
        }
        for (channel, group) in self.groups.borrow().iter() {
            if let Some(raft) = group.raft() {
                terms.insert(*channel, raft.metrics().borrow_watched().current_term);
            }
        }
        let forwarded = &self.counters.forwarded;
        ReplicationCounters {
            elections: self.counters.elections(terms),
            forwarded_messages: forwarded.messages.get(),
            forwarded_offsets: forwarded.offsets.get(),
        }
    }

    /// Asks group `channel` (a storage id, or the metadata channel) to hand
    /// its leadership to `to`; `reply` hears whether openraft took the
    /// request (it acts only while this node leads).
    pub fn transfer_leader(&self, channel: u64, to: u64, reply: flume::Sender<Result<(), String>>) {
        let trigger = if channel == METADATA_CHANNEL {
            self.metadata()
                .and_then(|group| group.raft())
                .map(Trigger::Metadata)
        } else {
            self.raft(channel).map(Trigger::Partition)
        };
        let Some(trigger) = trigger else {
            let _ = reply.send(Err(format!(
                "group {channel} has not started on this shard"
            )));
            return;
        };
        let timing = super::quiet::Timing::of(&self.settings.raft);
        monoio::spawn(async move {
            let outcome = match trigger {
                Trigger::Metadata(raft) => raft.trigger().transfer_leader(to).await,
                Trigger::Partition(raft) => {
                    // openraft's target takes over only once it flushed
                    // the leader's log under the leader's vote, which a
                    // node restarted since the group's last write has not
                    // (no append reached it yet), and the leader sends no
                    // heartbeat while it hands over: it is heartbeated
                    // first (without this, a transfer to a node restarted
                    // moments earlier moved 3 of 10 groups, an election
                    // took the others).
                    fresh_acknowledgements(&raft, timing.election_max, |voter| voter == to).await;
                    raft.trigger().transfer_leader(to).await
                }
            };
            let _ = reply.send(outcome.map_err(|error| error.to_string()));
        });
    }
}

enum Trigger {
    Metadata(std::rc::Rc<super::metadata::MetadataRaft>),
    Partition(std::rc::Rc<super::group::GroupRaft>),
}

pub use crate::shard::replica::ChangeAnswer;

/// Leaders one change follows at most when a node it asks names another
/// (a leader that hands off, a stale view), before waiting again.
const CHANGE_HOPS: u32 = 6;

/// How long a round waits for an election before looking again.
const LEADERLESS_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

impl<T: Transport> ShardCluster<T> {
    /// Carries out a membership change of group `channel` (a storage id,
    /// or the metadata channel): here when this node leads it, else at its
    /// leader (node-to-node); `reply` hears the outcome. Runs in a task of
    /// its own, every wait bounded by the change's.
    pub fn change_members(
        &self,
        channel: u64,
        change: ForwardedChange,
        reply: flume::Sender<ChangeAnswer>,
    ) {
        let network = Network::new(self.transport.clone(), channel);
        if channel == METADATA_CHANNEL {
            let Some(raft) = self.metadata().and_then(|group| group.raft()) else {
                let _ = reply.send(Err(not_started(channel)));
                return;
            };
            monoio::spawn(async move {
                let _ = reply.send(drive(&raft, &network, &change).await);
            });
        } else {
            let Some(raft) = self.raft(channel) else {
                let _ = reply.send(Err(not_started(channel)));
                return;
            };
            monoio::spawn(async move {
                let _ = reply.send(drive(&raft, &network, &change).await);
            });
        }
    }
}

fn not_started(channel: u64) -> MemberError {
    MemberError::Failed(format!("group {channel} has not started on this shard"))
}

/// One change, made where the group's leader is: here, or forwarded to it
/// (a leader that is removed hands off first and names its successor,
/// which the next round forwards to). While the group has no leader, or
/// the one this node knows of cannot be reached (it just died and the
/// others have not elected a new one yet), it looks again until the
/// change's wait has passed.
async fn drive<T: Transport, SM: RaftStateMachine<PartitionRaft>>(
    raft: &openraft::Raft<PartitionRaft, SM>,
    network: &Network<T>,
    change: &ForwardedChange,
) -> ChangeAnswer {
    let wait = std::time::Duration::from_millis(change.wait_ms);
    // The leader's steps each wait up to `wait`; the call outlives them.
    let call_timeout = wait * 3 + std::time::Duration::from_secs(2);
    let started = std::time::Instant::now();
    let mut leader = None;
    let mut hops = 0;
    loop {
        let (me, known) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            let known = if metrics.state.is_leader() {
                Some(metrics.id)
            } else {
                metrics
                    .current_leader
                    .filter(|leader| *leader != metrics.id)
            };
            (metrics.id, known)
        };
        let target = leader.take().or(known);
        let outcome = match target {
            Some(target) if target == me => {
                iggyd_raft::membership::change_members(
                    raft,
                    change.change.clone(),
                    wait,
                    change.allow_even,
                )
                .await
            }
            Some(target) => network.forward_change(target, change, call_timeout).await,
            None => Err(MemberError::NotLeader(None)),
        };
        let last = match outcome {
            Err(MemberError::NotLeader(Some(next))) if hops < CHANGE_HOPS => {
                hops += 1;
                leader = Some(next);
                continue;
            }
            Err(error @ (MemberError::NotLeader(_) | MemberError::Unreachable { .. })) => error,
            other => return other,
        };
        if started.elapsed() + LEADERLESS_PAUSE > wait {
            return Err(last);
        }
        monoio::time::sleep(LEADERLESS_PAUSE).await;
    }
}
