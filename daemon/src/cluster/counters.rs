//! A shard's replication counters for Prometheus: the elections its groups
//! went through (their Raft terms) and the client requests its followers
//! forwarded to a leader. The shard reads them for its once-a-second
//! report (`Replication::counters`).
//!
//! Elections are counted from terms, not from events: with pre-vote a
//! term rises only when some node starts an election, so a group's
//! current term is the number of elections it has had, whether this node
//! started them or learned of them. The counter is the sum of every
//! group's term as last seen, plus the last term of groups that are gone,
//! so it never goes back while the process runs.
//!
//! Must not: wait on a group (a term is read from what openraft publishes)
//! or walk the groups more often than the report does.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Requests forwarded to a leader, shared with the forwarding closures of
/// the shard's groups.
#[derive(Debug, Default)]
pub struct Forwarded {
    pub messages: Cell<u64>,
    pub offsets: Cell<u64>,
}

/// One shard's election and forwarding counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub forwarded: Rc<Forwarded>,
    /// Each group's term when last seen, by channel.
    terms: RefCell<BTreeMap<u64, u64>>,
    /// The last terms of groups no longer running here.
    retired: Cell<u64>,
}

impl Counters {
    /// Elections so far, given every running group's current term by
    /// channel: retired groups' last terms plus the running ones'.
    pub fn elections(&self, current: BTreeMap<u64, u64>) -> u64 {
        let mut terms = self.terms.borrow_mut();
        let mut retired = self.retired.get();
        for (channel, term) in terms.iter() {
            if !current.contains_key(channel) {
                retired = retired.saturating_add(*term);
            }
        }
        let mut running = 0u64;
        for (channel, term) in &current {
            // A term never goes back; should a group report a lower one
            // (restarted on another log), keep the higher so the counter
            // stays monotone.
            let seen = terms.get(channel).copied().unwrap_or(0);
            running = running.saturating_add((*term).max(seen));
        }
        let kept: BTreeMap<u64, u64> = current
            .into_iter()
            .map(|(channel, term)| {
                let seen = terms.get(&channel).copied().unwrap_or(0);
                (channel, term.max(seen))
            })
            .collect();
        *terms = kept;
        self.retired.set(retired);
        retired.saturating_add(running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the election counter follows the groups' terms and never goes
    // back: a group that leaves keeps its last term in the count, and a
    // term reported lower than before is not subtracted.
    #[test]
    fn elections_are_terms_and_never_go_back() {
        let counters = Counters::default();
        assert_eq!(counters.elections(BTreeMap::new()), 0);
        assert_eq!(counters.elections(BTreeMap::from([(1, 1), (2, 1)])), 2);
        assert_eq!(counters.elections(BTreeMap::from([(1, 3), (2, 1)])), 4);
        // Group 1 is removed: its three elections stay counted.
        assert_eq!(counters.elections(BTreeMap::from([(2, 2)])), 5);
        // A lower term than seen before does not lower the count.
        assert_eq!(counters.elections(BTreeMap::from([(2, 1), (7, 1)])), 6);
        assert_eq!(counters.elections(BTreeMap::from([(2, 2), (7, 1)])), 6);
        assert_eq!(counters.elections(BTreeMap::new()), 6);
    }
}
