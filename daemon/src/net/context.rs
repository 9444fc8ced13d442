//! What one shard's connections share on its thread, around the shard's
//! own context (`shard::context::ShardContext`, reached through `Deref`):
//! the client registry, the grants of logged-in sessions (ended when a view
//! revokes them), id counters, pending consumer-group hand-offs, the stop
//! signal, the request-latency window, the rate limiter for log lines about
//! hostile clients, and the handles of what every shard's connections share
//! (`Net`, the snapshot queue). It is the shard's [`Front`]: the shard loop
//! reaches the connections only through that trait.
//!
//! Must not: be shared with another shard (`Rc`, `!Send`), or touch
//! partitions (the owner's pump does, over the mesh).

use super::Net;
use super::activity::Activity;
use super::snapshot_request::SnapshotFiles;
use crate::shard::context::ShardContext;
use crate::shard::front::{ClientInfo, ClientReport, Front, FrontCounters, Membership};
use crate::shard::heartbeat::Latency;
use crate::shard::mesh::ShardId;
use crate::shard::op::PartitionReport;
use crate::shard::partition::PartitionKey;
use iggyd_metadata::MetadataView;
use iggyd_metadata::grant::{Grant, Revoked};
use iggyd_metadata::options::Durability;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Client ids carry the shard in their top byte, so they are unique across
/// shards without coordination: 16 M connections per shard per run.
const CLIENT_ID_SHARD_SHIFT: u32 = 24;
/// Session numbers carry the shard in their top 16 bits (never zero).
const SESSION_SHARD_SHIFT: u32 = 48;

/// A pending hand-off: (stream, topic, group, partition, new owner).
type HandoffKey = (u32, u32, u32, u32, u128);

/// The client id for the next connection of `shard` from `counter` (24
/// bits): after 2^24 connections the counter wraps, and an id still held by
/// an open connection (`in_use`) is skipped, as is counter 0, so two live
/// connections never share an id. Returns the id and the next counter.
fn next_client_id(shard: ShardId, counter: u32, in_use: impl Fn(u32) -> bool) -> (u32, u32) {
    let mask = (1u32 << CLIENT_ID_SHARD_SHIFT) - 1;
    let mut counter = counter & mask;
    // At most as many ids are in use as there are connections, far fewer
    // than 2^24, so a free one comes within that many steps.
    loop {
        let id = ((shard as u32) << CLIENT_ID_SHARD_SHIFT) | counter;
        let next = counter.wrapping_add(1) & mask;
        if counter != 0 && !in_use(id) {
            return (id, next);
        }
        counter = next;
    }
}

/// The settings a shard's connections need, from the configuration.
#[derive(Debug, Clone)]
pub struct NetSettings {
    /// The address clients reach this daemon on (cluster metadata).
    pub address: SocketAddr,
    /// A consumer-group member silent this long is evicted (§8 item 7).
    pub stale_after: Duration,
    /// A cooperative hand-off completes after this long even when the
    /// partition's owner never committed what it polled (Apache: 30 s).
    pub rebalance_timeout: Duration,
    /// Durability of topics that do not say.
    pub default_durability: Durability,
    /// GetSnapshotFile builds happen on the control plane's `snapshot`
    /// thread; connections queue them here.
    pub snapshot_files: SnapshotFiles,
    /// Admission, logins, TLS, append and reply budgets: shared with every
    /// shard.
    pub net: Net,
}

#[derive(Debug)]
pub struct NetContext {
    /// The shard this front runs on (also what `Deref` reaches).
    pub shard_context: Rc<ShardContext>,
    pub address: SocketAddr,
    pub stale_after: Duration,
    pub rebalance_timeout: Duration,
    pub default_durability: Durability,
    pub snapshot_files: SnapshotFiles,
    pub net: Net,
    clients: RefCell<BTreeMap<u32, ClientInfo>>,
    /// Per connection: what the console shows (`net::activity`).
    activities: RefCell<BTreeMap<u32, Rc<Activity>>>,
    /// When this shard first saw each pending hand-off to one of its
    /// sessions: (stream, topic, group, partition, new owner).
    handoffs_seen: RefCell<BTreeMap<HandoffKey, Instant>>,
    /// The grant of each logged-in connection and the channel that ends
    /// it: a view that no longer authorizes the grant sends the reason.
    grants: RefCell<BTreeMap<u32, (Grant, flume::Sender<Revoked>)>>,
    next_client: Cell<u32>,
    next_session: Cell<u64>,
    /// Round-robin cursor for `Balanced` partitioning from old clients.
    next_balanced: Cell<u32>,
    /// Set when the daemon stops accepting: connections finish their
    /// current request and close once idle for a short grace period.
    stopping: Cell<bool>,
    /// Dropped (closing every receiver) when stopping begins: wakes
    /// connections that are waiting for their next request.
    stop_sender: RefCell<Option<flume::Sender<()>>>,
    stop_receiver: flume::Receiver<()>,
    /// Fires the accept loop's stop; taken when stopping begins.
    stop_accepting: RefCell<Option<flume::Sender<()>>>,
    /// True until the listener is shut down (after the final sweep).
    accepting: Cell<bool>,
    /// Sends accepted on this shard for its own partitions, and for other
    /// shards' (handed over with their buffer).
    pub sends_local: Cell<u64>,
    pub sends_forwarded: Cell<u64>,
    /// A cluster node's requests answered 58 (not accepted) and 57 (not
    /// committed), counted by `count_transient`.
    not_accepted: Cell<u64>,
    not_committed: Cell<u64>,
    /// The last partition reports gathered from every shard for GetStream(s)
    /// and GetTopic(s), reused briefly (`net::handler::streams`).
    pub reports_cache: RefCell<Option<ReportsCache>>,
    /// µs from a request's last byte read to its reply written.
    request_latency: RefCell<hdrhistogram::Histogram<u64>>,
    /// Per kind of notice: when one was last logged and how many were
    /// suppressed since.
    notices: RefCell<BTreeMap<&'static str, (Instant, u64)>>,
}

impl std::ops::Deref for NetContext {
    type Target = ShardContext;

    fn deref(&self) -> &ShardContext {
        &self.shard_context
    }
}

/// Every partition's report, as gathered from every shard starting at `at`.
#[derive(Debug)]
pub struct ReportsCache {
    pub at: Instant,
    pub reports: Rc<PartitionReports>,
}

/// Partition reports by key, and each topic's totals as first summed from
/// them (by stream id, topic id and creation time).
#[derive(Debug, Default)]
pub struct PartitionReports {
    pub partitions: BTreeMap<PartitionKey, PartitionReport>,
    pub topic_totals: RefCell<TopicTotals>,
}

/// `(stream id, topic id, topic created at)` → `(bytes, messages)`.
pub type TopicTotals = BTreeMap<(u32, u32, u64), (u64, u64)>;

impl NetContext {
    /// Counts an answer of 58 or 57 on a cluster node (where they mean
    /// "look for the leader" and "not committed, resend"); other statuses,
    /// and a single node's, are not counted.
    pub fn count_transient(&self, status: iggyd_wire::protocol::codes::Status) {
        use iggyd_wire::protocol::codes::Status;
        if self.net.cluster.is_none() {
            return;
        }
        let counter = match status {
            Status::TransientNotAccepted => &self.not_accepted,
            Status::TransientNotCommitted => &self.not_committed,
            _ => return,
        };
        counter.set(counter.get().saturating_add(1));
    }

    /// The front of the shard `shard_context` describes; `stop_accepting`
    /// fires its accept loop's stop.
    pub fn new(
        shard_context: Rc<ShardContext>,
        settings: NetSettings,
        stop_accepting: flume::Sender<()>,
    ) -> NetContext {
        let (stop_sender, stop_receiver) = flume::bounded(1);
        NetContext {
            shard_context,
            address: settings.address,
            stale_after: settings.stale_after,
            rebalance_timeout: settings.rebalance_timeout,
            default_durability: settings.default_durability,
            snapshot_files: settings.snapshot_files,
            net: settings.net,
            notices: RefCell::new(BTreeMap::new()),
            clients: RefCell::new(BTreeMap::new()),
            activities: RefCell::new(BTreeMap::new()),
            grants: RefCell::new(BTreeMap::new()),
            handoffs_seen: RefCell::new(BTreeMap::new()),
            next_client: Cell::new(1),
            next_session: Cell::new(1),
            next_balanced: Cell::new(0),
            stopping: Cell::new(false),
            stop_sender: RefCell::new(Some(stop_sender)),
            stop_receiver,
            stop_accepting: RefCell::new(Some(stop_accepting)),
            accepting: Cell::new(true),
            sends_local: Cell::new(0),
            sends_forwarded: Cell::new(0),
            not_accepted: Cell::new(0),
            not_committed: Cell::new(0),
            reports_cache: RefCell::new(None),
            request_latency: RefCell::new(
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2)
                    .expect("static histogram bounds are valid"),
            ),
        }
    }

    pub fn record_request(&self, took: Duration) {
        self.request_latency
            .borrow_mut()
            .saturating_record(took.as_micros().max(1) as u64);
    }

    /// Percentiles since the last call; the histogram restarts.
    fn take_request_window(&self) -> Latency {
        let mut histogram = self.request_latency.borrow_mut();
        let latency = Latency::of(&histogram);
        histogram.reset();
        latency
    }

    /// Called by the acceptor once the listener is shut down.
    pub fn listener_closed(&self) {
        self.accepting.set(false);
    }

    /// True when the listener is closed and no connection is left.
    fn quiet(&self) -> bool {
        !self.accepting.get() && self.connections() == 0
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Fires (its receive fails) once stopping begins.
    pub fn stop_signal(&self) -> flume::Receiver<()> {
        self.stop_receiver.clone()
    }

    fn stop(&self) {
        if let Some(stop) = self.stop_accepting.borrow_mut().take() {
            let _ = stop.send(());
        }
        self.stopping.set(true);
        self.stop_sender.borrow_mut().take();
    }

    /// Of the partitions `pending` to hand to `to` in a group, those whose
    /// hand-off this shard has seen pending for the rebalance timeout; the
    /// clock for each starts the first time it is asked about here (the
    /// new member syncs right after its join).
    pub fn handoffs_due(
        &self,
        (stream, topic, group): (u32, u32, u32),
        to: u128,
        pending: &[u32],
    ) -> Vec<u32> {
        let now = Instant::now();
        let mut seen = self.handoffs_seen.borrow_mut();
        seen.retain(|key, _| {
            (key.0, key.1, key.2, key.4) != (stream, topic, group, to) || pending.contains(&key.3)
        });
        let mut due = Vec::new();
        for partition in pending {
            let since = *seen
                .entry((stream, topic, group, *partition, to))
                .or_insert(now);
            if now.duration_since(since) >= self.rebalance_timeout {
                due.push(*partition);
            }
        }
        due
    }

    /// Watch a logged-in connection's grant (replacing any earlier one);
    /// the receiver hears why it ended when a view revokes it.
    pub fn watch_grant(&self, client_id: u32, grant: Grant) -> flume::Receiver<Revoked> {
        let (ender, ended) = flume::bounded(1);
        self.grants.borrow_mut().insert(client_id, (grant, ender));
        ended
    }

    /// Stop watching (logout, disconnect, eviction).
    pub fn unwatch_grant(&self, client_id: u32) {
        self.grants.borrow_mut().remove(&client_id);
    }

    /// Whether a notice of `kind` may be logged now (at most one per
    /// `limits::REFUSAL_LOG_INTERVAL` per shard); `Some(n)` says how many
    /// were suppressed since the last one.
    pub fn notice(&self, kind: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut notices = self.notices.borrow_mut();
        match notices.get_mut(kind) {
            Some((last, suppressed))
                if now.saturating_duration_since(*last) < crate::limits::REFUSAL_LOG_INTERVAL =>
            {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                let before = *suppressed;
                *last = now;
                *suppressed = 0;
                Some(before)
            }
            None => {
                notices.insert(kind, (now, 0));
                Some(0)
            }
        }
    }

    pub fn register_client(&self, peer: SocketAddr) -> u32 {
        let (client_id, next) = {
            let clients = self.clients.borrow();
            next_client_id(self.shard_context.shard, self.next_client.get(), |id| {
                clients.contains_key(&id)
            })
        };
        self.next_client.set(next);
        self.clients.borrow_mut().insert(
            client_id,
            ClientInfo {
                client_id,
                peer,
                user_id: None,
                memberships: Vec::new(),
            },
        );
        self.activities
            .borrow_mut()
            .insert(client_id, Rc::new(Activity::default()));
        client_id
    }

    pub fn update_client(
        &self,
        client_id: u32,
        user_id: Option<u32>,
        memberships: Vec<Membership>,
    ) {
        if let Some(client) = self.clients.borrow_mut().get_mut(&client_id) {
            client.user_id = user_id;
            client.memberships = memberships;
        }
    }

    /// The activity of a registered connection (for its task).
    pub fn client_activity(&self, client_id: u32) -> Option<Rc<Activity>> {
        self.activities.borrow().get(&client_id).cloned()
    }

    pub fn unregister_client(&self, client_id: u32) {
        self.clients.borrow_mut().remove(&client_id);
        self.activities.borrow_mut().remove(&client_id);
        self.grants.borrow_mut().remove(&client_id);
    }

    pub fn clients(&self) -> Vec<ClientInfo> {
        self.clients.borrow().values().cloned().collect()
    }

    pub fn connections(&self) -> usize {
        self.clients.borrow().len()
    }

    /// A new session number: non-zero and unique in this process.
    pub fn new_session(&self) -> u64 {
        let counter = self.next_session.get();
        self.next_session.set(counter + 1);
        ((self.shard_context.shard as u64 + 1) << SESSION_SHARD_SHIFT) | counter
    }

    pub fn next_balanced(&self, partitions: u32) -> u32 {
        assert!(partitions > 0);
        let cursor = self.next_balanced.get();
        self.next_balanced.set(cursor.wrapping_add(1));
        cursor % partitions
    }
}

impl Front for NetContext {
    fn view_installed(&self, view: &Arc<MetadataView>) {
        let mut grants = self.grants.borrow_mut();
        grants.retain(|_, (grant, ender)| match view.standing(grant) {
            Ok(_) => true,
            Err(revoked) => {
                // Full or disconnected: the connection already knows.
                let _ = ender.try_send(revoked);
                false
            }
        });
    }

    fn clients(&self) -> Vec<ClientInfo> {
        NetContext::clients(self)
    }

    fn begin_stopping(&self) {
        self.stop();
    }

    fn is_quiet(&self) -> bool {
        self.quiet()
    }

    fn take_request_latency(&self) -> Latency {
        self.take_request_window()
    }

    fn client_reports(&self) -> Vec<ClientReport> {
        let clients = self.clients.borrow();
        self.activities
            .borrow()
            .iter()
            .filter_map(|(client_id, activity)| {
                let client = clients.get(client_id)?;
                Some(activity.report(*client_id, client.peer, client.user_id))
            })
            .collect()
    }

    fn close_client(&self, client_id: u32) -> bool {
        self.activities
            .borrow()
            .get(&client_id)
            .is_some_and(|activity| activity.close())
    }

    fn counters(&self) -> FrontCounters {
        FrontCounters {
            connections: self.connections() as u64,
            sends_local: self.sends_local.get(),
            sends_forwarded: self.sends_forwarded.get(),
            not_accepted: self.not_accepted.get(),
            not_committed: self.not_committed.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves client ids stay unique past 2^24 connections: the counter
    // wraps to 1 (never 0), and ids still held by open connections are
    // skipped (before, the wrap handed out a live connection's id and the
    // registry entry of that connection was overwritten).
    #[test]
    fn client_ids_wrap_without_reusing_a_live_id() {
        let mask = (1u32 << CLIENT_ID_SHARD_SHIFT) - 1;
        let shard = 3;
        let live: std::collections::BTreeSet<u32> = [1, 2, 4]
            .iter()
            .map(|counter| (3 << 24) | counter)
            .collect();
        let (id, next) = next_client_id(shard, mask, |id| live.contains(&id));
        assert_eq!(id, (3 << 24) | mask);
        assert_eq!(next, 0);
        let (id, next) = next_client_id(shard, next, |id| live.contains(&id));
        assert_eq!(
            id,
            (3 << 24) | 3,
            "0 is skipped, and so are live ids 1 and 2"
        );
        let (id, _) = next_client_id(shard, next, |id| live.contains(&id));
        assert_eq!(id, (3 << 24) | 5);
        assert_eq!(id >> 24, 3, "the shard stays in the top byte");
    }
}
