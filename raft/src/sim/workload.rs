//! The clients of the simulation and the ledger of what each was told.
//!
//! A client writes batches one at a time, each to whichever node it thinks
//! leads (the last leader it heard of, else a node at random), stamped the
//! way the leader's pump stamps them (`daemon/src/shard/pump/raft.rs`):
//! the offset where that node's log continues when it is proposed and that
//! node's clock (each node's clock is skewed, so a new leader's may be
//! behind the old one's). Every message is tagged with its attempt, so the
//! final check knows each message's story. An attempt ends one of three
//! ways, and the ledger keeps them apart:
//!
//! - acknowledged: committed, with the offsets it was answered;
//! - rejected: the node was not leader and never appended it
//!   (`ForwardToLeader`), so it must never appear;
//! - unknown: discarded after being appended, timed out, or the node
//!   stopped; it may or may not appear (at most once).
//!
//! A client retries the same batch (a new attempt) until it is
//! acknowledged; only an unknown attempt may so leave a duplicate.
//!
//! Must not: stamp with anything but what a leader's pump could know, or
//! retry an acknowledged batch.

use super::SimGroup;
use super::runtime::{now, sleep, timeout};
use crate::{Appended, LogId, Proposal};
use futures_util::lock::Mutex;
use iggyd_storage::raft::RaftLog;
use iggyd_storage::sim::{SimIo, SimRng};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch, stamp};
use openraft::errors::{ClientWriteError, RaftError};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

/// How long a client waits for a write before it calls the outcome
/// unknown (a leader cut off from its quorum never answers).
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1_500);
/// The most messages in one batch.
const MESSAGES_MAX: u64 = 5;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Acknowledged { appended: Appended, log_id: LogId },
    Rejected,
    Unknown,
}

/// One attempt to write one client's batch.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub client: u64,
    pub sequence: u64,
    pub messages: u32,
    pub outcome: Outcome,
}

/// Every attempt of the run, by attempt number (the message ids carry it).
#[derive(Debug, Default)]
pub struct Ledger {
    pub attempts: Vec<Attempt>,
}

/// A message's id: its attempt and its place in the batch.
pub fn message_id(attempt: u64, index: u32) -> u128 {
    (u128::from(attempt) << 8) | u128::from(index)
}

/// The attempt and index a message id names.
pub fn attempt_of(id: u128) -> (u64, u32) {
    ((id >> 8) as u64, (id & 0xff) as u32)
}

impl Ledger {
    fn begin(&mut self, client: u64, sequence: u64, messages: u32) -> u64 {
        self.attempts.push(Attempt {
            client,
            sequence,
            messages,
            outcome: Outcome::Pending,
        });
        self.attempts.len() as u64 - 1
    }

    fn end(&mut self, attempt: u64, outcome: Outcome) {
        let slot = &mut self.attempts[attempt as usize].outcome;
        assert_eq!(*slot, Outcome::Pending, "attempt {attempt} ended twice");
        *slot = outcome;
    }

    pub fn acknowledged(&self) -> usize {
        self.attempts
            .iter()
            .filter(|attempt| matches!(attempt.outcome, Outcome::Acknowledged { .. }))
            .count()
    }

    pub fn count(&self, outcome: fn(&Outcome) -> bool) -> usize {
        self.attempts
            .iter()
            .filter(|attempt| outcome(&attempt.outcome))
            .count()
    }
}

/// A node as clients reach it.
#[derive(Clone)]
pub struct Endpoint {
    pub group: SimGroup,
    pub log: Rc<Mutex<RaftLog<SimIo>>>,
    /// The node's clock runs this far from the true (virtual) time.
    pub clock_skew_micros: i64,
}

/// The nodes that are up, as clients find them.
pub type Endpoints = Rc<RefCell<BTreeMap<u64, Endpoint>>>;

/// The time a node's clock shows, in µs since the epoch.
fn node_time_micros(skew: i64) -> u64 {
    let elapsed = now().as_micros() as i64;
    (1_700_000_000_000_000i64 + elapsed + skew) as u64
}

/// The batch of one attempt, stamped for `base_offset` at `timestamp`.
fn proposal(attempt: u64, messages: u32, base_offset: u64, timestamp: u64) -> Proposal {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: message_id(attempt, index),
            timestamp_delta: index,
            payload: format!("attempt {attempt} message {index}").into_bytes(),
            user_headers: Vec::new(),
        })
        .collect();
    let mut bytes = encode_producer_batch(timestamp, &specs);
    stamp(&mut bytes, 0, base_offset, timestamp).expect("a fresh batch stamps");
    Proposal::Batch(bytes.into())
}

/// One client: writes its batches until `stop`, retrying each until it is
/// acknowledged.
pub async fn client(
    client: u64,
    mut rng: SimRng,
    endpoints: Endpoints,
    ledger: Rc<RefCell<Ledger>>,
    stop: Rc<Cell<bool>>,
) {
    let mut sequence = 0u64;
    let mut messages = rng.range(1, MESSAGES_MAX) as u32;
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
        let endpoint = endpoints.borrow()[&target].clone();
        // Stamped as the pump stamps a proposal: where the node's log
        // continues now (stale once an earlier proposal joins the log
        // first), at the node's time. A node whose log is stuck in I/O (a
        // stalled disk) is given up on.
        let Ok(log) = timeout(CLIENT_TIMEOUT, endpoint.log.lock()).await else {
            leader = None;
            continue;
        };
        let base_offset = log.partition().next_offset();
        drop(log);
        let attempt = ledger.borrow_mut().begin(client, sequence, messages);
        let timestamp = node_time_micros(endpoint.clock_skew_micros);
        let batch = proposal(attempt, messages, base_offset, timestamp);
        let written = timeout(CLIENT_TIMEOUT, endpoint.group.client_write(batch)).await;
        let outcome = match written {
            Ok(Ok(response)) => Outcome::Acknowledged {
                appended: *response.response(),
                log_id: *response.log_id(),
            },
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                leader = forward.leader_id;
                Outcome::Rejected
            }
            Ok(Err(_)) | Err(_) => {
                leader = None;
                Outcome::Unknown
            }
        };
        ledger.borrow_mut().end(attempt, outcome);
        match outcome {
            Outcome::Acknowledged { .. } => {
                leader = Some(target);
                sequence += 1;
                messages = rng.range(1, MESSAGES_MAX) as u32;
                sleep(Duration::from_millis(rng.range(5, 40))).await;
            }
            _ => sleep(Duration::from_millis(rng.range(5, 50))).await,
        }
    }
}
