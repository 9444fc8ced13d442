//! One seed's run of the cluster simulation: the plan drawn from the seed
//! (3 or 5 nodes, the log store over the shared log or over a pump-like
//! backend, direct or buffered I/O, segment size, pre-vote, batch
//! limits), the nodes started and the group initialized, the clients
//! started, then steps: a nemesis action, a random stretch of virtual time,
//! and the checks. At the end the nemesis stops, everything is healed and
//! restarted, the clients finish their last attempt, the cluster converges
//! (every node has applied the leader's whole log), and the messages are
//! checked against the ledger.
//!
//! Must not: draw randomness from anything but the seed's `SimRng`, let a
//! violation, a task's panic or an unexpected stop of a group pass a step
//! unreported, or wait on a group without a virtual-time bound.

use super::SimGroup;
use super::checker::{Checker, check_messages, committed_messages};
pub use super::coverage::Coverage;
use super::network::{Faults, SimNet};
use super::node::{Node, StoreKind};
use super::offsets::{self, OffsetStores, OffsetsLedger};
use super::runtime::{sleep, spawn, timeout};
use super::workload::{self, Endpoint, Endpoints, Ledger, Outcome};
use iggyd_storage::io::Access;
use iggyd_storage::raft::StoredBody;
use iggyd_storage::sim::SimRng;
use openraft::impls::BasicNode;
use openraft::rt::WatchReceiver;
use openraft::{Config, ServerState};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The shape of one seed's run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    nodes: u64,
    store: StoreKind,
    steps: u64,
    clients: u64,
    access: Access,
    segment_size_bytes: u64,
    pre_vote: bool,
    max_payload_entries: u64,
    /// Retention deletes the oldest segments on every node (drawn apart
    /// from the run's stream, so a seed's other draws stay as they were).
    retention: bool,
}

impl Plan {
    fn draw(rng: &mut SimRng, steps: u64) -> Plan {
        Plan {
            nodes: if rng.chance(1, 2) { 3 } else { 5 },
            store: if rng.chance(1, 2) {
                StoreKind::Shared
            } else {
                StoreKind::Backend
            },
            steps,
            clients: rng.range(1, 3),
            access: if rng.chance(1, 2) {
                Access::Direct
            } else {
                Access::Buffered
            },
            segment_size_bytes: [2 * 1024, 8 * 1024, 64 * 1024][rng.below(3) as usize],
            pre_vote: rng.chance(1, 2),
            max_payload_entries: [1, 4, 64][rng.below(3) as usize],
            retention: false,
        }
    }
}

/// A leader sighting: `(node, term)`.
type Sightings = Rc<RefCell<Vec<(u64, u64)>>>;

/// One run in progress.
struct Cluster {
    seed: u64,
    rng: SimRng,
    plan: Plan,
    config: Arc<Config>,
    network: Rc<SimNet>,
    nodes: Vec<Node>,
    /// Node → the step it went down at.
    down: BTreeMap<u64, u64>,
    endpoints: Endpoints,
    clock_skews: BTreeMap<u64, i64>,
    sightings: Sightings,
    checker: Checker,
    /// Every replica's stored consumer offsets (`offsets.rs`), shared
    /// with the snapshots the nodes send.
    offset_stores: Rc<RefCell<OffsetStores>>,
    /// The snapshot each node installed last, as seen by the checks.
    installed: BTreeMap<u64, (u64, u64)>,
    /// The highest offset any node's purge point reached.
    purged_offset_max: u64,
    /// The purges acknowledged: their entry's index and the offset below
    /// which they deleted.
    purges: Rc<RefCell<Vec<(u64, u64)>>>,
    /// Draws purges on retention runs (apart from the run's stream).
    purge_rng: SimRng,
    /// Node → the highest offset below which a purge it applied was made
    /// durable there: it never serves below it again, restarts included.
    durable_floors: BTreeMap<u64, u64>,
    coverage: Coverage,
    step: u64,
}

/// Runs one seed (on the current virtual-time runtime) and reports what it
/// covered; panics with the first violation found.
pub async fn run(seed: u64, steps: u64) -> Coverage {
    let mut rng = SimRng::new(seed);
    let mut plan = Plan::draw(&mut rng, steps);
    plan.retention =
        plan.store == StoreKind::Backend && SimRng::new(seed ^ 0x7265_7465_6e74_696f).chance(1, 2);
    // As the daemon's groups (`daemon/src/cluster/mod.rs`): what the
    // adapter requires (no snapshots, so no purges; no leader restore),
    // pre-vote on or off.
    let config = crate::required_config(Config {
        cluster_name: "sim".to_string(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        max_payload_entries: plan.max_payload_entries,
        enable_pre_vote: Some(plan.pre_vote),
        ..Default::default()
    })
    .validate()
    .expect("a valid config");
    let network = SimNet::new(rng.next_u64());
    let mut nodes = Vec::new();
    let mut clock_skews = BTreeMap::new();
    for id in 1..=plan.nodes {
        nodes.push(Node::new(
            id,
            rng.next_u64(),
            plan.access,
            plan.segment_size_bytes,
            plan.store,
        ));
        clock_skews.insert(id, rng.range(0, 4_000_000) as i64 - 2_000_000);
    }
    let mut cluster = Cluster {
        seed,
        rng,
        plan,
        config: Arc::new(config),
        network,
        nodes,
        down: BTreeMap::new(),
        endpoints: Rc::new(RefCell::new(BTreeMap::new())),
        clock_skews,
        sightings: Rc::new(RefCell::new(Vec::new())),
        checker: Checker::default(),
        offset_stores: Rc::new(RefCell::new(OffsetStores::default())),
        installed: BTreeMap::new(),
        purged_offset_max: 0,
        purges: Rc::new(RefCell::new(Vec::new())),
        purge_rng: SimRng::new(seed ^ 0x7075_7267_6500_0000),
        durable_floors: BTreeMap::new(),
        coverage: Coverage {
            nodes: plan.nodes,
            five_node_runs: u64::from(plan.nodes == 5),
            backend_runs: u64::from(plan.store == StoreKind::Backend),
            retention_runs: u64::from(plan.retention),
            steps: plan.steps,
            ..Coverage::default()
        },
        step: 0,
    };
    for id in 1..=plan.nodes {
        cluster.start(id).await;
    }
    let members: BTreeMap<u64, BasicNode> = (1..=plan.nodes)
        .map(|id| {
            (
                id,
                BasicNode {
                    addr: format!("node-{id}"),
                },
            )
        })
        .collect();
    cluster
        .group(1)
        .initialize(members)
        .await
        .expect("initialize");

    let ledger = Rc::new(RefCell::new(Ledger::default()));
    let stop = Rc::new(Cell::new(false));
    let clients: Vec<_> = (0..plan.clients)
        .map(|client| {
            spawn(workload::client(
                client,
                SimRng::new(cluster.rng.next_u64()),
                cluster.endpoints.clone(),
                ledger.clone(),
                stop.clone(),
            ))
        })
        .collect();
    // Its own randomness (drawn from the seed, not the run's stream).
    let offsets_ledger = Rc::new(RefCell::new(OffsetsLedger::default()));
    let offsets_client = spawn(offsets::client(
        SimRng::new(seed ^ 0x6f66_6673_6574_7300),
        cluster.endpoints.clone(),
        offsets_ledger.clone(),
        stop.clone(),
    ));

    cluster.checker.snapshots = plan.retention;
    for step in 0..plan.steps {
        cluster.step = step;
        cluster.nemesis().await;
        if plan.retention {
            cluster.purge();
            cluster.retain().await;
        }
        let pause = cluster.rng.range(20, 300);
        sleep(Duration::from_millis(pause)).await;
        cluster.check().await;
    }

    cluster.step = plan.steps;
    stop.set(true);
    cluster.heal().await;
    for client in clients {
        // Each ends after its last attempt, itself bounded.
        match timeout(Duration::from_secs(10), client).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => cluster.fail("a client task was dropped"),
            Err(_) => cluster.fail("a client did not finish its last attempt in 10 s"),
        }
    }
    match timeout(Duration::from_secs(10), offsets_client).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => cluster.fail("the offsets client task was dropped"),
        Err(_) => cluster.fail("the offsets client did not finish in 10 s"),
    }
    // The clients are done: the ledger is the run's alone.
    let Ok(ledger) = Rc::try_unwrap(ledger) else {
        cluster.fail("a client still holds the ledger");
    };
    let ledger = ledger.into_inner();
    cluster.converge().await;
    cluster.check().await;
    cluster.final_check(&ledger).await;
    let ids: Vec<u64> = (1..=cluster.plan.nodes).collect();
    let checked = cluster
        .offset_stores
        .borrow()
        .check_final(&ids, &offsets_ledger.borrow());
    if let Err(violation) = checked {
        cluster.fail(&violation);
    }
    cluster.coverage.offsets_entries = cluster.offset_stores.borrow().entries_applied;
    cluster.coverage.offsets_skipped = cluster.offset_stores.borrow().entries_skipped;

    cluster.coverage.acknowledged = ledger.acknowledged() as u64;
    cluster.coverage.rejected = ledger.count(|outcome| *outcome == Outcome::Rejected) as u64;
    cluster.coverage.unknown = ledger.count(|outcome| *outcome == Outcome::Unknown) as u64;
    cluster.coverage.terms_led = cluster.checker.terms_led() as u64;
    cluster.coverage.entries_replaced = cluster.checker.stats.entries_replaced;
    cluster.coverage.committed_entries = cluster.checker.stats.committed_entries;
    cluster.coverage.net = cluster.network.stats();
    for node in &cluster.nodes {
        cluster.coverage.torn_files += node.io.stats().torn_files;
    }
    // Stop every node's tasks (not counted: the run is over).
    let network = cluster.network.clone();
    for node in &mut cluster.nodes {
        node.crash(&network);
    }
    cluster.coverage
}

impl Cluster {
    fn node(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    fn group(&self, id: u64) -> SimGroup {
        self.nodes[(id - 1) as usize]
            .up
            .as_ref()
            .expect("the node is up")
            .group
            .clone()
    }

    fn fail(&self, what: &str) -> ! {
        let when = if self.step < self.plan.steps {
            format!("step {}", self.step)
        } else {
            "healed".to_string()
        };
        panic!(
            "seed {}: {when}: {what}\nplan: {:?}\nreproduce: IGGYD_SIM_SEED={} cargo test -p iggyd-raft --lib sim::tests::cluster_simulation -- --nocapture",
            self.seed, self.plan, self.seed
        );
    }

    fn up_ids(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|node| node.up.is_some())
            .map(|node| node.id)
            .collect()
    }

    /// The node that is leader now, in its own view.
    fn leader(&self) -> Option<u64> {
        self.nodes.iter().find_map(|node| {
            let up = node.up.as_ref()?;
            let metrics = up.group.metrics();
            let metrics = metrics.borrow_watched();
            (metrics.state == ServerState::Leader).then_some(node.id)
        })
    }

    async fn start(&mut self, id: u64) {
        let (network, config) = (self.network.clone(), self.config.clone());
        let recovery = self.node(id).start(&network, config).await;
        if recovery.entries_dropped > 0 || recovery.messages_cut > 0 {
            self.coverage.torn_tails += 1;
        }
        self.down.remove(&id);
        self.checker.restarted(id);
        self.installed.remove(&id);
        {
            // A snapshot this node sends carries its offsets store, as the
            // pump's does (the entries applied taken into it first).
            let up = self.nodes[(id - 1) as usize]
                .up
                .as_ref()
                .expect("just started");
            let stores = self.offset_stores.clone();
            let applied = up.applied.clone();
            up.applied.set_offsets_source(Box::new(move || {
                let taken = stores.borrow_mut().take(id, &applied);
                let stored = taken.map(|()| stores.borrow().stored(id));
                Box::pin(std::future::ready(stored))
            }));
        }
        let up = self.nodes[(id - 1) as usize]
            .up
            .as_ref()
            .expect("just started");
        self.endpoints.borrow_mut().insert(
            id,
            Endpoint {
                group: up.group.clone(),
                log: up.log.clone(),
                clock_skew_micros: self.clock_skews[&id],
            },
        );
        // Every change of the node's metrics is a chance to see a leader.
        let mut metrics = up.group.metrics();
        let sightings = self.sightings.clone();
        spawn(async move {
            loop {
                {
                    let seen = metrics.borrow_watched();
                    if seen.state == ServerState::Leader {
                        sightings.borrow_mut().push((id, seen.current_term));
                    }
                    if seen.vote.is_committed() {
                        let leader = seen.vote.leader_id();
                        sightings.borrow_mut().push((leader.voted_for, leader.term));
                    }
                }
                if metrics.changed().await.is_err() {
                    break;
                }
            }
        });
    }

    async fn crash(&mut self, id: u64) {
        if self.node(id).up.is_none() {
            return;
        }
        self.endpoints.borrow_mut().remove(&id);
        if self.node(id).syncs_held {
            self.coverage.crashes_mid_sync += 1;
        }
        if self.node(id).flushes_held {
            self.coverage.crashes_mid_flush += 1;
        }
        let network = self.network.clone();
        self.node(id).crash(&network);
        self.down.insert(id, self.step);
        self.coverage.crashes += 1;
    }

    /// One nemesis action, drawn from the seed.
    async fn nemesis(&mut self) {
        // Nodes down for a while come back.
        let overdue: Vec<u64> = self
            .down
            .iter()
            .filter(|(_, since)| self.step >= **since + 2)
            .map(|(id, _)| *id)
            .collect();
        for id in overdue {
            self.start(id).await;
        }
        let up = self.up_ids();
        let minority = (self.plan.nodes - 1) / 2;
        let may_crash = (self.plan.nodes - up.len() as u64) < minority;
        let pick = |rng: &mut SimRng, ids: &[u64]| ids[rng.below(ids.len() as u64) as usize];
        let leader = self.leader();
        match self.rng.below(26) {
            4 if may_crash => {
                let id = pick(&mut self.rng, &up);
                self.crash(id).await;
            }
            5 | 6 | 23 if may_crash => {
                if let Some(id) = leader {
                    self.crash(id).await;
                }
            }
            0 | 7 => {
                if let Some((&id, _)) = self.down.iter().next() {
                    self.start(id).await;
                }
            }
            8 | 9 if may_crash => {
                // A stalled disk (a random node's or the leader's): its
                // fsyncs hang, and its appends with them, until released
                // or until it crashes with a write in flight.
                let id = match leader {
                    Some(id) if self.rng.chance(1, 2) => id,
                    _ => pick(&mut self.rng, &up),
                };
                self.node(id).io.hold_syncs(true);
                self.node(id).syncs_held = true;
            }
            10 => {
                for node in &mut self.nodes {
                    if node.syncs_held {
                        node.io.hold_syncs(false);
                        node.syncs_held = false;
                    }
                    if node.flushes_held {
                        node.hold_flushes(false);
                    }
                }
            }
            11 | 12 => {
                let stalled: Vec<u64> = self
                    .nodes
                    .iter()
                    .filter(|node| node.syncs_held || node.flushes_held)
                    .map(|node| node.id)
                    .collect();
                for id in stalled {
                    self.crash(id).await;
                }
            }
            13 if may_crash => {
                // A failing disk: an fsync soon fails with EIO, and the
                // group must stop rather than go on.
                let id = pick(&mut self.rng, &up);
                let successes = self.rng.range(0, 6);
                self.node(id).io.fail_fsync_after(successes);
                self.node(id).disk_failing = true;
            }
            14..=16 => self.partition(leader),
            17 | 18 => self.network.heal(),
            19 => {
                self.coverage.fault_bursts += 1;
                self.network.set_faults(Faults {
                    lose_per_mille: self.rng.range(0, 300),
                    duplicate_per_mille: self.rng.range(0, 300),
                    delay_max_ms: self.rng.range(1, 120),
                });
            }
            20 => self.network.set_faults(Faults::CALM),
            21 | 22 if self.plan.nodes == 5 => self.change_voters(),
            24 | 25 if may_crash => {
                // A slow commit phase (a random node's or the leader's, on
                // the pump-like backend): its appends are written and
                // served to followers but not flushed, until released or
                // until it crashes, losing what it had sent.
                let id = match leader {
                    Some(id) if self.rng.chance(1, 2) => id,
                    _ => pick(&mut self.rng, &up),
                };
                if self.node(id).hold_flushes(true) {
                    self.coverage.late_flushes += 1;
                }
            }
            _ => {}
        }
    }

    /// Cuts links: the leader or another node off, two sides, or some
    /// links one way.
    fn partition(&mut self, leader: Option<u64>) {
        self.coverage.partitions += 1;
        self.network.heal();
        let ids: Vec<u64> = (1..=self.plan.nodes).collect();
        match self.rng.below(4) {
            0 | 1 => {
                let alone = match leader {
                    Some(id) if self.rng.chance(1, 2) => id,
                    _ => ids[self.rng.below(ids.len() as u64) as usize],
                };
                for &other in &ids {
                    self.network.cut(alone, other);
                    self.network.cut(other, alone);
                }
            }
            2 => {
                let side: BTreeSet<u64> = ids
                    .iter()
                    .copied()
                    .filter(|_| self.rng.chance(1, 2))
                    .collect();
                for &a in &ids {
                    for &b in &ids {
                        if side.contains(&a) != side.contains(&b) {
                            self.network.cut(a, b);
                        }
                    }
                }
            }
            _ => {
                for &a in &ids {
                    for &b in &ids {
                        if self.rng.chance(1, 4) {
                            self.network.cut(a, b);
                        }
                    }
                }
            }
        }
    }

    /// Asks the leader to make a random three of the five nodes the voters,
    /// or all five (the others stay as learners).
    fn change_voters(&mut self) {
        let Some(leader) = self.leader() else {
            return;
        };
        let voters: BTreeSet<u64> = if self.rng.chance(1, 2) {
            (1..=5).collect()
        } else {
            let mut ids: Vec<u64> = (1..=5).collect();
            while ids.len() > 3 {
                ids.remove(self.rng.below(ids.len() as u64) as usize);
            }
            ids.into_iter().collect()
        };
        self.coverage.membership_changes += 1;
        let group = self.group(leader);
        spawn(async move {
            let _ = timeout(
                Duration::from_secs(5),
                group.change_membership(voters, true),
            )
            .await;
        });
    }

    /// Now and then (retention runs), a purge proposed to the leader: of
    /// every message, or, as delete-segments does, of those below a batch
    /// boundary (where the messages of a committed entry end).
    fn purge(&mut self) {
        if !self.purge_rng.chance(1, 12) {
            return;
        }
        let Some(leader) = self.leader() else {
            return;
        };
        let whole = self.purge_rng.chance(1, 2);
        let pick = self.purge_rng.next_u64();
        let Some(up) = self.nodes[(leader - 1) as usize].up.as_ref() else {
            return;
        };
        let committed = up
            .group
            .metrics()
            .borrow_watched()
            .last_applied
            .map_or(0, |id| id.index);
        let log = up.log.clone();
        self.coverage.purges_proposed += 1;
        let group = self.group(leader);
        let purges = self.purges.clone();
        spawn(async move {
            let below = if whole {
                u64::MAX
            } else {
                let log = log.lock().await;
                let first = log.first_index().unwrap_or(0);
                if committed < first {
                    return;
                }
                let index = first + pick % (committed - first + 1);
                match log.messages_end_through(index).await {
                    Ok(end) => end,
                    Err(_) => return,
                }
            };
            let written = timeout(
                Duration::from_secs(2),
                group.client_write(crate::Proposal::Purge(below)),
            )
            .await;
            if let Ok(Ok(written)) = written {
                purges
                    .borrow_mut()
                    .push((written.log_id.index, written.data.base_offset));
            }
        });
    }

    /// Retention on every node that is up, keeping its two newest sealed
    /// segments.
    async fn retain(&mut self) {
        for id in 1..=self.plan.nodes {
            // A stalled or failing disk: next step.
            if self.node(id).syncs_held || self.node(id).disk_failing {
                continue;
            }
            match self.node(id).retain(2).await {
                Ok(retained) => {
                    self.coverage.segments_deleted += retained.deleted as u64;
                    self.coverage.snapshots_asked += u64::from(retained.asked);
                    if let Some(below) = retained.purged_below {
                        let floor = self.durable_floors.entry(id).or_default();
                        *floor = (*floor).max(below);
                    }
                }
                Err(error) => self.fail(&format!("node {id}: retention: {error}")),
            }
        }
    }

    /// The checks after a step (see `checker.rs`); a group that stopped on
    /// an injected disk failure is crashed and restarted.
    async fn check(&mut self) {
        for id in 1..=self.plan.nodes {
            if let Some(reason) = self.node(id).stopped() {
                // Only the injected EIO may stop a group.
                if !self.node(id).disk_failing || !reason.contains("os error 5") {
                    self.fail(&format!("node {id} stopped: {reason}"));
                }
                self.coverage.disk_failures += 1;
                self.crash(id).await;
                self.start(id).await;
            }
        }
        for (node, term) in self.sightings.borrow_mut().drain(..) {
            self.checker.leader_seen(term, node);
        }
        for node in &self.nodes {
            let Some(up) = &node.up else { continue };
            // A log busy with I/O (a stalled sync) is checked next step.
            let Some(log) = up.log.try_lock() else {
                continue;
            };
            let applied_end = up.applied.committed_next_offset.get();
            // A node that applied an acknowledged purge serves nothing
            // below it, ever after (restarts and snapshots included).
            let last_applied = {
                let metrics = up.group.metrics();
                let metrics = metrics.borrow_watched();
                metrics.last_applied.map(|id| id.index)
            };
            let durable = self.durable_floors.get(&node.id).copied().unwrap_or(0);
            if up.applied.floor() < durable {
                self.checker.violations.push(format!(
                    "node {} made a purge below {durable} durable but serves from {}",
                    node.id,
                    up.applied.floor()
                ));
            }
            for (index, below) in self.purges.borrow().iter() {
                if last_applied.is_some_and(|applied| applied >= *index)
                    && up.applied.floor() < *below
                {
                    self.checker.violations.push(format!(
                        "node {} applied the purge at entry {index} (below {below}) but serves from {}",
                        node.id,
                        up.applied.floor()
                    ));
                }
            }
            let taken = self.offset_stores.borrow_mut().take(node.id, &up.applied);
            if let Err(violation) = taken {
                self.checker.violations.push(violation);
            }
            if let Some((point, _)) = up.applied.installed()
                && self.installed.get(&node.id) != Some(&(point.index, point.term))
            {
                self.installed.insert(node.id, (point.index, point.term));
                self.coverage.snapshots_installed += 1;
            }
            if log.purged().is_some() {
                self.purged_offset_max =
                    self.purged_offset_max.max(log.files().purged_next_offset());
            }
            let installed_end = up
                .applied
                .installed()
                .map_or(0, |(point, _)| point.next_offset);
            let checked = self
                .checker
                .check_log(node.id, &log, applied_end, installed_end)
                .await;
            if let Err(error) = checked {
                self.fail(&format!("node {}: reading the log: {error}", node.id));
            }
        }
        // Leader completeness, once every log readable was read (so the
        // newest term is known).
        for node in &self.nodes {
            let Some(up) = &node.up else { continue };
            let (state, term) = {
                let metrics = up.group.metrics();
                let metrics = metrics.borrow_watched();
                (metrics.state, metrics.current_term)
            };
            if state != ServerState::Leader {
                continue;
            }
            let Some(log) = up.log.try_lock() else {
                continue;
            };
            if let Err(error) = self.checker.check_leader(node.id, term, &log).await {
                self.fail(&format!("node {}: reading the log: {error}", node.id));
            }
        }
        if let Some(violation) = self.checker.violations.first() {
            self.fail(violation);
        }
    }

    /// Ends every fault: links, message faults, stalled and failing disks,
    /// nodes down.
    async fn heal(&mut self) {
        self.network.heal();
        self.network.set_faults(Faults::CALM);
        for id in 1..=self.plan.nodes {
            let node = self.node(id);
            if node.syncs_held {
                node.io.hold_syncs(false);
                node.syncs_held = false;
            }
            if node.flushes_held {
                node.hold_flushes(false);
            }
            if node.disk_failing {
                // The only way to disarm an injected fsync failure.
                self.crash(id).await;
            }
            if self.node(id).up.is_none() {
                self.start(id).await;
            }
        }
    }

    /// Waits (in virtual time) until a leader's whole log is applied on
    /// every node.
    async fn converge(&mut self) {
        for _ in 0..600 {
            sleep(Duration::from_millis(100)).await;
            if let Some(id) =
                (1..=self.plan.nodes).find(|id| self.nodes[(id - 1) as usize].stopped().is_some())
            {
                self.fail(&format!("node {id} stopped while converging"));
            }
            let Some(leader) = self.leader() else {
                continue;
            };
            let leader_metrics = self.group(leader).metrics().borrow_watched().clone();
            let Some(last) = leader_metrics.last_log_index else {
                continue;
            };
            let done = self.nodes.iter().all(|node| {
                node.up.as_ref().is_some_and(|up| {
                    let metrics = up.group.metrics();
                    let metrics = metrics.borrow_watched();
                    metrics.last_applied.map(|id| id.index) == Some(last)
                })
            });
            if done {
                return;
            }
        }
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|node| {
                let up = node.up.as_ref()?;
                let metrics = up.group.metrics();
                let metrics = metrics.borrow_watched();
                Some(format!(
                    "node {}: {:?} of term {}, last {:?}, applied {:?}",
                    node.id,
                    metrics.state,
                    metrics.current_term,
                    metrics.last_log_index,
                    metrics.last_applied.map(|id| id.index)
                ))
            })
            .collect();
        self.fail(&format!(
            "the healed cluster did not converge in 60 s: {}",
            nodes.join("; ")
        ));
    }

    /// Every acknowledged proposal is, on every replica, the entry at the
    /// index it was answered, of its term, with the same bytes everywhere:
    /// its batch, at the offsets it was answered.
    async fn check_acknowledged_entries(&mut self, ledger: &Ledger) {
        for (attempt, record) in ledger.attempts.iter().enumerate() {
            let Outcome::Acknowledged { appended, log_id } = record.outcome else {
                continue;
            };
            let mut stored: Option<(u64, Vec<u8>)> = None;
            for node in &self.nodes {
                let up = node.up.as_ref().expect("every node is up");
                let log = up.log.lock().await;
                // Purged by retention, its messages deleted or about to be.
                if log
                    .purged()
                    .is_some_and(|(purged, _)| log_id.index <= purged)
                {
                    continue;
                }
                let entry = match log.get(log_id.index).await {
                    Ok(Some(entry)) => entry,
                    Ok(None) => self.fail(&format!(
                        "node {}: acknowledged attempt {attempt}'s entry {log_id} is missing",
                        node.id
                    )),
                    Err(error) => self.fail(&format!("node {}: {error}", node.id)),
                };
                let StoredBody::Data(bytes) = entry.body else {
                    self.fail(&format!(
                        "node {}: acknowledged attempt {attempt}'s entry {log_id} holds no batch",
                        node.id
                    ));
                };
                if entry.term != log_id.leader_id.term {
                    self.fail(&format!(
                        "node {}: acknowledged attempt {attempt}'s entry {log_id} is of term {}",
                        node.id, entry.term
                    ));
                }
                let header = iggyd_wire::batch::BatchHeader::decode(&bytes);
                let first_id = iggyd_wire::batch::frames(&bytes)
                    .ok()
                    .and_then(|mut frames| frames.next())
                    .and_then(Result::ok)
                    .map(|frame| frame.header.id);
                let placed = header.as_ref().map(|header| header.base_offset).ok();
                if placed != Some(appended.base_offset)
                    || first_id.map(|id| workload::attempt_of(id).0) != Some(attempt as u64)
                {
                    self.fail(&format!(
                        "node {}: entry {log_id} holds offset {placed:?}, message {first_id:?}, not acknowledged attempt {attempt} at {appended}",
                        node.id
                    ));
                }
                match &stored {
                    None => stored = Some((node.id, bytes.to_vec())),
                    Some((first, first_bytes)) if *first_bytes != bytes => self.fail(&format!(
                        "entry {log_id} (acknowledged attempt {attempt}) differs between node {first} and node {}",
                        node.id
                    )),
                    Some(_) => {}
                }
            }
        }
    }

    /// Every replica's committed messages, read back, against the ledger.
    async fn final_check(&mut self, ledger: &Ledger) {
        let mut replicas = BTreeMap::new();
        for id in 1..=self.plan.nodes {
            self.checker.restarted(id);
        }
        self.check().await;
        for node in &self.nodes {
            let up = node.up.as_ref().expect("every node is up");
            let log = up.log.lock().await;
            let Some((committed, _)) = log.committed() else {
                self.fail(&format!("node {} committed nothing", node.id));
            };
            let end = match log.messages_end_through(committed).await {
                Ok(end) => end,
                Err(error) => self.fail(&format!("node {}: {error}", node.id)),
            };
            if end != up.applied.committed_next_offset.get() {
                self.fail(&format!(
                    "node {}: the state machine made offsets below {} visible, the log commits below {end}",
                    node.id,
                    up.applied.committed_next_offset.get()
                ));
            }
            match committed_messages(&log, end).await {
                Ok(messages) => {
                    replicas.insert(node.id, messages);
                }
                Err(error) => self.fail(&format!("node {}: {error}", node.id)),
            }
        }
        self.coverage.messages = replicas.values().map(|m| m.len() as u64).max().unwrap_or(0);
        // Every acknowledged purge is applied everywhere: no replica
        // serves below it.
        let purged_below = self
            .purges
            .borrow()
            .iter()
            .map(|(_, below)| *below)
            .max()
            .unwrap_or(0);
        self.coverage.purges_acknowledged = self.purges.borrow().len() as u64;
        let mut served = BTreeMap::new();
        let mut starts = BTreeMap::new();
        for node in &self.nodes {
            let floor = node.up.as_ref().expect("every node is up").applied.floor();
            if floor < purged_below {
                self.fail(&format!(
                    "node {} serves from {floor}, below an acknowledged purge of the messages below {purged_below}",
                    node.id
                ));
            }
            let messages: Vec<_> = replicas[&node.id]
                .iter()
                .filter(|(offset, _)| *offset >= floor)
                .copied()
                .collect();
            served.insert(node.id, messages);
            starts.insert(node.id, floor);
        }
        // Retention deletes only what a snapshot covers: no replica's
        // messages start past the furthest purge point any node reached.
        for (node, messages) in &replicas {
            if let Some((first, _)) = messages.first()
                && *first > self.purged_offset_max
                && *first > 0
            {
                self.fail(&format!(
                    "node {node}'s messages start at {first}, past every purge point (at most {})",
                    self.purged_offset_max
                ));
            }
        }
        self.check_acknowledged_entries(ledger).await;
        let violations = check_messages(ledger, &served, &starts);
        if let Some(violation) = violations.first() {
            self.fail(&format!(
                "{violation} ({} violations in all)",
                violations.len()
            ));
        }
    }
}
