//! The seeded cluster simulation (tests only): 3 or 5 openraft nodes on
//! one thread, each on its own simulated disk (`SimIo`: a crash loses what
//! was not synced, maybe tearing the last write), talking through the
//! production network code over a simulated transport, under a nemesis
//! that crashes and restarts nodes, fails and stalls their disks, slows
//! their commit phase, partitions them (partitions heal) and drops,
//! delays, duplicates and reorders their messages, and changes the
//! voters; clients propose stamped batches to whoever leads throughout.
//! After every step the checker asserts one leader per term, committed
//! entries that never change, leader completeness, logs that match, dense
//! offsets, nothing visible before it is committed; at the end, with
//! everything healed and converged, every acknowledged proposal is on
//! every replica at the index it was answered with the same bytes, and
//! every acknowledged message is read back exactly once, in order, from
//! every replica's messages. A client also writes stored consumer offsets
//! (offsets entries): no replica's stored offset ever goes back, and each
//! holds at least the last acknowledged one at the end. On runs with
//! retention, purges are proposed too: a node that applied one, or made
//! it durable, never serves below it again.
//!
//! Time is virtual: the nodes run the adapter's own log stores, state
//! machine and network under [`SimRaft`], a type configuration on the
//! simulation's own deterministic executor (`runtime.rs`, openraft's
//! `AsyncRuntime` trait implemented on a virtual clock: a timer fires as
//! soon as every task waits, so seconds of a run take milliseconds). Each
//! node's tasks form a group, so a crash drops them wherever they are.
//! Everything random comes from the seed, and nothing iterates a hash
//! map, so a seed reproduces a run exactly (`runs_are_deterministic`
//! checks it within a process; the seed runner's `IGGYD_SIM_SEED` across
//! processes).
//!
//! - `runtime.rs`: the executor, virtual time, openraft's runtime trait.
//! - `watch.rs`: openraft's watch channel, waking in a fixed order.
//! - `network.rs`: the transport between nodes, with faults.
//! - `node.rs`: a node's disk, its incarnations (start, crash) and the
//!   pump-like log backend.
//! - `workload.rs`: the clients and the ledger of what they were told.
//! - `offsets.rs`: the offsets client and every replica's offsets store.
//! - `checker.rs`: the invariants, after every step and at the end.
//! - `cluster.rs`: one seed's run: the nemesis, the purges, the steps.
//! - `coverage.rs`: what a run covered, summed over seeds.
//! - `scenarios.rs`: what seeds found, replayed step by step.
//! - `tests.rs`: the seeds run, the regression seeds, the scenarios,
//!   determinism.
//!
//! Must not: read a wall clock, use OS randomness or iterate a `HashMap`
//! (a seed must reproduce its run), or touch a real disk.

mod checker;
mod cluster;
mod coverage;
mod network;
mod node;
mod offsets;
pub mod runtime;
mod scenarios;
mod tests;
mod watch;
mod workload;

use crate::state_machine::StateMachine;
use crate::{Appended, Proposal, StdLeaderId};
use runtime::SimRuntime;

openraft::declare_raft_types!(
    /// The simulation's type configuration: [`crate::PartitionRaft`] on
    /// virtual time.
    pub SimRaft:
        D = Proposal,
        R = Appended,
        NodeId = u64,
        Node = openraft::impls::BasicNode,
        Term = u64,
        LeaderId = StdLeaderId,
        AsyncRuntime = SimRuntime,
);

/// A node's Raft group in the simulation.
pub type SimGroup = openraft::Raft<SimRaft, StateMachine<SimRaft>>;
