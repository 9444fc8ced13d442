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

/// When each peer node last answered one of this node's beats, and how
/// often it was seen to restart (shared by the node's shards; written by
/// shard 0's beats).
#[derive(Debug)]
pub struct Liveness {
    since: Instant,
    heard: Mutex<BTreeMap<u64, Heard>>,
}

/// What is known of one peer node.
#[derive(Debug, Clone, Copy, Default)]
struct Heard {
    /// Milliseconds since [`Liveness::since`] of its last answer.
    at_ms: u64,
    /// The process that answered last (see [`beat_answer`]); `None` from a
    /// node whose answers carry none (an older version).
    incarnation: Option<u64>,
    /// How many times its answers came from a new process.
    restarts: u64,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            since: Instant::now(),
            heard: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Liveness {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Node `node` answered just now (an answer that names no process).
    pub fn heard(&self, node: u64) {
        self.heard_from(node, None);
    }

    /// Node `node` answered just now, from process `incarnation`: a process
    /// other than the last one known is a restart, however short (a node
    /// back within a lease was never silent long enough to be missed).
    pub fn heard_from(&self, node: u64, incarnation: Option<u64>) {
        let now = self.now_ms();
        if let Ok(mut heard) = self.heard.lock() {
            let known = heard.entry(node).or_default();
            if let (Some(before), Some(now)) = (known.incarnation, incarnation)
                && before != now
            {
                known.restarts = known.restarts.saturating_add(1);
            }
            known.at_ms = now;
            known.incarnation = incarnation.or(known.incarnation);
        }
    }

    /// How many times `node`'s answers came from a new process.
    pub fn restarts(&self, node: u64) -> u64 {
        self.heard
            .lock()
            .ok()
            .and_then(|heard| heard.get(&node).map(|known| known.restarts))
            .unwrap_or(0)
    }

    /// How long `node` has been silent; `None` when it never answered.
    pub fn silence(&self, node: u64) -> Option<Duration> {
        let at = self.heard.lock().ok()?.get(&node)?.at_ms;
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
        if let Ok(Ok(answer)) = answered {
            liveness.heard_from(peer, incarnation_of(&answer));
        }
        monoio::time::sleep(every.saturating_sub(started.elapsed())).await;
    }
}

/// The answer to a beat: a zero byte (all an older version sends, and
/// all it reads of an answer is that it came), then this process's
/// incarnation, little-endian, so that a peer sees a restart however
/// quickly this node came back.
pub fn beat_answer() -> Vec<u8> {
    let mut answer = vec![0];
    answer.extend_from_slice(&incarnation().to_le_bytes());
    answer
}

/// The incarnation a beat's answer carries, if it carries one.
fn incarnation_of(answer: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = answer.get(1..9)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// This process's incarnation: the wall clock's nanoseconds when it was
/// first asked, mixed with the process id (two processes of one node
/// differ unless both started in the same nanosecond with the same pid).
fn incarnation() -> u64 {
    static INCARNATION: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *INCARNATION.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let nanos = u64::try_from(nanos & u128::from(u64::MAX)).unwrap_or(0);
        nanos ^ (u64::from(std::process::id()) << 32)
    })
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

    // Proves a restart is seen from the beats' answers however short it
    // was: a new incarnation counts one, the same one or an answer that
    // names none (an older node) counts nothing, and an answer too short
    // or the old one-byte answer carries no incarnation.
    #[test]
    fn a_new_incarnation_in_a_beats_answer_is_a_restart() {
        let liveness = Liveness::default();
        liveness.heard_from(2, Some(7));
        liveness.heard_from(2, Some(7));
        liveness.heard(2);
        assert_eq!(liveness.restarts(2), 0);
        liveness.heard_from(2, Some(8));
        assert_eq!(liveness.restarts(2), 1);
        liveness.heard(2);
        liveness.heard_from(2, Some(8));
        assert_eq!(liveness.restarts(2), 1);
        assert_eq!(liveness.restarts(3), 0);

        let answer = beat_answer();
        assert_eq!(answer[0], 0, "an older node reads only that it came");
        assert_eq!(incarnation_of(&answer), Some(incarnation()));
        assert_eq!(incarnation_of(&beat_answer()), incarnation_of(&answer));
        assert_eq!(incarnation_of(&[0]), None);
        assert_eq!(incarnation_of(&answer[..5]), None);
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
