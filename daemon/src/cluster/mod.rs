//! Replication between iggyd nodes (`[cluster]`): on each shard, the
//! consensus groups of the replicated partitions it owns, their log on the
//! pump (`backend.rs`), their network, and the receiving side of
//! node-to-node calls. The shard knows this layer only through
//! `shard::replica::Replication`, which [`ShardCluster`] implements.
//!
//! A node's groups use one openraft configuration; every voter of the
//! cluster is a replica of every replicated partition (replica sets
//! smaller than the cluster are a later step), and every node initializes
//! a new group with the same voters (a node that hears from an initialized
//! peer first is refused, which is the same outcome), unless it joins an
//! existing cluster (`cluster.join`), when it waits to be added.
//!
//! Must not: mutate a partition (the pump does, through the queue), or
//! wait for a pump from inside it (groups wait for pumps, never the
//! reverse).

pub mod backend;
pub mod group;
#[cfg(test)]
mod tests;

use crate::shard::partition::PartitionKey;
use crate::shard::replica::{Group, RaftQueue, Replication};
use backend::PumpBackend;
use group::{GroupRaft, PartitionGroup};
use iggyd_raft::backend::BackendLogStore;
use iggyd_raft::network::{Network, Transport, no_such_group, serve};
use iggyd_raft::state_machine::StateMachine;
use openraft::impls::BasicNode;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

/// What every shard of a cluster node needs to run its groups.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub node_id: u64,
    /// Every voter, by node id, with its node-to-node address.
    pub voters: BTreeMap<u64, BasicNode>,
    /// Wait to be added instead of initializing new groups.
    pub join: bool,
    pub raft: Arc<openraft::Config>,
}

impl ClusterSettings {
    /// openraft's configuration for iggyd's groups: the cluster's timing,
    /// pre-vote (a node cut off and back does not depose a healthy
    /// leader), and no snapshots (every log is kept whole until snapshots
    /// of sealed segments land).
    pub fn raft_config(
        heartbeat: std::time::Duration,
        election_timeout: std::time::Duration,
    ) -> Result<Arc<openraft::Config>, String> {
        let election = election_timeout.as_millis() as u64;
        openraft::Config {
            cluster_name: "iggyd".to_string(),
            heartbeat_interval: heartbeat.as_millis() as u64,
            election_timeout_min: election,
            election_timeout_max: election * 2,
            enable_pre_vote: Some(true),
            snapshot_policy: openraft::SnapshotPolicy::Never,
            ..Default::default()
        }
        .validate()
        .map(Arc::new)
        .map_err(|error| format!("the cluster's Raft timing is not usable: {error}"))
    }
}

/// The groups of one shard of a cluster node.
pub struct ShardCluster<T: Transport> {
    settings: Arc<ClusterSettings>,
    transport: T,
    /// This shard's groups, by channel (a partition's storage id).
    groups: RefCell<HashMap<u64, Rc<PartitionGroup>>>,
}

impl<T: Transport> ShardCluster<T> {
    pub fn new(settings: Arc<ClusterSettings>, transport: T) -> Self {
        ShardCluster {
            settings,
            transport,
            groups: RefCell::new(HashMap::new()),
        }
    }

    /// This shard's group on `channel`, when it has started.
    pub fn raft(&self, channel: u64) -> Option<Rc<GroupRaft>> {
        self.groups
            .borrow()
            .get(&channel)
            .and_then(|group| group.raft())
    }
}

impl<T: Transport> Replication for ShardCluster<T> {
    fn replicates(&self, _key: &PartitionKey) -> bool {
        true
    }

    fn start_group(&self, key: PartitionKey, queue: RaftQueue, first_offset: u64) -> Rc<dyn Group> {
        let settings = self.settings.clone();
        let group = Rc::new(PartitionGroup::new(key, settings.node_id, first_offset));
        self.groups
            .borrow_mut()
            .insert(key.storage_id, group.clone());
        let network = Network::new(self.transport.clone(), key.storage_id);
        let store = BackendLogStore::new(PumpBackend::new(key, queue));
        let starting = group.clone();
        monoio::spawn(async move {
            let machine = StateMachine::new(starting.applied());
            let raft = match GroupRaft::new(
                settings.node_id,
                settings.raft.clone(),
                network,
                store,
                machine,
            )
            .await
            {
                Ok(raft) => Rc::new(raft),
                Err(error) => {
                    tracing::error!(partition = %key, %error, "the partition's group did not start");
                    return;
                }
            };
            if !settings.join {
                match raft.is_initialized().await {
                    Ok(true) => {}
                    Ok(false) => match raft.initialize(settings.voters.clone()).await {
                        Ok(())
                        | Err(openraft::errors::RaftError::APIError(
                            openraft::errors::InitializeError::NotAllowed(_),
                        )) => {}
                        Err(error) => {
                            tracing::error!(partition = %key, %error, "the partition's group did not initialize");
                        }
                    },
                    Err(error) => {
                        tracing::error!(partition = %key, %error, "the partition's group stopped");
                        return;
                    }
                }
            }
            starting.started(raft);
        });
        group
    }

    fn deliver(&self, channel: u64, body: Vec<u8>, reply: flume::Sender<Vec<u8>>) {
        let Some(raft) = self.raft(channel) else {
            let _ = reply.send(no_such_group(channel));
            return;
        };
        monoio::spawn(async move {
            let answer = serve(&raft, &body).await;
            let _ = reply.send(answer);
        });
    }
}
