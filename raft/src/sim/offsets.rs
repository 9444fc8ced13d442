//! Stored consumer offsets in the cluster simulation: a client writing
//! offsets entries (`crate::offsets`) and every replica's offsets store as
//! the daemon's pump keeps it (`daemon/src/shard/pump/offsets.rs`): the
//! writes of the entries its state machine applied, in log order, skipping
//! the entries at or below the highest index it already holds (a restarted
//! node applies its log again from the start). The store outlives a
//! node's crashes, as the offsets file does. A snapshot a node sends
//! carries its store, and a node that installs one replaces its own with
//! it (when newer), as the pump does; that too must never take an offset
//! back.
//!
//! The client writes one consumer's offset, one attempt at a time, each a
//! higher value than the last (also after a failed attempt), straight to
//! the node it thinks leads: so in every log its entries are in the order
//! it wrote them, and the checks are that no replica's stored offset ever
//! goes back, and that once the cluster converged every replica holds at
//! least the last acknowledged value.
//!
//! Must not: draw randomness from anything but its own `SimRng`.

use super::runtime::{sleep, timeout};
use super::workload::Endpoints;
use crate::Proposal;
use crate::offsets::{OffsetWrite, encode};
use crate::state_machine::Applied;
use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
use iggyd_storage::sim::SimRng;
use openraft::errors::{ClientWriteError, RaftError};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

/// How long the client waits for a write before it gives up on it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1_500);

/// The one consumer the offsets client writes for.
pub const CONSUMER: ConsumerKey = ConsumerKey {
    kind: ConsumerKind::Group,
    id: 1,
};

/// What the offsets client was told: the last value acknowledged, and how
/// many attempts were.
#[derive(Debug, Default)]
pub struct OffsetsLedger {
    pub acknowledged: Option<u64>,
    pub attempts: u64,
}

/// Writes increasing offsets for [`CONSUMER`] until `stop`.
pub async fn client(
    mut rng: SimRng,
    endpoints: Endpoints,
    ledger: Rc<RefCell<OffsetsLedger>>,
    stop: Rc<Cell<bool>>,
) {
    let mut value = 0u64;
    let mut leader: Option<u64> = None;
    while !stop.get() {
        let target = {
            let endpoints = endpoints.borrow();
            match leader.filter(|id| endpoints.contains_key(id)) {
                Some(id) => Some(id),
                None if endpoints.is_empty() => None,
                None => {
                    let pick = rng.below(endpoints.len() as u64) as usize;
                    endpoints.keys().nth(pick).copied()
                }
            }
        };
        let Some(target) = target else {
            sleep(Duration::from_millis(50)).await;
            continue;
        };
        let group = endpoints.borrow()[&target].group.clone();
        value += rng.range(1, 4);
        ledger.borrow_mut().attempts += 1;
        let write = [OffsetWrite::Store {
            consumer: CONSUMER,
            offset: value,
        }];
        let written = timeout(
            CLIENT_TIMEOUT,
            group.client_write(Proposal::Offsets(encode(&write))),
        )
        .await;
        match written {
            Ok(Ok(_)) => {
                leader = Some(target);
                ledger.borrow_mut().acknowledged = Some(value);
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                leader = forward.leader_id;
            }
            Ok(Err(_)) | Err(_) => leader = None,
        }
        sleep(Duration::from_millis(rng.range(5, 60))).await;
    }
}

/// One replica's offsets store.
#[derive(Debug, Default)]
struct Store {
    offsets: BTreeMap<ConsumerKey, u64>,
    /// The highest index of an entry written into it.
    raft_index: u64,
}

/// Every replica's offsets store, by node.
#[derive(Debug, Default)]
pub struct OffsetStores {
    stores: BTreeMap<u64, Store>,
    /// Offsets entries written into some store (coverage).
    pub entries_applied: u64,
    /// Entries skipped as already held (a restart's replay).
    pub entries_skipped: u64,
    /// Stores replaced by an installed snapshot's.
    pub snapshots_taken: u64,
}

impl OffsetStores {
    /// Takes what node `id`'s state machine applied into its store;
    /// returns a violation when a stored offset would go back.
    pub fn take(&mut self, id: u64, applied: &Applied) -> Result<(), String> {
        let store = self.stores.entry(id).or_default();
        // An installed snapshot's store first, as the pump takes it: it
        // replaces this one when newer, and never takes an offset back.
        if let Some((index, writes)) = applied.take_installed_offsets()
            && index > store.raft_index
        {
            self.snapshots_taken += 1;
            let mut offsets = BTreeMap::new();
            for write in writes {
                if let OffsetWrite::Store { consumer, offset } = write {
                    offsets.insert(consumer, offset);
                }
            }
            for (consumer, before) in &store.offsets {
                if offsets.get(consumer).is_none_or(|now| now < before) {
                    return Err(format!(
                        "node {id}: the snapshot of entry {index} took {consumer:?}'s stored offset back from {before} to {:?}",
                        offsets.get(consumer)
                    ));
                }
            }
            store.offsets = offsets;
            store.raft_index = index;
        }
        for (index, writes) in applied.take_offsets() {
            if index <= store.raft_index {
                self.entries_skipped += 1;
                continue;
            }
            self.entries_applied += 1;
            store.raft_index = index;
            for write in writes {
                match write {
                    OffsetWrite::Store { consumer, offset } => {
                        let before = store.offsets.insert(consumer, offset);
                        if before.is_some_and(|before| before > offset) {
                            return Err(format!(
                                "node {id}: entry {index} took {consumer:?}'s stored offset back from {before:?} to {offset}"
                            ));
                        }
                    }
                    OffsetWrite::Delete { consumer } => {
                        store.offsets.remove(&consumer);
                    }
                }
            }
        }
        Ok(())
    }

    /// Node `id`'s whole store, as a snapshot it sends carries it.
    pub fn stored(&self, id: u64) -> crate::state_machine::StoredOffsets {
        let Some(store) = self.stores.get(&id) else {
            return (0, Vec::new());
        };
        let writes = store
            .offsets
            .iter()
            .map(|(consumer, offset)| OffsetWrite::Store {
                consumer: *consumer,
                offset: *offset,
            })
            .collect();
        (store.raft_index, writes)
    }

    /// Every replica in `ids` holds at least the last acknowledged value.
    pub fn check_final(&self, ids: &[u64], ledger: &OffsetsLedger) -> Result<(), String> {
        let Some(acknowledged) = ledger.acknowledged else {
            return Ok(());
        };
        for id in ids {
            let held = self
                .stores
                .get(id)
                .and_then(|store| store.offsets.get(&CONSUMER).copied());
            if held.is_none_or(|held| held < acknowledged) {
                return Err(format!(
                    "node {id} stores offset {held:?}, below the acknowledged {acknowledged}"
                ));
            }
        }
        Ok(())
    }
}
