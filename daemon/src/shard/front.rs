//! The seam between a shard and what runs above it on the same thread: its
//! client connections (`net`). The shard loop starts the front once its
//! partitions are recovered, tells it about every newer metadata view and
//! about stopping, asks it for its clients (GetClients gathers them from
//! every shard over the mesh) and reads its counters for the shard's
//! once-a-second report. Defined here, implemented by `net`, and handed to
//! each shard by the supervisor as a [`FrontStart`], so the shard never
//! imports the layer above it.
//!
//! Must not: hold state of its own; it is the contract, and the plain data
//! that crosses it (a connection's [`ClientInfo`]).

use super::context::ShardContext;
use super::heartbeat::Latency;
use iggyd_metadata::MetadataView;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A consumer group membership, by numeric ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Membership {
    pub stream: u32,
    pub topic: u32,
    pub group: u32,
}

/// One connection as GetClients/GetMe report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub peer: SocketAddr,
    /// `None` until the connection logs in.
    pub user_id: Option<u32>,
    pub memberships: Vec<Membership>,
}

/// A copy of one connection's activity, as the shard's once-a-second
/// report publishes it (the console's Clients view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientReport {
    pub client_id: u32,
    pub peer: SocketAddr,
    pub user_id: Option<u32>,
    /// The login's session number, the key of its consumer-group
    /// memberships (`MemberKey`); 0 before login.
    pub session: u64,
    pub tls: bool,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub last_command: u32,
    pub idle: Duration,
    pub connected: Duration,
}

/// What a front counts, published with the shard's gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontCounters {
    pub connections: u64,
    /// Sends accepted here for partitions this shard owns.
    pub sends_local: u64,
    /// Sends accepted here and handed to another shard.
    pub sends_forwarded: u64,
    /// Requests answered 58 because of the cluster (another node leads,
    /// or this one is cut off from its quorum).
    pub not_accepted: u64,
    /// Requests answered 57 (an election is on, or a send is in doubt).
    pub not_committed: u64,
}

/// What runs above a shard on its thread.
pub trait Front {
    /// A newer view was installed on the shard: end every session it no
    /// longer authorizes.
    fn view_installed(&self, view: &Arc<MetadataView>);
    /// The connections of this shard.
    fn clients(&self) -> Vec<ClientInfo>;
    /// Stop accepting; connections finish their current request and close
    /// once idle.
    fn begin_stopping(&self);
    /// True once the listener is closed and no connection is left.
    fn is_quiet(&self) -> bool;
    /// Request latency since the last call (the window restarts).
    fn take_request_latency(&self) -> Latency;
    fn counters(&self) -> FrontCounters;
    /// Every connection's activity (the once-a-second report).
    fn client_reports(&self) -> Vec<ClientReport>;
    /// Ask connection `client_id` to close (the admin socket's
    /// `disconnect_client`); false when it is not here or was asked already.
    fn close_client(&self, client_id: u32) -> bool;
}

/// What a started front hands back: itself, and the task that ends when its
/// accept loop ends (the shard awaits it when it stops).
pub type StartedFront = (Rc<dyn Front>, monoio::task::JoinHandle<()>);

/// Builds a shard's front on its thread, inside its runtime, from the
/// shard's context. Made by the supervisor (which knows the layer above)
/// and moved into the shard's thread.
pub struct FrontStart(pub Box<dyn FnOnce(Rc<ShardContext>) -> Result<StartedFront, String> + Send>);

impl std::fmt::Debug for FrontStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontStart").finish_non_exhaustive()
    }
}
