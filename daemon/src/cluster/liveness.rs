//! Whether the other nodes are there: shard 0 sends every peer node a
//! beat each heartbeat interval ([`beat`]), and each answer is noted in
//! [`Liveness`], which the node's shards share. Partition groups elect,
//! refuse votes and keep their leader's lease by it (`quiet.rs`); a
//! forwarded proposal stops waiting for a leader that fell silent
//! ([`unless_silent`]); a node that hears no majority sends its clients
//! elsewhere (`node.rs`).
//!
//! Must not: take a lock beyond the liveness map's, which is held for one
//! lookup.

use super::quiet::Timing;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The channel of node-to-node beats: no group has it (storage ids stop
/// short of `METADATA_CHANNEL`, `u64::MAX`).
pub const BEAT_CHANNEL: u64 = u64::MAX - 1;

/// When each peer node last answered one of this node's beats (shared by
/// the node's shards; written by shard 0's beats).
#[derive(Debug)]
pub struct Liveness {
    since: Instant,
    /// Milliseconds since `since`, by node id.
    heard_ms: Mutex<BTreeMap<u64, u64>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            since: Instant::now(),
            heard_ms: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Liveness {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Node `node` answered just now.
    pub fn heard(&self, node: u64) {
        let now = self.now_ms();
        if let Ok(mut heard) = self.heard_ms.lock() {
            heard.insert(node, now);
        }
    }

    /// How long `node` has been silent; `None` when it never answered.
    pub fn silence(&self, node: u64) -> Option<Duration> {
        let at = *self.heard_ms.lock().ok()?.get(&node)?;
        Some(Duration::from_millis(self.now_ms().saturating_sub(at)))
    }

    /// Whether `node` answered within `within`.
    pub fn alive(&self, node: u64, within: Duration) -> bool {
        self.silence(node).is_some_and(|silence| silence < within)
    }

    /// Whether this node (`me`) and the voters alive within `within` are a
    /// majority of `voters`.
    pub fn quorum_live(&self, me: u64, voters: &BTreeSet<u64>, within: Duration) -> bool {
        let live = voters
            .iter()
            .filter(|voter| **voter == me || self.alive(**voter, within))
            .count();
        live * 2 > voters.len()
    }
}

/// Sends node `peer` a beat every `every` for as long as `running` says,
/// noting each answer in `liveness`. A beat that gets no answer within
/// `every` is simply not noted.
pub async fn beat<T: iggyd_raft::network::Transport>(
    transport: T,
    peer: u64,
    liveness: std::sync::Arc<Liveness>,
    every: Duration,
    running: impl Fn() -> bool,
) {
    while running() {
        let started = Instant::now();
        let answered =
            monoio::time::timeout(every, transport.call(peer, BEAT_CHANNEL, Vec::new(), every))
                .await;
        if matches!(answered, Ok(Ok(_))) {
            liveness.heard(peer);
        }
        monoio::time::sleep(every.saturating_sub(started.elapsed())).await;
    }
}

/// The answer to a beat.
pub fn beat_answer() -> Vec<u8> {
    vec![0]
}

/// Waits for `call`, a request that `leader`'s node is carrying out, as
/// long as that node is heard: once it has not answered this node's beats
/// for a lease (cut off, paused or dead) the wait ends with the outcome
/// unknown (the request may have reached it and may still commit there),
/// instead of at the call's own timeout, which is much longer. A node never
/// heard from is waited for until the call's timeout.
pub async fn unless_silent<R>(
    call: impl std::future::Future<Output = Result<R, iggyd_raft::replay::ProposeError>>,
    liveness: &Liveness,
    leader: u64,
    timing: Timing,
) -> Result<R, iggyd_raft::replay::ProposeError> {
    let silent = async {
        loop {
            monoio::time::sleep(timing.heartbeat).await;
            if let Some(silence) = liveness
                .silence(leader)
                .filter(|silence| *silence >= timing.lease())
            {
                return silence;
            }
        }
    };
    monoio::select! {
        answer = call => answer,
        silence = silent => Err(iggyd_raft::replay::ProposeError::Unknown(format!(
            "node {leader}, which leads, has not answered for {} ms",
            silence.as_millis()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_counts_this_node_and_the_voters_heard_lately() {
        let liveness = Liveness::default();
        let voters: BTreeSet<u64> = [1, 2, 3].into();
        let lease = Duration::from_secs(1);
        assert!(!liveness.quorum_live(1, &voters, lease));
        liveness.heard(2);
        assert!(liveness.quorum_live(1, &voters, lease));
        assert!(!liveness.quorum_live(1, &voters, Duration::ZERO));
        assert!(liveness.quorum_live(1, &[1].into(), lease));
        assert!(!liveness.quorum_live(4, &voters, lease));
    }

    // Proves a forwarded request ends, in doubt, once the leader's node has
    // not answered the beats for a lease, and only then: an answer that
    // comes while it is heard is passed on, and a node never heard from
    // is waited for until the call itself ends.
    #[test]
    fn a_forward_ends_in_doubt_once_the_leaders_node_is_silent_for_a_lease() {
        use iggyd_raft::replay::ProposeError;
        let timing = Timing {
            election_min: Duration::from_millis(60),
            election_max: Duration::from_millis(120),
            heartbeat: Duration::from_millis(10),
        };
        let mut runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let liveness = Liveness::default();
            liveness.heard(2);
            let never = std::future::pending::<Result<u64, ProposeError>>();
            match unless_silent(never, &liveness, 2, timing).await {
                Err(ProposeError::Unknown(why)) => assert!(why.contains("node 2"), "{why}"),
                other => panic!("expected an outcome in doubt: {other:?}"),
            }

            // Heard all along (a beat every heartbeat): the answer, late.
            let beating = async {
                for _ in 0..20 {
                    liveness.heard(3);
                    monoio::time::sleep(timing.heartbeat).await;
                }
            };
            let answer = async {
                monoio::time::sleep(Duration::from_millis(150)).await;
                Ok::<u64, ProposeError>(7)
            };
            let (outcome, ()) =
                futures_util::future::join(unless_silent(answer, &liveness, 3, timing), beating)
                    .await;
            assert_eq!(outcome, Ok(7));

            // Never heard: waited for.
            let answer = async {
                monoio::time::sleep(Duration::from_millis(150)).await;
                Ok::<u64, ProposeError>(8)
            };
            assert_eq!(unless_silent(answer, &liveness, 4, timing).await, Ok(8));
        });
    }
}
