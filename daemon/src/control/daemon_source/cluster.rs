//! `iggyd cluster …` on the admin thread: the cluster's state gathered from
//! every shard (each reports its groups from openraft's metrics, answering
//! at once, within `ADMIN_CLUSTER_STATUS_TIMEOUT`), the configured nodes
//! (reachable when their replication address accepts a TCP connection),
//! and leader transfers (checked first, triggered on the owner shards,
//! then watched until this node sees the new leader, at most
//! `ADMIN_CLUSTER_TRANSFER_WAIT`), and membership changes (`add-node`,
//! `remove-node`: checked here first, then the metadata group's change,
//! then every partition group's at once, each carried out by the owner
//! shard where the group's leader is, every outcome within
//! `ADMIN_CLUSTER_MEMBERSHIP_WAIT`).
//!
//! Like the flush action it messages shards with a deadline; the periodic
//! snapshot never does. A cluster node's Prometheus scrape gathers the
//! groups the same way (`cluster_series`).

use super::DaemonSource;
use crate::cluster::node::{ClusterRoster, RosterNode};
use crate::control::api::cluster::{
    ClusterStatus, GroupChange, GroupName, GroupStatus, METADATA_GROUP, MembershipChange, Move,
    NodeStatus, Role, Transfer,
};
use crate::control::api::{ClusterOp, Payload};
use crate::control::metrics::ClusterSeries;
use crate::limits;
use crate::shard::mesh::ShardMessage;
use crate::shard::replica::ChangeAnswer;
use crate::shard::replica::METADATA_STORAGE_ID;
use iggyd_raft::membership::{MemberChange, MemberError, MemberOutcome, NodeCard, check_removal};
use iggyd_raft::network::ForwardedChange;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What the refusals say when this daemon runs no cluster (the console
/// recognizes it).
pub use crate::control::api::cluster::NO_CLUSTER;

impl DaemonSource {
    pub(super) fn cluster_op(&self, op: ClusterOp) -> Result<Payload, String> {
        let roster = self.parts().cluster.clone().ok_or(NO_CLUSTER)?;
        match op {
            ClusterOp::Status => Ok(Payload::ClusterStatus {
                status: Box::new(self.cluster_status(&roster)),
            }),
            ClusterOp::TransferLeader { to, group } => self
                .transfer_leader(&roster, to, group)
                .map(|transfer| Payload::TransferLeader { transfer }),
            ClusterOp::AddNode {
                id,
                address,
                replication_address,
                name,
            } => self
                .add_node(&roster, id, address, replication_address, name)
                .map(|change| Payload::MembershipChange { change }),
            ClusterOp::RemoveNode { id } => self
                .remove_node(&roster, id)
                .map(|change| Payload::MembershipChange { change }),
        }
    }

    fn add_node(
        &self,
        roster: &ClusterRoster,
        id: u64,
        address: std::net::SocketAddr,
        replication_address: std::net::SocketAddr,
        name: Option<String>,
    ) -> Result<MembershipChange, String> {
        if let Some(other) = roster.nodes().into_iter().find(|node| {
            node.id != id
                && (node.address == address || node.replication_address == replication_address)
        }) {
            return Err(format!(
                "node {} already uses {address} or {replication_address}: give node {id} \
                 addresses of its own",
                other.id
            ));
        }
        let card = NodeCard {
            replication: replication_address.to_string(),
            address: Some(address.to_string()),
            name: Some(name.unwrap_or_else(|| format!("node-{id}"))),
        };
        let (groups, _) = self.groups();
        let voters = metadata_voters(&groups)?;
        let after = voters.len() + usize::from(!voters.contains(&id));
        let note = (after % 2 == 0).then(|| {
            format!(
                "the cluster has {after} voters, an even count that tolerates no more failures \
                 than {}: to finish a replacement, remove the node being replaced \
                 (`iggyd cluster remove-node --id N`)",
                after - 1
            )
        });
        let change = MemberChange::Add {
            id,
            node: card.node(),
        };
        Ok(self.change_every_group("add", id, change, false, note))
    }

    fn remove_node(&self, roster: &ClusterRoster, id: u64) -> Result<MembershipChange, String> {
        let (groups, _) = self.groups();
        let voters = metadata_voters(&groups)?;
        let members: BTreeSet<u64> = groups
            .iter()
            .find(|group| group.group == METADATA_GROUP)
            .map(|group| {
                group
                    .learners
                    .iter()
                    .chain(&group.voters)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        if !members.contains(&id) && !groups.iter().any(|group| group.voters.contains(&id)) {
            let known: Vec<String> = members.iter().map(u64::to_string).collect();
            return Err(format!(
                "unknown node {id}: the cluster's nodes are {}",
                known.join(", ")
            ));
        }
        let nodes = roster.nodes();
        let alive: BTreeSet<u64> = nodes
            .iter()
            .zip(reach_nodes(&nodes, roster.node_id))
            .filter(|(_, reachable)| *reachable)
            .map(|(node, _)| node.id)
            .collect();
        check_removal(&voters, id, &alive, false)?;
        Ok(self.change_every_group("remove", id, MemberChange::Remove { id }, false, None))
    }

    /// `change` on every group: the metadata group first (the roster and
    /// the voters new partitions start with follow it), then every
    /// partition group this node has, all at once, each carried out where
    /// its leader is; every outcome within `ADMIN_CLUSTER_MEMBERSHIP_WAIT`.
    fn change_every_group(
        &self,
        what: &str,
        target: u64,
        change: MemberChange,
        allow_even: bool,
        note: Option<String>,
    ) -> MembershipChange {
        let started = Instant::now();
        let deadline = started + limits::ADMIN_CLUSTER_MEMBERSHIP_WAIT;
        let forwarded = ForwardedChange {
            change,
            wait_ms: millis(limits::ADMIN_CLUSTER_MEMBERSHIP_STEP_WAIT),
            allow_even,
        };
        let metadata = self.ask_change(0, METADATA_STORAGE_ID, &forwarded, deadline);
        let metadata = finish(METADATA_GROUP.to_string(), metadata, deadline, started);
        let mut changes = vec![metadata];
        let metadata_done = changes.iter().all(|group| group.done);
        let (groups, silent) = self.groups();
        let partitions = groups
            .into_iter()
            .filter(|group| group.group != METADATA_GROUP);
        if metadata_done {
            let asked: Vec<(String, Asked)> = partitions
                .map(|group| {
                    let shard = usize::try_from(group.shard).unwrap_or(usize::MAX);
                    let channel = group.storage_id.unwrap_or(METADATA_STORAGE_ID);
                    let asked = self.ask_change(shard, channel, &forwarded, deadline);
                    (group.group, asked)
                })
                .collect();
            for (group, asked) in asked {
                changes.push(finish(group, asked, deadline, started));
            }
        } else {
            for group in partitions {
                changes.push(GroupChange {
                    group: group.group,
                    done: false,
                    outcome: "not tried: the metadata group did not change".into(),
                    voters: group.voters,
                    elapsed_ms: 0,
                });
            }
        }
        for shard in silent {
            changes.push(GroupChange {
                group: format!("shard {shard}"),
                done: false,
                outcome: "the shard did not list its groups in time: run it again".into(),
                voters: Vec::new(),
                elapsed_ms: millis(started.elapsed()),
            });
        }
        for group in &changes {
            tracing::info!(
                group = %group.group,
                change = what,
                node = target,
                done = group.done,
                outcome = %group.outcome,
                "membership change asked from the admin socket"
            );
        }
        MembershipChange {
            node_id: self
                .parts()
                .cluster
                .as_ref()
                .map_or(0, |roster| roster.node_id),
            change: what.to_string(),
            target,
            groups: changes,
            note,
        }
    }

    /// Asks the group on `channel` of shard `shard` for `change`.
    fn ask_change(
        &self,
        shard: usize,
        channel: u64,
        change: &ForwardedChange,
        deadline: Instant,
    ) -> Asked {
        let (reply, answer) = flume::bounded(1);
        match self.parts().mesh.send_deadline(
            shard,
            ShardMessage::ChangeMembers {
                channel,
                change: change.clone(),
                reply,
            },
            deadline,
        ) {
            Ok(()) => Asked::Sent(answer),
            Err(error) => Asked::NotSent(format!("shard {shard}: {error}")),
        }
    }

    /// A cluster node's groups for a Prometheus scrape (`None` on a
    /// single node): the same gathering as `cluster_status`, without
    /// probing the nodes.
    pub(super) fn cluster_series(&self) -> Option<ClusterSeries> {
        self.parts().cluster.as_ref()?;
        let (groups, shards_silent) = self.groups();
        Some(ClusterSeries {
            groups,
            shards_silent,
        })
    }

    /// Every shard's groups (the metadata group first, then by stream,
    /// topic and partition) and the shards that did not answer in time.
    fn groups(&self) -> (Vec<GroupStatus>, Vec<u32>) {
        let parts = self.parts();
        let deadline = Instant::now() + limits::ADMIN_CLUSTER_STATUS_TIMEOUT;
        let mut silent = Vec::new();
        let mut asked = Vec::new();
        for shard in 0..parts.shards.len() {
            let (reply, answer) = flume::bounded(1);
            match parts
                .mesh
                .send_deadline(shard, ShardMessage::ClusterStatus { reply }, deadline)
            {
                Ok(()) => asked.push((shard, answer)),
                Err(_) => silent.push(shard_id(shard)),
            }
        }
        let mut groups = Vec::new();
        for (shard, answer) in asked {
            match answer.recv_deadline(deadline) {
                Ok(reported) => groups.extend(reported),
                Err(_) => silent.push(shard_id(shard)),
            }
        }
        groups.sort_by_key(order);
        silent.sort_unstable();
        (groups, silent)
    }

    fn cluster_status(&self, roster: &ClusterRoster) -> ClusterStatus {
        let (groups, shards_silent) = self.groups();
        let metadata = groups.iter().find(|group| group.group == METADATA_GROUP);
        let listed = roster.nodes();
        let reachable = reach_nodes(&listed, roster.node_id);
        let nodes = listed
            .iter()
            .zip(reachable)
            .map(|(node, reachable)| NodeStatus {
                id: node.id,
                name: node.name.clone(),
                address: node.address.to_string(),
                replication_address: node.replication_address.to_string(),
                reachable,
                role: node_role(metadata, node.id, roster.node_id),
                this_node: node.id == roster.node_id,
            })
            .collect();
        ClusterStatus {
            cluster: roster.name.clone(),
            node_id: roster.node_id,
            nodes,
            groups,
            shards_silent,
        }
    }

    fn transfer_leader(
        &self,
        roster: &ClusterRoster,
        to: u64,
        group: Option<GroupName>,
    ) -> Result<Transfer, String> {
        let me = roster.node_id;
        let listed = roster.nodes();
        let known: Vec<String> = listed.iter().map(|node| node.id.to_string()).collect();
        if !listed.iter().any(|node| node.id == to) {
            return Err(format!(
                "unknown node {to}: the cluster's nodes are {}",
                known.join(", ")
            ));
        }
        if to == me {
            return Err(format!(
                "node {to} is this node: name the node to hand leadership to \
                 (run this on the node that leads now)"
            ));
        }
        let (groups, silent) = self.groups();
        let targets: Vec<GroupStatus> = match group {
            Some(name) => {
                let name = name.to_string();
                let Some(group) = groups.into_iter().find(|group| group.group == name) else {
                    return Err(if silent.is_empty() {
                        format!("no group {name} on this node (`iggyd cluster status` lists them)")
                    } else {
                        format!("no group {name} found: shards {silent:?} did not answer in time")
                    });
                };
                match group.leader {
                    Some(leader) if leader == me => vec![group],
                    Some(leader) => {
                        return Err(format!(
                            "node {me} does not lead group {name}: node {leader} does; \
                             run this on node {leader}"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "group {name} has no leader now (an election is under way): \
                             try again"
                        ));
                    }
                }
            }
            None => groups
                .into_iter()
                .filter(|group| group.leader == Some(me))
                .collect(),
        };
        if let Some(group) = targets.iter().find(|group| !group.voters.contains(&to)) {
            let voters: Vec<String> = group.voters.iter().map(u64::to_string).collect();
            return Err(format!(
                "node {to} is not a voter of group {} (voters: {}): only a voter can lead",
                group.group,
                voters.join(", ")
            ));
        }
        let started = Instant::now();
        let mut moves = Vec::new();
        for group in &targets {
            self.trigger(group, to)?;
            moves.push(Move {
                group: group.group.clone(),
                from: me,
                to,
                moved: false,
                leader: Some(me),
                elapsed_ms: 0,
            });
        }
        let deadline = started + limits::ADMIN_CLUSTER_TRANSFER_WAIT;
        while moves.iter().any(|moved| !moved.moved) {
            let (groups, _) = self.groups();
            let elapsed = millis(started.elapsed());
            for moved in moves.iter_mut().filter(|moved| !moved.moved) {
                if let Some(group) = groups.iter().find(|group| group.group == moved.group) {
                    moved.leader = group.leader;
                }
                moved.moved = moved.leader == Some(to);
                moved.elapsed_ms = elapsed;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(limits::ADMIN_CLUSTER_TRANSFER_POLL);
        }
        for moved in &moves {
            tracing::info!(
                group = %moved.group,
                to,
                moved = moved.moved,
                elapsed_ms = moved.elapsed_ms,
                "leader transfer asked from the admin socket"
            );
        }
        Ok(Transfer {
            node_id: me,
            to,
            moves,
        })
    }

    /// Asks `group`'s owner shard to start the transfer.
    fn trigger(&self, group: &GroupStatus, to: u64) -> Result<(), String> {
        let deadline = Instant::now() + limits::ADMIN_ACTION_TIMEOUT;
        let channel = group.storage_id.unwrap_or(METADATA_STORAGE_ID);
        let (reply, answer) = flume::bounded(1);
        let shard = usize::try_from(group.shard).unwrap_or(usize::MAX);
        self.parts()
            .mesh
            .send_deadline(
                shard,
                ShardMessage::TransferLeader { channel, to, reply },
                deadline,
            )
            .map_err(|error| format!("transfer of group {}: {error}", group.group))?;
        match answer.recv_deadline(deadline) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("transfer of group {}: {error}", group.group)),
            Err(_) => Err(format!(
                "transfer of group {}: shard {shard} did not answer in time",
                group.group
            )),
        }
    }
}

/// A change asked of a shard, or why it was not.
enum Asked {
    Sent(flume::Receiver<ChangeAnswer>),
    NotSent(String),
}

/// A group's outcome, waited for until `deadline`.
fn finish(group: String, asked: Asked, deadline: Instant, started: Instant) -> GroupChange {
    let answer = match asked {
        Asked::Sent(answer) => answer.recv_deadline(deadline).unwrap_or_else(|_| {
            Err(MemberError::Failed(
                "no outcome in time (it may still be made): run it again".into(),
            ))
        }),
        Asked::NotSent(why) => Err(MemberError::Failed(why)),
    };
    let (done, outcome, voters) = match answer {
        Ok(MemberOutcome::Changed { voters }) => (true, "changed".to_string(), voters),
        Ok(MemberOutcome::Unchanged { voters }) => (true, "unchanged".to_string(), voters),
        Err(error) => (false, error.to_string(), Vec::new()),
    };
    GroupChange {
        group,
        done,
        outcome,
        voters,
        elapsed_ms: millis(started.elapsed()),
    }
}

/// The metadata group's voters as this node sees them.
fn metadata_voters(groups: &[GroupStatus]) -> Result<BTreeSet<u64>, String> {
    groups
        .iter()
        .find(|group| group.group == METADATA_GROUP)
        .map(|group| group.voters.iter().copied().collect())
        .ok_or_else(|| {
            "the metadata group has not started on this node (shard 0 did not answer in time)"
                .to_string()
        })
}

fn shard_id(shard: usize) -> u32 {
    u32::try_from(shard).unwrap_or(u32::MAX)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The metadata group first, then partitions by their ids.
fn order(group: &GroupStatus) -> (bool, u32, u32, u32, String) {
    match GroupName::parse(&group.group) {
        Ok(GroupName::Metadata) => (false, 0, 0, 0, String::new()),
        Ok(GroupName::Partition {
            stream,
            topic,
            partition,
        }) => (true, stream, topic, partition, String::new()),
        Err(_) => (true, u32::MAX, u32::MAX, u32::MAX, group.group.clone()),
    }
}

/// A node's role in the metadata group as this node sees it.
pub fn node_role(metadata: Option<&GroupStatus>, node: u64, this_node: u64) -> Role {
    let Some(metadata) = metadata else {
        return Role::Unknown;
    };
    if node == this_node {
        return metadata.role;
    }
    if metadata.leader == Some(node) {
        Role::Leader
    } else if metadata.voters.contains(&node) {
        Role::Follower
    } else if metadata.learners.contains(&node) {
        Role::Learner
    } else {
        Role::Shutdown
    }
}

/// Whether each node's replication address accepts a TCP connection now
/// (this node: yes), tried at once, each within
/// `ADMIN_CLUSTER_REACH_TIMEOUT`.
fn reach_nodes(nodes: &[RosterNode], this_node: u64) -> Vec<bool> {
    std::thread::scope(|scope| {
        let tries: Vec<_> = nodes
            .iter()
            .map(|node| {
                let address = node.replication_address;
                let this = node.id == this_node;
                scope.spawn(move || {
                    this || std::net::TcpStream::connect_timeout(
                        &address,
                        limits::ADMIN_CLUSTER_REACH_TIMEOUT,
                    )
                    .is_ok()
                })
            })
            .collect();
        tries
            .into_iter()
            .map(|attempt| attempt.join().unwrap_or(false))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(leader: Option<u64>) -> GroupStatus {
        GroupStatus {
            group: METADATA_GROUP.into(),
            storage_id: None,
            shard: 0,
            leader,
            term: 2,
            role: Role::Follower,
            last_log: Some(4),
            committed: Some(4),
            applied: Some(4),
            voters: vec![1, 2, 3],
            learners: vec![4],
            followers: vec![],
        }
    }

    #[test]
    fn a_nodes_role_comes_from_the_metadata_group() {
        let group = metadata(Some(2));
        assert_eq!(node_role(Some(&group), 1, 1), Role::Follower);
        assert_eq!(node_role(Some(&group), 2, 1), Role::Leader);
        assert_eq!(node_role(Some(&group), 3, 1), Role::Follower);
        assert_eq!(node_role(Some(&group), 4, 1), Role::Learner);
        assert_eq!(node_role(Some(&group), 5, 1), Role::Shutdown);
        assert_eq!(node_role(None, 2, 1), Role::Unknown);
    }

    #[test]
    fn groups_are_ordered_metadata_first_then_by_ids() {
        let mut groups: Vec<GroupStatus> = ["1/1/10", "1/1/2", METADATA_GROUP, "0/3/0"]
            .iter()
            .map(|name| GroupStatus {
                group: (*name).into(),
                ..metadata(None)
            })
            .collect();
        groups.sort_by_key(order);
        let names: Vec<&str> = groups.iter().map(|group| group.group.as_str()).collect();
        assert_eq!(names, [METADATA_GROUP, "0/3/0", "1/1/2", "1/1/10"]);
    }
}
