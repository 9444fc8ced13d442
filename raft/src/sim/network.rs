//! The simulated network: a [`Transport`] between the nodes of one
//! simulation, so every RPC goes through the production network code
//! (`crate::network`: postcard bytes out, `serve` on the receiving node,
//! bytes back), on virtual time, with every fault a real network has, each
//! decided by the seed's RNG:
//!
//! - a partition cuts directed links (a symmetric one cuts both
//!   directions); a call on a cut link, or to a node that is down, fails
//!   as unreachable after a while;
//! - a call or its answer may be lost (the caller times out, not knowing
//!   whether the receiver acted on it);
//! - every message is delayed by a random time, so messages overtake each
//!   other;
//! - a call may be duplicated: the copy arrives later, after messages sent
//!   meanwhile (a stale message out of order), and its answer goes nowhere.
//!
//! A message reaches whatever incarnation of its target runs when it
//! arrives (a restarted node may get its previous life's messages).
//!
//! Must not: corrupt bytes (the daemon's transport is authenticated
//! mutual TLS: Raft does not survive forged messages, and the codec's own
//! refusal of malformed bodies is tested on its own), or hold a `RefCell`
//! borrow across an await.

use super::SimGroup;
use super::runtime::{sleep, spawn, timeout};
use crate::network::{Transport, TransportError, serve};
use iggyd_storage::sim::SimRng;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

/// How faulty the network is now (rates per thousand messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    pub lose_per_mille: u64,
    pub duplicate_per_mille: u64,
    /// Every message takes `1..=delay_max_ms` milliseconds.
    pub delay_max_ms: u64,
}

impl Faults {
    /// A healthy network: no loss, no duplicates, 1–2 ms.
    pub const CALM: Faults = Faults {
        lose_per_mille: 0,
        duplicate_per_mille: 0,
        delay_max_ms: 2,
    };
}

/// What the network did, for the coverage summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Calls refused: cut link or target down.
    pub unreachable: u64,
    /// Calls whose answer was a refusal (the target's group stopped,
    /// refused the call, or is not there).
    pub refused: u64,
}

/// The network of one simulation, shared by every node's transport.
pub struct SimNet {
    rng: RefCell<SimRng>,
    /// The running incarnation of each node that is up.
    groups: RefCell<BTreeMap<u64, SimGroup>>,
    /// Cut directed links `(from, to)`.
    cut: RefCell<BTreeSet<(u64, u64)>>,
    faults: Cell<Faults>,
    stats: Cell<NetStats>,
}

impl SimNet {
    pub fn new(seed: u64) -> Rc<SimNet> {
        Rc::new(SimNet {
            rng: RefCell::new(SimRng::new(seed)),
            groups: RefCell::new(BTreeMap::new()),
            cut: RefCell::new(BTreeSet::new()),
            faults: Cell::new(Faults::CALM),
            stats: Cell::new(NetStats::default()),
        })
    }

    /// The node's group is up and reachable (a restart replaces it).
    pub fn attach(&self, id: u64, group: SimGroup) {
        self.groups.borrow_mut().insert(id, group);
    }

    /// The node is down: calls to it fail.
    pub fn detach(&self, id: u64) {
        self.groups.borrow_mut().remove(&id);
    }

    pub fn set_faults(&self, faults: Faults) {
        self.faults.set(faults);
    }

    /// Cuts the directed link `from → to`.
    pub fn cut(&self, from: u64, to: u64) {
        if from != to {
            self.cut.borrow_mut().insert((from, to));
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.cut.borrow_mut().clear();
    }

    pub fn stats(&self) -> NetStats {
        self.stats.get()
    }

    fn count(&self, update: impl FnOnce(&mut NetStats)) {
        let mut stats = self.stats.get();
        update(&mut stats);
        self.stats.set(stats);
    }

    fn link_up(&self, from: u64, to: u64) -> bool {
        !self.cut.borrow().contains(&(from, to))
    }

    fn chance(&self, per_mille: u64) -> bool {
        per_mille > 0 && self.rng.borrow_mut().chance(per_mille, 1000)
    }

    fn delay(&self) -> Duration {
        let max = self.faults.get().delay_max_ms.max(1);
        Duration::from_millis(self.rng.borrow_mut().range(1, max))
    }

    /// The group `to` runs now, if the link from `from` lets a message
    /// through.
    fn reachable(&self, from: u64, to: u64) -> Option<SimGroup> {
        if !self.link_up(from, to) {
            return None;
        }
        self.groups.borrow().get(&to).cloned()
    }

    /// Carries `body` from `from` to `to`, has the target serve it, and
    /// carries the answer back, with the network's faults; gives up after
    /// `ttl` like a real transport.
    async fn call(
        self: &Rc<Self>,
        from: u64,
        to: u64,
        body: Vec<u8>,
        ttl: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        self.count(|stats| stats.sent += 1);
        let faults = self.faults.get();
        if self.chance(faults.duplicate_per_mille) {
            self.count(|stats| stats.duplicated += 1);
            let network = self.clone();
            let copy = body.clone();
            let late = self.delay() * 2 + self.delay();
            spawn(async move {
                sleep(late).await;
                if let Some(group) = network.reachable(from, to) {
                    network.count(|stats| stats.delivered += 1);
                    let _ = serve(&group, None, copy.into()).await;
                }
            });
        }
        let lost = self.chance(faults.lose_per_mille);
        sleep(self.delay()).await;
        let Some(group) = self.reachable(from, to) else {
            self.count(|stats| stats.unreachable += 1);
            sleep(self.delay().min(ttl)).await;
            return Err(TransportError::Unreachable(format!(
                "node {to} is down or cut off from node {from}"
            )));
        };
        if lost {
            self.count(|stats| stats.lost += 1);
            sleep(ttl).await;
            return Err(TransportError::Failed(format!(
                "a call from node {from} to node {to} was lost"
            )));
        }
        self.count(|stats| stats.delivered += 1);
        // A target whose disk stalls answers late or never: the caller
        // times out, as over a real connection.
        let Ok(answer) = timeout(ttl, serve(&group, None, body.into())).await else {
            return Err(TransportError::Failed(format!(
                "node {to} did not answer node {from} in time"
            )));
        };
        if answer.first() != Some(&0) {
            self.count(|stats| stats.refused += 1);
        }
        let lost = self.chance(faults.lose_per_mille);
        sleep(self.delay()).await;
        if lost || !self.link_up(to, from) {
            self.count(|stats| stats.lost += 1);
            return Err(TransportError::Failed(format!(
                "the answer from node {to} to node {from} was lost"
            )));
        }
        Ok(answer)
    }
}

/// One node's end of the simulated network.
#[derive(Clone)]
pub struct SimTransport {
    pub from: u64,
    pub net: Rc<SimNet>,
}

impl Transport for SimTransport {
    async fn call(
        &self,
        target: u64,
        _channel: u64,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        self.net.call(self.from, target, body, timeout).await
    }
}
