//! The mesh: one bounded inbox per shard, reachable from every other shard and
//! from the supervisor. Senders wait when an inbox is full (backpressure);
//! nothing is ever dropped. A request carries its own reply channel, so a
//! cross-shard call is "send to the owner, await its answer".

use super::front::ClientInfo;
use crate::limits;
use iggyd_metadata::{Applied, ExportedStore, MetadataCommand, MetadataView};
use iggyd_wire::protocol::codes::Status;
use std::sync::Arc;

/// A shard index (defined with the metadata that records owners).
pub use iggyd_metadata::ShardId;

/// A request one shard asks of another. The set grows with the storage and
/// protocol layers; it is a closed enum so the receiving pump handles every
/// case explicitly.
#[derive(Debug)]
pub enum Request {
    /// Round trip through the target's pump; answers with its identity.
    Ping,
    /// A metadata change, for shard 0 (the only metadata writer). The
    /// command is complete (time, hashes, tokens resolved by the sender), so
    /// applying it is deterministic.
    Metadata(Box<MetadataCommand>),
    /// A committed metadata change for shard 0 of a cluster node to execute
    /// on its store (from the metadata group's state machine, in log order).
    ApplyCommitted(Box<MetadataCommand>),
    /// Shard 0 of a cluster node: its whole store, for the metadata
    /// group's snapshot.
    ExportMetadata,
    /// Shard 0 of a cluster node: replace its store with a metadata
    /// snapshot's bytes (checked first) and publish the view.
    ReplaceMetadata(Vec<u8>),
    /// The connections the target shard serves (GetClients, GetClient, stats).
    Clients,
}

#[derive(Debug)]
pub enum Response {
    Pong {
        shard: ShardId,
        pu: u32,
        heartbeat: u64,
    },
    /// The outcome of a metadata change: what was applied and the view that
    /// includes it (so the requester reads its own write at once), or the
    /// wire status of the rejection.
    Metadata(Result<(Applied, Arc<MetadataView>), Status>),
    Clients(Vec<ClientInfo>),
    Exported(Result<ExportedStore, String>),
    Replaced(Result<(), String>),
}

#[derive(Debug)]
pub struct Envelope {
    pub from: ShardId,
    pub request: Request,
    pub reply: flume::Sender<Response>,
}

/// Everything a shard's pump takes from its inbox.
#[derive(Debug)]
pub enum ShardMessage {
    Request(Envelope),
    /// Enqueued by the shard's own timer; the pump bumps the heartbeat when it
    /// gets to it, which proves the pump itself makes progress.
    Heartbeat,
    /// Enqueued by the shard's own timer once a second: publish the shard
    /// report (partition numbers, latency percentiles) for observers.
    PublishReport,
    /// A newer metadata view published by shard 0.
    View(Arc<MetadataView>),
    /// An operation on one of the shard's partitions, for its pump, with
    /// when it was enqueued (the pump's queue-wait histogram).
    Partition(super::pump::PartitionOp, std::time::Instant),
    /// First phase of a graceful stop: stop accepting, let connections
    /// finish their current request; the pump keeps running (other shards'
    /// in-flight requests may still need it). Answered with
    /// `ShardEvent::Quiesced` once the shard has no connections left.
    StopAccepting,
    /// Second phase: drain the inbox, fsync everything, return.
    Stop,
    /// A node-to-node call for consensus group `channel`, which this shard
    /// owns (it arrived on another shard's connection); `reply` gets the
    /// answer's bytes.
    Peer {
        channel: u64,
        body: Vec<u8>,
        reply: flume::Sender<Vec<u8>>,
    },
    /// Close client connection `client_id` of this shard (from the admin
    /// socket); the reply says whether it was there.
    CloseClient {
        client_id: u32,
        reply: flume::Sender<bool>,
    },
    /// The admin socket asks for this shard's consensus groups
    /// (`iggyd cluster status`); a shard without replication answers none.
    ClusterStatus {
        reply: flume::Sender<Vec<iggyd_admin_api::cluster::GroupStatus>>,
    },
    /// The admin socket asks group `channel` of this shard to hand its
    /// leadership to node `to` (`iggyd cluster transfer-leader`).
    TransferLeader {
        channel: u64,
        to: u64,
        reply: flume::Sender<Result<(), String>>,
    },
    /// The admin socket asks group `channel` of this shard for a
    /// membership change (`iggyd cluster add-node|remove-node`).
    ChangeMembers {
        channel: u64,
        change: iggyd_raft::network::ForwardedChange,
        reply: flume::Sender<crate::shard::replica::ChangeAnswer>,
    },
    /// Test-only fault: wedge this shard's loop forever (the watchdog must
    /// notice). Compiled into debug builds and the `fault-injection` feature.
    #[cfg(any(debug_assertions, feature = "fault-injection"))]
    Freeze,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MeshError {
    #[error("shard {0} does not exist")]
    NoSuchShard(ShardId),
    #[error("shard {0} has stopped")]
    Stopped(ShardId),
}

/// Handles to every shard's inbox. Cloned into each shard and the supervisor.
#[derive(Debug, Clone)]
pub struct Mesh {
    inboxes: Arc<[flume::Sender<ShardMessage>]>,
}

impl Mesh {
    /// A mesh of `shards` inboxes of `limits::SHARD_INBOX_DEPTH` each; the
    /// receivers go to the shards, in order.
    pub fn new(shards: usize) -> (Mesh, Vec<flume::Receiver<ShardMessage>>) {
        Mesh::with_depth(shards, limits::SHARD_INBOX_DEPTH)
    }

    pub fn with_depth(shards: usize, depth: usize) -> (Mesh, Vec<flume::Receiver<ShardMessage>>) {
        assert!(shards > 0);
        assert!(depth > 0);
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..shards).map(|_| flume::bounded(depth)).unzip();
        (
            Mesh {
                inboxes: senders.into(),
            },
            receivers,
        )
    }

    pub fn shards(&self) -> usize {
        self.inboxes.len()
    }

    fn inbox(&self, shard: ShardId) -> Result<&flume::Sender<ShardMessage>, MeshError> {
        self.inboxes.get(shard).ok_or(MeshError::NoSuchShard(shard))
    }

    /// Enqueue a message, waiting while the inbox is full.
    pub async fn send(&self, to: ShardId, message: ShardMessage) -> Result<(), MeshError> {
        self.inbox(to)?
            .send_async(message)
            .await
            .map_err(|_| MeshError::Stopped(to))
    }

    /// Blocking enqueue for threads that are not shards (the supervisor).
    pub fn send_blocking(&self, to: ShardId, message: ShardMessage) -> Result<(), MeshError> {
        self.inbox(to)?
            .send(message)
            .map_err(|_| MeshError::Stopped(to))
    }

    /// Blocking enqueue that gives up at `deadline` (the supervisor must not
    /// hang on a wedged shard's full inbox).
    pub fn send_deadline(
        &self,
        to: ShardId,
        message: ShardMessage,
        deadline: std::time::Instant,
    ) -> Result<(), MeshError> {
        self.inbox(to)?
            .send_deadline(message, deadline)
            .map_err(|_| MeshError::Stopped(to))
    }

    /// Send `request` to shard `to` and await its reply.
    pub async fn request(
        &self,
        from: ShardId,
        to: ShardId,
        request: Request,
    ) -> Result<Response, MeshError> {
        let (reply, answer) = flume::bounded(1);
        self.send(
            to,
            ShardMessage::Request(Envelope {
                from,
                request,
                reply,
            }),
        )
        .await?;
        answer
            .recv_async()
            .await
            .map_err(|_| MeshError::Stopped(to))
    }

    /// Messages waiting in shard `shard`'s inbox.
    pub fn depth(&self, shard: ShardId) -> usize {
        self.inboxes.get(shard).map_or(0, flume::Sender::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_inbox_pushes_back_instead_of_dropping() {
        let (mesh, receivers) = Mesh::with_depth(2, 2);
        mesh.send_blocking(1, ShardMessage::Heartbeat).unwrap();
        mesh.send_blocking(1, ShardMessage::Heartbeat).unwrap();
        assert_eq!(mesh.depth(1), 2);
        // A third message does not fit: the try path reports Full, nothing is lost.
        let full = mesh.inbox(1).unwrap().try_send(ShardMessage::Stop);
        assert!(matches!(full, Err(flume::TrySendError::Full(_))));
        assert_eq!(receivers[1].len(), 2);
        assert_eq!(
            mesh.send_blocking(7, ShardMessage::Stop),
            Err(MeshError::NoSuchShard(7))
        );
    }

    #[test]
    fn a_stopped_shard_is_reported_not_hung_on() {
        let (mesh, receivers) = Mesh::new(1);
        drop(receivers);
        assert_eq!(
            mesh.send_blocking(0, ShardMessage::Heartbeat),
            Err(MeshError::Stopped(0))
        );
    }
}
