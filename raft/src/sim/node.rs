//! A simulated node: its own simulated disk (`SimIo`, its own seed, torn
//! writes on) holding one partition's Raft log, and the incarnation that
//! runs on it, if any. Starting opens the log through the real recovery
//! path (`RaftLog::open`) and starts an openraft group on it with the
//! adapter's state machine, the production network code over the
//! simulated transport, and one of the adapter's two log stores:
//!
//! - [`crate::log_store::LogStore`] over the shared log, which syncs
//!   before it returns from an append;
//! - [`crate::backend::BackendLogStore`] over [`SimBackend`], which works
//!   like the daemon's pump (`daemon/src/shard/pump/raft.rs`): an append
//!   gives a data entry the offsets where the log continues and returns
//!   once the entries are written, and a flusher task fsyncs later and
//!   only then reports them flushed, in order (the pump's commit phase,
//!   which serves reads of the entries before it). Its flushes can be held
//!   back ([`Node::hold_flushes`]: a slow commit phase), so a leader
//!   replicates entries its own disk has not synced.
//!
//! The incarnation's tasks form a group of their own: crashing drops that
//! group (every task of the node, a sync in flight included) and then the
//! disk loses what was not synced, maybe keeping a torn prefix of it.
//!
//! Must not: let a task of a crashed incarnation run after its disk
//! crashed (it is dropped first), or shut a group down gracefully (a crash
//! is abrupt).

use super::network::{SimNet, SimTransport};
use super::runtime::{cancel_group, new_group, spawn_in};
use super::{SimGroup, SimRaft};
use crate::backend::{BackendLogStore, BackendState, FlushedCallback, LogBackend};
use crate::log_store::LogStore;
use crate::network::Network;
use crate::state_machine::{Applied, StateMachine};
use futures_util::lock::Mutex;
use iggyd_storage::BufferPool;
use iggyd_storage::io::Access;
use iggyd_storage::partition_log::{Clock, PartitionConfig};
use iggyd_storage::raft::{EntryBody, LogPosition, RaftLog, RaftRecovery, StoredBody, StoredEntry};
use iggyd_storage::sim::{SimClock, SimIo};
use iggyd_storage::trash::{Trash, TrashStart};
use iggyd_wire::batch::{BatchHeader, ValidBatch, stamp};
use openraft::Config;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Where each node keeps its data, and its partition.
pub const DATA_DIR: &str = "/data";
pub const PARTITION_DIR: &str = "/data/partitions/1";

/// Which of the adapter's log stores a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Shared,
    Backend,
}

/// One running incarnation of a node.
pub struct Incarnation {
    pub group: SimGroup,
    /// The pump-like backend, when the run uses it.
    backend: Option<SimBackend>,
    /// The log the group's store works on (the checker reads it).
    pub log: Rc<Mutex<RaftLog<SimIo>>>,
    pub applied: Rc<Applied>,
    /// The group of the incarnation's tasks.
    tasks: u64,
}

/// A node of the simulated cluster.
pub struct Node {
    pub id: u64,
    pub io: SimIo,
    partition: PartitionConfig,
    store: StoreKind,
    pub up: Option<Incarnation>,
    /// A disk failure (EIO on an fsync) is armed: the group stopping on a
    /// storage error is expected.
    pub disk_failing: bool,
    /// The disk's fsyncs are held pending (a stalled disk).
    pub syncs_held: bool,
    /// The backend's flushes are held back (a slow commit phase).
    pub flushes_held: bool,
}

impl Node {
    pub fn new(
        id: u64,
        disk_seed: u64,
        access: Access,
        segment_size_bytes: u64,
        store: StoreKind,
    ) -> Node {
        let io = SimIo::new(disk_seed);
        io.set_torn_writes(true);
        Node {
            id,
            io,
            partition: PartitionConfig::new(1, segment_size_bytes)
                .with_read_window(8 * 1024)
                .with_access(access),
            store,
            up: None,
            disk_failing: false,
            syncs_held: false,
            flushes_held: false,
        }
    }

    /// Opens the node's log from its disk (recovering it) and starts its
    /// group.
    pub async fn start(&mut self, net: &Rc<SimNet>, config: Arc<Config>) -> RaftRecovery {
        assert!(self.up.is_none(), "node {} is already up", self.id);
        let tasks = new_group();
        let (id, io, partition, store) =
            (self.id, self.io.clone(), self.partition.clone(), self.store);
        let io_for_trash = io.clone();
        let network = Network::<SimTransport, SimRaft>::new(
            SimTransport {
                from: id,
                net: net.clone(),
            },
            1,
        );
        let boot = spawn_in(tasks, async move {
            let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
            let (log, recovery) = RaftLog::open(
                io,
                Path::new(PARTITION_DIR),
                partition,
                clock,
                BufferPool::new(1 << 20),
            )
            .await
            .unwrap_or_else(|error| panic!("node {id}: the log does not open: {error}"));
            // As the pump opens a replicated partition: a restart at an
            // installed snapshot finished, the group seeded with the
            // snapshot of the purge point.
            let mut log = log;
            let trash = Rc::new(Mutex::new(Trash::new(
                io_for_trash,
                Path::new(DATA_DIR),
                TrashStart::default(),
            )));
            log.finish_restart(&mut *trash.lock().await)
                .await
                .unwrap_or_else(|error| panic!("node {id}: the restart does not finish: {error}"));
            let purged = log
                .purge_point()
                .await
                .unwrap_or_else(|error| panic!("node {id}: {error}"));
            let shared = LogStore::<SimIo, SimRaft>::new(log);
            let log = shared.log();
            let applied = Rc::new(Applied::default());
            let machine = StateMachine::<SimRaft>::at_purge_point(applied.clone(), purged.as_ref());
            let (group, backend) = match store {
                StoreKind::Shared => (
                    SimGroup::new(id, config, network, shared, machine).await,
                    None,
                ),
                StoreKind::Backend => {
                    let backend = SimBackend::new(log.clone(), applied.clone(), trash);
                    spawn_in(tasks, backend.clone().flusher());
                    let store = BackendLogStore::<SimBackend, SimRaft>::new(backend.clone());
                    (
                        SimGroup::new(id, config, network, store, machine).await,
                        Some(backend),
                    )
                }
            };
            let group = group
                .unwrap_or_else(|error| panic!("node {id}: the group does not start: {error}"));
            (group, backend, log, applied, recovery)
        });
        let (group, backend, log, applied, recovery) = boot.await.expect("the boot task");
        net.attach(id, group.clone());
        self.up = Some(Incarnation {
            group,
            backend,
            log,
            applied,
            tasks,
        });
        recovery
    }

    /// Power loss: the node's tasks are dropped wherever they are, then its
    /// disk loses what was not synced (a torn write may keep part of it).
    pub fn crash(&mut self, net: &SimNet) {
        net.detach(self.id);
        if let Some(up) = self.up.take() {
            cancel_group(up.tasks);
        }
        self.io.crash();
        // The waiters of a held sync died with the tasks; a restarted node
        // gets a healthy disk.
        self.io.hold_syncs(false);
        self.syncs_held = false;
        self.flushes_held = false;
        self.disk_failing = false;
    }

    /// Holds back (`true`) or lets go the flushes of a node on the
    /// pump-like backend; false when it has none (the shared log syncs as
    /// it appends).
    pub fn hold_flushes(&mut self, held: bool) -> bool {
        let Some(backend) = self.up.as_ref().and_then(|up| up.backend.as_ref()) else {
            return false;
        };
        backend.flushes.held.set(held);
        if let Some(flusher) = backend.flushes.flusher.borrow_mut().take() {
            flusher.wake();
        }
        self.flushes_held = held;
        true
    }

    /// Retention as the daemon's pump runs it on a replicated partition
    /// (`crate::retention`): of the sealed segments beyond the newest
    /// `keep`, those whose entries are purged are deleted, and the group
    /// is asked for a snapshot so that the rest may go later. Runs on the
    /// pump-like backend only (the shared log store cannot install a
    /// snapshot). The purges applied are taken as the pump takes them
    /// (a snapshot asked for each, the last made committed durably, the
    /// segments below the floor deleted once purged). The segments
    /// deleted, whether a snapshot was asked, and the highest offset a
    /// purge taken now made durable.
    pub async fn retain(&self, keep: usize) -> Result<Retained, String> {
        let nothing = Retained::default();
        let Some(up) = &self.up else {
            return Ok(nothing);
        };
        let Some(backend) = &up.backend else {
            return Ok(nothing);
        };
        // A log busy with I/O: next step.
        let Some(mut log) = up.log.try_lock() else {
            return Ok(nothing);
        };
        // The purges applied, as the pump takes them (`apply_purges`):
        // a snapshot asked for each, the last recorded committed.
        let purges = up.applied.take_purges();
        let mut points = Vec::new();
        for purge in &purges {
            if let Some(point) = crate::retention::purge_point(log.files(), purge)
                .await
                .map_err(error_text)?
            {
                points.push(point);
            }
        }
        if let Some(last) = purges.last() {
            log.save_committed_through((last.index, last.term))
                .await
                .map_err(error_text)?;
        }
        let sealed = log.partition().sealed_segments();
        let below_floor =
            crate::retention::purged_deletable(log.files(), &sealed, up.applied.floor());
        let count = sealed.len().saturating_sub(keep);
        let plan = if count == 0 {
            crate::retention::RetentionPlan::default()
        } else {
            crate::retention::plan(
                log.files(),
                &sealed,
                count,
                up.applied.committed_next_offset.get(),
            )
            .await
            .map_err(error_text)?
        };
        let deletable = plan.deletable.max(below_floor);
        let mut deleted = 0;
        if deletable > 0 {
            let mut trash = backend.trash.lock().await;
            deleted = log
                .partition_mut()
                .delete_oldest_segments(deletable, &mut trash)
                .await
                .map_err(error_text)?
                .segments;
        }
        drop(log);
        points.extend(plan.snapshot);
        let mut asked = false;
        for point in points {
            if up.applied.snapshot_at(point) {
                let group = up.group.clone();
                spawn_in(up.tasks, async move {
                    let _ = group.trigger().snapshot().await;
                });
                asked = true;
            }
        }
        Ok(Retained {
            deleted,
            asked,
            purged_below: purges.iter().map(|purge| purge.below).max(),
        })
    }

    /// The group stopped by itself (a storage error): why, if it did.
    pub fn stopped(&self) -> Option<String> {
        let up = self.up.as_ref()?;
        let metrics = up.group.metrics();
        let metrics = openraft::rt::WatchReceiver::borrow_watched(&metrics);
        metrics
            .running_state
            .as_ref()
            .err()
            .map(|fatal| fatal.to_string())
    }
}

/// What one retention pass did on a node.
#[derive(Debug, Default, Clone, Copy)]
pub struct Retained {
    pub deleted: usize,
    pub asked: bool,
    /// The highest offset below which a purge taken now was made durable.
    pub purged_below: Option<u64>,
}

/// The appends whose flush is not reported yet, in order, and the
/// flusher's waker.
#[derive(Default)]
struct Flushes {
    waiting: RefCell<VecDeque<FlushedCallback>>,
    /// Flushes are held back until this is false again.
    held: Cell<bool>,
    flusher: RefCell<Option<Waker>>,
}

/// A partition's log performed as the daemon's pump performs it (see the
/// module doc).
#[derive(Clone)]
pub struct SimBackend {
    log: Rc<Mutex<RaftLog<SimIo>>>,
    flushes: Rc<Flushes>,
    /// The group's applied state: the snapshot it installed last.
    applied: Rc<Applied>,
    trash: Rc<Mutex<Trash<SimIo>>>,
}

impl SimBackend {
    fn new(
        log: Rc<Mutex<RaftLog<SimIo>>>,
        applied: Rc<Applied>,
        trash: Rc<Mutex<Trash<SimIo>>>,
    ) -> SimBackend {
        SimBackend {
            log,
            flushes: Rc::new(Flushes::default()),
            applied,
            trash,
        }
    }

    /// The commit phase: whenever appends wait, one fsync for all of them,
    /// then their callbacks in order. A failed fsync fails every one (and
    /// stops the group).
    async fn flusher(self) {
        loop {
            std::future::poll_fn(|context| {
                if self.flushes.waiting.borrow().is_empty() || self.flushes.held.get() {
                    *self.flushes.flusher.borrow_mut() = Some(context.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            let mut log = self.log.lock().await;
            let waiting: Vec<FlushedCallback> =
                self.flushes.waiting.borrow_mut().drain(..).collect();
            let synced = log.sync().await.map_err(|error| error.to_string());
            drop(log);
            for flushed in waiting {
                flushed(synced.clone());
            }
        }
    }
}

fn error_text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

impl LogBackend for SimBackend {
    async fn state(&self) -> Result<BackendState, String> {
        let log = self.log.lock().await;
        Ok(BackendState {
            last: log.last(),
            purged: log.purged(),
            committed: log.committed(),
            vote: log.vote().map(<[u8]>::to_vec),
        })
    }

    async fn append(
        &self,
        entries: Vec<StoredEntry>,
        flushed: FlushedCallback,
    ) -> Result<(), String> {
        let mut log = self.log.lock().await;
        for entry in entries {
            match entry.body {
                StoredBody::Blank => log.append(entry.index, entry.term, EntryBody::Blank).await,
                StoredBody::Purge(below) => {
                    log.append(entry.index, entry.term, EntryBody::Purge { below })
                        .await
                }
                StoredBody::Membership(bytes) => {
                    log.append(entry.index, entry.term, EntryBody::Membership(&bytes))
                        .await
                }
                StoredBody::Offsets(bytes) => {
                    log.append(entry.index, entry.term, EntryBody::Offsets(&bytes))
                        .await
                }
                StoredBody::Data(bytes) => {
                    // As the pump: a proposal takes its offsets here.
                    let mut bytes = Vec::from(bytes);
                    let next = log.partition().next_offset();
                    let header = BatchHeader::decode(&bytes).map_err(error_text)?;
                    if header.base_offset != next {
                        stamp(&mut bytes, header.partition_id, next, header.base_timestamp)
                            .map_err(error_text)?;
                    }
                    let len = bytes.len();
                    let batch = ValidBatch::new(bytes, 0..len).map_err(error_text)?;
                    log.append(entry.index, entry.term, EntryBody::Data(&batch))
                        .await
                }
            }
            .map_err(error_text)?;
        }
        log.write_pending().await.map_err(error_text)?;
        drop(log);
        self.flushes.waiting.borrow_mut().push_back(flushed);
        if let Some(flusher) = self.flushes.flusher.borrow_mut().take() {
            flusher.wake();
        }
        Ok(())
    }

    async fn truncate_after(&self, keep: Option<u64>) -> Result<(), String> {
        let mut log = self.log.lock().await;
        log.truncate_after(keep).await.map_err(error_text)
    }

    async fn purge_through(&self, through: LogPosition) -> Result<(), String> {
        let mut log = self.log.lock().await;
        if log.last().is_some_and(|(last, _)| through.0 <= last) {
            return log.purge_through(through).await.map_err(error_text);
        }
        // As the pump: past the log's end, a snapshot installed from the
        // leader, and the log starts again at its offset.
        let Some((point, membership)) = self
            .applied
            .installed()
            .filter(|(point, _)| (point.index, point.term) == through)
        else {
            return Err(format!(
                "a purge through entry {} past the log's end, with no snapshot installed there",
                through.0
            ));
        };
        let mut trash = self.trash.lock().await;
        log.install_snapshot(through, point.next_offset, &membership, &mut trash)
            .await
            .map(|_| ())
            .map_err(error_text)
    }

    async fn save_vote(&self, vote: Vec<u8>) -> Result<(), String> {
        let mut log = self.log.lock().await;
        log.save_vote(&vote).await.map_err(error_text)
    }

    async fn save_committed(&self, committed: Option<LogPosition>) -> Result<(), String> {
        self.log.lock().await.set_committed(committed);
        Ok(())
    }

    async fn read(&self, first: u64, end: u64, bytes_max: u64) -> Result<Vec<StoredEntry>, String> {
        let mut log = self.log.lock().await;
        log.write_pending().await.map_err(error_text)?;
        log.read_range(first, end, bytes_max)
            .await
            .map_err(error_text)
    }
}
